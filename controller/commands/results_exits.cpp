#include "controller/commands/results_exits.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "analysis/exits.hpp"
#include "analysis/plan.hpp"
#include "core/text.hpp"
#include "protocol/stats.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

using store::column_of;

namespace {

struct RunExits {
  settings::ExperimentConfig cfg;
  std::vector<analysis::ExitFrame> frames;
};

std::optional<int64_t> as_int(const std::optional<std::string>& v) {
  if (!v || v->empty()) return std::nullopt;
  char* end = nullptr;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (!end || *end != '\0') return std::nullopt;  // not an integer: as if NULL
  return x;
}

// The run's exits and policy (from its stored configuration) and its timed,
// ok frames. Error invalid_argument for a run without exits.
Result<RunExits> load_run_exits(store::ResultsDb& db, int64_t run_id) {
  auto run = db.get_run(run_id);
  if (!run) return run.error();
  auto cfg = settings::parse_experiment(run->config_yaml, fmt::format("run {}'s configuration", run_id), false);
  if (!cfg) return cfg.error();
  if (cfg->exits.empty())
    return make_error(Errc::invalid_argument,
                      fmt::format("run {} has no exits; expected a run of an experiment with exits: (#44)", run_id));
  RunExits out{std::move(*cfg), {}};
  auto rows = db.rows("frames", run_id);
  if (!rows) return rows.error();
  auto col = [](const char* c) { return column_of("frames", c); };
  static const size_t kSplit = col("split"), kPl = col("placement"), kExit = col("exit_index"),
                      kRes = col("exit_results"), kTimes = col("exit_times"), kTotal = col("total_ns"),
                      kPost = col("post_ns"), kWire = col("wire_bytes"), kReply = col("reply_bytes"),
                      kCorrect = col("correct"), kLabel = col("label"), kOk = col("ok"), kWarm = col("warmup"),
                      kBatch = col("batch"), kExitNs = col("exit_ns");
  for (const auto& r : *rows) {
    if (as_int(r[kOk]).value_or(0) != 1 || as_int(r[kWarm]).value_or(1) != 0 || as_int(r[kBatch]).value_or(0) != 1)
      continue;
    analysis::ExitFrame f;
    f.split = as_int(r[kSplit]).value_or(0);
    f.placement = r[kPl].value_or(std::to_string(f.split));
    if (f.placement.empty()) f.placement = std::to_string(f.split);
    f.exit_index = as_int(r[kExit]);
    f.exit_results = r[kRes].value_or("");
    f.exit_times = r[kTimes].value_or("");
    f.total_ns = as_int(r[kTotal]).value_or(0);
    f.post_ns = as_int(r[kPost]).value_or(0);
    f.sent_bytes = f.exit_index ? 0 : as_int(r[kWire]).value_or(0) + as_int(r[kReply]).value_or(0);
    f.correct = as_int(r[kCorrect]).value_or(-1);
    // A label means the model's class only where the run could judge the answer (correct >= 0).
    if (f.correct >= 0) f.label = as_int(r[kLabel]);
    f.exit_ns = as_int(r[kExitNs]).value_or(0);
    out.frames.push_back(std::move(f));
  }
  return out;
}

std::string opt_num(const std::optional<double>& v, const char* spec) {
  return v ? fmt::format(fmt::runtime(spec), *v) : std::string("-");
}

}  // namespace

