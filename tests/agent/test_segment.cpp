// The segment executor behind every hop of a chain: a request runs layers
// [split, last), last from its meta.last (PROTOCOL.md 3.4), N without one.
// Two hops through the real frame path (InProcessLink: the FrameWriter /
// FrameReader pair, encrypted) give the unsplit model's outputs bit for bit
// at every placement, and a request whose end is out of range is refused
// naming it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "agent/link.hpp"
#include "experiments/tensor_bridge.hpp"
#include "protocol/meta_keys.hpp"

using namespace tracr;
using namespace tracr::agent;

namespace {

std::shared_ptr<experiments::SplitModel> alexnet() {
  auto m = load_model(ModelSpec{"alexnet", {{3, 64, 64}, 0, "cpu", "", 1}});
  EXPECT_TRUE(m.ok()) << m.error().str();
  return std::shared_ptr<experiments::SplitModel>(std::move(*m));
}

// One request through a hop: send, then the hop's one reply.
Result<protocol::Frame> through(Link& hop, int split, const experiments::Bundle& in, const protocol::Meta& meta) {
  auto pb = experiments::to_protocol(in);
  if (!pb) return std::move(pb.error());
  TRACR_TRY(hop.send(protocol::SendOptions{}, split, *pb, meta, nullptr));
  return hop.recv(1000);
}

std::vector<std::string> names_of(const protocol::Bundle& b) {
  std::vector<std::string> v;
  for (const auto& t : b) v.push_back(t.name);
  return v;
}

std::vector<std::string> crossing_names(const experiments::SplitModel& m, int k) {
  std::vector<std::string> v;
  for (const auto& t : m.crossing(k)) v.push_back(t.name);
  return v;
}

}  // namespace

TEST(Segment, EveryPlacementOfAlexNetOverTwoHopsIsTheUnsplitModelBitForBit) {
  auto m = alexnet();
  torch::NoGradGuard ng;
  torch::manual_seed(0);
  const at::Tensor x = torch::rand({1, 3, 64, 64});
  auto whole = m->forward(x);
  ASSERT_TRUE(whole.ok()) << whole.error().str();
  InProcessLink edge(std::make_unique<SegmentExecutor>(m), true), cloud(std::make_unique<SegmentExecutor>(m), true);
  const int n = m->num_layers();
  int placements = 0;
  for (int k1 = 0; k1 <= n; ++k1) {
    auto head = m->run(0, k1, experiments::SplitModel::input_bundle(x));
    ASSERT_TRUE(head.ok()) << head.error().str();
    for (int k2 = k1; k2 <= n; ++k2) {
      SCOPED_TRACE("placement " + std::to_string(k1) + "|" + std::to_string(k2));
      auto mid = through(edge, k1, *head, {{protocol::meta_key::kLast, int64_t{k2}}});
      ASSERT_TRUE(mid.ok()) << mid.error().str();
      ASSERT_EQ(mid->header.type, protocol::MsgType::infer_result) << mid->header.error->str();
      // The middle's reply names its end and carries exactly what crosses it.
      ASSERT_TRUE(mid->header.meta.count(protocol::meta_key::kLast));
      EXPECT_EQ(std::get<int64_t>(mid->header.meta.at(protocol::meta_key::kLast)), k2);
      EXPECT_EQ(names_of(mid->tensors), crossing_names(*m, k2));
      auto mid_t = experiments::from_protocol(mid->tensors);
      ASSERT_TRUE(mid_t.ok()) << mid_t.error().str();
      auto out = through(cloud, k2, *mid_t, {});
      ASSERT_TRUE(out.ok()) << out.error().str();
      ASSERT_EQ(out->header.type, protocol::MsgType::infer_result) << out->header.error->str();
      // A request without meta.last runs to N and its reply has no last: today's two-tier replies.
      EXPECT_FALSE(out->header.meta.count(protocol::meta_key::kLast));
      auto got = experiments::from_protocol(out->tensors);
      ASSERT_TRUE(got.ok()) << got.error().str();
      ASSERT_EQ(got->size(), whole->size());
      for (size_t i = 0; i < got->size(); ++i) EXPECT_TRUE(torch::equal((*got)[i].tensor, (*whole)[i].tensor));
      ++placements;
    }
  }
  EXPECT_EQ(placements, (n + 1) * (n + 2) / 2);  // 276 for AlexNet's 22 layers
}

TEST(Segment, AnEndOutsideTheSegmentsRangeIsRefusedNamingIt) {
  auto m = alexnet();
  torch::NoGradGuard ng;
  const at::Tensor x = torch::rand({1, 3, 64, 64});
  auto head = m->run(0, 5, experiments::SplitModel::input_bundle(x));
  ASSERT_TRUE(head.ok());
  InProcessLink hop(std::make_unique<SegmentExecutor>(m), true);
  const int n = m->num_layers();
  struct Case {
    protocol::MetaValue last;
    Errc code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {int64_t{4}, Errc::invalid_argument, "meta.last 4 is outside [split 5, " + std::to_string(n) + "]"},
      {int64_t{n + 1}, Errc::invalid_argument, "meta.last " + std::to_string(n + 1) + " is outside"},
      {std::string("13"), Errc::field_type, "meta.last must be an integer"},
  };
  for (const auto& c : cases) {
    auto r = through(hop, 5, *head, {{protocol::meta_key::kLast, c.last}});
    ASSERT_TRUE(r.ok()) << r.error().str();
    ASSERT_EQ(r->header.type, protocol::MsgType::error);
    ASSERT_TRUE(r->header.error.has_value());
    EXPECT_EQ(r->header.error->code, c.code);
    EXPECT_NE(r->header.error->message.find(c.says), std::string::npos) << r->header.error->message;
  }
  // last = split: an empty segment, the crossing tensors come back as they went.
  auto same = through(hop, 5, *head, {{protocol::meta_key::kLast, int64_t{5}}});
  ASSERT_TRUE(same.ok());
  ASSERT_EQ(same->header.type, protocol::MsgType::infer_result);
  EXPECT_EQ(names_of(same->tensors), crossing_names(*m, 5));
}
