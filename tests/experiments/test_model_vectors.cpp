// PROTOCOL.md section 9, "A real model split": the tensors that cross a
// split of a zoo model (names, dtypes, shapes) and the header of the
// INFER_REQUEST tracr sends for them, read from the spec's vectors block and
// recomputed here from the model itself, so a peer written from the spec
// sends what the real SERVER accepts. TRACR_PRINT_VECTORS=1 prints them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "experiments/registry.hpp"
#include "experiments/tensor_bridge.hpp"
#include "protocol/crypto.hpp"
#include "protocol/frame.hpp"
#include "spec_vectors.hpp"
#include "test_util.hpp"

using namespace tracr;
using namespace tracr::experiments;

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}

std::string crossing_text(const SplitModel& model, int k) {
  std::string crossing;
  for (const auto& t : model.crossing(k))
    crossing += (crossing.empty() ? "" : " ") + t.name + ":" + std::string(protocol::dtype_name(t.dtype)) + ":" +
                shape_text(t.shape);
  return crossing;
}

// Part 0 of the INFER_REQUEST for `tensors` at split k, and the frame's payload part count: plain session 7;
// the participant's first INFER_REQUEST is its seq 3 (HELLO was 1, the key-confirming HEARTBEAT 2). Codec
// none, default chunking.
std::pair<std::string, size_t> request_header(int k, const protocol::Bundle& tensors, const protocol::Meta& meta = {}) {
  protocol::FrameWriter w;
  w.set_session(7);
  std::vector<protocol::Segment> segs;
  auto sink = [&](protocol::Segment&& s) {
    segs.push_back(std::move(s));
    return Status{};
  };
  protocol::Header skip;
  skip.type = protocol::MsgType::heartbeat;
  EXPECT_TRUE(w.write(skip, {}, {}, sink).ok());
  EXPECT_TRUE(w.write(skip, {}, {}, sink).ok());
  segs.clear();
  protocol::Header h;
  h.type = protocol::MsgType::infer_request;
  h.split = k;
  h.meta = meta;
  EXPECT_TRUE(w.write(h, tensors, {}, sink).ok());
  if (segs.size() != 1) {
    ADD_FAILURE() << "expected one segment, got " << segs.size();
    return {};
  }
  return {protocol::to_hex(static_cast<const uint8_t*>(segs[0][0].data()), segs[0][0].size()), segs[0].size() - 1};
}

// A small module of scripts/trace_graph_model.py at [3, 4, 4], node granularity, optimize false.
Result<std::unique_ptr<SplitModel>> traced_test_module(const std::string& name) {
  const std::string dir = std::string(TRACR_BINARY_DIR) + "/traced_models";
  const std::string file = dir + "/" + name + "@4.pt";
  if (!std::filesystem::exists(file)) {
    std::filesystem::create_directories(dir);
    if (test::run_python(test::script("trace_graph_model.py") + " " + dir + " " + name + "@4") != 0)
      return make_error(Errc::io, "trace_graph_model.py " + name + " failed");
  }
  ModelConfig cfg;
  cfg.input_shape = {3, 4, 4};
  cfg.device = "cpu";
  cfg.optimize = false;
  cfg.granularity = "node";
  return create_model("torchscript:" + file, cfg);
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
    check(pre + ".crossing", crossing_text(model, k));
    // What the participant computes and sends for this split: the head's
    // output bundle, in crossing order.
    auto head = model.run(0, k, SplitModel::input_bundle(input));
    ASSERT_TRUE(head.ok()) << head.error().str();
    auto pb = to_protocol(*head);
    ASSERT_TRUE(pb.ok());
    const auto [header, parts] = request_header(k, *pb);
    check(pre + ".header", header);
    check(pre + ".parts", std::to_string(parts));
    // The real SERVER's tail takes exactly these names: the section 9
    // frame's `x` is not one of them.
    auto tail = model.run(k, model.num_layers(), *head);
    ASSERT_TRUE(tail.ok()) << tail.error().str();
    auto wrong = model.run(k, model.num_layers(), {{"x", (*head)[0].tensor}});
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.error().message.find("'x' does not cross split " + std::to_string(k)), std::string::npos)
        << wrong.error().message;
  }
  // A middle segment (3.4, meta.last): the split-6 tensors sent to run [6, 13);
  // what comes back is what crosses split 13.
  auto head = model.run(0, 6, SplitModel::input_bundle(input));
  ASSERT_TRUE(head.ok()) << head.error().str();
  auto pb = to_protocol(*head);
  ASSERT_TRUE(pb.ok());
  check("model.resnet18_64.segment6_13.header", request_header(6, *pb, {{"last", int64_t{13}}}).first);
  check("model.resnet18_64.split13.crossing", crossing_text(model, 13));
  // Forwarding (3.4): placement 6|13|20 on three devices. The first middle
  // device gets split 6 with last 13 and then "20"; it sends split 13 with
  // last 20 and then "" to the next, which runs [13, 20) and forwards split
  // 20 with neither key to the last device.
  check("model.resnet18_64.forward6_13_20.header",
        request_header(6, *pb, {{"last", int64_t{13}}, {"then", std::string("20")}}).first);
  auto mid = model.run(6, 13, *head);
  ASSERT_TRUE(mid.ok()) << mid.error().str();
  std::string got;
  for (const auto& t : *mid) got += (got.empty() ? "" : " ") + t.name;
  std::string want;
  for (const auto& t : model.crossing(13)) want += (want.empty() ? "" : " ") + t.name;
  EXPECT_EQ(got, want);
  auto mid_pb = to_protocol(*mid);
  ASSERT_TRUE(mid_pb.ok());
  check("model.resnet18_64.forward13_20.header",
        request_header(13, *mid_pb, {{"last", int64_t{20}}, {"then", std::string()}}).first);
}

