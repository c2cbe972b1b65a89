// Model roles of tracr-agent: SERVER running tails, PARTICIPANT running the
// sweep (over the network or in-process), per-layer profiling.
#include <torch/torch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/delay_relay.hpp"
#include "agent/roles.hpp"
#include "agent/link_probe.hpp"
#include "agent/pipeline.hpp"
#include "experiments/profile.hpp"
#include "wire/identity.hpp"

#include <torch/version.h>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace tracr::agent {

using namespace tracr::wire;

namespace ex = tracr::experiments;
using namespace tracr::protocol;

namespace {
// Profiles the controller's database holds under one profile key.
struct KnownProfiles {
  int64_t layers = 0;
  std::set<int> head, tail;
};
}  // namespace

ModelSpec model_spec(const settings::ExperimentConfig& c, const std::string& device) {
  ModelSpec ms;
  ms.name = c.model;
  ex::ModelConfig& m = ms.config;
  if (!device.empty()) m.device = device;
  m.weights = c.weights;
  m.input_shape = c.input_size;
  m.num_classes = c.num_classes;
  m.seed = c.seed;
  m.granularity = c.granularity;
  m.optimize = c.optimize;
  return ms;
}

ex::DatasetConfig dataset_config(const settings::ExperimentConfig& c, const std::vector<int64_t>& input_shape) {
  ex::DatasetConfig dc;
  const auto& d = c.dataset;
  dc.kind = d.kind == settings::DatasetKind::fashion_mnist ? "fashion-mnist"
            : d.kind == settings::DatasetKind::imagefolder ? "imagefolder"
                                                           : "synthetic";
  dc.path = d.path;
  if (dc.path.empty() && d.kind == settings::DatasetKind::fashion_mnist) dc.path = "/usr/share/datasets/fashion-mnist";
  dc.split = d.split;
  dc.class_names_file = d.class_names_file;
  dc.class_names = d.class_names;
  dc.input_shape = input_shape;
  dc.seed = c.seed;
  dc.resize_size = d.resize_size;
  dc.interpolation = d.interpolation;
  // A fashion_mnist input that is not [C, H, W] is refused when the dataset opens.
  if (d.kind == settings::DatasetKind::fashion_mnist && input_shape.size() == 3)
    dc.resize_mode = (input_shape[1] == 28 && input_shape[2] == 28) ? "none" : "stretch";
  // The controller checked the normalization before deploy; a config that
  // skipped it gets no values, which opening the dataset reports.
  dc.mean.clear();
  dc.std.clear();
  if (auto n = settings::dataset_normalization(c, input_shape.empty() ? 3 : input_shape[0])) {
    dc.mean.assign(n->mean.begin(), n->mean.end());
    dc.std.assign(n->std.begin(), n->std.end());
  }
  return dc;
}

namespace {

class ModelTail : public TailHandler {
 public:
  ModelTail(std::shared_ptr<ex::SplitModel> m, std::map<std::string, std::string> hw)
      : exec_(m), model_(std::move(m)), hw_(std::move(hw)) {}
  std::map<std::string, std::string> ready_fields() const override { return hw_; }
  Result<std::pair<Bundle, Meta>> handle(const Frame& f) override { return exec_.handle(f); }
  std::vector<Result<std::pair<Bundle, Meta>>> handle_batch(const std::vector<Request>& reqs) override {
    std::vector<SegmentExecutor::BatchItem> items;
    items.reserve(reqs.size());
    for (const auto& r : reqs) items.push_back({r.frame, r.ready});
    return exec_.handle_batch(items);
  }
  std::vector<std::string> take_notes() override { return exec_.take_notes(); }
  void set_energy(EnergyMeter* e) { exec_.set_energy(e); }
  std::string describe() const override {
    return fmt::format("{} layers={} device={} threads={}", model_->name(), model_->num_layers(), model_->device().str(),
                       torch::get_num_threads());
  }

