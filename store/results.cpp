#include "store/results.hpp"
#include "core/process_identity.hpp"
#include "protocol/crypto.hpp"
#include "store/statement.hpp"
#include "wire/placement.hpp"

#include "protocol/stats.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/types.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <sstream>

namespace tracr::store {

using namespace tracr::core;  // the floors below, by their short names

namespace fs = std::filesystem;

std::string_view run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::running: return "running";
    case RunStatus::completed: return "completed";
    case RunStatus::failed: return "failed";
    case RunStatus::interrupted: return "interrupted";
  }
  return "running";
}

std::optional<RunStatus> parse_run_status(std::string_view s) {
  for (auto st : {RunStatus::running, RunStatus::completed, RunStatus::failed, RunStatus::interrupted})
    if (run_status_name(st) == s) return st;
  return std::nullopt;
}

std::string utc_now_iso() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t t = system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ms));
}

double median_of(std::vector<int64_t>& v) { return protocol::median_of(v); }
double p95_of(std::vector<int64_t>& v) { return protocol::p95_of(v); }

namespace {

// ---------------------------------------------------------------------------
// Migrations: append only. Never edit a released migration; add a new one.

struct Migration {
  int version;
  const char* name;
  const char* sql;
};

const Migration kMigrations[] = {
    {1, "runs and frames", R"sql(
CREATE TABLE runs (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  name             TEXT NOT NULL,
  status           TEXT NOT NULL DEFAULT 'running'
                   CHECK (status IN ('running','completed','failed','interrupted')),
  started_at       TEXT NOT NULL,
  ended_at         TEXT,
  config_yaml      TEXT NOT NULL DEFAULT '',
  tracr_version    TEXT NOT NULL DEFAULT '',
  protocol_version INTEGER NOT NULL DEFAULT 0,
  model            TEXT NOT NULL DEFAULT '',
  codec            TEXT NOT NULL DEFAULT '',
  cipher           TEXT NOT NULL DEFAULT '',
  devices_json     TEXT NOT NULL DEFAULT '{}',
  controller_host  TEXT NOT NULL DEFAULT '',
  controller_pid   INTEGER NOT NULL DEFAULT 0,
  controller_start INTEGER,
  error            TEXT
);
CREATE TABLE frames (
  id            INTEGER PRIMARY KEY,
  run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  participant   TEXT,
  split         INTEGER NOT NULL,
  sample        INTEGER NOT NULL,
  rep           INTEGER NOT NULL,
  batch         INTEGER NOT NULL DEFAULT 1,
  warmup        INTEGER NOT NULL DEFAULT 0 CHECK (warmup IN (0, 1)),
  head_ns       INTEGER NOT NULL DEFAULT 0,
  encode_ns     INTEGER NOT NULL DEFAULT 0,
  transfer_ns   INTEGER NOT NULL DEFAULT 0,
  decode_ns     INTEGER NOT NULL DEFAULT 0,
  tail_ns       INTEGER NOT NULL DEFAULT 0,
  return_ns     INTEGER NOT NULL DEFAULT 0,
  total_ns      INTEGER NOT NULL DEFAULT 0,
  raw_bytes     INTEGER NOT NULL DEFAULT 0,
  wire_bytes    INTEGER NOT NULL DEFAULT 0,
  codec         TEXT NOT NULL DEFAULT '',
  cipher        TEXT NOT NULL DEFAULT '',
  result_json   TEXT,
  ok            INTEGER NOT NULL CHECK (ok IN (0, 1)),
  error         TEXT,
  energy_j      REAL,
  energy_source TEXT CHECK (energy_source IS NULL OR energy_source LIKE 'measured:%'
                            OR energy_source LIKE 'modelled:%')
);
CREATE INDEX frames_by_run_split ON frames(run_id, split);
CREATE INDEX runs_by_status ON runs(status);
)sql"},
    {2, "layer profiles, summaries, events", R"sql(
CREATE TABLE layer_profiles (
  run_id         INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  device         TEXT NOT NULL,
  device_role    TEXT NOT NULL CHECK (device_role IN ('SERVER','PARTICIPANT')),
  layer_index    INTEGER NOT NULL,
  name           TEXT NOT NULL DEFAULT '',
  type           TEXT NOT NULL DEFAULT '',
  params         INTEGER NOT NULL DEFAULT 0,
  macs           INTEGER NOT NULL DEFAULT 0,
  out_bytes      INTEGER NOT NULL DEFAULT 0,
  median_ns      INTEGER NOT NULL DEFAULT 0,
  p95_ns         INTEGER NOT NULL DEFAULT 0,
  reps           INTEGER NOT NULL DEFAULT 0,
  peak_mem_bytes INTEGER,
  PRIMARY KEY (run_id, device, layer_index)
);
CREATE TABLE summaries (
  run_id             INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  split              INTEGER NOT NULL,
  frames             INTEGER NOT NULL,
  failed             INTEGER NOT NULL DEFAULT 0,
  total_median_ns    REAL, total_p95_ns    REAL,
  head_median_ns     REAL, head_p95_ns     REAL,
  encode_median_ns   REAL, encode_p95_ns   REAL,
  transfer_median_ns REAL, transfer_p95_ns REAL,
  decode_median_ns   REAL, decode_p95_ns   REAL,
  tail_median_ns     REAL, tail_p95_ns     REAL,
  mean_raw_bytes     REAL,
  mean_wire_bytes    REAL,
  PRIMARY KEY (run_id, split)
);
CREATE TABLE events (
  id      INTEGER PRIMARY KEY,
  run_id  INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  ts      TEXT NOT NULL,
  level   TEXT NOT NULL CHECK (level IN ('debug','info','warn','error')),
  kind    TEXT NOT NULL,
  message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_by_run ON events(run_id, ts);
)sql"},
    {3, "one measurement record: timing identity, sample identity, hardware identity, stage stats", R"sql(
ALTER TABLE frames ADD COLUMN legacy_transfer_ns INTEGER;
UPDATE frames SET legacy_transfer_ns = transfer_ns;
ALTER TABLE frames DROP COLUMN transfer_ns;
ALTER TABLE frames ADD COLUMN result TEXT;
ALTER TABLE frames ADD COLUMN correct INTEGER;
UPDATE frames SET result = json_extract(result_json, '$.top1'), correct = json_extract(result_json, '$.correct')
  WHERE result_json IS NOT NULL AND json_valid(result_json);
UPDATE frames SET result = result_json WHERE result_json IS NOT NULL AND NOT json_valid(result_json);
ALTER TABLE frames DROP COLUMN result_json;
ALTER TABLE frames ADD COLUMN frame INTEGER;
ALTER TABLE frames ADD COLUMN sample_id TEXT;
ALTER TABLE frames ADD COLUMN label TEXT;
ALTER TABLE frames ADD COLUMN policy TEXT;
ALTER TABLE frames ADD COLUMN inflight INTEGER;
ALTER TABLE frames ADD COLUMN start_ns INTEGER;
ALTER TABLE frames ADD COLUMN end_ns INTEGER;
ALTER TABLE frames ADD COLUMN network_ns INTEGER;
ALTER TABLE frames ADD COLUMN server_ns INTEGER;
ALTER TABLE frames ADD COLUMN queue_ns INTEGER;
ALTER TABLE frames ADD COLUMN post_ns INTEGER;
ALTER TABLE frames ADD COLUMN reply_bytes INTEGER;
ALTER TABLE frames ADD COLUMN flags TEXT;
ALTER TABLE layer_profiles ADD COLUMN model_fp TEXT;
ALTER TABLE layer_profiles ADD COLUMN input_shape TEXT;
ALTER TABLE layer_profiles ADD COLUMN batch INTEGER;
ALTER TABLE layer_profiles ADD COLUMN device_kind TEXT;
ALTER TABLE layer_profiles ADD COLUMN hw_id TEXT;
CREATE INDEX layer_profiles_by_key ON layer_profiles(model_fp, input_shape, batch, device_kind, hw_id);
CREATE TABLE devices (
  run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  device        TEXT NOT NULL,
  role          TEXT NOT NULL,
  hw_id         TEXT,
  cpu_model     TEXT,
  cores         INTEGER,
  memory_bytes  INTEGER,
  gpu           TEXT,
  kernel        TEXT,
  libtorch      TEXT,
  agent_version TEXT,
  PRIMARY KEY (run_id, device)
);
ALTER TABLE events ADD COLUMN device TEXT;
ALTER TABLE events ADD COLUMN frame INTEGER;
DROP TABLE summaries;
CREATE TABLE summaries (
  run_id           INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  split            INTEGER NOT NULL,
  frames           INTEGER NOT NULL,
  failed           INTEGER NOT NULL DEFAULT 0,
  warmup_frames    INTEGER NOT NULL DEFAULT 0,
  flagged          INTEGER NOT NULL DEFAULT 0,
  slow_frames      INTEGER NOT NULL DEFAULT 0,
  throughput_fps   REAL,
  mean_raw_bytes   REAL,
  mean_wire_bytes  REAL,
  mean_reply_bytes REAL,
  PRIMARY KEY (run_id, split)
);
CREATE TABLE stage_stats (
  run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  split     INTEGER NOT NULL,
  field     TEXT NOT NULL,
  median_ns REAL,
  p95_ns    REAL,
  mean_ns   REAL,
  min_ns    REAL,
  max_ns    REAL,
  PRIMARY KEY (run_id, split, field)
);
)sql"},
    {4, "link probes and the per-frame link estimate", R"sql(
ALTER TABLE frames ADD COLUMN link_est_mbps REAL;
CREATE TABLE probes (
  id            INTEGER PRIMARY KEY,
  run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  participant   TEXT,
  start_ns      INTEGER,
  trigger       TEXT,
  cipher        TEXT,
  rtt_n         INTEGER,
  rtt_min_ns    INTEGER,
  rtt_median_ns INTEGER,
  rtt_p95_ns    INTEGER,
  chunk_bytes   INTEGER,
  window        INTEGER,
  duration_ms   INTEGER,
  up_bytes      INTEGER,
  up_ns         INTEGER,
  up_mbps       REAL,
  down_bytes    INTEGER,
  down_ns       INTEGER,
  down_mbps     REAL
);
CREATE INDEX probes_by_run ON probes(run_id);
)sql"},
    {5, "emulated CPU limits in the hardware identity", R"sql(
ALTER TABLE devices ADD COLUMN cpu_quota REAL;
ALTER TABLE devices ADD COLUMN cpu_cores_limit INTEGER;
)sql"},
    {6, "link profiles: which link each run, frame and probe ran under and how it was shaped", R"sql(
ALTER TABLE runs ADD COLUMN link TEXT;
ALTER TABLE runs ADD COLUMN shaping TEXT;
ALTER TABLE frames ADD COLUMN link TEXT;
ALTER TABLE frames ADD COLUMN shaping TEXT;
ALTER TABLE probes ADD COLUMN link TEXT;
ALTER TABLE probes ADD COLUMN shaping TEXT;
)sql"},
    {7,
     "energy rows (meters, power and radio models) and their per-split statistics; frames.energy_j/energy_source, "
     "reserved and never written, dropped",
     R"sql(
CREATE TABLE energy (
  id          INTEGER PRIMARY KEY,
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  device      TEXT,
  participant TEXT,
  side        TEXT,
  stage       TEXT,
  frame       INTEGER,
  split       INTEGER,
  layer_index INTEGER,
  warmup      INTEGER,
  source      TEXT,
  joules      REAL,
  net_joules  REAL,
  idle_w      REAL,
  window_ns   INTEGER,
  reps        INTEGER,
  cpu_ns      INTEGER,
  flags       TEXT
);
CREATE INDEX energy_by_run ON energy(run_id);
CREATE TABLE energy_stats (
  run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  split        INTEGER NOT NULL,
  device       TEXT NOT NULL,
  stage        TEXT NOT NULL,
  source       TEXT NOT NULL,
  n            INTEGER,
  median_j     REAL,
  p95_j        REAL,
  median_net_j REAL,
  p95_net_j    REAL,
  PRIMARY KEY (run_id, split, device, stage, source)
);
ALTER TABLE frames DROP COLUMN energy_j;
ALTER TABLE frames DROP COLUMN energy_source;
)sql"},
    {8,
     "plans: predicted latency, energy and throughput per split, and their validation against a run; mean layer time "
     "in profiles",
     R"sql(
ALTER TABLE layer_profiles ADD COLUMN mean_ns INTEGER;
CREATE TABLE plans (
  id             INTEGER PRIMARY KEY,
  created_at     TEXT NOT NULL,
  basis_run      INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  model          TEXT,
  input_shape    TEXT,
  objective      TEXT,
  link           TEXT,
  link_source    TEXT,
  up_mbps        REAL,
  down_mbps      REAL,
  rtt_ms         REAL,
  overhead       TEXT,
  energy_source  TEXT,
  chosen         INTEGER,
  chosen_codec   TEXT,
  mape_pct       REAL,
  measured_best  INTEGER,
  miss_pct       REAL
);
CREATE TABLE plan_rows (
  plan_id     INTEGER NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
  split       INTEGER NOT NULL,
  codec       TEXT NOT NULL,
  head_ms     REAL,
  up_ms       REAL,
  rtt_ms      REAL,
  tail_ms     REAL,
  down_ms     REAL,
  other_ms    REAL,
  latency_ms  REAL,
  fps         REAL,
  wire_bytes  REAL,
  reply_bytes REAL,
  bytes_from  TEXT,
  energy_j    REAL,
  feasible    INTEGER,
  measured_ms REAL,
  error_pct   REAL,
  PRIMARY KEY (plan_id, split, codec)
);
)sql"},
    {9, "split training: the run's layout, per-step and per-epoch measurements, checkpoints", R"sql(
CREATE TABLE train_runs (
  run_id       INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  tag          TEXT NOT NULL,
  resumed_from INTEGER,
  resume_step  INTEGER,
  cuts         TEXT,
  optimizer    TEXT,
  lr           REAL,
  batch_size   INTEGER,
  epochs       INTEGER,
  owners       INTEGER,
  export_path  TEXT
);
CREATE TABLE train_segments (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  segment     INTEGER NOT NULL,
  first_layer INTEGER,
  end_layer   INTEGER,
  device      TEXT,
  params      INTEGER,
  PRIMARY KEY (run_id, segment)
);
CREATE TABLE train_steps (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  owner      INTEGER NOT NULL,
  step       INTEGER NOT NULL,
  epoch      INTEGER,
  batch      INTEGER,
  loss       REAL,
  correct    INTEGER,
  step_ns    INTEGER,
  fwd_ns     INTEGER,
  bwd_ns     INTEGER,
  remote_ns  INTEGER,
  srv_ns     INTEGER,
  up_bytes   INTEGER,
  down_bytes INTEGER,
  up_raw     INTEGER,
  down_raw   INTEGER,
  PRIMARY KEY (run_id, owner, step)
);
CREATE TABLE train_epochs (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  owner       INTEGER NOT NULL,
  epoch       INTEGER NOT NULL,
  step        INTEGER,
  train_loss  REAL,
  train_acc   REAL,
  test_loss   REAL,
  test_acc    REAL,
  test_top5   REAL,
  test_n      INTEGER,
  test_source TEXT,
  epoch_ns    INTEGER,
  eval_ns     INTEGER,
  up_bytes    INTEGER,
  down_bytes  INTEGER,
  PRIMARY KEY (run_id, owner, epoch)
);
CREATE TABLE train_checkpoints (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  owner  INTEGER NOT NULL,
  step   INTEGER NOT NULL,
  epoch  INTEGER,
  dir    TEXT,
  at     TEXT,
  PRIMARY KEY (run_id, owner, step)
);
)sql"},
    {10, "top-1/top-5 accuracy, frame_topk, stored outputs", R"sql(
ALTER TABLE frames ADD COLUMN top5_correct INTEGER;
CREATE TABLE frame_topk (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  participant TEXT NOT NULL,
  frame       INTEGER NOT NULL,
  pos         INTEGER NOT NULL,
  sample      INTEGER NOT NULL,
  rank        INTEGER NOT NULL CHECK (rank >= 1),
  class_index INTEGER NOT NULL,
  class_name  TEXT NOT NULL DEFAULT '',
  prob        REAL NOT NULL,
  PRIMARY KEY (run_id, participant, frame, pos, rank)
);
ALTER TABLE summaries ADD COLUMN labelled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE summaries ADD COLUMN top1_correct INTEGER NOT NULL DEFAULT 0;
ALTER TABLE summaries ADD COLUMN top5_correct INTEGER NOT NULL DEFAULT 0;
ALTER TABLE summaries ADD COLUMN top1_acc REAL;
ALTER TABLE summaries ADD COLUMN top5_acc REAL;
CREATE TABLE accuracy (
  run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  split        INTEGER NOT NULL,
  codec        TEXT NOT NULL,
  labelled     INTEGER NOT NULL,
  top1_correct INTEGER NOT NULL,
  top5_correct INTEGER NOT NULL,
  top1_acc     REAL,
  top5_acc     REAL,
  PRIMARY KEY (run_id, split, codec)
);
CREATE TABLE outputs (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  participant TEXT NOT NULL,
  split       INTEGER NOT NULL,
  codec       TEXT NOT NULL,
  path        TEXT NOT NULL,
  dtype       TEXT NOT NULL,
  shape       TEXT NOT NULL,
  frames      INTEGER NOT NULL,
  first_frame INTEGER NOT NULL,
  last_frame  INTEGER NOT NULL,
  sha256      TEXT NOT NULL,
  source      TEXT NOT NULL,
  PRIMARY KEY (run_id, participant, split, codec)
);
)sql"},
    {11, "plans: the run a plan was validated against (held-out validation)", R"sql(
ALTER TABLE plans ADD COLUMN validation_run INTEGER;
)sql"},
    {12, "segment profiles: a graph model's heads and tails timed whole, and where a plan's compute times came from",
     R"sql(
CREATE TABLE segment_profiles (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  device      TEXT NOT NULL,
  device_role TEXT NOT NULL CHECK (device_role IN ('SERVER','PARTICIPANT')),
  split       INTEGER NOT NULL,
  side        TEXT NOT NULL CHECK (side IN ('head','tail')),
  execution   TEXT,
  model_fp    TEXT,
  input_shape TEXT,
  batch       INTEGER,
  device_kind TEXT,
  reps        INTEGER NOT NULL,
  median_ns   INTEGER NOT NULL,
  p95_ns      INTEGER NOT NULL,
  mean_ns     INTEGER NOT NULL,
  hw_id       TEXT,
  PRIMARY KEY (run_id, device, side, split)
);
ALTER TABLE plan_rows ADD COLUMN compute_from TEXT;
)sql"},
    {13, "plans: participants sharing the SERVER and its queueing model; plan_rows: the predicted wait for it", R"sql(
ALTER TABLE plans ADD COLUMN participants INTEGER;
ALTER TABLE plans ADD COLUMN server_model TEXT;
ALTER TABLE plan_rows ADD COLUMN queue_ms REAL;
)sql"},
    {14, "plans: the run the PARTICIPANT's profiles came from (plan --participant-from)", R"sql(
ALTER TABLE plans ADD COLUMN participant_run INTEGER;
)sql"},
    {15, "plan_assignments: a joint plan's participants per split (plan --joint)", R"sql(
CREATE TABLE plan_assignments (
  plan_id      INTEGER NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
  split        INTEGER NOT NULL,
  codec        TEXT NOT NULL,
  participants INTEGER NOT NULL,
  latency_ms   REAL,
  queue_ms     REAL,
  fps          REAL,
  measured_ms  REAL,
  error_pct    REAL,
  model        TEXT,
  PRIMARY KEY (plan_id, split, codec)
);
)sql"},
    {16, "plans: the profiles against the validation run's frames (compute only)", R"sql(
ALTER TABLE plans ADD COLUMN head_vs_frames_pct REAL;
ALTER TABLE plans ADD COLUMN tail_vs_frames_pct REAL;
)sql"},
    {17, "probes: the bulk message size each way and how it was chosen (probe.chunk_bytes: auto)", R"sql(
ALTER TABLE probes ADD COLUMN down_chunk_bytes INTEGER;
ALTER TABLE probes ADD COLUMN chunk_sizing TEXT;
ALTER TABLE probes ADD COLUMN sizing_up_mbps REAL;
ALTER TABLE probes ADD COLUMN sizing_down_mbps REAL;
)sql"},
    {18, "frames: the placement of a chain's frame (cut points joined by '|')", R"sql(
ALTER TABLE frames ADD COLUMN placement TEXT;
)sql"},
    {19,
     "summaries, stage_stats, accuracy and energy_stats per placement (a chain run has several placements sharing a "
     "first cut); earlier rows get their split as placement",
     R"sql(
CREATE TABLE summaries_p (
  run_id           INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  split            INTEGER NOT NULL,
  frames           INTEGER NOT NULL,
  failed           INTEGER NOT NULL DEFAULT 0,
  warmup_frames    INTEGER NOT NULL DEFAULT 0,
  flagged          INTEGER NOT NULL DEFAULT 0,
  slow_frames      INTEGER NOT NULL DEFAULT 0,
  throughput_fps   REAL,
  mean_raw_bytes   REAL,
  mean_wire_bytes  REAL,
  mean_reply_bytes REAL,
  labelled         INTEGER NOT NULL DEFAULT 0,
  top1_correct     INTEGER NOT NULL DEFAULT 0,
  top5_correct     INTEGER NOT NULL DEFAULT 0,
  top1_acc         REAL,
  top5_acc         REAL,
  placement        TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, split, placement)
);
INSERT INTO summaries_p SELECT run_id, split, frames, failed, warmup_frames, flagged, slow_frames, throughput_fps,
  mean_raw_bytes, mean_wire_bytes, mean_reply_bytes, labelled, top1_correct, top5_correct, top1_acc, top5_acc,
  CAST(split AS TEXT) FROM summaries;
DROP TABLE summaries;
ALTER TABLE summaries_p RENAME TO summaries;
CREATE TABLE stage_stats_p (
  run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  split     INTEGER NOT NULL,
  field     TEXT NOT NULL,
  median_ns REAL,
  p95_ns    REAL,
  mean_ns   REAL,
  min_ns    REAL,
  max_ns    REAL,
  placement TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, split, placement, field)
);
INSERT INTO stage_stats_p SELECT run_id, split, field, median_ns, p95_ns, mean_ns, min_ns, max_ns, CAST(split AS TEXT)
  FROM stage_stats;
DROP TABLE stage_stats;
ALTER TABLE stage_stats_p RENAME TO stage_stats;
CREATE TABLE accuracy_p (
  run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  split        INTEGER NOT NULL,
  codec        TEXT NOT NULL,
  labelled     INTEGER NOT NULL,
  top1_correct INTEGER NOT NULL,
  top5_correct INTEGER NOT NULL,
  top1_acc     REAL,
  top5_acc     REAL,
  placement    TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, split, placement, codec)
);
INSERT INTO accuracy_p SELECT run_id, split, codec, labelled, top1_correct, top5_correct, top1_acc, top5_acc,
  CAST(split AS TEXT) FROM accuracy;
DROP TABLE accuracy;
ALTER TABLE accuracy_p RENAME TO accuracy;
CREATE TABLE energy_stats_p (
  run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  split        INTEGER NOT NULL,
  device       TEXT NOT NULL,
  stage        TEXT NOT NULL,
  source       TEXT NOT NULL,
  n            INTEGER,
  median_j     REAL,
  p95_j        REAL,
  median_net_j REAL,
  p95_net_j    REAL,
  placement    TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, split, placement, device, stage, source)
);
INSERT INTO energy_stats_p SELECT run_id, split, device, stage, source, n, median_j, p95_j, median_net_j, p95_net_j,
  CAST(split AS TEXT) FROM energy_stats;
