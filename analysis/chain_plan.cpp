#include "analysis/chain_plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/energy.hpp"
#include "analysis/memory_need.hpp"
#include "analysis/plan.hpp"
#include "core/text.hpp"
#include "protocol/stats.hpp"
#include "settings/config.hpp"
#include "store/statement.hpp"
#include "wire/placement.hpp"

namespace tracr::analysis {

using namespace tracr::store;

namespace {

// Prefix sums of one device's layer means (ms): sum over [a, b) = at(b) - at(a).
struct LayerSums {
  std::vector<double> prefix{0.0};
  double over(int a, int b) const { return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)]; }
};

Result<LayerSums> layer_sums(const std::vector<LayerProfileRecord>& profiles, const std::string& device, int run_id,
                             int* layers) {
  std::vector<const LayerProfileRecord*> mine;
  for (const auto& p : profiles)
    if (p.device == device) mine.push_back(&p);
  if (mine.empty())
    return make_error(Errc::not_found,
                      fmt::format("run {} has no layer profiles of {}: plan a chain from a run with record.layers: "
                                  "true (the default), which every device of the chain profiles",
                                  run_id, device));
  std::sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->layer_index < b->layer_index; });
  if (*layers < 0) *layers = static_cast<int>(mine.size());
  if (static_cast<int>(mine.size()) != *layers)
    return make_error(Errc::invalid_argument, fmt::format("run {}: {} profiled {} layers, the PARTICIPANT {}", run_id,
                                                          device, mine.size(), *layers));
  LayerSums s;
  for (const auto* p : mine)
    s.prefix.push_back(s.prefix.back() + static_cast<double>(p->mean_ns.value_or(p->median_ns)) / 1e6);
  return s;
}

double median_field(const HopSummary& h, const char* f) {
  auto it = h.median.find(f);
  return it == h.median.end() ? 0.0 : it->second;
}

// What the run measured on hop h: per placement's median, the points the
// link and own terms are fitted to, and the bytes at each cut it crossed.
struct HopFit {
  std::string device;
  std::vector<std::pair<double, double>> link_pts, own_pts;  // (wire bytes, ms)
  std::map<int, double> bytes_at;                            // cut -> median wire bytes
  double wire = 0, raw = 0;                                  // summed medians: the codec's ratio
  std::vector<std::pair<double, double>> codec_pts;            // (wire bytes, encode + reply decode ms)
  std::pair<double, double> link{0, 0}, own{0, 0}, codec{0, 0};
  double ratio() const { return raw > 0 ? wire / raw : 1.0; }
};

double input_bytes_of(const std::vector<LayerProfileRecord>& profiles) {
  // The input crossing cut 0: C x H x W float32 per sample (profiled shape, batch).
  for (const auto& p : profiles) {
    double n = 4.0 * static_cast<double>(std::max<int64_t>(p.batch, 1));
    for (const auto& d : wire::split_on(p.input_shape, ',')) n *= d.empty() ? 1.0 : std::atof(d.c_str());
    return n;
  }
  return 0;
}

// The hops' fits from the run's frame_hops medians; the devices in order.
Status fit_hops(ResultsDb& db, int64_t run_id, ChainPlan& p, std::map<int64_t, HopFit>& fit) {
  auto hops = db.hop_summaries(run_id);
  if (!hops) return std::move(hops.error());
  if (hops->empty())
    return make_error(Errc::invalid_argument, fmt::format("run {} has no chain frames (frame_hops): it ran two tiers, "
                                                          "which `tracrctl plan` plans by split", run_id));
  for (const auto& h : *hops) {
    HopFit& f = fit[h.hop];
    f.device = h.device;
    const double bytes = median_field(h, "in_wire_bytes");
    f.link_pts.push_back({bytes, (median_field(h, "send_encode_ns") + median_field(h, "network_ns") +
                                  median_field(h, "reply_decode_ns")) / 1e6});
    f.own_pts.push_back({bytes, median_field(h, "other_ns") / 1e6});
    f.codec_pts.push_back(
        {bytes, (median_field(h, "send_encode_ns") + median_field(h, "reply_decode_ns")) / 1e6});
    f.bytes_at[h.cuts[static_cast<size_t>(h.hop - 1)]] = bytes;
    f.wire += bytes;
    f.raw += median_field(h, "in_raw_bytes");
  }
  for (auto& [h, f] : fit) {
    p.devices.push_back(f.device);
    f.link = fit_cost_line(f.link_pts);
    f.own = fit_cost_line(f.own_pts);
    f.codec = fit_cost_line(f.codec_pts);
    p.fits.push_back(fmt::format("hop {} ({} -> {}): encode + network + reply decode {:.3f} ms + {:.4f} ms/KB; {}'s "
                                 "other {:.3f} ms + {:.4f} ms/KB; wire/raw {:.3f} (fitted to {} placements' medians)",
                                 h, p.devices[static_cast<size_t>(h - 1)], f.device, f.link.first, f.link.second * 1e3,
                                 f.device, f.own.first, f.own.second * 1e3, f.ratio(), f.link_pts.size()));
  }
  return {};
}

// Every device's layer sums and the bytes each cut's outputs take.
Status profile_sums(ResultsDb& db, int64_t run_id, ChainPlan& p, std::vector<LayerSums>& sums,
                    std::vector<double>& out_bytes) {
  auto profiles = db.layer_profiles(run_id);
  if (!profiles) return std::move(profiles.error());
  int n = -1;
  for (const auto& dev : p.devices) {
    auto s = layer_sums(*profiles, dev, static_cast<int>(run_id), &n);
    if (!s) return std::move(s.error());
    sums.push_back(std::move(*s));
  }
  p.layers = n;
  out_bytes.assign(static_cast<size_t>(n) + 1, 0.0);
  out_bytes[0] = input_bytes_of(*profiles);
  p.layer_weight_bytes.assign(static_cast<size_t>(n), 0.0);
  for (const auto& pr : *profiles)
    if (pr.device == p.devices.front() && pr.layer_index >= 0 && pr.layer_index < n) {
      out_bytes[static_cast<size_t>(pr.layer_index) + 1] = static_cast<double>(pr.out_bytes);
      p.layer_weight_bytes[static_cast<size_t>(pr.layer_index)] = 4.0 * static_cast<double>(pr.params);
    }
  return {};
}

// Each device's need of placement r and whether all fit their limits.
void check_memory(const ChainPlan& p, const MemoryNeed& need, int n, ChainPlanRow& r) {
  for (size_t d = 0; d < p.devices.size(); ++d) {
    const int a = d == 0 ? 0 : r.cuts[d - 1], b = d < r.cuts.size() ? r.cuts[d] : n;
    r.memory_mb.push_back(need.bytes(a, b) / 1e6);
    if (d < p.memory_limit_mb.size() && p.memory_limit_mb[d] && r.memory_mb.back() > *p.memory_limit_mb[d])
      r.fits = false;
  }
}

