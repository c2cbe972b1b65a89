#include "agent/runner.hpp"

#include <torch/torch.h>

#include <chrono>
#include <deque>
#include <fmt/format.h>

#include "agent/agent.hpp"
#include "experiments/postprocess.hpp"
#include "experiments/registry.hpp"
#include "experiments/tensor_bridge.hpp"

namespace tracr::agent {

using namespace tracr::protocol;
namespace ex = tracr::experiments;
using Clock = std::chrono::steady_clock;

namespace {
int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}
int64_t meta_int(const Meta& m, const std::string& k) {
  auto it = m.find(k);
  if (it == m.end()) return 0;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return 0;
}
void sync(const c10::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}
}  // namespace

Result<std::unique_ptr<ex::SplitModel>> load_model(const ModelSpec& spec) {
  ex::ModelConfig cfg;
  cfg.input_shape = spec.input_shape;
  cfg.num_classes = spec.num_classes;
  cfg.device = spec.device;
  cfg.weights = spec.weights;
  cfg.seed = spec.seed;
  return ex::create_model(spec.name, cfg);
}

std::string model_fingerprint(const ex::SplitModel& m) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& nt : m.state_dict()) {
    h = fnv1a(nt.name.data(), nt.name.size(), h);
    at::Tensor t = nt.tensor.detach().to(torch::kCPU).contiguous();
    for (auto d : t.sizes()) h = fnv1a(&d, sizeof d, h);
    h = fnv1a(t.data_ptr(), t.numel() * t.element_size(), h);
  }
  return fmt::format("{:016x}", h);
}

TailExecutor::TailExecutor(std::shared_ptr<ex::SplitModel> model)
    : model_(std::move(model)), fingerprint_(model_fingerprint(*model_)) {}

Result<std::pair<Bundle, Meta>> TailExecutor::handle(const Frame& f) {
  const int n = model_->num_layers();
  const int k = f.header.split;
  if (k < 0 || k > n)
    return make_error(Errc::invalid_argument,
                      fmt::format("split {} is outside [0, {}] for model {}", k, n, model_->name()));
  if (auto it = f.header.meta.find("model_fp"); it != f.header.meta.end()) {
    auto* fp = std::get_if<std::string>(&it->second);
    if (!fp || *fp != fingerprint_)
      return make_error(Errc::config, fmt::format("model mismatch: participant has {} fingerprint {}, "
                                                  "server has {} (same name, weights, input shape and seed needed)",
                                                  model_->name(), fp ? *fp : "?", fingerprint_));
  }
  auto in = ex::from_protocol(f.tensors);
  if (!in) return std::move(in.error());
  torch::NoGradGuard ng;
  auto t0 = Clock::now();
  auto out = model_->run(k, n, std::move(*in));
  if (!out) return std::move(out.error());
  sync(model_->device());
  auto t1 = Clock::now();
  auto pb = ex::to_protocol(*out);
  if (!pb) return std::move(pb.error());
  Meta meta;
  meta["srv_decode_ns"] = f.stats.total_ns;
  meta["srv_tail_ns"] = ns_between(t0, t1);
  return std::make_pair(std::move(*pb), std::move(meta));
}

Status NetworkLink::send(const SendOptions& so, int32_t split, const Bundle& b, const Meta& meta,
                         FrameStats* stats) {
  return c_->send_with(so, MsgType::infer_request, split, b, meta, stats);
}

InProcessLink::InProcessLink(std::unique_ptr<TailExecutor> tail, bool encrypt)
    : tail_(std::move(tail)), encrypt_(encrypt) {
  up_w_.set_session(1);
  up_r_.set_session(1);
  down_w_.set_session(1);
  down_r_.set_session(1);
  if (encrypt_) {
    Key256 k1{}, k2{};
    Iv96 i1{}, i2{};
    (void)random_bytes(k1.data(), k1.size());
    (void)random_bytes(k2.data(), k2.size());
    (void)random_bytes(i1.data(), i1.size());
    (void)random_bytes(i2.data(), i2.size());
    (void)up_w_.set_key(k1, i1);
    (void)up_r_.set_key(k1, i1);
    (void)down_w_.set_key(k2, i2);
    (void)down_r_.set_key(k2, i2);
  }
}