Status print_exit_sweep(store::ResultsDb& db, int64_t run_id, const std::string& thresholds, const std::string& measure,
                        const std::string& csv) {
  auto run = load_run_exits(db, run_id);
  if (!run) return run.error();
  const auto& pol = run->cfg.exit_policy;
  const std::string m = measure.empty() ? pol.measure : measure;
  std::vector<double> ts;
  if (thresholds.empty()) {
    auto def = analysis::parse_thresholds("0.5:0.99:0.01");
    ts = *def;
    if (std::find(ts.begin(), ts.end(), pol.threshold) == ts.end()) ts.push_back(pol.threshold);
    std::sort(ts.begin(), ts.end());
  } else {
    auto p = analysis::parse_thresholds(thresholds);
    if (!p) return p.error();
    ts = *p;
  }
  auto rows = analysis::sweep_exits(run->frames, ts, m);
  if (!rows) return rows.error();
  std::vector<std::string> names;
  for (const auto& e : run->cfg.exits) names.push_back(e.after);
  fmt::print("run {}: {} frames; exits {}; the run's policy {} >= {}; swept by {}\n", run_id, run->frames.size(),
             fmt::join(names, ", "), pol.measure, pol.threshold, m);
  fmt::print("latency: measured frames (sent: the run's total; exited: start to that exit's decision + the frame's "
             "post-processing); * = on the accuracy-latency front\n");
  std::vector<std::vector<std::string>> table = {{"placement", "threshold", "frames", "exit rate", "sent", "unknown",
                                                  "accuracy", "mean ms", "p95 ms", "bytes/frame", ""}};
  bool any_unknown = false;
  for (const auto& r : *rows) {
    std::string rates;
    for (size_t e = 0; e < r.exited.size(); ++e)
      rates += fmt::format("{}{}", e ? " " : "",
                           r.frames ? fmt::format("{:.3f}", static_cast<double>(r.exited[e]) / r.frames) : "-");
    any_unknown |= r.unknown > 0;
    table.push_back({r.placement, fmt::format("{}", r.threshold), std::to_string(r.frames), rates,
                     std::to_string(r.sent), std::to_string(r.unknown), opt_num(r.accuracy, "{:.4f}"),
                     opt_num(r.mean_ms, "{:.3f}"), opt_num(r.p95_ms, "{:.3f}"), fmt::format("{:.0f}", r.bytes_per_frame),
                     r.pareto ? "*" : ""});
  }
  std::fputs(core::align(table, {0}).c_str(), stdout);
  fmt::print("exit rate: per exit in exits: order ({})\n", fmt::join(names, ", "));
  if (any_unknown)
    fmt::print("unknown: frames the run ended at an exit that no exit takes at this threshold: their final answer was "
               "never computed, so accuracy and latency are left out (a run at exit_policy.threshold: 1 sends every "
               "frame no exit is certain of, and sweeps every threshold below 1)\n");
  if (!csv.empty()) {
    std::ofstream f(csv);
    if (!f) return make_error(Errc::io, fmt::format("--csv {}: cannot be written", csv));
    f << "run_id,placement,split,threshold,measure,frames,sent,unknown,labelled,correct,accuracy,mean_ms,p95_ms,"
         "bytes_per_frame,pareto";
    for (size_t e = 0; e < names.size(); ++e) f << ",exited_" << e;
    f << "\n";
    for (const auto& r : *rows) {
      f << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}", run_id, r.placement, r.split, r.threshold, m,
                       r.frames, r.sent, r.unknown, r.labelled, r.correct, opt_num(r.accuracy, "{:.9g}"),
                       opt_num(r.mean_ms, "{:.6f}"), opt_num(r.p95_ms, "{:.6f}"), r.bytes_per_frame, r.pareto ? 1 : 0);
      for (size_t e = 0; e < names.size(); ++e) f << "," << (e < r.exited.size() ? r.exited[e] : 0);
      f << "\n";
    }
    if (!f) return make_error(Errc::io, fmt::format("--csv {}: write failed", csv));
  }
  return {};
}

bool has_exits(store::ResultsDb& db, int64_t run_id) {
  auto run = db.get_run(run_id);
  if (!run) return false;
  auto cfg = settings::parse_experiment(run->config_yaml, "", false);
  return cfg && !cfg->exits.empty();
}

