#include "analysis/plan.hpp"
#include "analysis/joint.hpp"
#include "analysis/memory_need.hpp"

#include "core/text.hpp"
#include "core/token_bucket.hpp"
#include "store/export.hpp"
#include "store/statement.hpp"


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wire/agent_role.hpp"
#include "agent/energy.hpp"
#include "protocol/codec.hpp"
#include "protocol/stats.hpp"
#include "settings/config.hpp"

namespace tracr::analysis {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;

// The roles as the database stores them (device_role, devices.role).
constexpr std::string_view kServer = wire::role_name(wire::AgentRole::server);
constexpr std::string_view kParticipant = wire::role_name(wire::AgentRole::participant);

double EnergyBasis::joules(int k, double head_ms, double latency_ms, double up_bytes, double down_bytes,
                           double radio_ms) const {
  double e = 0;
  for (int i = 0; i < k && i < static_cast<int>(layer_j.size()); ++i) e += layer_j[static_cast<size_t>(i)];
  if (idle_w) e += *idle_w * (latency_ms - head_ms) / 1e3;
  if (radio)
    e += radio->alpha_up * up_bytes * 8 / 1e6 + radio->alpha_down * down_bytes * 8 / 1e6 + radio->beta * radio_ms / 1e3;
  return e;
}

Result<EnergyBasis> participant_energy(ResultsDb& db, int64_t run_id, const std::string& device, int n,
                                       const std::string& radio) {
  auto energy = db.energy(run_id);
  if (!energy) return std::move(energy.error());
  std::map<std::string, std::map<int, const EnergyRow*>> layer_e;
  for (const auto& e : *energy)
    if (e.stage == "layer" && e.device == device && e.layer_index && e.joules)
      layer_e[e.source][static_cast<int>(*e.layer_index)] = &e;
  const std::map<int, const EnergyRow*>* ej = nullptr;
  std::string source;
  for (const auto& [src, m] : layer_e)
    if (static_cast<int>(m.size()) == n && (!ej || src.rfind("measured:", 0) == 0)) {
      ej = &m;
      source = src;
    }
  EnergyBasis eb;
  if (ej) {
    eb.known = true;
    for (const auto& [i, row] : *ej) {
      eb.layer_j.push_back(*row->joules);
      if (row->idle_w) eb.idle_w = row->idle_w;
    }
  }
  eb.radio = agent::find_radio(radio);
  if (!source.empty()) eb.source = "modelled:plan(" + source + (eb.radio ? ", radio-" + eb.radio->name : "") + ")";
  return eb;
}

std::pair<double, double> fit_cost_line(const std::vector<std::pair<double, double>>& pts) {
  if (pts.empty()) return {0.0, 0.0};
  double mx = 0, my = 0;
  for (const auto& [x, y] : pts) {
    mx += x;
    my += y;
  }
  mx /= static_cast<double>(pts.size());
  my /= static_cast<double>(pts.size());
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : pts) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) * (x - mx);
  }
  const double b = sxx > 0 && sxy > 0 ? sxy / sxx : 0.0;
  return {my - b * mx, b};
}