 private:
  SegmentExecutor exec_;
  std::shared_ptr<ex::SplitModel> model_;
  std::map<std::string, std::string> hw_;
};

// This machine, plus what only LibTorch knows (its version, the GPU in use).
HwIdentity hw_identity(const AgentOptions& o, const ex::SplitModel& m) {
  HwIdentity h = agent_hw_identity(o);
  h.libtorch = TORCH_VERSION;
  // The device index; its marketing name needs the CUDA runtime, which this
  // build does not link.
  if (m.device().is_cuda()) h.gpu = "cuda:" + std::to_string(m.device().index());
  finish_hw_id(h);
  return h;
}

std::string side_of(const AgentOptions& o) { return o.role == AgentRole::server ? "server" : "participant"; }

// Which BLAS this process loaded (LibTorch's matrix products: linear layers,
// attention), from /proc/self/maps; "" when none is a separate library (a
// LibTorch with MKL built in) or maps cannot be read. Debian's libtorch
// depends on libblas3, the netlib reference BLAS, unless an optimised one is
// installed: it runs vit_b_16 at one thread in 11.8 s eager where OpenBLAS
// takes 0.53 s (this project's 2-core machine, 2026-11-26).
std::string blas_warning() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const auto base = path.substr(path.rfind('/') + 1);
    if (base.rfind("libblas.so", 0) != 0 && base.find("openblas") == std::string::npos) continue;
    if (path.find("/blas/libblas.so") == std::string::npos) return "";  // OpenBLAS, BLIS, ATLAS, MKL: optimised
    return fmt::format("blas: {} is the netlib reference BLAS: linear layers run 10-20x slower than with OpenBLAS, "
                       "not as deployed (apt install libopenblas0-openmp)",
                       path);
  }
  return "";
}

// A random input of `batch` samples of the model's shape (any rank: [C, H,
// W], [features], [T, D]) on its device, as the profiles time it.
at::Tensor profile_input(const ex::SplitModel& m, int64_t batch) {
  std::vector<int64_t> batched = {batch};
  batched.insert(batched.end(), m.input_shape().begin(), m.input_shape().end());
  return torch::rand(batched, torch::TensorOptions().dtype(torch::kFloat)).to(m.device());
}

// What times a profile (#45 friction 2): the model (its fingerprint and
// layers), input shape, batch, compute device, execution, LibTorch threads,
// repetitions and the hardware identity (CPU, cores, quota, pinning,
// LibTorch and agent versions). Two runs with one key time the same thing
// on the same kind of machine: the second reuses the first's rows.
std::string profile_key(const AgentOptions& o, const ex::SplitModel& m, int reps, int64_t batch) {
  std::string text = fmt::format("fp={}\nshape={}\nbatch={}\ndevice={}\nexecution={}\nthreads={}\nreps={}\nhw={}\n",
                                 model_fingerprint(m), fmt::join(m.input_shape(), ","), batch, m.device().str(),
                                 m.execution(), torch::get_num_threads(), reps, hw_identity(o, m).hw_id);
  for (const auto& l : m.layers()) text += l.name + "\n";
  return fmt::format("{:016x}", fnv1a(text.data(), text.size()));
}

// The entry of `text` (AgentOptions::profiles_known) for `key`; empty when
// none (or the text is not understood: profiles are then timed, as before).
KnownProfiles known_profiles(const std::string& text, const std::string& key) {
  KnownProfiles k;
  std::istringstream entries(text);
  for (std::string entry; std::getline(entries, entry, ';');) {
    std::istringstream words(entry);
    std::string word;
    if (!(words >> word) || word != key) continue;
    while (words >> word) {
      const auto eq = word.find('=');
      if (eq == std::string::npos) continue;
      const std::string name = word.substr(0, eq);
      std::istringstream values(word.substr(eq + 1));
      for (std::string v; std::getline(values, v, ',');) {
        char* end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || n < 0) continue;
        if (name == "layers") k.layers = n;
        else if (name == "head") k.head.insert(static_cast<int>(n));
        else if (name == "tail") k.tail.insert(static_cast<int>(n));
      }
    }
  }
  return k;
}

