#include "analysis/plan.hpp"
#include "core/log.hpp"

#include "core/text.hpp"
#include "core/token_bucket.hpp"
#include "core/user_error.hpp"
#include "store/default_db.hpp"
#include "store/statement.hpp"


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/agent_role.hpp"
#include "agent/energy.hpp"
#include "protocol/codec.hpp"
#include "protocol/stats.hpp"
#include "settings/config.hpp"

namespace tracr::analysis {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;

// The roles as the database stores them (device_role, devices.role).
constexpr std::string_view kServer = agent::role_name(agent::AgentRole::server);
constexpr std::string_view kParticipant = agent::role_name(agent::AgentRole::participant);

namespace {

double bits_ms(double bytes, double mbps, double burst) {
  return mbps > 0 ? std::max(0.0, bytes - burst) * 8.0 / (mbps * 1e3) : 0.0;
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

// What one codec contributes to a plan, from one run's frames.
struct CodecBasis {
  std::string codec;
  int64_t run = 0;
  std::vector<SplitSummary> sums;
  std::map<int, const SplitSummary*> by_split;
  double ratio = 1, reply_default = 0, ov_a = 0, ov_b = 0;
  double server_own_ms = 0;  // the server's per-frame work outside the tail: mean over splits of median server_ns - tail_ns
  std::string overhead;
};

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
    if (s.frames > 0) {
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
  // and the server's own decoding and bookkeeping (server_ns - tail_ns). A
  // line a + b x wire_bytes fitted to the run's medians of those measured
  // stages (never to its totals).
  std::vector<std::pair<double, double>> pts;
  for (const auto& [k, sp] : b.by_split) {
    const SplitSummary& s = *sp;
    b.server_own_ms +=
        std::max(0.0, s.stage("server_ns").median_ns - s.stage("tail_ns").median_ns) / 1e6 / static_cast<double>(b.by_split.size());
    const double y = (s.stage("encode_ns").median_ns + s.stage("return_ns").median_ns + s.stage("post_ns").median_ns +
                      s.stage("server_ns").median_ns - s.stage("tail_ns").median_ns) / 1e6;
    pts.push_back({s.mean_wire_bytes, y});
  }
  if (!pts.empty()) {
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
    b.ov_b = sxx > 0 && sxy > 0 ? sxy / sxx : 0.0;  // a cost cannot fall with bytes: flat when it does not rise
    b.ov_a = my - b.ov_b * mx;
  }
  b.overhead = fmt::format("{}: {:.3f} ms + {:.3f} ms/MB, fitted to run {}'s encode, return, post and server-overhead "
                           "medians over {} splits (wire/raw {:.3f})",
                           codec, b.ov_a, b.ov_b * 1e6, run_id, pts.size(), b.ratio);
  return b;
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
        if (x.split == y.split && x.frames > 0 && y.frames > 0) {
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

// Keeps the rows of the splits asked for (PlanOptions::splits).
Status limit_splits(Plan& p, const std::string& splits, int n) {
  if (splits.empty() || splits == "all") return {};
  const size_t before = p.rows.size();
  if (splits == "measured") {
    p.rows.erase(std::remove_if(p.rows.begin(), p.rows.end(), [](const PlanRow& r) { return r.bytes_from != "measured"; }),
                 p.rows.end());
    p.splits_note = fmt::format("splits: the {} of {} rows whose bytes a run measured", p.rows.size(), before);
    return {};
  }
  std::vector<int> keep;
  for (const auto& t : agent::split_on(splits, ',')) {
    char* end = nullptr;
    const long k = std::strtol(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || k < 0 || k > n)
      return make_error(Errc::invalid_argument,
                        fmt::format("--splits: '{}' is not a split of {} (expected all, measured, or split points "
                                    "0..{} separated by commas)",
                                    t, p.model, n));
    keep.push_back(static_cast<int>(k));
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
Result<ComputeTimes> compute_times(ResultsDb& db, int64_t run_id, int64_t head_run,
                                   const std::vector<const LayerProfileRecord*>& part,
                                   const std::vector<const LayerProfileRecord*>& srv, const std::string& part_dev) {
  const int n = static_cast<int>(part.size());
  auto segs = db.segment_profiles(run_id);
  if (!segs) return std::move(segs.error());
  auto head_segs = head_run == run_id ? segs : db.segment_profiles(head_run);
  if (!head_segs) return std::move(head_segs.error());
  std::map<int, double> head_seg, tail_seg;
  std::string srv_dev;
  for (const auto& s : *head_segs)
    if (s.split >= 0 && s.split <= n && s.side == "head" && s.device_role == kParticipant && s.device == part_dev)
      head_seg[s.split] = s.mean_ns / 1e6;
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
  if (part_run != run_id) return fmt::format("profiles: {} of run {}; {} of run {}", part, part_run, srv, run_id);
  return fmt::format("profiles of run {}: {}; {}", run_id, part, srv);
}

// PARTICIPANT devices of a run (its agents' READY rows); at least 1.
Result<int> run_participants(ResultsDb& db, int64_t run_id) {
  auto devs = db.devices(run_id);
  if (!devs) return std::move(devs.error());
  int n = 0;
  for (const auto& d : *devs) n += d.role == kParticipant;
  return std::max(n, 1);
}

// The prediction with n participants sharing the SERVER (plan.hpp: mean
// value analysis of the closed network; exact for exponential service
// times, an approximation for steadier ones).
void share_server(PlanRow& r, int n, double server_own_ms) {
  const double s = r.tail_ms + server_own_ms, z = r.latency_ms - s;
  double q = 0, resp = s;
  for (int i = 1; i <= n; ++i) {
    resp = s * (1 + q);
    q = z + resp > 0 ? i / (z + resp) * resp : 0;
  }
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
        "modelled:mva({} participants ({}), one frame in flight each, a FIFO server of service time tail + {:.3f} ms "
        "of the server's own work per frame)",
        p.participants, from.empty() ? "as given" : from, basis.server_own_ms);
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
Status use_participant_from(ResultsDb& db, const RunRow& basis, int64_t part_run,
                            std::vector<LayerProfileRecord>& holder, DeviceProfiles& dev) {
  auto other = db.get_run(part_run);
  if (!other) return std::move(other.error());
  if (other->model != basis.model)
    return make_error(Errc::invalid_argument,
                      fmt::format("--participant-from {}: run {} ran {}, the basis run {} ran {}; the PARTICIPANT's "
                                  "profiles must be of the same model",
                                  part_run, part_run, other->model, basis.id, basis.model));
  auto lp = db.layer_profiles(part_run);
  if (!lp) return std::move(lp.error());
  holder = std::move(*lp);
  std::vector<const LayerProfileRecord*> part;
  std::string part_dev;
  for (const auto& l : holder)
    if (l.device_role == kParticipant && (part_dev.empty() || l.device == part_dev)) {
      part_dev = l.device;
      part.push_back(&l);
    }
  if (part.empty())
    return make_error(Errc::not_found, fmt::format("--participant-from {}: run {} has no PARTICIPANT layer profiles "
                                                   "(record.layers: true, the default, records them)",
                                                   part_run, part_run));
  if (part.size() != dev.part.size() || part.front()->input_shape != dev.part.front()->input_shape)
    return make_error(Errc::invalid_argument,
                      fmt::format("--participant-from {}: its PARTICIPANT profiled {} layers at input {}, the basis "
                                  "run {} {} at {}",
                                  part_run, part.size(), part.front()->input_shape, basis.id, dev.part.size(),
                                  dev.part.front()->input_shape));
  dev.part = std::move(part);
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
    bases.push_back(std::move(*b));
    p.overhead += (p.overhead.empty() ? "" : "; ") + bases.back().overhead;
  }
  return bases;
}

// The participant's energy: per-layer joules of one source (a meter when
// there is one), its idle power and the radio model of the link.
struct EnergyBasis {
  bool known = false;
  std::vector<double> layer_j;
  std::optional<double> idle_w;  // the source's idle power (the same on each of its rows)
  const agent::RadioModel* radio = nullptr;
};

Result<EnergyBasis> energy_basis(ResultsDb& db, int64_t run_id, const std::string& part_dev, int n,
                                 const PlanOptions& opt, Plan& p) {
  auto energy = db.energy(run_id);
  if (!energy) return std::move(energy.error());
  std::map<std::string, std::map<int, const EnergyRow*>> layer_e;
  for (const auto& e : *energy)
    if (e.stage == "layer" && e.device == part_dev && e.layer_index && e.joules)
      layer_e[e.source][static_cast<int>(*e.layer_index)] = &e;
  const std::map<int, const EnergyRow*>* ej = nullptr;
  for (const auto& [src, m] : layer_e)
    if (static_cast<int>(m.size()) == n && (!ej || src.rfind("measured:", 0) == 0)) {
      ej = &m;
      p.energy_source = src;
    }
  EnergyBasis eb;
  if (ej) {
    eb.known = true;
    for (const auto& [i, row] : *ej) {
      eb.layer_j.push_back(*row->joules);
      if (row->idle_w) eb.idle_w = row->idle_w;
    }
  }
  eb.radio = agent::find_radio(!opt.radio.empty() ? opt.radio : p.link.name);
  if (!p.energy_source.empty())
    p.energy_source = "modelled:plan(" + p.energy_source + (eb.radio ? ", radio-" + eb.radio->name : "") + ")";
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
  r.up_ms = bits_ms(r.wire_bytes, p.link.up_mbps, p.link.up_burst);
  r.down_ms = bits_ms(r.reply_bytes, p.link.down_mbps, p.link.down_burst);
  r.rtt_ms = p.link.rtt_ms;
  r.overhead_ms = cb.ov_a + cb.ov_b * r.wire_bytes;
  r.latency_ms = r.head_ms + r.up_ms + r.rtt_ms + r.tail_ms + r.down_ms + r.overhead_ms;
  r.fps = 1e3 / std::max({r.head_ms, r.up_ms, r.tail_ms + r.rtt_ms, r.down_ms, 1e-6});
  if (p.participants > 1) share_server(r, p.participants, cb.server_own_ms);
  if (eb.known) {
    double e = 0;
    for (int i = 0; i < k; ++i) e += eb.layer_j[static_cast<size_t>(i)];
    if (eb.idle_w) e += *eb.idle_w * (r.latency_ms - r.head_ms) / 1e3;
    if (eb.radio)
      e += eb.radio->alpha_up * r.wire_bytes * 8 / 1e6 + eb.radio->alpha_down * r.reply_bytes * 8 / 1e6 +
           eb.radio->beta * (r.up_ms + r.down_ms + r.rtt_ms) / 1e3;
    r.energy_j = e;
  }
  if (opt.max_latency_ms && r.latency_ms > *opt.max_latency_ms) r.feasible = false;
  if (opt.max_energy_j && (!r.energy_j || *r.energy_j > *opt.max_energy_j)) r.feasible = false;
  return r;
}

}  // namespace

Result<Plan> plan_from_run(ResultsDb& db, int64_t run_id, const PlanOptions& opt) {
  auto run = db.get_run(run_id);
  if (!run) return std::move(run.error());
  TRACR_TRY(check_objective(opt.objective));
  auto profiles = db.layer_profiles(run_id);
  if (!profiles) return std::move(profiles.error());
  auto dev = device_profiles(*profiles, run_id);
  if (!dev) return std::move(dev.error());
  const int64_t part_run = opt.participant_run > 0 ? opt.participant_run : run_id;
  std::vector<LayerProfileRecord> part_profiles;  // --participant-from: the pointers in dev->part point here
  if (part_run != run_id) TRACR_TRY(use_participant_from(db, *run, part_run, part_profiles, *dev));
  const int n = static_cast<int>(dev->part.size());
  Plan p;
  p.basis_run = run_id;
  if (part_run != run_id) p.participant_run = part_run;
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
  auto compute = compute_times(db, run_id, part_run, dev->part, dev->srv, dev->part_dev);
  if (!compute) return std::move(compute.error());
  p.compute_note = compute->note;
  p.devices_note = profiled_devices(db, run_id, part_run, dev->part_dev);
  TRACR_TRY(share_the_server(db, run_id, opt, bases->front(), p));
  for (const CodecBasis& cb : *bases)
    for (int k = 0; k <= n; ++k) p.rows.push_back(predict_row(k, cb, *compute, *dev, *eb, opt, p));
  if ((opt.objective == "energy" || opt.objective.rfind("weighted:", 0) == 0 || opt.max_energy_j) && !eb->known)
    return make_error(Errc::not_found,
                      fmt::format("run {} has no per-layer energy for {}: an energy objective needs a meter on the "
                                  "device or a power_model in the devices file, and record.layers",
                                  run_id, dev->part_dev));
  TRACR_TRY(limit_splits(p, opt.splits, n));
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
  double best = 1e300, err_sum = 0;
  for (const auto& s : *sums) {
    if (s.frames == 0) continue;
    const double ms = s.stage("total_ns").median_ns / 1e6;
    for (auto& r : p.rows)
      if (r.split == s.split && r.codec == codec) {
        r.measured_ms = ms;
        r.error_pct = (r.latency_ms - ms) / ms * 100;
        err_sum += std::fabs(*r.error_pct);
        measured.push_back(s.split);
      }
    if (ms < best) {
      best = ms;
      p.measured_best = s.split;
    }
  }
  if (measured.empty()) return;
  p.mape_pct = err_sum / static_cast<double>(measured.size());
  // The choice among the splits the run measured, judged by their measurements.
  PlanOptions o;
  o.objective = p.objective;
  choose(p, o, &measured);
  for (const auto& r : p.rows)
    if (r.split == p.chosen && r.codec == p.chosen_codec && r.measured_ms) p.miss_pct = (*r.measured_ms / best - 1) * 100;
}

Result<int64_t> store_plan(ResultsDb& db, const Plan& p) {
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
      "participants, server_model, participant_run) "
      "VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      {i64(p.basis_run), txt(p.model), txt(p.input_shape), txt(p.objective), txt(p.link.name), txt(p.link.source),
       num(p.link.up_mbps), num(p.link.down_mbps), num(p.link.rtt_ms), txt(p.overhead),
       p.energy_source.empty() ? std::nullopt : txt(p.energy_source),
       p.chosen >= 0 ? i64(p.chosen) : std::nullopt, p.chosen >= 0 ? txt(p.chosen_codec) : std::nullopt, num(p.mape_pct),
       p.measured_best >= 0 ? i64(p.measured_best) : std::nullopt, num(p.miss_pct),
       p.mape_pct && p.validation_run > 0 ? i64(p.validation_run) : std::nullopt, i64(p.participants),
       p.server_model.empty() ? std::nullopt : txt(p.server_model),
       p.participant_run > 0 ? i64(p.participant_run) : std::nullopt});
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
  TRACR_TRY(exec("COMMIT", {}));
  return id;
}

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
    if (validated)
      row.insert(row.end(), {r.measured_ms ? ms(*r.measured_ms) : "-",
                             r.error_pct ? fmt::format("{:+.1f}", *r.error_pct) : "-"});
    row.push_back(r.feasible ? "" : "(violates a constraint)");
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
  if (p.chosen < 0) o += "no split meets the constraints\n";
  else o += fmt::format("* chosen: split {}{}\n", p.chosen, several ? ", codec " + p.chosen_codec : "");
  if (!p.energy_source.empty()) o += fmt::format("edge J: participant energy per frame, {}\n", p.energy_source);
  if (validated)
    o += fmt::format("validation{}: latency MAPE {:.1f} % over {} splits; measured best split {}; chosen split {} {}\n",
                     p.validation_run != p.basis_run
                         ? fmt::format(" against run {} (held out: planned from run {} {})", p.validation_run,
                                       p.basis_run,
                                       p.participant_run ? fmt::format("with run {}'s PARTICIPANT profiles",
                                                                       p.participant_run)
                                                         : std::string("alone"))
                         : std::string(),
                     *p.mape_pct,
                     std::count_if(p.rows.begin(), p.rows.end(), [](const PlanRow& r) { return r.measured_ms.has_value(); }),
                     p.measured_best, p.chosen,
                     p.miss_pct ? (*p.miss_pct <= 0 ? std::string("is the measured best")
                                                    : fmt::format("is {:.1f} % slower than it (measured)", *p.miss_pct))
                                : std::string("was not measured"));
  const int w = static_cast<int>(width);
  return wrap_words(head, w) + table + wrap_words(o, w);
}

namespace {

// The held-out run's devices must be the ones the basis run's profiles
// describe (same machine kind, CPU limits and GPU): a plan never applies one
// device's layer times to another without saying so. Runs stored without
// device rows are not compared.
Status check_same_devices(ResultsDb& db, int64_t basis, int64_t other, int64_t part_basis) {
  auto a = db.devices(basis);
  if (!a) return std::move(a.error());
  auto pa = part_basis == basis ? a : db.devices(part_basis);
  if (!pa) return std::move(pa.error());
  auto b = db.devices(other);
  if (!b) return std::move(b.error());
  for (std::string_view role : {kParticipant, kServer}) {
    const DeviceRecord* ref = nullptr;
    const int64_t from = role == kParticipant ? part_basis : basis;
    for (const auto& d : role == kParticipant ? *pa : *a)
      if (d.role == role && !ref) ref = &d;
    if (!ref) continue;
    for (const auto& d : *b)
      if (d.role == role && !same_device(*ref, d))
        return make_error(Errc::invalid_argument,
                          fmt::format("--validate-on {}: run {}'s {} is another device than the one run {}'s profiles "
                                      "describe ({}). The plan would apply run {}'s layer times to it; plan from a run "
                                      "made on that device (record.layers: true, the default) instead{}",
                                      other, other, device_text(d), from, device_text(*ref), from,
                                      role == kParticipant ? fmt::format(", or take its PARTICIPANT profiles from one "
                                                                         "(--participant-from RUN)")
                                                           : std::string()));
  }
  return {};
}

// `plan --validate-on RUN` with RUN other than the basis: RUN must be of the same
// model and input; its codec is planned too; unless a link was given, the
// plan is made for RUN's link (its profile as tracr emulates it, resolved with
// RUN's own `links`, else its probe), never from RUN's frames or profiles.
Status prepare_held_out(ResultsDb& db, int64_t basis, int64_t other, bool link_given, PlanOptions& opt,
                        std::string& link_name, std::optional<settings::ExperimentConfig>& link_defs) {
  auto a = db.get_run(basis);
  if (!a) return std::move(a.error());
  auto b = db.get_run(other);
  if (!b) return std::move(b.error());
  if (b->model != a->model)
    return make_error(Errc::invalid_argument,
                      fmt::format("--validate-on {}: run {} ran {}, the basis run {} ran {}; validate against a run of "
                                  "the same model",
                                  other, other, b->model, basis, a->model));
  auto bcfg = settings::parse_experiment(b->config_yaml, fmt::format("run {}'s stored experiment", other), false);
  auto lp = db.layer_profiles(basis);
  if (bcfg && lp && !lp->empty() && !bcfg->input_size.empty()) {
    const std::string shape = fmt::format("{}", fmt::join(bcfg->input_size, ","));
    if (shape != lp->front().input_shape)
      return make_error(Errc::invalid_argument,
                        fmt::format("--validate-on {}: run {} ran at input {}, the basis run {} was profiled at {}",
                                    other, other, shape, basis, lp->front().input_shape));
  }
  TRACR_TRY(check_same_devices(db, basis, other, opt.participant_run > 0 ? opt.participant_run : basis));
  if (opt.codecs.empty()) opt.codecs.push_back(a->codec);
  if (std::find(opt.codecs.begin(), opt.codecs.end(), b->codec) == opt.codecs.end()) opt.codecs.push_back(b->codec);
  if (opt.participants == 0) {  // planned for as many participants as RUN had
    auto np = run_participants(db, other);
    if (!np) return std::move(np.error());
    opt.participants = *np;
    opt.participants_source = fmt::format("as many as held-out run {} had", other);
    // Without lockstep each participant swept at its own pace: at a split, the others may have been at others.
    if (*np > 1 && bcfg && !bcfg->lockstep)
      opt.participants_source +=
          ", each sweeping at its own pace (lockstep: false), so at a given split fewer may "
          "have shared it";
  }
  if (link_given) return {};
  if (!b->link.empty() && b->link != "devices-file") {
    link_name = b->link;
    if (bcfg) link_defs = *bcfg;
    return {};
  }
  auto probes = db.probes(other);
  if (!probes) return std::move(probes.error());
  auto l = probe_link(*b, probes->empty() ? nullptr : &probes->front());
  if (!l) return std::move(l.error());
  opt.link = *l;
  return {};
}

// The run `--validate-on ARG` names (invalid_argument when there is none),
// prepared as held out when it is not the basis.
// The stored run `--validate-on` names (invalid_argument when there is none).
Result<int64_t> validation_run_id(ResultsDb& db, const std::string& arg) {
  auto id = run_id_arg(db, arg);
  if (id)
    if (auto r = db.get_run(*id); !r) id = std::move(r.error());
  if (!id) return make_error(Errc::invalid_argument, "--validate-on: " + id.error().message);
  return id;
}

Result<int64_t> resolve_validation_run(ResultsDb& db, const std::string& arg, int64_t basis, bool link_given,
                                       PlanOptions& opt, std::string& link_name,
                                       std::optional<settings::ExperimentConfig>& link_defs) {
  auto id = validation_run_id(db, arg);
  if (!id) return id;
  if (*id != basis) TRACR_TRY(prepare_held_out(db, basis, *id, link_given, opt, link_name, link_defs));
  return *id;
}

}  // namespace

namespace {

int plan_failure(int status, const std::string& text) {
  TRACR_LOG(error, "tracrctl plan: {}", text);
  return status;
}

// --radio and --codecs checked, each codec in its canonical spelling; 0 or 2.
int check_plan_options(PlanOptions& opt) {
  if (!opt.radio.empty() && !agent::find_radio(opt.radio))
    return plan_failure(2, fmt::format("--radio expects 3g, lte or wifi, got '{}'", opt.radio));
  for (auto& c : opt.codecs) {
    auto spec = protocol::CodecSpec::parse(c);
    if (!spec) return plan_failure(2, "--codecs: " + user_text(spec.error()));
    c = spec->name();
  }
  return 0;
}

bool is_yaml_path(const std::string& target) {
  return target.size() > 5 && (target.substr(target.size() - 5) == ".yaml" || target.substr(target.size() - 4) == ".yml");
}

// An EXPERIMENT.yaml basis: its database and its first link; 0 or 2.
int load_plan_experiment(const PlanCommand& cmd, std::optional<settings::ExperimentConfig>& exp, std::string& db_path,
                         std::string& link_name) {
  auto e = settings::load_experiment(cmd.target, cmd.sets);
  if (!e) return plan_failure(2, user_text(e.error()));
  if (!e->model_list.empty())
    return plan_failure(2, fmt::format("{}: model: a list of {} models; plan one of its runs (tracrctl plan RUN)",
                                       cmd.target, e->model_list.size()));
  exp = *e;
  db_path = exp->output;
  if (link_name.empty() && !exp->link.empty()) link_name = exp->link[0];
  return 0;
}

// The newest completed run of the experiment's model with layer profiles of
// both devices at its input shape and batch; 0 when there is none.
Result<int64_t> newest_profiled_run(ResultsDb& db, const settings::ExperimentConfig& exp) {
  auto runs = db.list_runs(0);
  if (!runs) return std::move(runs.error());
  for (const auto& r : *runs) {
    if (r.model != exp.model || r.status != RunStatus::completed) continue;
    auto lp = db.layer_profiles(r.id);
    if (!lp || lp->empty()) continue;
    bool srv = false, part = false;
    for (const auto& l : *lp) (l.device_role == kServer ? srv : part) = true;
    const std::string shape =
        exp.input_size.empty() ? lp->front().input_shape : fmt::format("{}", fmt::join(exp.input_size, ","));
    if (srv && part && lp->front().input_shape == shape && lp->front().batch == exp.batch_size) return r.id;
  }
  return int64_t{0};
}

// The basis run: a stored run, or the newest run of an experiment's model with profiles; 0 or an exit status.
int find_basis_run(ResultsDb& db, const PlanCommand& cmd, const std::optional<settings::ExperimentConfig>& exp,
                   const std::string& db_path, int64_t& run_id) {
  if (!exp) {
    auto id = run_id_arg(db, cmd.target);
    if (!id) return plan_failure(2, user_text(id.error()));
    run_id = *id;
    return 0;
  }
  auto id = newest_profiled_run(db, *exp);
  if (!id) return plan_failure(1, user_text(id.error()));
  if (!*id)
    return plan_failure(1, fmt::format("{} holds no completed run of {} with layer profiles of both devices at this "
                                       "input shape and batch; run `tracrctl run {}` (record.layers: true, the "
                                       "default) first",
                                       db_path, exp->model, cmd.target));
  run_id = *id;
  return 0;
}

// What tracr's emulation of link profile `ls` delivered: the probe of the
// newest run (`prefer` first) that ran under a profile of that name with the
// same rates and delay, shaped by tracr.
struct DeliveredLink {
  int64_t run = 0;
  double up_mbps = 0, down_mbps = 0, rtt_ms = 0;
};

std::optional<DeliveredLink> delivered_link(ResultsDb& db, const settings::LinkSpec& ls, int64_t prefer) {
  auto runs = db.list_runs(0);
  if (!runs) return std::nullopt;
  std::stable_partition(runs->begin(), runs->end(), [&](const RunRow& r) { return r.id == prefer; });
  for (const auto& r : *runs) {
    if (r.link != ls.name || r.shaping.empty() || r.shaping == "none") continue;
    auto cfg = settings::parse_experiment(r.config_yaml, "stored experiment", false);
    if (!cfg) continue;
    auto ran = settings::resolve_link(*cfg, ls.name);
    if (!ran || ran->up_mbit != ls.up_mbit || ran->down_mbit != ls.down_mbit || ran->delay_ms != ls.delay_ms) continue;
    auto probes = db.probes(r.id);
    if (!probes) continue;
    for (const auto& pr : *probes)
      if (pr.up_mbps && pr.down_mbps)
        return DeliveredLink{r.id, *pr.up_mbps, *pr.down_mbps, static_cast<double>(pr.rtt_min_ns) / 1e6};
  }
  return std::nullopt;
}

// A link profile as tracr emulates it (tbf's bucket included): the rates a
// run's probe measured through that emulation when one did ("as delivered",
// the nominal figures beside them), else its nominal rates and delay over
// the basis run's loopback rtt.
PlanLink profile_link(ResultsDb& db, const settings::LinkSpec& ls, int64_t run_id, double base_rtt,
                      const ProbeRow* probe, int64_t prefer) {
  PlanLink l;
  l.name = ls.name;
  if (ls.up_mbit > 0) l.up_burst = static_cast<double>(tbf_burst_bytes(ls.up_mbit));
  if (ls.down_mbit > 0) l.down_burst = static_cast<double>(tbf_burst_bytes(ls.down_mbit));
  const std::string nominal = fmt::format("nominal {} / {} Mbit/s, {} ms delay: {}", ls.up_mbit, ls.down_mbit,
                                          ls.delay_ms, ls.source.empty() ? "as defined" : ls.source);
  // A direction the profile leaves unlimited runs at the basis run's probed rate.
  const double probe_up = probe && probe->up_mbps ? *probe->up_mbps : 0.0;
  const double probe_down = probe && probe->down_mbps ? *probe->down_mbps : 0.0;
  if (auto d = ls.shaped() ? delivered_link(db, ls, prefer) : std::nullopt) {
    l.up_mbps = ls.up_mbit > 0 ? d->up_mbps : probe_up;
    l.down_mbps = ls.down_mbit > 0 ? d->down_mbps : probe_down;
    l.rtt_ms = d->rtt_ms;
    l.source = fmt::format("link profile {} as delivered: run {}'s probe through tracr's emulation measured {:.3f} up "
                           "/ {:.3f} down Mbit/s, rtt {:.3f} ms ({}); tbf bursts {:.0f} / {:.0f} B",
                           ls.name, d->run, d->up_mbps, d->down_mbps, d->rtt_ms, nominal, l.up_burst, l.down_burst);
    return l;
  }
  l.up_mbps = ls.up_mbit > 0 ? ls.up_mbit : probe_up;
  l.down_mbps = ls.down_mbit > 0 ? ls.down_mbit : probe_down;
  l.rtt_ms = base_rtt + 2 * ls.delay_ms;
  l.source = fmt::format("link profile {} at its nominal rates ({}; no stored run measured what tracr's emulation "
                         "delivers) as tracr emulates it (tbf bursts {:.0f} / {:.0f} B); rtt: run {}'s probe {:.3f} ms "
                         "+ 2 x {} ms delay",
                         ls.name, nominal, l.up_burst, l.down_burst, run_id, base_rtt, ls.delay_ms);
  return l;
}

// The link planned for: a profile (profile_link) or explicit figures; `prefer`: the run whose delivered link
// comes first (the held-out run).
Result<PlanLink> planned_link(ResultsDb& db, int64_t run_id, const PlanCommand& cmd, const std::string& link_name,
                              const std::optional<settings::ExperimentConfig>& exp, int64_t prefer) {
  auto probes = db.probes(run_id);
  const ProbeRow* probe = probes && !probes->empty() ? &probes->front() : nullptr;
  const double base_rtt = probe ? static_cast<double>(probe->rtt_min_ns) / 1e6 : 0.0;
  if (link_name.empty()) {
    PlanLink l;
    l.name = "given";
    l.up_mbps = *cmd.up_mbit;
    l.down_mbps = cmd.down_mbit.value_or(*cmd.up_mbit);
    l.rtt_ms = cmd.rtt_ms.value_or(base_rtt);
    l.source = "given on the command line";
    return l;
  }
  settings::ExperimentConfig ec = exp ? *exp : settings::ExperimentConfig{};
  auto ls = settings::resolve_link(ec, link_name, "--link");
  if (!ls) return std::move(ls.error());
  return profile_link(db, *ls, run_id, base_rtt, probe, prefer);
}

}  // namespace

namespace {

// One plan from the basis run, validated on `check_arg` (a run, or "" for the basis itself with --validate),
// printed (the whole table when `table`, else its validation line) and stored.
struct PlanOutcome {
  int status = 0;
  std::optional<double> mape_pct, miss_pct;
};
PlanOutcome failed_with(int status) {
  PlanOutcome o;
  o.status = status;
  return o;
}
PlanOutcome plan_and_validate(ResultsDb& db, const std::string& db_path, const PlanCommand& cmd, int64_t run_id,
                              const std::string& check_arg, PlanOptions opt, std::string link_name,
                              std::optional<settings::ExperimentConfig> exp, bool table) {
  int64_t check_run = 0;  // --validate-on RUN: plans for that run's link unless one is given
  if (!check_arg.empty()) {
    auto v = resolve_validation_run(db, check_arg, run_id, !link_name.empty() || cmd.up_mbit, opt, link_name, exp);
    if (!v) return failed_with(plan_failure(v.error().code == Errc::invalid_argument ? 2 : 1, user_text(v.error())));
    check_run = *v;
  }
  if (!link_name.empty() || cmd.up_mbit) {
    auto l = planned_link(db, run_id, cmd, link_name, exp, check_run);
    if (!l) return failed_with(plan_failure(2, user_text(l.error())));
    opt.link = *l;
  }
  auto p = plan_from_run(db, run_id, opt);
  if (!p) return failed_with(plan_failure(p.error().code == Errc::invalid_argument ? 2 : 1, user_text(p.error())));
  if (cmd.validate || check_run) validate_against(db, *p, check_run);
  const std::string text = format_plan(*p, cmd.width);
  if (table) std::fputs(text.c_str(), stdout);
  else if (const size_t at = text.find("\nvalidation"); at != std::string::npos)
    std::fputs(text.substr(at + 1).c_str(), stdout);
  if (cmd.store) {
    auto id = store_plan(db, *p);
    if (!id) return failed_with(plan_failure(1, user_text(id.error())));
    fmt::print("stored as plan {} in {}\n", *id, db_path);
  }
  return {0, p->mape_pct, p->miss_pct};
}

// --validate-on A,B,...: one plan per held-out run (a repeated series' runs), the first printed whole, then
// the error over them: median MAPE with its range, and how often the chosen split was the measured best.
int plan_on_series(ResultsDb& db, const std::string& db_path, const PlanCommand& cmd, int64_t run_id,
                   const PlanOptions& opt, const std::string& link_name,
                   const std::optional<settings::ExperimentConfig>& exp) {
  std::vector<std::string> runs;
  std::istringstream in(cmd.validate_run);
  for (std::string r; std::getline(in, r, ',');) runs.push_back(r);
  // Every run checked before anything is planned, printed or stored.
  for (const std::string& r : runs) {
    if (r.empty() || cmd.validate_run.back() == ',')
      return plan_failure(2, fmt::format("--validate-on: expected runs RUN1,RUN2,..., got '{}'", cmd.validate_run));
    if (auto id = validation_run_id(db, r); !id) return plan_failure(2, user_text(id.error()));
  }
  std::vector<double> mape;
  int best = 0, judged = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const PlanOutcome o = plan_and_validate(db, db_path, cmd, run_id, runs[i], opt, link_name, exp, i == 0);
    if (o.status) return o.status;
    if (o.mape_pct) mape.push_back(*o.mape_pct);
    if (o.miss_pct) judged += 1, best += *o.miss_pct <= 0 ? 1 : 0;
  }
  if (mape.empty()) return 0;
  const double median = protocol::median_of(mape);  // sorts mape
  fmt::print("over {} held-out runs: latency MAPE median {:.1f} % (lowest {:.1f} %, highest {:.1f} %); the chosen "
             "split was the measured best in {} of {}\n",
             mape.size(), median, mape.front(), mape.back(), best, judged);
  return 0;
}

}  // namespace

int cmd_plan(const PlanCommand& cmd) {
  std::string db_path = cmd.db.empty() ? default_results_db() : cmd.db, link_name = cmd.link;
  PlanOptions opt = cmd.plan;
  if (int rc = check_plan_options(opt)) return rc;
  std::optional<settings::ExperimentConfig> exp;
  const bool is_yaml = is_yaml_path(cmd.target);
  if (!is_yaml && !cmd.sets.empty())
    return plan_failure(2, fmt::format("--set {}: --set applies to an EXPERIMENT.yaml basis, got run '{}'",
                                       cmd.sets.front(), cmd.target));
  if (is_yaml)
    if (int rc = load_plan_experiment(cmd, exp, db_path, link_name)) return rc;
  auto db = ResultsDb::open(db_path);
  if (!db) return plan_failure(1, user_text(db.error()));
  int64_t run_id = 0;
  if (int rc = find_basis_run(*db, cmd, exp, db_path, run_id)) return rc;
  if (cmd.validate_run.find(',') == std::string::npos)
    return plan_and_validate(*db, db_path, cmd, run_id, cmd.validate_run, opt, link_name, exp, true).status;
  return plan_on_series(*db, db_path, cmd, run_id, opt, link_name, exp);
}

}  // namespace tracr::analysis