DROP TABLE energy_stats;
ALTER TABLE energy_stats_p RENAME TO energy_stats;
)sql"},
    {20, "frame_hops: a chain's frame per device after the participant, every stage timed where it ran", R"sql(
CREATE TABLE frame_hops (
  run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  participant     TEXT NOT NULL,
  frame           INTEGER NOT NULL,
  device          TEXT,
  codec           TEXT,
  hop             INTEGER NOT NULL,
  first_layer     INTEGER,
  end_layer       INTEGER,
  in_raw_bytes    INTEGER,
  in_wire_bytes   INTEGER,
  reply_bytes     INTEGER,
  send_encode_ns  INTEGER,
  network_ns      INTEGER,
  reply_decode_ns INTEGER,
  decode_ns       INTEGER,
  compute_ns      INTEGER,
  forward_ns      INTEGER,
  server_ns       INTEGER,
  other_ns        INTEGER,
  PRIMARY KEY (run_id, participant, frame, hop)
);
)sql"},
    {21, "frames: early exits (the exit taken, every exit's answer and confidences, their times and cost)", R"sql(
ALTER TABLE frames ADD COLUMN exit_index INTEGER;
ALTER TABLE frames ADD COLUMN exit_results TEXT;
ALTER TABLE frames ADD COLUMN exit_times TEXT;
ALTER TABLE frames ADD COLUMN exit_ns INTEGER;
ALTER TABLE frames ADD COLUMN exit_extra_ns INTEGER;
)sql"},
    {22, "frames: SERVER batching (the batch a frame's tail ran in, its wait)", R"sql(
ALTER TABLE frames ADD COLUMN server_batch INTEGER;
ALTER TABLE frames ADD COLUMN batch_wait_ns INTEGER;
)sql"},
    {23, "outputs: one file per output tensor of the model, by its name, with its own shape", R"sql(
CREATE TABLE outputs_p (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  participant TEXT NOT NULL,
  split       INTEGER NOT NULL,
  codec       TEXT NOT NULL,
  path        TEXT NOT NULL,
  dtype       TEXT NOT NULL,
  shape       TEXT NOT NULL,
  frames      INTEGER NOT NULL,
  first_frame INTEGER NOT NULL,
  last_frame  INTEGER NOT NULL,
  sha256      TEXT NOT NULL,
  source      TEXT NOT NULL,
  output      TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, participant, split, codec, output)
);
INSERT INTO outputs_p SELECT run_id, participant, split, codec, path, dtype, shape, frames, first_frame, last_frame,
  sha256, source, '' FROM outputs;
