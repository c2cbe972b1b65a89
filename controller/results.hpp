// Results store: one SQLite database (default results/tracr.db) holding runs,
// per-frame records, per-layer profiles, per-split summaries and structured
// events. Opened in WAL mode with a busy timeout and foreign keys on; every
// batch of rows is written in one transaction, so a run killed at any point
// leaves the rows written so far intact and consistent.
//
// Schema (version kSchemaVersion; migrations are an ordered list, each
// applied in its own transaction and recorded in schema_migrations; opening
// an older database upgrades it, a newer one is refused):
//
//   schema_migrations(version INTEGER PRIMARY KEY, name TEXT, applied_at TEXT)
//
//   runs            one row per `tracrctl run`
//     id INTEGER PRIMARY KEY, name, status (running|completed|failed|
//     interrupted), started_at, ended_at (ISO-8601 UTC, ms), config_yaml (the
//     effective experiment configuration), tracr_version, protocol_version,
//     model, codec, cipher, devices_json (devices used, no key material),
//     controller_host, controller_pid, controller_start (the controller
//     process's start time in clock ticks since boot, from /proc, to tell a
//     reused pid apart), error (message of a failed/interrupted run).
//
//   frames          one row per inference frame
//     id, run_id -> runs(id), participant (device name), split, sample
//     (index of the first sample of the frame), rep (repetition, 0-based),
//     batch (samples in the frame), warmup (1 = untimed warm-up frame,
//     excluded from summaries), head_ns, encode_ns, transfer_ns, decode_ns,
//     tail_ns, return_ns, total_ns, raw_bytes (crossing tensors before the
//     codec), wire_bytes (after), codec, cipher, result_json, ok, error,
//     energy_j (NULL; reserved), energy_source (NULL, 'measured:<meter>' or
//     'modelled:<model>'; reserved).
//
//   layer_profiles  one row per (run, device, layer)
//     run_id, device, device_role (SERVER|PARTICIPANT), layer_index, name,
//     type, params, macs, out_bytes, median_ns, p95_ns, reps, peak_mem_bytes.
//
//   summaries       one row per (run, split), computed by compute_summaries
//     run_id, split, frames (ok, non-warm-up), failed, and for total, head,
//     encode, transfer, decode, tail: <stage>_median_ns, <stage>_p95_ns;
//     mean_raw_bytes, mean_wire_bytes.
//
//   events          structured events: run started, agent lost, split switched...
//     id, run_id (NULL for events outside a run), ts, level (debug|info|warn|
//     error), kind (run_started, split_switched, agent_lost, run_finished,
//     run_interrupted, ...), message.
//
// Statistics are computed exactly in C++ over the stored values: median =
// middle value (mean of the two middle values for an even count); p95 =
// nearest rank, the value at rank ceil(0.95 n) of the sorted values.
//
// A ResultsDb is one connection: use it from one thread at a time. Several
// processes may open the same file (WAL: readers do not block the writer).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/error.hpp"

struct sqlite3;

namespace tracr::controller {

enum class RunStatus { running, completed, failed, interrupted };
std::string_view run_status_name(RunStatus s);  // "running", ...
std::optional<RunStatus> parse_run_status(std::string_view s);

// What begin_run records about a run. The controller host, pid and start
// time are filled in by begin_run.
struct RunInfo {
  std::string name;
  std::string config_yaml;    // to_yaml(ExperimentConfig)
  std::string tracr_version;  // e.g. "0.1.0"
  int protocol_version = 0;   // protocol::kVersion
  std::string model;
  std::string codec;         // CodecSpec::name()
  std::string cipher;        // "aes-256-gcm" / "none"
  std::string devices_json;  // DevicesConfig::to_json()
};

struct RunRow {
  int64_t id = 0;
  std::string name;
  RunStatus status = RunStatus::running;
  std::string started_at;
  std::string ended_at;  // "" while running
  std::string config_yaml;
  std::string tracr_version;
  int protocol_version = 0;
  std::string model, codec, cipher, devices_json;
  std::string controller_host;
  int64_t controller_pid = 0;
  std::string error;
  int64_t frame_count = 0;  // rows in frames (warm-up included)
};

struct FrameRecord {
  int64_t run_id = 0;
  std::string participant;  // device name; "" = NULL
  int split = 0;
  int64_t sample = 0;
  int rep = 0;
  int batch = 1;
  bool warmup = false;
  int64_t head_ns = 0, encode_ns = 0, transfer_ns = 0, decode_ns = 0, tail_ns = 0, return_ns = 0,
          total_ns = 0;
  int64_t raw_bytes = 0, wire_bytes = 0;
  std::string codec, cipher;
  std::string result_json;  // "" = NULL
  bool ok = true;
  std::string error;               // "" = NULL
  std::optional<double> energy_j;  // reserved
  std::string energy_source;       // "measured:<meter>" | "modelled:<model>" | "" (NULL)
};

struct LayerProfileRecord {
  int64_t run_id = 0;
  std::string device;       // device name
  std::string device_role;  // "SERVER" | "PARTICIPANT"
  int layer_index = 0;
  std::string name, type;
  int64_t params = 0, macs = 0, out_bytes = 0;
  int64_t median_ns = 0, p95_ns = 0;
  int reps = 0;
  std::optional<int64_t> peak_mem_bytes;
};

struct EventRecord {
  int64_t id = 0;
  int64_t run_id = 0;  // 0 = not tied to a run (NULL)
  std::string ts, level, kind, message;
};

// Per-split statistics over the run's ok, non-warm-up frames (ns, bytes).
struct StageStats {
  double median_ns = 0;
  double p95_ns = 0;
};
struct SplitSummary {
  int split = 0;
  int64_t frames = 0;  // ok, non-warm-up frames the statistics cover
  int64_t failed = 0;  // non-warm-up frames with ok = 0
  StageStats total, head, encode, transfer, decode, tail;
  double mean_raw_bytes = 0;
  double mean_wire_bytes = 0;
};

// Exact median (mean of the middle two for even counts) and nearest-rank p95
// of `v` (sorted in place); 0 for an empty vector.
double median_of(std::vector<int64_t>& v);
double p95_of(std::vector<int64_t>& v);

class ResultsDb {
 public:
  static constexpr int kSchemaVersion = 2;

