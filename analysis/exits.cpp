#include "analysis/exits.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "protocol/stats.hpp"

namespace tracr::analysis {

namespace {

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

bool to_double(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == '\0';
}

bool to_int(const std::string& s, int64_t* v) {
  char* end = nullptr;
  *v = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end && *end == '\0';
}

// Not dominated: no other pair at least as accurate and at most as slow, and better in one.
bool on_front(double acc, double ms, const std::vector<std::pair<double, double>>& all) {
  return std::none_of(all.begin(), all.end(), [&](const std::pair<double, double>& o) {
    return o.first >= acc && o.second <= ms && (o.first > acc || o.second < ms);
  });
}

}  // namespace

Result<std::vector<ExitAnswerText>> parse_exit_answers(const std::string& results, const std::string& times) {
  const auto rs = split_on(results, ' '), ts = split_on(times, ' ');
  if (rs.size() != ts.size())
    return make_error(Errc::invalid_argument, fmt::format("exit_results has {} exits but exit_times {}: '{}' / '{}'",
                                                          rs.size(), ts.size(), results, times));
  std::vector<ExitAnswerText> out;
  for (size_t i = 0; i < rs.size(); ++i) {
    ExitAnswerText a;
    const auto eq = rs[i].find('=');
    const auto parts = eq == std::string::npos ? std::vector<std::string>{} : split_on(rs[i].substr(eq + 1), ':');
    if (eq == std::string::npos || !to_int(rs[i].substr(0, eq), &a.exit) || parts.size() != 3 ||
        !to_int(parts[0], &a.top1) || !to_double(parts[1], &a.max_softmax) || !to_double(parts[2], &a.entropy_conf) ||
        !to_int(ts[i], &a.at_ns))
      return make_error(Errc::invalid_argument,
                        fmt::format("exit answer '{}' (time '{}'): expected <exit>=<class>:<max softmax>:<1 - H / ln "
                                    "C> for one sample (batch 1) and a time in ns",
                                    rs[i], ts[i]));
    out.push_back(a);
  }
  return out;
}

Result<std::vector<ExitSweepRow>> sweep_exits(const std::vector<ExitFrame>& frames, const std::vector<double>& thresholds,
                                             const std::string& measure) {
  if (measure != "max_softmax" && measure != "entropy")
    return make_error(Errc::invalid_argument, fmt::format("measure '{}'; expected max_softmax or entropy", measure));
  // Parsed once; grouped by placement in first-seen order.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::pair<const ExitFrame*, std::vector<ExitAnswerText>>>> by;
  int64_t exits = 0;
  for (const auto& f : frames) {
    auto a = parse_exit_answers(f.exit_results, f.exit_times);
    if (!a) return a.error();
    for (const auto& x : *a) exits = std::max(exits, x.exit + 1);
    if (!by.count(f.placement)) order.push_back(f.placement);
    by[f.placement].emplace_back(&f, std::move(*a));
  }
  std::vector<ExitSweepRow> rows;
  for (const auto& pl : order)
    for (double t : thresholds) {
      ExitSweepRow r;
      r.placement = pl;
      r.threshold = t;
      r.exited.assign(static_cast<size_t>(exits), 0);
      std::vector<double> ms;
      double bytes = 0;
      for (const auto& [f, answers] : by[pl]) {
        r.split = f->split;
        ++r.frames;
        // The first exit that reaches t, among those the run evaluated; an
        // exit the run did not evaluate (past the one taken, without
        // record.exit_confidences) leaves the frame unknown if it matters.
        const ExitAnswerText* taken = nullptr;
        for (const auto& a : answers) {
          const double c = static_cast<double>(static_cast<float>(measure == "entropy" ? a.entropy_conf : a.max_softmax));
          if (c >= t) {
            taken = &a;
            break;
          }
        }
        if (taken) {
          ++r.exited[static_cast<size_t>(taken->exit)];
          ms.push_back(static_cast<double>(taken->at_ns + f->post_ns) / 1e6);
          r.exited_ms += ms.back();
          if (f->label) {
            ++r.labelled;
            r.correct += taken->top1 == *f->label ? 1 : 0;
          }
          continue;
        }
        if (f->exit_index) {  // the run ended it at an exit: its final answer is unknown here
          ++r.unknown;
          continue;
        }
        ++r.sent;
        ms.push_back(static_cast<double>(f->total_ns) / 1e6);
        bytes += static_cast<double>(f->sent_bytes);
        if (f->correct >= 0 && f->label) {
          ++r.labelled;
          r.correct += f->correct;
        }
      }
      if (r.unknown == 0 && !ms.empty()) {
        double sum = 0;
        for (double v : ms) sum += v;
        r.mean_ms = sum / static_cast<double>(ms.size());
        r.p95_ms = protocol::p95_of(ms);
        if (r.labelled > 0) r.accuracy = static_cast<double>(r.correct) / static_cast<double>(r.labelled);
      }
      r.bytes_per_frame = r.frames ? bytes / static_cast<double>(r.frames) : 0;
      rows.push_back(std::move(r));
    }
  std::vector<std::pair<double, double>> pts;  // (accuracy, mean ms) of the rows that have both
  for (const auto& r : rows)
    if (r.accuracy && r.mean_ms) pts.emplace_back(*r.accuracy, *r.mean_ms);
  for (auto& r : rows) r.pareto = r.accuracy && r.mean_ms && on_front(*r.accuracy, *r.mean_ms, pts);
  return rows;
}

Result<ExitPlan> plan_exits(const std::vector<ExitFrame>& frames, const std::map<int64_t, double>& offload_ms,
                            const std::vector<double>& thresholds, const std::string& measure,
                            std::optional<double> max_latency_ms, std::optional<double> min_accuracy) {
  auto sweep = sweep_exits(frames, thresholds, measure);
  if (!sweep) return sweep.error();
  // Each split's mean exit-head cost: what a frame sent there pays for its exits.
  std::map<std::string, std::pair<double, int64_t>> cost;  // by placement: sum ns, frames
  for (const auto& f : frames) {
    auto& c = cost[f.placement];
    c.first += static_cast<double>(f.exit_ns);
    ++c.second;
  }
  ExitPlan plan;
  for (const auto& r : *sweep) {
    if (r.frames == 0) continue;
    const auto off = offload_ms.find(r.split);
    if (off == offload_ms.end()) {
      if (std::find(plan.unplanned.begin(), plan.unplanned.end(), r.split) == plan.unplanned.end())
        plan.unplanned.push_back(r.split);
      continue;
    }
    if (r.unknown > 0) {
      ++plan.left_out;
      continue;
    }
    ExitPlanRow x;
    x.placement = r.placement;
    x.split = r.split;
    x.threshold = r.threshold;
    int64_t exited = 0;
    for (int64_t e : r.exited) exited += e;
    x.exit_rate = static_cast<double>(exited) / static_cast<double>(r.frames);
    x.accuracy = r.accuracy;
    const auto& c = cost[r.placement];
    x.sent_ms = off->second + (c.second ? c.first / static_cast<double>(c.second) / 1e6 : 0);
    x.latency_ms = (r.exited_ms + static_cast<double>(r.sent) * x.sent_ms) / static_cast<double>(r.frames);
    x.feasible = (!max_latency_ms || x.latency_ms <= *max_latency_ms) &&
                 (!min_accuracy || (x.accuracy && *x.accuracy >= *min_accuracy));
    plan.rows.push_back(std::move(x));
  }
  std::vector<std::pair<double, double>> pts;
  for (const auto& x : plan.rows)
    if (x.accuracy) pts.emplace_back(*x.accuracy, x.latency_ms);
  for (auto& x : plan.rows) x.front = x.accuracy && on_front(*x.accuracy, x.latency_ms, pts);
  // A latency bound: the most accurate pair within it (then the faster);
  // otherwise the fastest pair (within the accuracy floor, if any).
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const auto& x = plan.rows[i];
    if (!x.feasible) continue;
    if (plan.chosen < 0) {
      plan.chosen = static_cast<int>(i);
      continue;
    }
    const auto& b = plan.rows[static_cast<size_t>(plan.chosen)];
    const double xa = x.accuracy.value_or(-1), ba = b.accuracy.value_or(-1);
    const bool better = max_latency_ms ? (xa > ba || (xa == ba && x.latency_ms < b.latency_ms))
                                       : (x.latency_ms < b.latency_ms || (x.latency_ms == b.latency_ms && xa > ba));
    if (better) plan.chosen = static_cast<int>(i);
  }
  return plan;
}

