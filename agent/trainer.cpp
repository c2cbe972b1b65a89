#include "agent/trainer.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "agent/agent.hpp"
#include "agent/segment.hpp"
#include "experiments/datasets.hpp"
#include "experiments/tensor_bridge.hpp"
#include "experiments/train.hpp"
#include "experiments/weights.hpp"
#include "protocol/channel.hpp"
#include "protocol/meta_keys.hpp"
#include "wire/identity.hpp"

namespace tracr::agent {

using namespace tracr::wire;

namespace ex = tracr::experiments;
using namespace tracr::protocol;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Result<std::vector<std::pair<int, int>>> segment_ranges(const std::vector<int64_t>& cuts, int num_layers) {
  std::vector<std::pair<int, int>> out;
  int a = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    if (cuts[i] <= a || cuts[i] >= num_layers)
      return make_error(Errc::config, fmt::format("train.cuts[{}] = {}: expected a layer index in {}..{} above the "
                                                  "previous cut (the model has {} layers)",
                                                  i, cuts[i], a + 1, num_layers - 1, num_layers));
    out.emplace_back(a, static_cast<int>(cuts[i]));
    a = static_cast<int>(cuts[i]);
  }
  out.emplace_back(a, num_layers);
  return out;
}

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

int64_t meta_int(const Meta& m, const std::string& k, int64_t def) {
  auto it = m.find(k);
  if (it == m.end()) return def;
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i;
  if (auto* d = std::get_if<double>(&it->second)) return static_cast<int64_t>(*d);
  return def;
}

std::string meta_str(const Meta& m, const std::string& k, const std::string& def) {
  auto it = m.find(k);
  if (it == m.end()) return def;
  if (auto* s = std::get_if<std::string>(&it->second)) return *s;
  return def;
}

ex::OptimizerSpec optimizer_spec(const settings::TrainSpec& t) {
  ex::OptimizerSpec o;
  o.kind = t.optimizer;
  o.lr = t.lr;
  o.momentum = t.momentum;
  o.weight_decay = t.weight_decay;
  return o;
}

// Where a device keeps its checkpoints for this run.
std::string checkpoint_dir(const settings::ExperimentConfig& c, const AgentOptions& o) {
  return (fs::path(c.train.checkpoint_dir) / o.run_tag).string();
}

std::string segment_file(const std::string& dir, const std::string& who, int seg, int64_t step) {
  return fmt::format("{}/{}seg{}-step{}.pt", dir, who, seg, step);
}

// Keeps the newest two checkpoints of a segment (the one just written and
// the one before, in case a device failed between them).
void prune_checkpoints(const std::string& dir, const std::string& who, int seg, int64_t keep_step) {
  std::error_code ec;
  const std::string prefix = fmt::format("{}seg{}-step", who, seg);
  std::vector<int64_t> steps;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) != 0 || n.size() < prefix.size() + 4 || n.substr(n.size() - 3) != ".pt") continue;
    char* end = nullptr;
    const std::string num = n.substr(prefix.size(), n.size() - prefix.size() - 3);
    const long long s = std::strtoll(num.c_str(), &end, 10);
    if (!num.empty() && *end == '\0') steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + 2 < steps.size(); ++i)
    if (steps[i] != keep_step) fs::remove(segment_file(dir, who, seg, steps[i]), ec);
}

std::string describe_bundle(const Bundle& b) {
  std::string out;
  for (const auto& t : b) {
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    out += fmt::format("{}{}:{}:[{}]:{:016x}", out.empty() ? "" : " ", t.name, dtype_name(t.dtype), shape,
                       fnv1a(t.data, t.nbytes));
  }
  return out;
}

Result<Bundle> to_wire(const ex::Bundle& b) { return ex::to_protocol(b); }

// ------------------------------------------------------------------ worker

class TrainWorker : public TailHandler {
 public:
  TrainWorker(std::shared_ptr<ex::SplitModel> m, std::map<int, std::unique_ptr<ex::Segment>> segs,
              const settings::ExperimentConfig& cfg, const AgentOptions& o, ControlOut& ctl)
      : model_(std::move(m)), segs_(std::move(segs)), cfg_(cfg), opt_(o), ctl_(ctl) {}

