// The frame pipeline with a link that turns chosen replies into the server's
// ERROR: a failed frame is emitted with ok = 0, its error and its times, the
// run goes on, and it fails only past max_consecutive_failures in a row.
// Then every codec at every split of every zoo model through the frame path.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "agent/link_probe.hpp"
#include "agent/pipeline.hpp"
#include "experiments/registry.hpp"
#include "protocol/codec.hpp"
#include "experiments/tensor_bridge.hpp"
#include "protocol/frame.hpp"
#include "protocol/channel.hpp"
#include "agent/link.hpp"
#include "agent/command.hpp"

using namespace tracr;
using namespace tracr::agent;
using namespace tracr::wire;

namespace {

// Frames whose number is in `fail` come back as a server ERROR.
class FlakyLink : public Link {
 public:
  FlakyLink(std::unique_ptr<Link> inner, std::set<int> fail) : inner_(std::move(inner)), fail_(std::move(fail)) {}
  Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b, const protocol::Meta& meta,
              protocol::FrameStats* stats) override {
    return inner_->send(so, split, b, meta, stats);
  }
  Result<protocol::Frame> recv(int timeout_ms) override {
    auto f = inner_->recv(timeout_ms);
    if (f && fail_.count(n_++)) {
      f->header.type = protocol::MsgType::error;
      f->header.error = make_error(Errc::decompress_failed, "injected: the server could not decode this frame");
      f->header.meta.erase("srv_ns");
      f->tensors.clear();
    }
    return f;
  }
  std::string cipher() const override { return inner_->cipher(); }
  bool tail_in_send() const override { return true; }

 private:
  std::unique_ptr<Link> inner_;
  std::set<int> fail_;
  int n_ = 0;
};

struct Run {
  Status status;
  std::vector<FrameRecord> frames;
};

Run run_with_failures(std::set<int> fail, int max_consecutive) {
  ModelSpec ms{"alexnet", {{3, 64, 64}, 0, "cpu", "", 1}};
  auto model = load_model(ms);
  EXPECT_TRUE(model.ok());
  std::shared_ptr<experiments::SplitModel> m(std::move(*model));
  FlakyLink link(std::make_unique<InProcessLink>(std::make_unique<SegmentExecutor>(m), true), std::move(fail));
  ParticipantSpec ps;
  ps.model = ms;
  ps.dataset.input_shape = m->input_shape();
  ps.dataset.num_samples = 4;
  ps.max_samples = 4;
  ps.warmup = 0;
  ps.reps = 2;
  ps.max_consecutive_failures = max_consecutive;
  SweepPolicy policy({5}, 0, 2);
  Run r;
  PipelineHooks hooks;
  hooks.emit = [&](const FrameRecord& f) { r.frames.push_back(f); };
  r.status = run_pipeline(ps, *m, link, policy, hooks);
  return r;
}

}  // namespace

TEST(Pipeline, AFailedFrameIsRecordedAndTheRunGoesOn) {
  auto r = run_with_failures({2, 3}, 3);
  ASSERT_TRUE(r.status.ok()) << r.status.error().str();
  ASSERT_EQ(r.frames.size(), 8u);
  for (const auto& f : r.frames) {
    const bool bad = f.frame == 2 || f.frame == 3;
    EXPECT_EQ(f.ok, bad ? 0 : 1) << "frame " << f.frame;
    if (bad) {
      EXPECT_NE(f.error.find("injected"), std::string::npos) << f.error;
      EXPECT_EQ(f.result, "");
      EXPECT_NE(f.flags.find("no_server_time"), std::string::npos) << f.flags;
    } else {
      EXPECT_EQ(f.flags.find("no_server_time"), std::string::npos) << f.flags;
    }
    // Every frame, failed or not, keeps the identity and its measured times.
    EXPECT_EQ(identity_residual(f), 0) << "frame " << f.frame;
    EXPECT_GT(f.head_ns, 0);
    EXPECT_EQ(f.end_ns - f.start_ns, f.total_ns);
  }
}

TEST(Pipeline, TooManyFailuresInARowEndTheRun) {
  auto r = run_with_failures({1, 2, 3, 4, 5, 6, 7}, 2);
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(r.status.error().message.find("3 frames in a row failed"), std::string::npos) << r.status.error().str();
  // Frame 0 ok, then the three failures that ended it, all emitted.
  ASSERT_EQ(r.frames.size(), 4u);
  EXPECT_EQ(r.frames[0].ok, 1);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(r.frames[i].ok, 0);
}