Result<std::vector<double>> parse_thresholds(const std::string& text) {
  const std::string what = "from:to:step (e.g. 0.5:0.99:0.01) or a comma-separated list of numbers in 0..1";
  std::vector<double> out;
  auto in01 = [](double v) { return v >= 0 && v <= 1; };
  const auto parts = split_on(text, ':');
  if (parts.size() == 3 && text.find(',') == std::string::npos) {
    double a = 0, b = 0, s = 0;
    if (!to_double(parts[0], &a) || !to_double(parts[1], &b) || !to_double(parts[2], &s) || !in01(a) || !in01(b) ||
        !(s > 0) || b < a)
      return make_error(Errc::invalid_argument, fmt::format("--thresholds '{}'; expected {}", text, what));
    for (int64_t i = 0;; ++i) {
      const double v = a + static_cast<double>(i) * s;
      if (v > b + 1e-9) break;
      out.push_back(std::round(v * 1e9) / 1e9);  // 0.1 + 2 x 0.01 is printed as typed, and compared so
    }
    return out;
  }
  for (const auto& p : split_on(text, ',')) {
    double v = 0;
    if (!to_double(p, &v) || !in01(v))
      return make_error(Errc::invalid_argument, fmt::format("--thresholds '{}': '{}'; expected {}", text, p, what));
    out.push_back(v);
  }
  if (out.empty()) return make_error(Errc::invalid_argument, fmt::format("--thresholds '{}'; expected {}", text, what));
  return out;
}

}  // namespace tracr::analysis
