#include "agent/pipeline.hpp"
#include "agent/link_probe.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "agent/forward.hpp"
#include "agent/frame_result.hpp"
#include "agent/timing.hpp"
#include "experiments/tensor_bridge.hpp"
#include "protocol/codec_choice.hpp"
#include "protocol/meta_keys.hpp"
#include "protocol/stats.hpp"

namespace tracr::agent {

using namespace tracr::protocol;
using namespace tracr::wire;
namespace ex = tracr::experiments;

namespace {

int64_t meta_int(const Meta& m, const std::string& k) {
  auto it = m.find(k);
  if (it == m.end()) return 0;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return 0;
}
// An integer the reply may lack: nullopt then (stored NULL).
std::optional<int64_t> meta_opt(const Meta& m, const std::string& k) {
  auto it = m.find(k);
  if (it == m.end()) return std::nullopt;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return std::nullopt;
}

// The server's own figures in a reply (its decode, segment and batch).
void server_fields(const Meta& m, FrameRecord& r) {
  r.decode_ns = meta_int(m, protocol::meta_key::kSrvDecodeNs);
  r.tail_ns = meta_int(m, protocol::meta_key::kSrvTailNs);
  r.server_batch = meta_opt(m, protocol::meta_key::kSrvBatch);
  r.batch_wait_ns = meta_opt(m, protocol::meta_key::kSrvBatchWaitNs);
}

// The frame pipeline: heads, frames in flight, replies, post-processing, one
// FrameRecord per frame with the timing identity of record_fields.def.
class Pipeline {
 public:
  Pipeline(const ParticipantSpec& spec, ex::SplitModel& model, Link& link, const PipelineHooks& hooks,
           ex::Dataset& ds, SendOptions so)
      : spec_(spec), model_(model), link_(link), hooks_(hooks), ds_(ds), so_(std::move(so)),
        fp_(model_fingerprint(model)), window_(link.tail_in_send() ? 1 : std::max(1, spec.inflight)),
        run_t0_(spec.run_start), last_empty_(Clock::now()) {}

  Status run(SplitPolicy& policy, bool* stopped) {
    ex::BatchLoader probe(ds_, spec_.batch, spec_.max_samples);
    planned_ = policy.planned_frames(probe.num_batches());
    const int n = model_.num_layers();
    for (int index = 0; auto step = policy.next(); ++index) {
      if (step->split < 0 || step->split > n)
        return make_error(Errc::config, fmt::format("split {} is outside [0, {}] for {}", step->split, n, model_.name()));
      split_ = step->split;
      beyond_ = step->beyond;
      for (size_t i = 0; i < beyond_.size(); ++i)
        if (beyond_[i] < (i ? beyond_[i - 1] : split_) || beyond_[i] > n)
          return make_error(Errc::config, fmt::format("placement {}: cut {} is out of order or outside [0, {}] for {}",
                                                      placement_text(), beyond_[i], n, model_.name()));
      policy_name_ = policy.name();
      if (spec_.lockstep) {
        // Every frame of the step before is back; the controller resumes all participants at once.
        while (!pending_.empty()) TRACR_TRY(drain(true));
        event("step_waiting", nullptr,
              fmt::format("step {} (split {}): waiting for the other participants", index, split_));
        TRACR_TRY(commands(true));
        if (stop_) break;
      }
      TRACR_TRY(run_step(*step));
      if (stop_) break;
    }
    while (!pending_.empty()) TRACR_TRY(drain(true));
    if (stopped) *stopped = stop_;
    return {};
  }

 private:
  static int64_t ns(Clock::time_point a, Clock::time_point b) { return ns_between(a, b); }