Status profile(const AgentOptions& o, int reps, int64_t batch, ex::SplitModel& m, ControlOut& ctl,
               EnergyMeter* energy, int layer_window_ms, const std::string& key) {
  const auto& s = m.input_shape();
  ex::ProfileOptions po;
  po.repetitions = reps;
  if (energy) {
    // Per-layer energy: the layer repeated until the window spans the
    // requested time and at least 10 updates of the slowest meter.
    po.after_layer = [&](int index, const std::function<void()>& run_once) {
      const double min_s = std::max(layer_window_ms / 1e3, energy->max_period_s() * 10);
      const auto a = energy->mark();
      int64_t n = 0;
      do {
        run_once();
        ++n;
      } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - a.t).count() < min_s && n < 1000000);
      for (auto& r : energy->between(a, energy->mark(), n)) {
        r.side = side_of(o);
        r.stage = "layer";
        r.layer_index = index;
        ctl.send("ENERGY", to_control(r));
      }
    };
  }
  auto prof = ex::profile_layers(m, profile_input(m, batch), po);
  if (!prof) return std::move(prof.error());
  const std::string fp = model_fingerprint(m);
  const std::string shape = fmt::format("{}", fmt::join(s, ","));
  const std::string hw_id = hw_identity(o, m).hw_id;
  for (const auto& p : *prof) {
    ProfileRecord r;
    r.layer_index = p.index;
    r.name = p.name;
    r.type = p.type;
    r.model_fp = fp;
    r.input_shape = shape;
    r.batch = batch;
    r.device_kind = p.device;
    r.reps = p.repetitions;
    r.median_ns = static_cast<int64_t>(std::llround(p.median_ms * 1e6));
    r.p95_ns = static_cast<int64_t>(std::llround(p.p95_ms * 1e6));
    r.mean_ns = static_cast<int64_t>(std::llround(p.mean_ms * 1e6));
    r.params = p.params;
    r.macs = p.macs;
    r.out_bytes = p.output_bytes;
    if (p.peak_rss_delta_bytes >= 0) r.peak_mem_bytes = p.peak_rss_delta_bytes;  // -1: not measurable here
    r.hw_id = hw_id;
    auto fields = to_control(r);
    fields["role"] = std::string(role_name(o.role));
    fields["profile_key"] = key;
    ctl.send("PROFILE", fields);
  }
  return {};
}

// The splits a run of `c` sweeps: those listed, or every split the model
// does not refuse.
std::vector<int> sweep_splits(const settings::ExperimentConfig& c, const ex::SplitModel& model) {
  if (!c.split.all) return c.split.points();
  std::vector<int> out;
  for (int k = 0; k <= model.num_layers(); ++k)
    if (model.split_refusal(k).empty()) out.push_back(k);
  return out;
}

// A graph model's segments timed whole at the sweep's splits, or at every
// split with record.segments: all: the PARTICIPANT its heads, the SERVER its
// tails (SEGMENT lines).
Status profile_segments(const AgentOptions& o, const settings::ExperimentConfig& c, int reps, ex::SplitModel& m,
                        ControlOut& ctl, const std::string& key, const KnownProfiles& known) {
  const auto& s = m.input_shape();
  ex::ProfileOptions po;
  po.repetitions = reps;
  std::vector<int> splits;
  if (c.record.segments == "all")
    for (int k = 0; k <= m.num_layers(); ++k) splits.push_back(k);  // refused cuts are skipped
  else
    splits = sweep_splits(c, m);
  // The SERVER serves every participant's splits (participant_splits: each its own).
  if (o.role == AgentRole::server && c.record.segments != "all")
    for (const auto& [name, sp] : c.participant_splits) {
      settings::ExperimentConfig own = c;
      own.split = sp;
      for (int k : sweep_splits(own, m))
        if (std::find(splits.begin(), splits.end(), k) == splits.end()) splits.push_back(k);
    }
  // Those stored under this key already are reused, the rest timed.
  const bool head = o.role != AgentRole::server;
  const auto& have = head ? known.head : known.tail;
  std::vector<int> reused;
  splits.erase(std::remove_if(splits.begin(), splits.end(),
                              [&](int k) { return have.count(k) && (reused.push_back(k), true); }),
               splits.end());
  if (!reused.empty())
    ctl.send("REUSED", {{"what", "segments"}, {"profile_key", key}, {"side", head ? "head" : "tail"},
                        {"splits", fmt::format("{}", fmt::join(reused, ","))}});
  if (splits.empty()) return {};
  auto segs = ex::profile_segments(m, profile_input(m, c.batch_size), splits, head, po);
  if (!segs) return std::move(segs.error());
  const std::string fp = model_fingerprint(m);
  const std::string shape = fmt::format("{}", fmt::join(s, ","));
  const std::string hw_id = hw_identity(o, m).hw_id;
  for (const auto& p : *segs) {
    SegmentRecord r;
    r.split = p.split;
    r.side = p.head ? "head" : "tail";
    r.execution = m.execution();
    r.model_fp = fp;
    r.input_shape = shape;
    r.batch = c.batch_size;
    r.device_kind = p.device;
    r.reps = p.repetitions;
    r.median_ns = static_cast<int64_t>(std::llround(p.median_ms * 1e6));
    r.p95_ns = static_cast<int64_t>(std::llround(p.p95_ms * 1e6));
    r.mean_ns = static_cast<int64_t>(std::llround(p.mean_ms * 1e6));
    r.hw_id = hw_id;
    auto fields = to_control(r);
    fields["profile_key"] = key;
    ctl.send("SEGMENT", fields);
  }
  return {};
}

