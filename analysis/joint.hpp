// Joint planning (#21): which participant cuts where when N participants
// share one SERVER. Each participant runs one split of the plan's rows (a
// class); the SERVER is one FIFO queue all classes share, and the rest of
// a frame is a delay of its class (plan.hpp's model, one class per split):
// class c has n_c participants, service time S_c (PlanRow::service_ms) and
// delay Z_c = its latency alone - S_c. Mean value analysis over population
// vectors, exact:
//   R_c(n) = S_c (1 + Q(n - e_c)),  X_c(n) = n_c / (Z_c + R_c(n)),
//   Q(n) = sum_c X_c(n) R_c(n)
// (with one class, plan.hpp's recursion), or Schweitzer's approximation
// (Q_j(n - e_c) ~ Q_j(n) (n_j - [j = c]) / n_j, iterated to a fixed point)
// when the population vectors number more than 100,000. With one class,
// plan.hpp's model exactly (between the constant-times bound and the MVA by
// the row's variability); with several the MVA alone, which predicted unlike
// classes sharing a FIFO SERVER within 4 % where equal rounds missed by 30 %
// (docs/BENCHMARKS.md, results/joint9).
// The search starts from every participant at the best common split and
// moves one participant at a time to the row that most improves the
// objective (mean latency, or total frames/s), until no move does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/plan.hpp"

namespace tracr::analysis {

struct JointClass {
  size_t row = 0;                                // index into Plan::rows
  int participants = 0;                          // how many run that row's split
  double latency_ms = 0, queue_ms = 0, fps = 0;  // each of them (fps: one frame in flight)
  std::optional<double> measured_ms;             // validation: their frames' median total
  std::optional<double> error_pct;
};

struct JointPlan {
  int participants = 0;
  std::string model;                // how the queue was solved ("exact mean value analysis ..." or Schweitzer's)
  std::vector<JointClass> classes;  // the chosen assignment, most participants first
  double mean_latency_ms = 0, total_fps = 0, server_busy = 0;  // busy: sum of X_c S_c (0..1)
  // Every participant at the best common split, for comparison.
  size_t common_row = 0;
  double common_mean_ms = 0, common_total_fps = 0;
  // Validation against a run whose participants each ran one split.
  int64_t validation_run = 0;
  std::optional<double> mape_pct;  // over the classes the run had, per class
  std::string window_note;         // which of its frames were compared (those while all were running)
};

// The assignment `counts` (row index -> participants; zero counts ignored)
// solved: one JointClass per row with participants, and the totals.
Result<JointPlan> solve_assignment(const Plan& p, const std::vector<std::pair<size_t, int>>& counts);
// The assignment of `participants` that is best for opt.objective (latency
// or throughput) among p's feasible rows, each class within
// opt.max_latency_ms when given.
Result<JointPlan> plan_jointly(const Plan& p, int participants, const PlanOptions& opt);
// The assignment a run made (each participant at one split; refused with a
// reason when a participant ran several), solved with p's rows of the run's
// codec and compared per class with the median of the run's timed frames
// that ended while every participant was running (each participant's clock
// from its first frame, up to the first of them to finish: its participants
// start together with lockstep).
Result<JointPlan> validate_joint(store::ResultsDb& db, const Plan& p, int64_t run);
std::string format_joint(const Plan& p, const JointPlan& j);

}  // namespace tracr::analysis