DROP TABLE outputs;
ALTER TABLE outputs_p RENAME TO outputs;
)sql"},
    {24, "model_layers: the model's layers by name, whatever is recorded", R"sql(
CREATE TABLE model_layers (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  layer_index INTEGER NOT NULL,
  name        TEXT NOT NULL,
  PRIMARY KEY (run_id, layer_index)
);
)sql"},
    {25, "profiles reused across runs: the key that times them, the run that measured them", R"sql(
ALTER TABLE layer_profiles ADD COLUMN profile_key TEXT;
ALTER TABLE layer_profiles ADD COLUMN measured_run INTEGER;
ALTER TABLE segment_profiles ADD COLUMN profile_key TEXT;
ALTER TABLE segment_profiles ADD COLUMN measured_run INTEGER;
CREATE INDEX layer_profiles_by_profile_key ON layer_profiles(profile_key);
CREATE INDEX segment_profiles_by_profile_key ON segment_profiles(profile_key);
)sql"},
    {26, "plans of chains: the chain, its chosen and measured best placements; plan_placements, plan_segments", R"sql(
ALTER TABLE plans ADD COLUMN chain TEXT;
ALTER TABLE plans ADD COLUMN placements INTEGER;
ALTER TABLE plans ADD COLUMN chosen_placement TEXT;
ALTER TABLE plans ADD COLUMN measured_best_placement TEXT;
ALTER TABLE plans ADD COLUMN validation_runs TEXT;
ALTER TABLE plans ADD COLUMN memory_limits TEXT;
CREATE TABLE plan_placements (
  plan_id     INTEGER NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
  placement   TEXT NOT NULL,
  head_ms     REAL,
  post_ms     REAL,
  latency_ms  REAL,
  fps         REAL,
  bytes_from  TEXT,
  fits        INTEGER,
  measured_ms REAL,
  error_pct   REAL,
  energy_j    REAL,
  PRIMARY KEY (plan_id, placement)
);
CREATE TABLE plan_segments (
  plan_id     INTEGER NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
  placement   TEXT NOT NULL,
  position    INTEGER NOT NULL,
  device      TEXT NOT NULL,
  first_layer INTEGER NOT NULL,
  end_layer   INTEGER NOT NULL,
  link_ms     REAL,
  compute_ms  REAL,
  own_ms      REAL,
  wire_bytes  REAL,
  memory_mb   REAL,
  PRIMARY KEY (plan_id, placement, position)
);
)sql"},
};

static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == ResultsDb::kSchemaVersion,
              "kSchemaVersion must equal the number of migrations");

using Stmt = Statement;

// A profile row's reuse columns (migration 25): "" and 0 are NULL.
void bind_reuse(Stmt& q, int i, const std::string& key, int64_t measured_run) {
  q.bind_text_or_null(i, key);
  if (measured_run > 0) q.bind(i + 1, measured_run);
  else q.bind_null(i + 1);
}

// Field values to and from statement columns (record_fields.def kinds).
// Text "" is stored as NULL and read back as "".
void bind_value(Stmt& q, int i, int64_t v) { q.bind(i, v); }
void bind_value(Stmt& q, int i, const std::optional<int64_t>& v) {
  if (v) q.bind(i, *v);
  else q.bind_null(i);
}
void bind_value(Stmt& q, int i, const std::string& v) { q.bind_text_or_null(i, v); }
void bind_value(Stmt& q, int i, const std::optional<double>& v) {
  if (v) q.bind(i, *v);
  else q.bind_null(i);
}
void read_value(const Stmt& q, int c, int64_t& v) { v = q.i64(c); }
void read_value(const Stmt& q, int c, std::optional<int64_t>& v) {
  if (q.is_null(c)) v.reset();
  else v = q.i64(c);
}
void read_value(const Stmt& q, int c, std::string& v) { v = q.text(c); }
void read_value(const Stmt& q, int c, std::optional<double>& v) {
  if (q.is_null(c)) v.reset();
  else v = q.dbl(c);
}

std::string field_list(const std::vector<wire::FieldInfo>& fields) {
  std::string s;
  for (const auto& f : fields) s += std::string(", ") + f.name;
  return s;
}
std::string placeholders(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += i ? ", ?" : "?";
  return s;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}


}  // namespace

void ResultsDb::Closer::operator()(sqlite3* db) const { sqlite3_close_v2(db); }

ResultsDb::ResultsDb(ResultsDb&&) noexcept = default;
ResultsDb& ResultsDb::operator=(ResultsDb&&) noexcept = default;
ResultsDb::~ResultsDb() = default;

Result<ResultsDb> ResultsDb::open(const std::string& path) { return open_impl(path, kSchemaVersion, true); }

