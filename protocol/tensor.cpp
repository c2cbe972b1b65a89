#include "protocol/tensor.hpp"

#include <cstdlib>
#include <limits>

namespace tracr::protocol {

namespace {
struct DTypeInfo {
  DType d;
  std::string_view name;
  size_t size;
  bool is_float;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::float32, "float32", 4, true}, {DType::float16, "float16", 2, true},
    {DType::bfloat16, "bfloat16", 2, true}, {DType::int8, "int8", 1, false},
    {DType::uint8, "uint8", 1, false},     {DType::int32, "int32", 4, false},
    {DType::int64, "int64", 8, false},     {DType::bool_, "bool", 1, false},
    {DType::float64, "float64", 8, true},  {DType::int16, "int16", 2, false},
};
const DTypeInfo& info(DType d) {
  for (const auto& i : kDTypes)
    if (i.d == d) return i;
  return kDTypes[0];
}
}  // namespace

std::string_view dtype_name(DType d) { return info(d).name; }
size_t dtype_size(DType d) { return info(d).size; }
bool dtype_is_float(DType d) { return info(d).is_float; }

std::optional<DType> dtype_from_name(std::string_view s) {
  for (const auto& i : kDTypes)
    if (i.name == s) return i.d;
  return std::nullopt;
}

Bytes Bytes::allocate(size_t n) {
  Bytes b;
  size_t rounded = (n + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  b.p_ = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
  b.n_ = n;
  return b;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

Tensor Tensor::allocate(std::string name, DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.nbytes = static_cast<size_t>(t.numel()) * dtype_size(dtype);
  Bytes b = Bytes::allocate(t.nbytes);
  t.data = b.data();
  t.keepalive = b.shared();
  return t;
}

Tensor Tensor::view(std::string name, DType dtype, std::vector<int64_t> shape, const void* data,
                    std::shared_ptr<const void> keepalive) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.nbytes = static_cast<size_t>(t.numel()) * dtype_size(dtype);
  t.data = static_cast<const uint8_t*>(data);
  t.keepalive = std::move(keepalive);
  return t;
}

Result<int64_t> checked_numel(const std::vector<int64_t>& shape, int64_t max_elems) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d < 0)
      return make_error(Errc::limit_exceeded,
                        "dimension " + std::to_string(i) + " is negative (" + std::to_string(d) + ")");
    if (d != 0 && n > max_elems / d)
      return make_error(Errc::limit_exceeded, "shape has more than " + std::to_string(max_elems) +
                                                  " elements");
    n *= d;
  }
  if (n > max_elems)
    return make_error(Errc::limit_exceeded,
                      "shape has more than " + std::to_string(max_elems) + " elements");
  return n;
}

}  // namespace tracr::protocol