  bool serves(MsgType t) const override { return t == MsgType::train_forward || t == MsgType::train_backward; }
  // Activations and gradients go back coded as they came: the experiment's codec.
  std::optional<SendOptions> reply_send() const override {
    SendOptions so;
    so.codec = cfg_.codec;
    so.chunk_bytes = static_cast<size_t>(cfg_.chunk_bytes);
    so.segment_bytes = static_cast<size_t>(cfg_.chunk_bytes);
    so.threads = static_cast<unsigned>(cfg_.codec_threads);
    return so;
  }
  // Exported weights travel exactly: the experiment's codec without its lossy stage.
  std::optional<SendOptions> reply_send_for(const Frame& f) const override {
    if (meta_str(f.header.meta, "op", "") != "export") return std::nullopt;
    auto so = *reply_send();
    so.codec.lossy = protocol::Lossy::none;
    return so;
  }
  std::map<std::string, std::string> ready_fields() const override {
    auto f = to_control(agent_hw_identity(opt_));
    std::string sp;
    for (const auto& [i, seg] : segs_) sp += fmt::format("{}{}={}", sp.empty() ? "" : ",", i, seg->num_params());
    f["seg_params"] = sp;
    f["layers"] = std::to_string(model_->num_layers());
    f["role"] = std::string(role_name(AgentRole::train_worker));
    return f;
  }
  std::string describe() const override {
    std::string s;
    for (const auto& [i, seg] : segs_) s += fmt::format("{}{}=[{},{})", s.empty() ? "" : " ", i, seg->begin(), seg->end());
    return fmt::format("{} segments {}", model_->name(), s);
  }

  Result<std::pair<Bundle, Meta>> handle(const Frame& f) override {
    const int64_t t0 = now_ns();
    const std::string op = meta_str(f.header.meta, "op", "train");
    const int first = f.header.split;
    const int last = static_cast<int>(meta_int(f.header.meta, "last", first));
    if (cfg_.train.trace_frames)
      ctl_.send("TRACE", {{"type", std::string(msg_type_name(f.header.type))},
                          {"split", std::to_string(first)},
                          {"op", op},
                          {"meta", describe_meta(f.header.meta)},
                          {"tensors", describe_bundle(f.tensors)}});
    if (op != "checkpoint" && op != "export") {
      if (last < first) return make_error(Errc::invalid_argument, fmt::format("segments {}..{}: empty range", first, last));
      for (int i = first; i <= last; ++i)
        if (!segs_.count(i))
          return make_error(Errc::invalid_argument, fmt::format("segment {} is not held by this worker (it holds {})", i,
                                                                describe()));
    }
    Meta meta;
    meta["op"] = op;
    ex::Bundle out;
    if (f.header.type == MsgType::train_forward && (op == "train" || op == "eval")) {
      auto in = ex::from_protocol(f.tensors);
      if (!in) return in.error();
      ex::Bundle act = std::move(*in);
      for (int i = first; i <= last; ++i) {
        auto r = op == "train" ? segs_[i]->forward(std::move(act)) : segs_[i]->infer(std::move(act));
        if (!r) return make_error(r.error().code, fmt::format("segment {}: {}", i, r.error().message));
        act = std::move(*r);
      }
      out = std::move(act);
    } else if (f.header.type == MsgType::train_backward && op == "train") {
      auto in = ex::from_protocol(f.tensors);
      if (!in) return in.error();
      ex::Bundle g = std::move(*in);
      for (int i = last; i >= first; --i) {
        auto r = segs_[i]->backward(g);
        if (!r) return make_error(r.error().code, fmt::format("segment {}: {}", i, r.error().message));
        g = std::move(*r);
      }
      out = std::move(g);
    } else if (f.header.type == MsgType::train_forward && op == "checkpoint") {
      const int64_t step = meta_int(f.header.meta, "step", -1);
      if (step < 0) return make_error(Errc::invalid_argument, "checkpoint: meta.step missing");
      const std::string dir = checkpoint_dir(cfg_, opt_);
      for (const auto& [i, seg] : segs_) {
        TRACR_TRY(seg->save(segment_file(dir, "", i, step)));
        prune_checkpoints(dir, "", i, step);
      }
      meta["dir"] = dir;
    } else if (f.header.type == MsgType::train_forward && op == "export") {
      for (const auto& [i, seg] : segs_)
        for (auto& nt : seg->state()) out.push_back({nt.name, nt.tensor.detach().clone()});
    } else {
      return make_error(Errc::invalid_argument,
                        fmt::format("{} with op '{}': expected train, eval, checkpoint or export (TRAIN_BACKWARD: train)",
                                    msg_type_name(f.header.type), op));
    }
    auto wire = to_wire(out);
    if (!wire) return wire.error();
    meta[protocol::meta_key::kSrvNs] = now_ns() - t0;
    meta[protocol::meta_key::kSrvDecodeNs] = f.stats.total_ns;
    return std::make_pair(std::move(*wire), std::move(meta));
  }