// Every codec at every split of every zoo model, through the real frame
// path: FrameWriter, AES-256-GCM, FrameReader with the receiver's limits
// (the ones a SERVER applies), as a request's crossing tensors travel.
// Each frame is taken, never refused by a limit (VGG's flatten cut under
// int8_channel once was, at 25,088 channels), lossless codecs give the head's
// tensors bit for bit and lossy ones finite tensors of the same shape; the
// tail then runs on what the `none` frame delivered and gives the unsplit
// outputs bit for bit. 32x32 inputs (alexnet 64x64, fmnist_cnn its 28x28)
// keep it short; the crossing tensors' channels do not depend on the size.
TEST(Pipeline, EveryCodecAtEverySplitOfEveryZooModelGoesThroughTheFramePath) {
  const std::vector<std::pair<std::string, bool>> codecs = {
      {"none", true},          {"sparse", true},       {"blosc-lz4", true},        {"blosc-zstd:level=3,shuffle=bit", true},
      {"sparse+blosc-lz4", true}, {"fp16", false},     {"bf16", false},            {"int8", false},
      {"int8_channel", false}, {"fp16+sparse+blosc-zstd", false}, {"int8_channel+sparse+blosc-lz4", false}};
  torch::NoGradGuard ng;
  protocol::FrameWriter w;
  protocol::FrameReader r;
  protocol::Key256 key{};
  protocol::Iv96 iv{};
  key.fill(7);
  iv.fill(9);
  ASSERT_TRUE(w.set_key(key, iv).ok());
  ASSERT_TRUE(r.set_key(key, iv).ok());
  int frames = 0;
  for (const auto& name : experiments::list_models()) {
    if (name.rfind("torchscript:", 0) == 0) continue;
    const std::vector<int64_t> shape = name == "fmnist_cnn" ? std::vector<int64_t>{}
                                       : name == "alexnet"  ? std::vector<int64_t>{3, 64, 64}
                                                            : std::vector<int64_t>{3, 32, 32};
    ModelSpec ms{name, {shape, 0, "cpu", "", 1}};
    auto loaded = load_model(ms);
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.error().str();
    const auto& m = **loaded;
    std::vector<int64_t> in_shape = {2};
    for (auto d : m.input_shape()) in_shape.push_back(d);
    const at::Tensor x = torch::randn(in_shape, torch::TensorOptions().dtype(torch::kFloat));
    const int n = m.num_layers();
    auto full = m.run(0, n, experiments::SplitModel::input_bundle(x));
    ASSERT_TRUE(full.ok()) << name << ": " << full.error().str();
    auto want = experiments::to_protocol(*full);
    ASSERT_TRUE(want.ok()) << want.error().str();
    for (int k = 0; k <= n; ++k) {
      auto head = m.run(0, k, experiments::SplitModel::input_bundle(x));
      ASSERT_TRUE(head.ok()) << name << " split " << k << ": " << head.error().str();
      auto pb = experiments::to_protocol(*head);
      ASSERT_TRUE(pb.ok()) << pb.error().str();
      for (const auto& [codec, lossless] : codecs) {
        const std::string where = name + " split " + std::to_string(k) + " codec " + codec;
        protocol::SendOptions so;
        auto spec = protocol::CodecSpec::parse(codec);
        ASSERT_TRUE(spec.ok()) << codec << ": " << spec.error().str();
        so.codec = *spec;
        protocol::Header h;
        h.type = protocol::MsgType::infer_request;
        h.split = k;
        std::vector<protocol::Segment> segs;
        auto st = w.write(h, *pb, so, [&](protocol::Segment&& seg) {
          segs.push_back(std::move(seg));
          return Status{};
        });
        ASSERT_TRUE(st.ok()) << where << ": " << st.error().str();
        std::vector<Result<protocol::Frame>> got;
        for (auto& seg : segs)
          for (auto& f : r.feed(seg)) got.push_back(std::move(f));
        ASSERT_EQ(got.size(), 1u) << where;
        ASSERT_TRUE(got[0].ok()) << where << ": " << got[0].error().str();
        const auto& f = *got[0];
        ASSERT_EQ(f.tensors.size(), pb->size()) << where;
        for (size_t i = 0; i < pb->size(); ++i) {
          const auto& t = f.tensors[i];
          const auto& ref = (*pb)[i];
          ASSERT_EQ(t.name, ref.name) << where;
          ASSERT_EQ(t.shape, ref.shape) << where << " tensor " << ref.name;
          if (lossless) {
            ASSERT_EQ(t.nbytes, ref.nbytes) << where;
            ASSERT_EQ(std::memcmp(t.data, ref.data, ref.nbytes), 0) << where << " tensor " << ref.name << " differs";
          } else {
            auto tt = experiments::from_protocol(t);
            ASSERT_TRUE(tt.ok()) << tt.error().str();
            if (tt->is_floating_point()) {
              ASSERT_TRUE(torch::isfinite(*tt).all().item<bool>()) << where << " " << ref.name;
            }
          }
        }
        if (codec == "none") {  // the tail on what the frame delivered
          auto in = experiments::from_protocol(f.tensors);
          ASSERT_TRUE(in.ok()) << in.error().str();
          auto tail = m.run(k, n, std::move(*in));
          ASSERT_TRUE(tail.ok()) << where << ": " << tail.error().str();
          auto out = experiments::to_protocol(*tail);
          ASSERT_TRUE(out.ok() && out->size() == want->size()) << where;
          for (size_t i = 0; i < want->size(); ++i)
            ASSERT_EQ(std::memcmp((*out)[i].data, (*want)[i].data, (*want)[i].nbytes), 0) << where << " output " << i;
        }
        ++frames;
      }
    }
  }
  std::printf("[ codecs ] %d frames: every codec at every split of every zoo model\n", frames);
  EXPECT_GT(frames, 1000);
}

