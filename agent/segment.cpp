#include "agent/segment.hpp"

#include <numeric>

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

Result<SegmentExecutor::Segment> SegmentExecutor::check(const Frame& f) const {
  const int n = model_->num_layers();
  const int k = f.header.split;
  if (k < 0 || k > n)
    return make_error(Errc::invalid_argument,
                      fmt::format("split {} is outside [0, {}] for model {}", k, n, model_->name()));
  Segment s{k, n, false};
  const auto last_it = f.header.meta.find(protocol::meta_key::kLast);
  if (last_it != f.header.meta.end()) {
    const auto* v = std::get_if<int64_t>(&last_it->second);
    if (!v)
      return make_error(Errc::field_type, "meta.last must be an integer: the layer the request's segment ends "
                                          "before (PROTOCOL.md 3.4)");
    if (*v < k || *v > n)
      return make_error(Errc::invalid_argument,
                        fmt::format("meta.last {} is outside [split {}, {}] for model {}", *v, k, n, model_->name()));
    s.last = static_cast<int>(*v);
    s.has_last = true;
  }
  if (auto it = f.header.meta.find(protocol::meta_key::kModelFp); it != f.header.meta.end()) {
    auto* fp = std::get_if<std::string>(&it->second);
    if (!fp || *fp != fingerprint_)
      return make_error(Errc::config, fmt::format("model mismatch: participant has {} fingerprint {}, "
                                                  "server has {} (same name, weights, input shape and seed needed)",
                                                  model_->name(), fp ? *fp : "?", fingerprint_));
  }
  return s;
}

Result<SegmentExecutor::Ran> SegmentExecutor::run_one(const Segment& s, ex::Bundle in) {
  torch::NoGradGuard ng;
  std::optional<EnergyMeter::Mark> e0;
  if (energy_) e0 = energy_->mark();
  Ran r;
  r.t0 = Clock::now();
  auto out = model_->run(s.k, s.last, std::move(in));
  if (!out) return std::move(out.error());
  sync_device(model_->device());
  r.tail_ns = ns_between(r.t0, Clock::now());
  if (energy_) r.energy = energy_->between(*e0, energy_->mark(), 1);
  r.outs.push_back(std::move(*out));
  return r;
}

namespace {

// The first dimension every tensor of a request shares (its samples), or -1.
int64_t rows_of(const ex::Bundle& b) {
  int64_t rows = -1;
  for (const auto& t : b) {
    if (t.tensor.dim() < 1) return -1;
    if (rows >= 0 && t.tensor.size(0) != rows) return -1;
    rows = t.tensor.size(0);
  }
  return rows;
}

// Whether two requests' tensors stack: same names, dtypes, devices and
// shapes beyond dimension 0.
bool stackable(const ex::Bundle& a, const ex::Bundle& b) {
  if (a.size() != b.size()) return false;
  for (size_t j = 0; j < a.size(); ++j) {
    const auto& x = a[j].tensor;
    const auto& y = b[j].tensor;
    if (a[j].name != b[j].name || x.scalar_type() != y.scalar_type() || x.device() != y.device() ||
        x.dim() != y.dim())
      return false;
    for (int64_t d = 1; d < x.dim(); ++d)
      if (x.size(d) != y.size(d)) return false;
  }
  return true;
}

// How far two outputs are apart, relative to the reference's scale: the
// stacked run against the same request alone.
bool same_answer(const ex::Bundle& stacked, const ex::Bundle& alone) {
  if (stacked.size() != alone.size()) return false;
  for (size_t j = 0; j < alone.size(); ++j) {
    const auto& x = stacked[j].tensor;
    const auto& y = alone[j].tensor;
    if (x.sizes() != y.sizes() || x.scalar_type() != y.scalar_type()) return false;
    if (!x.is_floating_point()) {
      if (!torch::equal(x, y)) return false;
      continue;
    }
    if (x.numel() == 0) continue;
    const double scale = y.abs().max().item<double>();
    const double diff = (x - y).abs().max().item<double>();
    // Batched kernels reorder sums: rounding, not another answer, within a
    // bound that follows the output's precision (fp16, bf16 are coarser).
    const double eps = x.scalar_type() == torch::kHalf ? 9.77e-4 : x.scalar_type() == torch::kBFloat16 ? 7.82e-3 : 1.2e-7;
    if (!(diff <= std::max(1e-3, 16 * eps) * (1.0 + scale))) return false;
  }
  return true;
}

}  // namespace