 private:
  static std::string describe_meta(const Meta& m) {
    std::string s;
    for (const auto& [k, v] : m) {
      s += (s.empty() ? "" : " ") + k + "=";
      if (auto* i = std::get_if<int64_t>(&v)) s += std::to_string(*i);
      else if (auto* d = std::get_if<double>(&v)) s += fmt::format("{}", *d);
      else s += std::get<std::string>(v);
    }
    return s;
  }
  std::shared_ptr<ex::SplitModel> model_;
  std::map<int, std::unique_ptr<ex::Segment>> segs_;
  const settings::ExperimentConfig& cfg_;
  const AgentOptions& opt_;
  ControlOut& ctl_;
};

}  // namespace

int run_train_worker(const AgentOptions& opt, ControlOut& ctl) {
  const settings::ExperimentConfig& cfg = *opt.experiment;
  // The device's own thread count (devices file) before the experiment's.
  if (const int t = opt.torch_threads > 0 ? opt.torch_threads : cfg.train.threads; t > 0) torch::set_num_threads(t);
  AgentOptions o = opt;
  o.encrypt = cfg.encryption;
  o.x25519 = cfg.key_exchange != "none";
  auto loaded = load_model(model_spec(cfg, opt.torch_device));
  if (!loaded) {
    ctl.send("FAIL", {{"error", loaded.error().str()}});
    return 1;
  }
  std::shared_ptr<ex::SplitModel> model(std::move(*loaded));
  auto ranges = segment_ranges(cfg.train.cuts, model->num_layers());
  if (!ranges) {
    ctl.send("FAIL", {{"error", ranges.error().str()}});
    return 2;
  }
  std::map<int, std::unique_ptr<ex::Segment>> segs;
  for (int i : o.train_segments) {
    if (i <= 0 || i >= static_cast<int>(ranges->size())) {
      ctl.send("FAIL", {{"error", fmt::format("--segments: segment {} does not exist (segments 1..{} may be on a "
                                              "worker; 0 is the data owner's)",
                                              i, ranges->size() - 1)}});
      return 2;
    }
    auto s = ex::Segment::create(model, (*ranges)[i].first, (*ranges)[i].second, optimizer_spec(cfg.train));
    if (!s) {
      ctl.send("FAIL", {{"error", s.error().str()}});
      return 1;
    }
    if (o.resume_step >= 0) {
      auto st = (*s)->load(segment_file(checkpoint_dir(cfg, o), "", i, o.resume_step));
      if (!st) {
        ctl.send("FAIL", {{"error", "resume: " + st.error().str()}});
        return 1;
      }
    }
    segs[i] = std::move(*s);
  }
  auto worker = std::make_unique<TrainWorker>(model, std::move(segs), cfg, o, ctl);
  std::unique_ptr<TailHandler> tail = std::move(worker);
  return serve(o, ctl, tail);
}

// ------------------------------------------------------------------ owner

namespace {

// A stretch of consecutive segments on one device.
struct Hop {
  int first = 0, last = 0;
  Client* client = nullptr;  // null: on the owner
  std::string endpoint;
};

struct StepBytes {
  int64_t up_wire = 0, down_wire = 0, up_raw = 0, down_raw = 0;
  int64_t remote_ns = 0;  // time the owner waited on workers (send to reply decoded)
  int64_t srv_ns = 0;     // the workers' own compute time, as they report it
  void add(const StepBytes& o) {
    up_wire += o.up_wire;
    down_wire += o.down_wire;
    up_raw += o.up_raw;
    down_raw += o.down_raw;
    remote_ns += o.remote_ns;
    srv_ns += o.srv_ns;
  }
};

class Owner {
 public:
  Owner(const settings::ExperimentConfig& cfg, const AgentOptions& o, ControlOut& ctl)
      : cfg_(cfg), o_(o), ctl_(ctl) {}

