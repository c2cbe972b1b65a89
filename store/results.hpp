// Results store: one SQLite database (default results/tracr.db) holding runs,
// per-frame records, per-layer profiles, per-split summaries and structured
// events. Opened in WAL mode with a busy timeout and foreign keys on; every
// batch of rows is written in one transaction, so a run killed at any point
// leaves the rows written so far intact and consistent.
//
// Schema (version kSchemaVersion; migrations are an ordered list, each
// applied in its own transaction and recorded in schema_migrations; opening
// an older database upgrades it, a newer one is refused). Every table and
// column, with type, unit, meaning and who measures it, is schema_tables()
// below: `tracrctl results schema` prints it and docs/SCHEMA.md is generated
// from it. The frame, layer-profile and hardware columns come from
// wire/record_fields.def; a test checks that a fresh database has exactly
// the columns schema_tables() lists.
//
// Statistics are computed exactly in C++ over the stored values: median =
// middle value (mean of the two middle values for an even count); p95 =
// nearest rank, the value at rank ceil(0.95 n) of the sorted values.
//
// A ResultsDb is one connection: use it from one thread at a time. Several
// processes may open the same file (WAL: readers do not block the writer).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wire/record.hpp"
#include "protocol/error.hpp"

struct sqlite3;

namespace tracr::store {

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
  std::string link;          // link profile the run ran under ("" = the link as it is)
  std::string shaping;       // how it was applied (LinkShaper::shaping()), "" = none
  std::vector<std::string> layer_names;  // the model's layers in order, as the controller built it (model_layers)
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
  std::string link, shaping;
};

// A stored frame: the agent's record plus where it came from.
struct FrameRecord : wire::FrameRecord {
  int64_t run_id = 0;
  std::string participant;                   // device name; "" = NULL
  std::string link, shaping;                 // the run's link profile and how it was shaped ("" = NULL)
  std::optional<int64_t> legacy_transfer_ns;  // schema <= 2 rows only (clamped round trip minus stages)
};

// A stored layer profile: the agent's record plus the device it ran on.
struct LayerProfileRecord : wire::ProfileRecord {
  int64_t run_id = 0;
  std::string device;       // device name
  std::string device_role;  // "SERVER" | "PARTICIPANT"
  // Reuse across runs (#45 friction 2): the agent's profile key (model,
  // input, batch, device, hardware and settings that time it; "" = NULL, an
  // older agent) and the run whose agent timed the row (0 = NULL: this run,
  // for rows stored before profiles were reused).
  std::string profile_key;
  int64_t measured_run = 0;
};

// A stored segment profile (a graph model's head or tail timed whole).
struct SegmentProfileRow : wire::SegmentRecord {
  int64_t run_id = 0;
  std::string device;       // device name
  std::string device_role;  // "SERVER" | "PARTICIPANT"
  std::string profile_key;  // as LayerProfileRecord's
  int64_t measured_run = 0;
};

// Profiles a database holds under one profile key: the layer count of the
// newest complete set, and the splits whose heads and tails are timed.
struct KnownProfiles {
  std::string key;
  int64_t layers = 0;  // 0: no layer profiles under this key
  std::vector<int> head, tail;
};

// A stored link probe: the participant's record plus where it came from.
struct ProbeRow : wire::ProbeRecord {
  int64_t run_id = 0;
  std::string participant;  // device name
  std::string link, shaping;
};

// A stored energy row: the agent's record plus whose energy it is.
struct EnergyRow : wire::EnergyRecord {
  int64_t run_id = 0;
  std::string device;       // the device that used the energy (the server's name for side = server)
  std::string participant;  // the participant whose frame it was ("" for a server's idle and layer rows)
};

// Per (run, split, device, stage, source): statistics of the non-warm-up
// frames' energy (computed with the summaries).
struct EnergyStat {
  int64_t split = 0;
  std::string placement;  // the frames' placement ("7", "3|13"); the split's text for rows without one
  std::string device, stage, source;
  int64_t n = 0;
  std::optional<double> median_j, p95_j, median_net_j, p95_net_j;
};

// Statistics of energy rows (timed frames' rows, per placement, device, stage,
// source). `placements` gives a frame's placement by (participant, frame);
// a row it does not name is placed at its split alone.
using FramePlacements = std::map<std::pair<std::string, int64_t>, std::string>;
std::vector<EnergyStat> compute_energy_stats(const std::vector<EnergyRow>& rows,
                                             const FramePlacements& placements = {});