namespace {

// A tbf's bucket holds at most `burst` bytes and refills at the rate while
// the link is idle; with one frame in flight a direction is idle for the
// rest of the frame's cycle (`gap_ms`: the other stages), so a frame finds
// min(burst, rate x gap) bytes of tokens, not a full bucket each time (3g,
// 1.05 Mbit/s, 1600 B bursts: 772 B took 3.1 ms where a full bucket said 0,
// and 3398 B 24.7 ms where it said 13.7).
double bits_ms(double bytes, double mbps, double burst, double gap_ms) {
  if (mbps <= 0) return 0.0;
  const double per_ms = mbps * 1e3 / 8.0;  // bytes per ms
  const double tokens = std::min(burst, per_ms * std::max(0.0, gap_ms));
  return std::max(0.0, bytes - tokens) / per_ms;
}

// The rate tracr's tbf held one direction at, from a run's shaping text
// ("tc: up tbf 1.1 Mbit/s on ..."); 0 when that direction was not shaped so.
double tbf_rate(const std::string& shaping, const std::string& dir) {
  const std::string key = dir + " tbf ";
  const auto at = shaping.find(key);
  return at == std::string::npos ? 0.0 : std::atof(shaping.c_str() + at + key.size());
}

// Input bytes of one frame from the profiled input shape ("C,H,W", any rank; float32).
double input_bytes(const std::string& shape, int64_t batch) {
  double n = static_cast<double>(batch);
  size_t start = 0;
  while (start < shape.size()) {
    const auto comma = shape.find(',', start);
    n *= std::atof(shape.substr(start, comma == std::string::npos ? std::string::npos : comma - start).c_str());
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return n * 4;
}

// A split's per-frame work outside its layers and the link, from the medians
// of its measured stages: the participant's (encoding, the reply's decoding,
// post-processing) and the server's own (server_ns - tail_ns).
double participant_own_ms(const SplitSummary& s) {
  return (s.stage("encode_ns").median_ns + s.stage("return_ns").median_ns + s.stage("post_ns").median_ns) / 1e6;
}
double server_own_ms(const SplitSummary& s) {
  return (s.stage("server_ns").median_ns - s.stage("tail_ns").median_ns) / 1e6;
}

// The participant's own per-frame work at one split, from one run's frames
// (ms): the median an encode took, the median over frames of head + encode,
// and the medians of the reply's decoding and post-processing.
struct PartShare {
  double enc_median = 0, head_enc = 0, rest = 0;
};

// Under a CPU quota a frame's head and encode are one stretch of throttled
// CPU: the head runs ahead of the quota and the encode pays the debt in whole
// throttle waits (ResNet-18 at 0.12 of a core, split 4: head 5-12 ms, encode
// 12-15 ms, the profiled head 20.7 ms and the frames' head + encode 19-24).
// The profiled head, timed back to back, already holds those waits, so the
// encode adds only what the frames' head + encode exceed it by: at least
// nothing (the waits are in the profile), at most its median (frames' heads
// slower than the profile are not the encode's: AlexNet at 0.25 of a core,
// 3g, 363.6 ms profiled, 365.5 in frames). So the stretch is the frames'
// head + encode, kept between the profiled head and it plus the encode.
double quota_share_ms(const PartShare& s, double head_ms) {
  return std::clamp(s.head_enc - head_ms, 0.0, std::max(0.0, s.enc_median)) + s.rest;
}

// Squared coefficient of variation (variance over mean squared); nullopt
// for fewer than 2 values or a mean of 0.
std::optional<double> scv(const std::vector<double>& v) {
  if (v.size() < 2) return std::nullopt;
  const double m = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  if (m <= 0) return std::nullopt;
  double ss = 0;
  for (const double x : v) ss += (x - m) * (x - m);
  return ss / static_cast<double>(v.size()) / (m * m);
}

// What one run's ok, timed frames of `codec` say at one split: the
// participant's share and how much a frame's times vary, as Kingman's
// (ca^2 + cs^2) / 2 over the server's time (server_ns) and the rest of the
// frame (total - server - queue: what a participant does between visits).
struct SplitFrames {
  PartShare share;
  std::optional<double> kingman;
};

Result<std::map<int, SplitFrames>> split_frames(ResultsDb& db, int64_t run_id, const std::string& codec) {
  auto frames = db.frames(run_id);
  if (!frames) return std::move(frames.error());
  std::map<int, std::vector<double>> enc, he, ret, post, srv, rest;
  for (const auto& f : *frames)
    if (f.ok && !f.warmup && f.codec == codec && !f.exit_index) {  // a frame that ended at an exit sent nothing
      const int k = static_cast<int>(f.split);
      enc[k].push_back(static_cast<double>(f.encode_ns) / 1e6);
      he[k].push_back(static_cast<double>(f.head_ns + f.encode_ns) / 1e6);
      ret[k].push_back(static_cast<double>(f.return_ns) / 1e6);
      post[k].push_back(static_cast<double>(f.post_ns) / 1e6);
      const double server = static_cast<double>(f.server_ns) / 1e6;
      srv[k].push_back(server);
      rest[k].push_back(static_cast<double>(f.total_ns - f.queue_ns) / 1e6 - server);
    }
  std::map<int, SplitFrames> out;
  for (auto& [k, e] : enc) {
    SplitFrames& s = out[k];
    s.share = {protocol::median_of(e), protocol::median_of(he[k]),
               protocol::median_of(ret[k]) + protocol::median_of(post[k])};
    const auto cs = scv(srv[k]), ca = scv(rest[k]);
    if (cs && ca) s.kingman = (*ca + *cs) / 2;
  }
  return out;
}

// The CPU quota the run's participants ran under (the first one's), if any.
Result<std::optional<double>> participant_quota(ResultsDb& db, int64_t run_id) {
  auto devs = db.devices(run_id);
  if (!devs) return std::move(devs.error());
  for (const auto& d : *devs)
    if (d.role == kParticipant && d.cpu_quota) return d.cpu_quota;
  return std::optional<double>{};
}

// What one codec contributes to a plan, from one run's frames.
struct CodecBasis {
  std::string codec;
  int64_t run = 0;
  std::vector<SplitSummary> sums;
  std::map<int, const SplitSummary*> by_split;
  double ratio = 1, reply_default = 0, ov_a = 0, ov_b = 0;
  double server_own_ms = 0;  // the server's per-frame work outside the tail: mean over splits of median server_ns - tail_ns
  // Per-frame work outside the layers and the link at the splits a run
  // measured (its medians); the line ov_a + ov_b x bytes elsewhere.
  std::map<int, double> own_at;
  // Under a CPU quota, at those splits: the participant's share from each
  // run whose frames give it (quota_share_ms against the plan's head, the
  // median over runs), plus the server's own.
  std::map<int, std::vector<PartShare>> quota_at;
  std::string overhead, quota_note;
  // How much frames vary ((ca^2 + cs^2) / 2, see share_server) at the
  // splits the run measured with 2 or more frames; elsewhere the median of
  // those, or 1 (as exponential times vary) when there are none.
  std::map<int, double> kingman_at;
  double kingman_default = 1;
  double kingman(int k) const {
    const auto it = kingman_at.find(k);
    return it != kingman_at.end() ? it->second : kingman_default;
  }
  double overhead_ms(int k, double wire_bytes, double head_ms) const {
    if (const auto q = quota_at.find(k); q != quota_at.end()) {
      std::vector<double> v;
      for (const auto& s : q->second) v.push_back(quota_share_ms(s, head_ms));
      return protocol::median_of(v) + analysis::server_own_ms(*by_split.at(k));
    }
    const auto it = own_at.find(k);
    return it != own_at.end() ? it->second : ov_a + ov_b * wire_bytes;
  }
};

// One run's participant shares at the basis's measured splits.
void add_quota_shares(const std::map<int, SplitFrames>& frames, CodecBasis& b) {
  for (const auto& [k, s] : frames)
    if (b.by_split.count(k)) b.quota_at[k].push_back(s.share);
}

// The participant's share under a quota from the frames of `runs` (those
// with a quota), at the basis's measured splits; the quota, or none when no
// run had one (or none measured those splits).
Result<std::optional<double>> quota_shares(ResultsDb& db, const std::vector<int64_t>& runs, CodecBasis& b) {
  b.quota_at.clear();
  std::optional<double> quota;
  for (const int64_t r : runs) {
    auto q = participant_quota(db, r);
    if (!q) return std::move(q.error());
    if (!*q) continue;
    quota = *q;
    auto frames = split_frames(db, r, b.codec);
    if (!frames) return std::move(frames.error());
    add_quota_shares(*frames, b);
  }
  return b.quota_at.empty() ? std::nullopt : quota;
}

constexpr const char* kQuotaNote =
    "; under the participant's CPU quota ({} of a core) the encode at those splits is what the frames' median head "
    "+ encode exceed the profiled head by, between 0 and the encode's median (the throttle waits it pays are the "
    "head's, already in the profile)";

Result<CodecBasis> codec_basis(ResultsDb& db, int64_t run_id, const std::string& codec) {
  CodecBasis b;
  b.codec = codec;
  b.run = run_id;
  auto sums = db.split_table(run_id);
  if (!sums) return std::move(sums.error());
  b.sums = std::move(*sums);
  double raw_total = 0, wire_total = 0, reply_sum = 0;
  int reply_n = 0;
  for (const auto& s : b.sums)
    if (s.frames > 0 && !s.chained()) {
      b.by_split[s.split] = &s;
      raw_total += s.mean_raw_bytes;
      wire_total += s.mean_wire_bytes;
      reply_sum += s.mean_reply_bytes;
      ++reply_n;
    }
  b.ratio = raw_total > 0 ? wire_total / raw_total : 1.0;
  b.reply_default = reply_n ? reply_sum / reply_n : 0.0;
  // Per-frame processing outside the layers and the link: the participant's
  // encoding (codec, cipher, hand-off), reply decoding and post-processing,
  // and the server's own decoding and bookkeeping (server_ns - tail_ns): at
  // the splits the run measured, its medians of those stages (never its
  // totals); elsewhere a line a + b x wire_bytes fitted to them. The line
  // does not hold under a CPU quota, where encoding is mostly throttling that
  // follows the head, not the bytes (ResNet-18 at 0.12 of a core: 0.2-0.4 ms
  // at split 0 with 602 KB, 8.6-14.2 ms at split 4 with 803 KB).
  std::vector<std::pair<double, double>> pts;
  for (const auto& [k, sp] : b.by_split) {
    const SplitSummary& s = *sp;
    b.server_own_ms += std::max(0.0, server_own_ms(s)) / static_cast<double>(b.by_split.size());
    pts.push_back({s.mean_wire_bytes, participant_own_ms(s) + server_own_ms(s)});
    b.own_at[k] = pts.back().second;
  }
  std::tie(b.ov_a, b.ov_b) = fit_cost_line(pts);
  b.overhead = fmt::format(
      "{}: run {}'s medians of encode, return, post and server-overhead at the {} splits it "
      "measured; elsewhere {:.3f} ms + {:.3f} ms/MB, fitted to run {}'s medians (wire/raw {:.3f})",
      codec, run_id, pts.size(), b.ov_a, b.ov_b * 1e6, run_id, b.ratio);
  auto frames = split_frames(db, run_id, codec);
  if (!frames) return std::move(frames.error());
  auto quota = participant_quota(db, run_id);
  if (!quota) return std::move(quota.error());
  if (*quota) {
    add_quota_shares(*frames, b);
    if (!b.quota_at.empty()) b.quota_note = fmt::format(kQuotaNote, **quota);
  }
  std::vector<double> ks;
  for (const auto& [k, f] : *frames)
    if (f.kingman && b.by_split.count(k)) ks.push_back(b.kingman_at[k] = *f.kingman);
  if (!ks.empty()) b.kingman_default = protocol::median_of(ks);
  return b;
}

// --participant-from: the participant's own per-frame work (encode, return,
// post) is the target device's, not the basis's. Under a CPU quota it is
// mostly the quota's throttling (ResNet-18's encode at split 12: mostly 15-16
// ms at 0.12 of a core, 6-7 ms at 0.25), so it is taken from the calibration runs'
// frames (per split, the median over the runs of each run's median; the line
// refitted to those), and the server's share stays the basis run's.
// Calibration runs without frames of the basis's codec leave the basis's, and
// the note says so.
Status refit_participant_share(ResultsDb& db, const std::vector<int64_t>& runs, CodecBasis& b) {
  std::map<int, std::vector<double>> own;  // split -> per run median participant work (ms)
  for (const int64_t r : runs) {
    auto row = db.get_run(r);
    if (!row) return std::move(row.error());
    if (row->codec != b.codec) continue;
    auto sums = db.split_table(r);
    if (!sums) return std::move(sums.error());
    for (const auto& s : *sums)
      if (s.frames > 0 && !s.chained() && b.by_split.count(s.split)) own[s.split].push_back(participant_own_ms(s));
  }
  if (own.size() < 2) {
    b.overhead += fmt::format(
        " (the calibration runs {} have frames of {} at {} of its splits: the participant's share "
        "is the basis run's)",
        fmt::join(runs, ", "), b.codec, own.size());
    b.quota_at.clear();  // the basis's frames do not go with the calibration device's profiled head
    b.quota_note.clear();
    return {};
  }
  std::vector<std::pair<double, double>> part, srv;
  b.own_at.clear();
  for (auto& [k, v] : own) {
    part.push_back({b.by_split.at(k)->mean_wire_bytes, protocol::median_of(v)});  // sorts v
    b.own_at[k] = part.back().second + server_own_ms(*b.by_split.at(k));
  }
  for (const auto& [k, sp] : b.by_split) srv.push_back({sp->mean_wire_bytes, server_own_ms(*sp)});
  const auto [pa, pb] = fit_cost_line(part);
  const auto [sa, sb] = fit_cost_line(srv);
  b.ov_a = pa + sa;
  b.ov_b = pb + sb;
  b.overhead = fmt::format(
      "{}: at the {} splits both measured, the median over calibration runs {} of their encode, "
      "return and post medians, plus run {}'s server-overhead median; elsewhere {:.3f} ms + "
      "{:.3f} ms/MB: the participant's {:.3f} ms + {:.3f} ms/MB fitted to the calibration runs' "
      "medians, the server's {:.3f} ms + {:.3f} ms/MB to run {}'s (wire/raw {:.3f})",
      b.codec, part.size(), fmt::join(runs, ", "), b.run, b.ov_a, b.ov_b * 1e6, pa, pb * 1e6, sa, sb * 1e6, b.run,
      b.ratio);
  auto quota = quota_shares(db, runs, b);
  if (!quota) return std::move(quota.error());
  b.quota_note = *quota ? fmt::format(kQuotaNote, **quota) + " (per calibration run, then their median)" : "";
  return {};
}

// The newest completed run of the same model and input size with `codec`.
Result<int64_t> find_codec_run(ResultsDb& db, const RunRow& basis, const std::string& codec,
                               const std::string& input_shape) {
  auto runs = db.list_runs(0);
  if (!runs) return std::move(runs.error());
  auto a = db.split_table(basis.id);
  if (!a) return std::move(a.error());
  for (const auto& r : *runs) {
    if (r.model != basis.model || r.codec != codec || r.status != RunStatus::completed || r.frame_count == 0) continue;
    // Same input: the same raw bytes where both ran a split.
    auto b = db.split_table(r.id);
    if (!b) continue;
    bool common = false, same = true;
    for (const auto& x : *a)
      for (const auto& y : *b)
        if (x.key() == y.key() && x.frames > 0 && y.frames > 0) {
          common = true;
          same = same && x.mean_raw_bytes == y.mean_raw_bytes;
        }
    if (common && same) return r.id;
  }
  return make_error(Errc::not_found,
                    fmt::format("no completed run of {} at input {} with codec {} in {}: planning a codec needs its "
                                "measured bytes and costs; run the experiment once with `compression: {}`",
                                basis.model, input_shape, codec, db.path(), codec));
}

// Keeps the rows of the splits asked for (PlanOptions::splits): split
// points, or the names of the layers they cut after (`names`: split k ->
// layer k-1's name, the basis run's model_layers; #45 item 9).
Status limit_splits(Plan& p, const std::string& splits, int n, const std::map<int, std::string>& names) {
  if (splits.empty() || splits == "all") return {};
  const size_t before = p.rows.size();
  if (splits == "measured") {
    p.rows.erase(std::remove_if(p.rows.begin(), p.rows.end(), [](const PlanRow& r) { return r.bytes_from != "measured"; }),
                 p.rows.end());
    p.splits_note = fmt::format("splits: the {} of {} rows whose bytes a run measured", p.rows.size(), before);
    return {};
  }
  std::vector<int> keep;
  for (const auto& t : wire::split_on(splits, ',')) {
    char* end = nullptr;
    const long k = std::strtol(t.c_str(), &end, 10);
    if (!t.empty() && *end == '\0' && k >= 0 && k <= n) {
      keep.push_back(static_cast<int>(k));
      continue;
    }
    const auto named = std::find_if(names.begin(), names.end(), [&](const auto& kv) { return kv.second == t; });
    if (named == names.end() || named->first > n)
      return make_error(Errc::invalid_argument,
                        fmt::format("--splits: '{}' is not a split of {} (expected all, measured, or split points "
                                    "0..{} or the layers they cut after, separated by commas{})",
                                    t, p.model, n, names.empty() ? "; the run stored no layer names" : ""));
    keep.push_back(named->first);
  }
  p.rows.erase(std::remove_if(p.rows.begin(), p.rows.end(),
                              [&](const PlanRow& r) { return std::find(keep.begin(), keep.end(), r.split) == keep.end(); }),
               p.rows.end());
  p.splits_note = fmt::format("splits: {} as asked ({} of {} rows)", splits, p.rows.size(), before);
  return {};
}

bool choose(Plan& p, const PlanOptions& opt, const std::vector<int>* only) {
  double min_lat = 1e300, min_e = 1e300;
  for (const auto& r : p.rows) {
    min_lat = std::min(min_lat, r.latency_ms);
    if (r.energy_j) min_e = std::min(min_e, *r.energy_j);
  }
  double w = 1;
  if (opt.objective.rfind("weighted:", 0) == 0) w = std::atof(opt.objective.substr(9).c_str());
  double best = 1e300;
  p.chosen = -1;
  for (auto& r : p.rows) {
    if (only && (r.codec != p.basis_codec || std::find(only->begin(), only->end(), r.split) == only->end())) continue;
    if (!r.feasible) continue;
    double score;
    if (opt.objective == "latency") score = r.latency_ms;
    else if (opt.objective == "throughput") score = -r.fps;
    else if (opt.objective == "energy") score = r.energy_j ? *r.energy_j : 1e300;
    else score = w * r.latency_ms / min_lat + (1 - w) * (r.energy_j ? *r.energy_j / min_e : 1e300);
    if (score < best) {
      best = score;
      p.chosen = r.split;
      p.chosen_codec = r.codec;
    }
  }
  return p.chosen >= 0;
}

}  // namespace

// The link as run `run` measured it with its probe (tbf's bucket included
// where tracr emulated it); not_found when it has none.
Result<PlanLink> probe_link(const RunRow& run, const ProbeRow* probe) {
  if (!probe || !probe->up_mbps || !probe->down_mbps)
    return make_error(Errc::not_found,
                      fmt::format("run {} has no link probe; give a link (--link PROFILE, or --up-mbit/--down-mbit/"
                                  "--rtt-ms) or run with probe.enabled: true",
                                  run.id));
  PlanLink l;
  l.up_mbps = *probe->up_mbps;
  l.down_mbps = *probe->down_mbps;
  l.rtt_ms = static_cast<double>(probe->rtt_min_ns) / 1e6;
  l.name = run.link.empty() ? "probe" : run.link;
  l.source = fmt::format("link probe of run {} (measured by {})", run.id, probe->participant);
  // A link tracr emulated with tbf lets each message's first bytes through at once.
  const double up_tbf = tbf_rate(run.shaping, "up"), down_tbf = tbf_rate(run.shaping, "down");
  if (up_tbf > 0) l.up_burst = static_cast<double>(tbf_burst_bytes(up_tbf));
  if (down_tbf > 0) l.down_burst = static_cast<double>(tbf_burst_bytes(down_tbf));
  if (up_tbf > 0 || down_tbf > 0)
    l.source += fmt::format("; emulated with tbf: bursts of {:.0f} B up, {:.0f} B down", l.up_burst, l.down_burst);
  return l;
}

namespace {

// Head and tail compute per split k = 0..n. A graph model's run holds its
// segments timed whole (segment_profiles: the PARTICIPANT's heads, the
// SERVER's tails, as frames run them, fused and optimised); those are used
// where they exist, else the sum of the layer profiles (the mean where it
// was stored: what a run of frames sees under a CPU quota; else the median).
struct ComputeTimes {
  std::vector<double> head_ms, tail_ms;
  std::vector<std::string> from;
  std::string note;
};

// Heads from the segment profiles of `head_run` (the PARTICIPANT's run),
// tails from `run_id`'s.
Result<ComputeTimes> compute_times(ResultsDb& db, int64_t run_id, const std::vector<int64_t>& head_runs,
                                   const std::vector<const LayerProfileRecord*>& part,
                                   const std::vector<const LayerProfileRecord*>& srv, const std::string& part_dev) {
  const int n = static_cast<int>(part.size());
  auto segs = db.segment_profiles(run_id);
  if (!segs) return std::move(segs.error());
  std::map<int, double> head_seg, tail_seg;
  std::map<int, std::vector<double>> head_ms_of;  // per split: each head run's timing
  for (const int64_t head_run : head_runs) {
    auto head_segs = head_run == run_id ? segs : db.segment_profiles(head_run);
    if (!head_segs) return std::move(head_segs.error());
    for (const auto& s : *head_segs)
      if (s.split >= 0 && s.split <= n && s.side == "head" && s.device_role == kParticipant && s.device == part_dev)
        head_ms_of[s.split].push_back(s.mean_ns / 1e6);
  }
  for (auto& [k, v] : head_ms_of) head_seg[k] = protocol::median_of(v);  // several calibration runs: their median
  std::string srv_dev;
  for (const auto& s : *segs) {
    if (s.split < 0 || s.split > n) continue;
    if (s.side == "tail" && s.device_role == kServer && (srv_dev.empty() || s.device == srv_dev)) {
      srv_dev = s.device;
      tail_seg[s.split] = s.mean_ns / 1e6;
    }
  }
  auto layer_ms = [](const LayerProfileRecord* l) {
    return static_cast<double>(l->mean_ns ? *l->mean_ns : l->median_ns) / 1e6;
  };
  ComputeTimes t;
  int both = 0, some = 0;
  for (int k = 0; k <= n; ++k) {
    double h = 0, tl = 0;
    for (int i = 0; i < k; ++i) h += layer_ms(part[i]);
    for (int i = k; i < n; ++i) tl += layer_ms(srv[i]);
    // An empty head (k = 0) or tail (k = n) costs nothing either way.
    const bool hs = k == 0 || head_seg.count(k), ts = k == n || tail_seg.count(k);
    t.head_ms.push_back(k == 0 ? 0.0 : hs ? head_seg[k] : h);
    t.tail_ms.push_back(k == n ? 0.0 : ts ? tail_seg[k] : tl);
    t.from.push_back(hs && ts ? "segments" : hs ? "head segment, tail layers" : ts ? "head layers, tail segment" : "layers");
    both += hs && ts && (head_seg.count(k) || tail_seg.count(k));
    some += hs != ts;
  }
  if (head_seg.empty() && tail_seg.empty())
    t.note = "head and tail: sums of each device's layer profiles";
  else
    t.note = fmt::format("head and tail: timed whole as frames run them (segment profiles) at {} splits{}; sums of "
                         "layer profiles elsewhere (compute_from)",
                         both, some ? fmt::format(", one side only at {}", some) : "");
  return t;
}

}  // namespace

// A device as its profiles describe it.
std::string device_text(const DeviceRecord& d) {
  std::string t = fmt::format("{} {} ({} cores", d.role, d.device, d.cores);
  if (d.cpu_quota) t += fmt::format(", CPU quota {} cores", *d.cpu_quota);
  if (d.cpu_cores_limit) t += fmt::format(", pinned to {} CPUs", *d.cpu_cores_limit);
  if (!d.gpu.empty()) t += ", " + d.gpu;
  return t + ", hw_id " + d.hw_id + ")";
}

// What makes a device run layers at another speed: the machine, its emulated limits, the GPU it uses.
bool same_device(const DeviceRecord& a, const DeviceRecord& b) {
  return a.hw_id == b.hw_id && a.cpu_quota == b.cpu_quota && a.cpu_cores_limit == b.cpu_cores_limit && a.gpu == b.gpu;
}

namespace {

// "profiles of run R: PARTICIPANT p (...); SERVER s (...)": the devices
// whose profiles the plan uses (the PARTICIPANT's from `part_run`).
std::string profiled_devices(ResultsDb& db, int64_t run_id, int64_t part_run, const std::string& part_dev) {
  auto devs = db.devices(run_id);
  auto pdevs = part_run == run_id ? devs : db.devices(part_run);
  if (!devs || !pdevs) return {};
  std::string part, srv;
  for (const auto& d : *pdevs)
    if (d.role == kParticipant && d.device == part_dev && part.empty()) part = device_text(d);
  for (const auto& d : *devs)
    if (d.role == kServer && srv.empty()) srv = device_text(d);
  if (part.empty() || srv.empty()) return {};
  // Profiles a run reused were timed by an earlier run (#45 friction 2): say which.
  std::set<int64_t> timed;
  for (const int64_t r : {run_id, part_run})
    if (auto lp = db.layer_profiles(r))
      for (const auto& l : *lp)
        if (l.measured_run > 0 && l.measured_run != r) timed.insert(l.measured_run);
  const std::string reused = timed.empty() ? "" : fmt::format(" (reused: timed in run {})", fmt::join(timed, ", "));
  if (part_run != run_id)
    return fmt::format("profiles: {} of run {}; {} of run {}{}", part, part_run, srv, run_id, reused);
  return fmt::format("profiles of run {}: {}; {}{}", run_id, part, srv, reused);
}

}  // namespace

bool same_model(const std::string& fp_a, const std::string& model_a, const std::string& fp_b,
                const std::string& model_b) {
  return !fp_a.empty() && !fp_b.empty() ? fp_a == fp_b : model_a == model_b;
}

bool same_model(ResultsDb& db, const RunRow& a, const RunRow& b) {
  auto fp = [&](int64_t run) -> std::string {
    auto lp = db.layer_profiles(run);
    return lp && !lp->empty() ? lp->front().model_fp : std::string();
  };
  return same_model(fp(a.id), a.model, fp(b.id), b.model);
}

double server_time_ms(double mva, double s, double z, int n, double v) {
  const double bound = std::max(s, n * s - z);
  return bound + std::min(v, 1.0) * (mva - bound);
}

// PARTICIPANT devices of a run (its agents' READY rows); at least 1.
Result<int> run_participants(ResultsDb& db, int64_t run_id) {
  auto devs = db.devices(run_id);
  if (!devs) return std::move(devs.error());
  int n = 0;
  for (const auto& d : *devs) n += d.role == kParticipant;
  return std::max(n, 1);
}

namespace {

// The prediction with n participants sharing the SERVER, one frame in
// flight each: a closed network of each participant's own time z (the rest
// of a frame) and a FIFO server of service time s. Mean value analysis is
// exact when both vary as exponentials do (squared coefficients of variation
// ca^2 = cs^2 = 1); when both are constant the cycle settles at
// max(z + s, n s), with no wait below the knee (the asymptotic bound). In
// between, the wait is the bound's plus the MVA's excess over it scaled by
// Kingman's factor v = (ca^2 + cs^2) / 2, at most 1, of the basis run's
// frames. Frames vary little (v 0.0003-0.02 at the splits that load the
// server, results/heldout7): the MVA alone put ResNet-18's four participants
// 15-20 ms in a queue at split 12 that the runs never saw, and chose split
// 4, measured 9-11 % slower than split 12.
void share_server(PlanRow& r, int n, double server_own_ms, double v) {
  const double s = r.tail_ms + server_own_ms, z = r.latency_ms - s;
  double q = 0, resp = s;
  for (int i = 1; i <= n; ++i) {
    resp = s * (1 + q);
    q = z + resp > 0 ? i / (z + resp) * resp : 0;
  }
  resp = server_time_ms(resp, s, z, n, v);
  r.queue_ms = resp - s;
  r.latency_ms = z + resp;
  if (s > 0) r.fps = std::min(r.fps, 1e3 / (n * s));
}

// How many participants share the SERVER, and the label of that model.
Status share_the_server(ResultsDb& db, int64_t run_id, const PlanOptions& opt, const CodecBasis& basis, Plan& p) {
  std::string from = opt.participants_source;
  if (opt.participants > 0) {
    p.participants = opt.participants;
  } else {
    auto np = run_participants(db, run_id);
    if (!np) return std::move(np.error());
    p.participants = *np;
    from = fmt::format("as many as run {} had", run_id);
  }
  if (p.participants > 1)
    p.server_model = fmt::format(
        "modelled:mva-bound({} participants ({}), one frame in flight each, a FIFO server of service time tail + "
        "{:.3f} ms of the server's own work per frame; the wait is the asymptotic bound's plus the MVA's excess over "
        "it x (ca^2 + cs^2)/2 of run {}'s frames, {})",
        p.participants, from.empty() ? "as given" : from, basis.server_own_ms, basis.run,
        basis.kingman_at.empty()
            ? "none with 2 frames at a split: 1, the MVA's"
            : fmt::format("median {:.4f} over {} splits", basis.kingman_default, basis.kingman_at.size()));
  return {};
}

Status check_objective(const std::string& objective) {
  if (objective == "latency" || objective == "energy" || objective == "throughput" ||
      objective.rfind("weighted:", 0) == 0)
    return {};
  return make_error(Errc::invalid_argument, "objective '" + objective +
                                                "': expected latency, energy, throughput or weighted:W (W in 0..1, "
                                                "the weight of latency)");
}

// Each device's layer profiles: the SERVER's and the first PARTICIPANT's.
struct DeviceProfiles {
  std::vector<const LayerProfileRecord*> part, srv;
  std::string part_dev;
};

Result<DeviceProfiles> device_profiles(const std::vector<LayerProfileRecord>& profiles, int64_t run_id) {
  DeviceProfiles d;
  for (const auto& l : profiles) {
    if (l.device_role == kServer) d.srv.push_back(&l);
    else if (d.part_dev.empty() || l.device == d.part_dev) {
      d.part_dev = l.device;
      d.part.push_back(&l);
    }
  }
  if (d.part.empty() || d.srv.empty())
    return make_error(Errc::not_found,
                      fmt::format("run {} has no layer profiles for its {}: planning needs each device's per-layer "
                                  "times. Run the experiment with `record: {{layers: true}}` (the default), or "
                                  "`tracrctl profile MODEL` on the device",
                                  run_id, d.part.empty() && d.srv.empty() ? "devices"
                                          : d.part.empty()              ? "PARTICIPANT"
                                                                        : "SERVER"));
  if (d.part.size() != d.srv.size())
    return make_error(Errc::config, fmt::format("run {}: the PARTICIPANT profiled {} layers, the SERVER {}", run_id,
                                                d.part.size(), d.srv.size()));
  return d;
}

// plan --participant-from RUN: that run's PARTICIPANT profiles in `dev`,
// after checking it ran the basis run's model at its input and layers.
// One calibration run's PARTICIPANT layer profiles (same model, layers and input as the basis).
Result<std::vector<const LayerProfileRecord*>> participant_layers(ResultsDb& db, const RunRow& basis, int64_t part_run,
                                                                  const DeviceProfiles& dev,
                                                                  std::vector<LayerProfileRecord>& holder,
                                                                  std::string& part_dev) {
  auto other = db.get_run(part_run);
  if (!other) return std::move(other.error());
  auto lp = db.layer_profiles(part_run);
  if (!lp) return std::move(lp.error());
  holder = std::move(*lp);
  std::vector<const LayerProfileRecord*> part;
  std::string dev_name;
  for (const auto& l : holder)
    if (l.device_role == kParticipant && (dev_name.empty() || l.device == dev_name)) {
      dev_name = l.device;
      part.push_back(&l);
    }
  if (part.empty())
    return make_error(Errc::not_found, fmt::format("--participant-from {}: run {} has no PARTICIPANT layer profiles "
                                                   "(record.layers: true, the default, records them)",
                                                   part_run, part_run));
  // The profiles in hand, not a second read of both runs' (same_model's rule).
  if (!same_model(part.front()->model_fp, other->model, dev.part.front()->model_fp, basis.model))
    return make_error(Errc::invalid_argument,
                      fmt::format("--participant-from {}: run {} ran {}, the basis run {} ran {}; the PARTICIPANT's "
                                  "profiles must be of the same model",
                                  part_run, part_run, other->model, basis.id, basis.model));
  if (part.size() != dev.part.size() || part.front()->input_shape != dev.part.front()->input_shape)
    return make_error(Errc::invalid_argument,
                      fmt::format("--participant-from {}: its PARTICIPANT profiled {} layers at input {}, the basis "
                                  "run {} {} at {}",
                                  part_run, part.size(), part.front()->input_shape, basis.id, dev.part.size(),
                                  dev.part.front()->input_shape));
  if (!part_dev.empty() && dev_name != part_dev)
    return make_error(Errc::invalid_argument,
                      fmt::format("--participant-from {}: its PARTICIPANT is {}, the first calibration run's is {}",
                                  part_run, dev_name, part_dev));
  part_dev = dev_name;
  return part;
}

// --participant-from RUN[,RUN...]: the PARTICIPANT's layer profiles from
// those runs instead of the basis; with several, each layer's time is the
// median of the runs' (one slow calibration run does not carry the plan).
Status use_participant_from(ResultsDb& db, const RunRow& basis, int64_t part_run, const std::vector<int64_t>& more,
                            std::vector<LayerProfileRecord>& holder, DeviceProfiles& dev) {
  std::string part_dev;
  auto part = participant_layers(db, basis, part_run, dev, holder, part_dev);
  if (!part) return std::move(part.error());
  std::vector<std::vector<double>> mean_ns(part->size()), median_ns(part->size());
  auto add = [&](const std::vector<const LayerProfileRecord*>& layers) {
    for (size_t i = 0; i < layers.size(); ++i) {
      mean_ns[i].push_back(static_cast<double>(layers[i]->mean_ns ? *layers[i]->mean_ns : layers[i]->median_ns));
      median_ns[i].push_back(static_cast<double>(layers[i]->median_ns));
    }
  };
  add(*part);
  for (const int64_t r : more) {
    std::vector<LayerProfileRecord> other_holder;
    auto other = participant_layers(db, basis, r, dev, other_holder, part_dev);
    if (!other) return std::move(other.error());
    add(*other);
  }
  if (!more.empty())
    for (size_t i = 0; i < part->size(); ++i) {
      auto& l = const_cast<LayerProfileRecord&>(*(*part)[i]);  // points into `holder`, which this call owns
      l.mean_ns = static_cast<int64_t>(std::llround(protocol::median_of(mean_ns[i])));
      l.median_ns = static_cast<int64_t>(std::llround(protocol::median_of(median_ns[i])));
    }
  dev.part = std::move(*part);
  dev.part_dev = part_dev;
  return {};
}

// Bytes and per-frame processing per split and codec: measured by the basis
// run for its codec, and by the newest run of the same model and input with
// each other codec asked for.
Result<std::vector<CodecBasis>> codec_bases(ResultsDb& db, const RunRow& run, const PlanOptions& opt, Plan& p) {
  std::vector<std::string> codecs = opt.codecs.empty() ? std::vector<std::string>{run.codec} : opt.codecs;
  std::vector<CodecBasis> bases;
  for (const auto& c : codecs) {
    int64_t from = run.id;
    if (c != run.codec) {
      auto other = find_codec_run(db, run, c, p.input_shape);
      if (!other) return std::move(other.error());
      from = *other;
    }
    auto b = codec_basis(db, from, c);
    if (!b) return std::move(b.error());
    if (opt.participant_run > 0 && opt.participant_run != run.id) {
      std::vector<int64_t> calib = {opt.participant_run};
      calib.insert(calib.end(), opt.participant_more.begin(), opt.participant_more.end());
      TRACR_TRY(refit_participant_share(db, calib, *b));
    }
    bases.push_back(std::move(*b));
    p.overhead += (p.overhead.empty() ? "" : "; ") + bases.back().overhead + bases.back().quota_note;
  }
  return bases;
}

// The participant's energy: per-layer joules of one source (a meter when
// there is one), its idle power and the radio model of the link.
// The participant's energy basis (plan.hpp): layer energy of one source (a
// measured source first) with the source's idle power, and a radio model.
Result<EnergyBasis> energy_basis(ResultsDb& db, int64_t run_id, const std::string& part_dev, int n,
                                 const PlanOptions& opt, Plan& p) {
  auto eb = participant_energy(db, run_id, part_dev, n, !opt.radio.empty() ? opt.radio : p.link.name);
  if (eb) p.energy_source = eb->source;
  return eb;
}

// The prediction for split k with one codec.
PlanRow predict_row(int k, const CodecBasis& cb, const ComputeTimes& compute, const DeviceProfiles& d,
                    const EnergyBasis& eb, const PlanOptions& opt, const Plan& p) {
  PlanRow r;
  r.split = k;
  r.codec = cb.codec;
  r.head_ms = compute.head_ms[k];
  r.tail_ms = compute.tail_ms[k];
  r.compute_from = compute.from[k];
  if (auto it = cb.by_split.find(k); it != cb.by_split.end()) {
    r.wire_bytes = it->second->mean_wire_bytes;
    r.reply_bytes = it->second->mean_reply_bytes;
    r.bytes_from = "measured";
  } else {
    const double raw =
        k == 0 ? input_bytes(p.input_shape, d.part.front()->batch) : static_cast<double>(d.part[k - 1]->out_bytes);
    r.wire_bytes = raw * cb.ratio;
    r.reply_bytes = cb.reply_default > 0 ? cb.reply_default : static_cast<double>(d.part.back()->out_bytes);
    r.bytes_from = "profiled x ratio";
  }
  r.rtt_ms = p.link.rtt_ms;
  r.overhead_ms = cb.overhead_ms(k, r.wire_bytes, r.head_ms);
  // Each direction's bucket refills while the frame is elsewhere (the reply's gap leaves the upload out: fewer
  // tokens, the cautious side; the upload's gap includes the reply).
  const double elsewhere_ms = r.head_ms + r.rtt_ms + r.tail_ms + r.overhead_ms;
  r.down_ms = bits_ms(r.reply_bytes, p.link.down_mbps, p.link.down_burst, elsewhere_ms);
  r.up_ms = bits_ms(r.wire_bytes, p.link.up_mbps, p.link.up_burst, elsewhere_ms + r.down_ms);
  r.latency_ms = r.head_ms + r.up_ms + r.rtt_ms + r.tail_ms + r.down_ms + r.overhead_ms;
  r.fps = 1e3 / std::max({r.head_ms, r.up_ms, r.tail_ms + r.rtt_ms, r.down_ms, 1e-6});
  r.service_ms = r.tail_ms + cb.server_own_ms;
  r.alone_ms = r.latency_ms;
  r.variability = cb.kingman(k);
  if (p.participants > 1) share_server(r, p.participants, cb.server_own_ms, r.variability);
  if (eb.known)
    r.energy_j = eb.joules(k, r.head_ms, r.latency_ms, r.wire_bytes, r.reply_bytes, r.up_ms + r.down_ms + r.rtt_ms);
  if (opt.max_latency_ms && r.latency_ms > *opt.max_latency_ms) r.feasible = false;
  if (opt.max_energy_j && (!r.energy_j || *r.energy_j > *opt.max_energy_j)) r.feasible = false;
  return r;
}

// The devices' memory_mb as the runs stored them (the PARTICIPANT's from the
// run its profiles came from): a split whose head needs more than the
// PARTICIPANT's limit, or whose tail more than the SERVER's, is not chosen.
Status limit_memory(ResultsDb& db, int64_t run_id, int64_t part_run, const DeviceProfiles& d, Plan& p) {
  const std::string srv_dev = d.srv.front()->device;
  auto part_mb = db.device_memory_mb(part_run, d.part_dev);
  if (!part_mb) return std::move(part_mb.error());
  auto srv_mb = db.device_memory_mb(run_id, srv_dev);
  if (!srv_mb) return std::move(srv_mb.error());
  if (!*part_mb && !*srv_mb) return {};
  std::vector<double> weights, out_bytes = {input_bytes(p.input_shape, d.part.front()->batch)};
  for (const auto* l : d.part) {
    weights.push_back(4.0 * static_cast<double>(l->params));
    out_bytes.push_back(static_cast<double>(l->out_bytes));
  }
  const MemoryNeed need(weights, out_bytes);
  const int n = static_cast<int>(d.part.size());
  for (auto& r : p.rows) {
    r.memory_mb = {need.bytes(0, r.split) / 1e6, need.bytes(r.split, n) / 1e6};
    r.over_memory = (*part_mb && r.memory_mb[0] > **part_mb) || (*srv_mb && r.memory_mb[1] > **srv_mb);
    if (!r.over_memory) continue;
    r.feasible = false;
    ++p.over_memory;
  }
  std::vector<std::string> from;
  if (*part_mb) from.push_back(fmt::format("PARTICIPANT {} {:g} MB (run {}'s devices file)", d.part_dev, **part_mb,
                                           part_run));
  if (*srv_mb) from.push_back(fmt::format("SERVER {} {:g} MB (run {}'s devices file)", srv_dev, **srv_mb, run_id));
  p.memory_note = fmt::format("memory limits: {}; head MB and tail MB: the PARTICIPANT's and the SERVER's need = "
                              "its segment's weights (params x 4 B) + its largest live activations (a layer's input "
                              "+ output bytes, profiled); {} of {} rows "
                              "exceed a limit and are not chosen",
                              fmt::join(from, ", "), p.over_memory, p.rows.size());
  return {};
}

}  // namespace

// The planner plans two-tier splits: a chain run's placements (several cuts)
// are not its input yet. Error naming the run and one of its placements.
Status refuse_chain_run(ResultsDb& db, int64_t run_id) {
  auto sums = db.split_table(run_id);
  if (!sums) return std::move(sums.error());
  for (const auto& s : *sums)
    if (s.chained())
      return make_error(Errc::invalid_argument,
                        fmt::format("run {} ran a chain (placement {}): the planner plans two-tier splits only; "
                                    "planning placements over a chain is not built yet (#43); plan a two-tier run of "
                                    "the same devices",
                                    run_id, s.placement));
  return {};
}

Result<Plan> plan_from_run(ResultsDb& db, int64_t run_id, const PlanOptions& opt) {
  auto run = db.get_run(run_id);
  if (!run) return std::move(run.error());
  TRACR_TRY(check_objective(opt.objective));
  TRACR_TRY(refuse_chain_run(db, run_id));
  auto profiles = db.layer_profiles(run_id);
  if (!profiles) return std::move(profiles.error());
  auto dev = device_profiles(*profiles, run_id);
  if (!dev) return std::move(dev.error());
  const int64_t part_run = opt.participant_run > 0 ? opt.participant_run : run_id;
  std::vector<LayerProfileRecord> part_profiles;  // --participant-from: the pointers in dev->part point here
  if (part_run != run_id)
    TRACR_TRY(use_participant_from(db, *run, part_run, opt.participant_more, part_profiles, *dev));
  const int n = static_cast<int>(dev->part.size());
  Plan p;
  p.basis_run = run_id;
  if (part_run != run_id) {
    p.participant_run = part_run;
    p.participant_more = opt.participant_more;
  }
  p.model = run->model;
  p.input_shape = dev->part.front()->input_shape;
  p.objective = opt.objective;
  p.basis_codec = run->codec;
  auto bases = codec_bases(db, *run, opt, p);
  if (!bases) return std::move(bases.error());

  // The link: given, or the run's own probe.
  if (opt.link) {
    p.link = *opt.link;
  } else {
    auto probes = db.probes(run_id);
    if (!probes) return std::move(probes.error());
    auto l = probe_link(*run, probes->empty() ? nullptr : &probes->front());
    if (!l) return std::move(l.error());
    p.link = *l;
  }
  auto eb = energy_basis(db, part_run, dev->part_dev, n, opt, p);
  if (!eb) return std::move(eb.error());
  std::vector<int64_t> head_runs = {part_run};
  head_runs.insert(head_runs.end(), opt.participant_more.begin(), opt.participant_more.end());
  auto compute = compute_times(db, run_id, head_runs, dev->part, dev->srv, dev->part_dev);
  if (!compute) return std::move(compute.error());
  p.compute_note = compute->note;
  p.devices_note = profiled_devices(db, run_id, part_run, dev->part_dev);
  if (!opt.participant_more.empty() && !p.devices_note.empty())
    p.devices_note += fmt::format(" (the PARTICIPANT's: median per layer over runs {}, {})", part_run,
                                  fmt::join(opt.participant_more, ", "));
  TRACR_TRY(share_the_server(db, run_id, opt, bases->front(), p));
  for (const CodecBasis& cb : *bases)
    for (int k = 0; k <= n; ++k) p.rows.push_back(predict_row(k, cb, *compute, *dev, *eb, opt, p));
  if ((opt.objective == "energy" || opt.objective.rfind("weighted:", 0) == 0 || opt.max_energy_j) && !eb->known)
    return make_error(Errc::not_found,
                      fmt::format("run {} has no per-layer energy for {}: an energy objective needs a meter on the "
                                  "device or a power_model in the devices file, and record.layers",
                                  run_id, dev->part_dev));
  std::map<int, std::string> names;
  if (auto cn = store::cut_names(db, run_id)) names = std::move(*cn);
  TRACR_TRY(limit_splits(p, opt.splits, n, names));
  TRACR_TRY(limit_memory(db, run_id, part_run, *dev, p));
  choose(p, opt, nullptr);
  return p;
}

void validate_against(ResultsDb& db, Plan& p, int64_t run) {
  if (run == 0) run = p.basis_run;
  auto sums = db.split_table(run);
  if (!sums) return;
  auto row = db.get_run(run);
  const std::string codec = row ? row->codec : p.basis_codec;
  p.validation_run = run;
  std::vector<int> measured;
  std::vector<double> head_diff, tail_diff;  // profiled vs frames, % per split
  double best = 1e300, err_sum = 0;
  for (const auto& s : *sums) {
    if (s.frames == 0 || s.chained()) continue;  // a chain's placement is not a split the plan predicts
    const double ms = s.stage("total_ns").median_ns / 1e6;
    const double head = s.stage("head_ns").median_ns / 1e6, tail = s.stage("tail_ns").median_ns / 1e6;
    for (auto& r : p.rows)
      if (r.split == s.split && r.codec == codec) {
        r.measured_ms = ms;
        r.error_pct = (r.latency_ms - ms) / ms * 100;
        err_sum += std::fabs(*r.error_pct);
        measured.push_back(s.split);
        if (r.head_ms > 0 && head > 0) head_diff.push_back((r.head_ms - head) / head * 100);
        if (r.tail_ms > 0 && tail > 0) tail_diff.push_back((r.tail_ms - tail) / tail * 100);
      }
    if (ms < best) {
      best = ms;
      p.measured_best = s.split;
    }
  }
  if (measured.empty()) return;
  p.mape_pct = err_sum / static_cast<double>(measured.size());
  p.head_vs_frames_splits = static_cast<int>(head_diff.size());
  p.tail_vs_frames_splits = static_cast<int>(tail_diff.size());
  if (!head_diff.empty()) p.head_vs_frames_pct = protocol::median_of(head_diff);
  if (!tail_diff.empty()) p.tail_vs_frames_pct = protocol::median_of(tail_diff);
  // The choice among the splits the run measured, judged by their measurements.
  PlanOptions o;
  o.objective = p.objective;
  choose(p, o, &measured);
  for (const auto& r : p.rows)
    if (r.split == p.chosen && r.codec == p.chosen_codec && r.measured_ms) p.miss_pct = (*r.measured_ms / best - 1) * 100;
}

Result<Repeatability> repeatability(ResultsDb& db, const std::vector<int64_t>& runs) {
  if (runs.size() < 2) return make_error(Errc::invalid_argument, "repeatability: needs at least 2 runs");
  std::vector<std::map<int, double>> med(runs.size());  // per run: split -> median total (ms)
  for (size_t i = 0; i < runs.size(); ++i) {
    auto sums = db.split_table(runs[i]);
    if (!sums) return std::move(sums.error());
    for (const auto& s : *sums)
      if (s.frames > 0 && !s.chained()) med[i][s.split] = s.stage("total_ns").median_ns / 1e6;
  }
  std::vector<int> common;
  for (const auto& [k, v] : med[0])
    if (std::all_of(med.begin(), med.end(), [k = k](const auto& m) { return m.count(k) > 0; })) common.push_back(k);
  if (common.empty())
    return make_error(Errc::invalid_argument,
                      fmt::format("repeatability: no split was measured by all of runs {}", fmt::join(runs, ", ")));
  Repeatability out;
  out.splits = static_cast<int>(common.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    double err = 0, own_best = 1e300, others_best = 1e300;
    int own_k = -1, others_k = -1;
    for (int k : common) {
      std::vector<double> others;
      for (size_t j = 0; j < runs.size(); ++j)
        if (j != i) others.push_back(med[j][k]);
      const double pred = protocol::median_of(others), ms = med[i][k];
      err += std::fabs(pred - ms) / ms * 100;
      if (ms < own_best) own_best = ms, own_k = k;
      if (pred < others_best) others_best = pred, others_k = k;
    }
    out.mape_pct.push_back(err / static_cast<double>(common.size()));
    out.best_agrees += own_k == others_k ? 1 : 0;
  }
  return out;
}

Result<int64_t> store_plan(ResultsDb& db, const Plan& p, const JointPlan* joint) {
  sqlite3* h = db.handle();
  auto exec = [&](const std::string& sql, const std::vector<std::optional<std::string>>& args) -> Status {
    Statement q(h, sql.c_str());
    if (!q.prepared()) return q.error("store plan");
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i]) q.bind(static_cast<int>(i + 1), std::string_view(*args[i]));
      else q.bind_null(static_cast<int>(i + 1));
    }
    return q.run("store plan");
  };
  auto num = [](const std::optional<double>& v) -> std::optional<std::string> {
    return v && std::isfinite(*v) ? std::optional<std::string>(fmt::format("{:.17g}", *v)) : std::nullopt;
  };
  auto i64 = [](int64_t v) -> std::optional<std::string> { return std::to_string(v); };
  auto txt = [](const std::string& s) -> std::optional<std::string> { return s; };
  TRACR_TRY(exec("BEGIN", {}));
  auto st = exec(
      "INSERT INTO plans(created_at, basis_run, model, input_shape, objective, link, link_source, up_mbps, down_mbps, "
      "rtt_ms, overhead, energy_source, chosen, chosen_codec, mape_pct, measured_best, miss_pct, validation_run, "
      "participants, server_model, participant_run, head_vs_frames_pct, tail_vs_frames_pct) "
      "VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "?)",
      {i64(p.basis_run),
       txt(p.model),
       txt(p.input_shape),
       txt(p.objective),
       txt(p.link.name),
       txt(p.link.source),
       num(p.link.up_mbps),
       num(p.link.down_mbps),
       num(p.link.rtt_ms),
       txt(p.overhead),
       p.energy_source.empty() ? std::nullopt : txt(p.energy_source),
       p.chosen >= 0 ? i64(p.chosen) : std::nullopt,
       p.chosen >= 0 ? txt(p.chosen_codec) : std::nullopt,
       num(p.mape_pct),
       p.measured_best >= 0 ? i64(p.measured_best) : std::nullopt,
       num(p.miss_pct),
       p.mape_pct && p.validation_run > 0 ? i64(p.validation_run) : std::nullopt,
       i64(p.participants),
       p.server_model.empty() ? std::nullopt : txt(p.server_model),
       p.participant_run > 0 ? i64(p.participant_run) : std::nullopt,
       num(p.head_vs_frames_pct),
       num(p.tail_vs_frames_pct)});
  if (!st) {
    (void)exec("ROLLBACK", {});
    return std::move(st.error());
  }
  const int64_t id = last_insert_rowid(h);
  for (const auto& r : p.rows) {
    st = exec("INSERT INTO plan_rows(plan_id, split, codec, head_ms, up_ms, rtt_ms, tail_ms, down_ms, other_ms, "
              "latency_ms, fps, wire_bytes, reply_bytes, bytes_from, energy_j, feasible, measured_ms, error_pct, compute_from, "
              "queue_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              {i64(id), i64(r.split), txt(r.codec), num(r.head_ms), num(r.up_ms), num(r.rtt_ms), num(r.tail_ms), num(r.down_ms),
               num(r.overhead_ms),
               num(r.latency_ms), num(r.fps), num(r.wire_bytes), num(r.reply_bytes), txt(r.bytes_from),
               num(r.energy_j), i64(r.feasible ? 1 : 0), num(r.measured_ms), num(r.error_pct), txt(r.compute_from),
               num(r.queue_ms)});
    if (!st) {
      (void)exec("ROLLBACK", {});
      return std::move(st.error());
    }
  }
  for (size_t i = 0; joint && i < joint->classes.size(); ++i) {
    const JointClass& c = joint->classes[i];
    const PlanRow& r = p.rows[c.row];
    st = exec(
        "INSERT INTO plan_assignments(plan_id, split, codec, participants, latency_ms, queue_ms, fps, "
        "measured_ms, error_pct, model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {i64(id), i64(r.split), txt(r.codec), i64(c.participants), num(c.latency_ms), num(c.queue_ms), num(c.fps),
         num(c.measured_ms), num(c.error_pct), txt(joint->model)});
    if (!st) {
      (void)exec("ROLLBACK", {});
      return std::move(st.error());
    }
  }
  TRACR_TRY(exec("COMMIT", {}));
  return id;
}