Result<std::optional<SegmentExecutor::Ran>> SegmentExecutor::run_stacked(const Segment& s,
                                                                         std::vector<ex::Bundle> ins) {
  std::vector<int64_t> rows;
  for (const auto& b : ins) {
    rows.push_back(rows_of(b));
    if (rows.back() < 0 || !stackable(ins.front(), b)) return std::optional<Ran>();
  }
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  ex::Bundle stacked;
  for (size_t j = 0; j < ins.front().size(); ++j) {
    std::vector<at::Tensor> parts;
    parts.reserve(ins.size());
    for (const auto& b : ins) parts.push_back(b[j].tensor);
    stacked.push_back({ins.front()[j].name, torch::cat(parts, 0)});
  }
  auto one = run_one(s, std::move(stacked));
  if (!one) return std::move(one.error());
  Ran r = std::move(*one);
  const ex::Bundle out = std::move(r.outs.front());
  r.outs.assign(ins.size(), {});
  for (const auto& o : out)
    if (o.tensor.dim() < 1 || o.tensor.size(0) != total)
      return make_error(Errc::invalid_argument,
                        fmt::format("its output '{}' does not carry the batch on dimension 0", o.name));
  int64_t at = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    for (const auto& o : out) r.outs[i].push_back({o.name, o.tensor.narrow(0, at, rows[i])});
    at += rows[i];
  }
  r.rows = std::move(rows);
  return std::optional<Ran>(std::move(r));
}

Result<std::pair<Bundle, Meta>> SegmentExecutor::make_reply(const Frame& f, const Segment& seg,
                                                            Clock::time_point ready, const Ran& ran,
                                                            const ex::Bundle& out, size_t frames, double share) {
  std::string srv_energy;
  if (!ran.energy.empty()) {
    auto rows = ran.energy;
    for (auto& e : rows) {
      e.side = "server";
      e.stage = "tail";
      e.split = seg.k;
      if (frames > 1) {
        if (e.joules) *e.joules *= share;
        if (e.net_joules) *e.net_joules *= share;
        e.flags += e.flags.empty() ? "batched" : ",batched";
      }
    }
    srv_energy = pack_energy(rows);
  }
  auto pb = ex::to_protocol(out);
  if (!pb) return std::move(pb.error());
  Meta meta;
  meta[protocol::meta_key::kSrvDecodeNs] = f.stats.total_ns;
  meta[protocol::meta_key::kSrvTailNs] = ran.tail_ns;
  meta[protocol::meta_key::kSrvBatch] = static_cast<int64_t>(frames);
  meta[protocol::meta_key::kSrvBatchWaitNs] = ns_between(ready, ran.t0);
  if (seg.has_last) meta[protocol::meta_key::kLast] = static_cast<int64_t>(seg.last);
  if (!srv_energy.empty()) meta[protocol::meta_key::kSrvEnergy] = srv_energy;
  // From the request's last segment to here, just before the reply is encoded.
  meta[protocol::meta_key::kSrvNs] = ns_since(f.stats.last_segment_at_ns);
  return std::make_pair(std::move(*pb), std::move(meta));
}

bool SegmentExecutor::same_alone(const Segment& seg, const std::vector<ex::Bundle>& ins, const Ran& batched) {
  for (size_t g = 0; g < ins.size(); ++g) {
    ex::Bundle copy;  // the model may work in place on its inputs: they serve again
    for (const auto& t : ins[g]) copy.push_back({t.name, t.tensor.clone()});
    auto one = run_one(seg, std::move(copy));
    if (!one || !same_answer(batched.outs[g], one->outs.front())) return false;
  }
  return true;
}