ChainPlanRow predict(const wire::Placement& pl, const std::map<int64_t, HopFit>& fit, const std::vector<LayerSums>& sums,
                     const std::vector<double>& out_bytes, double post_ms, int n) {
  const size_t m = fit.size();
  ChainPlanRow r;
  r.cuts = pl.cuts;
  r.placement = pl.text();
  r.head_ms = sums[0].over(0, r.cuts[0]);
  r.post_ms = post_ms;
  r.latency_ms = r.head_ms + post_ms;
  double slowest = r.head_ms;
  for (size_t h = 1; h <= m; ++h) {
    const HopFit& f = fit.at(static_cast<int64_t>(h));
    const int k = r.cuts[h - 1], end = h < m ? r.cuts[h] : n;
    auto at = f.bytes_at.find(k);
    const double bytes = at != f.bytes_at.end() ? at->second : out_bytes[static_cast<size_t>(k)] * f.ratio();
    r.bytes_from += std::string(h > 1 ? "," : "") + (at != f.bytes_at.end() ? "measured" : "profiled x ratio");
    r.wire_bytes.push_back(bytes);
    r.link_ms.push_back(f.link.first + f.link.second * bytes);
    r.compute_ms.push_back(sums[h].over(k, end));
    r.own_ms.push_back(f.own.first + f.own.second * bytes);
    r.latency_ms += r.link_ms.back() + r.compute_ms.back() + r.own_ms.back();
    slowest = std::max({slowest, r.link_ms.back(), r.compute_ms.back() + r.own_ms.back()});
  }
  r.fps = slowest > 0 ? 1e3 / slowest : 0;
  return r;
}

// The error when every placement exceeds a device's memory limit: each
// limited device's smallest need over the placements.
Error no_placement_fits(const ChainPlan& p) {
  std::vector<std::string> least;
  for (size_t d = 0; d < p.devices.size() && d < p.memory_limit_mb.size(); ++d) {
    if (!p.memory_limit_mb[d]) continue;
    double lo = std::numeric_limits<double>::infinity();
    for (const auto& r : p.rows) lo = std::min(lo, r.memory_mb[d]);
    least.push_back(fmt::format("{} memory_mb {:g} (its smallest segment needs {:.1f} MB)", p.devices[d],
                                *p.memory_limit_mb[d], lo));
  }
  return make_error(Errc::invalid_argument,
                    fmt::format("no placement of {} over {} fits the devices' memory: {}; raise memory_mb in the "
                                "devices file or plan another chain",
                                p.model, fmt::join(p.devices, " -> "), fmt::join(least, ", ")));
}

// Every placement predicted (p.devices and p.layers set), each checked
// against the run's measured median where it has one.
Status predict_all(ChainPlan& p, const std::map<int64_t, HopFit>& fit, const std::vector<LayerSums>& sums,
                   const std::vector<double>& out_bytes, double post_ms,
                   const std::map<std::vector<int>, double>& measured) {
  const size_t m = fit.size();
  if (wire::placement_count(m, p.layers) > 2'000'000)
    return make_error(Errc::invalid_argument, fmt::format("{} placements of {} cuts over {} layers: too many to "
                                                          "predict one by one", wire::placement_count(m, p.layers), m,
                                                          p.layers));
  double err_sum = 0;
  const bool limited = std::any_of(p.memory_limit_mb.begin(), p.memory_limit_mb.end(),
                                   [](const auto& l) { return l.has_value(); });
  std::optional<MemoryNeed> need;
  if (limited) need.emplace(p.layer_weight_bytes, out_bytes);
  std::optional<size_t> chosen;
  for (const auto& pl : wire::all_placements(m, p.layers)) {
    ChainPlanRow r = predict(pl, fit, sums, out_bytes, post_ms, p.layers);
    if (need) check_memory(p, *need, p.layers, r);
    if (!r.fits) ++p.over_memory;
    if (auto it = measured.find(r.cuts); it != measured.end()) {
      r.measured_ms = it->second;
      r.error_pct = (r.latency_ms - it->second) / it->second * 100.0;
      err_sum += std::fabs(*r.error_pct);
      ++p.measured;
      if (!p.measured_best || it->second < *p.rows[*p.measured_best].measured_ms) p.measured_best = p.rows.size();
    }
    if (r.fits && (!chosen || r.latency_ms < p.rows[*chosen].latency_ms)) chosen = p.rows.size();
    p.rows.push_back(std::move(r));
  }
  if (!chosen) return no_placement_fits(p);
  p.chosen = *chosen;
  if (limited)
    p.fits.push_back(fmt::format("memory limits: {}; a device's need = its segment's weights (params x 4 B) + its "
                                 "largest live activations (a layer's input + output bytes, profiled); {} of {} "
                                 "placements exceed a limit and are not chosen",
                                 p.memory_from, p.over_memory, p.rows.size()));
  if (p.measured > 0) p.mape_pct = err_sum / p.measured;
  if (p.measured_best && p.rows[p.chosen].measured_ms)
    p.miss_pct = (*p.rows[p.chosen].measured_ms / *p.rows[*p.measured_best].measured_ms - 1.0) * 100.0;
  return {};
}

// A run's median total per placement (chain frames only), and the
// participant's post + queue medians.
Status measured_medians(ResultsDb& db, int64_t run_id, std::map<std::vector<int>, double>& measured,
                        std::vector<double>* post) {
  auto table = db.split_table(run_id);
  if (!table) return std::move(table.error());
  for (const auto& s : *table) {
    if (s.frames <= 0 || !s.chained()) continue;
    if (post) post->push_back((s.stage("post_ns").median_ns + s.stage("queue_ns").median_ns) / 1e6);
    measured[s.cuts] = s.stage("total_ns").median_ns / 1e6;
  }
  return {};
}

// Each device's compute scaled to the run's frames: the ratio of its
// measured segment medians (the PARTICIPANT's head, hop h's compute) to the
// profiled layer sums over the same layers, summed over the run's placements.
// Layers profiled one by one pay per-call costs a whole segment shares (a
// CPU quota's waits, above all: ResNet-18's phone layers summed 121.5 ms
// where frames took 65-68 ms); a device whose measured segments' layers sum
// under kMinScaleMs, or under kMinScaleShare of the whole model's sum over
// as many placements, keeps its profiles (too little to judge a ratio: a
// few tail layers' fixed per-call cost would scale every layer).
constexpr double kMinScaleMs = 1.0, kMinScaleShare = 0.1;
Status scale_by_frames(ResultsDb& db, int64_t run_id, ChainPlan& p, std::vector<LayerSums>& sums) {
  std::vector<double> measured(sums.size(), 0.0), profiled(sums.size(), 0.0);
  auto table = db.split_table(run_id);
  if (!table) return std::move(table.error());
  double placements = 0;
  for (const auto& s : *table)
    if (s.frames > 0 && s.chained()) {
      measured[0] += s.stage("head_ns").median_ns / 1e6;
      profiled[0] += sums[0].over(0, s.cuts[0]);
      ++placements;
    }
  auto hops = db.hop_summaries(run_id);
  if (!hops) return std::move(hops.error());
  for (const auto& h : *hops) {
    const auto d = static_cast<size_t>(h.hop);
    if (d == 0 || d >= sums.size() || h.cuts.size() + 1 < sums.size() || !h.median.count("compute_ns")) continue;
    measured[d] += median_field(h, "compute_ns") / 1e6;
    profiled[d] += sums[d].over(h.cuts[d - 1], d < h.cuts.size() ? h.cuts[d] : p.layers);
  }
  std::vector<std::string> said;
  for (size_t d = 0; d < sums.size(); ++d) {
    // The layers measured must be a real share of the device's placements' sum (runs x its whole profile).
    const double whole = sums[d].over(0, p.layers) * placements;
    if (profiled[d] < kMinScaleMs || profiled[d] < kMinScaleShare * whole) {
      said.push_back(fmt::format("{} x1 (the layers of its measured segments profile {:.3f} ms in all, {:.1f} % of "
                                 "the whole model as often: too little to judge)",
                                 p.devices[d], profiled[d], whole > 0 ? profiled[d] / whole * 100.0 : 0.0));
      continue;
    }
    const double scale = measured[d] / profiled[d];
    for (double& v : sums[d].prefix) v *= scale;
    said.push_back(fmt::format("{} x{:.3f} ({:.1f} ms measured / {:.1f} ms profiled)", p.devices[d], scale,
                               measured[d], profiled[d]));
  }
  p.fits.push_back(fmt::format("compute scaled to run {}'s frames, per device (its segments' measured medians over "
                               "the same layers' profiled sum, all placements of the run): {}",
                               run_id, fmt::join(said, ", ")));
  return {};
}