Result<ResultsDb> ResultsDb::open_readonly(const std::string& path) {
  std::error_code ec;
  if (path.empty()) return make_error(Errc::invalid_argument, "results database path is empty");
  if (!fs::exists(path, ec))
    return make_error(Errc::not_found, fmt::format("{}: no such results database (check --db or $TRACR_OUTPUT)", path));
  if (fs::is_directory(path, ec))
    return make_error(Errc::io, fmt::format("{}: is a directory; expected a database file", path));
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  ResultsDb db;
  db.db_.reset(raw);
  db.path_ = path;
  db.read_only_ = true;
  if (rc != SQLITE_OK) return db_error(raw, path, "open read-only");
  sqlite3_busy_timeout(raw, 5000);
  {
    // A WAL database on read-only media (a CD, a read-only mount, a
    // directory this user cannot write) cannot create its -shm file and
    // fails "unable to open database file" (#24). Nothing can be writing
    // to it there: read it as immutable.
    bool cantopen = false;
    {
      Stmt probe(raw, "SELECT COUNT(*) FROM sqlite_master");
      cantopen = !probe.prepared() && sqlite3_errcode(raw) == SQLITE_CANTOPEN;
    }
    if (cantopen) {
      std::string uri = "file:";
      for (const unsigned char c : fs::absolute(path, ec).string()) {
        if (c == '?' || c == '#' || c == '%' || c < 0x20 || c >= 0x7f) uri += fmt::format("%{:02X}", c);
        else uri += static_cast<char>(c);
      }
      uri += "?immutable=1";
      db.db_.reset();
      raw = nullptr;
      const int irc = sqlite3_open_v2(uri.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
      db.db_.reset(raw);
      if (irc != SQLITE_OK) return db_error(raw, path, "open read-only (immutable)");
      db.immutable_ = true;
    }
  }
  int version = 0;
  {
    Stmt q(raw, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
    if (!q.prepared()) {
      Stmt probe(raw, "SELECT COUNT(*) FROM sqlite_master");
      if (!probe.prepared() || probe.step() != SQLITE_ROW) return db_error(raw, path, "read schema");
      return make_error(Errc::config, fmt::format("{}: not a tracr results database (no schema_migrations table)", path));
    }
    if (q.step() != SQLITE_ROW) return db_error(raw, path, "read schema version");
    version = static_cast<int>(q.i64(0));
  }
  if (version > kSchemaVersion)
    return make_error(Errc::config, fmt::format("{}: database schema version {} is newer than this build supports ({})",
                                                path, version, kSchemaVersion));
  if (version < kSchemaVersion)
    return make_error(Errc::config,
                      fmt::format("{}: written by an older tracr (schema {}, this build reads {}); upgrade it once with "
                                  "`tracrctl results migrate --db {}`",
                                  path, version, kSchemaVersion, path));
  // Runs whose controller is gone are shown as interrupted (the next
  // read-write open records it); nothing is written here.
  auto dead = db.find_dead_runs();
  if (!dead) return dead.error();
  for (auto& d : *dead) db.dead_[d.id] = d;
  return db;
}

std::string failure_note_path(const std::string& db_path, int64_t run_id) {
  return fmt::format("{}.run{}.error", db_path, run_id);
}

Result<ResultsDb> ResultsDb::open_at_version(const std::string& path, int version) {
  if (version < 0 || version > kSchemaVersion)
    return make_error(Errc::invalid_argument,
                      fmt::format("schema version {} out of range; expected 0..{}", version, kSchemaVersion));
  return open_impl(path, version, false);
}

Result<ResultsDb> ResultsDb::open_impl(const std::string& path, int version, bool sweep) {
  if (path.empty()) return make_error(Errc::invalid_argument, "results database path is empty");
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::exists(parent, ec)) {
    fs::create_directories(parent, ec);
    if (ec)
      return make_error(Errc::io,
                        fmt::format("{}: cannot create directory {}: {}", path, parent.string(), ec.message()));
  }
  if (fs::is_directory(path, ec))
    return make_error(Errc::io, fmt::format("{}: is a directory; expected a database file", path));
  // Read-only media or permissions: said as such, not as SQLite's "unable to
  // open database file" (#46). WAL also writes PATH-wal beside the file.
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const bool present = fs::exists(path, ec);
  if ((present && ::access(path.c_str(), W_OK) != 0) || ::access(dir.c_str(), W_OK) != 0) {
    const int err = errno;
    return make_error(Errc::io,
                      fmt::format("{}: the database is read-only here ({}: {}); tracrctl results list/show/"
                                  "export still read it; write runs to another file (output:)",
                                  path, present && ::access(path.c_str(), W_OK) != 0 ? path : dir, std::strerror(err)));
  }
  // A file this open creates is removed again when the open fails (a full
  // disk left a 0-byte database behind, #46): created here with O_EXCL, so
  // that a file another controller created at the same moment is never
  // this open's, and removed only while still empty (nobody wrote to it).
  bool mine = false;
  if (!present) {
    const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    mine = fd >= 0;
    if (fd >= 0) ::close(fd);
  }
  struct RemoveCreated {
    std::string path;
    bool armed;
    ~RemoveCreated() {
      std::error_code e;
      if (!armed || fs::file_size(path, e) != 0 || e) return;
      for (const char* suffix : {"-wal", "-shm", "-journal", ""}) fs::remove(path + suffix, e);
    }
  } created{path, mine};
  auto opened = [&]() -> Result<ResultsDb> {
    const bool existing = fs::is_regular_file(path, ec) && fs::file_size(path, ec) > 0;
    sqlite3* raw = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    ResultsDb db;
    db.db_.reset(raw);
    db.path_ = path;
    if (rc != SQLITE_OK) return db_error(raw, path, "open");
    sqlite3_extended_result_codes(raw, 0);
    // busy_timeout first so that the WAL switch waits for other writers.
    sqlite3_busy_timeout(raw, 5000);
    // Nothing is added to a damaged database (#24: a run appended to one with
    // corrupted pages and exited 0, and then `results list` failed). Checked
    // first: switching to WAL reads the schema, and fails on damage with a
    // bare "malformed".
    if (existing) TRACR_TRY(db.check_integrity());
    {
      Stmt q(raw, "PRAGMA journal_mode=WAL");
      if (!q.prepared()) return db_error(raw, path, "enable WAL");
      if (q.step() != SQLITE_ROW) return db_error(raw, path, "enable WAL");
    }
    TRACR_TRY(exec(raw, path, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;", "pragmas"));
    TRACR_TRY(db.migrate(version));
    if (sweep) TRACR_TRY(db.sweep_interrupted());
    return db;
  }();
  created.armed = mine && !opened.ok();
  return opened;
}

Status ResultsDb::check_integrity() {
  sqlite3* raw = db_.get();
  Stmt q(raw, "PRAGMA quick_check(5)");
  std::string problems;
  // Damage bad enough that the check itself cannot run (a garbled schema
  // page: SQLITE_CORRUPT) is said the same way; other failures (not a
  // database at all, locked, I/O) keep their own text.
  auto damaged = [&] { return sqlite3_errcode(raw) == SQLITE_CORRUPT; };
  if (!q.prepared()) {
    if (!damaged()) return db_error(raw, path_, "check integrity");
    problems = sqlite3_errmsg(raw);
  } else {
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      const std::string line = q.text(0);
      if (line == "ok") return {};
      problems += (problems.empty() ? "" : "; ") + line;
    }
    if (rc != SQLITE_DONE) {
      if (!damaged()) return db_error(raw, path_, "check integrity");
      problems += (problems.empty() ? "" : "; ") + std::string(sqlite3_errmsg(raw));
    }
  }
  return make_error(Errc::config,
                    fmt::format("{}: the database is damaged (PRAGMA quick_check: {}); nothing was written to it. "
                                "Write to another file (output:), and recover what it holds with "
                                "`sqlite3 {} .recover | sqlite3 recovered.db`",
                                path_, problems, path_));
}

Result<int> ResultsDb::schema_version() {
  Stmt q(db_.get(), "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
  if (!q.prepared() || q.step() != SQLITE_ROW) return db_error(db_.get(), path_, "read schema version");
  return static_cast<int>(q.i64(0));
}

Status ResultsDb::migrate(int target) {
  sqlite3* db = db_.get();
  TRACR_TRY(exec(db, path_,
                 "CREATE TABLE IF NOT EXISTS schema_migrations ("
                 " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)",
                 "create schema_migrations"));
  auto current = schema_version();
  if (!current) return current.error();
  if (*current > kSchemaVersion)
    return make_error(Errc::config,
                      fmt::format("{}: database schema version {} is newer than this build supports ({}); "
                                  "expected a database written by this or an older tracr",
                                  path_, *current, kSchemaVersion));
  for (const auto& m : kMigrations) {
    if (m.version <= *current || m.version > target) continue;
    Transaction tx(db, path_);
    TRACR_TRY(tx.begin());
    // Re-check inside the write lock: another process may have migrated.
    auto again = schema_version();
    if (!again) return again.error();
    if (*again >= m.version) continue;
    TRACR_TRY(exec(db, path_, m.sql, (std::string("migration ") + m.name).c_str()));
    Stmt ins(db, "INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)");
    ins.bind(1, m.version);
    ins.bind(2, std::string_view(m.name));
    ins.bind(3, std::string_view(utc_now_iso()));
    if (ins.step() != SQLITE_DONE) return db_error(db, path_, "record migration");
    TRACR_TRY(exec(db, path_, fmt::format("PRAGMA user_version={}", m.version).c_str(), "user_version"));
    TRACR_TRY(tx.commit());
  }
  return {};
}

Result<std::vector<ResultsDb::DeadRun>> ResultsDb::find_dead_runs() {
  sqlite3* db = db_.get();
  const std::string host = host_name();
  std::vector<DeadRun> dead;
  Stmt q(db,
         "SELECT id, controller_host, controller_pid, COALESCE(controller_start, 0) FROM runs "
         "WHERE status = 'running'");
  if (!q.prepared()) return db_error(db, path_, "find running runs");
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    if (q.text(1) != host) continue;  // another host's controller: cannot tell
    const int64_t pid = q.i64(2);
    if (!process_alive(pid, q.i64(3))) {
      std::string why = fmt::format("controller process {} on {} ended without finishing the run", pid, host);
      // A controller that could not write its database left the cause beside it.
      std::ifstream note(failure_note_path(path_, q.i64(0)));
      std::string cause((std::istreambuf_iterator<char>(note)), std::istreambuf_iterator<char>());
      while (!cause.empty() && (cause.back() == '\n' || cause.back() == ' ')) cause.pop_back();
      // It failed (and exited 1 saying so) rather than being interrupted.
      if (!cause.empty()) why += ": " + cause;
      dead.push_back({q.i64(0), why, !cause.empty()});
    }
  }
  if (rc != SQLITE_DONE) return db_error(db, path_, "find running runs");
  return dead;
}

Status ResultsDb::sweep_interrupted() {
  sqlite3* db = db_.get();
  auto found = find_dead_runs();
  if (!found) return found.error();
  const auto& dead = *found;
  for (const auto& [id, why, failed] : dead) {
    {
      Transaction tx(db, path_);
      TRACR_TRY(tx.begin());
      Stmt u(db,
             "UPDATE runs SET status = ?, ended_at = ?, error = ? "
             "WHERE id = ? AND status = 'running'");
      u.bind(1, std::string_view(failed ? "failed" : "interrupted"));
      u.bind(2, std::string_view(utc_now_iso()));
      u.bind(3, std::string_view(why));
      u.bind(4, id);
      if (u.step() != SQLITE_DONE) return db_error(db, path_, "mark run interrupted");
      if (sqlite3_changes(db) == 0) continue;  // someone else got there first
      Stmt e(db, "INSERT INTO events(run_id, ts, level, kind, message) VALUES (?, ?, 'error', ?, ?)");
      e.bind(1, id);
      e.bind(2, std::string_view(utc_now_iso()));
      e.bind(3, std::string_view(failed ? "run_failed" : "run_interrupted"));
      e.bind(4, std::string_view(why));
      if (e.step() != SQLITE_DONE) return db_error(db, path_, "record run_interrupted");
      TRACR_TRY(tx.commit());
    }
    interrupted_.push_back(id);
    std::error_code ec;
    fs::remove(failure_note_path(path_, id), ec);
    auto s = compute_summaries(id);
    if (!s) return s.error();
  }
  return {};
}

Result<int64_t> ResultsDb::begin_run(const RunInfo& info) {
  sqlite3* db = db_.get();
  Transaction tx(db, path_);
  TRACR_TRY(tx.begin());
  Stmt q(db,
         "INSERT INTO runs(name, status, started_at, config_yaml, tracr_version, protocol_version, model, "
         "codec, "
         "cipher, devices_json, controller_host, controller_pid, controller_start, link, shaping) "
         "VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!q.prepared()) return db_error(db, path_, "insert run");
  const std::string now = utc_now_iso();
  q.bind(1, std::string_view(info.name));
  q.bind(2, std::string_view(now));
  q.bind(3, std::string_view(info.config_yaml));
  q.bind(4, std::string_view(info.tracr_version));
  q.bind(5, info.protocol_version);
  q.bind(6, std::string_view(info.model));
  q.bind(7, std::string_view(info.codec));
  q.bind(8, std::string_view(info.cipher));
  q.bind(9, std::string_view(info.devices_json.empty() ? "{}" : info.devices_json));
  q.bind(10, std::string_view(host_name()));
  q.bind(11, static_cast<int64_t>(getpid()));
  q.bind(12, self_start_ticks());
  q.bind_text_or_null(13, info.link);
  q.bind_text_or_null(14, info.shaping);
  if (q.step() != SQLITE_DONE) return db_error(db, path_, "insert run");
  const int64_t id = sqlite3_last_insert_rowid(db);
  Stmt e(db, "INSERT INTO events(run_id, ts, level, kind, message) VALUES (?, ?, 'info', 'run_started', ?)");
  e.bind(1, id);
  e.bind(2, std::string_view(now));
  e.bind(3, std::string_view(fmt::format("run '{}' started: model {}, codec {}, cipher {}", info.name,
                                         info.model, info.codec, info.cipher)));
  if (e.step() != SQLITE_DONE) return db_error(db, path_, "record run_started");
  if (!info.layer_names.empty()) {
    Stmt l(db, "INSERT INTO model_layers(run_id, layer_index, name) VALUES (?, ?, ?)");
    if (!l.prepared()) return db_error(db, path_, "insert model_layers");
    for (size_t i = 0; i < info.layer_names.size(); ++i) {
      l.reset();
      l.bind(1, id);
      l.bind(2, static_cast<int64_t>(i));
      l.bind(3, std::string_view(info.layer_names[i]));
      if (l.step() != SQLITE_DONE) return db_error(db, path_, "insert model_layers");
    }
  }
  TRACR_TRY(tx.commit());
  return id;
}

Status ResultsDb::add_frames(const std::vector<FrameRecord>& frames) {
  if (frames.empty()) return {};
  sqlite3* db = db_.get();
  Transaction tx(db, path_);
  TRACR_TRY(tx.begin());
  const auto& fields = wire::frame_fields();
  static const std::string sql = "INSERT INTO frames(run_id, participant, link, shaping" + field_list(fields) +
                                 ", legacy_transfer_ns) VALUES (" + placeholders(fields.size() + 5) + ")";
  Stmt q(db, sql.c_str());
  if (!q.prepared()) return db_error(db, path_, "insert frames");
  Stmt tk(db,
          "INSERT OR REPLACE INTO frame_topk(run_id, participant, frame, pos, sample, rank, class_index, class_name, "
          "prob) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!tk.prepared()) return db_error(db, path_, "insert frame_topk");
  static const std::string hop_sql = "INSERT OR REPLACE INTO frame_hops(run_id, participant, frame, device, codec" +
                                     field_list(wire::hop_fields()) + ") VALUES (" +
                                     placeholders(wire::hop_fields().size() + 5) + ")";
  Stmt hq(db, hop_sql.c_str());
  if (!hq.prepared()) return db_error(db, path_, "insert frame_hops");
  for (const auto& f : frames) {
    for (const auto& h : f.hops) {
      hq.bind(1, f.run_id);
      hq.bind(2, std::string_view(f.participant));
      hq.bind(3, f.frame);
      hq.bind_text_or_null(4, h.device);
      hq.bind_text_or_null(5, h.codec);
      int i = 6;
      wire::visit_hop(h, [&](const wire::FieldInfo&, const auto& v) { bind_value(hq, i++, v); });
      if (hq.step() != SQLITE_DONE)
        return db_error(db, path_, fmt::format("insert frame_hops of frame {} of run {}", f.frame, f.run_id));
      hq.reset();
    }
    for (const auto& t : f.topk) {
      tk.bind(1, f.run_id);
      tk.bind(2, std::string_view(f.participant));
      tk.bind(3, f.frame);
      tk.bind(4, t.pos);
      tk.bind(5, f.sample + t.pos);
      tk.bind(6, t.rank);
      tk.bind(7, t.class_index);
      tk.bind(8, std::string_view(t.class_name));
      tk.bind(9, t.prob);
      if (tk.step() != SQLITE_DONE)
        return db_error(db, path_, fmt::format("insert frame_topk of frame {} of run {}", f.frame, f.run_id));
      tk.reset();
    }
    q.bind(1, f.run_id);
    q.bind_text_or_null(2, f.participant);
    q.bind_text_or_null(3, f.link);
    q.bind_text_or_null(4, f.shaping);
    int i = 5;
    wire::visit_frame(f, [&](const wire::FieldInfo&, const auto& v) { bind_value(q, i++, v); });
    bind_value(q, i, f.legacy_transfer_ns);
    if (q.step() != SQLITE_DONE)
      return db_error(db, path_,
                      fmt::format("insert frame {} of run {} split {} sample {}", f.frame, f.run_id, f.split, f.sample));
    q.reset();
  }
  return tx.commit();
}

Status ResultsDb::add_layer_profiles(const std::vector<LayerProfileRecord>& layers) {
  if (layers.empty()) return {};
  sqlite3* db = db_.get();
  Transaction tx(db, path_);
  TRACR_TRY(tx.begin());
  const auto& fields = wire::profile_fields();
  static const std::string sql = "INSERT OR REPLACE INTO layer_profiles(run_id, device, device_role" +
                                 field_list(fields) + ", profile_key, measured_run) VALUES (" +
                                 placeholders(fields.size() + 5) + ")";
  Stmt q(db, sql.c_str());
  if (!q.prepared()) return db_error(db, path_, "insert layer profiles");
  for (const auto& l : layers) {
    q.bind(1, l.run_id);
    q.bind(2, std::string_view(l.device));
    q.bind(3, std::string_view(l.device_role));
    int i = 4;
    wire::visit_profile(l, [&](const wire::FieldInfo&, const auto& v) { bind_value(q, i++, v); });
    bind_reuse(q, i, l.profile_key, l.measured_run);
    if (q.step() != SQLITE_DONE)
      return db_error(db, path_, fmt::format("insert layer profile {} of {}", l.layer_index, l.device));
    q.reset();
  }
  return tx.commit();
}

Status ResultsDb::add_device(const DeviceRecord& d) {
  const auto& fields = wire::hw_fields();
  static const std::string sql = "INSERT OR REPLACE INTO devices(run_id, device, role" + field_list(fields) +
                                 ") VALUES (" + placeholders(fields.size() + 3) + ")";
  Stmt q(db_.get(), sql.c_str());
  if (!q.prepared()) return db_error(db_.get(), path_, "insert device");
  q.bind(1, d.run_id);
  q.bind(2, std::string_view(d.device));
  q.bind(3, std::string_view(d.role));
  int i = 4;
  wire::visit_hw(d, [&](const wire::FieldInfo&, const auto& v) { bind_value(q, i++, v); });
  if (q.step() != SQLITE_DONE) return db_error(db_.get(), path_, "insert device " + d.device);
  return {};
}

Status ResultsDb::add_event(int64_t run_id, std::string_view level, std::string_view kind,
                            std::string_view message, std::string_view device, std::optional<int64_t> frame) {
  if (level != "debug" && level != "info" && level != "warn" && level != "error")
    return make_error(Errc::invalid_argument,
                      fmt::format("event level '{}': expected debug, info, warn or error", level));
  Stmt q(db_.get(), "INSERT INTO events(run_id, ts, level, kind, message, device, frame) VALUES (?, ?, ?, ?, ?, ?, ?)");
  if (!q.prepared()) return db_error(db_.get(), path_, "insert event");
  if (run_id > 0)
    q.bind(1, run_id);
  else
    q.bind_null(1);
  q.bind(2, std::string_view(utc_now_iso()));
  q.bind(3, level);
  q.bind(4, kind);
  q.bind(5, message);
  q.bind_text_or_null(6, device);
  bind_value(q, 7, frame);
  if (q.step() != SQLITE_DONE) return db_error(db_.get(), path_, fmt::format("insert event {}", kind));
  return {};
}

Status ResultsDb::finish_run(int64_t run_id, RunStatus status, const std::string& error) {
  sqlite3* db = db_.get();
  {
    Transaction tx(db, path_);
    TRACR_TRY(tx.begin());
    Stmt q(db, "UPDATE runs SET status = ?, ended_at = ?, error = ? WHERE id = ?");
    q.bind(1, run_status_name(status));
    q.bind(2, std::string_view(utc_now_iso()));
    q.bind_text_or_null(3, error);
    q.bind(4, run_id);
    if (q.step() != SQLITE_DONE) return db_error(db, path_, "finish run");
    if (sqlite3_changes(db) == 0)
      return make_error(Errc::not_found, fmt::format("{}: no run with id {}", path_, run_id));
    Stmt e(db, "INSERT INTO events(run_id, ts, level, kind, message) VALUES (?, ?, ?, 'run_finished', ?)");
    e.bind(1, run_id);
    e.bind(2, std::string_view(utc_now_iso()));
    e.bind(3, std::string_view(status == RunStatus::completed ? "info" : "error"));
    e.bind(4, std::string_view(error.empty() ? std::string(run_status_name(status))
                                             : std::string(run_status_name(status)) + ": " + error));
    if (e.step() != SQLITE_DONE) return db_error(db, path_, "record run_finished");
    TRACR_TRY(tx.commit());
  }
  auto s = compute_summaries(run_id);
  if (!s) return s.error();
  return {};
}

const StageStats& SplitSummary::stage(const std::string& field) const {
  static const StageStats none;
  auto it = stages.find(field);
  return it == stages.end() ? none : it->second;
}

namespace {

// What one split's frames add up to while they are read.
struct FrameSpan {
  int64_t first = INT64_MAX, last = INT64_MIN, n = 0;
};
struct SplitTally {
  int64_t ok = 0, failed = 0, warmup = 0, flagged = 0;
  std::vector<std::vector<int64_t>> values;  // per summarised field
  std::vector<std::pair<int64_t, std::pair<std::string, int64_t>>> totals;  // total_ns, (participant, frame)
  std::map<std::string, FrameSpan> spans;                                   // per participant
  long double raw = 0, wire = 0, reply = 0;
};
using Cuts = std::vector<int>;
struct RunTally {
  std::map<Cuts, SplitTally> by_placement;
  std::map<std::pair<Cuts, std::string>, AccuracyRow> by_codec;  // labelled frames per (placement, codec)
};

// The cut points of a frames.placement text ("3|13"); rows written before
// placements existed (or a text that does not parse) are placed at their split.
Cuts cuts_of(const std::string& text, int split) {
  auto p = wire::parse_placement(text);
  if (!p || p->cuts.empty()) return {split};
  return p->cuts;
}

std::string placement_text(const Cuts& cuts) {
  std::string out;
  for (int k : cuts) out += (out.empty() ? "" : "|") + std::to_string(k);
  return out;
}

std::vector<std::string> summarised_fields() {
  std::vector<std::string> fields;
  for (const auto& f : wire::frame_fields())
    if (f.summarise) fields.push_back(f.name);
  return fields;
}

// One ok, non-warm-up frame row of read_frame_tallies' query into its split's tally.
void tally_frame(const Statement& q, const std::vector<std::string>& fields, size_t total_idx, const Cuts& cuts,
                 SplitTally& a, RunTally& t) {
  ++a.ok;
  if (!q.text(3).empty()) ++a.flagged;
  if (q.i64(11) >= 0) {  // labels the model's classes cover (top5_correct is -1 in rows before schema 10)
    AccuracyRow& ac = t.by_codec[{cuts, q.text(14)}];
    ac.labelled += q.i64(13);
    ac.top1_correct += q.i64(11);
    ac.top5_correct += std::max<int64_t>(q.i64(12), 0);
    if (q.i64(12) < 0) ac.top5_known = false;
  }
  constexpr int kF = 16;  // first summarised field's column
  for (size_t i = 0; i < fields.size(); ++i)
    if (!q.is_null(kF + static_cast<int>(i))) a.values[i].push_back(q.i64(kF + static_cast<int>(i)));
  if (total_idx < fields.size()) a.totals.push_back({q.i64(kF + static_cast<int>(total_idx)), {q.text(4), q.i64(5)}});
  if (!q.is_null(6) && !q.is_null(7)) {
    FrameSpan& sp = a.spans[q.text(4)];
    sp.first = std::min(sp.first, q.i64(6));
    sp.last = std::max(sp.last, q.i64(7));
    sp.n++;
  }
  a.raw += q.i64(8);
  a.wire += q.i64(9);
  a.reply += q.i64(10);
}

Result<RunTally> read_frame_tallies(sqlite3* db, const std::string& path, int64_t run_id,
                                    const std::vector<std::string>& fields) {
  std::string cols;
  for (const auto& f : fields) cols += ", " + f;  // NULL in rows written before the column existed
  const std::string sql =
      "SELECT split, ok, warmup, COALESCE(flags, ''), COALESCE(participant, ''), COALESCE(frame, -1), start_ns, end_ns, "
      "raw_bytes, wire_bytes, COALESCE(reply_bytes, 0), COALESCE(correct, -1), COALESCE(top5_correct, -1), batch, "
      "codec, COALESCE(placement, '')" +
      cols + " FROM frames WHERE run_id = ? ORDER BY id";
  Statement q(db, sql.c_str());
  if (!q.prepared()) return db_error(db, path, "read frames");
  q.bind(1, run_id);
  RunTally t;
  int rc;
  const size_t total_idx = std::find(fields.begin(), fields.end(), "total_ns") - fields.begin();
  while ((rc = q.step()) == SQLITE_ROW) {
    const Cuts cuts = cuts_of(q.text(15), static_cast<int>(q.i64(0)));
    SplitTally& a = t.by_placement[cuts];
    if (a.values.empty()) a.values.resize(fields.size());
    if (q.i64(2))
      ++a.warmup;
    else if (!q.i64(1))
      ++a.failed;
    else
      tally_frame(q, fields, total_idx, cuts, a, t);
  }
  if (rc != SQLITE_DONE) return db_error(db, path, "read frames");
  return t;
}

StageStats stage_stats_of(std::vector<int64_t>& v) {
  StageStats st;
  long double sum = 0;
  for (auto x : v) sum += x;
  st.mean_ns = static_cast<double>(sum / static_cast<long double>(v.size()));
  st.median_ns = median_of(v);  // sorts v
  st.p95_ns = p95_of(v);
  st.min_ns = static_cast<double>(v.front());
  st.max_ns = static_cast<double>(v.back());
  return st;
}

// A slow_frame event for every frame slower than 10x its split's median total.
void flag_slow_frames(int64_t run_id, const SplitTally& a, SplitSummary& s, std::vector<EventRecord>& slow) {
  const double med = s.stage("total_ns").median_ns;
  for (const auto& [total, who] : a.totals)
    if (med > 0 && static_cast<double>(total) > 10.0 * med) {
      ++s.slow_frames;
      EventRecord e;
      e.run_id = run_id;
      e.level = "warn";
      e.kind = "slow_frame";
      e.device = who.first;
      if (who.second >= 0) e.frame = who.second;
      e.message = fmt::format("frame {} at {} {}: total {:.3f} ms, {:.1f}x the {}'s median {:.3f} ms", who.second,
                              s.chained() ? "placement" : "split", s.placement, total / 1e6, total / med,
                              s.chained() ? "placement" : "split", med / 1e6);
      slow.push_back(std::move(e));
    }
}

SplitSummary summarise_split(int64_t run_id, const Cuts& cuts, SplitTally& a, RunTally& t,
                             const std::vector<std::string>& fields, std::vector<EventRecord>& slow) {
  SplitSummary s;
  s.split = cuts.front();
  s.cuts = cuts;
  s.placement = placement_text(cuts);
  s.frames = a.ok;
  s.failed = a.failed;
  s.warmup_frames = a.warmup;
  s.flagged = a.flagged;
  for (auto& [key, ac] : t.by_codec)
    if (key.first == cuts) {
      ac.run_id = run_id;
      ac.split = s.split;
      ac.placement = s.placement;
      ac.codec = key.second;
      s.labelled += ac.labelled;
      s.top1_correct += ac.top1_correct;
      s.top5_correct += ac.top5_correct;
      s.codecs.push_back(ac);
    }
  for (size_t i = 0; i < fields.size() && s.frames > 0; ++i)
    if (!a.values[i].empty()) s.stages[fields[i]] = stage_stats_of(a.values[i]);  // empty: a column these rows lack
  for (const auto& [who, sp] : a.spans)
    if (sp.n > 0 && sp.last > sp.first)
      s.throughput_fps += static_cast<double>(sp.n) * 1e9 / static_cast<double>(sp.last - sp.first);
  if (s.frames > 0) {
    s.mean_raw_bytes = static_cast<double>(a.raw / s.frames);
    s.mean_wire_bytes = static_cast<double>(a.wire / s.frames);
    s.mean_reply_bytes = static_cast<double>(a.reply / s.frames);
    flag_slow_frames(run_id, a, s, slow);
  }
  return s;
}

std::optional<double> ratio_of(int64_t hit, int64_t n) {
  return n > 0 ? std::optional<double>(double(hit) / double(n)) : std::nullopt;
}

Status delete_run_rows(sqlite3* db, const std::string& path, int64_t run_id, std::initializer_list<const char*> sqls,
                       const char* what) {
  for (const char* sql : sqls) {
    Statement d(db, sql);
    d.bind(1, run_id);
    if (d.step() != SQLITE_DONE) return db_error(db, path, what);
  }
  return {};
}

// The summaries, accuracy and stage_stats rows of one split.
class SummaryInserter {
 public:
  SummaryInserter(sqlite3* db, const std::string& path, int64_t run_id)
      : db_(db),
        path_(path),
        run_id_(run_id),
        ins_(db,
             "INSERT INTO summaries(run_id, split, frames, failed, warmup_frames, flagged, slow_frames, throughput_fps, "
             "mean_raw_bytes, mean_wire_bytes, mean_reply_bytes, labelled, top1_correct, top5_correct, top1_acc, "
             "top5_acc, placement) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
        acc_(db,
             "INSERT INTO accuracy(run_id, split, codec, labelled, top1_correct, top5_correct, top1_acc, top5_acc, "
             "placement) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
        st_(db,
            "INSERT INTO stage_stats(run_id, split, field, median_ns, p95_ns, mean_ns, min_ns, max_ns, placement) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)") {}

  Status prepared() const {
    if (!acc_.prepared()) return db_error(db_, path_, "insert accuracy");
    if (!ins_.prepared() || !st_.prepared()) return db_error(db_, path_, "insert summaries");
    return {};
  }

  Status insert(const SplitSummary& s) {
    TRACR_TRY(summary(s));
    for (const auto& c : s.codecs) TRACR_TRY(accuracy(s, c));
    for (const auto& [field, v] : s.stages) TRACR_TRY(stage(s, field, v));
    return {};
  }

 private:
  Status summary(const SplitSummary& s) {
    ins_.bind(1, run_id_);
    ins_.bind(2, s.split);
    ins_.bind(3, s.frames);
    ins_.bind(4, s.failed);
    ins_.bind(5, s.warmup_frames);
    ins_.bind(6, s.flagged);
    ins_.bind(7, s.slow_frames);
    ins_.bind(8, s.throughput_fps);
    ins_.bind(9, s.mean_raw_bytes);
    ins_.bind(10, s.mean_wire_bytes);
    ins_.bind(11, s.mean_reply_bytes);
    ins_.bind(12, s.labelled);
    ins_.bind(13, s.top1_correct);
    ins_.bind(14, s.top5_correct);
    bind_value(ins_, 15, ratio_of(s.top1_correct, s.labelled));
    bool top5_known = true;
    for (const auto& c : s.codecs) top5_known = top5_known && c.top5_known;
    bind_value(ins_, 16, top5_known ? ratio_of(s.top5_correct, s.labelled) : std::nullopt);
    ins_.bind(17, std::string_view(s.placement));
    if (ins_.step() != SQLITE_DONE) return db_error(db_, path_, "insert summaries");
    ins_.reset();
    return {};
  }

  Status accuracy(const SplitSummary& s, const AccuracyRow& c) {
    acc_.bind(1, run_id_);
    acc_.bind(2, s.split);
    acc_.bind(3, std::string_view(c.codec));
    acc_.bind(4, c.labelled);
    acc_.bind(5, c.top1_correct);
    acc_.bind(6, c.top5_correct);
    bind_value(acc_, 7, ratio_of(c.top1_correct, c.labelled));
    bind_value(acc_, 8, c.top5_known ? ratio_of(c.top5_correct, c.labelled) : std::nullopt);
    acc_.bind(9, std::string_view(s.placement));
    if (acc_.step() != SQLITE_DONE) return db_error(db_, path_, "insert accuracy");
    acc_.reset();
    return {};
  }

  Status stage(const SplitSummary& s, const std::string& field, const StageStats& v) {
    st_.bind(1, run_id_);
    st_.bind(2, s.split);
    st_.bind(3, std::string_view(field));
    st_.bind(4, v.median_ns);
    st_.bind(5, v.p95_ns);
    st_.bind(6, v.mean_ns);
    st_.bind(7, v.min_ns);
    st_.bind(8, v.max_ns);
    st_.bind(9, std::string_view(s.placement));
    if (st_.step() != SQLITE_DONE) return db_error(db_, path_, "insert stage stats");
    st_.reset();
    return {};
  }

  sqlite3* db_;
  const std::string& path_;
  int64_t run_id_;
  Statement ins_, acc_, st_;
};

Status insert_energy_stats(sqlite3* db, const std::string& path, int64_t run_id, const std::vector<EnergyStat>& rows) {
  TRACR_TRY(delete_run_rows(db, path, run_id, {"DELETE FROM energy_stats WHERE run_id = ?"}, "replace energy_stats"));
  Statement es(db,
               "INSERT INTO energy_stats(run_id, split, device, stage, source, n, median_j, p95_j, median_net_j, "
               "p95_net_j, placement) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!es.prepared()) return db_error(db, path, "insert energy_stats");
  for (const auto& e : rows) {
    es.bind(1, run_id);
    es.bind(2, e.split);
    es.bind(3, std::string_view(e.device));
    es.bind(4, std::string_view(e.stage));
    es.bind(5, std::string_view(e.source));
    es.bind(6, e.n);
    bind_value(es, 7, e.median_j);
    bind_value(es, 8, e.p95_j);
    bind_value(es, 9, e.median_net_j);
    bind_value(es, 10, e.p95_net_j);
    es.bind(11, std::string_view(e.placement));
    if (es.step() != SQLITE_DONE) return db_error(db, path, "insert energy_stats");
    es.reset();
  }
  return {};
}

Status insert_slow_frame_events(sqlite3* db, const std::string& path, int64_t run_id,
                                const std::vector<EventRecord>& slow) {
  Statement ev(db, "INSERT INTO events(run_id, ts, level, kind, message, device, frame) VALUES (?, ?, ?, ?, ?, ?, ?)");
  for (const auto& e : slow) {
    ev.bind(1, run_id);
    ev.bind(2, std::string_view(utc_now_iso()));
    ev.bind(3, std::string_view(e.level));
    ev.bind(4, std::string_view(e.kind));
    ev.bind(5, std::string_view(e.message));
    ev.bind_text_or_null(6, e.device);
    bind_value(ev, 7, e.frame);
    if (ev.step() != SQLITE_DONE) return db_error(db, path, "record slow_frame");
    ev.reset();
  }
  return {};
}

}  // namespace

Result<std::vector<SplitSummary>> ResultsDb::compute_summaries(int64_t run_id) {
  const auto fields = summarised_fields();
  auto tally = read_frame_tallies(db_.get(), path_, run_id, fields);
  if (!tally) return std::move(tally.error());
  std::vector<SplitSummary> out;
  std::vector<EventRecord> slow;
  for (auto& [cuts, a] : tally->by_placement) out.push_back(summarise_split(run_id, cuts, a, *tally, fields, slow));
  if (!read_only_) TRACR_TRY(store_summaries(run_id, out, slow));
  return out;
}

Status ResultsDb::store_summaries(int64_t run_id, const std::vector<SplitSummary>& out,
                                  const std::vector<EventRecord>& slow) {
  sqlite3* db = db_.get();
  Transaction tx(db, path_);
  TRACR_TRY(tx.begin());
  TRACR_TRY(delete_run_rows(db, path_, run_id,
                            {"DELETE FROM summaries WHERE run_id = ?", "DELETE FROM stage_stats WHERE run_id = ?",
                             "DELETE FROM accuracy WHERE run_id = ?",
                             "DELETE FROM events WHERE run_id = ? AND kind = 'slow_frame'"},
                            "replace summaries"));
  SummaryInserter rows(db, path_, run_id);
  TRACR_TRY(rows.prepared());
  for (const auto& s : out) TRACR_TRY(rows.insert(s));
  auto estats = energy_stats(run_id);  // per split, device, stage and source
  if (!estats) return std::move(estats.error());
  TRACR_TRY(insert_energy_stats(db, path_, run_id, *estats));
  TRACR_TRY(insert_slow_frame_events(db, path_, run_id, slow));
  return tx.commit();
}

Result<std::vector<SplitSummary>> ResultsDb::split_table(int64_t run_id) {
  auto run = get_run(run_id);
  if (!run) return run.error();
  if (run->status == RunStatus::running) return compute_summaries(run_id);
  std::map<Cuts, SplitSummary> by_split;  // by placement
  {
    Stmt q(db_.get(),
           "SELECT split, frames, failed, warmup_frames, flagged, slow_frames, COALESCE(throughput_fps, 0), "
           "COALESCE(mean_raw_bytes, 0), COALESCE(mean_wire_bytes, 0), COALESCE(mean_reply_bytes, 0), labelled, "
           "top1_correct, top5_correct, placement FROM summaries WHERE run_id = ?");
    if (!q.prepared()) return db_error(db_.get(), path_, "read summaries");
    q.bind(1, run_id);
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      SplitSummary s;
      s.split = static_cast<int>(q.i64(0));
      s.frames = q.i64(1);
      s.failed = q.i64(2);
      s.warmup_frames = q.i64(3);
      s.flagged = q.i64(4);
      s.slow_frames = q.i64(5);
      s.throughput_fps = q.dbl(6);
      s.mean_raw_bytes = q.dbl(7);
      s.mean_wire_bytes = q.dbl(8);
      s.mean_reply_bytes = q.dbl(9);
      s.labelled = q.i64(10);
      s.top1_correct = q.i64(11);
      s.top5_correct = q.i64(12);
      s.cuts = cuts_of(q.text(13), s.split);
      s.placement = placement_text(s.cuts);
      by_split[s.cuts] = s;
    }
    if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read summaries");
  }
  if (by_split.empty() && run->frame_count > 0) return compute_summaries(run_id);
  {
    Stmt q(db_.get(),
           "SELECT split, field, median_ns, p95_ns, mean_ns, min_ns, max_ns, placement FROM stage_stats "
           "WHERE run_id = ?");
    if (!q.prepared()) return db_error(db_.get(), path_, "read stage stats");
    q.bind(1, run_id);
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      auto it = by_split.find(cuts_of(q.text(7), static_cast<int>(q.i64(0))));
      if (it == by_split.end()) continue;
      it->second.stages[q.text(1)] = StageStats{q.dbl(2), q.dbl(3), q.dbl(4), q.dbl(5), q.dbl(6)};
    }
    if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read stage stats");
  }
  {
    Stmt q(db_.get(),
           "SELECT split, codec, labelled, top1_correct, top5_correct, top5_acc IS NOT NULL OR labelled = 0, placement "
           "FROM accuracy WHERE run_id = ? ORDER BY codec");
    if (!q.prepared()) return db_error(db_.get(), path_, "read accuracy");
    q.bind(1, run_id);
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      auto it = by_split.find(cuts_of(q.text(6), static_cast<int>(q.i64(0))));
      if (it == by_split.end()) continue;
      AccuracyRow a;
      a.run_id = run_id;
      a.split = it->second.split;
      a.placement = it->second.placement;
      a.codec = q.text(1);
      a.labelled = q.i64(2);
      a.top1_correct = q.i64(3);
      a.top5_correct = q.i64(4);
      a.top5_known = q.i64(5) != 0;
      it->second.codecs.push_back(a);
    }
    if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read accuracy");
  }
  std::vector<SplitSummary> out;
  for (auto& [k, v] : by_split) out.push_back(std::move(v));
  return out;
}

Result<std::vector<HopSummary>> ResultsDb::hop_summaries(int64_t run_id) {
  const auto& fields = wire::hop_fields();
  std::string cols;
  for (size_t i = 3; i < fields.size(); ++i) cols += ", h." + std::string(fields[i].name);  // after hop, first, end
  const std::string sql =
      "SELECT COALESCE(f.placement, CAST(f.split AS TEXT)), f.split, h.hop, COALESCE(h.device, ''), "
      "COALESCE(h.codec, '')" + cols +
      " FROM frame_hops h JOIN frames f ON f.run_id = h.run_id AND f.participant = h.participant AND f.frame = h.frame "
      "WHERE h.run_id = ? AND f.ok = 1 AND f.warmup = 0";
  Stmt q(db_.get(), sql.c_str());
  if (!q.prepared()) return db_error(db_.get(), path_, "read frame_hops");
  q.bind(1, run_id);
  using Key = std::tuple<Cuts, int64_t, std::string, std::string>;
  std::map<Key, std::pair<int64_t, std::map<std::string, std::vector<int64_t>>>> groups;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    auto& g = groups[{cuts_of(q.text(0), static_cast<int>(q.i64(1))), q.i64(2), q.text(3), q.text(4)}];
    ++g.first;
    for (size_t i = 3; i < fields.size(); ++i) {
      const int c = static_cast<int>(i) + 2;
      if (!q.is_null(c)) g.second[fields[i].name].push_back(q.i64(c));
    }
  }
  if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read frame_hops");
  std::vector<HopSummary> out;
  for (auto& [key, g] : groups) {
    HopSummary s;
    std::tie(s.cuts, s.hop, s.device, s.codec) = key;
    s.placement = placement_text(s.cuts);
    s.frames = g.first;
    for (auto& [name, v] : g.second) s.median[name] = median_of(v);
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
const char* kRunColumns =
    "SELECT id, name, status, started_at, COALESCE(ended_at, ''), config_yaml, tracr_version, "
    "protocol_version, "
    "model, codec, cipher, devices_json, controller_host, controller_pid, COALESCE(error, ''), "
    "(SELECT COUNT(*) FROM frames WHERE frames.run_id = runs.id), COALESCE(link, ''), COALESCE(shaping, '') FROM runs ";

RunRow read_run(const Stmt& q) {
  RunRow r;
  r.id = q.i64(0);
  r.name = q.text(1);
  r.status = parse_run_status(q.text(2)).value_or(RunStatus::failed);
  r.started_at = q.text(3);
  r.ended_at = q.text(4);
  r.config_yaml = q.text(5);
  r.tracr_version = q.text(6);
  r.protocol_version = static_cast<int>(q.i64(7));
  r.model = q.text(8);
  r.codec = q.text(9);
  r.cipher = q.text(10);
  r.devices_json = q.text(11);
  r.controller_host = q.text(12);
  r.controller_pid = q.i64(13);
  r.error = q.text(14);
  r.frame_count = q.i64(15);
  r.link = q.text(16);
  r.shaping = q.text(17);
  return r;
}
}  // namespace

RunRow ResultsDb::shown(RunRow r) const {
  auto it = dead_.find(r.id);
  if (it != dead_.end()) {
    r.status = it->second.failed ? RunStatus::failed : RunStatus::interrupted;
    r.error = it->second.why + " (seen read-only; recorded at the next read-write open)";
  }
  return r;
}

fs::path outputs_dir(const std::string& db_path, int64_t run_id) {
  return fs::path("outputs") / fs::path(db_path).filename() / ("run" + std::to_string(run_id));
}

namespace {

// The run's record.outputs files (path relative to the database's folder, sha256).
Result<std::vector<std::pair<std::string, std::string>>> output_files(sqlite3* db, const std::string& path,
                                                                      int64_t run_id) {
  Stmt q(db, "SELECT path, sha256 FROM outputs WHERE run_id = ?");
  if (!q.prepared()) return db_error(db, path, "read outputs");
  q.bind(1, run_id);
  std::vector<std::pair<std::string, std::string>> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) out.emplace_back(q.text(0), q.text(1));
  if (rc != SQLITE_DONE) return db_error(db, path, "read outputs");
  return out;
}

// Removes each file whose content still hashes to its row's sha256; the others
// (rewritten by another database sharing the path) are kept and listed.
void remove_output_files(const fs::path& base, const std::vector<std::pair<std::string, std::string>>& files,
                         std::vector<std::string>* kept) {
  for (const auto& [rel, sha] : files) {
    const fs::path file = base / rel;
    std::ifstream in(file, std::ios::binary);
    if (!in) continue;  // already gone
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    const auto h = protocol::sha256(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    std::error_code ec;
    if (protocol::to_hex(h.data(), h.size()) == sha) {
      fs::remove(file, ec);
      fs::remove(file.parent_path(), ec);  // the run's folder, once empty
    } else if (kept) {
      kept->push_back(file.string());
    }
  }
}

}  // namespace

Status ResultsDb::delete_run(int64_t run_id, std::vector<std::string>* kept) {
  if (read_only_) return make_error(Errc::io, fmt::format("{}: opened read-only; cannot delete run {}", path_, run_id));
  auto run = get_run(run_id);
  if (!run) return run.error();
  if (run->status == RunStatus::running)
    return make_error(Errc::invalid_argument,
                      fmt::format("{}: run {} is still running (controller {} pid {}); expected a finished run "
                                  "(stop it first)",
                                  path_, run_id, run->controller_host, run->controller_pid));
  sqlite3* db = db_.get();
  {
    // The cascade needs foreign keys on (set at open; checked, not assumed).
    Stmt fk(db, "PRAGMA foreign_keys");
    if (!fk.prepared() || fk.step() != SQLITE_ROW || fk.i64(0) != 1)
      return make_error(Errc::io, fmt::format("{}: foreign keys are off; refusing a delete that would leave the "
                                              "run's rows behind", path_));
  }
  auto files = output_files(db, path_, run_id);
  if (!files) return files.error();
  Transaction tx(db, path_);
  TRACR_TRY(tx.begin());
  Stmt d(db, "DELETE FROM runs WHERE id = ?");
  if (!d.prepared()) return db_error(db, path_, "delete run");
  d.bind(1, run_id);
  if (d.step() != SQLITE_DONE) return db_error(db, path_, "delete run");
  TRACR_TRY(tx.commit());
  std::error_code ec;
  fs::remove(failure_note_path(path_, run_id), ec);
  // record.outputs files (Recorder::write_outputs) go with their rows, when
  // they are still this run's; the run's own folder also holds any .part a
  // stopped run left (its name is this database's: no other writes there).
  const fs::path base = fs::path(path_).parent_path();
  std::vector<std::string> mismatched;
  remove_output_files(base, *files, &mismatched);
  // What is left in the run's own folder: .part files a stopped run left
  // (removed), and files kept above (left, with the folder).
  const fs::path own = base / outputs_dir(path_, run_id);
  for (const auto& e : fs::directory_iterator(own, ec))
    if (e.path().extension() == ".part") fs::remove(e.path(), ec);
  fs::remove(own, ec);                // once empty
  fs::remove(own.parent_path(), ec);  // the database's folder, once empty
  fs::remove(base / "outputs", ec);
  if (kept) *kept = std::move(mismatched);
  return {};
}

Result<std::vector<RunRow>> ResultsDb::list_runs(int limit) {
  std::string sql = std::string(kRunColumns) + "ORDER BY id DESC";
  if (limit > 0) sql += " LIMIT " + std::to_string(limit);
  Stmt q(db_.get(), sql.c_str());
  if (!q.prepared()) return db_error(db_.get(), path_, "list runs");
  std::vector<RunRow> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) out.push_back(shown(read_run(q)));
  if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "list runs");
  return out;
}

Result<RunRow> ResultsDb::get_run(int64_t run_id) {
  Stmt q(db_.get(), (std::string(kRunColumns) + "WHERE id = ?").c_str());
  if (!q.prepared()) return db_error(db_.get(), path_, "read run");
  q.bind(1, run_id);
  const int rc = q.step();
  if (rc == SQLITE_ROW) return shown(read_run(q));
  if (rc == SQLITE_DONE)
    return make_error(Errc::not_found,
                      fmt::format("{}: no run with id {} (see `tracrctl results list`)", path_, run_id));
  return db_error(db_.get(), path_, "read run");
}

Result<int64_t> ResultsDb::latest_run() {
  Stmt q(db_.get(), "SELECT MAX(id) FROM runs");
  if (!q.prepared() || q.step() != SQLITE_ROW) return db_error(db_.get(), path_, "find latest run");
  if (q.is_null(0)) return make_error(Errc::not_found, fmt::format("{}: no runs recorded yet", path_));
  return q.i64(0);
}

namespace {

// Every row `sql` selects for one run (its one `?`), each filled by
// `fill(q, row)`; `what` names the read in an error.
template <class Row, class Fill>
Result<std::vector<Row>> run_rows(sqlite3* db, const std::string& path, const std::string& sql, int64_t run_id,
                                  const char* what, Fill fill) {
  Stmt q(db, sql.c_str());
  if (!q.prepared()) return db_error(db, path, what);
  q.bind(1, run_id);
  std::vector<Row> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    Row r;
    fill(q, r);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return db_error(db, path, what);
  return out;
}

}  // namespace

Result<std::vector<FrameRecord>> ResultsDb::frames(int64_t run_id) {
  static const std::string sql = "SELECT run_id, COALESCE(participant, ''), COALESCE(link, ''), COALESCE(shaping, '')" +
                                 field_list(wire::frame_fields()) +
                                 ", legacy_transfer_ns FROM frames WHERE run_id = ? ORDER BY id";
  return run_rows<FrameRecord>(db_.get(), path_, sql, run_id, "read frames", [](const Stmt& q, FrameRecord& f) {
    f.run_id = q.i64(0);
    f.participant = q.text(1);
    f.link = q.text(2);
    f.shaping = q.text(3);
    int c = 4;
    wire::visit_frame(f, [&](const wire::FieldInfo&, auto& v) { read_value(q, c++, v); });
    read_value(q, c, f.legacy_transfer_ns);
  });
}

Result<std::vector<LayerProfileRecord>> ResultsDb::layer_profiles(int64_t run_id) {
  static const std::string sql = "SELECT run_id, device, device_role" + field_list(wire::profile_fields()) +
                                 ", COALESCE(profile_key, ''), COALESCE(measured_run, 0) FROM layer_profiles "
                                 "WHERE run_id = ? ORDER BY device_role DESC, device, layer_index";
  return run_rows<LayerProfileRecord>(
      db_.get(), path_, sql, run_id, "read layer profiles", [](const Stmt& q, LayerProfileRecord& l) {
        l.run_id = q.i64(0);
        l.device = q.text(1);
        l.device_role = q.text(2);
        int c = 3;
        wire::visit_profile(l, [&](const wire::FieldInfo&, auto& v) { read_value(q, c++, v); });
        l.profile_key = q.text(c);
        l.measured_run = q.i64(c + 1);
      });
}

Result<std::vector<LayerProfileRecord>> ResultsDb::find_profiles(const std::string& model_fp,
                                                                   const std::string& input_shape, int64_t batch,
                                                                   const std::string& device_kind,
                                                                   const std::string& hw_id) {
  static const std::string key = "model_fp = ? AND input_shape = ? AND batch = ? AND device_kind = ? AND hw_id = ?";
  int64_t run = 0;
  std::string device;
  {
    Stmt q(db_.get(), ("SELECT run_id, device FROM layer_profiles WHERE " + key + " ORDER BY run_id DESC LIMIT 1").c_str());
    if (!q.prepared()) return db_error(db_.get(), path_, "find layer profiles");
    q.bind(1, std::string_view(model_fp));
    q.bind(2, std::string_view(input_shape));
    q.bind(3, batch);
    q.bind(4, std::string_view(device_kind));
    q.bind(5, std::string_view(hw_id));
    const int rc = q.step();
    if (rc == SQLITE_DONE) return std::vector<LayerProfileRecord>{};
    if (rc != SQLITE_ROW) return db_error(db_.get(), path_, "find layer profiles");
    run = q.i64(0);
    device = q.text(1);
  }
  auto all = layer_profiles(run);
  if (!all) return all.error();
  std::vector<LayerProfileRecord> out;
  for (auto& l : *all)
    if (l.device == device && l.model_fp == model_fp && l.input_shape == input_shape && l.batch == batch &&
        l.device_kind == device_kind && l.hw_id == hw_id)
      out.push_back(std::move(l));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.layer_index < b.layer_index; });
  return out;
}

