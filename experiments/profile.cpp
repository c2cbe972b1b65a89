#include "experiments/profile.hpp"

#include "protocol/stats.hpp"

#include <fmt/core.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

namespace tracr::experiments {
namespace {

int64_t status_field_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t klen = std::strlen(key);
  while (std::getline(f, line)) {
    if (line.compare(0, klen, key) == 0 && line.size() > klen && line[klen] == ':') {
      return std::strtoll(line.c_str() + klen + 1, nullptr, 10);
    }
  }
  return -1;
}

void sync(const c10::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

}  // namespace

int64_t current_rss_bytes() {
  const int64_t kb = status_field_kb("VmRSS");
  return kb < 0 ? -1 : kb * 1024;
}

int64_t peak_rss_bytes() {
  const int64_t kb = status_field_kb("VmHWM");
  return kb < 0 ? -1 : kb * 1024;
}

bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

Result<std::vector<LayerProfile>> profile_layers(const SplitModel& model, const at::Tensor& input,
                                                 const ProfileOptions& opts) {
  if (opts.repetitions < 1 || opts.warmup < 0)
    return make_error(Errc::invalid_argument, "profile: repetitions must be >= 1 and warmup >= 0");
  torch::NoGradGuard no_grad;
  const auto dev = model.device();
  Bundle bundle = SplitModel::input_bundle(input.to(dev));
  const int64_t batch = input.size(0);
  const bool can_reset = opts.measure_memory && reset_peak_rss();
  std::vector<LayerProfile> out;
  for (int i = 0; i < model.num_layers(); ++i) {
    const LayerInfo& li = model.layers()[i];
    LayerProfile p;
    p.index = i;
    p.name = li.name;
    p.type = li.type;
    p.device = dev.str();
    p.repetitions = opts.repetitions;
    p.params = li.params;
    p.macs = li.macs * batch;
    for (const auto& nt : bundle)
      if (std::find(li.inputs.begin(), li.inputs.end(), nt.name) != li.inputs.end())
        p.input_bytes += nt.tensor.numel() * static_cast<int64_t>(nt.tensor.element_size());

    for (int w = 0; w < opts.warmup; ++w) {
      auto r = model.run_for_timing(i, i + 1, bundle);
      if (!r) return r.error();
    }
    if (can_reset) {
      sync(dev);
      reset_peak_rss();
      const int64_t before = current_rss_bytes();
      auto r = model.run_for_timing(i, i + 1, bundle);
      if (!r) return r.error();
      sync(dev);
      const int64_t peak = peak_rss_bytes();
      p.peak_rss_delta_bytes = (before < 0 || peak < 0) ? -1 : std::max<int64_t>(0, peak - before);
    }
    std::vector<double> ms;
    Bundle next;
    for (int r = 0; r < opts.repetitions; ++r) {
      sync(dev);
      const auto t0 = std::chrono::steady_clock::now();
      auto res = model.run_for_timing(i, i + 1, bundle);
      sync(dev);
      const auto t1 = std::chrono::steady_clock::now();
      if (!res) return res.error();
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      if (r + 1 == opts.repetitions) next = std::move(*res);
    }
    if (opts.after_layer) {
      // Energy (the agent's meters) repeats the layer as long as it needs.
      Status failed;
      opts.after_layer(i, [&] {
        auto res = model.run_for_timing(i, i + 1, bundle);
        sync(dev);
        if (!res && failed) failed = res.error();
      });
      if (!failed) return failed.error();
    }
    const size_t n = ms.size();
    p.median_ms = protocol::median_of(ms);  // sorts ms
    p.p95_ms = protocol::p95_of(ms);
    p.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / n;
    p.min_ms = ms.front();
    for (const auto& nt : next)
      if (nt.name == li.name)
        p.output_bytes = nt.tensor.numel() * static_cast<int64_t>(nt.tensor.element_size());
    bundle = std::move(next);
    out.push_back(std::move(p));
  }
  return out;
}

Result<std::vector<SegmentProfile>> profile_segments(const SplitModel& model, const at::Tensor& input,
                                                     const std::vector<int>& splits, bool heads,
                                                     const ProfileOptions& opts) {
  if (opts.repetitions < 1 || opts.warmup < 0)
    return make_error(Errc::invalid_argument, "profile: repetitions must be >= 1 and warmup >= 0");
  torch::NoGradGuard no_grad;
  const auto dev = model.device();
  const int n = model.num_layers();
  const Bundle in = SplitModel::input_bundle(input.to(dev));
  std::vector<SegmentProfile> out;
  for (int k : splits) {
    if (k < 0 || k > n || (heads && k == 0) || (!heads && k == n) || !model.split_refusal(k).empty()) continue;
    Bundle seg_in = in;
    if (!heads) {
      auto h = model.run(0, k, in);
      if (!h) return make_error(h.error().code, fmt::format("segment [0,{}): {}", k, h.error().message));
      seg_in = std::move(*h);
    }
    const int a = heads ? 0 : k, b = heads ? k : n;
    std::vector<double> ms;
    for (int r = 0; r < opts.warmup + opts.repetitions; ++r) {
      sync(dev);
      const auto t0 = std::chrono::steady_clock::now();
      auto res = model.run(a, b, seg_in);
      sync(dev);
      const auto t1 = std::chrono::steady_clock::now();
      if (!res) return make_error(res.error().code, fmt::format("segment [{},{}): {}", a, b, res.error().message));
      if (r >= opts.warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    SegmentProfile p;
    p.split = k;
    p.head = heads;
    p.device = dev.str();
    p.repetitions = opts.repetitions;
    p.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
    p.median_ms = protocol::median_of(ms);
    p.p95_ms = protocol::p95_of(ms);
    out.push_back(p);
  }
  return out;
}

std::vector<SplitEstimate> split_table(const SplitModel& model,
                                       const std::vector<LayerProfile>& profiles, int64_t batch) {
  std::vector<SplitEstimate> out;
  const int n = model.num_layers();
  double total = 0;
  for (const auto& p : profiles) total += p.median_ms;
  double head = 0;
  for (int k = 0; k <= n; ++k) {
    if (k > 0 && k - 1 < static_cast<int>(profiles.size())) head += profiles[k - 1].median_ms;
    SplitEstimate s;
    s.split = k;
    s.head_ms = head;
    s.tail_ms = std::max(0.0, total - head);
    const auto cross = model.crossing(k);
    s.crossing_tensors = static_cast<int>(cross.size());
    for (const auto& c : cross) s.crossing_bytes += c.bytes * batch;
    s.last_head_layer = k > 0 ? model.layers()[k - 1].name : "";
    out.push_back(std::move(s));
  }
  return out;
}

std::string format_layer_profiles(const std::vector<LayerProfile>& profiles) {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%4s  %-28s %-18s %10s %10s %12s %12s %12s\n", "idx", "layer", "type",
                "median_ms", "p95_ms", "out_bytes", "MACs", "peak_rss_d");
  o << buf;
  for (const auto& p : profiles) {
    std::snprintf(buf, sizeof buf, "%4d  %-28s %-18s %10.3f %10.3f %12lld %12lld %12lld\n", p.index,
                  p.name.c_str(), p.type.c_str(), p.median_ms, p.p95_ms,
                  static_cast<long long>(p.output_bytes), static_cast<long long>(p.macs),
                  static_cast<long long>(p.peak_rss_delta_bytes));
    o << buf;
  }
  return o.str();
}

std::string format_split_table(const std::vector<SplitEstimate>& splits) {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%5s  %-28s %10s %10s %14s %8s\n", "split", "last head layer", "head_ms",
                "tail_ms", "crossing_bytes", "tensors");
  o << buf;
  for (const auto& s : splits) {
    std::snprintf(buf, sizeof buf, "%5d  %-28s %10.3f %10.3f %14lld %8d\n", s.split,
                  s.split == 0 ? "(input)" : s.last_head_layer.c_str(), s.head_ms, s.tail_ms,
                  static_cast<long long>(s.crossing_bytes), s.crossing_tensors);
    o << buf;
  }
  return o.str();
}

}  // namespace tracr::experiments
