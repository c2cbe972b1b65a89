#include "agent/segment.hpp"

#include <torch/torch.h>

#include <fmt/format.h>

#include "agent/timing.hpp"
#include "experiments/registry.hpp"
#include "experiments/tensor_bridge.hpp"
#include "protocol/meta_keys.hpp"
#include "wire/identity.hpp"

namespace tracr::agent {

using namespace tracr::protocol;
using namespace tracr::wire;
namespace ex = tracr::experiments;

void sync_device(const c10::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

Result<std::unique_ptr<ex::SplitModel>> load_model(const ModelSpec& spec) {
  return ex::create_model(spec.name, spec.config);
}

std::string model_fingerprint(const ex::SplitModel& m) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& nt : m.state_dict()) {
    h = fnv1a(nt.name.data(), nt.name.size(), h);
    at::Tensor t = nt.tensor.detach().to(torch::kCPU).contiguous();
    for (auto d : t.sizes()) h = fnv1a(&d, sizeof d, h);
    h = fnv1a(t.data_ptr(), t.numel() * t.element_size(), h);
  }
  // How the model executes (graph models: as traced or optimized).
  if (m.execution() != "layers") h = fnv1a(m.execution().data(), m.execution().size(), h);
  return fmt::format("{:016x}", h);
}

SegmentExecutor::SegmentExecutor(std::shared_ptr<ex::SplitModel> model)
    : model_(std::move(model)), fingerprint_(model_fingerprint(*model_)) {}

Result<std::pair<Bundle, Meta>> SegmentExecutor::handle(const Frame& f) {
  const int n = model_->num_layers();
  const int k = f.header.split;
  if (k < 0 || k > n)
    return make_error(Errc::invalid_argument,
                      fmt::format("split {} is outside [0, {}] for model {}", k, n, model_->name()));
  int last = n;
  const auto last_it = f.header.meta.find(protocol::meta_key::kLast);
  if (last_it != f.header.meta.end()) {
    const auto* v = std::get_if<int64_t>(&last_it->second);
    if (!v)
      return make_error(Errc::field_type, "meta.last must be an integer: the layer the request's segment ends "
                                          "before (PROTOCOL.md 3.4)");
    if (*v < k || *v > n)
      return make_error(Errc::invalid_argument,
                        fmt::format("meta.last {} is outside [split {}, {}] for model {}", *v, k, n, model_->name()));
    last = static_cast<int>(*v);
  }
  if (auto it = f.header.meta.find(protocol::meta_key::kModelFp); it != f.header.meta.end()) {
    auto* fp = std::get_if<std::string>(&it->second);
    if (!fp || *fp != fingerprint_)
      return make_error(Errc::config, fmt::format("model mismatch: participant has {} fingerprint {}, "
                                                  "server has {} (same name, weights, input shape and seed needed)",
                                                  model_->name(), fp ? *fp : "?", fingerprint_));
  }
  auto in = ex::from_protocol(f.tensors);
  if (!in) return std::move(in.error());
  torch::NoGradGuard ng;
  std::optional<EnergyMeter::Mark> e0;
  if (energy_) e0 = energy_->mark();
  auto t0 = Clock::now();
  auto out = model_->run(k, last, std::move(*in));
  if (!out) return std::move(out.error());
  sync_device(model_->device());
  auto t1 = Clock::now();
  std::string srv_energy;
  if (energy_) {
    auto rows = energy_->between(*e0, energy_->mark(), 1);
    for (auto& r : rows) {
      r.side = "server";
      r.stage = "tail";
      r.split = k;
    }
    srv_energy = pack_energy(rows);
  }
  auto pb = ex::to_protocol(*out);
  if (!pb) return std::move(pb.error());
  Meta meta;
  meta[protocol::meta_key::kSrvDecodeNs] = f.stats.total_ns;
  meta[protocol::meta_key::kSrvTailNs] = ns_between(t0, t1);
  if (last_it != f.header.meta.end()) meta[protocol::meta_key::kLast] = static_cast<int64_t>(last);
  if (!srv_energy.empty()) meta[protocol::meta_key::kSrvEnergy] = srv_energy;
  // From the request's last segment to here, just before the reply is encoded.
  meta[protocol::meta_key::kSrvNs] = ns_between(Clock::time_point(std::chrono::nanoseconds(f.stats.last_segment_at_ns)), Clock::now());
  return std::make_pair(std::move(*pb), std::move(meta));
}

}  // namespace tracr::agent