namespace {

// The section 9 vectors of the small graph module `name` cut at k (`split_key` names k): its layer count, the
// crossing names, dtypes and shapes, an integer's payload where one crosses, and the INFER_REQUEST header;
// then the tail on the head's output against the unsplit module, bit for bit.
void check_graph_cut(tracr::testing::SpecCheck& check, SplitModel& model, const std::string& name,
                     const std::string& split_key, int k) {
  const std::string base = "model." + name + "_4";
  check(base + ".layers", std::to_string(model.num_layers()));
  check(base + "." + split_key, std::to_string(k));
  const std::string pre = base + ".split" + std::to_string(k);
  check(pre + ".crossing", crossing_text(model, k));
  torch::manual_seed(0);
  const auto input = torch::rand({1, 3, 4, 4});
  auto head = model.run(0, k, SplitModel::input_bundle(input));
  ASSERT_TRUE(head.ok()) << head.error().str();
  auto pb = to_protocol(*head);
  ASSERT_TRUE(pb.ok());
  for (const auto& t : *pb)
    if (t.dtype == protocol::DType::int64) check(pre + ".int_payload", protocol::to_hex(t.data, t.nbytes));
  const auto [header, parts] = request_header(k, *pb);
  check(pre + ".header", header);
  check(pre + ".parts", std::to_string(parts));
  // The tail rebuilds what crossed (the integer, the list) and gives the unsplit module's output.
  auto tail = model.run(k, model.num_layers(), *head);
  ASSERT_TRUE(tail.ok()) << tail.error().str();
  auto whole = model.run(0, model.num_layers(), SplitModel::input_bundle(input));
  ASSERT_TRUE(whole.ok()) << whole.error().str();
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_TRUE(torch::equal((*tail)[0].tensor, (*whole)[0].tensor));
}

}  // namespace

// A graph model whose cut carries an integer (PROTOCOL.md 3.4: a 0-dim int64
// tensor, shape [], no batch dimension): flatten_int (scripts/
// trace_graph_model.py, a 1x1 convolution, y.view(y.size(0), -1), a linear
// layer) at input [3, 4, 4], node granularity, optimize false, cut between
// aten::size and the view. The integer's payload is the batch size, so its
// bytes are a vector; the float tensor's bytes depend on the LibTorch build.
TEST(ModelVectors, AnIntegerCrossingAGraphCutMatchesTheSpec) {
  tracr::testing::SpecCheck check;
  auto m = traced_test_module("flatten_int");
  ASSERT_TRUE(m.ok()) << m.error().str();
  int k = -1;
  for (int i = 0; i <= (*m)->num_layers() && k < 0; ++i)
    for (const auto& t : (*m)->crossing(i))
      if (t.dtype == protocol::DType::int64 && t.shape.empty()) k = i;
  ASSERT_GE(k, 0) << "no cut of flatten_int carries an integer";
  check_graph_cut(check, **m, "flatten_int", "int_split", k);
}

// A graph model whose cut carries a tensor's shape only (PROTOCOL.md 3.4, #46 item 3): size_late (scripts/
// trace_graph_model.py: a strided convolution, a 1x1 convolution, a bilinear upsample to the input's height and
// width) at input [3, 4, 4], node granularity, optimize false, first cut after which the input is read only for
// its size: the input crosses as "input:shape", int64 [4], payload 1, 3, 4, 4, not as its 192 bytes of floats;
// the tail rebuilds a tensor of that shape for the size reads and gives the unsplit module's output.
TEST(ModelVectors, AShapeOnlyCrossingAGraphCutMatchesTheSpec) {
  tracr::testing::SpecCheck check;
  auto m = traced_test_module("size_late");
  ASSERT_TRUE(m.ok()) << m.error().str();
  int k = -1;
  for (int i = 0; i <= (*m)->num_layers() && k < 0; ++i)
    for (const auto& t : (*m)->crossing(i))
      if (t.name == "input:shape") k = i;
  ASSERT_GE(k, 0) << "no cut of size_late carries the input's shape";
  for (const auto& t : (*m)->crossing(k)) EXPECT_NE(t.name, "input") << "the input's values cross split " << k;
  check_graph_cut(check, **m, "size_late", "shape_split", k);
}

// A graph model whose cut carries a list (PROTOCOL.md 3.4: its elements NAME[0], NAME[1], in order, rebuilt by
// the receiver): cat_list (scripts/trace_graph_model.py: two 1x1 convolutions concatenated, then a third) at
// input [3, 4, 4], node granularity, optimize false, cut between prim::ListConstruct and aten::cat. The names,
// dtypes, shapes and the request's header are vectors; the float payloads depend on the LibTorch build.
TEST(ModelVectors, AListCrossingAGraphCutMatchesTheSpec) {
  tracr::testing::SpecCheck check;
  auto m = traced_test_module("cat_list");
  ASSERT_TRUE(m.ok()) << m.error().str();
  int k = -1;
  for (int i = 0; i <= (*m)->num_layers() && k < 0; ++i)
    for (const auto& t : (*m)->crossing(i))
      if (t.name.size() > 3 && t.name.compare(t.name.size() - 3, 3, "[1]") == 0) k = i;
  ASSERT_GE(k, 0) << "no cut of cat_list carries a list";
  check_graph_cut(check, **m, "cat_list", "list_split", k);
}