namespace {

// One (split, threshold) pair measured over held-out runs: the median over
// them of each run's offline-sweep mean latency, accuracy pooled.
struct MeasuredPair {
  std::vector<double> ms;  // per run
  int64_t labelled = 0, correct = 0;
  double median_ms() const {
    std::vector<double> v = ms;
    return protocol::median_of(v);
  }
  std::optional<double> accuracy() const {
    return labelled > 0 ? std::optional<double>(static_cast<double>(correct) / static_cast<double>(labelled))
                        : std::nullopt;
  }
};
using PairKey = std::pair<std::string, double>;  // placement, threshold

// The layers a run's exits hang after, in order.
std::vector<std::string> exits_of(const std::vector<settings::ExitSpec>& exits) {
  std::vector<std::string> out;
  for (const auto& e : exits) out.push_back(e.after);
  return out;
}

// The held-out runs' offline sweeps at the planned thresholds, per pair
// every run knows (no unknown frames in any).
Result<std::map<PairKey, MeasuredPair>> measure_pairs(store::ResultsDb& db, const std::string& model,
                                                      const std::vector<std::string>& exits,
                                                      const std::vector<int64_t>& runs,
                                                      const std::vector<double>& thresholds, const std::string& measure) {
  std::map<PairKey, MeasuredPair> out;
  std::map<PairKey, size_t> seen;
  for (const int64_t v : runs) {
    auto run = db.get_run(v);
    if (!run) return run.error();
    if (run->model != model)
      return make_error(Errc::invalid_argument, fmt::format("--validate-on {}: run {} ran {}, the plan {}; expected a "
                                                            "run of the same model with the same exits",
                                                            v, v, run->model, model));
    auto ex = load_run_exits(db, v);
    if (!ex) return ex.error();
    if (exits_of(ex->cfg.exits) != exits)
      return make_error(Errc::invalid_argument, fmt::format("--validate-on {}: run {} has exits after [{}], the plan "
                                                            "[{}]; expected a run of the same model with the same exits",
                                                            v, v, fmt::join(exits_of(ex->cfg.exits), ", "),
                                                            fmt::join(exits, ", ")));
    auto rows = analysis::sweep_exits(ex->frames, thresholds, measure);
    if (!rows) return rows.error();
    for (const auto& r : *rows) {
      if (r.unknown > 0 || !r.mean_ms) continue;
      const PairKey k{r.placement, r.threshold};
      auto& m = out[k];
      m.ms.push_back(*r.mean_ms);
      m.labelled += r.labelled;
      m.correct += r.correct;
      ++seen[k];
    }
  }
  for (auto it = out.begin(); it != out.end();)  // a pair some run cannot judge is left out
    it = seen[it->first] == runs.size() ? std::next(it) : out.erase(it);
  return out;
}

// A (split, threshold) pair as text; at a split before every exit (no frame
// there evaluated one) the threshold cannot matter and is not named.
struct PairText {
  std::set<std::string> no_exit;  // placements where no frame evaluated an exit
  explicit PairText(const std::vector<analysis::ExitFrame>& frames) {
    std::set<std::string> with;
    for (const auto& f : frames) (f.exit_results.empty() ? no_exit : with).insert(f.placement);
    for (const auto& w : with) no_exit.erase(w);
  }
  std::string operator()(const std::string& placement, double threshold) const {
    return no_exit.count(placement) ? fmt::format("split {} (no exit before it: every frame sent)", placement)
                                    : fmt::format("split {} at {}", placement, threshold);
  }
};

// The measured best under the plan's constraint: with max_latency_ms the
// most accurate pair within it (the faster on a tie), otherwise the fastest
// pair that reaches min_accuracy (or the fastest of all).
std::pair<const PairKey*, const MeasuredPair*> measured_best(const std::map<PairKey, MeasuredPair>& measured,
                                                             std::optional<double> max_latency_ms,
                                                             std::optional<double> min_accuracy) {
  const PairKey* best = nullptr;
  const MeasuredPair* bm = nullptr;
  for (const auto& [k, m] : measured) {
    const double ms = m.median_ms();
    const double acc = m.accuracy().value_or(-1);
    if (max_latency_ms && ms > *max_latency_ms) continue;
    if (min_accuracy && acc < *min_accuracy) continue;
    bool better = !bm;
    if (bm && max_latency_ms)
      better = acc > bm->accuracy().value_or(-1) || (acc == bm->accuracy().value_or(-1) && ms < bm->median_ms());
    else if (bm)
      better = ms < bm->median_ms();
    if (better) best = &k, bm = &m;
  }
  return {best, bm};
}

// plan RUN --validate-on R1,R2,... with exits: the chosen pair as measured
// by held-out runs (their offline sweeps equal re-runs at each threshold),
// the measured best under the same constraint, and the planned latency's
// error over every pair.
Status print_exit_validation(store::ResultsDb& db, const std::string& model, const std::vector<std::string>& exits,
                             const analysis::ExitPlan& plan,
                             const std::vector<double>& thresholds, const std::string& measure,
                             std::optional<double> max_latency_ms, std::optional<double> min_accuracy,
                             const std::vector<int64_t>& runs, const PairText& pair) {
  auto measured = measure_pairs(db, model, exits, runs, thresholds, measure);
  if (!measured) return measured.error();
  double err = 0;
  size_t n = 0;
  for (const auto& r : plan.rows)
    if (auto it = measured->find({r.placement, r.threshold}); it != measured->end()) {
      err += std::fabs(r.latency_ms - it->second.median_ms()) / it->second.median_ms() * 100.0;
      ++n;
    }
  fmt::print("\nvalidation of the (split, threshold) choice on run(s) {} (each pair's latency: the median over them "
             "of its offline sweep's mean, equal to a re-run at that threshold; accuracy pooled): {} pairs measured, "
             "planned latency MAPE {}\n",
             fmt::join(runs, ", "), measured->size(), n ? fmt::format("{:.1f} %", err / n) : std::string("-"));
  const auto [best, bm] = measured_best(*measured, max_latency_ms, min_accuracy);
  if (plan.chosen < 0) {
    fmt::print("  nothing was chosen; measured best: {}\n",
               bm ? fmt::format("{}: {:.3f} ms", pair(best->first, best->second), bm->median_ms()) : "none");
    return {};
  }
  const auto& c = plan.rows[static_cast<size_t>(plan.chosen)];
  const auto it = measured->find({c.placement, c.threshold});
  if (it == measured->end()) {
    fmt::print("  the chosen pair ({}) was not measured by these runs (run them at exit_policy.threshold: 1 with "
               "that split)\n",
               pair(c.placement, c.threshold));
    return {};
  }
  const MeasuredPair& cm = it->second;
  std::vector<std::string> each;
  for (double v : cm.ms) each.push_back(fmt::format("{:.3f}", v));
  fmt::print("  chosen {}: measured {:.3f} ms (per run {}){}, accuracy {}\n", pair(c.placement, c.threshold),
             cm.median_ms(), fmt::join(each, ", "),
             max_latency_ms ? fmt::format(", {} {} ms", cm.median_ms() <= *max_latency_ms ? "meets" : "MISSES",
                                          *max_latency_ms)
                            : std::string(),
             opt_num(cm.accuracy(), "{:.4f}"));
  if (!bm) {
    fmt::print("  measured best: no measured pair meets the constraint\n");
    return {};
  }
  fmt::print("  measured best: {}: {:.3f} ms, accuracy {}; the chosen's latency {:+.1f} % of it, accuracy "
             "{:+.2f} points\n",
             pair(best->first, best->second), bm->median_ms(), opt_num(bm->accuracy(), "{:.4f}"),
             (cm.median_ms() / bm->median_ms() - 1.0) * 100.0,
             (cm.accuracy().value_or(0) - bm->accuracy().value_or(0)) * 100.0);
  return {};
}

}  // namespace