// Each hop's probe line over `runs`: the median over them of the hop's probe
// (the sending device's) smallest round trip (ms) and ms per byte at its
// rate up; nullopt for a hop one of the runs did not probe with a rate.
using ProbeLine = std::optional<std::pair<double, double>>;
Result<std::vector<ProbeLine>> probe_lines(ResultsDb& db, const std::vector<int64_t>& runs,
                                           const std::vector<std::string>& devices, std::vector<int64_t>* missing_in) {
  std::vector<ProbeLine> out;
  for (size_t h = 1; h < devices.size(); ++h) {
    std::vector<double> rtt, up;
    for (int64_t v : runs) {
      auto probes = db.probes(v);
      if (!probes) return std::move(probes.error());
      const ProbeRow* pr = nullptr;
      for (const auto& r : *probes)
        if (r.participant == devices[h - 1]) pr = &r;
      if (!pr || !pr->up_mbps || *pr->up_mbps <= 0) {
        if (missing_in) missing_in->push_back(v);
        break;
      }
      rtt.push_back(static_cast<double>(pr->rtt_min_ns) / 1e6);
      up.push_back(*pr->up_mbps);
    }
    if (rtt.size() < runs.size()) {
      out.push_back(std::nullopt);
      continue;
    }
    out.push_back(std::pair{protocol::median_of(rtt), 8.0 / (protocol::median_of(up) * 1e3)});
  }
  return out;
}

// A hop whose measured placements' wire bytes span under kMinSlopeShare of
// the most any cut would send on it (the profiled outputs x its wire/raw)
// gives its fitted lines no slope to extrapolate with (ResNet-18's 2-4 KB
// at the last cuts fitted 0.51 ms/KB on a 47.5 Mbit/s WAN, 3x its rate, and
// 531 ms for the input's 602 KB): its link line takes the rate of the run's
// probe of the hop (none probed: kept), its own and codec lines no slope,
// each through its points' mean.
constexpr double kMinSlopeShare = 0.1;
Status narrow_hops(ResultsDb& db, int64_t run_id, ChainPlan& p, std::map<int64_t, HopFit>& fit,
                   const std::vector<double>& out_bytes) {
  const double most = out_bytes.empty() ? 0.0 : *std::max_element(out_bytes.begin(), out_bytes.end());
  auto probes = probe_lines(db, {run_id}, p.devices, nullptr);
  if (!probes) return std::move(probes.error());
  for (auto& [h, f] : fit) {
    double lo = std::numeric_limits<double>::infinity(), hi = 0, x = 0, link = 0, own = 0;
    for (size_t i = 0; i < f.link_pts.size(); ++i) {
      lo = std::min(lo, f.link_pts[i].first), hi = std::max(hi, f.link_pts[i].first);
      x += f.link_pts[i].first, link += f.link_pts[i].second, own += f.own_pts[i].second;
    }
    if (f.link_pts.empty() || hi - lo >= kMinSlopeShare * most * f.ratio()) continue;
    const double n = static_cast<double>(f.link_pts.size());
    double codec = 0;
    for (const auto& c : f.codec_pts) codec += c.second;
    x /= n, link /= n, own /= n;
    f.own = {own, 0.0};
    if (!f.codec_pts.empty()) f.codec = {codec / static_cast<double>(f.codec_pts.size()), 0.0};
    const auto& probe = (*probes)[static_cast<size_t>(h - 1)];
    if (probe) f.link = {link - probe->second * x, probe->second};
    p.fits.push_back(fmt::format("hop {}: its placements' wire bytes span {:.1f} KB of the {:.1f} KB a cut may "
                                 "send, too little for a slope: link {}, {}'s other flat at {:.3f} ms",
                                 h, (hi - lo) / 1e3, most * f.ratio() / 1e3,
                                 probe ? fmt::format("{:.3f} ms + bytes at its probe's {:.2f} Mbit/s", f.link.first,
                                                     8.0 / (probe->second * 1e3))
                                       : std::string("line kept (the run did not probe the hop)"),
                                 f.device, own));
  }
  return {};
}

// Held out: each hop's link term moved to the held-out runs' probes. Where
// the basis run probed the hop too, its fitted link line moves by the
// difference between the two probes (every overhead the fit holds is kept,
// the part of the transfer that shows in encode time included); else the
// basis's codec line (send encode + reply decode) plus the held-out probe.
Status move_links(ResultsDb& db, int64_t run_id, const std::vector<int64_t>& held_out, ChainPlan& p,
                  std::map<int64_t, HopFit>& fit) {
  std::vector<int64_t> missing;
  auto net = probe_lines(db, held_out, p.devices, &missing);
  if (!net) return std::move(net.error());
  auto base = probe_lines(db, {run_id}, p.devices, nullptr);
  if (!base) return std::move(base.error());
  for (auto& [h, f] : fit) {
    const size_t i = static_cast<size_t>(h - 1);
    const std::string hop = fmt::format("hop {} ({} -> {})", h, p.devices[i], p.devices[i + 1]);
    if (!(*net)[i])
      return make_error(Errc::not_found,
                        fmt::format("held-out run {}: {} has no link probe with a rate: the held-out link is each "
                                    "hop's probe (run it with probe.enabled: true)",
                                    missing.empty() ? held_out.front() : missing.front(), hop));
    const auto [rtt, per_byte] = *(*net)[i];
    std::string how;
    if (const auto& b = (*base)[i]) {
      f.link = {f.link.first - b->first + rtt, f.link.second - b->second + per_byte};
      how = fmt::format("the basis's fitted line moved from its own probe ({:.3f} ms, {:.2f} Mbit/s)", b->first,
                        8.0 / (b->second * 1e3));
    } else {
      f.link = {f.codec.first + rtt, f.codec.second + per_byte};
      how = "the basis's encode + reply decode line plus the probe (the basis did not probe the hop)";
    }
    p.fits.push_back(fmt::format("held out, {}: network {:.3f} ms + bytes at {:.2f} Mbit/s (the median over {} "
                                 "run(s) of the hop's probe: smallest round trip, rate up); link = {}",
                                 hop, rtt, 8.0 / (per_byte * 1e3), held_out.size(), how));
  }
  return {};
}

