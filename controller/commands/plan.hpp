// tracrctl plan (controller/cli/cli.cpp fills PlanCommand from the command line).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "analysis/plan.hpp"
#include "protocol/error.hpp"

namespace tracr::controller {

// tracrctl plan RUN | EXPERIMENT.yaml [--validate] [--link NAME] [--objective O] ...
// (controller/cli/cli.cpp fills it from the command line).
struct PlanCommand {
  std::string target;  // a run id, "last" or an EXPERIMENT.yaml
  std::string db;      // "" = default_results_db(); ignored for an EXPERIMENT.yaml (its output)
  bool validate = false, store = true;
  // --validate-on RUN: validate against that run instead of the basis (held
  // out). Unless a link is given, the plan is made for RUN's link: its link
  // profile as tracr emulates it, else its probe. RUN1,RUN2,...: one plan
  // validated on each, then the MAPE's median and range over them.
  std::string validate_run;
  // --joint: which participant cuts where (analysis/joint.hpp) for the
  // participants sharing the SERVER; with --validate-on RUN, the assignment
  // RUN made (each participant at one split), predicted and compared.
  bool joint = false;
  std::string link;                                  // link profile name ("" = the basis run's probe)
  std::optional<double> up_mbit, down_mbit, rtt_ms;  // explicit link figures
  analysis::PlanOptions plan;                        // objective, constraints, radio, codecs (as given)
  std::optional<double> min_accuracy;                // early exits: the (split, threshold) choice's accuracy floor
  // --chain edge,cloud (#43): plan that chain after the basis run's PARTICIPANT
  // from two-tier runs' profiles and probes of the same devices (by name);
  // --link then names one profile for every hop or one per hop ("probe": a
  // stored probe of that hop).
  std::vector<std::string> chain;
  std::vector<std::string> sets;                     // --set key=value (EXPERIMENT.yaml only)
  size_t width = 0;                                  // the terminal's columns: prose wraps to it (0: no limit)
};
// Fails with a database error or no basis run (exit 1), or a usage error (exit 2).
Status cmd_plan(const PlanCommand& cmd);

}  // namespace tracr::controller