namespace {

// Whose PARTICIPANT profiles a held-out plan used.
std::string participant_text(const Plan& p) {
  if (!p.participant_run) return "alone";
  if (p.participant_more.empty()) return fmt::format("with run {}'s PARTICIPANT profiles", p.participant_run);
  return fmt::format("with the PARTICIPANT profiles of runs {}, {} (median per layer)", p.participant_run,
                     fmt::join(p.participant_more, ", "));
}

}  // namespace

namespace {

// The profiles against the validating run's frames, and a warning when they
// are far from them.
std::string profiles_note(const Plan& p) {
  if (!p.head_vs_frames_pct && !p.tail_vs_frames_pct) return {};
  std::string o;
  auto part = [](const char* what, const std::optional<double>& v, int n) {
    return v ? fmt::format("{} {:+.1f} % (median over {} split{})", what, *v, n, n == 1 ? "" : "s")
             : fmt::format("{} not timed", what);
  };
  o += fmt::format("profiles against run {}'s frames, compute only: {}, {}\n",
                   p.validation_run ? p.validation_run : p.basis_run,
                   part("PARTICIPANT heads", p.head_vs_frames_pct, p.head_vs_frames_splits),
                   part("SERVER tails", p.tail_vs_frames_pct, p.tail_vs_frames_splits));
  // Profiles far from the frames they should explain (a loaded machine
  // while profiling, one repetition): say so where the error is read.
  const double far = std::max(std::fabs(p.head_vs_frames_pct.value_or(0)), std::fabs(p.tail_vs_frames_pct.value_or(0)));
  if (far > kProfileFarPct)
    o += fmt::format("warning: run {}'s layer profiles are {:.0f} % from run {}'s frames (more than {:.0f} %): the "
                     "error says as much about the conditions (e.g. a machine loaded while profiling) as about the "
                     "plan; repeat the run (tracrctl run EXP --repeat N) and validate on the series (plan RUN "
                     "--validate-on RUN1,RUN2,...) before trusting it\n",
                     p.basis_run, far, p.validation_run ? p.validation_run : p.basis_run, kProfileFarPct);
  return o;
}

}  // namespace