Result<std::pair<Bundle, Meta>> SegmentExecutor::handle(const Frame& f) {
  auto r = handle_batch({BatchItem{&f, Clock::now()}});
  return std::move(r.front());
}

std::vector<Result<std::pair<Bundle, Meta>>> SegmentExecutor::handle_batch(const std::vector<BatchItem>& items) {
  std::vector<Result<std::pair<Bundle, Meta>>> res(items.size(), make_error(Errc::internal, "not run"));
  // Each request checked and decoded on its own: one bad request fails alone.
  std::vector<size_t> live;
  std::vector<Segment> segs(items.size());
  std::vector<ex::Bundle> ins(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    auto sg = check(*items[i].frame);
    if (!sg) {
      res[i] = std::move(sg.error());
      continue;
    }
    auto in = ex::from_protocol(items[i].frame->tensors);
    if (!in) {
      res[i] = std::move(in.error());
      continue;
    }
    segs[i] = *sg;
    ins[i] = std::move(*in);
    live.push_back(i);
  }
  auto alone = [&](size_t i) {
    auto ran = run_one(segs[i], ins[i]);
    res[i] = ran ? make_reply(*items[i].frame, segs[i], items[i].ready, *ran, ran->outs.front(), 1, 1.0)
                 : Result<std::pair<Bundle, Meta>>(std::move(ran.error()));
  };
  // Requests for the same segment as the first live one are batched; the
  // rest (the serving loop groups by segment, so rarely any) run alone.
  std::vector<size_t> group;
  for (size_t i : live) {
    if (segs[i].k == segs[live.front()].k && segs[i].last == segs[live.front()].last)
      group.push_back(i);
    else
      alone(i);
  }
  const std::pair<int, int> key{group.empty() ? 0 : segs[group.front()].k, group.empty() ? 0 : segs[group.front()].last};
  const auto known = batchable_.find(key);
  if (group.size() < 2 || (known != batchable_.end() && !known->second)) {
    for (size_t i : group) alone(i);
    return res;
  }
  std::vector<ex::Bundle> group_in;
  for (size_t i : group) group_in.push_back(ins[i]);  // tensors share storage: no copy
  auto ran = run_stacked(segs[group.front()], group_in);
  if (ran && !*ran) {  // these requests' tensors do not stack: each alone
    for (size_t i : group) alone(i);
    return res;
  }
  // A segment that cannot run batched, or whose first batch answers otherwise
  // than its requests alone, runs unbatched from now on.
  std::string why;
  if (!ran)
    why = fmt::format("cannot run batched ({})", ran.error().message);
  else if (known == batchable_.end() && !same_alone(segs[group.front()], group_in, **ran))
    why = fmt::format("gives other answers batched than alone (its answers depend on the other samples of a batch, "
                      "or a value crossing cut {} does not carry the batch on dimension 0)",
                      key.first);
  batchable_[key] = why.empty();
  if (!why.empty()) {
    notes_.push_back(fmt::format("server.batch: segment [{}, {}) of {} {}: its requests run one by one", key.first,
                                 key.second, model_->name(), why));
    for (size_t i : group) alone(i);
    return res;
  }
  const Ran& r = **ran;
  const int64_t total_rows = std::accumulate(r.rows.begin(), r.rows.end(), int64_t{0});
  for (size_t g = 0; g < group.size(); ++g) {
    const size_t i = group[g];
    res[i] = make_reply(*items[i].frame, segs[i], items[i].ready, r, r.outs[g], group.size(),
                        total_rows > 0 ? static_cast<double>(r.rows[g]) / static_cast<double>(total_rows)
                                       : 1.0 / static_cast<double>(group.size()));
  }
  return res;
}

}  // namespace tracr::agent
