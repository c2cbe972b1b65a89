// The recorder of one run: turns the agents' control lines into rows (frames,
// layer profiles, device identities, events) and owns every database write of
// the run. Frames are committed in batches of 64 and at least once a second;
// a failed write keeps its rows in memory, keeps the first cause (never a
// generic message) and is retried at the next flush.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <cstdio>
#include <deque>
#include <memory>
#include <tuple>
#include <vector>

#include "wire/agent_role.hpp"
#include "wire/control.hpp"
#include "store/results.hpp"

namespace tracr::store {

class Recorder {
 public:
  Recorder(ResultsDb& db, int64_t run_id, bool record_frames, bool record_layers);
  // The run's link profile and shaping, stored on every frame and probe row.
  void set_link(std::string link, std::string shaping) {
    link_ = std::move(link);
    shaping_ = std::move(shaping);
  }

  // The SERVER's device name: participants relay its per-frame energy rows.
  void set_server(std::string name) { server_name_ = std::move(name); }
  // A chain of two or more devices: hop h's device and the codec of the
  // request into it, stored on each frame_hops row (the line carries neither).
  void set_chain(std::vector<std::string> devices, std::vector<std::string> codecs) {
    chain_ = std::move(devices);
    chain_codecs_ = std::move(codecs);
  }
  // Handles READY (hardware identity), PROFILE, FRAME, ENERGY, PROBE, EVENT and LOG lines
  // from the agent `role` on `device`. Error field_type / missing_field
  // naming the device and field for a malformed record (nothing stored of it).
  Status on_message(const std::string& device, wire::AgentRole role, const wire::ControlMsg& m);
  // Records an event now (written at once, not batched).
  void event(std::string_view level, std::string_view kind, const std::string& message,
             const std::string& device = {}, std::optional<int64_t> frame = std::nullopt);

  // Writes pending rows when 64 are waiting or a second has passed.
  void maybe_flush();
  // Writes every pending row now.
  void flush();

  // record.outputs: writes the output tensors received so far, one .npy
  // (little-endian float32, [samples, the tensor's own shape]) per
  // (participant, split, codec, output tensor) under <database
  // dir>/outputs/<database file name>/run<ID>/, and an outputs row per file.
  // Call once, after the last frame. Error io naming the file.
  Status write_outputs();

  // The first write failure ("" when none) and how many rows are still unwritten.
  const std::string& write_error() const { return write_error_; }
  size_t unwritten() const { return frames_.size() + profiles_.size() + energy_.size(); }
  // Writes the rows the database did not take as JSON lines (one object per
  // row: {"table": ..., every column}) to `path`; returns the path written.
  Result<std::string> save_unwritten(const std::string& path) const;

  // Progress as the participant reported it, and its timed frames so far.
  int64_t frames_done() const { return done_; }
  int64_t frames_total() const { return total_; }
  int current_split() const { return split_; }
  int64_t timed_frames(const std::string& device) const;
  // The newest frame's running link estimate and split from a participant.
  std::optional<double> link_estimate(const std::string& device) const {
    auto it = last_est_.find(device);
    return it == last_est_.end() ? std::nullopt : it->second;
  }
  // The median of the link rates of a participant's last 3 timed ok frames
  // (request and reply wire bytes over that frame's network time, Mbit/s),
  // or nothing before 3: a change of link shows in it within 2 frames, where
  // the agent's 8-frame estimate still holds the old link's frames.
  std::optional<double> recent_link_rate(const std::string& device) const;
  int last_split(const std::string& device) const {
    auto it = last_split_.find(device);
    return it == last_split_.end() ? -1 : it->second;
  }
  int64_t frames_received() const { return received_; }

 private:
  // on_message's parts: a FRAME (counters, outputs, the row), a PROBE, a LOG line.
  Status on_frame(const std::string& device, const std::string& role, const wire::ControlMsg& m);
  Status on_probe(const std::string& device, const std::string& role, const wire::ControlMsg& m);
  Status on_reused(const std::string& device, const std::string& role, const wire::ControlMsg& m);
  void on_log(const std::string& device, const std::string& role, const wire::ControlMsg& m);
  ResultsDb& db_;
  int64_t run_id_;
  bool record_frames_, record_layers_;
  std::vector<FrameRecord> frames_;
  std::vector<LayerProfileRecord> profiles_;
  std::vector<EnergyRow> energy_;
  std::string server_name_;
  std::vector<std::string> chain_, chain_codecs_;
  std::map<std::string, int64_t> timed_by_device_;
  std::map<std::string, std::optional<double>> last_est_;
  std::map<std::string, std::deque<double>> recent_rates_;  // per frame, the last 3
  std::map<std::string, int> last_split_;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
  std::string write_error_;
  std::string link_, shaping_;
  std::set<std::string> warned_;  // agents' warnings already printed (each once per run; every one is an event)
  // Output tensors of timed ok frames, by (participant, split, codec), in
  // frame order, appended to <file>.part as they arrive (the controller holds
  // none of them in memory); write_outputs() fills in the header.
  // One .npy per output tensor of the model (one for a classifier's logits).
  struct OutputFile {
    FrameRecord::OutputPart part;  // name and shape per sample
    int64_t size = 0;              // values per sample
    size_t header = 0;             // bytes of the .npy header (fixed when the file is opened)
    std::string rel;               // path relative to the database's directory
    std::shared_ptr<std::FILE> file;
  };
  struct OutputAcc {
    std::vector<OutputFile> files;
    int64_t cols = 0, rows = 0, frames = 0, first_frame = -1, last_frame = -1;
    bool broken = false;  // a file could not be opened: its error is the write error
  };
  Status append_outputs(const std::string& device, const FrameRecord& r);
  std::map<std::tuple<std::string, int64_t, std::string>, OutputAcc> outputs_;
  int64_t done_ = 0, total_ = 0, received_ = 0;
  int split_ = 0;
};

}  // namespace tracr::store