Status InProcessLink::send(const SendOptions& so, int32_t split, const Bundle& b, const Meta& meta,
                           FrameStats* stats) {
  std::vector<Segment> segs;
  auto collect = [&](Segment&& s) {
    segs.push_back(std::move(s));
    return Status{};
  };
  Header h;
  h.type = MsgType::infer_request;
  h.split = split;
  h.meta = meta;
  TRACR_TRY(up_w_.write(h, b, so, collect, stats));
  for (auto& s : segs)
    for (auto& fr : up_r_.feed(s)) {
      if (!fr) {
        ready_.push_back(std::move(fr.error()));
        continue;
      }
      auto res = tail_->handle(*fr);
      std::vector<Segment> back;
      auto collect_back = [&](Segment&& x) {
        back.push_back(std::move(x));
        return Status{};
      };
      Header r;
      r.split = split;
      Bundle outputs;
      if (res) {
        r.type = MsgType::infer_result;
        r.meta = res->second;
        outputs = std::move(res->first);
      } else {
        r.type = MsgType::error;
        r.error = res.error();
      }
      SendOptions reply;  // results go back uncompressed, like the SERVER agent's replies
      TRACR_TRY(down_w_.write(r, outputs, reply, collect_back));
      for (auto& x : back)
        for (auto& out : down_r_.feed(x)) ready_.push_back(std::move(out));
    }
  return {};
}

Result<Frame> InProcessLink::recv(int) {
  if (ready_.empty()) return make_error(Errc::timeout, "no reply pending in the in-process link");
  auto r = std::move(ready_.front());
  ready_.pop_front();
  return r;
}

namespace {

struct Pending {
  FrameRecord rec;
  Clock::time_point t0, sent;
  at::Tensor labels;
  std::vector<ex::ImageTransform> transforms;
  bool recorded = true;
};

// Post-processes the reply; fills result/correct/post_ns.
Status finish(Pending& p, const Frame& f, const ex::SplitModel& model, const std::vector<std::string>& classes,
              int topk) {
  if (f.header.type == MsgType::error)
    return make_error(Errc::remote, "server: " + (f.header.error ? f.header.error->str() : std::string("error")));
  auto t0 = Clock::now();
  auto outs = ex::from_protocol(f.tensors);
  if (!outs) return std::move(outs.error());
  std::string result;
  if (model.task() == ex::ModelTask::classification && !outs->empty()) {
    const bool names_fit = static_cast<int64_t>(classes.size()) == (*outs)[0].tensor.size(-1);
    auto preds = ex::top_k((*outs)[0].tensor.to(torch::kFloat), topk, names_fit ? classes : std::vector<std::string>{});
    if (!preds) return std::move(preds.error());
    int64_t correct = 0;
    for (size_t i = 0; i < preds->size(); ++i) {
      const auto& best = (*preds)[i].front();
      if (!result.empty()) result += ";";
      result += fmt::format("{}:{:.4f}", best.label, best.confidence);
      if (names_fit && p.labels.defined() && p.labels[static_cast<int64_t>(i)].item<int64_t>() == best.class_id)
        ++correct;
    }
    p.rec.correct = names_fit && p.labels.defined() ? correct : -1;
  } else if (model.task() == ex::ModelTask::detection && model.detection_head()) {
    auto dets = ex::decode_detections(*outs, *model.detection_head(), p.transforms, classes);
    if (!dets) return std::move(dets.error());
    for (const auto& d : *dets) {
      if (!result.empty()) result += ";";
      result += fmt::format("{} detections", d.size());
    }
  }
  p.rec.result = std::move(result);
  p.rec.post_ns = ns_between(t0, Clock::now());
  return {};
}

}  // namespace

