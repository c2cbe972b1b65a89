// Model roles of tracr-agent: SERVER running tails, PARTICIPANT running the
// sweep (over the network or in-process), per-layer profiling.
#include <torch/torch.h>

#include <fmt/format.h>

#include "agent/roles.hpp"
#include "agent/runner.hpp"
#include "experiments/profile.hpp"

namespace tracr::agent {

namespace ex = tracr::experiments;
using namespace tracr::protocol;

namespace {

class ModelTail : public TailHandler {
 public:
  explicit ModelTail(std::shared_ptr<ex::SplitModel> m) : exec_(m), model_(std::move(m)) {}
  Result<std::pair<Bundle, Meta>> handle(const Frame& f) override { return exec_.handle(f); }
  std::string describe() const override {
    return fmt::format("{} layers={} device={}", model_->name(), model_->num_layers(), model_->device().str());
  }

 private:
  TailExecutor exec_;
  std::shared_ptr<ex::SplitModel> model_;
};

std::string fmt_d(double v) { return fmt::format("{:.6f}", v); }

Status profile(const AgentOptions& o, ex::SplitModel& m, ControlOut& ctl) {
  const auto& s = m.input_shape();
  auto input = torch::rand({o.profile_batch, s[0], s[1], s[2]}, torch::TensorOptions().dtype(torch::kFloat));
  ex::ProfileOptions po;
  po.repetitions = o.profile_reps;
  auto prof = ex::profile_layers(m, input.to(m.device()), po);
  if (!prof) return std::move(prof.error());
  for (const auto& p : *prof)
    ctl.send("PROFILE", {{"role", o.role},
                         {"index", std::to_string(p.index)},
                         {"name", p.name},
                         {"type", p.type},
                         {"device", p.device},
                         {"reps", std::to_string(p.repetitions)},
                         {"batch", std::to_string(o.profile_batch)},
                         {"median_ms", fmt_d(p.median_ms)},
                         {"p95_ms", fmt_d(p.p95_ms)},
                         {"params", std::to_string(p.params)},
                         {"macs", std::to_string(p.macs)},
                         {"output_bytes", std::to_string(p.output_bytes)},
                         {"peak_rss_delta", std::to_string(p.peak_rss_delta_bytes)}});
  return {};
}

std::map<std::string, std::string> frame_fields(const FrameRecord& r, int64_t done, int64_t total) {
  return {{"split", std::to_string(r.split)},       {"sample", std::to_string(r.sample)},
          {"rep", std::to_string(r.rep)},           {"batch", std::to_string(r.batch)},
          {"head_ns", std::to_string(r.head_ns)},   {"encode_ns", std::to_string(r.encode_ns)},
          {"transfer_ns", std::to_string(r.transfer_ns)}, {"decode_ns", std::to_string(r.decode_ns)},
          {"tail_ns", std::to_string(r.tail_ns)},   {"return_ns", std::to_string(r.return_ns)},
          {"post_ns", std::to_string(r.post_ns)},   {"total_ns", std::to_string(r.total_ns)},
          {"raw_bytes", std::to_string(r.raw_bytes)}, {"wire_bytes", std::to_string(r.wire_bytes)},
          {"codec", r.codec},                       {"cipher", r.cipher},
          {"result", r.result},                     {"correct", std::to_string(r.correct)},
          {"done", std::to_string(done)},           {"total", std::to_string(total)}};
}

}  // namespace

int run_model_role(const AgentOptions& o, ControlOut& ctl) {
  ModelSpec ms{o.model, o.weights, o.input_shape, o.num_classes, o.device, o.seed};
  auto loaded = load_model(ms);
  if (!loaded) {
    ctl.send("FAIL", {{"error", loaded.error().str()}});
    return 1;
  }
  std::shared_ptr<ex::SplitModel> model(std::move(*loaded));
  if (o.profile_reps > 0) {
    auto st = profile(o, *model, ctl);
    if (!st) {
      ctl.send("FAIL", {{"error", "profiling: " + st.error().str()}});
      return 1;
    }
  }
  if (o.role == "SERVER") {
    std::unique_ptr<TailHandler> tail = std::make_unique<ModelTail>(model);
    return serve(o, ctl, tail);
  }

  // PARTICIPANT
  zmq::context_t ctx(1);
  std::unique_ptr<Link> link;
  if (o.in_process) {
    link = std::make_unique<InProcessLink>(std::make_unique<TailExecutor>(model), o.encrypt);
  } else {
    ChannelOptions co;
    co.role = "PARTICIPANT";
    co.security.encrypt = o.encrypt;
    co.security.x25519 = o.x25519;
    co.security.secret = o.secret;
    co.handshake_timeout_ms = 15000;
    auto c = Client::connect(ctx, o.connect, co);
    if (!c) {
      ctl.send("FAIL", {{"error", "connect to SERVER " + o.connect + ": " + c.error().str()}});
      return 1;
    }
    link = std::make_unique<NetworkLink>(std::move(*c));
  }
  ParticipantSpec ps;
  ps.model = ms;
  ps.dataset.kind = o.dataset;
  ps.dataset.path = o.dataset_path;
  ps.dataset.split = o.dataset_split;
  ps.dataset.class_names_file = o.class_names;
  ps.dataset.input_shape = model->input_shape();
  ps.dataset.seed = o.seed;
  if (o.dataset == "fashion-mnist") {
    const auto& s = model->input_shape();
    ps.dataset.resize_mode = (s[1] == 28 && s[2] == 28) ? "none" : "stretch";
    ps.dataset.mean = {0.2860f};  // Fashion-MNIST training-set statistics
    ps.dataset.std = {0.3530f};
  }
  if (o.dataset == "synthetic" && o.max_samples > 0) ps.dataset.num_samples = o.max_samples;
  ps.batch = o.batch;
  ps.max_samples = o.max_samples;
  ps.splits = o.splits;
  ps.warmup = o.warmup;
  ps.reps = o.reps;
  ps.codec = o.codec;
  ps.chunk_bytes = o.chunk_bytes;
  ps.inflight = o.inflight;
  ps.topk = o.topk;
  ctl.send("READY", {{"role", "PARTICIPANT"},
                     {"model", model->name()},
                     {"layers", std::to_string(model->num_layers())},
                     {"link", o.in_process ? "in-process" : o.connect},
                     {"cipher", link->cipher()}});
  int64_t done = 0, total = 0;
  auto st = run_participant(
      ps, *model, *link, [&](const FrameRecord& r) { ctl.send("FRAME", frame_fields(r, done, total)); },
      [&](int64_t d, int64_t t) {
        done = d;
        total = t;
      },
      [&] { return ctl.stop_requested(); });
  if (!st) {
    ctl.send("FAIL", {{"error", st.error().str()}});
    return 1;
  }
  ctl.send("DONE", {{"frames", std::to_string(done)}});
  return 0;
}

}  // namespace tracr::agent