  Status setup(zmq::context_t& ctx);
  Status run();
  int num_layers() const { return model_->num_layers(); }
  std::string segment_params() const {
    std::string sp;
    for (const auto& [i, seg] : local_) sp += fmt::format("{}{}={}", sp.empty() ? "" : ",", i, seg->num_params());
    return sp;
  }

 private:
  // Sends one frame to a hop and waits for its answer of the same type.
  Result<ex::Bundle> exchange(const Hop& h, MsgType type, const std::string& op, const ex::Bundle& in,
                              StepBytes& bytes, int64_t step);
  Result<ex::Bundle> forward(const at::Tensor& x, bool train, StepBytes& bytes, int64_t step);
  Status checkpoint(int64_t step, int64_t epoch);
  Status export_model();
  Status evaluate(int64_t epoch, int64_t step, double train_loss, double train_acc, int64_t epoch_ns,
                  const StepBytes& epoch_bytes);
  Status wait_turn();

  const settings::ExperimentConfig& cfg_;
  const AgentOptions& o_;
  ControlOut& ctl_;
  std::shared_ptr<ex::SplitModel> model_;
  std::vector<std::pair<int, int>> ranges_;
  std::map<int, std::unique_ptr<ex::Segment>> local_;
  std::map<std::string, std::unique_ptr<Client>> clients_;  // by endpoint
  std::vector<Hop> hops_;
  ex::TensorDataset train_, test_;
  std::string test_source_;
  SendOptions send_;
  int64_t reply_timeout_ms_ = 600000;
};

Status Owner::setup(zmq::context_t& ctx) {
  auto loaded = load_model(model_spec(cfg_, o_.torch_device));
  if (!loaded) return loaded.error();
  model_ = std::shared_ptr<ex::SplitModel>(std::move(*loaded));
  auto r = segment_ranges(cfg_.train.cuts, model_->num_layers());
  if (!r) return r.error();
  ranges_ = *r;
  const int S = static_cast<int>(ranges_.size());
  std::map<int, std::string> remote;
  for (const auto& [seg, ep] : o_.train_workers) {
    if (seg <= 0 || seg >= S)
      return make_error(Errc::invalid_argument, fmt::format("--worker {}: segment {} does not exist (1..{})", seg, seg, S - 1));
    remote[seg] = ep;
  }
  for (int i = 0; i < S; ++i) {
    if (remote.count(i)) continue;
    auto s = ex::Segment::create(model_, ranges_[i].first, ranges_[i].second, optimizer_spec(cfg_.train));
    if (!s) return s.error();
    if (o_.resume_step >= 0)
      TRACR_TRY((*s)->load(segment_file(checkpoint_dir(cfg_, o_), fmt::format("owner{}-", o_.owner_index), i,
                                        o_.resume_step)));
    local_[i] = std::move(*s);
  }
  send_.codec = cfg_.codec;
  send_.chunk_bytes = static_cast<size_t>(cfg_.chunk_bytes);
  send_.segment_bytes = static_cast<size_t>(cfg_.chunk_bytes);
  send_.threads = static_cast<unsigned>(cfg_.codec_threads);
  for (const auto& [seg, ep] : remote) {
    if (clients_.count(ep)) continue;
    ChannelOptions co;
    co.role = std::string(role_name(AgentRole::participant));
    co.security.encrypt = cfg_.encryption;
    co.security.x25519 = cfg_.key_exchange != "none";
    co.security.secret = o_.secret;
    co.security.clock = o_.clock;
    co.send = send_;
    co.read.threads = static_cast<unsigned>(cfg_.codec_threads);
    co.handshake_timeout_ms = 15000;
    auto c = Client::connect(ctx, ep, co);
    if (!c) return make_error(c.error().code, "connect to worker " + ep + " (segment " + std::to_string(seg) +
                                                  "): " + c.error().message);
    clients_[ep] = std::move(*c);
  }
  for (int i = 0; i < S; ++i) {
    Client* c = remote.count(i) ? clients_[remote[i]].get() : nullptr;
    const std::string ep = remote.count(i) ? remote[i] : "";
    if (!hops_.empty() && hops_.back().client == c && hops_.back().endpoint == ep) hops_.back().last = i;
    else hops_.push_back(Hop{i, i, c, ep});
  }
  // Data: the training split (this owner's share of it) and the test split.
  auto dc = dataset_config(cfg_, model_->input_shape());
  ex::DatasetConfig train_dc = dc, test_dc = dc;
  if (dc.kind == "fashion-mnist") {
    train_dc.split = "train";
    test_dc.split = "test";
    test_source_ = "test split";
  } else {
    test_source_ = "the training data (the dataset has no test split)";
  }
  auto tr = ex::open_dataset(train_dc);
  if (!tr) return tr.error();
  auto trd = ex::load_tensor_dataset(**tr, cfg_.train.train_samples);
  if (!trd) return trd.error();
  train_ = *trd;
  if (o_.owners > 1) {  // owner k keeps samples k, k + N, k + 2N, ...
    auto idx = torch::arange(o_.owner_index, train_.size(), o_.owners, torch::kInt64);
    train_.images = train_.images.index_select(0, idx);
    train_.labels = train_.labels.index_select(0, idx);
  }
  auto te = ex::open_dataset(test_dc);
  if (!te) return te.error();
  auto ted = ex::load_tensor_dataset(**te, cfg_.train.test_samples);
  if (!ted) return ted.error();
  test_ = *ted;
  return {};
}

Result<ex::Bundle> Owner::exchange(const Hop& h, MsgType type, const std::string& op, const ex::Bundle& in,
                                   StepBytes& bytes, int64_t step) {
  auto wire = to_wire(in);
  if (!wire) return wire.error();
  Meta meta{{"op", op}, {"last", int64_t{h.last}}, {"step", step}, {"owner", int64_t{o_.owner_index}}};
  const int64_t t0 = now_ns();
  FrameStats fs;
  TRACR_TRY(h.client->send_with(send_, type, h.first, *wire, meta, &fs));
  bytes.up_wire += static_cast<int64_t>(fs.wire_bytes);
  bytes.up_raw += static_cast<int64_t>(fs.raw_bytes);
  for (;;) {
    auto f = h.client->recv(static_cast<int>(reply_timeout_ms_));
    if (!f) return make_error(f.error().code, fmt::format("worker {} (segments {}..{}): {}", h.endpoint, h.first, h.last,
                                                          f.error().message));
    if (f->header.type == MsgType::heartbeat) continue;
    if (f->header.type == MsgType::error)
      return make_error(Errc::remote, fmt::format("worker {} (segments {}..{}): {}", h.endpoint, h.first, h.last,
                                                  f->header.error ? f->header.error->str() : "error"));
    if (f->header.type != type || f->header.split != h.first)
      return make_error(Errc::unexpected_message,
                        fmt::format("worker {}: answered {} for segment {}, expected {} for segment {}", h.endpoint,
                                    msg_type_name(f->header.type), f->header.split, msg_type_name(type), h.first));
    bytes.down_wire += static_cast<int64_t>(f->stats.wire_bytes);
    bytes.down_raw += static_cast<int64_t>(f->stats.raw_bytes);
    bytes.srv_ns += meta_int(f->header.meta, protocol::meta_key::kSrvNs, 0);
    // Each received frame owns its buffers; the torch tensors keep them alive (no copy).
    auto out = ex::from_protocol(f->tensors);
    if (!out) return out.error();
    bytes.remote_ns += now_ns() - t0;
    return std::move(*out);
  }
}

Result<ex::Bundle> Owner::forward(const at::Tensor& x, bool train, StepBytes& bytes, int64_t step) {
  ex::Bundle act{{"input", x}};
  for (const auto& h : hops_) {
    if (!h.client) {
      for (int i = h.first; i <= h.last; ++i) {
        auto r = train ? local_[i]->forward(std::move(act)) : local_[i]->infer(std::move(act));
        if (!r) return make_error(r.error().code, fmt::format("segment {}: {}", i, r.error().message));
        act = std::move(*r);
      }
    } else {
      auto r = exchange(h, MsgType::train_forward, train ? "train" : "eval", act, bytes, step);
      if (!r) return r.error();
      act = std::move(*r);
    }
  }
  return act;
}

Status Owner::checkpoint(int64_t step, int64_t epoch) {
  StepBytes ignored;
  std::set<std::string> asked;
  for (const auto& h : hops_) {
    if (!h.client || !asked.insert(h.endpoint).second) continue;
    auto r = exchange(h, MsgType::train_forward, "checkpoint", {}, ignored, step);
    if (!r) return make_error(r.error().code, "checkpoint: " + r.error().message);
  }
  const std::string dir = checkpoint_dir(cfg_, o_);
  const std::string who = fmt::format("owner{}-", o_.owner_index);
  for (const auto& [i, seg] : local_) {
    TRACR_TRY(seg->save(segment_file(dir, who, i, step)));
    prune_checkpoints(dir, who, i, step);
  }
  // Sent only once every device has its files: a resume point.
  ctl_.send("CHECKPOINT", {{"owner", std::to_string(o_.owner_index)},
                           {"step", std::to_string(step)},
                           {"epoch", std::to_string(epoch)},
                           {"dir", dir}});
  return {};
}

Status Owner::export_model() {
  std::vector<ex::NamedTensor> state;
  StepBytes ignored;
  std::set<std::string> asked;
  for (const auto& h : hops_) {
    if (!h.client) {
      for (int i = h.first; i <= h.last; ++i)
        for (auto& nt : local_[i]->state()) state.push_back({nt.name, nt.tensor.detach()});
      continue;
    }
    if (!asked.insert(h.endpoint).second) continue;
    auto r = exchange(h, MsgType::train_forward, "export", {}, ignored, -1);
    if (!r) return make_error(r.error().code, "export: " + r.error().message);
    for (auto& nt : *r) state.push_back(nt);
  }
  // Every parameter and buffer of the model, or the export is refused.
  auto own = model_->state_dict();
  std::set<std::string> have;
  for (const auto& nt : state) have.insert(nt.name);
  for (const auto& nt : own)
    if (!have.count(nt.name)) return make_error(Errc::internal, "export: no device sent '" + nt.name + "'");
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& nt : state) dict.insert(nt.name, nt.tensor.contiguous());
  std::string path = fmt::format("{}/{}-owner{}.pt", checkpoint_dir(cfg_, o_), cfg_.model, o_.owner_index);
  if (!cfg_.train.export_path.empty()) {
    const fs::path e(cfg_.train.export_path);
    path = o_.owner_index == 0 ? e.string()
                               : (e.parent_path() / fmt::format("{}-owner{}{}", e.stem().string(), o_.owner_index,
                                                                e.extension().string()))
                                     .string();
  }
  try {
    if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
    auto bytes = torch::pickle_save(c10::IValue(dict));
    const std::string tmp = path + ".part";
    std::FILE* fp = std::fopen(tmp.c_str(), "wb");
    if (!fp) return make_error(Errc::io, "export: cannot write " + tmp);
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), fp) == bytes.size();
    if (std::fclose(fp) != 0 || !ok) return make_error(Errc::io, "export: cannot write " + tmp);
    fs::rename(tmp, path);
  } catch (const std::exception& e) {
    return make_error(Errc::io, "export " + path + ": " + e.what());
  }
  int64_t params = 0;
  for (const auto& nt : state) params += nt.tensor.numel();
  ctl_.send("EXPORT", {{"owner", std::to_string(o_.owner_index)}, {"path", path}, {"tensors", std::to_string(state.size())},
                       {"values", std::to_string(params)}});
  return {};
}