namespace {

// Replies are named (meta req_seq): this link loses the reply to frame
// `lose` (its request never reached the server, say) and delivers the
// reply to frame `dup` a second time, just before the next one. It does not
// run the tail inside send, so the pipeline keeps frames in flight.
class LossyLink : public Link {
 public:
  LossyLink(std::unique_ptr<Link> inner, int lose, int dup) : inner_(std::move(inner)), lose_(lose), dup_(dup) {}
  Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b, const protocol::Meta& meta,
              protocol::FrameStats* stats) override {
    return inner_->send(so, split, b, meta, stats);
  }
  Result<protocol::Frame> recv(int timeout_ms) override {
    if (stray_) {
      auto s = std::move(*stray_);
      stray_.reset();
      return s;
    }
    auto f = inner_->recv(timeout_ms);
    if (!f) return f;
    const int n = n_++;
    if (n == lose_) return make_error(Errc::timeout, "lost");
    if (n == dup_) {
      protocol::Frame copy;
      copy.header = f->header;
      stray_ = std::move(copy);
    }
    return f;
  }
  std::string cipher() const override { return inner_->cipher(); }
  bool tail_in_send() const override { return false; }

 private:
  std::unique_ptr<Link> inner_;
  int lose_, dup_;
  int n_ = 0;
  std::optional<protocol::Frame> stray_;
};

struct LossyRun {
  Status status;
  std::vector<FrameRecord> frames;  // in frame order
  std::vector<std::string> events;
};

LossyRun run_lossy(int lose, int dup) {
  ModelSpec ms{"alexnet", {{3, 64, 64}, 0, "cpu", "", 1}};
  auto model = load_model(ms);
  EXPECT_TRUE(model.ok());
  std::shared_ptr<experiments::SplitModel> m(std::move(*model));
  LossyLink link(std::make_unique<InProcessLink>(std::make_unique<SegmentExecutor>(m), true), lose, dup);
  ParticipantSpec ps;
  ps.model = ms;
  ps.dataset.input_shape = m->input_shape();
  ps.dataset.num_samples = 8;
  ps.max_samples = 8;
  ps.warmup = 0;
  ps.reps = 1;
  ps.inflight = 4;
  ps.timeout_ms = 2000;
  SweepPolicy policy({5}, 0, 1);
  LossyRun r;
  PipelineHooks hooks;
  hooks.emit = [&](const FrameRecord& f) { r.frames.push_back(f); };
  hooks.event = [&](const std::string& kind, int64_t, const Command*, const std::string& msg) {
    r.events.push_back(kind + ": " + msg);
  };
  r.status = run_pipeline(ps, *m, link, policy, hooks);
  std::sort(r.frames.begin(), r.frames.end(), [](const auto& a, const auto& b) { return a.frame < b.frame; });
  return r;
}

}  // namespace

