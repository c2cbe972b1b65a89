// The frame pipeline with a link that turns chosen replies into the server's
// ERROR: a failed frame is emitted with ok = 0, its error and its times, the
// run goes on, and it fails only past max_consecutive_failures in a row.
#include <gtest/gtest.h>

#include <set>

#include "agent/runner.hpp"

using namespace tracr;
using namespace tracr::agent;

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
  ModelSpec ms{"alexnet", "", {3, 64, 64}, 0, "cpu", 1};
  auto model = load_model(ms);
  EXPECT_TRUE(model.ok());
  std::shared_ptr<experiments::SplitModel> m(std::move(*model));
  FlakyLink link(std::make_unique<InProcessLink>(std::make_unique<TailExecutor>(m), true), std::move(fail));
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