  // Opens (creating the file and its directory if needed) and migrates to
  // kSchemaVersion, then marks runs still 'running' whose controller process
  // no longer exists on this host as 'interrupted' (and summarizes them).
  // Error io when the file cannot be opened or is not an SQLite database,
  // config when its schema is newer than this build knows.
  static Result<ResultsDb> open(const std::string& path);
  // Like open but migrates only up to `version` (0..kSchemaVersion) and skips
  // the interrupted-run sweep: for tests and tooling that need an older schema.
  static Result<ResultsDb> open_at_version(const std::string& path, int version);

  ResultsDb(ResultsDb&&) noexcept;
  ResultsDb& operator=(ResultsDb&&) noexcept;
  ~ResultsDb();

  const std::string& path() const { return path_; }
  // Highest applied migration.
  Result<int> schema_version();
  // Runs the open() sweep marked interrupted.
  const std::vector<int64_t>& interrupted_on_open() const { return interrupted_; }

  // Inserts a run with status 'running' and this process as controller;
  // returns its id. Records a run_started event.
  Result<int64_t> begin_run(const RunInfo& info);
  // Appends frames in one transaction (all or none). Error invalid_argument
  // for an energy_source not starting with measured: / modelled:.
  Status add_frames(const std::vector<FrameRecord>& frames);
  Status add_layer_profiles(const std::vector<LayerProfileRecord>& layers);
  // run_id 0 records an event outside any run. level: debug|info|warn|error.
  Status add_event(int64_t run_id, std::string_view level, std::string_view kind, std::string_view message);
  // Sets status, ended_at and error, computes the summaries, records a
  // run_finished event. Error not_found for an unknown run.
  Status finish_run(int64_t run_id, RunStatus status, const std::string& error = {});

  // Recomputes the run's summaries from its frames (replacing stored ones)
  // and returns them ordered by split.
  Result<std::vector<SplitSummary>> compute_summaries(int64_t run_id);
  // The stored summaries of a run, ordered by split; computed first when the
  // run is still running or has none stored. Error not_found for an unknown run.
  Result<std::vector<SplitSummary>> split_table(int64_t run_id);

  // Newest first; limit 0 = all.
  Result<std::vector<RunRow>> list_runs(int limit = 0);
  // Error not_found naming the id.
  Result<RunRow> get_run(int64_t run_id);
  // Id of the newest run; error not_found on an empty database.
  Result<int64_t> latest_run();
  Result<std::vector<FrameRecord>> frames(int64_t run_id);
  Result<std::vector<LayerProfileRecord>> layer_profiles(int64_t run_id);
  Result<std::vector<EventRecord>> events(int64_t run_id);

  sqlite3* handle() { return db_.get(); }

 private:
  struct Closer {
    void operator()(sqlite3* db) const;
  };
  ResultsDb() = default;
  static Result<ResultsDb> open_impl(const std::string& path, int version, bool sweep);
  Status migrate(int target);
  Status sweep_interrupted();

  std::unique_ptr<sqlite3, Closer> db_;
  std::string path_;
  std::vector<int64_t> interrupted_;
};

// Current time as ISO-8601 UTC with milliseconds ("2025-05-01T12:00:00.123Z").
std::string utc_now_iso();

}  // namespace tracr::controller