std::string format_plan(const Plan& p, size_t width) {
  const std::string head = fmt::format(
      "plan for {} at {} from run {} (objective {}): link {}: up {:.3f} Mbit/s, down {:.3f} Mbit/s, rtt {:.3f} ms "
      "({})\n",
      p.model, p.input_shape, p.basis_run, p.objective, p.link.name, p.link.up_mbps, p.link.down_mbps, p.link.rtt_ms,
      p.link.source);
  const bool validated = p.mape_pct.has_value();
  bool several = false;
  for (const auto& r : p.rows) several = several || r.codec != p.basis_codec;
  const bool shared = p.participants > 1;
  // One row per split; narrower than the terminal: wire B, frames/s, other
  // ms, then down ms go first (fit_table names them).
  std::vector<std::string> head_row = {"", "split"};
  if (several) head_row.push_back("codec");
  head_row.insert(head_row.end(), {"head ms", "up ms", "tail ms", "down ms", "other ms"});
  if (shared) head_row.push_back("queue ms");
  head_row.insert(head_row.end(), {"latency ms", "frames/s", "wire B"});
  if (!p.energy_source.empty()) head_row.push_back("edge J");
  const bool memory = !p.memory_note.empty();
  if (memory) head_row.insert(head_row.end(), {"head MB", "tail MB"});
  if (validated) head_row.insert(head_row.end(), {"measured ms", "error %"});
  head_row.push_back("");
  std::vector<std::vector<std::string>> cells = {head_row};
  auto ms = [](double v) { return fmt::format("{:.3f}", v); };
  for (const auto& r : p.rows) {
    if (validated && !r.measured_ms) continue;  // validation shows the splits the run measured
    std::vector<std::string> row = {r.split == p.chosen && r.codec == p.chosen_codec ? "*" : "",
                                    std::to_string(r.split)};
    if (several) row.push_back(r.codec);
    row.insert(row.end(), {ms(r.head_ms), ms(r.up_ms), ms(r.tail_ms), ms(r.down_ms), ms(r.overhead_ms)});
    if (shared) row.push_back(ms(r.queue_ms));
    row.insert(row.end(), {ms(r.latency_ms), fmt::format("{:.1f}", r.fps), fmt::format("{:.0f}", r.wire_bytes)});
    if (!p.energy_source.empty()) row.push_back(r.energy_j ? fmt::format("{:.4f}", *r.energy_j) : "-");
    for (size_t d = 0; memory && d < 2; ++d)
      row.push_back(d < r.memory_mb.size() ? fmt::format("{:.1f}", r.memory_mb[d]) : "-");
    if (validated)
      row.insert(row.end(), {r.measured_ms ? ms(*r.measured_ms) : "-",
                             r.error_pct ? fmt::format("{:+.1f}", *r.error_pct) : "-"});
    row.push_back(r.over_memory ? "(over memory_mb)" : r.feasible ? "" : "(violates a constraint)");
    cells.push_back(std::move(row));
  }
  auto col = [&](const char* name) {
    return static_cast<size_t>(std::find(head_row.begin(), head_row.end(), name) - head_row.begin());
  };
  std::set<size_t> left = {0, head_row.size() - 1};
  if (several) left.insert(col("codec"));
  const std::string table =
      fit_table(cells, left, width, {col("wire B"), col("frames/s"), col("other ms"), col("down ms")});
  std::string o = "other ms: " + p.overhead + "\n";
  if (!p.compute_note.empty()) o += p.compute_note + "\n";
  if (!p.devices_note.empty()) o += p.devices_note + "\n";
  if (shared) o += "queue ms: the wait for the shared SERVER, " + p.server_model + "\n";
  if (!p.splits_note.empty()) o += p.splits_note + "\n";
  if (memory) o += p.memory_note + "\n";
  if (p.chosen < 0)
    o += p.over_memory > 0 ? fmt::format("no split meets the constraints ({} of {} rows over memory_mb: raise "
                                         "memory_mb in the devices file, or plan another device)\n",
                                         p.over_memory, p.rows.size())
                           : std::string("no split meets the constraints\n");
  else o += fmt::format("* chosen: split {}{}\n", p.chosen, several ? ", codec " + p.chosen_codec : "");
  if (!p.energy_source.empty()) o += fmt::format("edge J: participant energy per frame, {}\n", p.energy_source);
  if (validated)
    o += fmt::format(
        "validation{}: latency MAPE {:.1f} % over {} splits; measured best split {}; chosen split {} {}\n",
        p.validation_run != p.basis_run ? fmt::format(" against run {} (held out: planned from run {} {})",
                                                      p.validation_run, p.basis_run, participant_text(p))
                                        : std::string(),
        *p.mape_pct,
        std::count_if(p.rows.begin(), p.rows.end(), [](const PlanRow& r) { return r.measured_ms.has_value(); }),
        p.measured_best, p.chosen,
        p.miss_pct ? (*p.miss_pct <= 0 ? std::string("is the measured best")
                                       : fmt::format("is {:.1f} % slower than it (measured)", *p.miss_pct))
                   : std::string("was not measured"));
  if (validated) o += profiles_note(p);
  const int w = static_cast<int>(width);
  return wrap_words(head, w) + table + wrap_words(o, w);
}

}  // namespace tracr::analysis
