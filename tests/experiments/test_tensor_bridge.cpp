#include <gtest/gtest.h>
#include <torch/torch.h>

#include "experiments/tensor_bridge.hpp"

namespace tracr::experiments {
namespace {

using protocol::DType;

struct DTypeCase {
  c10::ScalarType torch_type;
  DType wire;
};

class BridgeDTypes : public ::testing::TestWithParam<DTypeCase> {};

at::Tensor sample(c10::ScalarType t) {
  auto base = torch::arange(-12, 12, torch::kFloat).reshape({2, 3, 4}) * 1.5;
  if (t == c10::kBool) return base > 0;
  if (t == c10::kByte) return (base + 20).to(t);
  return base.to(t);
}

TEST_P(BridgeDTypes, RoundTripSharesMemoryAndKeepsValues) {
  const auto c = GetParam();
  const auto t = sample(c.torch_type);
  auto pt = to_protocol("x", t);
  ASSERT_TRUE(pt.ok()) << pt.error().str();
  EXPECT_EQ(pt->dtype, c.wire);
  EXPECT_EQ(pt->shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(pt->nbytes, 24 * protocol::dtype_size(c.wire));
  // No copy for a contiguous CPU tensor.
  EXPECT_EQ(static_cast<const void*>(pt->data), t.data_ptr());
  auto back = from_protocol(*pt);
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(back->scalar_type(), c.torch_type);
  EXPECT_EQ(back->data_ptr(), t.data_ptr());
  EXPECT_TRUE(torch::equal(*back, t));
}

INSTANTIATE_TEST_SUITE_P(
    AllDTypes, BridgeDTypes,
    ::testing::Values(DTypeCase{c10::kFloat, DType::float32}, DTypeCase{c10::kHalf, DType::float16},
                      DTypeCase{c10::kBFloat16, DType::bfloat16}, DTypeCase{c10::kChar, DType::int8},
                      DTypeCase{c10::kByte, DType::uint8}, DTypeCase{c10::kInt, DType::int32},
                      DTypeCase{c10::kLong, DType::int64}, DTypeCase{c10::kBool, DType::bool_},
                      DTypeCase{c10::kDouble, DType::float64}, DTypeCase{c10::kShort, DType::int16}),
    [](const auto& info) { return std::string(protocol::dtype_name(info.param.wire)); });

TEST(Bridge, ProtocolTensorKeepsTorchStorageAlive) {
  protocol::Tensor pt;
  {
    auto t = torch::full({1000}, 3.0f);
    auto r = to_protocol("x", t);
    ASSERT_TRUE(r.ok());
    pt = *r;
  }
  const float* f = reinterpret_cast<const float*>(pt.data);
  EXPECT_EQ(f[999], 3.0f);
}

TEST(Bridge, TorchTensorKeepsProtocolBytesAlive) {
  at::Tensor t;
  std::weak_ptr<uint8_t> weak;
  {
    auto pt = protocol::Tensor::allocate("y", DType::int32, {4});
    auto* p = reinterpret_cast<int32_t*>(pt.mutable_data());
    for (int i = 0; i < 4; ++i) p[i] = i * 7;
    weak = std::static_pointer_cast<uint8_t>(std::const_pointer_cast<void>(pt.keepalive));
    auto r = from_protocol(pt);
    ASSERT_TRUE(r.ok());
    t = *r;
  }
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(t[3].item<int32_t>(), 21);
  t = at::Tensor();
  EXPECT_TRUE(weak.expired());
}

TEST(Bridge, NonContiguousIsMadeContiguousOnce) {
  auto t = torch::arange(12, torch::kFloat).reshape({3, 4}).t();
  auto pt = to_protocol("t", t);
  ASSERT_TRUE(pt.ok());
  EXPECT_EQ(pt->shape, (std::vector<int64_t>{4, 3}));
  auto back = from_protocol(*pt);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(torch::equal(*back, t));
  EXPECT_TRUE(back->is_contiguous());
}

TEST(Bridge, SizeMismatchAndUnsupportedDTypeAreErrors) {
  std::vector<float> buf(5);
  auto pt = protocol::Tensor::view("bad", DType::float32, {2, 3}, buf.data());
  pt.nbytes = 5 * 4;
  auto r = from_protocol(pt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::size_mismatch);
  EXPECT_NE(r.error().message.find("'bad'"), std::string::npos);
  auto c = to_protocol("z", torch::zeros({2}, torch::kComplexFloat));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::unsupported_dtype);
  auto empty = protocol::Tensor::view("e", DType::float32, {0, 3}, nullptr);
  auto e = from_protocol(empty);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->numel(), 0);
}

TEST(Bridge, BundlesKeepNamesAndOrder) {
  Bundle b{{"a", torch::ones({2})}, {"b", torch::zeros({3}, torch::kLong)}};
  auto pb = to_protocol(b);
  ASSERT_TRUE(pb.ok());
  ASSERT_EQ(pb->size(), 2u);
  EXPECT_EQ((*pb)[1].name, "b");
  auto back = from_protocol(*pb);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)[0].name, "a");
  EXPECT_TRUE(torch::equal((*back)[1].tensor, b[1].tensor));
}

}  // namespace
}  // namespace tracr::experiments