// A request whose reply never comes is recorded failed (no_reply) when the
// reply to a later one arrives, and a reply delivered twice is dropped
// (event stray_reply): every other frame gets its own answer, the same as
// in a run without loss.
TEST(Pipeline, RepliesAreMatchedToTheirRequestsByReqSeq) {
  const LossyRun clean = run_lossy(-1, -1);
  ASSERT_TRUE(clean.status.ok()) << clean.status.error().str();
  const LossyRun r = run_lossy(2, 4);
  ASSERT_TRUE(r.status.ok()) << r.status.error().str();
  ASSERT_EQ(clean.frames.size(), 8u);
  ASSERT_EQ(r.frames.size(), 8u);
  for (size_t i = 0; i < r.frames.size(); ++i) {
    const auto& f = r.frames[i];
    EXPECT_EQ(f.frame, static_cast<int64_t>(i));
    EXPECT_EQ(f.ok, i == 2 ? 0 : 1) << "frame " << i << ": " << f.error;
    if (f.ok) {
      ASSERT_FALSE(f.result.empty());
      EXPECT_EQ(f.result, clean.frames[i].result) << "frame " << i << " took another frame's answer";
    }
    EXPECT_EQ(f.total_ns, f.head_ns + f.encode_ns + f.network_ns + f.server_ns + f.queue_ns + f.return_ns + f.post_ns);
  }
  EXPECT_EQ(r.frames[2].flags, "no_reply");
  EXPECT_NE(r.frames[2].error.find("no reply from the server to request"), std::string::npos) << r.frames[2].error;
  size_t stray = 0;
  for (const auto& e : r.events) stray += e.rfind("stray_reply: ", 0) == 0;
  EXPECT_EQ(stray, 1u) << ::testing::PrintToString(r.events);
}

namespace {

// A server whose session table holds one session and evicts one idle for
// 1 s; it answers probe echoes (as every tracr server does) and nothing
// else.
struct OneSessionServer {
  zmq::context_t& ctx;
  std::unique_ptr<protocol::Server> server;
  std::thread th;
  std::atomic<bool> stop{false};
  explicit OneSessionServer(zmq::context_t& c) : ctx(c) {
    protocol::ChannelOptions o;
    o.security.secret.assign(32, 9);
    o.max_peers = 1;
    o.evict_idle_ms = 1000;
    auto s = protocol::Server::bind(ctx, "tcp://127.0.0.1:0", o);
    EXPECT_TRUE(s.ok());
    server = std::move(*s);
    th = std::thread([this] {
      while (!stop) {
        auto in = server->recv(20);
        if (!in || in->frame.header.type != protocol::MsgType::probe) continue;
        (void)server->send(in->peer, protocol::MsgType::probe_reply, in->frame.header.split, {}, in->frame.header.meta);
      }
    });
  }
  ~OneSessionServer() {
    stop = true;
    th.join();
  }
};

protocol::ChannelOptions client_options() {
  protocol::ChannelOptions o;
  o.security.secret.assign(32, 9);
  o.handshake_timeout_ms = 1000;
  return o;
}

// Participant A paused for 2.5 s on a full server (one session): B's HELLO at
// 1.5 s finds A idle past evict_idle_ms unless A keeps itself alive (every
// 100 ms: a tenth of the limit, so a loaded machine's delays do not matter). Returns
// whether B got a session.
bool second_session_while_paused(int keepalive_ms) {
  zmq::context_t ctx;
  OneSessionServer srv(ctx);
  auto a = protocol::Client::connect(ctx, srv.server->endpoint(), client_options());
  EXPECT_TRUE(a.ok()) << a.error().str();
  NetworkLink link(std::move(*a));
  ModelSpec ms{"alexnet", {{3, 64, 64}, 0, "cpu", "", 1}};
  auto model = load_model(ms);
  EXPECT_TRUE(model.ok());
  ParticipantSpec ps;
  ps.model = ms;
  ps.dataset.input_shape = (*model)->input_shape();
  ps.dataset.num_samples = 1;
  ps.max_samples = 1;
  ps.warmup = 0;
  ps.keepalive_ms = keepalive_ms;
  SweepPolicy policy({5}, 0, 1);
  PipelineHooks hooks;
  const auto t0 = std::chrono::steady_clock::now();
  bool paused = false;
  hooks.poll = [&] {
    std::vector<Command> out;
    Command c;
    if (!paused) {
      c.kind = Command::Kind::pause;
      out.push_back(c);
      paused = true;
    } else if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(2500)) {
      out.push_back(c);  // stop
    }
    return out;
  };
  Status st;
  std::thread run([&] { st = run_pipeline(ps, **model, link, policy, hooks); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto b = protocol::Client::connect(ctx, srv.server->endpoint(), client_options());
  run.join();
  EXPECT_TRUE(st.ok()) << st.error().str();
  return b.ok();
}

}  // namespace

// #46: a session its controller paused (or holds in lockstep) is not the
// idle one a full server evicts: the participant sends an echo every
// keepalive_ms while it waits. Without it the paused session gives way.
TEST(Pipeline, APausedSessionKeepsItselfAliveOnAFullServer) {
  EXPECT_FALSE(second_session_while_paused(100)) << "the paused session was evicted";
  EXPECT_TRUE(second_session_while_paused(0)) << "the control: an idle session gives way";
}