  // compression: auto: the lossless codec for this split, tried on its
  // first batch's activations (protocol/codec_choice.hpp) at the link's
  // upstream rate (the probe's, else the running estimate).
  Status pick_codec() {
    auto b = first_batch();
    if (!b) return std::move(b.error());
    if (!*b) return {};
    auto head = model_.run(0, split_, ex::SplitModel::input_bundle((*b)->images.to(model_.device())));
    if (!head) return std::move(head.error());
    auto pb = ex::to_protocol(*head);
    if (!pb) return std::move(pb.error());
    CodecChoiceOptions o;
    o.encrypt = link_.cipher() != "none";
    o.up_mbps = spec_.link_up_mbps > 0 ? spec_.link_up_mbps : last_est_mbps_;
    o.chunk_bytes = so_.chunk_bytes;
    auto trials = try_codecs(*pb, o);
    if (!trials) return std::move(trials.error());
    auto spec = CodecSpec::parse(trials->front().codec);
    if (!spec) return std::move(spec.error());
    so_.codec = *spec;
    event("codec_chosen", nullptr, fmt::format("split {}: {}", split_, describe_choice(*trials, o.up_mbps)));
    return {};
  }

  Status run_step(const PolicyStep& step) {
    if (spec_.auto_codec) TRACR_TRY(pick_codec());
    if (step.warmup > 0) {
      auto b = first_batch();
      if (!b) return std::move(b.error());
      if (*b)
        for (int w = 0; w < step.warmup && !stop_; ++w) TRACR_TRY(frame(**b, 0, -1, true));
      // Warm-up replies come back before timed frames start.
      while (!pending_.empty()) TRACR_TRY(drain(true));
    }
    for (int rep = 0; rep < step.passes && !stop_; ++rep) {
      ex::BatchLoader loader(ds_, spec_.batch, spec_.max_samples);
      while (!stop_) {
        auto b = loader.next();
        if (!b) return std::move(b.error());
        if (!*b) break;
        for (const auto& f : (*b)->failures) TRACR_TRY(sample_failed(f, rep));
        if ((*b)->size() > 0) TRACR_TRY(frame(**b, (*b)->indices.front(), rep, false));
        else if (hooks_.progress) hooks_.progress(++done_, planned_);  // a planned frame with no sample left
      }
    }
    return {};
  }

  // The first batch with at least one sample the dataset could give.
  Result<std::optional<ex::Batch>> first_batch() {
    ex::BatchLoader l(ds_, spec_.batch, spec_.max_samples);
    while (true) {
      auto b = l.next();
      if (!b || !*b || (**b).size() > 0) return b;
    }
  }

  // A sample the dataset could not give (unreadable, truncated, CMYK) fails
  // alone: one row with ok = 0, no samples, its id and the reason, no times.
  // It counts toward max_consecutive_failures like a failed frame.
  Status sample_failed(const ex::SampleFailure& f, int rep) {
    TRACR_TRY(commands());
    if (stop_) return {};
    FrameRecord r;
    r.frame = next_frame_++;
    r.split = split_;
    r.placement = placement_text();
    r.sample = f.index;
    r.sample_id = f.id;
    r.rep = rep;
    r.batch = 0;
    r.policy = policy_name_;
    r.codec = so_.codec.name();
    r.cipher = link_.cipher();
    r.correct = -1;
    r.top5_correct = -1;
    r.ok = 0;
    r.error = "sample " + std::to_string(f.index) + " left out: " + f.error;
    r.flags = "sample_error";
    const int64_t now = ns(run_t0_, Clock::now());
    r.start_ns = now;
    r.end_ns = now;
    return record_failure(r);
  }

  // A failed row that is not a reply's: emitted, and counted toward
  // max_consecutive_failures.
  Status record_failure(const FrameRecord& r) {
    if (hooks_.emit) hooks_.emit(r);
    ++consecutive_failures_;
    return failure_limit(r.error);
  }

  // The run ends once more than max_consecutive_failures frames in a row failed.
  Status failure_limit(const std::string& last) const {
    if (consecutive_failures_ > spec_.max_consecutive_failures)
      return make_error(Errc::remote, fmt::format("{} frames in a row failed (more than max_consecutive_failures = "
                                                  "{}); the last: {}",
                                                  consecutive_failures_, spec_.max_consecutive_failures, last));
    return {};
  }