// split: plan (#43): the controller plans the placements once every device
// has profiled and probed; the participant asks (EVENT placements_wanted)
// (with the cuts the model refuses) and waits for CMD op=placements
// ("3|13,5|13": each cut point along the chain, placements ','-separated).
// Other commands before it are refused.
Result<std::vector<wire::Placement>> planned_placements(ControlOut& ctl, const ex::SplitModel& model) {
  const int num_layers = model.num_layers();
  std::string refused;  // cuts this model cannot make (a graph model's): the planner leaves them out
  for (int k = 0; k <= num_layers; ++k)
    if (!model.split_refusal(k).empty()) refused += (refused.empty() ? "" : ",") + std::to_string(k);
  ctl.send("EVENT", {{"kind", "placements_wanted"}, {"frame", "-1"}, {"cmd", ""}, {"op", ""}, {"refused", refused},
                     {"message", "profiled and probed: waiting for the planner's placements (split: plan)"}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (!ctl.stop_requested()) {
    for (const auto& m : ctl.take_commands()) {
      if (m.get_or("op", "") != "placements") {
        ctl.send("EVENT", {{"kind", "command_rejected"}, {"cmd", m.get_or("id", "")}, {"op", m.get_or("op", "")},
                           {"frame", "-1"}, {"message", "before the planner's placements (split: plan) only op=placements"}});
        continue;
      }
      std::vector<wire::Placement> out;
      for (const auto& text : wire::split_on(m.get_or("placements", ""), ',')) {
        auto p = wire::parse_placement(text);
        if (!p) return make_error(Errc::invalid_argument, "CMD placements: " + p.error().message);
        if (auto st = wire::check_placement(*p, num_layers); !st)
          return make_error(Errc::invalid_argument, "CMD placements: " + st.error().message);
        out.push_back(std::move(*p));
      }
      if (out.empty()) return make_error(Errc::invalid_argument, "CMD placements: no placement given");
      return out;
    }
    if (std::chrono::steady_clock::now() > deadline)
      return make_error(Errc::timeout, "split: plan: no placements from the controller within 10 minutes");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return make_error(Errc::remote, "stopped while waiting for the planner's placements (split: plan)");
}

std::map<std::string, std::string> ready_fields(std::map<std::string, std::string> base, const HwIdentity& h) {
  for (auto& [k, v] : to_control(h)) base[k] = v;
  return base;
}

ParticipantSpec participant_spec(const settings::ExperimentConfig& c, const ex::SplitModel& model) {
  ParticipantSpec ps;
  ps.model = model_spec(c);
  const auto& d = c.dataset;
  ps.dataset = dataset_config(c, model.input_shape());
  // Synthetic data: max_samples 0 means its documented default of 16.
  ps.max_samples = d.kind == settings::DatasetKind::synthetic && d.max_samples == 0 ? 16 : d.max_samples;
  if (d.kind == settings::DatasetKind::synthetic) ps.dataset.num_samples = ps.max_samples;
  ps.batch = c.batch_size;
  // A graph model's sweep leaves out the cuts it refuses (the controller
  // refuses them when named; model_check.cpp lists the reasons); a zoo
  // model's whole sweep is an empty list.
  if (!c.split.all || model.execution() != "layers") ps.splits = sweep_splits(c, model);
  ps.warmup = c.warmup;
  ps.reps = c.repetitions;
  ps.record_outputs = c.record.outputs;
  ps.codec = c.compression;
  ps.auto_codec = c.compression == "auto";
  ps.chunk_bytes = static_cast<size_t>(c.chunk_bytes);
  ps.inflight = c.inflight;
  ps.codec_threads = static_cast<unsigned>(c.codec_threads);
  ps.max_consecutive_failures = c.max_consecutive_failures;
  ps.lockstep = c.lockstep;
  return ps;
}

// The experiment's exits (#44) onto the model's device, in backbone order
// (the controller checked them against the model before launch).
Status load_exits(const settings::ExperimentConfig& c, const ex::SplitModel& model, ParticipantSpec& ps) {
  for (size_t i = 0; i < c.exits.size(); ++i) {
    auto layer = ex::exit_layer(model, c.exits[i].after);
    if (!layer) return make_error(Errc::config, fmt::format("exits[{}].after: {}", i, layer.error().message));
    auto h = ex::ExitHead::load(settings::exit_head_file(c, i), model.device());
    if (!h) return make_error(h.error().code, fmt::format("exits[{}]: {}", i, h.error().message));
    ps.exits.push_back({i, *layer, std::shared_ptr<ex::ExitHead>(std::move(*h))});
  }
  std::stable_sort(ps.exits.begin(), ps.exits.end(),
                   [](const ParticipantSpec::Exit& a, const ParticipantSpec::Exit& b) { return a.layer < b.layer; });
  ps.exit_measure = c.exit_policy.measure;
  ps.exit_threshold = c.exit_policy.threshold;
  ps.exit_confidences = c.record.exit_confidences;
  return {};
}

// Layers profiled with at least 10 repetitions, at the experiment's batch,
// and a graph model's segments; or, where the controller's database holds
// them under this agent's profile key, reused (REUSED lines) instead.
// Per-layer energy is measured while profiling: with a meter or power
// model the layers are always timed anew.
Status profile_model(const AgentOptions& o, const settings::ExperimentConfig& cfg, ex::SplitModel& m,
                     ControlOut& ctl, EnergyMeter* energy) {
  const int reps = std::max(10, cfg.repetitions);
  const std::string key = profile_key(o, m, reps, cfg.batch_size);
  const KnownProfiles known = known_profiles(o.profiles_known, key);
  if (known.layers == m.num_layers() && !energy) {
    ctl.send("REUSED", {{"what", "layers"}, {"profile_key", key}, {"layers", std::to_string(m.num_layers())}});
  } else if (auto st = profile(o, reps, cfg.batch_size, m, ctl, energy, cfg.energy.layer_window_ms, key); !st) {
    return make_error(st.error().code, "profiling: " + st.error().message);
  }
  if (m.execution() == "layers") return {};
  if (auto st = profile_segments(o, cfg, reps, m, ctl, key, known); !st)
    return make_error(st.error().code, "profiling segments: " + st.error().message);
  return {};
}

}  // namespace

int run_model_role(const AgentOptions& opt, ControlOut& ctl) {
  const settings::ExperimentConfig& cfg = *opt.experiment;
  AgentOptions o = opt;
  o.encrypt = cfg.encryption;
  o.x25519 = cfg.key_exchange != "none";
  if (o.torch_threads > 0) torch::set_num_threads(o.torch_threads);
  if (o.role == AgentRole::server)
    if (auto st = bind_available(o.bind); !st) {  // before the model loads and profiles (tens of seconds)
      ctl.send("FAIL", {{"error", st.error().str()}});
      return 1;
    }
  ModelSpec ms = model_spec(cfg, o.torch_device);
  auto loaded = load_model(ms);
  if (!loaded) {
    ctl.send("FAIL", {{"error", loaded.error().str()}});
    return 1;
  }
  std::shared_ptr<ex::SplitModel> model(std::move(*loaded));
  if (const auto w = blas_warning(); !w.empty()) ctl.send("LOG", {{"level", "warn"}, {"msg", w}});
  // Energy: every meter on this machine, else the devices file's power
  // model, else none (and no energy rows at all).
  std::unique_ptr<EnergyMeter> energy = EnergyMeter::open(agent_power_model(o));
  for (const auto& line : energy->describe()) ctl.send("LOG", {{"level", "info"}, {"msg", "energy: " + line}});
  if (!energy->any()) energy.reset();
  if (energy)
    for (auto& r : energy->measure_idle(cfg.energy.idle_ms)) {
      r.side = side_of(o);
      ctl.send("ENERGY", to_control(r));
    }
  if (cfg.record.layers)
    if (auto st = profile_model(o, cfg, *model, ctl, energy.get()); !st) {
      ctl.send("FAIL", {{"error", st.error().str()}});
      return 1;
    }
  if (o.role == AgentRole::server) {
    auto mt = std::make_unique<ModelTail>(model, to_control(hw_identity(o, *model)));
    mt->set_energy(energy.get());
    std::unique_ptr<TailHandler> tail = std::move(mt);
    return serve(o, ctl, tail);
  }

  // PARTICIPANT
  std::unique_ptr<DelayRelay> relay;  // outlives the link that uses it
  zmq::context_t ctx(1);
  std::unique_ptr<Link> link;
  if (o.in_process) {
    link = std::make_unique<InProcessLink>(std::make_unique<SegmentExecutor>(model), o.encrypt);
  } else {
    ChannelOptions co = agent_channel_options(o, AgentRole::participant);
    co.handshake_timeout_ms = 15000;
    co.read.threads = static_cast<unsigned>(cfg.codec_threads);
    // link_delay: agent: the session runs through a relay that holds each byte for the delay.
    std::string endpoint = o.connect;
    if (o.link_delay_ms > 0 || o.link_jitter_ms > 0) {
      auto r = DelayRelay::start(o.connect, o.link_delay_ms, o.link_jitter_ms, cfg.seed);
      if (!r) {
        ctl.send("FAIL", {{"error", "link delay relay: " + r.error().str()}});
        return 1;
      }
      relay = std::move(*r);
      endpoint = relay->endpoint();
    }
    auto c = Client::connect(ctx, endpoint, co);
    if (!c) {
      ctl.send("FAIL", {{"error", "connect to SERVER " + o.connect + ": " + c.error().str()}});
      return 1;
    }
    link = std::make_unique<NetworkLink>(std::move(*c));
  }
  ParticipantSpec ps = participant_spec(cfg, *model);
  if (auto st = load_exits(cfg, *model, ps); !st) {
    ctl.send("FAIL", {{"error", st.error().str()}});
    return 2;
  }
  ps.run_start = std::chrono::steady_clock::now();
  const HwIdentity hw = hw_identity(o, *model);
  ctl.send("READY", ready_fields({{"role", std::string(role_name(AgentRole::participant))},
                                  {"model", model->name()},
                                  {"layers", std::to_string(model->num_layers())},
                                  {"link", o.in_process ? "in-process"
                                           : relay ? fmt::format("{} via a delay relay ({} ms, jitter {} ms)", o.connect,
                                                                 o.link_delay_ms, o.link_jitter_ms)
                                                   : o.connect},
                                  {"cipher", link->cipher()}},
                                 hw));
  double probed_up_mbps = 0;  // for compression: auto
  // The link probe, over the session the frames will use.
  if (cfg.probe.enabled || o.probe_only) {
    if (Client* c = link->client()) {
      ProbeOptions po;
      po.rtt_count = cfg.probe.rtt_count;
      po.duration_ms = cfg.probe.duration_ms;
      po.chunk_bytes = cfg.probe.chunk_bytes;
      po.trigger = o.probe_only ? "standalone" : "startup";
      po.run_start = ps.run_start;
      auto pr = probe_link(*c, po);
      if (!pr) {
        ctl.send("FAIL", {{"error", pr.error().str()}});
        return 1;
      }
      ctl.send("PROBE", to_control(*pr));
      if (pr->up_mbps) probed_up_mbps = *pr->up_mbps;
    } else if (o.probe_only) {
      ctl.send("FAIL", {{"error", "link probe: an in-process participant has no link to probe"}});
      return 2;
    }
  }
  if (o.probe_only) {
    ctl.send("DONE", {{"frames", "0"}, {"stopped", "0"}});
    return 0;
  }
  ps.link_up_mbps = probed_up_mbps;
  std::vector<int> splits = ps.splits;
  if (splits.empty())
    for (int k = 0; k <= model->num_layers(); ++k) splits.push_back(k);
  // A chain of two or more devices sweeps placements (the controller checked them).
  if (settings::chain_hops(cfg) > 1) {
    auto placements = cfg.split.plan ? planned_placements(ctl, *model)
                                     : settings::resolve_placements(cfg, cfg.split, model->num_layers());
    if (!placements) {
      ctl.send("FAIL", {{"error", placements.error().str()}});
      return 2;
    }
    // A sweep leaves out the cuts the model refuses (a graph model's; named ones were refused before launch).
    for (auto& p : *placements)
      if (std::all_of(p.cuts.begin(), p.cuts.end(), [&](int k) { return model->split_refusal(k).empty(); }))
        ps.placements.push_back(std::move(p));
  }
  SweepPolicy policy = ps.placements.empty() ? SweepPolicy(splits, ps.warmup, ps.reps)
                                             : SweepPolicy::of_placements(ps.placements, ps.warmup, ps.reps);
  ps.energy = energy.get();
  // Transmission energy from the radio model the experiment names, or its link profile's.
  const std::string radio = cfg.energy.radio == "auto" ? (cfg.link.size() == 1 ? cfg.link[0] : "") : cfg.energy.radio;
  if (!o.in_process) ps.radio = find_radio(radio);
  int64_t done = 0, total = 0, frames = 0;
  PipelineHooks hooks;
  hooks.emit = [&](const FrameRecord& r) {
    auto f = to_control(r);
    f["done"] = std::to_string(done);  // progress, not a field
    f["total"] = std::to_string(total);
    ctl.send("FRAME", f);
    ++frames;
  };
  hooks.energy = [&](const EnergyRecord& e) { ctl.send("ENERGY", to_control(e)); };
  hooks.progress = [&](int64_t d, int64_t t) {
    done = d;
    total = t;
  };
  hooks.poll = [&] {
    std::vector<Command> out;
    for (const auto& m : ctl.take_commands()) {
      auto c = parse_command(m);
      if (!c) {
        ctl.send("EVENT", {{"kind", "command_rejected"}, {"cmd", m.get_or("id", "")}, {"op", m.get_or("op", "")},
                           {"frame", "-1"}, {"message", c.error().str()}});
        continue;
      }
      out.push_back(*c);
    }
    return out;
  };
  hooks.stop = [&] { return ctl.stop_requested(); };
  hooks.event = [&](const std::string& kind, int64_t frame, const Command* c, const std::string& msg) {
    static const char* ops[] = {"set_split", "set_codec", "pause", "resume", "stop"};
    ctl.send("EVENT", {{"kind", kind},
                       {"frame", std::to_string(frame)},
                       {"cmd", c ? std::to_string(c->id) : ""},
                       {"op", c ? ops[static_cast<int>(c->kind)] : ""},
                       {"message", msg}});
  };
  bool stopped = false;
  auto st = run_pipeline(ps, *model, *link, policy, hooks, &stopped);
  if (!st) {
    ctl.send("FAIL", {{"error", st.error().str()}});
    return 1;
  }
  ctl.send("DONE", {{"frames", std::to_string(frames)}, {"stopped", stopped ? "1" : "0"}});
  return 0;
}

}  // namespace tracr::agent