Status ResultsDb::add_probe(const ProbeRow& p) {
  const auto& fields = wire::probe_fields();
  static const std::string sql = "INSERT INTO probes(run_id, participant, link, shaping" + field_list(fields) +
                                 ") VALUES (" + placeholders(fields.size() + 4) + ")";
  Stmt q(db_.get(), sql.c_str());
  if (!q.prepared()) return db_error(db_.get(), path_, "insert probe");
  q.bind(1, p.run_id);
  q.bind_text_or_null(2, p.participant);
  q.bind_text_or_null(3, p.link);
  q.bind_text_or_null(4, p.shaping);
  int i = 5;
  wire::visit_probe(p, [&](const wire::FieldInfo&, const auto& v) { bind_value(q, i++, v); });
  if (q.step() != SQLITE_DONE) return db_error(db_.get(), path_, "insert probe of " + p.participant);
  return {};
}

Status ResultsDb::add_segment_profile(const SegmentProfileRow& r) {
  const auto& fields = wire::segment_fields();
  static const std::string sql = "INSERT OR REPLACE INTO segment_profiles(run_id, device, device_role" +
                                 field_list(fields) + ", profile_key, measured_run) VALUES (" +
                                 placeholders(fields.size() + 5) + ")";
  Stmt q(db_.get(), sql.c_str());
  if (!q.prepared()) return db_error(db_.get(), path_, "insert segment profile");
  q.bind(1, r.run_id);
  q.bind(2, std::string_view(r.device));
  q.bind(3, std::string_view(r.device_role));
  int i = 4;
  wire::visit_segment(r, [&](const wire::FieldInfo&, const auto& v) { bind_value(q, i++, v); });
  bind_reuse(q, i, r.profile_key, r.measured_run);
  if (q.step() != SQLITE_DONE)
    return db_error(db_.get(), path_, fmt::format("insert {} segment profile {} of {}", r.side, r.split, r.device));
  return {};
}