  // Which awaited request a reply answers (PROTOCOL.md 3.4, meta req_seq).
  // false: a stray reply (to a request answered already or never sent),
  // dropped and counted. Requests it passes over got no reply of their own:
  // each is recorded failed. A reply without req_seq is matched by order.
  Result<bool> match_reply(const Frame& f) {
    auto it = f.header.meta.find(protocol::meta_key::kReqSeq);
    if (it == f.header.meta.end()) return true;
    const int64_t* rs = std::get_if<int64_t>(&it->second);
    size_t at = 0;
    while (rs && at < pending_.size() && pending_[at].req_seq != static_cast<uint64_t>(*rs)) ++at;
    if (!rs || at == pending_.size()) {
      ++stray_replies_;
      event("stray_reply", nullptr,
            fmt::format("a {} for request {} that is not awaited (answered already, or never sent): dropped; "
                        "{} so far",
                        msg_type_name(f.header.type), rs ? std::to_string(*rs) : std::string("(not an integer)"),
                        stray_replies_));
      return false;
    }
    for (; at > 0; --at) {
      PendingFrame p = std::move(pending_.front());
      pending_.pop_front();
      TRACR_TRY(no_reply(p, *rs));
    }
    return true;
  }

  // A request the server never answered (its frame was lost on the way):
  // its measured times stand, the rest of the round trip is network_ns.
  Status no_reply(PendingFrame& p, int64_t answered) {
    FrameRecord& r = p.rec;
    const auto t_end = Clock::now();
    r.ok = 0;
    r.error = fmt::format("no reply from the server to request {}: it answered the later request {} first (the "
                          "frame was lost on the way)",
                          p.req_seq, answered);
    r.flags = "no_reply";
    r.head_ns = ns(p.t0, p.t_head);
    r.encode_ns = ns(p.t_head, p.t_sent);
    r.total_ns = ns(p.t0, t_end);
    r.network_ns = r.total_ns - r.head_ns - r.encode_ns;
    r.start_ns = ns(run_t0_, p.t0);
    r.end_ns = ns(run_t0_, t_end);
    if (!r.warmup && hooks_.progress) hooks_.progress(++done_, planned_);
    return record_failure(r);
  }

  // Applies the controller's commands; blocks while paused (from the start
  // with `paused`, until a resume).
  Status commands(bool paused = false) {
    paused_since_.reset();
    while (true) {
      if (hooks_.stop && hooks_.stop()) {
        if (!stop_) event("stopped", nullptr, "the controller closed the control channel or the agent was signalled");
        stop_ = true;
        return {};
      }
      std::vector<Command> cmds = hooks_.poll ? hooks_.poll() : std::vector<Command>{};
      for (const auto& c : cmds) {
        switch (c.kind) {
          case Command::Kind::set_split:
            if (!beyond_.empty()) {
              event("command_rejected", &c,
                    fmt::format("split {}: the run places a chain ({}); set_split moves a two-tier split only", c.split,
                                placement_text()));
              break;
            }
            if (c.split > model_.num_layers()) {
              event("command_rejected", &c,
                    fmt::format("split {} is outside [0, {}] for {}", c.split, model_.num_layers(), model_.name()));
              break;
            }
            split_ = c.split;
            policy_name_ = "command";
            event("command_applied", &c, fmt::format("split {} from frame {}", c.split, next_frame_));
            break;
          case Command::Kind::set_codec: {
            auto spec = CodecSpec::parse(c.codec);
            if (!spec) {
              event("command_rejected", &c, spec.error().str());
              break;
            }
            so_.codec = *spec;
            policy_name_ = "command";
            event("command_applied", &c, fmt::format("codec {} from frame {}", spec->name(), next_frame_));
            break;
          }
          case Command::Kind::pause:
            if (!paused) {
              // Frames in flight come back before the pause takes effect.
              while (!pending_.empty()) TRACR_TRY(drain(true));
              event("paused", &c, fmt::format("paused before frame {}", next_frame_));
            }
            paused = true;
            break;
          case Command::Kind::resume:
            event("resumed", &c, fmt::format("resumed at frame {}", next_frame_));
            paused = false;
            break;
          case Command::Kind::stop:
            event("stopped", &c, fmt::format("stop before frame {}", next_frame_));
            stop_ = true;
            return {};
        }
      }
      if (!paused) return {};
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      last_empty_ = Clock::now();  // nothing was read while paused: no reply is pending
      if (protocol::Client* c = link_.client(); c && spec_.keepalive_ms > 0) {
        if (!paused_since_) paused_since_ = Clock::now();
        if (Clock::now() - *paused_since_ >= std::chrono::milliseconds(spec_.keepalive_ms)) {
          TRACR_TRY(keep_alive(*c, spec_.timeout_ms));
          paused_since_ = Clock::now();
        }
      }
    }
  }