// The hardware identity of one device in one run.
struct DeviceRecord : wire::HwIdentity {
  int64_t run_id = 0;
  std::string device;  // device name
  std::string role;    // "SERVER" | "PARTICIPANT"
};

struct EventRecord {
  int64_t id = 0;
  int64_t run_id = 0;  // 0 = not tied to a run (NULL)
  std::string ts, level, kind, message;
  std::string device;               // "" = NULL
  std::optional<int64_t> frame;     // frame position on that device, where the event has one
};

// Per-split statistics over the run's ok, non-warm-up frames (ns, bytes).
struct StageStats {
  double median_ns = 0;
  double p95_ns = 0;
  double mean_ns = 0;
  double min_ns = 0;
  double max_ns = 0;
};
// Accuracy of one (run, split, codec) over its timed ok frames with labels.
struct AccuracyRow {
  int64_t run_id = 0;
  int split = 0;
  std::string placement;  // "7" two-tier, "3|13" on a chain of two
  std::string codec;
  int64_t labelled = 0, top1_correct = 0, top5_correct = 0;
  bool top5_known = true;  // false when some frames predate top5_correct (schema < 10)
};

// Per placement: a two-tier run's placement is its split ("7"); a chain
// run's several placements may share a first cut (`split`), each its own row.
struct SplitSummary {
  int split = 0;           // the first cut (where the PARTICIPANT's head ends)
  std::string placement;   // the cut points joined by '|' ("3|13"); "7" two-tier
  std::vector<int> cuts;   // the same, parsed
  bool chained() const { return cuts.size() > 1; }
  // The cut points, for ordering and keying (a summary built by hand may
  // leave cuts empty: its split then).
  std::vector<int> key() const { return cuts.empty() ? std::vector<int>{split} : cuts; }
  int64_t frames = 0;         // ok, non-warm-up frames the statistics cover
  int64_t failed = 0;         // non-warm-up frames with ok = 0
  int64_t warmup_frames = 0;  // stored warm-up frames (not in the statistics)
  int64_t flagged = 0;        // frames with flags (e.g. negative_network), included in the statistics
  int64_t slow_frames = 0;    // frames slower than 10x the split's median total
  double throughput_fps = 0;  // frames / (last end - first start), summed over participants
  double mean_raw_bytes = 0;
  double mean_wire_bytes = 0;
  double mean_reply_bytes = 0;
  // Accuracy over the timed ok frames with labels the model's classes cover
  // (frames.correct >= 0): samples, top-1 and top-5 hits.
  int64_t labelled = 0, top1_correct = 0, top5_correct = 0;
  std::vector<AccuracyRow> codecs;  // the same per codec the split's frames used
  // Per summarised field of record_fields.def ("total_ns", "head_ns", ...).
  std::map<std::string, StageStats> stages;
  const StageStats& stage(const std::string& field) const;
};

// Per (placement, hop, device, codec) of a chain run: the medians of the
// frame_hops figures over its timed ok frames (a field none of them has is
// absent).
struct HopSummary {
  std::vector<int> cuts;
  std::string placement, device, codec;
  int64_t hop = 0, frames = 0;
  std::map<std::string, double> median;  // by frame_hops column
};

// One column or table of the schema, for `tracrctl results schema`.
struct ColumnInfo {
  std::string name, type, unit, side, meaning;
};
struct TableInfo {
  std::string name, meaning;
  std::vector<ColumnInfo> columns;
};
const std::vector<TableInfo>& schema_tables();
// The position of `column` in `table`'s rows (ResultsDb::rows, every column
// of schema_tables() in order): rows are read by name, never by a number a
// new column would shift. Fatal (internal) for a name the schema lacks: a
// programming error, caught by the tests that read the table.
size_t column_of(const std::string& table, const std::string& column);
// schema_tables() as aligned text (one block per table) or Markdown.
std::string format_schema_text();
std::string format_schema_markdown();

// Exact median (mean of the middle two for even counts) and nearest-rank p95
// of `v` (sorted in place); 0 for an empty vector.
double median_of(std::vector<int64_t>& v);
double p95_of(std::vector<int64_t>& v);

// The folder of a run's record.outputs files, relative to the database's
// directory: outputs/<database file name>/run<ID>, so that databases in one
// folder never share a file (runs recorded before 2026-12-03 used
// outputs/run<ID>: their rows keep the path they were written to).
std::filesystem::path outputs_dir(const std::string& db_path, int64_t run_id);

class ResultsDb {
 public:
  static constexpr int kSchemaVersion = 26;

