// Early exits offline (#44): a threshold sweep from one run's stored
// answers. Every frame of a run with exits stores the answer and both
// confidences of every exit its PARTICIPANT evaluated (frames.exit_results)
// and the time from the frame's start to each exit's decision
// (frames.exit_times). At a threshold t a frame takes the first exit whose
// confidence (the measure's, stored as the float32 the run compared) is at
// least t, as the run itself decides; a frame no exit takes is sent: its
// answer and time are the run's own when the run sent it too. When the run
// ended it at an exit instead (t above the run's threshold), its final
// answer was never computed: the frame is counted `unknown` and the
// threshold's accuracy and latency are left out (a run at threshold 1, where
// nothing exits, sweeps every threshold).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "protocol/error.hpp"

namespace tracr::analysis {

// One frame as stored (ok, timed, batch 1).
struct ExitFrame {
  int64_t split = 0;
  std::string placement;
  std::optional<int64_t> exit_index;  // the exit the run took
  std::string exit_results;           // frames.exit_results
  std::string exit_times;             // frames.exit_times
  int64_t total_ns = 0, post_ns = 0;
  int64_t sent_bytes = 0;             // wire_bytes + reply_bytes (0 for a frame that exited)
  int64_t correct = -1;               // the run's answer: 1, 0, or -1 unknown (no label)
  std::optional<int64_t> label;       // the sample's label
  int64_t exit_ns = 0;                // the exit heads' cost on this frame (frames.exit_ns)
};

// One exit's stored answer for the (single) sample of a frame.
struct ExitAnswerText {
  int64_t exit = 0;
  int64_t top1 = -1;
  double max_softmax = 0, entropy_conf = 0;
  int64_t at_ns = 0;  // from exit_times
};
// frames.exit_results and exit_times read back. Error invalid_argument
// naming what does not parse.
Result<std::vector<ExitAnswerText>> parse_exit_answers(const std::string& results, const std::string& times);

// The sweep at one (split, threshold).
struct ExitSweepRow {
  std::string placement;
  int64_t split = 0;
  double threshold = 0;
  int64_t frames = 0;
  std::vector<int64_t> exited;   // per exit index (0 .. max exit index in the run)
  int64_t sent = 0;
  int64_t unknown = 0;           // frames whose answer at this threshold the run never computed
  int64_t labelled = 0, correct = 0;  // over the frames whose answer is known and labelled
  std::optional<double> accuracy;     // correct / labelled; nullopt when unknown > 0 or nothing labelled
  std::optional<double> mean_ms, p95_ms;  // nullopt when unknown > 0
  double bytes_per_frame = 0;    // mean sent bytes (exited frames send none)
  double exited_ms = 0;          // sum over the frames that exit of their time to the exit's decision + post
  bool pareto = false;           // on the accuracy-latency front over every row
};

// thresholds in the order given; measure max_softmax or entropy.
Result<std::vector<ExitSweepRow>> sweep_exits(const std::vector<ExitFrame>& frames, const std::vector<double>& thresholds,
                                             const std::string& measure);

// Edgent's question (#44): which (split, threshold) meets a latency bound
// with the best accuracy, or an accuracy floor at the least latency, on a
// link the basis run may not have had. Per (split, threshold), from a basis
// run that stored every exit's answer:
//   latency = (sum over the frames that exit of their measured time to that
//             exit's decision + post-processing
//             + frames sent x (offload_ms[split] + the split's mean exit-head
//               cost)) / frames
// where offload_ms is the planner's predicted latency of a frame sent at
// that split on the link planned for (analysis/plan.hpp), and accuracy is
// the sweep's (exact, from the stored answers). Pairs with unknown frames
// (the basis ended them at an exit) are left out and counted.
struct ExitPlanRow {
  std::string placement;
  int64_t split = 0;
  double threshold = 0;
  double exit_rate = 0;            // frames that end at any exit / frames
  std::optional<double> accuracy;  // nullopt: no labelled frame
  double latency_ms = 0;           // predicted mean per frame
  double sent_ms = 0;              // predicted latency of a frame sent at this split (offload + exit heads)
  bool feasible = true;            // meets the constraints
  bool front = false;              // on the accuracy-latency front of the planned pairs
};
struct ExitPlan {
  std::vector<ExitPlanRow> rows;
  int chosen = -1;                 // index into rows; -1: none meets the constraints
  int64_t left_out = 0;            // pairs with unknown frames
  std::vector<int64_t> unplanned;  // splits of the basis the offload plan has no row for
};
Result<ExitPlan> plan_exits(const std::vector<ExitFrame>& frames, const std::map<int64_t, double>& offload_ms,
                            const std::vector<double>& thresholds, const std::string& measure,
                            std::optional<double> max_latency_ms, std::optional<double> min_accuracy);

// "0.5:0.99:0.01" (from:to:step, both ends included, to 1e-9) or a
// comma-separated list. Error invalid_argument naming what was expected.
Result<std::vector<double>> parse_thresholds(const std::string& text);

}  // namespace tracr::analysis