  void event(const std::string& kind, const Command* c, const std::string& msg) {
    if (hooks_.event) hooks_.event(kind, next_frame_, c, msg);
  }

  Status frame(const ex::Batch& b, int64_t sample, int rep, bool warmup) {
    TRACR_TRY(commands());
    if (stop_) return {};
    PendingFrame p;
    // Synthetic inputs have no ground truth: no label stored, no accuracy judged (#45 item 5).
    const bool truth = ds_.labels_are_truth();
    if (truth) p.labels = b.labels;
    p.transforms = b.transforms;
    FrameRecord& r = p.rec;
    r.frame = next_frame_++;
    r.split = split_;
    r.placement = placement_text();
    r.sample = sample;
    r.sample_id = join_ids(b.ids);
    r.label = truth ? join_labels(b.labels) : std::string();
    r.rep = rep;
    r.batch = b.images.size(0);
    r.warmup = warmup ? 1 : 0;
    r.policy = policy_name_;
    r.codec = so_.codec.name();
    r.cipher = link_.cipher();
    if (spec_.energy) p.e0 = spec_.energy->mark();
    p.t0 = Clock::now();
    auto hx = head(ex::SplitModel::input_bundle(b.images.to(model_.device())), p);
    if (!hx) return std::move(hx.error());
    if (hx->exited) return exited(p, *hx);
    auto& crossing = hx->crossing;
    sync_device(model_.device());
    p.t_head = Clock::now();
    if (spec_.energy) p.e_head = spec_.energy->mark();
    auto pb = ex::to_protocol(crossing);
    if (!pb) return std::move(pb.error());
    FrameStats st;
    Meta meta{{protocol::meta_key::kModelFp, fp_}};
    if (!beyond_.empty()) {  // a chain: the first device's segment ends at the next cut, the rest goes on
      meta[protocol::meta_key::kLast] = static_cast<int64_t>(beyond_.front());
      wire::Placement rest{std::vector<int>(beyond_.begin() + 1, beyond_.end()), {}};
      meta[protocol::meta_key::kThen] = rest.text();
      p.last = beyond_.front();
      p.forwarded = true;
    }
    TRACR_TRY(link_.send(so_, split_, *pb, meta, &st));
    // The round trip starts when the last segment was handed to the link:
    // the server cannot start on it earlier, so whatever the writer does
    // after that (or an in-process link's tail) is part of the round trip.
    p.t_sent = st.last_handoff_at_ns > 0 ? Clock::time_point(std::chrono::nanoseconds(st.last_handoff_at_ns))
                                         : Clock::now();
    r.raw_bytes = static_cast<int64_t>(st.raw_bytes);
    r.wire_bytes = static_cast<int64_t>(st.wire_bytes);
    p.req_seq = st.seq;
    pending_.push_back(std::move(p));
    pending_.back().rec.inflight = static_cast<int64_t>(pending_.size());
    // Replies already here are taken right away (not held behind the next head).
    if (window_ > 1)
      while (!pending_.empty()) {
        bool got = false;
        TRACR_TRY(drain(false, &got));
        if (!got) break;
      }
    while (static_cast<int>(pending_.size()) >= window_) TRACR_TRY(drain(true));
    return {};
  }

