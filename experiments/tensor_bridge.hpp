// torch::Tensor <-> protocol::Tensor without copying payloads.
//   to_protocol: moves to CPU and makes contiguous (at most one copy, none
//   when the tensor is already a contiguous CPU tensor); the protocol tensor's
//   keepalive owns the torch tensor.
//   from_protocol: wraps the bytes with from_blob; the torch tensor's deleter
//   holds the protocol tensor's keepalive. The bytes are shared, not copied:
//   writing to the torch tensor writes the received buffer.
#pragma once

#include <string>

#include "experiments/model.hpp"
#include "protocol/tensor.hpp"

namespace tracr::experiments {

// Error unsupported_dtype for dtypes without a protocol name (complex, ...).
Result<protocol::Tensor> to_protocol(const std::string& name, const at::Tensor& t);
Result<protocol::Bundle> to_protocol(const Bundle& b);

// Error size_mismatch when nbytes != numel * dtype size, invalid_argument for
// a null data pointer with nbytes > 0 or negative dims.
Result<at::Tensor> from_protocol(const protocol::Tensor& t);
Result<Bundle> from_protocol(const protocol::Bundle& b);

}  // namespace tracr::experiments