Status print_exit_plan(store::ResultsDb& db, int64_t run_id, const analysis::Plan& p,
                       std::optional<double> max_latency_ms, std::optional<double> min_accuracy,
                       const std::vector<int64_t>& check) {
  auto run = load_run_exits(db, run_id);
  if (!run) return run.error();
  std::map<int64_t, double> offload;
  for (const auto& r : p.rows)
    if (r.codec == p.basis_codec) offload[r.split] = r.latency_ms;
  auto ts = analysis::parse_thresholds("0.1:0.99:0.01");
  std::vector<double> thresholds = *ts;
  thresholds.push_back(1.0);
  auto plan = analysis::plan_exits(run->frames, offload, thresholds, run->cfg.exit_policy.measure, max_latency_ms,
                                   min_accuracy);
  if (!plan) return plan.error();
  const PairText pair(run->frames);
  fmt::print("\nearly exits: (split, threshold) planned for this link ({}: frames that exit take their measured time "
             "to the exit; frames sent, the split's predicted latency above plus its exit heads' mean cost; "
             "accuracy from the stored answers); {} pairs, the accuracy-latency front shown\n",
             run->cfg.exit_policy.measure, plan->rows.size());
  std::vector<std::vector<std::string>> t = {
      {"", "split", "threshold", "exit rate", "accuracy", "latency ms", "sent ms", "meets"}};
  for (size_t i = 0; i < plan->rows.size(); ++i) {
    const auto& x = plan->rows[i];
    const bool chosen = static_cast<int>(i) == plan->chosen;
    if (!x.front && !chosen) continue;
    if (!chosen && t.size() > 1 && t.back()[4] == opt_num(x.accuracy, "{:.4f}") &&
        t.back()[5] == fmt::format("{:.3f}", x.latency_ms))
      continue;  // a tie with the pair above: one line for both
    t.push_back({chosen ? "*" : "", x.placement, pair.no_exit.count(x.placement) ? "-" : fmt::format("{}", x.threshold), fmt::format("{:.3f}", x.exit_rate),
                 opt_num(x.accuracy, "{:.4f}"), fmt::format("{:.3f}", x.latency_ms), fmt::format("{:.3f}", x.sent_ms),
                 x.feasible ? "yes" : "no"});
  }
  std::fputs(core::align(t, {0}).c_str(), stdout);
  if (plan->chosen >= 0) {
    const auto& c = plan->rows[static_cast<size_t>(plan->chosen)];
    fmt::print("* chosen ({}): {}: predicted {:.3f} ms, accuracy {}, exit rate {:.3f}\n",
               max_latency_ms ? fmt::format("the most accurate within {} ms", *max_latency_ms)
               : min_accuracy ? fmt::format("the fastest with accuracy >= {}", *min_accuracy)
                              : std::string("the fastest"),
               pair(c.placement, c.threshold), c.latency_ms, opt_num(c.accuracy, "{:.4f}"), c.exit_rate);
  } else {
    fmt::print("no (split, threshold) meets the constraints\n");
  }
  if (plan->left_out > 0)
    fmt::print("{} pairs left out: frames the basis run ended at an exit have no final answer there (plan from a run "
               "at exit_policy.threshold: 1)\n",
               plan->left_out);
  if (!plan->unplanned.empty())
    fmt::print("splits {} of the basis run have no offload prediction here (--splits)\n", fmt::join(plan->unplanned, ", "));
  if (!check.empty()) {
    auto model = db.get_run(run_id);
    if (!model) return model.error();
    return print_exit_validation(db, model->model, exits_of(run->cfg.exits), *plan, thresholds,
                                 run->cfg.exit_policy.measure, max_latency_ms, min_accuracy, check, pair);
  }
  return {};
}