  // The head with its exits (#44): layers [0, split) in pieces, each exit
  // that hangs at or before the split evaluated on its layer's output in
  // order; the first whose confidence reaches the threshold ends the frame.
  struct HeadOut {
    ex::Bundle crossing;  // at the split (a frame that goes on), else where the backbone stopped
    bool exited = false;
    at::Tensor logits;    // the exit's answer
    size_t next = 0;      // spec_.exits index after the one taken
    int at = 0;           // the cut `crossing` is at
  };

  // The exits this split reaches: spec_.exits[0, reach()).
  size_t reach() const {
    size_t e = 0;
    while (e < spec_.exits.size() && spec_.exits[e].layer + 1 <= split_) ++e;
    return e;
  }

  // Exit e on `x` (the crossing at its cut): its answers appended to the
  // frame's exit_results and exit_times (ns since the frame's start, less
  // `skip`), and whether every sample reached the threshold.
  Result<bool> evaluate_exit(size_t e, const ex::Bundle& x, PendingFrame& p, at::Tensor* logits, int64_t skip) {
    const auto& xe = spec_.exits[e];
    auto in = ex::exit_input(model_, xe.layer, x);
    if (!in) return std::move(in.error());
    auto l = xe.head->logits(*in);
    if (!l) return std::move(l.error());
    const auto answers = ex::exit_answers(*l);  // on the CPU: the device has finished
    const auto t = Clock::now();
    FrameRecord& r = p.rec;
    std::string one = std::to_string(xe.index) + "=";
    bool pass = !answers.empty();
    for (size_t i = 0; i < answers.size(); ++i) {
      const auto& a = answers[i];
      one += fmt::format("{}{}:{:.9g}:{:.9g}", i ? ";" : "", a.top1, a.max_softmax, a.entropy_conf);
      pass = pass && static_cast<double>(ex::exit_confidence(a, spec_.exit_measure)) >= spec_.exit_threshold;
    }
    r.exit_results += (r.exit_results.empty() ? "" : " ") + one;
    r.exit_times += (r.exit_times.empty() ? "" : " ") + std::to_string(ns(p.t0, t) - skip);
    *logits = *l;
    return pass;
  }

  // The backbone from the cut h.at on to exit e's cut.
  Status to_exit(size_t e, ex::Bundle& x, HeadOut& h) {
    auto y = model_.run(h.at, spec_.exits[e].layer + 1, std::move(x));
    if (!y) return std::move(y.error());
    x = std::move(*y);
    h.at = spec_.exits[e].layer + 1;
    return {};
  }

  Result<HeadOut> head(ex::Bundle x, PendingFrame& p) {
    HeadOut h;
    const size_t reach_ = reach();
    if (reach_ > 0) p.rec.exit_ns = 0;
    for (size_t e = 0; e < reach_; ++e) {
      const auto& xe = spec_.exits[e];
      TRACR_TRY(to_exit(e, x, h));
      sync_device(model_.device());  // the backbone's share ends here, not inside the exit's time
      const auto t0 = Clock::now();
      at::Tensor logits;
      auto pass = evaluate_exit(e, x, p, &logits, 0);
      if (!pass) return std::move(pass.error());
      *p.rec.exit_ns += ns(t0, Clock::now());
      if (*pass) {
        p.rec.exit_index = static_cast<int64_t>(xe.index);
        h.exited = true;
        h.logits = logits;
        h.next = e + 1;
        h.crossing = std::move(x);
        return h;
      }
    }
    auto y = model_.run(h.at, split_, std::move(x));
    if (!y) return std::move(y.error());
    h.crossing = std::move(*y);
    h.at = split_;
    return h;
  }

