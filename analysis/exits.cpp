#include "analysis/exits.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include <fmt/format.h>

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

double pct95(std::vector<double> v) {  // nearest rank, as the stage summaries
  std::sort(v.begin(), v.end());
  const size_t r = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(v.size())));
  return v[std::max<size_t>(r, 1) - 1];
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
        r.p95_ms = pct95(ms);
        if (r.labelled > 0) r.accuracy = static_cast<double>(r.correct) / static_cast<double>(r.labelled);
      }
      r.bytes_per_frame = r.frames ? bytes / static_cast<double>(r.frames) : 0;
      rows.push_back(std::move(r));
    }
  // The front: no other row at least as accurate and at most as slow, better in one.
  for (auto& r : rows) {
    if (!r.accuracy || !r.mean_ms) continue;
    r.pareto = std::none_of(rows.begin(), rows.end(), [&](const ExitSweepRow& o) {
      return o.accuracy && o.mean_ms && *o.accuracy >= *r.accuracy && *o.mean_ms <= *r.mean_ms &&
             (*o.accuracy > *r.accuracy || *o.mean_ms < *r.mean_ms);
    });
  }
  return rows;
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
