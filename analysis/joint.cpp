#include "analysis/joint.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/text.hpp"
#include "protocol/stats.hpp"
#include "settings/config.hpp"

namespace tracr::analysis {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;

namespace {

constexpr double kExactStates = 100000;  // population vectors up to which the analysis is exact
constexpr int kMaxJoint = 1000;          // participants a joint plan places

struct Queue {
  std::vector<double> s, z, v;  // per class: service time, delay (ms), variability (Kingman's v, one class only)
  std::vector<int> n;           // per class: participants
  std::vector<double> resp, x;  // solution per class: time at the SERVER (ms), throughput (frames/ms)
};

// Exact multi-class MVA: every population vector below n, in index order
// (n - e_c always has a smaller index than n).
void solve_exact(Queue& q) {
  const size_t c = q.n.size();
  std::vector<size_t> stride(c);
  size_t states = 1;
  for (size_t i = 0; i < c; ++i) {
    stride[i] = states;
    states *= static_cast<size_t>(q.n[i] + 1);
  }
  std::vector<double> total(states, 0.0);  // Q(n): frames at the SERVER
  std::vector<int> v(c, 0);
  q.resp.assign(c, 0.0);
  q.x.assign(c, 0.0);
  for (size_t idx = 1; idx < states; ++idx) {
    for (size_t i = 0; i < c; ++i) {  // v = the vector of idx (mixed radix, incremented)
      if (++v[i] <= q.n[i]) break;
      v[i] = 0;
    }
    double sum = 0;
    for (size_t i = 0; i < c; ++i) {
      if (v[i] == 0) continue;
      const double r = q.s[i] * (1 + total[idx - stride[i]]);
      const double x = q.z[i] + r > 0 ? v[i] / (q.z[i] + r) : 0;
      sum += x * r;
      if (idx == states - 1) q.resp[i] = r, q.x[i] = x;
    }
    total[idx] = sum;
  }
}

// Schweitzer's approximation: the queue a class-c arrival sees is the whole
// queue less its own share of one participant.
void solve_schweitzer(Queue& q) {
  const size_t c = q.n.size();
  std::vector<double> ql(c);
  int all = 0;
  for (int k : q.n) all += k;
  for (size_t i = 0; i < c; ++i) ql[i] = static_cast<double>(q.n[i]) / all;
  q.resp.assign(c, 0.0);
  q.x.assign(c, 0.0);
  for (int it = 0; it < 100000; ++it) {
    double sum = 0, moved = 0;
    for (double v : ql) sum += v;
    for (size_t i = 0; i < c; ++i) {
      q.resp[i] = q.s[i] * (1 + sum - ql[i] / q.n[i]);
      q.x[i] = q.z[i] + q.resp[i] > 0 ? q.n[i] / (q.z[i] + q.resp[i]) : 0;
    }
    for (size_t i = 0; i < c; ++i) {
      const double nv = q.x[i] * q.resp[i];
      moved = std::max(moved, std::fabs(nv - ql[i]));
      ql[i] = nv;
    }
    if (moved < 1e-12) break;
  }
}

// One class (every participant at one split): plan.hpp's model exactly,
// the time at the SERVER between the constant-times bound max(S, n S - Z)
// and the MVA's by the row's variability. With several classes the MVA alone:
// a FIFO SERVER does not serve unlike participants in equal rounds
// (results/joint9, ResNet-18, 3 at split 12 and 1 at split 0, 4 x 0.12 of a
// core: measured 131.5 and 49.4 ms, the MVA 137.5 and 51.2, equal rounds
// 97.4 for both).
void blend_one_class(Queue& q) {
  if (q.n.size() != 1) return;
  q.resp[0] = server_time_ms(q.resp[0], q.s[0], q.z[0], q.n[0], q.v[0]);
  q.x[0] = q.z[0] + q.resp[0] > 0 ? q.n[0] / (q.z[0] + q.resp[0]) : 0;
}

double score(const JointPlan& j, const std::string& objective) {
  return objective == "throughput" ? -j.total_fps : j.mean_latency_ms;
}

bool meets(const JointPlan& j, const PlanOptions& opt) {
  if (!opt.max_latency_ms) return true;
  return std::all_of(j.classes.begin(), j.classes.end(),
                     [&](const JointClass& c) { return c.latency_ms <= *opt.max_latency_ms; });
}

std::string row_text(const Plan& p, size_t row) {
  const PlanRow& r = p.rows[row];
  return r.codec == p.basis_codec ? fmt::format("split {}", r.split) : fmt::format("split {} ({})", r.split, r.codec);
}

}  // namespace

Result<JointPlan> solve_assignment(const Plan& p, const std::vector<std::pair<size_t, int>>& counts) {
  Queue q;
  JointPlan j;
  double states = 1;
  for (const auto& [row, n] : counts) {
    if (n <= 0) continue;
    if (row >= p.rows.size()) return make_error(Errc::invalid_argument, fmt::format("joint: no plan row {}", row));
    const PlanRow& r = p.rows[row];
    q.s.push_back(r.service_ms);
    q.z.push_back(std::max(0.0, r.alone_ms - r.service_ms));
    q.v.push_back(r.variability);
    q.n.push_back(n);
    JointClass c;
    c.row = row;
    c.participants = n;
    j.classes.push_back(c);
    j.participants += n;
    states *= n + 1;
  }
  if (j.participants == 0) return make_error(Errc::invalid_argument, "joint: no participants to place");
  if (q.n.size() == 1) {
    solve_exact(q);
    blend_one_class(q);
    j.model =
        "modelled:mva-bound-exact(1 class, one per split; the time at the SERVER the constant-times bound's plus the "
        "MVA's excess over it x the row's variability)";
  } else if (states <= kExactStates) {
    solve_exact(q);
    j.model = fmt::format("modelled:mva-exact({} classes, one per split)", q.n.size());
  } else {
    solve_schweitzer(q);
    j.model = fmt::format(
        "modelled:mva-schweitzer({} classes, one per split; {:.0f} population vectors, too many "
        "to solve exactly)",
        q.n.size(), states);
  }
  for (size_t i = 0; i < j.classes.size(); ++i) {
    JointClass& c = j.classes[i];
    c.latency_ms = q.z[i] + q.resp[i];
    c.queue_ms = q.resp[i] - q.s[i];
    c.fps = q.n[i] > 0 ? q.x[i] / q.n[i] * 1e3 : 0;
    j.mean_latency_ms += c.latency_ms * c.participants / j.participants;
    j.total_fps += q.x[i] * 1e3;
    j.server_busy += q.x[i] * q.s[i];
  }
  std::stable_sort(j.classes.begin(), j.classes.end(),
                   [](const JointClass& a, const JointClass& b) { return a.participants > b.participants; });
  return j;
}

Result<JointPlan> plan_jointly(const Plan& p, int participants, const PlanOptions& opt) {
  if (opt.objective != "latency" && opt.objective != "throughput")
    return make_error(Errc::invalid_argument,
                      fmt::format("--joint: objective '{}': a joint plan is for latency (the participants' mean) or "
                                  "throughput (their total frames/s)",
                                  opt.objective));
  if (participants < 1 || participants > kMaxJoint)
    return make_error(Errc::invalid_argument,
                      fmt::format("--joint: plans 1 to {} participants (the search moves one at a time), got {}",
                                  kMaxJoint, participants));
  std::vector<size_t> rows;
  for (size_t i = 0; i < p.rows.size(); ++i)
    if (p.rows[i].feasible) rows.push_back(i);
  // Every participant at one split: the best such split starts the search.
  std::optional<JointPlan> best;
  for (size_t r : rows) {
    auto j = solve_assignment(p, {{r, participants}});
    if (!j) return j;
    if (meets(*j, opt) && (!best || score(*j, opt.objective) < score(*best, opt.objective))) best = std::move(*j);
  }
  if (!best)
    return make_error(Errc::not_found, fmt::format("--joint: no split meets the constraints with {} participants "
                                                   "sharing the SERVER",
                                                   participants));
  const size_t common = best->classes.front().row;
  const double common_ms = best->mean_latency_ms, common_fps = best->total_fps;
  std::map<size_t, int> counts = {{common, participants}};
  for (;;) {
    std::optional<JointPlan> move;
    std::map<size_t, int> move_counts;
    for (const auto& [from, n] : counts)
      for (size_t to : rows) {
        if (to == from) continue;
        std::map<size_t, int> c = counts;
        if (--c[from] == 0) c.erase(from);
        ++c[to];
        auto j = solve_assignment(p, {c.begin(), c.end()});
        if (!j) return j;
        const double s = score(*j, opt.objective);
        if (meets(*j, opt) && s < score(move ? *move : *best, opt.objective) - 1e-9 * std::fabs(s)) {
          move = std::move(*j);
          move_counts = c;
        }
      }
    if (!move) break;
    best = std::move(move);
    counts = std::move(move_counts);
  }
  best->common_row = common;
  best->common_mean_ms = common_ms;
  best->common_total_fps = common_fps;
  return std::move(*best);
}

Result<JointPlan> validate_joint(ResultsDb& db, const Plan& p, int64_t run) {
  auto row = db.get_run(run);
  if (!row) return std::move(row.error());
  auto frames = db.frames(run);
  if (!frames) return std::move(frames.error());
  std::map<std::string, std::set<int64_t>> splits_of;  // participant -> the splits its timed frames ran
  // The window in which every participant was running: each participant's
  // clock from its first frame's start (they start together with lockstep),
  // up to the first of them to finish. A participant whose split is fast ends
  // its frames first and leaves the others a SERVER shared by fewer; frames
  // after that are not what the model predicts.
  std::map<std::string, std::pair<int64_t, int64_t>> span;  // participant -> first start, last end (its clock)
  for (const auto& f : *frames) {
    auto [it, fresh] = span.try_emplace(f.participant, f.start_ns, f.end_ns);
    if (!fresh) it->second = {std::min(it->second.first, f.start_ns), std::max(it->second.second, f.end_ns)};
    if (f.ok && !f.warmup) splits_of[f.participant].insert(f.split);
  }
  if (splits_of.empty()) return make_error(Errc::not_found, fmt::format("run {} has no timed frames", run));
  int64_t window = INT64_MAX;
  for (const auto& [who, se] : span) window = std::min(window, se.second - se.first);
  std::map<int64_t, std::vector<int64_t>> totals;  // split -> totals (ns) of timed frames that ended in the window
  int64_t kept = 0, timed = 0;
  for (const auto& f : *frames) {
    if (!f.ok || f.warmup) continue;
    ++timed;
    if (f.end_ns - span[f.participant].first > window) continue;
    totals[f.split].push_back(f.total_ns);
    ++kept;
  }
  std::map<int64_t, int> per_split;
  for (const auto& [who, ks] : splits_of) {
    if (ks.size() > 1)
      return make_error(Errc::invalid_argument,
                        fmt::format("--joint --validate-on {}: participant {} ran splits {}: a joint plan is "
                                    "validated on a run whose participants each ran one split "
                                    "(participant_splits: {{NAME: K, ...}} in the experiment)",
                                    run, who, fmt::join(ks, ", ")));
    ++per_split[*ks.begin()];
  }
  std::vector<std::pair<size_t, int>> counts;
  for (const auto& [k, n] : per_split) {
    size_t at = p.rows.size();
    for (size_t i = 0; i < p.rows.size(); ++i)
      if (p.rows[i].split == k && p.rows[i].codec == row->codec) at = i;
    if (at == p.rows.size())
      return make_error(Errc::invalid_argument, fmt::format("--joint --validate-on {}: the plan has no row for split "
                                                            "{} with codec {} (see --splits and --codecs)",
                                                            run, k, row->codec));
    counts.emplace_back(at, n);
  }
  auto j = solve_assignment(p, counts);
  if (!j) return j;
  double err = 0;
  for (auto& c : j->classes) {
    auto& v = totals[p.rows[c.row].split];
    if (v.empty()) continue;  // no timed frame of this split ended while all were running
    c.measured_ms = protocol::median_of(v) / 1e6;
    c.error_pct = (c.latency_ms - *c.measured_ms) / *c.measured_ms * 100;
    err += std::fabs(*c.error_pct);
  }
  const auto judged = std::count_if(j->classes.begin(), j->classes.end(),
                                    [](const JointClass& c) { return c.measured_ms.has_value(); });
  if (judged > 0) j->mape_pct = err / static_cast<double>(judged);
  j->validation_run = run;
  j->window_note = fmt::format(
      "{} of {} timed frames, those that ended while all {} participants were running (the "
      "first {:.3f} s of each participant's frames)",
      kept, timed, span.size(), static_cast<double>(window) / 1e9);
  // The window assumes a common start; without lockstep each participant began when it was ready.
  auto cfg = settings::parse_experiment(row->config_yaml, fmt::format("run {}'s stored experiment", run), false);
  if (span.size() > 1 && cfg && !cfg->lockstep)
    j->window_note +=
        "; the run was not in lockstep (lockstep: false), so its participants began their frames as "
        "each was ready, and the first frame of each is no common moment";
  return j;
}

std::string format_joint(const Plan& p, const JointPlan& j) {
  std::string o = fmt::format("joint plan for {} participants sharing the SERVER ({}; objective {}):\n", j.participants,
                              j.model, p.objective);
  const bool v = j.validation_run > 0;
  o += fmt::format("  {:>12}  {:>5}  {:<10} {:>10}  {:>8}  {:>13}{}\n", "participants", "split", "codec", "latency ms",
                   "queue ms", "frames/s each", v ? "  measured ms  error %" : "");
  for (const auto& c : j.classes) {
    const PlanRow& r = p.rows[c.row];
    o += fmt::format("  {:>12}  {:>5}  {:<10} {:>10.3f}  {:>8.3f}  {:>13.1f}", c.participants, r.split, r.codec,
                     c.latency_ms, c.queue_ms, c.fps);
    if (c.measured_ms) o += fmt::format("  {:>11.3f}  {:>+7.1f}", *c.measured_ms, *c.error_pct);
    o += "\n";
  }
  o += fmt::format("mean latency {:.3f} ms, {:.1f} frames/s in all, SERVER busy {:.0f} % (one frame in flight each)\n",
                   j.mean_latency_ms, j.total_fps, j.server_busy * 100);
  if (v) {
    o += "measured: " + j.window_note + "\n";
    if (j.mape_pct)
      o +=
          fmt::format("joint validation against run {} (its participants' own splits): MAPE {:.1f} % over {} split{}\n",
                      j.validation_run, *j.mape_pct, j.classes.size(), j.classes.size() == 1 ? "" : "s");
    else
      o += fmt::format(
          "joint validation against run {}: no timed frame ended while all its participants were "
          "running\n",
          j.validation_run);
  } else {
    const bool same = j.classes.size() == 1 && j.classes.front().row == j.common_row;
    o += fmt::format("all {} at the best common {}: mean latency {:.3f} ms, {:.1f} frames/s in all{}\n", j.participants,
                     row_text(p, j.common_row), j.common_mean_ms, j.common_total_fps,
                     same ? " (the joint plan keeps it)"
                          : fmt::format(" (the joint plan: {:+.1f} % latency, {:+.1f} % frames/s)",
                                        (j.mean_latency_ms / j.common_mean_ms - 1) * 100,
                                        (j.total_fps / j.common_total_fps - 1) * 100));
  }
  return o;
}

}  // namespace tracr::analysis