  // A frame that ended at an exit: no send; its answer is the exit's, its
  // times the head's (to the exit's decision) and the post-processing's.
  // With record.exit_confidences the later exits this split reaches run
  // after the frame is complete (exit_extra_ns).
  Status exited(PendingFrame& p, HeadOut& h) {
    FrameRecord& r = p.rec;
    p.t_head = Clock::now();
    if (spec_.energy) p.e_head = spec_.energy->mark();
    if (auto st = classify(p, h.logits, ds_.class_names(), spec_.topk, false); !st) {
      r.ok = 0;
      r.error = st.error().str();
      ++consecutive_failures_;
    } else {
      consecutive_failures_ = 0;
    }
    const auto t_end = Clock::now();
    r.head_ns = ns(p.t0, p.t_head);
    r.post_ns = ns(p.t_head, t_end);
    r.total_ns = ns(p.t0, t_end);
    r.start_ns = ns(run_t0_, p.t0);
    r.end_ns = ns(run_t0_, t_end);
    r.inflight = static_cast<int64_t>(pending_.size()) + 1;
    std::optional<EnergyMeter::Mark> e_end;
    if (spec_.energy) e_end = spec_.energy->mark();
    // The frame is complete and is stored even when recording the later exits fails.
    const Status later = spec_.exit_confidences ? later_exits(p, h) : Status{};
    if (!r.warmup && hooks_.progress) hooks_.progress(++done_, planned_);
    if (hooks_.emit) hooks_.emit(r);
    if (hooks_.energy) emit_energy(p, nullptr, e_end);
    TRACR_TRY(later);
    return failure_limit(r.error);
  }

  // record.exit_confidences: the exits this split reaches past the one the
  // frame took, their times as if the frame had gone on from its decision.
  Status later_exits(PendingFrame& p, HeadOut& h) {
    if (h.next >= reach()) return {};
    const auto t_resume = Clock::now();
    const int64_t skip = ns(p.t_head, t_resume);
    ex::Bundle x = std::move(h.crossing);
    for (size_t e = h.next; e < reach(); ++e) {
      TRACR_TRY(to_exit(e, x, h));
      at::Tensor logits;
      auto pass = evaluate_exit(e, x, p, &logits, skip);
      if (!pass) return std::move(pass.error());
    }
    p.rec.exit_extra_ns = ns(t_resume, Clock::now());
    return {};
  }