// The spread: the plan against each held-out run alone (two or more).
Status held_out_spread(ResultsDb& db, ChainPlan& p) {
  for (size_t i = 0; p.held_out.size() > 1 && i < p.held_out.size(); ++i) {
    std::map<std::vector<int>, double> mv;
    TRACR_TRY(measured_medians(db, p.held_out[i], mv, nullptr));
    double sum = 0;
    int n = 0;
    for (const auto& r : p.rows)
      if (auto it = mv.find(r.cuts); it != mv.end()) {
        sum += std::fabs(r.latency_ms - it->second) / it->second * 100.0;
        ++n;
      }
    if (n > 0) p.held_out_mape.push_back(sum / n);
  }
  return {};
}

// plan --chain: one device's layer profiles (by name), from the first of
// `runs` that profiled it with the model, input shape and batch of `ref`.
struct ProfileSource {
  int64_t run = 0;
  std::vector<LayerProfileRecord> rows;
};
Result<ProfileSource> device_profiles(ResultsDb& db, const std::vector<int64_t>& runs, const LayerProfileRecord& ref,
                                      const std::string& model, const std::string& device) {
  for (const int64_t r : runs) {
    auto lp = db.layer_profiles(r);
    if (!lp) return std::move(lp.error());
    ProfileSource s{r, {}};
    for (auto& row : *lp)
      if (row.device == device && row.input_shape == ref.input_shape && row.batch == ref.batch &&
          (row.model_fp.empty() || ref.model_fp.empty() || row.model_fp == ref.model_fp))
        s.rows.push_back(std::move(row));
    if (!s.rows.empty()) return s;
  }
  return make_error(Errc::not_found,
                    fmt::format("no run in this database profiled {} with {} at input {}, batch {}: run a two-tier "
                                "experiment with {} in it first (record.layers: true, the default)",
                                device, model, ref.input_shape, ref.batch, device));
}

// The devices a chain run's frames passed after its PARTICIPANT, by hop; empty for a two-tier run.
Result<std::vector<std::string>> chain_path(ResultsDb& db, int64_t run) {
  auto hops = db.hop_summaries(run);
  if (!hops) return std::move(hops.error());
  std::map<int64_t, std::string> by_hop;
  for (const auto& h : *hops) by_hop[h.hop] = h.device;
  std::vector<std::string> out;
  for (const auto& [h, d] : by_hop) out.push_back(d);
  return out;
}

// The device `sender`'s link probe in `run` measured the way to: a two-tier
// run's one SERVER, or the next device of a chain run's path ("" if neither).
Result<std::string> probed_receiver(ResultsDb& db, int64_t run, const std::string& sender) {
  auto path = chain_path(db, run);
  if (!path) return std::move(path.error());
  if (!path->empty()) {
    auto at = std::find(path->begin(), path->end(), sender);
    if (at == path->end()) return path->front();  // the PARTICIPANT probes hop 1
    return ++at == path->end() ? std::string() : *at;
  }
  auto devs = db.devices(run);
  if (!devs) return std::move(devs.error());
  std::vector<std::string> servers;
  for (const auto& d : *devs)
    if (d.role == "SERVER") servers.push_back(d.device);
  return servers.size() == 1 ? servers.front() : std::string();
}

// Hop `from` -> `to` from the first of `runs` holding a probe of that way with a rate.
Result<std::optional<HopLink>> stored_probe(ResultsDb& db, const std::vector<int64_t>& runs, const std::string& from,
                                            const std::string& to) {
  for (const int64_t r : runs) {
    auto probes = db.probes(r);
    if (!probes) return std::move(probes.error());
    for (const auto& pr : *probes) {
      if (pr.participant != from || !pr.up_mbps || *pr.up_mbps <= 0) continue;
      auto receiver = probed_receiver(db, r, from);
      if (!receiver) return std::move(receiver.error());
      if (*receiver != to) continue;
      const double rtt = static_cast<double>(pr.rtt_min_ns) / 1e6;
      return std::optional<HopLink>(HopLink{rtt, 8.0 / (*pr.up_mbps * 1e3),
                                            fmt::format("run {}'s link probe from {} to {}: smallest round trip, "
                                                        "rate up",
                                                        r, from, to)});
    }
  }
  return std::optional<HopLink>();
}

// What a two-tier run measured that a chain planned from it reuses: its
// codec's wire/raw ratio (over its splits' means), the sender's codec line
// (encode + reply decode against wire bytes, per split's medians), and the
// PARTICIPANT's post-processing + queue (median over splits).
struct TwoTierTerms {
  double ratio = 1.0, post_ms = 0;
  std::pair<double, double> codec{0, 0};
  size_t splits = 0;
};
Result<TwoTierTerms> two_tier_terms(ResultsDb& db, int64_t run) {
  auto table = db.split_table(run);
  if (!table) return std::move(table.error());
  TwoTierTerms t;
  double wire = 0, raw = 0;
  std::vector<std::pair<double, double>> codec;
  std::vector<double> post;
  for (const auto& s : *table) {
    if (s.frames <= 0 || s.chained()) continue;
    if (s.mean_raw_bytes > 0) wire += s.mean_wire_bytes, raw += s.mean_raw_bytes;
    codec.push_back({s.mean_wire_bytes, (s.stage("encode_ns").median_ns + s.stage("return_ns").median_ns) / 1e6});
    post.push_back((s.stage("post_ns").median_ns + s.stage("queue_ns").median_ns) / 1e6);
  }
  if (raw > 0) t.ratio = wire / raw;
  if (!codec.empty()) t.codec = fit_cost_line(codec), t.post_ms = protocol::median_of(post);
  t.splits = codec.size();
  return t;
}

// Device `device`'s own time as a two-tier SERVER (server_ns - tail_ns:
// decode, reply encode, bookkeeping) against wire bytes, fitted over the
// splits of the first of `runs` where it was the one SERVER; nullopt if none.
Result<std::optional<std::pair<std::pair<double, double>, int64_t>>> server_own_line(
    ResultsDb& db, const std::vector<int64_t>& runs, const std::string& device) {
  using Out = std::optional<std::pair<std::pair<double, double>, int64_t>>;
  for (const int64_t r : runs) {
    auto receiver = probed_receiver(db, r, "");
    if (!receiver) return std::move(receiver.error());
    auto path = chain_path(db, r);
    if (!path) return std::move(path.error());
    if (*receiver != device || !path->empty()) continue;
    auto table = db.split_table(r);
    if (!table) return std::move(table.error());
    std::vector<std::pair<double, double>> pts;
    for (const auto& s : *table)
      if (s.frames > 0)
        pts.push_back({s.mean_wire_bytes, (s.stage("server_ns").median_ns - s.stage("tail_ns").median_ns) / 1e6});
    if (!pts.empty()) return Out(std::pair{fit_cost_line(pts), r});
  }
  return Out();
}