Status Owner::evaluate(int64_t epoch, int64_t step, double train_loss, double train_acc, int64_t epoch_ns,
                       const StepBytes& eb) {
  const int64_t t0 = now_ns();
  StepBytes bytes;
  double loss_sum = 0;
  int64_t correct = 0, correct5 = 0;
  const int64_t n = test_.size();
  const int64_t batch = cfg_.train.batch_size;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t first = 0; first < n; first += batch) {
    auto [x, y] = ex::gather_batch(test_, order, first, batch);
    auto out = forward(x, false, bytes, step);
    if (!out) return out.error();
    const at::Tensor logits = out->at(0).tensor;
    torch::NoGradGuard ng;
    loss_sum += ex::classification_loss(logits, y).item<double>() * static_cast<double>(y.size(0));
    correct += logits.argmax(1).cpu().eq(y).sum().item<int64_t>();
    const int64_t k = std::min<int64_t>(5, logits.size(1));
    correct5 += std::get<1>(logits.topk(k, 1)).cpu().eq(y.unsqueeze(1)).any(1).sum().item<int64_t>();
  }
  ctl_.send("EPOCH", {{"owner", std::to_string(o_.owner_index)},
                      {"epoch", std::to_string(epoch)},
                      {"step", std::to_string(step)},
                      {"train_loss", fmt::format("{:.9g}", train_loss)},
                      {"train_acc", fmt::format("{:.9g}", train_acc)},
                      {"test_loss", fmt::format("{:.9g}", n ? loss_sum / static_cast<double>(n) : NAN)},
                      {"test_acc", fmt::format("{:.9g}", n ? static_cast<double>(correct) / static_cast<double>(n) : NAN)},
                      {"test_top5", fmt::format("{:.9g}", n ? static_cast<double>(correct5) / static_cast<double>(n) : NAN)},
                      {"test_n", std::to_string(n)},
                      {"test_source", test_source_},
                      {"epoch_ns", std::to_string(epoch_ns)},
                      {"eval_ns", std::to_string(now_ns() - t0)},
                      {"up_bytes", std::to_string(eb.up_wire)},
                      {"down_bytes", std::to_string(eb.down_wire)}});
  return {};
}