  // Takes the oldest frame's reply. A non-blocking check comes first: a reply
  // found there may have waited since the last check that found nothing
  // (queue_ns); one that arrives during a blocking wait did not wait.
  Status drain(bool block, bool* got = nullptr) {
    if (pending_.empty()) return {};
    const auto t_check = Clock::now();
    auto f = link_.recv(0);
    // An in-process link produced the reply inside send(): it never waited
    // behind other work, and its encoding and decoding are measured stages.
    bool waited = link_.tail_in_send();
    if (!f && f.error().code == Errc::timeout) {
      last_empty_ = Clock::now();
      if (!block) return {};
      f = link_.recv(spec_.timeout_ms);
      waited = true;
    }
    if (!f) return make_error(f.error().code, fmt::format("split {}: {}", pending_.front().rec.split, f.error().message));
    auto matched = match_reply(*f);
    if (!matched) return std::move(matched.error());
    if (!*matched) return {};  // a stray reply, dropped: the caller asks again
    const auto t_got = Clock::now();
    if (got) *got = true;
    PendingFrame p = std::move(pending_.front());
    pending_.pop_front();
    FrameRecord& r = p.rec;
    r.return_ns = f->stats.total_ns;
    r.reply_bytes = static_cast<int64_t>(f->stats.wire_bytes);
    server_fields(f->header.meta, r);
    if (f->header.type != MsgType::error && !f->header.meta.count(protocol::meta_key::kSrvNs))
      return make_error(Errc::missing_field,
                        "the server's reply has no srv_ns (a tracr-agent older than this participant?): the "
                        "timing identity needs the server's own time");
    r.server_ns = meta_int(f->header.meta, protocol::meta_key::kSrvNs);
    // The reply cannot exist before the hand-off plus the server's time, nor
    // before the last check that found nothing: it waited at most since the
    // later of the two. Not clamped: negative means an assumption broke.
    const auto earliest = p.t_sent + std::chrono::nanoseconds(r.server_ns);
    r.queue_ns = waited ? 0 : ns(std::max(earliest, last_empty_before(t_check)), t_check);
    // A frame the server rejected, or whose reply cannot be post-processed,
    // fails alone: it is recorded (ok = 0, its error, the times measured) and
    // the run goes on, unless too many fail in a row.
    if (auto fin = finish_frame(p, *f, model_, ds_.class_names(), spec_.topk, spec_.record_outputs); !fin) {
      r.ok = 0;
      r.error = fin.error().str();
      ++consecutive_failures_;
    } else {
      consecutive_failures_ = 0;
    }
    const auto t_end = Clock::now();
    r.head_ns = ns(p.t0, p.t_head);
    r.encode_ns = ns(p.t_head, p.t_sent);
    r.post_ns = ns(t_got, t_end);
    r.total_ns = ns(p.t0, t_end);
    r.start_ns = ns(run_t0_, p.t0);
    r.end_ns = ns(run_t0_, t_end);
    // Whatever the round trip holds beyond the server's, the queue's and the
    // reply decoding's measured time: stored as measured, never clamped.
    r.network_ns = ns(p.t_sent, t_got) - r.server_ns - r.queue_ns - r.return_ns;
    // Running link estimate over this and the previous ok frames.
    if (r.ok) est_.push_back({r.wire_bytes + r.reply_bytes, r.network_ns});
    if (est_.size() > 8) est_.pop_front();
    int64_t est_bytes = 0, est_ns = 0;
    for (const auto& [b, t] : est_) {
      est_bytes += b;
      est_ns += t;
    }
    if (est_ns > 0) r.link_est_mbps = static_cast<double>(est_bytes) * 8e3 / static_cast<double>(est_ns);
    if (r.link_est_mbps) last_est_mbps_ = *r.link_est_mbps;
    if (r.network_ns < 0) r.flags = "negative_network";
    if (r.queue_ns < 0) r.flags += std::string(r.flags.empty() ? "" : ",") + "negative_queue";
    // An ERROR reply carries no server time: whatever the server spent is
    // inside network_ns for this frame, and the flag says so.
    if (!f->header.meta.count(protocol::meta_key::kSrvNs)) r.flags += std::string(r.flags.empty() ? "" : ",") + "no_server_time";
    // A chain's frame: every device's stages, from the reply's nested meta.
    if (r.ok && r.placement.find('|') != std::string::npos)
      if (auto pl = wire::parse_placement(r.placement); pl)
        r.hops = hops_of_reply(f->header.meta, r, pl->cuts, model_.num_layers());
    if (!r.warmup && hooks_.progress) hooks_.progress(++done_, planned_);
    if (hooks_.emit) hooks_.emit(r);
    if (hooks_.energy) emit_energy(p, &*f);
    return failure_limit(r.error);
  }

