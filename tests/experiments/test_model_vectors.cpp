// PROTOCOL.md section 9, "A real model split": the tensors that cross a
// split of a zoo model (names, dtypes, shapes) and the header of the
// INFER_REQUEST tracr sends for them, read from the spec's vectors block and
// recomputed here from the model itself, so a peer written from the spec
// sends what the real SERVER accepts. TRACR_PRINT_VECTORS=1 prints them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "experiments/registry.hpp"
#include "experiments/tensor_bridge.hpp"
#include "protocol/crypto.hpp"
#include "protocol/frame.hpp"
#include "spec_vectors.hpp"

using namespace tracr;
using namespace tracr::experiments;

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}

}  // namespace

// resnet18 at input [3, 64, 64] (seed 0), batch 1: split 0 carries `input`,
// split 6 carries the block's skip connection beside the main path.
TEST(ModelVectors, Resnet18SplitsMatchTheSpec) {
  tracr::testing::SpecCheck check;
  ModelConfig cfg;
  cfg.input_shape = {3, 64, 64};
  cfg.device = "cpu";
  auto m = create_model("resnet18", cfg);
  ASSERT_TRUE(m.ok()) << m.error().str();
  SplitModel& model = **m;
  check("model.resnet18_64.layers", std::to_string(model.num_layers()));
  torch::manual_seed(0);
  const auto input = torch::rand({1, 3, 64, 64});
  for (int k : {0, 6}) {
    const std::string pre = "model.resnet18_64.split" + std::to_string(k);
    std::string crossing;
    for (const auto& t : model.crossing(k))
      crossing += (crossing.empty() ? "" : " ") + t.name + ":" + std::string(protocol::dtype_name(t.dtype)) + ":" +
                  shape_text(t.shape);
    check(pre + ".crossing", crossing);
    // What the participant computes and sends for this split: the head's
    // output bundle, in crossing order.
    auto head = model.run(0, k, SplitModel::input_bundle(input));
    ASSERT_TRUE(head.ok()) << head.error().str();
    auto pb = to_protocol(*head);
    ASSERT_TRUE(pb.ok());
    // Plain session 7; the participant's first INFER_REQUEST is its seq 3
    // (HELLO was 1, the key-confirming HEARTBEAT 2). Codec none, default chunking.
    protocol::FrameWriter w;
    w.set_session(7);
    std::vector<protocol::Segment> segs;
    auto sink = [&](protocol::Segment&& s) {
      segs.push_back(std::move(s));
      return Status{};
    };
    protocol::Header skip;
    skip.type = protocol::MsgType::heartbeat;
    ASSERT_TRUE(w.write(skip, {}, {}, sink).ok());
    ASSERT_TRUE(w.write(skip, {}, {}, sink).ok());
    segs.clear();
    protocol::Header h;
    h.type = protocol::MsgType::infer_request;
    h.split = k;
    ASSERT_TRUE(w.write(h, *pb, {}, sink).ok());
    ASSERT_EQ(segs.size(), 1u);
    check(pre + ".header", protocol::to_hex(static_cast<const uint8_t*>(segs[0][0].data()), segs[0][0].size()));
    check(pre + ".parts", std::to_string(segs[0].size() - 1));
    // The real SERVER's tail takes exactly these names: the section 9
    // frame's `x` is not one of them.
    auto tail = model.run(k, model.num_layers(), *head);
    ASSERT_TRUE(tail.ok()) << tail.error().str();
    auto wrong = model.run(k, model.num_layers(), {{"x", (*head)[0].tensor}});
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.error().message.find("'x' does not cross split " + std::to_string(k)), std::string::npos)
        << wrong.error().message;
  }
}