Status print_exit_summary(store::ResultsDb& db, int64_t run_id, std::FILE* out) {
  if (!has_exits(db, run_id)) return {};  // also a run whose stored configuration no longer reads
  auto run = load_run_exits(db, run_id);
  if (!run) return run.error().code == Errc::invalid_argument ? Status{} : Status(run.error());
  struct Side {
    int64_t n = 0, labelled = 0, correct = 0;
    double ms = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, std::pair<Side, Side>> by;  // exited, sent
  for (const auto& f : run->frames) {
    if (!by.count(f.placement)) order.push_back(f.placement);
    Side& s = f.exit_index ? by[f.placement].first : by[f.placement].second;
    ++s.n;
    s.ms += static_cast<double>(f.total_ns) / 1e6;
    if (f.correct >= 0) {
      ++s.labelled;
      s.correct += f.correct;
    }
  }
  if (order.empty()) return {};
  std::vector<std::vector<std::string>> t = {
      {"  placement", "exited", "exit rate", "exited mean ms", "exited acc", "sent", "sent mean ms", "sent acc"}};
  auto mean = [](const Side& s) { return s.n ? fmt::format("{:.3f}", s.ms / s.n) : std::string("-"); };
  auto acc = [](const Side& s) {
    return s.labelled ? fmt::format("{:.4f}", static_cast<double>(s.correct) / s.labelled) : std::string("-");
  };
  for (const auto& p : order) {
    const auto& [x, s] = by[p];
    t.push_back({"  " + p, std::to_string(x.n), fmt::format("{:.3f}", static_cast<double>(x.n) / (x.n + s.n)),
                 mean(x), acc(x), std::to_string(s.n), mean(s), acc(s)});
  }
  fmt::print(out, "\nearly exits ({} >= {}; `tracrctl results exits {}` sweeps thresholds)\n",
             run->cfg.exit_policy.measure, run->cfg.exit_policy.threshold, run_id);
  std::fputs(core::align(t, {0}).c_str(), out);
  return {};
}

}  // namespace tracr::controller