  // The frame's energy rows: the participant's head and whole frame, the
  // server's tail (from the reply), the radio's transmission.
  // An exit's frame (f null) ends at e_end, before the later exits ran.
  void emit_energy(const PendingFrame& p, const Frame* f, std::optional<EnergyMeter::Mark> e_end = std::nullopt) {
    const FrameRecord& r = p.rec;
    std::vector<EnergyRecord> rows;
    auto add = [&](std::vector<EnergyRecord> v, const char* side, const char* stage) {
      for (auto& e : v) {
        e.side = side;
        if (e.stage.empty()) e.stage = stage;
        rows.push_back(std::move(e));
      }
    };
    if (spec_.energy && p.e0 && p.e_head) {
      add(spec_.energy->between(*p.e0, *p.e_head, 1), "participant", "head");
      add(spec_.energy->between(*p.e0, e_end ? *e_end : spec_.energy->mark(), 1), "participant", "frame");
      // With frames in flight, a frame's window also holds other frames' work.
      if (r.inflight > 1)
        for (auto& e : rows)
          if (e.stage == "frame") e.flags += std::string(e.flags.empty() ? "" : ",") + "overlapping";
    }
    const Meta* fm = f ? &f->header.meta : nullptr;  // none for a frame that ended at an exit
    if (auto it = fm ? fm->find(protocol::meta_key::kSrvEnergy) : Meta::const_iterator(); fm && it != fm->end()) {
      if (const auto* text = std::get_if<std::string>(&it->second)) {
        auto srv = unpack_energy(*text);
        if (srv) add(std::move(*srv), "server", "tail");
        else if (hooks_.event) hooks_.event("energy_rejected", r.frame, nullptr, "server energy: " + srv.error().str());
      }
    }
    if (spec_.radio && f) add({radio_energy(*spec_.radio, r.wire_bytes, r.reply_bytes, r.network_ns)}, "participant", "transmit");
    for (auto& e : rows) {
      e.frame = r.frame;
      e.split = r.split;
      e.warmup = r.warmup;
      hooks_.energy(e);
    }
  }

  // last_empty_ as it was when the check at t_check began (a check that
  // found nothing updates it afterwards).
  Clock::time_point last_empty_before(Clock::time_point t_check) const {
    return last_empty_ <= t_check ? last_empty_ : t_check;
  }

  const ParticipantSpec& spec_;
  ex::SplitModel& model_;
  Link& link_;
  const PipelineHooks& hooks_;
  ex::Dataset& ds_;
  SendOptions so_;
  const std::string fp_;
  const int window_;
  const Clock::time_point run_t0_;
  Clock::time_point last_empty_;
  std::optional<Clock::time_point> paused_since_;  // while paused: since the pause or the last keep-alive
  std::deque<PendingFrame> pending_;
  std::deque<std::pair<int64_t, int64_t>> est_;  // (bytes both ways, network_ns) of recent frames
  double last_est_mbps_ = 0;                     // the newest running link estimate (auto codec)
  int split_ = 0;
  std::vector<int> beyond_;  // a chain's cuts after split_ (PolicyStep::beyond)
  // The step's placement as frames.placement stores it: "3|13", "7" for two tiers.
  std::string placement_text() const {
    std::string t = std::to_string(split_);
    for (int c : beyond_) t += "|" + std::to_string(c);
    return t;
  }
  std::string policy_name_ = "sweep";
  int64_t next_frame_ = 0, done_ = 0, planned_ = 0;
  int consecutive_failures_ = 0;
  int64_t stray_replies_ = 0;
  bool stop_ = false;
};

}  // namespace

Status run_pipeline(const ParticipantSpec& spec, ex::SplitModel& model, Link& link, SplitPolicy& policy,
                    const PipelineHooks& hooks, bool* stopped) {
  torch::NoGradGuard ng;
  auto ds = ex::open_dataset(spec.dataset);
  if (!ds) return std::move(ds.error());
  SendOptions so;
  if (!spec.auto_codec) {
    auto codec = CodecSpec::parse(spec.codec);
    if (!codec) return std::move(codec.error());
    so.codec = *codec;
  }
  so.chunk_bytes = spec.chunk_bytes;
  so.threads = spec.codec_threads;
  so.segment_bytes = spec.chunk_bytes;
  Pipeline p(spec, model, link, hooks, **ds, so);
  return p.run(policy, stopped);
}

}  // namespace tracr::agent