Result<std::vector<SegmentProfileRow>> ResultsDb::segment_profiles(int64_t run_id) {
  static const std::string sql = "SELECT run_id, device, device_role" + field_list(wire::segment_fields()) +
                                 ", COALESCE(profile_key, ''), COALESCE(measured_run, 0) FROM segment_profiles "
                                 "WHERE run_id = ? ORDER BY side, device, split";
  return run_rows<SegmentProfileRow>(
      db_.get(), path_, sql, run_id, "read segment profiles", [](const Stmt& q, SegmentProfileRow& r) {
        r.run_id = q.i64(0);
        r.device = q.text(1);
        r.device_role = q.text(2);
        int c = 3;
        wire::visit_segment(r, [&](const wire::FieldInfo&, auto& v) { read_value(q, c++, v); });
        r.profile_key = q.text(c);
        r.measured_run = q.i64(c + 1);
      });
}

Result<std::vector<KnownProfiles>> ResultsDb::known_profiles() {
  std::map<std::string, KnownProfiles> by_key;
  {
    // Each key's newest set (run, device, role) and its size.
    Stmt q(db_.get(),
           "SELECT profile_key, COUNT(*) FROM layer_profiles WHERE profile_key IS NOT NULL "
           "GROUP BY profile_key, run_id, device, device_role ORDER BY run_id");
    if (!q.prepared()) return db_error(db_.get(), path_, "read stored profile keys");
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      auto& k = by_key[q.text(0)];
      k.key = q.text(0);
      k.layers = q.i64(1);
    }
    if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read stored profile keys");
  }
  Stmt q(db_.get(),
         "SELECT DISTINCT profile_key, side, split FROM segment_profiles WHERE profile_key IS NOT NULL "
         "ORDER BY profile_key, side, split");
  if (!q.prepared()) return db_error(db_.get(), path_, "read stored segment profile keys");
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    auto& k = by_key[q.text(0)];
    k.key = q.text(0);
    (q.text(1) == "head" ? k.head : k.tail).push_back(static_cast<int>(q.i64(2)));
  }
  if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read stored segment profile keys");
  std::vector<KnownProfiles> out;
  for (auto& [key, k] : by_key) out.push_back(std::move(k));
  return out;
}