// Held out (plan RUN --validate-on, plan --chain --validate-on): each
// placement's median over the runs' medians, each run of the basis's model
// (by fingerprint where both profiled it: the same file from another folder
// is the same model) and of this chain, with chain frames.
// A held-out run at the basis run's input: the same input_size and
// batch_size in their stored experiments (where both parse).
Status same_input(const RunRow& basis, const RunRow& run) {
  auto a = settings::parse_experiment(basis.config_yaml, fmt::format("run {}'s stored experiment", basis.id), false);
  auto b = settings::parse_experiment(run.config_yaml, fmt::format("run {}'s stored experiment", run.id), false);
  if (!a || !b) return {};
  auto input = [](const settings::ExperimentConfig& e) {
    return fmt::format("input {} at batch {}",
                       e.input_size.empty() ? std::string("(the model's default)")
                                            : fmt::format("{}", fmt::join(e.input_size, "x")),
                       e.batch_size);
  };
  if (input(*a) == input(*b)) return {};
  return make_error(Errc::invalid_argument,
                    fmt::format("--validate-on {}: run {} ran {}, the plan's run {} {}; expected a run at the same "
                                "input and batch (compute and bytes scale with both)",
                                run.id, run.id, input(*b), basis.id, input(*a)));
}

Status check_medians(ResultsDb& db, const ChainPlan& p, const RunRow& basis, const std::vector<int64_t>& runs,
                     std::map<std::vector<int>, double>& measured) {
  std::map<std::vector<int>, std::vector<double>> each;
  const std::vector<std::string> chain(p.devices.begin() + 1, p.devices.end());
  for (const int64_t v : runs) {
    auto run = db.get_run(v);
    if (!run) return std::move(run.error());
    if (!same_model(db, basis, *run))
      return make_error(Errc::invalid_argument, fmt::format("--validate-on {}: run {} ran {}, the plan {}; expected a "
                                                            "chain run of the same model",
                                                            v, v, run->model, p.model));
    TRACR_TRY(same_input(basis, *run));
    auto path = chain_path(db, v);
    if (!path) return std::move(path.error());
    if (*path != chain)
      return make_error(Errc::invalid_argument,
                        fmt::format("--validate-on {}: run {} ran {}, not the chain planned ({}); expected a chain "
                                    "run of these devices (its placements' medians are the check)",
                                    v, v, path->empty() ? "two tiers" : fmt::format("{}", fmt::join(*path, " -> ")),
                                    fmt::join(chain, " -> ")));
    std::map<std::vector<int>, double> mv;
    TRACR_TRY(measured_medians(db, v, mv, nullptr));
    if (mv.empty())
      return make_error(Errc::invalid_argument, fmt::format("--validate-on {}: run {} has no timed chain frames", v, v));
    for (const auto& [cuts, ms] : mv) each[cuts].push_back(ms);
  }
  for (auto& [cuts, v] : each) measured[cuts] = protocol::median_of(v);
  return {};
}

// plan --chain: every device's layer profiles (from `order`, by name) into
// `sums`, the PARTICIPANT's outputs into `out_bytes`, and the runs they came from.
Status chain_profiles(ResultsDb& db, const std::vector<int64_t>& order, const LayerProfileRecord& ref,
                      const std::string& model, ChainPlan& p, std::vector<LayerSums>& sums,
                      std::vector<double>& out_bytes) {
  // A name no run of the model knows is a typo (exit 2), not missing data.
  std::set<std::string> known;
  for (const int64_t r : order) {
    auto devs = db.devices(r);
    if (!devs) return std::move(devs.error());
    for (const auto& d : *devs) known.insert(d.device);
  }
  for (const auto& dev : p.devices)
    if (!known.count(dev))
      return make_error(Errc::invalid_argument,
                        fmt::format("--chain: no run of {} in this database had a device named '{}'; expected one of "
                                    "{} (as the devices file names them)",
                                    model, dev, fmt::join(known, ", ")));
  int n = -1;
  std::vector<std::string> from;
  for (const auto& dev : p.devices) {
    auto src = device_profiles(db, order, ref, model, dev);
    if (!src) return std::move(src.error());
    auto s = layer_sums(src->rows, dev, static_cast<int>(src->run), &n);
    if (!s) return std::move(s.error());
    sums.push_back(std::move(*s));
    p.profile_runs.push_back(src->run);
    from.push_back(fmt::format("{} from run {}", dev, src->run));
    if (out_bytes.empty()) {
      out_bytes.assign(static_cast<size_t>(n) + 1, 0.0);
      out_bytes[0] = input_bytes_of(src->rows);
      p.layer_weight_bytes.assign(static_cast<size_t>(n), 0.0);
      for (const auto& pr : src->rows)
        if (pr.layer_index >= 0 && pr.layer_index < n) {
          out_bytes[static_cast<size_t>(pr.layer_index) + 1] = static_cast<double>(pr.out_bytes);
          p.layer_weight_bytes[static_cast<size_t>(pr.layer_index)] = 4.0 * static_cast<double>(pr.params);
        }
    }
  }
  p.layers = n;
  p.fits.push_back(fmt::format("layer profiles (by device name, {} at input {}, batch {}): {}", model,
                               ref.input_shape, ref.batch, fmt::join(from, ", ")));
  return {};
}

// plan --chain: hop h's fit from its link (given, or a stored probe), the
// basis run's codec terms and the receiving device's own time as a SERVER.
Result<HopFit> chain_hop_fit(ResultsDb& db, const std::vector<int64_t>& order, ChainPlan& p, size_t h,
                             std::optional<HopLink> link, const TwoTierTerms& terms) {
  const std::string hop = fmt::format("hop {} ({} -> {})", h, p.devices[h - 1], p.devices[h]);
  if (!link) {
    auto stored = stored_probe(db, order, p.devices[h - 1], p.devices[h]);
    if (!stored) return std::move(stored.error());
    if (!*stored)
      return make_error(Errc::not_found,
                        fmt::format("{}: no stored link probe from {} to {} (a run with {} its PARTICIPANT and {} "
                                    "its SERVER, probe.enabled: true); give the hop's link: --link PROFILE for "
                                    "every hop, or one per hop (--link wifi,wan; `probe` for a hop a stored probe "
                                    "covers)",
                                    hop, p.devices[h - 1], p.devices[h], p.devices[h - 1], p.devices[h]));
    link = **stored;
  }
  HopFit f;
  f.device = p.devices[h];
  f.link = {link->rtt_ms + terms.codec.first, link->ms_per_byte + terms.codec.second};
  f.wire = terms.ratio;
  f.raw = 1.0;
  auto own = server_own_line(db, order, f.device);
  if (!own) return std::move(own.error());
  if (*own) f.own = (*own)->first;
  p.fits.push_back(fmt::format(
      "{}: network {:.3f} ms + bytes at {:.2f} Mbit/s ({}); {}'s own time {}", hop, link->rtt_ms,
      8.0 / (link->ms_per_byte * 1e3), link->source, f.device,
      *own ? fmt::format("{:.3f} ms + {:.4f} ms/KB (server - tail, fitted to run {}'s splits as its SERVER)",
                         f.own.first, f.own.second * 1e3, (*own)->second)
           : std::string("0 (no two-tier run had it as its SERVER)")));
  return f;
}

// Each device's memory_mb (ChainPlan::memory_limit_mb): from the first of
// `runs` whose devices file set one for it.
Status memory_limits(ResultsDb& db, const std::vector<int64_t>& runs, ChainPlan& p) {
  std::vector<std::string> from;
  for (const auto& dev : p.devices) {
    std::optional<double> limit;
    for (const int64_t r : runs) {
      auto mb = db.device_memory_mb(r, dev);
      if (!mb) return std::move(mb.error());
      if (*mb) {
        limit = *mb;
        from.push_back(fmt::format("{} {:g} MB (run {}'s devices file)", dev, *limit, r));
        break;
      }
    }
    p.memory_limit_mb.push_back(limit);
  }
  p.memory_from = fmt::format("{}", fmt::join(from, ", "));
  return {};
}

}  // namespace