  // Opens (creating the file and its directory if needed) and migrates to
  // kSchemaVersion, then marks runs still 'running' whose controller process
  // no longer exists on this host as 'interrupted' (and summarizes them).
  // Error io when the file cannot be opened or is not an SQLite database,
  // config when its schema is newer than this build knows.
  static Result<ResultsDb> open(const std::string& path);
  // Opens an existing database read-only (for commands that only read): no
  // file is created, nothing is migrated or swept, summaries are computed
  // without being stored. Error not_found when the file does not exist,
  // config when its schema is older or newer than this build's (an older one
  // names `tracrctl results migrate`).
  static Result<ResultsDb> open_readonly(const std::string& path);
  // Like open but migrates only up to `version` (0..kSchemaVersion) and skips
  // the interrupted-run sweep: for tests and tooling that need an older schema.
  static Result<ResultsDb> open_at_version(const std::string& path, int version);

  ResultsDb(ResultsDb&&) noexcept;
  ResultsDb& operator=(ResultsDb&&) noexcept;
  ~ResultsDb();

  const std::string& path() const { return path_; }
  // Highest applied migration.
  Result<int> schema_version();
  // Runs the open() sweep ended: their controller is gone. Each is marked
  // 'failed' when its controller left the cause of its failure beside the
  // database (it could not write it, e.g. on a full disk), else 'interrupted'.
  const std::vector<int64_t>& interrupted_on_open() const { return interrupted_; }

  // Inserts a run with status 'running' and this process as controller;
  // returns its id. Records a run_started event.
  Result<int64_t> begin_run(const RunInfo& info);
  // Appends frames in one transaction (all or none). Error invalid_argument
  // for an energy_source not starting with measured: / modelled:.
  Status add_frames(const std::vector<FrameRecord>& frames);
  Status add_layer_profiles(const std::vector<LayerProfileRecord>& layers);
  Status add_probe(const ProbeRow& p);
  Status add_segment_profile(const SegmentProfileRow& s);
  // A run's segment profiles, by side and split.
  Result<std::vector<SegmentProfileRow>> segment_profiles(int64_t run_id);
  // Error invalid_argument for a source not starting with measured: / modelled:.
  Status add_energy(const std::vector<EnergyRow>& rows);
  Result<std::vector<EnergyRow>> energy(int64_t run_id);
  Result<std::vector<EnergyStat>> energy_stats(int64_t run_id);
  Result<std::vector<ProbeRow>> probes(int64_t run_id);
  // Records (or replaces) the hardware identity of a device in a run.
  Status add_device(const DeviceRecord& d);
  // run_id 0 records an event outside any run. level: debug|info|warn|error.
  Status add_event(int64_t run_id, std::string_view level, std::string_view kind, std::string_view message,
                   std::string_view device = {}, std::optional<int64_t> frame = std::nullopt);
  // Sets status, ended_at and error, computes the summaries, records a
  // run_finished event. Error not_found for an unknown run.
  Status finish_run(int64_t run_id, RunStatus status, const std::string& error = {});

  // Recomputes the run's summaries from its frames and returns them ordered
  // by split. Unless the database is read-only, the stored summaries and
  // stage_stats are replaced and every frame slower than 10x its split's
  // median total is recorded as a slow_frame event (replacing earlier ones).
  Result<std::vector<SplitSummary>> compute_summaries(int64_t run_id);
  // The stored summaries of a run, ordered by split; computed first when the
  // run is still running or has none stored. Error not_found for an unknown run.
  Result<std::vector<SplitSummary>> split_table(int64_t run_id);
  // A chain run's frame_hops, summarised per placement and hop (empty for a
  // two-tier run), ordered by placement, then hop.
  Result<std::vector<HopSummary>> hop_summaries(int64_t run_id);
  // The devices file's `memory_mb` of `device` as run `run_id` stored it
  // (runs.devices_json); nullopt when the file set none for it.
  Result<std::optional<double>> device_memory_mb(int64_t run_id, const std::string& device);