Result<int64_t> ResultsDb::reuse_layer_profiles(const std::string& key, int64_t layers, int64_t run_id,
                                                 const std::string& device, const std::string& device_role) {
  sqlite3* db = db_.get();
  Transaction tx(db, path_);
  TRACR_TRY(tx.begin());
  int64_t src_run = 0;
  std::string src_device, src_role;
  {
    Stmt q(db,
           "SELECT run_id, device, device_role FROM layer_profiles WHERE profile_key = ? "
           "GROUP BY run_id, device, device_role HAVING COUNT(*) = ? "
           "ORDER BY device = ? AND device_role = ? DESC, run_id DESC LIMIT 1");
    if (!q.prepared()) return db_error(db, path_, "find profiles to reuse");
    q.bind(1, std::string_view(key));
    q.bind(2, layers);
    q.bind(3, std::string_view(device));
    q.bind(4, std::string_view(device_role));
    const int rc = q.step();
    if (rc == SQLITE_DONE)
      return make_error(Errc::not_found, fmt::format("{}: no set of {} layer profiles under key {} to reuse", path_,
                                                     layers, key));
    if (rc != SQLITE_ROW) return db_error(db, path_, "find profiles to reuse");
    src_run = q.i64(0);
    src_device = q.text(1);
    src_role = q.text(2);
  }
  const std::string fields = field_list(wire::profile_fields());
  Stmt ins(db, ("INSERT OR REPLACE INTO layer_profiles(run_id, device, device_role" + fields +
                ", profile_key, measured_run) SELECT ?, ?, ?" + fields +
                ", profile_key, COALESCE(measured_run, run_id) FROM layer_profiles "
                "WHERE run_id = ? AND device = ? AND device_role = ? AND profile_key = ?")
                   .c_str());
  if (!ins.prepared()) return db_error(db, path_, "reuse layer profiles");
  ins.bind(1, run_id);
  ins.bind(2, std::string_view(device));
  ins.bind(3, std::string_view(device_role));
  ins.bind(4, src_run);
  ins.bind(5, std::string_view(src_device));
  ins.bind(6, std::string_view(src_role));
  ins.bind(7, std::string_view(key));
  if (ins.step() != SQLITE_DONE) return db_error(db, path_, "reuse layer profiles of run " + std::to_string(src_run));
  int64_t measured = src_run;
  {
    Stmt q(db, "SELECT MIN(measured_run) FROM layer_profiles WHERE run_id = ? AND device = ? AND device_role = ?");
    q.bind(1, run_id);
    q.bind(2, std::string_view(device));
    q.bind(3, std::string_view(device_role));
    if (q.step() == SQLITE_ROW && !q.is_null(0)) measured = q.i64(0);
  }
  TRACR_TRY(tx.commit());
  return measured;
}