namespace {

// Hop 1's link name as run `run_id` probed it (the PARTICIPANT's probe), "" when it did not.
std::string first_hop_link(ResultsDb& db, int64_t run_id, const std::string& participant) {
  auto probes = db.probes(run_id);
  if (!probes) return {};
  for (const auto& pr : *probes)
    if (pr.participant == participant) return pr.link;
  return {};
}

// Each placement's participant energy (ChainPlan::energy_source) from run
// `energy_run`'s layer energy of the PARTICIPANT; nothing when it has none.
// The reply crossing hop 1: run `run_id`'s measured median where it ran a
// chain, else the model's profiled output bytes.
Status add_energy(ResultsDb& db, int64_t energy_run, int64_t run_id, const std::string& radio,
                  const std::vector<double>& out_bytes, ChainPlan& p) {
  auto eb = participant_energy(db, energy_run, p.devices.front(), p.layers, radio);
  if (!eb) return std::move(eb.error());
  if (!eb->known) return {};
  std::vector<double> replies;
  if (auto hops = db.hop_summaries(run_id))
    for (const auto& h : *hops)
      if (auto it = h.median.find("reply_bytes"); h.hop == 1 && it != h.median.end()) replies.push_back(it->second);
  const double reply = replies.empty() ? out_bytes.back() : protocol::median_of(replies);
  for (auto& r : p.rows)
    r.energy_j = eb->joules(r.cuts.front(), r.head_ms, r.latency_ms, r.wire_bytes.front(), reply, r.link_ms.front());
  p.energy_source = eb->source;
  p.fits.push_back(fmt::format(
      "edge J: {}'s energy per frame = its layer energy over the head (run {}) + idle power {} x the rest of the "
      "frame{}",
      p.devices.front(), energy_run, eb->idle_w ? fmt::format("{:g} W", *eb->idle_w) : std::string("(none)"),
      eb->radio ? fmt::format(" + radio-{} for hop 1 ({:.0f} B reply, {}; active for its link time)", eb->radio->name,
                              reply, replies.empty() ? "profiled output" : "measured median")
                : radio.empty() ? std::string(" (no radio model: hop 1's link has no name)")
                                : fmt::format(" (no radio model: hop 1's link {} names none)", radio)));
  return {};
}

}  // namespace

Result<ChainPlan> plan_chain_from_runs(ResultsDb& db, int64_t basis, const ChainFromRuns& c) {
  auto run = db.get_run(basis);
  if (!run) return std::move(run.error());
  auto lp = db.layer_profiles(basis);
  if (!lp) return std::move(lp.error());
  const auto ref = std::find_if(lp->begin(), lp->end(), [](const auto& r) { return r.device_role == "PARTICIPANT"; });
  if (ref == lp->end())
    return make_error(Errc::not_found, fmt::format("run {} has no layer profiles of its PARTICIPANT: plan --chain "
                                                   "starts from a run with record.layers: true (the default)",
                                                   basis));
  ChainPlan p;
  p.run = basis;
  p.model = run->model;
  p.devices.push_back(ref->device);
  p.devices.insert(p.devices.end(), c.chain.begin(), c.chain.end());
  for (size_t i = 1; i < p.devices.size(); ++i)
    if (std::find(p.devices.begin(), p.devices.begin() + static_cast<std::ptrdiff_t>(i), p.devices[i]) !=
        p.devices.begin() + static_cast<std::ptrdiff_t>(i))
      return make_error(Errc::invalid_argument, fmt::format("--chain: {} appears twice in {}; a frame passes each "
                                                            "device once",
                                                            p.devices[i], fmt::join(p.devices, " -> ")));
  // Where to look: the basis, then the database's other runs of the model, newest first.
  auto runs = db.list_runs(0);
  if (!runs) return std::move(runs.error());
  std::vector<int64_t> order{basis};
  for (const auto& r : *runs)
    if (r.id != basis && r.model == run->model) order.push_back(r.id);
  std::vector<LayerSums> sums;
  std::vector<double> out_bytes;
  TRACR_TRY(chain_profiles(db, order, *ref, run->model, p, sums, out_bytes));
  auto terms = two_tier_terms(db, basis);
  if (!terms) return std::move(terms.error());
  std::map<int64_t, HopFit> fit;
  for (size_t h = 1; h < p.devices.size(); ++h) {
    auto f = chain_hop_fit(db, order, p, h, h - 1 < c.links.size() ? c.links[h - 1] : std::nullopt, *terms);
    if (!f) return std::move(f.error());
    fit[static_cast<int64_t>(h)] = std::move(*f);
  }
  p.fits.push_back(fmt::format(
      "run {}'s codec {} on every hop: bytes = the profiled outputs x its wire/raw {:.3f}; the sender's encode + "
      "reply decode {:.3f} ms + {:.4f} ms/KB; the PARTICIPANT's post-processing + queue {:.3f} ms (fitted to its {} "
      "split(s)' medians)",
      basis, run->codec, terms->ratio, terms->codec.first, terms->codec.second * 1e3, terms->post_ms, terms->splits));
  std::map<std::vector<int>, double> measured;
  TRACR_TRY(check_medians(db, p, *run, c.check, measured));
  p.held_out = c.check;
  TRACR_TRY(memory_limits(db, order, p));
  TRACR_TRY(predict_all(p, fit, sums, out_bytes, terms->post_ms, measured));
  TRACR_TRY(held_out_spread(db, p));
  const int64_t part_run = p.profile_runs.empty() ? basis : p.profile_runs.front();
  const std::string radio = !c.links.empty() && c.links.front() ? c.links.front()->name
                                                                  : first_hop_link(db, part_run, p.devices.front());
  TRACR_TRY(add_energy(db, part_run, basis, radio, out_bytes, p));
  return p;
}

Result<ChainPlan> plan_chain_run(ResultsDb& db, int64_t run_id, const std::vector<int64_t>& held_out) {
  auto run = db.get_run(run_id);
  if (!run) return std::move(run.error());
  ChainPlan p;
  p.run = run_id;
  p.model = run->model;
  auto frames = db.frames(run_id);
  if (!frames) return std::move(frames.error());
  p.devices.push_back(frames->empty() ? std::string() : frames->front().participant);
  std::map<int64_t, HopFit> fit;  // by hop
  TRACR_TRY(fit_hops(db, run_id, p, fit));
  std::vector<LayerSums> sums;
  std::vector<double> out_bytes;
  TRACR_TRY(profile_sums(db, run_id, p, sums, out_bytes));
  TRACR_TRY(narrow_hops(db, run_id, p, fit, out_bytes));
  TRACR_TRY(scale_by_frames(db, run_id, p, sums));
  // The participant's own time after the reply: post-processing and any wait.
  std::vector<double> post;
  std::map<std::vector<int>, double> measured;
  TRACR_TRY(measured_medians(db, run_id, measured, &post));
  const double post_ms = post.empty() ? 0.0 : protocol::median_of(post);
  if (!held_out.empty()) {
    // Held out: each hop's link moved to the held-out runs' probes (move_links),
    // every device's compute and own time from this run; checked against each
    // placement's median over the held-out runs' medians.
    TRACR_TRY(move_links(db, run_id, held_out, p, fit));
    measured.clear();
    TRACR_TRY(check_medians(db, p, *run, held_out, measured));
    p.held_out = held_out;
  }
  TRACR_TRY(memory_limits(db, {run_id}, p));
  TRACR_TRY(predict_all(p, fit, sums, out_bytes, post_ms, measured));
  TRACR_TRY(held_out_spread(db, p));
  TRACR_TRY(add_energy(db, run_id, run_id, first_hop_link(db, run_id, p.devices.front()), out_bytes, p));
  return p;
}