  // Deletes a run and every row that belongs to it (frames, profiles,
  // summaries, events, energy, probes, plans based on it, training rows:
  // ON DELETE CASCADE, foreign keys are on), in one transaction, and the
  // run's failure note file. Error not_found for an unknown run,
  // invalid_argument for a run still running (its controller alive),
  // io when the database is read-only or the delete fails.
  // record.outputs files: those the run's outputs rows list are removed when
  // their SHA-256 is still the stored one; a file whose content is not (another
  // database wrote it: before outputs_dir's naming, files of two databases in
  // one folder could share a path) is kept and its path added to *kept.
  Status delete_run(int64_t run_id, std::vector<std::string>* kept = nullptr);
  // Newest first; limit 0 = all.
  Result<std::vector<RunRow>> list_runs(int limit = 0);
  // Error not_found naming the id.
  Result<RunRow> get_run(int64_t run_id);
  // Id of the newest run; error not_found on an empty database.
  Result<int64_t> latest_run();
  Result<std::vector<FrameRecord>> frames(int64_t run_id);
  Result<std::vector<LayerProfileRecord>> layer_profiles(int64_t run_id);
  Result<std::vector<DeviceRecord>> devices(int64_t run_id);
  // Reusing profiles across runs: the layer profiles of the newest run that
  // profiled this model (fingerprint), input shape, batch, device kind and
  // hardware identity, in layer order; empty when no run did.
  Result<std::vector<LayerProfileRecord>> find_profiles(const std::string& model_fp, const std::string& input_shape,
                                                        int64_t batch, const std::string& device_kind,
                                                        const std::string& hw_id);
  // Profile reuse (#45 friction 2): what is stored under each profile key,
  // and copies of it into another run's rows (profile_key and measured_run
  // kept: the copy says which run timed it). reuse_layer_profiles copies the
  // newest set of `layers` rows under `key` (the same device's first: a key
  // is a kind of machine, several devices may share it) and returns the run
  // that timed them; error not_found when there is none.
  Result<std::vector<KnownProfiles>> known_profiles();
  Result<int64_t> reuse_layer_profiles(const std::string& key, int64_t layers, int64_t run_id,
                                       const std::string& device, const std::string& device_role);
  // Each split's newest head or tail (`side`) under `key`; returns the runs
  // that timed them (sorted, unique); error not_found naming a split with none.
  Result<std::vector<int64_t>> reuse_segment_profiles(const std::string& key, const std::string& side,
                                                      const std::vector<int>& splits, int64_t run_id,
                                                      const std::string& device, const std::string& device_role);
  // Rows of `table` for a run (every column of schema_tables(), in order) as
  // text cells, NULL as nullopt: the exports read through this, so nothing
  // stored is left out of them.
  Result<std::vector<std::vector<std::optional<std::string>>>> rows(const std::string& table, int64_t run_id);
  Result<std::vector<EventRecord>> events(int64_t run_id);
  // Inserts (or replaces, by primary key) rows of `table` in one
  // transaction; each value is text bound as such (the column's affinity
  // converts numbers), nullopt is NULL. Error io naming the table.
  Status insert_rows(const std::string& table, const std::vector<std::string>& columns,
                     const std::vector<std::vector<std::optional<std::string>>>& rows);

  sqlite3* handle() { return db_.get(); }
  bool read_only() const { return read_only_; }
  // Opened read-only as immutable (a WAL database on read-only media).
  bool immutable() const { return immutable_; }

 private:
  struct Closer {
    void operator()(sqlite3* db) const;
  };
  ResultsDb() = default;
  static Result<ResultsDb> open_impl(const std::string& path, int version, bool sweep);
  Status store_summaries(int64_t run_id, const std::vector<SplitSummary>& out,
                         const std::vector<EventRecord>& slow);
  Status migrate(int target);
  // PRAGMA quick_check; config error naming what it found when not "ok".
  Status check_integrity();
  Status sweep_interrupted();
  // Runs still 'running' whose controller no longer exists on this host, with the reason.
  struct DeadRun {
    int64_t id = 0;
    std::string why;
    bool failed = false;  // its controller left the cause of a failure
  };
  Result<std::vector<DeadRun>> find_dead_runs();
  // A run as shown: read-only opens show dead runs as interrupted (or failed).
  RunRow shown(RunRow r) const;
  std::map<int64_t, DeadRun> dead_;
  bool immutable_ = false;  // read-only media: opened with immutable=1

  std::unique_ptr<sqlite3, Closer> db_;
  std::string path_;
  std::vector<int64_t> interrupted_;
  bool read_only_ = false;
};

// Where a controller that cannot write its database leaves the cause, for the
// next open's interruption reason: <db>.run<id>.error beside the database.
std::string failure_note_path(const std::string& db_path, int64_t run_id);

// Current time as ISO-8601 UTC with milliseconds ("2025-05-01T12:00:00.123Z").
std::string utc_now_iso();

// A RUN argument: a run id, "last"/"latest", or "last-N" (the run N before the
// newest). Error invalid_argument naming what was expected, not_found when
// there is no run N before the newest.
Result<int64_t> run_id_arg(ResultsDb& db, const std::string& s);

}  // namespace tracr::store