Status Owner::wait_turn() {
  if (o_.owners <= 1) return {};
  ctl_.send("TURN", {{"owner", std::to_string(o_.owner_index)}, {"state", "waiting"}});
  for (;;) {
    if (ctl_.stop_requested()) return make_error(Errc::peer_closed, "stopped while waiting for a turn");
    for (const auto& m : ctl_.take_commands())
      if (m.get_or("op", "") == "turn") return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status Owner::run() {
  const int S = static_cast<int>(ranges_.size());
  const int64_t n = train_.size();
  const int64_t batch = cfg_.train.batch_size;
  const int64_t per_epoch = (n + batch - 1) / batch;
  const uint64_t seed = cfg_.seed + static_cast<uint64_t>(o_.owner_index);
  int64_t step = o_.resume_step >= 0 ? o_.resume_step : 0;  // steps done by this owner
  const int64_t limit = cfg_.train.max_steps > 0 ? cfg_.train.max_steps : per_epoch * cfg_.train.epochs;
  const bool last_local = hops_.back().client == nullptr;
  int64_t turn_left = 0;
  bool stopped = false;
  while (step < limit && !stopped) {
    const int64_t epoch = step / per_epoch;
    const auto order = ex::epoch_order(n, seed, epoch);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    StepBytes epoch_bytes;
    const int64_t e0 = now_ns();
    for (int64_t b = step % per_epoch; b < per_epoch && step < limit; ++b) {
      if (ctl_.stop_requested()) {
        stopped = true;
        break;
      }
      if (turn_left == 0) {
        TRACR_TRY(wait_turn());
        turn_left = cfg_.train.turn_steps;
      }
      const int64_t t0 = now_ns();
      auto [x, y] = ex::gather_batch(train_, order, b * batch, batch);
      StepBytes bytes;
      auto out = forward(x, true, bytes, step);
      if (!out) return out.error();
      const int64_t t_fwd = now_ns();
      // The loss, on the owner: the labels never leave it.
      at::Tensor logits = last_local ? local_[S - 1]->attached_outputs().at(0).tensor
                                     : out->at(0).tensor.detach().requires_grad_(true);
      at::Tensor loss = ex::classification_loss(logits, y);
      const double loss_v = loss.item<double>();
      const int64_t ok = logits.detach().argmax(1).cpu().eq(y).sum().item<int64_t>();
      ex::Bundle g;
      size_t h = hops_.size();
      if (last_local) {
        auto r = local_[S - 1]->backward_loss(loss);
        if (!r) return r.error();
        g = std::move(*r);
        for (int i = S - 2; i >= hops_.back().first; --i) {
          auto q = local_[i]->backward(g);
          if (!q) return q.error();
          g = std::move(*q);
        }
        --h;
      } else {
        loss.backward();
        g = {{out->at(0).name, logits.grad().detach()}};
      }
      while (h-- > 0) {
        const Hop& hp = hops_[h];
        if (!hp.client) {
          for (int i = hp.last; i >= hp.first; --i) {
            auto q = local_[i]->backward(g);
            if (!q) return make_error(q.error().code, fmt::format("segment {}: {}", i, q.error().message));
            g = std::move(*q);
          }
        } else {
          auto q = exchange(hp, MsgType::train_backward, "train", g, bytes, step);
          if (!q) return q.error();
          g = std::move(*q);
        }
      }
      const int64_t t1 = now_ns();
      ++step;
      --turn_left;
      loss_sum += loss_v * static_cast<double>(y.size(0));
      correct += ok;
      seen += y.size(0);
      epoch_bytes.add(bytes);
      ctl_.send("STEP", {{"owner", std::to_string(o_.owner_index)},
                         {"epoch", std::to_string(epoch)},
                         {"step", std::to_string(step)},
                         {"batch", std::to_string(y.size(0))},
                         {"loss", fmt::format("{:.9g}", loss_v)},
                         {"correct", std::to_string(ok)},
                         {"step_ns", std::to_string(t1 - t0)},
                         {"fwd_ns", std::to_string(t_fwd - t0)},
                         {"bwd_ns", std::to_string(t1 - t_fwd)},
                         {"remote_ns", std::to_string(bytes.remote_ns)},
                         {"srv_ns", std::to_string(bytes.srv_ns)},
                         {"up_bytes", std::to_string(bytes.up_wire)},
                         {"down_bytes", std::to_string(bytes.down_wire)},
                         {"up_raw", std::to_string(bytes.up_raw)},
                         {"down_raw", std::to_string(bytes.down_raw)},
                         // The steps this owner will take in all: the controller's progress, not a column.
                         {"total", std::to_string(limit)}});
      if (turn_left == 0 && o_.owners > 1) ctl_.send("TURN", {{"owner", std::to_string(o_.owner_index)}, {"state", "done"}});
      if (o_.owners == 1 && cfg_.train.checkpoint_steps > 0 && step % cfg_.train.checkpoint_steps == 0 &&
          step % per_epoch != 0 && step < limit)
        TRACR_TRY(checkpoint(step, epoch));
    }
    if (seen > 0 && !stopped && (step % per_epoch == 0 || step >= limit)) {
      TRACR_TRY(evaluate(epoch, step, loss_sum / static_cast<double>(seen),
                         static_cast<double>(correct) / static_cast<double>(seen), now_ns() - e0, epoch_bytes));
      // Checkpoints need every device at the same step: with several owners
      // the shared segments move on between turns, so only one owner's runs
      // are resumable.
      if (o_.owners == 1) TRACR_TRY(checkpoint(step, epoch));
    }
  }
  if (!stopped) TRACR_TRY(export_model());
  ctl_.send("DONE", {{"steps", std::to_string(step)}, {"stopped", stopped ? "1" : "0"}});
  return {};
}

}  // namespace

int run_train_owner(const AgentOptions& opt, ControlOut& ctl) {
  const settings::ExperimentConfig& cfg = *opt.experiment;
  if (const int t = opt.torch_threads > 0 ? opt.torch_threads : cfg.train.threads; t > 0) torch::set_num_threads(t);
  zmq::context_t ctx(1);
  Owner owner(cfg, opt, ctl);
  if (auto st = owner.setup(ctx); !st) {
    ctl.send("FAIL", {{"error", st.error().str()}});
    return 1;
  }
  auto ready = to_control(agent_hw_identity(opt));
  ready["role"] = std::string(role_name(AgentRole::train_owner));
  ready["owner"] = std::to_string(opt.owner_index);
  ready["model"] = cfg.model;
  ready["layers"] = std::to_string(owner.num_layers());
  ready["seg_params"] = owner.segment_params();
  ctl.send("READY", ready);
  if (auto st = owner.run(); !st) {
    ctl.send("FAIL", {{"error", st.error().str()}});
    return 1;
  }
  return 0;
}

}  // namespace tracr::agent