Result<ChainPlan> plan_chain_from_profiles(ResultsDb& db, int64_t run_id, const std::vector<std::string>& devices) {
  auto run = db.get_run(run_id);
  if (!run) return std::move(run.error());
  auto lines = probe_lines(db, {run_id}, devices, nullptr);
  if (!lines) return std::move(lines.error());
  ChainPlan p;
  p.run = run_id;
  p.model = run->model;
  p.devices = devices;
  std::map<int64_t, HopFit> fit;
  for (size_t h = 1; h < devices.size(); ++h) {
    const std::string& from = devices[h - 1];
    if (!(*lines)[h - 1])
      return make_error(Errc::not_found,
                        fmt::format("run {}: hop {} ({} -> {}) has no link probe with a measured rate: the planner's "
                                    "transfer term for the hop is its link probe (probe.enabled: true)",
                                    run_id, h, from, devices[h]));
    const auto [rtt_ms, per_byte] = *(*lines)[h - 1];
    HopFit& f = fit[static_cast<int64_t>(h)];
    f.device = devices[h];
    f.link = {rtt_ms, per_byte};
    p.fits.push_back(fmt::format("hop {} ({} -> {}): {:.3f} ms + bytes at {:.2f} Mbit/s (its link probe's smallest "
                                 "round trip and rate up); raw bytes (no codec ratio before frames), no own time",
                                 h, from, f.device, rtt_ms, 8.0 / (per_byte * 1e3)));
  }
  std::vector<LayerSums> sums;
  std::vector<double> out_bytes;
  TRACR_TRY(profile_sums(db, run_id, p, sums, out_bytes));
  TRACR_TRY(memory_limits(db, {run_id}, p));
  TRACR_TRY(predict_all(p, fit, sums, out_bytes, 0.0, {}));
  TRACR_TRY(add_energy(db, run_id, run_id, first_hop_link(db, run_id, p.devices.front()), out_bytes, p));
  return p;
}

std::vector<size_t> best_placements(const ChainPlan& p, size_t k, const std::set<int>& refused) {
  std::vector<size_t> order;
  for (size_t i = 0; i < p.rows.size(); ++i)
    if (p.rows[i].fits &&
        std::none_of(p.rows[i].cuts.begin(), p.rows[i].cuts.end(), [&](int c) { return refused.count(c) > 0; }))
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p.rows[a].latency_ms < p.rows[b].latency_ms; });
  if (order.size() > k) order.resize(k);
  return order;
}

std::string format_chain_plan(const ChainPlan& p, size_t top, size_t width) {
  auto para = [&](const std::string& text) { return core::wrap_words(text, static_cast<int>(width)) + "\n"; };
  std::string o = para(
      fmt::format("plan over placements from {} ({}, {} layers): {} -> {}; {} placements predicted, {} measured",
                  p.profile_runs.empty()
                      ? fmt::format("run {}", p.run)
                      : fmt::format("the two-tier profiles of run(s) {}", fmt::join(std::set<int64_t>(
                                                                              p.profile_runs.begin(),
                                                                              p.profile_runs.end()), ", ")),
                  p.model, p.layers, p.devices.front(),
                  fmt::format("{}", fmt::join(p.devices.begin() + 1, p.devices.end(), " -> ")), p.rows.size(),
                  p.measured));
  for (const auto& f : p.fits) o += para("  " + f);
  const bool limited = !p.memory_from.empty();
  if (!p.held_out.empty())
    o += para(fmt::format("  held out: measured = each placement's median over run(s) {} (their medians), not the "
                          "basis run",
                          fmt::join(p.held_out, ", ")));
  const ChainPlanRow& c = p.rows[p.chosen];
  o += fmt::format("  chosen (lowest predicted latency{}): {} at {:.3f} ms{}\n",
                   limited ? " within the memory limits" : "", c.placement, c.latency_ms,
                   c.measured_ms ? fmt::format(" (measured {:.3f} ms)", *c.measured_ms) : " (not measured)");
  if (p.measured_best)
    o += fmt::format("  measured best: {} at {:.3f} ms{}\n", p.rows[*p.measured_best].placement,
                     *p.rows[*p.measured_best].measured_ms,
                     p.miss_pct ? fmt::format("; the chosen misses it by {:+.1f} %", *p.miss_pct) : std::string());
  if (p.mape_pct && p.held_out.empty())
    o += para(fmt::format("  latency MAPE {:.1f} % over the {} measured placements (in-sample for the hops' fitted "
                          "terms and the compute scales, out of sample for the layers' placement)",
                          *p.mape_pct, p.measured));
  if (p.mape_pct && !p.held_out.empty())
    o += para(fmt::format("  latency MAPE {:.1f} % over the {} placements the held-out runs measured (out of sample: "
                          "{}){}",
                          *p.mape_pct, p.measured,
                          p.profile_runs.empty() ? "their links came from their probes only"
                                                 : "planned from two-tier runs, before the chain ran",
                          p.held_out_mape.size() > 1
                              ? fmt::format("; against each run alone {:.1f} % to {:.1f} %",
                                            *std::min_element(p.held_out_mape.begin(), p.held_out_mape.end()),
                                            *std::max_element(p.held_out_mape.begin(), p.held_out_mape.end()))
                              : std::string()));
  // The measured placements and the best predicted ones, in placement order.
  std::vector<bool> show(p.rows.size(), false);
  for (size_t i : best_placements(p, top)) show[i] = true;
  for (size_t i = 0; i < p.rows.size(); ++i) show[i] = show[i] || p.rows[i].measured_ms.has_value();
  std::vector<std::vector<std::string>> rows = {{"  placement", "head ms"}};
  const size_t m = p.devices.size() - 1;
  for (size_t h = 1; h <= m; ++h)
    for (const char* what : {"link", "compute", "other"}) rows[0].push_back(fmt::format("{}{} ms", what, h));
  for (const char* col : {"post ms", "predicted ms", "frames/s"}) rows[0].push_back(col);
  const bool energy = !p.energy_source.empty();
  if (energy) rows[0].push_back("edge J");
  for (const char* col : {"measured ms", "error"}) rows[0].push_back(col);
  if (limited) rows[0].push_back("memory MB per device");
  for (size_t i = 0; i < p.rows.size(); ++i) {
    if (!show[i]) continue;
    const auto& r = p.rows[i];
    std::vector<std::string> row = {fmt::format("{} {}", i == p.chosen ? "*" : " ", r.placement),
                                    fmt::format("{:.3f}", r.head_ms)};
    for (size_t h = 0; h < m; ++h)
      for (double v : {r.link_ms[h], r.compute_ms[h], r.own_ms[h]}) row.push_back(fmt::format("{:.3f}", v));
    row.push_back(fmt::format("{:.3f}", r.post_ms));
    row.push_back(fmt::format("{:.3f}", r.latency_ms));
    row.push_back(fmt::format("{:.1f}", r.fps));
    if (energy) row.push_back(r.energy_j ? fmt::format("{:.4f}", *r.energy_j) : "-");
    row.push_back(r.measured_ms ? fmt::format("{:.3f}", *r.measured_ms) : "-");
    row.push_back(r.error_pct ? fmt::format("{:+.1f}%", *r.error_pct) : "-");
    if (limited) {
      std::vector<std::string> mb;
      for (double v : r.memory_mb) mb.push_back(fmt::format("{:.1f}", v));
      row.push_back(fmt::format("{}{}", fmt::join(mb, "|"), r.fits ? "" : " over"));
    }
    rows.push_back(std::move(row));
  }
  o += fmt::format("\nthe measured placements and the {} best predicted (* chosen)\n", top);
  o += core::align(rows, {0});
  return o;
}

