// Tensors as the protocol sees them: dtype, shape and contiguous row-major
// bytes. No LibTorch here; experiments/ converts torch::Tensor to and from
// these views without copying.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/error.hpp"

namespace tracr::protocol {

enum class DType : uint8_t {
  float32 = 0,
  float16 = 1,
  bfloat16 = 2,
  int8 = 3,
  uint8 = 4,
  int32 = 5,
  int64 = 6,
  bool_ = 7,
  float64 = 8,
  int16 = 9,
};

// Wire name: "float32", "float16", "bfloat16", "int8", "uint8", "int32",
// "int64", "bool", "float64", "int16".
std::string_view dtype_name(DType d);
// Parses a wire name; nullopt for anything else.
std::optional<DType> dtype_from_name(std::string_view s);
size_t dtype_size(DType d);
bool dtype_is_float(DType d);

// Heap bytes aligned to 64, shared between owners (a received tensor, a
// LibTorch tensor wrapping it with from_blob, ...). Uninitialised on creation.
class Bytes {
 public:
  Bytes() = default;
  static Bytes allocate(size_t n);
  uint8_t* data() const { return p_.get(); }
  size_t size() const { return n_; }
  const std::shared_ptr<uint8_t>& shared() const { return p_; }

 private:
  std::shared_ptr<uint8_t> p_;
  size_t n_ = 0;
};

// A named tensor. `data` points at nbytes contiguous bytes kept alive by
// `keepalive` (or by the caller for the duration of a send when it is null).
struct Tensor {
  std::string name;
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<const void> keepalive;

  // Allocates nbytes = numel * dtype_size uninitialised, owned by the tensor.
  static Tensor allocate(std::string name, DType dtype, std::vector<int64_t> shape);
  // Wraps caller memory; `keepalive` (may be null) holds it alive.
  static Tensor view(std::string name, DType dtype, std::vector<int64_t> shape,
                     const void* data, std::shared_ptr<const void> keepalive = {});
  // Writable pointer of a tensor made by allocate().
  uint8_t* mutable_data() const { return const_cast<uint8_t*>(data); }
  int64_t numel() const;
};

// The named tensors that cross a split (several when skip connections cross).
using Bundle = std::vector<Tensor>;

// Product of dims; error if any dim is negative or the product overflows
// `max_elems`.
Result<int64_t> checked_numel(const std::vector<int64_t>& shape, int64_t max_elems);

}  // namespace tracr::protocol
