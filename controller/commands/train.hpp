// `tracrctl train EXPERIMENT.yaml`: split training (SplitNN) across the
// devices of a devices file, recorded in SQLite (train_* tables).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "store/results.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

// Who runs what: the data owners, each segment's device ("owner" or a
// device name) and the worker devices with the segments each holds.
struct TrainLayout {
  std::vector<const settings::DeviceConfig*> owners;
  std::vector<std::string> segment_device;
  std::vector<std::pair<const settings::DeviceConfig*, std::vector<int>>> workers;
  std::vector<std::string> warnings;  // e.g. a last segment off the owner sees label gradients
};
// Resolves train.owners and train.segments against the devices file (the
// defaults: the first PARTICIPANT owns; middle segments on the SERVER).
// Error config naming the setting, its position and the unknown device.
Result<TrainLayout> plan_training(const settings::ExperimentConfig& cfg, const settings::DevicesConfig& devices);

// tracrctl train's options (controller/cli/cli.cpp fills them from the command line).
struct TrainOptions {
  std::string experiment, db, agent_path, resume;  // resume: a run id or "last" ("" = a new run)
  bool show_config = false, trust_new_hosts = false, progress = true;
  std::vector<std::string> sets;  // --set key=value overrides
};
// Fails with a usage error (exit 2) or the training run's failure (exit 1,
// or 128 + signal when a signal ended it).
Status cmd_train(const TrainOptions& opt);

// Per (owner, epoch): losses and accuracies; per owner: median step time and
// bytes per step; the exported model. Error not_found for a run that did
// not train.
Status print_train_table(store::ResultsDb& db, int64_t run_id);

}  // namespace tracr::controller