namespace {

// The rows a stored chain plan keeps (ChainPlan order): all up to
// kStoredPlacements, else the chosen, the measured and the kStoredBest fastest.
std::vector<size_t> stored_rows(const ChainPlan& p) {
  std::vector<size_t> idx(p.rows.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  if (idx.size() <= kStoredPlacements) return idx;
  std::vector<size_t> by_latency = idx;
  std::partial_sort(by_latency.begin(), by_latency.begin() + static_cast<std::ptrdiff_t>(kStoredBest),
                    by_latency.end(),
                    [&](size_t a, size_t b) { return p.rows[a].latency_ms < p.rows[b].latency_ms; });
  std::set<size_t> keep(by_latency.begin(), by_latency.begin() + static_cast<std::ptrdiff_t>(kStoredBest));
  keep.insert(p.chosen);
  for (size_t i = 0; i < p.rows.size(); ++i)
    if (p.rows[i].measured_ms) keep.insert(i);
  return {keep.begin(), keep.end()};
}

void bind_opt(store::Statement& q, int i, const std::optional<double>& v) {
  if (v && std::isfinite(*v)) q.bind(i, *v);
  else q.bind_null(i);
}

Result<int64_t> insert_chain_plan_row(ResultsDb& db, const ChainPlan& p) {
  store::Statement q(db.handle(),
                     "INSERT INTO plans(created_at, basis_run, model, input_shape, objective, link_source, chain, "
                     "placements, chosen_placement, measured_best_placement, mape_pct, miss_pct, validation_runs, "
                     "memory_limits, energy_source) VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?1, ?2, (SELECT "
                     "input_shape FROM layer_profiles WHERE run_id = ?1 LIMIT 1), 'latency', ?3, ?4, ?5, ?6, ?7, ?8, "
                     "?9, ?10, ?11, ?12)");
  if (!q.prepared()) return q.error("store chain plan");
  q.bind(1, p.run);
  q.bind(2, std::string_view(p.model));
  q.bind(3, std::string_view(fmt::format("{}", fmt::join(p.fits, "; "))));
  q.bind(4, std::string_view(fmt::format("{}", fmt::join(p.devices, " -> "))));
  q.bind(5, static_cast<int64_t>(p.rows.size()));
  q.bind(6, std::string_view(p.rows[p.chosen].placement));
  if (p.measured_best) q.bind(7, std::string_view(p.rows[*p.measured_best].placement));
  else q.bind_null(7);
  bind_opt(q, 8, p.mape_pct);
  bind_opt(q, 9, p.miss_pct);
  const std::vector<int64_t> on = p.held_out.empty() && p.measured > 0 ? std::vector<int64_t>{p.run} : p.held_out;
  q.bind_text_or_null(10, fmt::format("{}", fmt::join(on, ",")));
  q.bind_text_or_null(11, p.memory_from);
  q.bind_text_or_null(12, p.energy_source);
  TRACR_TRY(q.run("store chain plan"));
  return store::last_insert_rowid(db.handle());
}

// One placement's plan_placements row and its devices' plan_segments rows.
Status insert_placement(store::Statement& row, store::Statement& seg, int64_t id, const ChainPlan& p,
                        const ChainPlanRow& r) {
  row.reset();
  row.bind(1, id);
  row.bind(2, std::string_view(r.placement));
  row.bind(3, r.head_ms);
  row.bind(4, r.post_ms);
  row.bind(5, r.latency_ms);
  row.bind(6, r.fps);
  row.bind(7, std::string_view(r.bytes_from));
  row.bind(8, static_cast<int64_t>(r.fits ? 1 : 0));
  bind_opt(row, 9, r.measured_ms);
  bind_opt(row, 10, r.error_pct);
  bind_opt(row, 11, r.energy_j);
  TRACR_TRY(row.run("store chain plan"));
  for (size_t d = 0; d < p.devices.size(); ++d) {
    seg.reset();
    seg.bind(1, id);
    seg.bind(2, std::string_view(r.placement));
    seg.bind(3, static_cast<int64_t>(d));
    seg.bind(4, std::string_view(p.devices[d]));
    seg.bind(5, static_cast<int64_t>(d == 0 ? 0 : r.cuts[d - 1]));
    seg.bind(6, static_cast<int64_t>(d < r.cuts.size() ? r.cuts[d] : p.layers));
    auto hop = [&](const std::vector<double>& v) {
      return d > 0 && d - 1 < v.size() ? std::optional<double>(v[d - 1]) : std::nullopt;
    };
    bind_opt(seg, 7, hop(r.link_ms));
    bind_opt(seg, 8, d == 0 ? std::optional<double>(r.head_ms) : hop(r.compute_ms));
    bind_opt(seg, 9, hop(r.own_ms));
    bind_opt(seg, 10, hop(r.wire_bytes));
    bind_opt(seg, 11, d < r.memory_mb.size() ? std::optional<double>(r.memory_mb[d]) : std::nullopt);
    TRACR_TRY(seg.run("store chain plan"));
  }
  return {};
}

}  // namespace

Result<int64_t> store_chain_plan(ResultsDb& db, const ChainPlan& p) {
  if (p.rows.empty()) return make_error(Errc::invalid_argument, "store chain plan: the plan has no placements");
  store::Transaction tx(db.handle(), db.path());
  TRACR_TRY(tx.begin());
  auto id = insert_chain_plan_row(db, p);
  if (!id) return std::move(id.error());
  store::Statement row(db.handle(),
                       "INSERT INTO plan_placements(plan_id, placement, head_ms, post_ms, latency_ms, fps, bytes_from, "
                       "fits, measured_ms, error_pct, energy_j) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  store::Statement seg(db.handle(),
                       "INSERT INTO plan_segments(plan_id, placement, position, device, first_layer, end_layer, "
                       "link_ms, compute_ms, own_ms, wire_bytes, memory_mb) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!row.prepared() || !seg.prepared()) return row.error("store chain plan");
  for (size_t i : stored_rows(p)) TRACR_TRY(insert_placement(row, seg, *id, p, p.rows[i]));
  TRACR_TRY(tx.commit());
  return *id;
}

}  // namespace tracr::analysis
