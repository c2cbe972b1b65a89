#include "experiments/tensor_bridge.hpp"

#include <torch/torch.h>

namespace tracr::experiments {

Result<protocol::Tensor> to_protocol(const std::string& name, const at::Tensor& t) {
  if (!t.defined()) return make_error(Errc::invalid_argument, "tensor '" + name + "' is undefined");
  auto dt = to_protocol_dtype(t.scalar_type());
  if (!dt) return make_error(dt.error().code, "tensor '" + name + "': " + dt.error().message);
  at::Tensor c = t.device().is_cpu() ? t : t.to(c10::kCPU);
  c = c.contiguous();
  auto owner = std::make_shared<at::Tensor>(c);
  return protocol::Tensor::view(name, *dt, c.sizes().vec(), c.data_ptr(),
                                std::shared_ptr<const void>(owner, owner->data_ptr()));
}

Result<protocol::Bundle> to_protocol(const Bundle& b) {
  protocol::Bundle out;
  out.reserve(b.size());
  for (const auto& nt : b) {
    auto t = to_protocol(nt.name, nt.tensor);
    if (!t) return t.error();
    out.push_back(std::move(*t));
  }
  return out;
}

Result<at::Tensor> from_protocol(const protocol::Tensor& t) {
  int64_t numel = 1;
  for (int64_t d : t.shape) {
    if (d < 0)
      return make_error(Errc::invalid_argument, "tensor '" + t.name + "' has a negative dimension");
    numel *= d;
  }
  const size_t expect = static_cast<size_t>(numel) * protocol::dtype_size(t.dtype);
  if (expect != t.nbytes)
    return make_error(Errc::size_mismatch, "tensor '" + t.name + "' has " +
                                               std::to_string(t.nbytes) + " bytes, expected " +
                                               std::to_string(expect) + " for its shape and dtype");
  const auto opts = torch::TensorOptions().dtype(to_torch_dtype(t.dtype));
  if (numel == 0) return torch::empty(t.shape, opts);
  if (!t.data)
    return make_error(Errc::invalid_argument, "tensor '" + t.name + "' has no data");
  std::shared_ptr<const void> keep = t.keepalive;
  return torch::from_blob(const_cast<uint8_t*>(t.data), t.shape,
                          [keep](void*) mutable { keep.reset(); }, opts);
}

Result<Bundle> from_protocol(const protocol::Bundle& b) {
  Bundle out;
  out.reserve(b.size());
  for (const auto& pt : b) {
    auto t = from_protocol(pt);
    if (!t) return t.error();
    out.push_back({pt.name, std::move(*t)});
  }
  return out;
}

}  // namespace tracr::experiments