Status run_participant(const ParticipantSpec& spec, ex::SplitModel& model, Link& link,
                       const std::function<void(const FrameRecord&)>& emit,
                       const std::function<void(int64_t, int64_t)>& progress, const std::function<bool()>& stop) {
  torch::NoGradGuard ng;
  auto ds = ex::open_dataset(spec.dataset);
  if (!ds) return std::move(ds.error());
  const int n = model.num_layers();
  std::vector<int> splits = spec.splits;
  if (splits.empty())
    for (int k = 0; k <= n; ++k) splits.push_back(k);
  for (int k : splits)
    if (k < 0 || k > n)
      return make_error(Errc::config, fmt::format("split {} is outside [0, {}] for {}", k, n, model.name()));
  auto codec = CodecSpec::parse(spec.codec);
  if (!codec) return std::move(codec.error());
  SendOptions so;
  so.codec = *codec;
  so.chunk_bytes = spec.chunk_bytes;
  so.segment_bytes = spec.chunk_bytes;
  const std::string fp = model_fingerprint(model);
  const auto& classes = (*ds)->class_names();
  ex::BatchLoader probe(**ds, spec.batch, spec.max_samples);
  const int64_t total = static_cast<int64_t>(splits.size()) * spec.reps * probe.num_batches();
  int64_t done = 0;
  // An in-process link runs the tail inside send(): frames cannot overlap.
  const int window = link.tail_in_send() ? 1 : std::max(1, spec.inflight);

  for (int k : splits) {
    std::deque<Pending> pending;
    auto drain_one = [&](int timeout_ms) -> Status {
      auto f = link.recv(timeout_ms);
      if (!f) return make_error(f.error().code, fmt::format("split {}: {}", k, f.error().message));
      // When the reply was complete, not when this loop got to it.
      const auto t3 = f->stats.completed_at_ns > 0
                          ? Clock::time_point(std::chrono::nanoseconds(f->stats.completed_at_ns))
                          : Clock::now();
      Pending p = std::move(pending.front());
      pending.pop_front();
      p.rec.return_ns = f->stats.total_ns;
      p.rec.decode_ns = meta_int(f->header.meta, "srv_decode_ns");
      p.rec.tail_ns = meta_int(f->header.meta, "srv_tail_ns");
      TRACR_TRY(finish(p, *f, model, classes, spec.topk));
      auto t4 = Clock::now();
      p.rec.total_ns = ns_between(p.t0, t4);
      p.rec.transfer_ns = std::max<int64_t>(
          0, ns_between(p.sent, t3) - p.rec.decode_ns - p.rec.tail_ns - p.rec.return_ns);
      if (p.recorded) {
        progress(++done, total);
        emit(p.rec);
      }
      return {};
    };
    // Replies already here are taken right away, so with several frames in
    // flight they are not held behind the next head.
    auto drain_ready = [&]() -> Status {
      while (!pending.empty()) {
        auto st = drain_one(0);
        if (!st) return st.error().code == Errc::timeout ? Status{} : st;
      }
      return {};
    };
    auto one_batch = [&](const ex::Batch& b, int64_t sample, int rep, bool recorded) -> Status {
      if (stop && stop()) return make_error(Errc::peer_closed, "stopped by the controller");
      Pending p;
      p.recorded = recorded;
      p.labels = b.labels;
      p.transforms = b.transforms;
      p.rec.split = k;
      p.rec.sample = sample;
      p.rec.rep = rep;
      p.rec.batch = b.images.size(0);
      p.rec.codec = so.codec.name();
      p.rec.cipher = link.cipher();
      p.t0 = Clock::now();
      auto head = model.run(0, k, ex::SplitModel::input_bundle(b.images.to(model.device())));
      if (!head) return std::move(head.error());
      sync(model.device());
      auto t1 = Clock::now();
      p.rec.head_ns = ns_between(p.t0, t1);
      auto pb = ex::to_protocol(*head);
      if (!pb) return std::move(pb.error());
      FrameStats st;
      TRACR_TRY(link.send(so, k, *pb, {{"model_fp", fp}}, &st));
      // The writer's own time (codec, cipher, hand-off to ZeroMQ); an
      // in-process link also runs the tail inside send(), which is not encoding.
      p.rec.encode_ns = st.total_ns;
      p.sent = link.tail_in_send() ? t1 + std::chrono::nanoseconds(st.total_ns) : Clock::now();
      p.rec.raw_bytes = st.raw_bytes;
      p.rec.wire_bytes = st.wire_bytes;
      pending.push_back(std::move(p));
      if (window > 1) TRACR_TRY(drain_ready());
      while (static_cast<int>(pending.size()) >= window) TRACR_TRY(drain_one(spec.timeout_ms));
      return {};
    };
    // Warm-up on the first batch: runs the whole path, not recorded.
    if (spec.warmup > 0) {
      ex::BatchLoader wl(**ds, spec.batch, spec.max_samples);
      auto b = wl.next();
      if (!b) return std::move(b.error());
      if (*b)
        for (int w = 0; w < spec.warmup; ++w) TRACR_TRY(one_batch(**b, 0, -1, false));
      while (!pending.empty()) TRACR_TRY(drain_one(spec.timeout_ms));
    }
    for (int rep = 0; rep < spec.reps; ++rep) {
      ex::BatchLoader loader(**ds, spec.batch, spec.max_samples);
      int64_t sample = 0;
      while (true) {
        auto b = loader.next();
        if (!b) return std::move(b.error());
        if (!*b) break;
        TRACR_TRY(one_batch(**b, sample, rep, true));
        sample += (*b)->images.size(0);
      }
    }
    while (!pending.empty()) TRACR_TRY(drain_one(spec.timeout_ms));
  }
  return {};
}

}  // namespace tracr::agent