Result<std::vector<int64_t>> ResultsDb::reuse_segment_profiles(const std::string& key, const std::string& side,
                                                               const std::vector<int>& splits, int64_t run_id,
                                                               const std::string& device,
                                                               const std::string& device_role) {
  sqlite3* db = db_.get();
  Transaction tx(db, path_);
  TRACR_TRY(tx.begin());
  const std::string fields = field_list(wire::segment_fields());
  // The newest row of each split (the same device's first): its rowid, then a copy of it.
  Stmt find(db, "SELECT rowid, COALESCE(measured_run, run_id) FROM segment_profiles WHERE profile_key = ? AND "
                "side = ? AND split = ? ORDER BY device = ? DESC, run_id DESC LIMIT 1");
  Stmt ins(db, ("INSERT OR REPLACE INTO segment_profiles(run_id, device, device_role" + fields +
                ", profile_key, measured_run) SELECT ?, ?, ?" + fields +
                ", profile_key, COALESCE(measured_run, run_id) FROM segment_profiles WHERE rowid = ?")
                   .c_str());
  if (!find.prepared() || !ins.prepared()) return db_error(db, path_, "reuse segment profiles");
  std::vector<int64_t> runs;
  for (int k : splits) {
    find.bind(1, std::string_view(key));
    find.bind(2, std::string_view(side));
    find.bind(3, static_cast<int64_t>(k));
    find.bind(4, std::string_view(device));
    const int rc = find.step();
    if (rc == SQLITE_DONE)
      return make_error(Errc::not_found,
                        fmt::format("{}: no {} profile of split {} under key {} to reuse", path_, side, k, key));
    if (rc != SQLITE_ROW) return db_error(db, path_, "find segment profiles to reuse");
    const int64_t rowid = find.i64(0);
    runs.push_back(find.i64(1));
    find.reset();
    ins.bind(1, run_id);
    ins.bind(2, std::string_view(device));
    ins.bind(3, std::string_view(device_role));
    ins.bind(4, rowid);
    if (ins.step() != SQLITE_DONE) return db_error(db, path_, fmt::format("reuse the {} profile of split {}", side, k));
    ins.reset();
  }
  TRACR_TRY(tx.commit());
  std::sort(runs.begin(), runs.end());
  runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
  return runs;
}

Result<std::vector<ProbeRow>> ResultsDb::probes(int64_t run_id) {
  static const std::string sql = "SELECT run_id, COALESCE(participant, ''), COALESCE(link, ''), COALESCE(shaping, '')" +
                                 field_list(wire::probe_fields()) + " FROM probes WHERE run_id = ? ORDER BY id";
  return run_rows<ProbeRow>(db_.get(), path_, sql, run_id, "read probes", [](const Stmt& q, ProbeRow& p) {
    p.run_id = q.i64(0);
    p.participant = q.text(1);
    p.link = q.text(2);
    p.shaping = q.text(3);
    int c = 4;
    wire::visit_probe(p, [&](const wire::FieldInfo&, auto& v) { read_value(q, c++, v); });
  });
}

Result<std::optional<double>> ResultsDb::device_memory_mb(int64_t run_id, const std::string& device) {
  static const char* sql =
      "SELECT json_extract(d.value, '$.memory_mb') FROM (SELECT devices_json AS j FROM runs WHERE id = ? AND "
      "json_valid(devices_json)) r, json_each(r.j, '$.devices') d WHERE json_extract(d.value, '$.name') = ?";
  Stmt q(db_.get(), sql);
  if (!q.prepared()) return db_error(db_.get(), path_, "read devices_json");
  q.bind(1, run_id);
  q.bind(2, std::string_view(device));
  std::optional<double> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW)
    if (!q.is_null(0)) out = q.dbl(0);
  if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read devices_json");
  return out;
}

std::vector<EnergyStat> compute_energy_stats(const std::vector<EnergyRow>& rows, const FramePlacements& placements) {
  // Frame rows of timed frames only (idle and layer rows have no split).
  using Key = std::tuple<Cuts, std::string, std::string, std::string>;
  std::map<Key, std::pair<std::vector<double>, std::vector<double>>> g;
  std::map<Key, int64_t> n;
  for (const auto& r : rows) {
    if (!r.split || r.warmup) continue;
    const int split = static_cast<int>(*r.split);
    Cuts cuts{split};
    if (r.frame)
      if (auto it = placements.find({r.participant, *r.frame}); it != placements.end()) cuts = cuts_of(it->second, split);
    const auto key = std::make_tuple(cuts, r.device, r.stage, r.source);
    ++n[key];
    if (r.joules) g[key].first.push_back(*r.joules);
    if (r.net_joules) g[key].second.push_back(*r.net_joules);
  }
  std::vector<EnergyStat> out;
  for (auto& [key, count] : n) {
    EnergyStat e;
    const Cuts& cuts = std::get<0>(key);
    e.split = cuts.front();
    e.placement = placement_text(cuts);
    std::tie(std::ignore, e.device, e.stage, e.source) = key;
    e.n = count;
    auto& [gross, net] = g[key];
    if (!gross.empty()) {
      e.median_j = protocol::median_of(gross);
      e.p95_j = protocol::p95_of(gross);
    }
    if (!net.empty()) {
      e.median_net_j = protocol::median_of(net);
      e.p95_net_j = protocol::p95_of(net);
    }
    out.push_back(std::move(e));
  }
  return out;
}

Status ResultsDb::add_energy(const std::vector<EnergyRow>& rows) {
  if (rows.empty()) return {};
  for (const auto& e : rows)
    if (e.source.rfind("measured:", 0) != 0 && e.source.rfind("modelled:", 0) != 0)
      return make_error(Errc::invalid_argument,
                        fmt::format("energy source '{}': expected 'measured:<meter>' or 'modelled:<model>'", e.source));
  sqlite3* db = db_.get();
  Transaction tx(db, path_);
  TRACR_TRY(tx.begin());
  const auto& fields = wire::energy_fields();
  static const std::string sql = "INSERT INTO energy(run_id, device, participant" + field_list(fields) +
                                 ") VALUES (" + placeholders(fields.size() + 3) + ")";
  Stmt q(db, sql.c_str());
  if (!q.prepared()) return db_error(db, path_, "insert energy");
  for (const auto& e : rows) {
    q.bind(1, e.run_id);
    q.bind_text_or_null(2, e.device);
    q.bind_text_or_null(3, e.participant);
    int i = 4;
    wire::visit_energy(e, [&](const wire::FieldInfo&, const auto& v) { bind_value(q, i++, v); });
    if (q.step() != SQLITE_DONE) return db_error(db, path_, "insert energy of " + e.device);
    q.reset();
  }
  return tx.commit();
}

Result<std::vector<EnergyRow>> ResultsDb::energy(int64_t run_id) {
  static const std::string sql = "SELECT run_id, COALESCE(device, ''), COALESCE(participant, '')" +
                                 field_list(wire::energy_fields()) + " FROM energy WHERE run_id = ? ORDER BY id";
  return run_rows<EnergyRow>(db_.get(), path_, sql, run_id, "read energy", [](const Stmt& q, EnergyRow& e) {
    e.run_id = q.i64(0);
    e.device = q.text(1);
    e.participant = q.text(2);
    int c = 3;
    wire::visit_energy(e, [&](const wire::FieldInfo&, auto& v) { read_value(q, c++, v); });
  });
}

Result<std::vector<EnergyStat>> ResultsDb::energy_stats(int64_t run_id) {
  auto rows = energy(run_id);
  if (!rows) return std::move(rows.error());
  FramePlacements placements;  // only chain frames differ from their split
  Stmt q(db_.get(),
         "SELECT COALESCE(participant, ''), frame, placement FROM frames WHERE run_id = ? AND frame IS NOT NULL AND "
         "placement IS NOT NULL AND instr(placement, '|') > 0");
  if (!q.prepared()) return db_error(db_.get(), path_, "read frame placements");
  q.bind(1, run_id);
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) placements[{q.text(0), q.i64(1)}] = q.text(2);
  if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read frame placements");
  return compute_energy_stats(*rows, placements);
}

Result<std::vector<DeviceRecord>> ResultsDb::devices(int64_t run_id) {
  static const std::string sql = "SELECT run_id, device, role" + field_list(wire::hw_fields()) +
                                 " FROM devices WHERE run_id = ? ORDER BY role DESC, device";
  return run_rows<DeviceRecord>(db_.get(), path_, sql, run_id, "read devices", [](const Stmt& q, DeviceRecord& d) {
    d.run_id = q.i64(0);
    d.device = q.text(1);
    d.role = q.text(2);
    int c = 3;
    wire::visit_hw(d, [&](const wire::FieldInfo&, auto& v) { read_value(q, c++, v); });
  });
}

Result<std::vector<EventRecord>> ResultsDb::events(int64_t run_id) {
  Stmt q(db_.get(),
         "SELECT id, COALESCE(run_id, 0), ts, level, kind, message, COALESCE(device, ''), frame FROM events "
         "WHERE run_id = ? ORDER BY id");
  if (!q.prepared()) return db_error(db_.get(), path_, "read events");
  q.bind(1, run_id);
  std::vector<EventRecord> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    EventRecord e{q.i64(0), q.i64(1), q.text(2), q.text(3), q.text(4), q.text(5), q.text(6), std::nullopt};
    read_value(q, 7, e.frame);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read events");
  return out;
}

Result<std::vector<std::vector<std::optional<std::string>>>> ResultsDb::rows(const std::string& table,
                                                                             int64_t run_id) {
  const TableInfo* t = nullptr;
  for (const auto& x : schema_tables())
    if (x.name == table) t = &x;
  if (!t) return make_error(Errc::invalid_argument, "no table '" + table + "' in the results schema");
  std::string cols;
  for (const auto& c : t->columns) cols += (cols.empty() ? "" : ", ") + c.name;
  const std::string key = table == "runs" ? "id" : "run_id";
  std::string order = table == "frames" || table == "events" || table == "probes" || table == "energy" ? "id"
                      : table == "energy_stats" ? "split, placement, device, stage, source"
                      : table == "layer_profiles" ? "device, layer_index"
                      : table == "model_layers" ? "layer_index"
                      : table == "segment_profiles" ? "side, device, split"
                      : table == "stage_stats" ? "split, placement, field" : table == "runs" ? "id" : table == "devices" ? "device"
                      : table == "train_runs" ? "run_id" : table == "train_segments" ? "segment"
                      : table == "train_steps" || table == "train_checkpoints" ? "owner, step"
                      : table == "train_epochs" ? "owner, epoch"
                      : table == "frame_topk" ? "participant, frame, pos, rank"
                      : table == "frame_hops" ? "participant, frame, hop"
                      : table == "accuracy" ? "split, placement, codec"
                      : table == "outputs" ? "participant, split, codec, output"
                      : table == "summaries" ? "split, placement"
                      : "split";
  const std::string sql = "SELECT " + cols + " FROM " + table + " WHERE " + key + " = ? ORDER BY " + order;
  Stmt q(db_.get(), sql.c_str());
  if (!q.prepared()) return db_error(db_.get(), path_, "read " + table);
  q.bind(1, run_id);
  std::vector<std::vector<std::optional<std::string>>> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    std::vector<std::optional<std::string>> row;
    for (size_t i = 0; i < t->columns.size(); ++i) {
      const int c = static_cast<int>(i);
      if (q.is_null(c)) row.emplace_back(std::nullopt);
      else if (t->columns[i].type == "REAL") row.emplace_back(fmt::format("{}", q.dbl(c)));
      else row.emplace_back(q.text(c));
    }
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return db_error(db_.get(), path_, "read " + table);
  return out;
}

Status ResultsDb::insert_rows(const std::string& table, const std::vector<std::string>& columns,
                              const std::vector<std::vector<std::optional<std::string>>>& rows) {
  if (rows.empty()) return {};
  std::string cols, marks;
  for (const auto& c : columns) {
    cols += (cols.empty() ? "" : ", ") + c;
    marks += marks.empty() ? "?" : ", ?";
  }
  sqlite3* db = db_.get();
  Transaction tx(db, path_);
  TRACR_TRY(tx.begin());
  Stmt q(db, ("INSERT OR REPLACE INTO " + table + "(" + cols + ") VALUES (" + marks + ")").c_str());
  if (!q.prepared()) return db_error(db, path_, "insert into " + table);
  for (const auto& row : rows) {
    if (row.size() != columns.size())
      return make_error(Errc::internal, fmt::format("insert into {}: {} values for {} columns", table, row.size(),
                                                    columns.size()));
    q.reset();
    for (size_t i = 0; i < row.size(); ++i) {
      if (row[i]) q.bind(static_cast<int>(i + 1), std::string_view(*row[i]));
      else q.bind_null(static_cast<int>(i + 1));
    }
    if (q.step() != SQLITE_DONE) return db_error(db, path_, "insert into " + table);
  }
  return tx.commit();
}

Result<int64_t> run_id_arg(ResultsDb& db, const std::string& s) {
  if (s == "last" || s == "latest") return db.latest_run();
  char* e = nullptr;
  errno = 0;
  // last-N: the run N before the newest (runs in id order), so a walkthrough
  // can name the runs it just made without knowing their ids.
  if (s.rfind("last-", 0) == 0) {
    const long long back = std::strtoll(s.c_str() + 5, &e, 10);
    if (s.size() > 5 && !*e && !errno && back >= 0) {
      auto runs = db.list_runs();
      if (!runs) return runs.error();
      if (static_cast<size_t>(back) >= runs->size())
        return make_error(Errc::not_found, fmt::format("RUN {}: the database holds {} run(s), so there is no run {} "
                                                       "before the newest",
                                                       s, runs->size(), back));
      return (*runs)[static_cast<size_t>(back)].id;
    }
  }
  e = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &e, 10);
  if (s.empty() || *e || errno || v <= 0)
    return make_error(Errc::invalid_argument, "RUN: expected a run id (see `tracrctl results list`), 'last' or "
                                              "'last-N' (the run N before the newest), got '" + s + "'");
  return static_cast<int64_t>(v);
}

}  // namespace tracr::store
