// Results database on real files: schema and migrations, batched inserts,
// exact summaries, a controller killed mid-run (fork + SIGKILL), exports.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "analysis/chain_plan.hpp"
#include "analysis/tables.hpp"
#include "controller/cli/cli.hpp"
#include "controller/commands/results.hpp"
#include "store/export.hpp"
#include "protocol/crypto.hpp"
#include "wire/placement.hpp"
#include "store/results.hpp"

namespace tracr::controller {
using namespace tracr::store;
using namespace tracr::analysis;
namespace {

namespace fs = std::filesystem;

// `tracrctl results ARGS...` in this process, through tracrctl's own command line.
int cmd_results(std::vector<std::string> args) {
  args.insert(args.begin(), {"tracrctl", "results"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return tracrctl_main(static_cast<int>(argv.size()), argv.data());
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tracr-results-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// First column of the first row of `sql` as text.
std::string scalar(ResultsDb& db, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
  std::string out;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
    out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return out;
}

RunInfo info(const std::string& name = "test-run") {
  RunInfo i;
  i.name = name;
  i.config_yaml = "model: alexnet\n";
  i.tracr_version = "0.1.0";
  i.protocol_version = 1;
  i.model = "alexnet";
  i.codec = "none";
  i.cipher = "aes-256-gcm";
  i.devices_json = "{\"devices\":[]}";
  return i;
}

FrameRecord frame(int64_t run, int split, int64_t sample, int64_t total_ns) {
  FrameRecord f;
  f.run_id = run;
  f.participant = "participant";
  f.split = split;
  f.sample = sample;
  f.rep = 0;
  // The timing identity holds: total = head + encode + network + server + queue + return + post.
  f.head_ns = total_ns / 4;
  f.encode_ns = 10;
  f.server_ns = total_ns / 4;
  f.queue_ns = 0;
  f.return_ns = 5;
  f.post_ns = 0;
  f.network_ns = total_ns - f.head_ns - f.encode_ns - f.server_ns - f.return_ns;
  f.decode_ns = 20;
  f.tail_ns = total_ns / 4;
  f.total_ns = total_ns;
  f.start_ns = sample * 10 * total_ns;
  f.end_ns = f.start_ns + total_ns;
  f.raw_bytes = 1000;
  f.wire_bytes = 250;
  f.codec = "none";
  f.cipher = "aes-256-gcm";
  return f;
}

TEST(ResultsStats, MedianAndP95AreExact) {
  std::vector<int64_t> odd = {5, 1, 3};
  EXPECT_DOUBLE_EQ(median_of(odd), 3);
  std::vector<int64_t> even = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(median_of(even), 2.5);
  std::vector<int64_t> one = {7};
  EXPECT_DOUBLE_EQ(median_of(one), 7);
  EXPECT_DOUBLE_EQ(p95_of(one), 7);
  std::vector<int64_t> empty;
  EXPECT_DOUBLE_EQ(median_of(empty), 0);
  EXPECT_DOUBLE_EQ(p95_of(empty), 0);
  std::vector<int64_t> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(p95_of(hundred), 95);  // rank ceil(95) = 95
  std::vector<int64_t> twenty;
  for (int i = 1; i <= 20; ++i) twenty.push_back(i * 10);
  EXPECT_DOUBLE_EQ(p95_of(twenty), 190);  // rank ceil(19) = 19
  std::vector<int64_t> twentyone;
  for (int i = 1; i <= 21; ++i) twentyone.push_back(i);
  EXPECT_DOUBLE_EQ(p95_of(twentyone), 20);  // rank ceil(19.95) = 20
  std::vector<int64_t> big = {INT64_MAX - 1, INT64_MAX - 3};
  EXPECT_DOUBLE_EQ(median_of(big), static_cast<double>(INT64_MAX - 2));
}

TEST(ResultsDb, NewDatabaseHasSchemaWalAndForeignKeys) {
  TempDir dir;
  const std::string path = dir.file("nested/dir/tracr.db");
  auto db = ResultsDb::open(path);
  ASSERT_TRUE(db.ok()) << db.error().str();
  EXPECT_TRUE(fs::exists(path));
  auto v = db->schema_version();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, ResultsDb::kSchemaVersion);
  EXPECT_EQ(scalar(*db, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(scalar(*db, "PRAGMA foreign_keys"), "1");
  EXPECT_NE(scalar(*db, "PRAGMA busy_timeout"), "0");
  EXPECT_EQ(scalar(*db, "PRAGMA user_version"), std::to_string(ResultsDb::kSchemaVersion));
  for (const char* t :
       {"schema_migrations", "runs", "frames", "layer_profiles", "summaries", "events", "probes", "devices",
        "stage_stats", "energy", "energy_stats", "plans", "plan_rows", "segment_profiles", "plan_assignments", "frame_hops",
        "outputs", "model_layers"})
    EXPECT_EQ(
        scalar(*db, std::string("SELECT name FROM sqlite_master WHERE type='table' AND name='") + t + "'"),
        t);
  EXPECT_EQ(scalar(*db, "SELECT group_concat(version) FROM schema_migrations ORDER BY version"),
            "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26");
  // Reopening is a no-op.
  auto again = ResultsDb::open(path);
  ASSERT_TRUE(again.ok()) << again.error().str();
  EXPECT_EQ(scalar(*again, "SELECT COUNT(*) FROM schema_migrations"), std::to_string(ResultsDb::kSchemaVersion));
}

// A chain plan of more placements than are stored whole (kStoredPlacements):
// the chosen (here one a memory limit forced far down), the measured and the
// kStoredBest fastest are kept with their segments; the plan row counts every
// placement predicted. The whole-plan case is in RunLocal.AChainOfThree...
TEST(ResultsDb, ALargeChainPlanKeepsTheChosenTheMeasuredAndTheFastest) {
  TempDir dir;
  auto db = ResultsDb::open(dir.file("p.db"));
  ASSERT_TRUE(db.ok()) << db.error().str();
  RunInfo info;
  info.name = "chain";
  info.model = "m";
  auto run = db->begin_run(info);
  ASSERT_TRUE(run.ok()) << run.error().str();
  ChainPlan p;
  p.run = *run;
  p.model = "m";
  p.devices = {"phone", "edge", "cloud"};
  p.layers = 300;
  for (const auto& pl : tracr::wire::all_placements(2, p.layers)) {
    ChainPlanRow r;
    r.cuts = pl.cuts;
    r.placement = pl.text();
    r.head_ms = pl.cuts[0];
    r.compute_ms = {0.001 * (pl.cuts[1] - pl.cuts[0]), 0.0};
    r.link_ms = {1.0, 2.0};
    r.own_ms = {0.0, 0.0};
    r.wire_bytes = {100.0, 50.0};
    r.latency_ms = r.head_ms + r.compute_ms[0] + 3.0;
    if (pl.text() == "150|150") r.measured_ms = 140.0;
    if (pl.text() == "299|300") p.chosen = p.rows.size();
    p.rows.push_back(std::move(r));
  }
  p.measured = 1;
  ASSERT_EQ(p.rows.size(), 45451u);
  auto id = store_chain_plan(*db, p);
  ASSERT_TRUE(id.ok()) << id.error().str();
  const std::string where = " WHERE plan_id = " + std::to_string(*id);
  EXPECT_EQ(scalar(*db, "SELECT placements || ',' || chosen_placement || ',' || chain || ',' || validation_runs FROM "
                        "plans WHERE id = " + std::to_string(*id)),
            fmt::format("45451,299|300,phone -> edge -> cloud,{}", *run));
  EXPECT_EQ(scalar(*db, "SELECT COUNT(*) FROM plan_placements" + where), std::to_string(kStoredBest + 2));
  EXPECT_EQ(scalar(*db, "SELECT COUNT(*) FROM plan_segments" + where), std::to_string(3 * (kStoredBest + 2)));
  EXPECT_EQ(scalar(*db, "SELECT measured_ms FROM plan_placements" + where + " AND placement = '150|150'"), "140.0");
  // The fastest kept are the kStoredBest lowest latencies (latency rises with the first cut): every placement
  // whose first cut is 0..5 (1,791 of them), then 209 of those at 6, nothing later.
  EXPECT_EQ(scalar(*db, "SELECT SUM(head_ms <= 5) || ',' || MAX(head_ms) FROM plan_placements" + where +
                        " AND placement NOT IN ('150|150', '299|300')"),
            "1791,6.0");
  EXPECT_EQ(scalar(*db, "SELECT first_layer || '-' || end_layer || ',' || device FROM plan_segments" + where +
                        " AND placement = '299|300' AND position = 2"),
            "300-300,cloud");
}

// The field table and the schema description are the database: every table
// has exactly the columns schema_tables() lists, with their types. Adding a
// field to record_fields.def without a migration (or the reverse) fails here.
TEST(ResultsDb, DatabaseColumnsAreExactlyTheSchemaTable) {
  TempDir dir;
  auto db = ResultsDb::open(dir.file("s.db"));
  ASSERT_TRUE(db.ok()) << db.error().str();
  size_t tables = 0;
  for (const auto& t : schema_tables()) {
    ++tables;
    std::map<std::string, std::string> want, have;
    for (const auto& c : t.columns) want[c.name] = c.type;
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db->handle(), ("PRAGMA table_info(" + t.name + ")").c_str(), -1, &st, nullptr),
              SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
      have[reinterpret_cast<const char*>(sqlite3_column_text(st, 1))] =
          reinterpret_cast<const char*>(sqlite3_column_text(st, 2));
    sqlite3_finalize(st);
    EXPECT_EQ(have, want) << "table " << t.name;
  }
  EXPECT_EQ(scalar(*db, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"),
            std::to_string(tables));
  // Every agent field is a frames / layer_profiles / devices column.
  for (const auto& f : wire::frame_fields())
    EXPECT_EQ(scalar(*db, std::string("SELECT COUNT(*) FROM pragma_table_info('frames') WHERE name = '") + f.name + "'"), "1")
        << f.name;
}

TEST(ResultsDb, SchemaDocumentIsGeneratedFromTheTable) {
  // docs/SCHEMA.md is `tracrctl results schema --markdown`: regenerate it when this fails.
  const std::string doc = read_all(std::string(TRACR_SOURCE_DIR) + "/docs/SCHEMA.md");
  EXPECT_TRUE(doc == format_schema_markdown())
      << "docs/SCHEMA.md is stale: run ./build/bin/tracrctl results schema --markdown > docs/SCHEMA.md";
  const std::string text = format_schema_text();
  for (const auto& t : schema_tables())
    for (const auto& c : t.columns) EXPECT_NE(text.find(c.name), std::string::npos) << t.name << "." << c.name;
}

TEST(ResultsDb, EmptyV0FileIsMigrated) {
  TempDir dir;
  const std::string path = dir.file("v0.db");
  std::ofstream(path).close();  // zero bytes: an SQLite database with no schema
  ASSERT_EQ(fs::file_size(path), 0u);
  auto db = ResultsDb::open(path);
  ASSERT_TRUE(db.ok()) << db.error().str();
  EXPECT_EQ(*db->schema_version(), ResultsDb::kSchemaVersion);
  auto id = db->begin_run(info());
  ASSERT_TRUE(id.ok()) << id.error().str();
}

// Migration 23 (#46): an outputs row of a version-22 database keeps every
// column and gets output '' (one unnamed output, every value of a sample in
// one row); a new run's layers are kept by name (migration 24).
TEST(ResultsDb, OutputsRowsOfAVersion22DatabaseKeepTheirFilesWithNoOutputName) {
  TempDir dir;
  const std::string path = dir.file("v22.db");
  {
    auto v22 = ResultsDb::open_at_version(path, 22);
    ASSERT_TRUE(v22.ok()) << v22.error().str();
    ASSERT_TRUE(v22->begin_run(info()).ok());
    ASSERT_EQ(sqlite3_exec(v22->handle(),
                           "INSERT INTO outputs VALUES (1, 'p1', 3, 'none', 'outputs/run1/p1_split3_none.npy', '<f4', "
                           "'8,10', 2, 0, 1, 'ab', 'participant')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  auto db = ResultsDb::open(path);
  ASSERT_TRUE(db.ok()) << db.error().str();
  EXPECT_EQ(scalar(*db, "SELECT run_id || '|' || participant || '|' || split || '|' || path || '|' || shape || '|' || "
                        "sha256 || '|' || quote(output) FROM outputs"),
            "1|p1|3|outputs/run1/p1_split3_none.npy|8,10|ab|''");
  // Two outputs of one (participant, split, codec) are two rows now.
  EXPECT_EQ(sqlite3_exec(db->handle(),
                         "INSERT INTO outputs VALUES (1, 'p1', 3, 'none', 'x_aux.npy', '<f4', '8,21,4,4', 2, 0, 1, "
                         "'cd', 'participant', 'aux')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  RunInfo named = info();
  named.layer_names = {"conv1", "relu", "fc"};
  auto id = db->begin_run(named);
  ASSERT_TRUE(id.ok()) << id.error().str();
  EXPECT_EQ(scalar(*db, "SELECT group_concat(layer_index || ':' || name, ' ') FROM model_layers WHERE run_id = " +
                            std::to_string(*id)),
            "0:conv1 1:relu 2:fc");
}

TEST(ResultsDb, OlderSchemaIsUpgradedKeepingRows) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  {
    auto v1 = ResultsDb::open_at_version(path, 1);
    ASSERT_TRUE(v1.ok()) << v1.error().str();
    EXPECT_EQ(*v1->schema_version(), 1);
    EXPECT_EQ(scalar(*v1, "SELECT COUNT(*) FROM sqlite_master WHERE name='events'"), "0");
    // A run and frames as a version-1 build wrote them.
    ASSERT_EQ(sqlite3_exec(
                  v1->handle(),
                  "INSERT INTO runs(name, status, started_at, ended_at, model, controller_host, "
                  "controller_pid) VALUES ('old', 'completed', '2024-01-01T00:00:00.000Z', "
                  "'2024-01-01T00:00:01.000Z', 'vgg11', 'elsewhere', 1);"
                  "INSERT INTO frames(run_id, split, sample, rep, total_ns, transfer_ns, result_json, ok) "
                  "VALUES (1, 2, 0, 0, 100, 42, '{\"top1\":\"cat:0.9\",\"correct\":1}', 1);"
                  "INSERT INTO frames(run_id, split, sample, rep, total_ns, ok) VALUES (1, 2, 1, 0, 300, 1);",
                  nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  auto db = ResultsDb::open(path);
  ASSERT_TRUE(db.ok()) << db.error().str();
  EXPECT_EQ(*db->schema_version(), ResultsDb::kSchemaVersion);
  auto run = db->get_run(1);
  ASSERT_TRUE(run.ok()) << run.error().str();
  EXPECT_EQ(run->name, "old");
  EXPECT_EQ(run->model, "vgg11");
  EXPECT_EQ(run->frame_count, 2);
  auto table = db->split_table(1);
  ASSERT_TRUE(table.ok()) << table.error().str();
  ASSERT_EQ(table->size(), 1u);
  EXPECT_EQ((*table)[0].split, 2);
  EXPECT_DOUBLE_EQ((*table)[0].stage("total_ns").median_ns, 200);
  // Old rows keep their clamped transfer figure apart from the new columns.
  auto old = db->frames(1);
  ASSERT_TRUE(old.ok());
  ASSERT_EQ(old->size(), 2u);
  ASSERT_TRUE((*old)[0].legacy_transfer_ns.has_value());
  EXPECT_EQ(*(*old)[0].legacy_transfer_ns, 42);
  EXPECT_EQ((*old)[0].result, "cat:0.9");
  EXPECT_EQ((*old)[0].correct, 1);
  EXPECT_EQ(scalar(*db, "SELECT COUNT(*) FROM frames WHERE network_ns IS NULL"), "2");
}

// Migration 19 keys the summaries by placement: rows written before it keep
// every figure and are placed at their split.
TEST(ResultsDb, SummariesOfSchema18AreKeptAndPlacedAtTheirSplit) {
  TempDir dir;
  const std::string path = dir.file("v18.db");
  {
    auto v18 = ResultsDb::open_at_version(path, 18);
    ASSERT_TRUE(v18.ok()) << v18.error().str();
    ASSERT_EQ(sqlite3_exec(v18->handle(),
                           "INSERT INTO runs(name, status, started_at, ended_at, model, controller_host, "
                           "controller_pid) VALUES ('old', 'completed', '2026-01-01T00:00:00.000Z', "
                           "'2026-01-01T00:00:01.000Z', 'alexnet', 'elsewhere', 1);"
                           "INSERT INTO frames(run_id, split, sample, rep, total_ns, ok) VALUES (1, 4, 0, 0, 100, 1);"
                           "INSERT INTO summaries(run_id, split, frames, throughput_fps, labelled, top1_correct, "
                           "top1_acc) VALUES (1, 4, 7, 12.5, 10, 9, 0.9);"
                           "INSERT INTO stage_stats(run_id, split, field, median_ns, p95_ns) "
                           "VALUES (1, 4, 'total_ns', 1000, 2000);"
                           "INSERT INTO accuracy(run_id, split, codec, labelled, top1_correct, top5_correct, top1_acc) "
                           "VALUES (1, 4, 'none', 10, 9, 10, 0.9);"
                           "INSERT INTO energy_stats(run_id, split, device, stage, source, n, median_j) "
                           "VALUES (1, 4, 'phone', 'head', 'modelled:power_model', 7, 0.25);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  auto db = ResultsDb::open(path);
  ASSERT_TRUE(db.ok()) << db.error().str();
  EXPECT_EQ(scalar(*db, "SELECT placement || ' ' || split || ' ' || frames || ' ' || throughput_fps || ' ' || "
                        "top1_correct FROM summaries"),
            "4 4 7 12.5 9");
  EXPECT_EQ(scalar(*db, "SELECT placement || ' ' || median_ns FROM stage_stats"), "4 1000.0");
  EXPECT_EQ(scalar(*db, "SELECT placement || ' ' || codec || ' ' || top5_correct FROM accuracy"), "4 none 10");
  EXPECT_EQ(scalar(*db, "SELECT placement || ' ' || device || ' ' || median_j FROM energy_stats"), "4 phone 0.25");
  auto table = db->split_table(1);
  ASSERT_TRUE(table.ok()) << table.error().str();
  ASSERT_EQ(table->size(), 1u);
  EXPECT_EQ((*table)[0].placement, "4");
  EXPECT_EQ((*table)[0].frames, 7);
  EXPECT_DOUBLE_EQ((*table)[0].stage("total_ns").median_ns, 1000);
  // Deleting the run still cascades into the rebuilt tables.
  ASSERT_TRUE(db->delete_run(1).ok());
  for (const char* t : {"summaries", "stage_stats", "accuracy", "energy_stats"})
    EXPECT_EQ(scalar(*db, std::string("SELECT COUNT(*) FROM ") + t), "0") << t;
}

TEST(ResultsDb, NewerSchemaAndNonDatabasesAreRefused) {
  TempDir dir;
  const std::string path = dir.file("future.db");
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_EQ(sqlite3_exec(db->handle(), "INSERT INTO schema_migrations VALUES (99, 'future', 'x')", nullptr,
                           nullptr, nullptr),
              SQLITE_OK);
  }
  auto future = ResultsDb::open(path);
  ASSERT_FALSE(future.ok());
  EXPECT_EQ(future.error().code, Errc::config);
  EXPECT_NE(future.error().message.find("schema version 99 is newer"), std::string::npos)
      << future.error().message;

  const std::string junk = dir.file("junk.db");
  std::ofstream(junk) << std::string(4096, 'x');
  auto bad = ResultsDb::open(junk);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::io);
  EXPECT_NE(bad.error().message.find("junk.db: not an SQLite database"), std::string::npos)
      << bad.error().message;

  auto dirpath = ResultsDb::open(dir.file(""));
  ASSERT_FALSE(dirpath.ok());
  EXPECT_EQ(dirpath.error().code, Errc::io);
}

TEST(ResultsDb, BatchInsertAndExactSummaries) {
  TempDir dir;
  auto db = ResultsDb::open(dir.file("r.db"));
  ASSERT_TRUE(db.ok()) << db.error().str();
  auto run = db->begin_run(info());
  ASSERT_TRUE(run.ok()) << run.error().str();
  std::vector<FrameRecord> batch;
  // Split 0: totals 1..10 ms (even count).
  for (int i = 1; i <= 10; ++i) batch.push_back(frame(*run, 0, i, i * 1000000LL));
  // Split 3: totals 1..21 ms (odd count), wire bytes vary.
  for (int i = 1; i <= 21; ++i) {
    auto f = frame(*run, 3, i, i * 1000000LL);
    f.wire_bytes = i * 10;
    batch.push_back(f);
  }
  // Warm-up frames and failed frames stay out of the statistics.
  for (int i = 0; i < 3; ++i) {
    auto w = frame(*run, 0, i, 999000000000LL);
    w.warmup = true;
    batch.push_back(w);
  }
  auto bad = frame(*run, 3, 99, 5);
  bad.ok = false;
  bad.error = "timeout: no INFER_RESULT within 5000 ms";
  batch.push_back(bad);
  ASSERT_TRUE(db->add_frames(batch).ok());
  ASSERT_TRUE(db->finish_run(*run, RunStatus::completed).ok());

  auto table = db->split_table(*run);
  ASSERT_TRUE(table.ok()) << table.error().str();
  ASSERT_EQ(table->size(), 2u);
  const SplitSummary& s0 = (*table)[0];
  EXPECT_EQ(s0.split, 0);
  EXPECT_EQ(s0.frames, 10);
  EXPECT_EQ(s0.failed, 0);
  EXPECT_EQ(s0.warmup_frames, 3);
  EXPECT_DOUBLE_EQ(s0.stage("total_ns").median_ns, 5500000);  // (5 + 6) / 2 ms
  EXPECT_DOUBLE_EQ(s0.stage("total_ns").p95_ns, 10000000);    // rank ceil(9.5) = 10
  EXPECT_DOUBLE_EQ(s0.stage("network_ns").median_ns, 2749985);  // total/2 - 15
  EXPECT_DOUBLE_EQ(s0.stage("encode_ns").median_ns, 10);
  EXPECT_DOUBLE_EQ(s0.stage("total_ns").min_ns, 1000000);
  EXPECT_DOUBLE_EQ(s0.stage("total_ns").max_ns, 10000000);
  // Frame i starts at 10 i^2 ms and lasts i ms: 10 frames from 10 ms to 1010 ms.
  EXPECT_NEAR(s0.throughput_fps, 10.0, 1e-9);
  EXPECT_DOUBLE_EQ(s0.mean_raw_bytes, 1000);
  EXPECT_DOUBLE_EQ(s0.mean_wire_bytes, 250);
  const SplitSummary& s3 = (*table)[1];
  EXPECT_EQ(s3.split, 3);
  EXPECT_EQ(s3.frames, 21);
  EXPECT_EQ(s3.failed, 1);
  EXPECT_DOUBLE_EQ(s3.stage("total_ns").median_ns, 11000000);
  EXPECT_DOUBLE_EQ(s3.stage("total_ns").p95_ns, 20000000);   // rank ceil(19.95) = 20
  EXPECT_DOUBLE_EQ(s3.stage("head_ns").median_ns, 2750000);  // 11 ms / 4
  EXPECT_DOUBLE_EQ(s3.mean_wire_bytes, 110);     // mean of 10..210

  // The stored summaries are what split_table returned.
  EXPECT_EQ(scalar(*db, "SELECT median_ns FROM stage_stats WHERE split = 3 AND field = 'total_ns'"), "11000000.0");
  EXPECT_EQ(scalar(*db, "SELECT warmup_frames FROM summaries WHERE split = 0"), "3");
  EXPECT_EQ(scalar(*db, "SELECT COUNT(*) FROM frames"), "35");
  auto frames = db->frames(*run);
  ASSERT_TRUE(frames.ok());
  ASSERT_EQ(frames->size(), 35u);
  EXPECT_EQ(frames->back().error, "timeout: no INFER_RESULT within 5000 ms");
  EXPECT_FALSE(frames->back().ok);
  EXPECT_FALSE(frames->back().link_est_mbps.has_value());
}

TEST(ResultsDb, FrameBatchIsAllOrNothing) {
  TempDir dir;
  auto db = ResultsDb::open(dir.file("r.db"));
  ASSERT_TRUE(db.ok());
  auto run = db->begin_run(info());
  ASSERT_TRUE(run.ok());
  std::vector<FrameRecord> batch = {frame(*run, 1, 0, 100), frame(*run, 1, 1, 100),
                                    frame(*run + 42, 1, 2, 100)};
  Status s = db->add_frames(batch);
  ASSERT_FALSE(s.ok());  // foreign key: run *run + 42 does not exist
  EXPECT_EQ(s.error().code, Errc::io);
  EXPECT_NE(s.error().message.find("FOREIGN KEY"), std::string::npos) << s.error().message;
  EXPECT_EQ(scalar(*db, "SELECT COUNT(*) FROM frames"), "0");

  // Energy rows: a source that is neither measured: nor modelled: is refused
  // (nothing of the batch stored); labelled rows come back as written.
  EnergyRow e;
  e.run_id = *run;
  e.device = "edge";
  e.participant = "edge";
  e.side = "participant";
  e.stage = "head";
  e.frame = 0;
  e.split = 1;
  e.joules = 1.5;
  e.source = "guessed";
  Status es = db->add_energy({e});
  ASSERT_FALSE(es.ok());
  EXPECT_EQ(es.error().code, Errc::invalid_argument);
  EXPECT_EQ(scalar(*db, "SELECT COUNT(*) FROM energy"), "0");
  e.source = "modelled:power_model";
  ASSERT_TRUE(db->add_energy({e}).ok());
  auto back = db->energy(*run);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 1u);
  EXPECT_DOUBLE_EQ(back->at(0).joules.value(), 1.5);
  EXPECT_FALSE(back->at(0).net_joules.has_value());  // NULL stays NULL
  EXPECT_EQ(back->at(0).source, "modelled:power_model");
  EXPECT_EQ(back->at(0).split, std::optional<int64_t>(1));
  EXPECT_FALSE(back->at(0).layer_index.has_value());
}

TEST(ResultsDb, RunLifecycleEventsAndProfiles) {
  TempDir dir;
  auto db = ResultsDb::open(dir.file("r.db"));
  ASSERT_TRUE(db.ok());
  auto a = db->begin_run(info("first"));
  auto b = db->begin_run(info("second"));
  ASSERT_TRUE(a.ok() && b.ok());
  auto running = db->get_run(*a);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->status, RunStatus::running);
  EXPECT_EQ(running->controller_pid, getpid());
  EXPECT_EQ(running->config_yaml, "model: alexnet\n");
  EXPECT_EQ(running->devices_json, "{\"devices\":[]}");
  EXPECT_TRUE(running->ended_at.empty());

  ASSERT_TRUE(db->add_event(*a, "warn", "split_switched", "split 3 -> 4").ok());
  ASSERT_TRUE(db->add_event(0, "info", "note", "outside any run").ok());
  EXPECT_EQ(db->add_event(*a, "loud", "x", "y").error().code, Errc::invalid_argument);

  LayerProfileRecord l;
  l.run_id = *a;
  l.device = "server";
  l.device_role = "SERVER";
  l.layer_index = 0;
  l.name = "features.0";
  l.type = "Conv2d";
  l.params = 23296;
  l.macs = 70276800;
  l.out_bytes = 774400;
  l.median_ns = 1200000;
  l.p95_ns = 1500000;
  l.reps = 10;
  LayerProfileRecord l2 = l;
  l2.layer_index = 1;
  l2.peak_mem_bytes = 4096;
  ASSERT_TRUE(db->add_layer_profiles({l, l2}).ok());
  auto layers = db->layer_profiles(*a);
  ASSERT_TRUE(layers.ok());
  ASSERT_EQ(layers->size(), 2u);
  EXPECT_EQ(layers->at(0).macs, 70276800);
  EXPECT_FALSE(layers->at(0).peak_mem_bytes.has_value());
  EXPECT_EQ(layers->at(1).peak_mem_bytes.value(), 4096);

  ASSERT_TRUE(db->finish_run(*a, RunStatus::failed, "agent lost: participant").ok());
  auto failed = db->get_run(*a);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->status, RunStatus::failed);
  EXPECT_EQ(failed->error, "agent lost: participant");
  EXPECT_FALSE(failed->ended_at.empty());
  auto ev = db->events(*a);
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 3u);
  EXPECT_EQ(ev->at(0).kind, "run_started");
  EXPECT_EQ(ev->at(1).kind, "split_switched");
  EXPECT_EQ(ev->at(2).kind, "run_finished");
  EXPECT_EQ(ev->at(2).level, "error");

  auto runs = db->list_runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ(runs->at(0).name, "second");  // newest first
  EXPECT_EQ(*db->latest_run(), *b);
  auto limited = db->list_runs(1);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->size(), 1u);

  auto missing = db->get_run(12345);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::not_found);
  EXPECT_EQ(db->finish_run(12345, RunStatus::completed).error().code, Errc::not_found);
  EXPECT_EQ(db->split_table(12345).error().code, Errc::not_found);
}

// A controller that begins a run, writes frames in batches and is killed
// with SIGKILL mid-run: reopening marks the run interrupted, the frames
// committed before the kill are all there and intact.
TEST(ResultsDb, KilledControllerRunIsMarkedInterruptedAndKeepsFrames) {
  TempDir dir;
  const std::string path = dir.file("killed.db");
  { ASSERT_TRUE(ResultsDb::open(path).ok()); }
  int to_parent[2];
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  // Never leave the child running, whatever assertion fails below.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{child};
  if (child == 0) {
    reaper.pid = 0;
    close(to_parent[0]);
    auto db = ResultsDb::open(path);
    if (!db) _exit(10);
    auto run = db->begin_run(info("doomed"));
    if (!run) _exit(11);
    for (int batch = 0;; ++batch) {
      std::vector<FrameRecord> frames;
      for (int i = 0; i < 50; ++i) {
        const int64_t sample = batch * 50 + i;
        auto f = frame(*run, batch % 4, sample, 1000 + sample);
        f.result = "top1:" + std::to_string(sample);
        frames.push_back(f);
      }
      if (!db->add_frames(frames)) _exit(12);
      // Report (run id, batches committed) after each commit.
      int64_t msg[2] = {*run, batch + 1};
      if (write(to_parent[1], msg, sizeof msg) != sizeof msg) _exit(13);
    }
  }
  close(to_parent[1]);
  int64_t msg[2] = {0, 0};
  // Wait until at least 5 batches are committed, then check the run is still
  // 'running' while its controller lives.
  while (msg[1] < 5) ASSERT_EQ(read(to_parent[0], msg, sizeof msg), static_cast<ssize_t>(sizeof msg));
  const int64_t run_id = msg[0];
  {
    auto live = ResultsDb::open(path);
    ASSERT_TRUE(live.ok()) << live.error().str();
    EXPECT_TRUE(live->interrupted_on_open().empty());
    EXPECT_EQ(live->get_run(run_id)->status, RunStatus::running);
  }
  // Read the latest report, kill, reap.
  while (true) {
    ssize_t n = read(to_parent[0], msg, sizeof msg);
    ASSERT_EQ(n, static_cast<ssize_t>(sizeof msg));
    if (msg[1] >= 8) break;
  }
  const int64_t committed = msg[1];
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  reaper.pid = 0;
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  close(to_parent[0]);

  auto db = ResultsDb::open(path);
  ASSERT_TRUE(db.ok()) << db.error().str();
  ASSERT_EQ(db->interrupted_on_open(), std::vector<int64_t>{run_id});
  auto run = db->get_run(run_id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::interrupted);
  EXPECT_FALSE(run->ended_at.empty());
  EXPECT_NE(run->error.find("controller process " + std::to_string(child)), std::string::npos) << run->error;
  EXPECT_EQ(scalar(*db, "PRAGMA integrity_check"), "ok");

  // Every committed batch is complete; at most the batch in flight is
  // missing, never half of one.
  auto frames = db->frames(run_id);
  ASSERT_TRUE(frames.ok());
  ASSERT_GE(static_cast<int64_t>(frames->size()), committed * 50);
  EXPECT_EQ(frames->size() % 50, 0u);
  for (size_t i = 0; i < frames->size(); ++i) {
    const auto& f = (*frames)[i];
    ASSERT_EQ(f.sample, static_cast<int64_t>(i));
    EXPECT_EQ(f.total_ns, 1000 + f.sample);
    EXPECT_EQ(f.split, static_cast<int>((f.sample / 50) % 4));
    EXPECT_EQ(f.result, "top1:" + std::to_string(f.sample));
  }
  // Summaries were computed for the interrupted run, and the event recorded.
  auto table = db->split_table(run_id);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->size(), 4u);
  auto ev = db->events(run_id);
  ASSERT_TRUE(ev.ok());
  ASSERT_FALSE(ev->empty());
  EXPECT_EQ(ev->back().kind, "run_interrupted");

  // Opening again changes nothing.
  auto again = ResultsDb::open(path);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->interrupted_on_open().empty());
}

// ---------------------------------------------------------------------------
// results CLI

class ResultsCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path = dir.file("cli.db");
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    auto a = db->begin_run(info("baseline"));
    ASSERT_TRUE(a.ok());
    run = *a;
    auto f1 = frame(run, 0, 0, 2000000);
    f1.result = "a, \"quoted\" class:0.5";
    auto f2 = frame(run, 2, 0, 1000000);
    f2.wire_bytes = 100;
    auto f3 = frame(run, 2, 1, 3000000);
    f3.ok = false;
    f3.error = "decompress_failed: bad block, \"x\"";
    f3.link_est_mbps = 0.25;
    f3.flags = "negative_network";
    ASSERT_TRUE(db->add_frames({f1, f2, f3}).ok());
    // Two timed frames' energy at split 2, one warm-up frame's (left out of the statistics).
    std::vector<EnergyRow> en;
    for (int i = 0; i < 3; ++i) {
      EnergyRow e;
      e.run_id = run;
      e.device = "edge";
      e.participant = "edge";
      e.side = "participant";
      e.stage = "head";
      e.frame = i;
      e.split = 2;
      e.warmup = i == 0;
      e.source = "measured:rapl:package-0";
      e.joules = 0.5 + i;
      e.net_joules = 0.25 + i;
      e.idle_w = 2.0;
      en.push_back(e);
    }
    ASSERT_TRUE(db->add_energy(en).ok());
    ASSERT_TRUE(db->finish_run(run, RunStatus::completed).ok());
    auto b = db->begin_run(info("fp16"));
    ASSERT_TRUE(b.ok());
    run2 = *b;
    ASSERT_TRUE(db->add_frames({frame(run2, 0, 0, 1000000), frame(run2, 2, 0, 500000)}).ok());
    ASSERT_TRUE(db->finish_run(run2, RunStatus::completed).ok());
  }
  // Runs cmd_results with stdout captured into *out.
  int run_cli(std::vector<std::string> args, std::string* out) {
    const std::string cap = dir.file("stdout.txt");
    std::fflush(stdout);
    int saved = dup(1);
    FILE* f = std::fopen(cap.c_str(), "w");
    dup2(fileno(f), 1);
    int rc = cmd_results(args);
    std::fflush(stdout);
    dup2(saved, 1);
    close(saved);
    std::fclose(f);
    *out = read_all(cap);
    return rc;
  }
  TempDir dir;
  std::string path;
  int64_t run = 0, run2 = 0;
};

TEST_F(ResultsCliTest, ExportCsvHasEveryColumnAndEscapedRows) {
  const std::string csv = dir.file("out/run.csv");
  fs::create_directories(dir.file("out"));
  std::string out;
  ASSERT_EQ(run_cli({"export", std::to_string(run), "--csv", csv, "--db", path}, &out), 0) << out;
  const std::string text = read_all(csv);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l.substr(0, l.size() - (l.back() == '\r')));
  ASSERT_EQ(lines.size(), 4u) << text;
  // The header is every frames column of the schema, in order, then the run's name and the cut's layer.
  std::string header;
  for (const auto& t : schema_tables())
    if (t.name == "frames")
      for (const auto& c : t.columns) header += (header.empty() ? "" : ",") + c.name;
  EXPECT_EQ(lines[0], header + ",run_name,layer");
  // Values, by column name (cells parsed with an RFC 4180 reader of our own).
  auto cells = [](const std::string& line) {
    std::vector<std::string> v(1);
    bool q = false;
    for (size_t i = 0; i < line.size(); ++i) {
      char ch = line[i];
      if (q && ch == '"' && i + 1 < line.size() && line[i + 1] == '"') v.back() += '"', ++i;
      else if (ch == '"') q = !q;
      else if (ch == ',' && !q) v.emplace_back();
      else v.back() += ch;
    }
    return v;
  };
  auto col = [&](const std::string& name) {
    auto h = cells(lines[0]);
    return static_cast<size_t>(std::find(h.begin(), h.end(), name) - h.begin());
  };
  auto r1 = cells(lines[1]), r3 = cells(lines[3]);
  ASSERT_EQ(r1.size(), cells(lines[0]).size());
  EXPECT_EQ(r1[col("result")], "a, \"quoted\" class:0.5");
  EXPECT_EQ(r1[col("network_ns")], std::to_string(2000000 - 500000 - 10 - 500000 - 5));
  EXPECT_EQ(r1[col("link_est_mbps")], "");  // NULL stays empty, never 0
  EXPECT_EQ(r1[col("run_name")], "baseline");
  EXPECT_EQ(r1[col("layer")], "(input)");  // split 0
  EXPECT_EQ(r3[col("error")], "decompress_failed: bad block, \"x\"");
  EXPECT_EQ(r3[col("link_est_mbps")], "0.25");
  EXPECT_EQ(r3[col("flags")], "negative_network");
  EXPECT_EQ(r3[col("ok")], "0");
}

TEST_F(ResultsCliTest, ExportOfSeveralRunsIsTidyCsvThatPandasReads) {
  const std::string summary = dir.file("summary.csv"), frames = dir.file("frames.csv");
  {
    // Split 2 cuts after layer 1: both CSVs name it.
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    LayerProfileRecord lp;
    lp.run_id = run;
    lp.device = "edge";
    lp.device_role = "PARTICIPANT";
    lp.layer_index = 1;
    lp.name = "features.1";
    ASSERT_TRUE(db->add_layer_profiles({lp}).ok());
  }
  std::string out;
  ASSERT_EQ(run_cli({"export", std::to_string(run), std::to_string(run2), "--summary-csv", summary, "--csv", frames,
                     "--db", path},
                    &out),
            0)
      << out;
  EXPECT_NE(out.find("2 run(s)"), std::string::npos) << out;
  // --json writes one run: several are a usage error naming the options that take several.
  EXPECT_EQ(run_cli({"export", std::to_string(run), std::to_string(run2), "--json", dir.file("x.json"), "--db", path},
                    &out),
            2);
  // Debian's python3 with python3-pandas reads both files as they are.
  const std::string py = "/usr/bin/python3";
  if (std::system((py + " -c 'import pandas' 2>/dev/null").c_str()) != 0) {
    if (std::getenv("CI")) FAIL() << "python3-pandas missing: scripts/setup.sh installs it";
    GTEST_SKIP() << "python3-pandas not installed (apt-get install python3-pandas)";
  }
  const std::string script = dir.file("check.py");
  std::ofstream(script) << std::string(
      "import sys, pandas as pd\n"
      "d = pd.read_csv(sys.argv[1])\n"
      "assert not d.duplicated(['run_id', 'split', 'stage']).any(), 'one row per run x split x stage'\n"
      "f = pd.read_csv(sys.argv[2])\n"
      "print('runs', ' '.join(str(r) for r in sorted(d['run_id'].unique())))\n"
      "print('frame_runs', ' '.join(str(r) for r in sorted(f['run_id'].unique())))\n"
      "t = d[d['stage'] == 'total'].sort_values(['run_id', 'split'])\n"
      "for r in t.itertuples():\n"
      "    print('total', r.run_id, r.split, r.codec, r.frames, '%.6f' % r.median_ms, '%.6f' % r.p95_ms)\n"
      "print('names', ' '.join(sorted(set(d['run_name']) & set(f['run_name']))))\n"
      "print('layers', ' '.join(sorted(set(f['layer'].dropna()) & set(d['layer'].dropna()))))\n"
      "print('stages', ' '.join(sorted(d['stage'].unique())))\n");
  const std::string res = dir.file("res.txt");
  ASSERT_EQ(std::system((py + " " + script + " " + summary + " " + frames + " > " + res + " 2>&1").c_str()), 0)
      << read_all(res);
  const std::string text = read_all(res);
  EXPECT_NE(text.find(fmt::format("runs {} {}\n", run, run2)), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("frame_runs {} {}\n", run, run2)), std::string::npos) << text;
  // One naming across exports: run_id and run_name in both, and the cut's layer.
  EXPECT_NE(text.find("names baseline fp16\n"), std::string::npos) << text;
  EXPECT_NE(text.find("layers (input) features.1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("head"), std::string::npos) << text;
  // Every total row equals the run's summary from the database.
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  size_t checked = 0;
  for (int64_t id : {run, run2}) {
    auto sums = db->split_table(id);
    ASSERT_TRUE(sums.ok());
    auto r = db->get_run(id);
    ASSERT_TRUE(r.ok());
    for (const auto& s : *sums) {
      if (!s.stages.count("total_ns")) continue;
      const std::string line = fmt::format("total {} {} {} {} {:.6f} {:.6f}\n", id, s.split, r->codec, s.frames,
                                           s.stage("total_ns").median_ns / 1e6, s.stage("total_ns").p95_ns / 1e6);
      EXPECT_NE(text.find(line), std::string::npos) << line << text;
      ++checked;
    }
  }
  EXPECT_GE(checked, 3u);
}

TEST_F(ResultsCliTest, LastMinusNNamesARunByItsPlaceFromTheNewest) {
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*run_id_arg(*db, "last-0"), run2);
  EXPECT_EQ(*run_id_arg(*db, "last-1"), run);
  auto far = run_id_arg(*db, "last-2");
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.error().message.find("holds 2 run(s)"), std::string::npos) << far.error().message;
  EXPECT_FALSE(run_id_arg(*db, "last-x").ok());
  std::string out;
  ASSERT_EQ(run_cli({"compare", "last-1", "last", "--db", path}, &out), 0) << out;
}

TEST_F(ResultsCliTest, ExportJsonHoldsRunSummariesFramesAndEvents) {
  const std::string js = dir.file("run.json");
  std::string out;
  ASSERT_EQ(run_cli({"export", "--db", path, std::to_string(run), "--json", js}, &out), 0) << out;
  const std::string text = read_all(js);
  EXPECT_NE(text.find("\"run\": {\"id\":" + std::to_string(run) +
                      ",\"name\":\"baseline\",\"status\":\"completed\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("{\"split\":2,\"frames\":1,\"failed\":1,"), std::string::npos) << text;
  EXPECT_NE(text.find("{\"split\":2,\"field\":\"total_ns\",\"median_ns\":1000000,\"p95_ns\":1000000"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"error\":\"decompress_failed: bad block, \\\"x\\\"\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"link_est_mbps\":0.25"), std::string::npos) << text;
  // Energy: every row and the per-split statistics, each beside its source.
  EXPECT_NE(text.find("\"source\":\"measured:rapl:package-0\",\"joules\":2.5,\"net_joules\":2.25"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\"energy_stats\": [\n  {\"run_id\":" + std::to_string(run) +
                      ",\"split\":2,\"device\":\"edge\",\"stage\":\"head\",\"source\":\"measured:rapl:package-0\","
                      "\"n\":2,\"median_j\":2,\"p95_j\":2.5,\"median_net_j\":1.75,\"p95_net_j\":2.25,\"placement\":\"2\"}]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"result\":\"a, \\\"quoted\\\" class:0.5\""), std::string::npos) << text;
  // The accuracy, top-k, outputs and chain hop tables travel too (empty for this run: no labels, no
  // top-k rows, two tiers).
  for (const char* t : {"\"accuracy\": [", "\"frame_topk\": [", "\"outputs\": [", "\"frame_hops\": ["})
    EXPECT_NE(text.find(t), std::string::npos) << t;
  EXPECT_NE(text.find("\"kind\":\"run_started\""), std::string::npos);
  EXPECT_NE(text.find("\"layer_profiles\": []"), std::string::npos);
  EXPECT_NE(text.find("\"config_yaml\":\"model: alexnet\\n\""), std::string::npos);
  // Well-formed JSON, checked by an independent parser when one is installed.
  if (fs::exists("/usr/bin/python3")) {
    const std::string cmd =
        "/usr/bin/python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); "
        "assert len(d['frames'])==3 and d['summaries'][1]['failed']==1\" " +
        js;
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
}

TEST_F(ResultsCliTest, ListShowCompareAndUsageErrors) {
  std::string out;
  ASSERT_EQ(run_cli({"list", "--db", path}, &out), 0);
  EXPECT_NE(out.find("baseline"), std::string::npos) << out;
  EXPECT_NE(out.find("fp16"), std::string::npos) << out;
  EXPECT_LT(out.find("fp16"), out.find("baseline")) << out;  // newest first

  ASSERT_EQ(run_cli({"show", "last", "--db", path}, &out), 0);
  EXPECT_NE(out.find("run " + std::to_string(run2) + "  fp16  [completed]"), std::string::npos) << out;
  EXPECT_NE(out.find("cut after"), std::string::npos) << out;
  EXPECT_EQ(out.find("encode med"), std::string::npos) << out;  // within 120 columns: not every stage
  EXPECT_NE(out.find("run_started"), std::string::npos) << out;
  ASSERT_EQ(run_cli({"show", "last", "--wide", "--db", path}, &out), 0);
  EXPECT_NE(out.find("total med"), std::string::npos) << out;
  EXPECT_NE(out.find("encode med"), std::string::npos) << out;

  ASSERT_EQ(run_cli({"compare", std::to_string(run), std::to_string(run2), "--db", path}, &out), 0);
  EXPECT_NE(out.find("-50.0%"), std::string::npos) << out;  // split 0: 2 ms -> 1 ms

  EXPECT_EQ(run_cli({"show", "999", "--db", path}, &out), 1);
  EXPECT_EQ(run_cli({"show", "abc", "--db", path}, &out), 2);
  EXPECT_EQ(run_cli({"export", std::to_string(run), "--db", path}, &out), 2);
  EXPECT_EQ(run_cli({"frobnicate"}, &out), 2);
  EXPECT_EQ(run_cli({"list", "--bogus", "--db", path}, &out), 2);
  EXPECT_EQ(
      run_cli({"export", std::to_string(run), "--csv", dir.file("no/such/dir/x.csv"), "--db", path}, &out),
      1);
}

TEST_F(ResultsCliTest, RmDeletesTheRunAndEveryRowOfIt) {
  {
    // Rows in more tables than the fixture fills: a layer profile, a probe, a
    // device, a plan based on the run.
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    LayerProfileRecord lp;
    lp.run_id = run;
    lp.device = "edge";
    lp.device_role = "PARTICIPANT";
    ASSERT_TRUE(db->add_layer_profiles({lp}).ok());
    ProbeRow pr;
    pr.run_id = run;
    pr.participant = "edge";
    ASSERT_TRUE(db->add_probe(pr).ok());
    DeviceRecord dr;
    dr.run_id = run;
    dr.device = "edge";
    dr.role = "PARTICIPANT";
    ASSERT_TRUE(db->add_device(dr).ok());
    ASSERT_TRUE(db->insert_rows("plans", {"basis_run", "created_at"}, {{std::to_string(run), "now"}}).ok())
        << "plans columns changed";
  }
  // Every table with a run_id column (basis_run for plans) and how many rows each run has there.
  auto counts = [&](int64_t id) {
    auto db = ResultsDb::open_readonly(path);
    EXPECT_TRUE(db.ok());
    std::map<std::string, int64_t> c;
    for (const auto& t : schema_tables())
      for (const auto& col : t.columns)
        if (col.name == "run_id" || (t.name == "plans" && col.name == "basis_run"))
          c[t.name] = std::stoll(scalar(*db, "SELECT COUNT(*) FROM " + t.name + " WHERE " + col.name + " = " +
                                                 std::to_string(id)));
    return c;
  };
  const auto before = counts(run), other_before = counts(run2);
  for (const char* t : {"frames", "events", "summaries", "energy", "energy_stats", "layer_profiles", "probes",
                        "devices", "plans"})
    EXPECT_GT(before.at(t), 0) << t << ": the test should have rows there";

  std::string out;
  ASSERT_EQ(run_cli({"rm", std::to_string(run), "--db", path}, &out), 0) << out;
  EXPECT_NE(out.find("removed run " + std::to_string(run) + " 'baseline'"), std::string::npos) << out;
  for (const auto& [table, n] : counts(run)) EXPECT_EQ(n, 0) << table << " kept rows of the removed run";
  EXPECT_EQ(counts(run2), other_before);  // the other run is untouched
  {
    auto db = ResultsDb::open_readonly(path);
    ASSERT_TRUE(db.ok());
    EXPECT_EQ(db->get_run(run).error().code, Errc::not_found);
    EXPECT_EQ(scalar(*db, "PRAGMA foreign_key_check"), "");
  }
  // Mistakes: no such run (1), not a run id or none at all (2), nothing deleted.
  EXPECT_EQ(run_cli({"rm", std::to_string(run), "--db", path}, &out), 1);
  EXPECT_EQ(run_cli({"rm", "abc", "--db", path}, &out), 2);
  EXPECT_EQ(run_cli({"rm", "--db", path}, &out), 2);
  EXPECT_EQ(run_cli({"rm", "1", "--db", dir.file("missing.db")}, &out), 1);
  EXPECT_FALSE(fs::exists(dir.file("missing.db")));
  // A run still running (this process is its controller) is refused.
  int64_t live = 0;
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    auto id = db->begin_run(info("live"));
    ASSERT_TRUE(id.ok());
    live = *id;
    EXPECT_EQ(db->delete_run(live).error().code, Errc::invalid_argument);
  }
  EXPECT_EQ(run_cli({"rm", std::to_string(live), "--db", path}, &out), 1);
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  EXPECT_TRUE(db->get_run(live).ok());
  EXPECT_TRUE(db->get_run(run2).ok());
}

// record.outputs files of runs recorded when databases in one folder shared
// outputs/run<ID>/ (#46): rm removes the files that are still the run's and
// keeps, naming it, one another database rewrote.
TEST_F(ResultsCliTest, RmKeepsAnOutputsFileAnotherDatabaseRewrote) {
  const fs::path base = fs::path(path).parent_path();
  const fs::path old_dir = base / "outputs" / ("run" + std::to_string(run));
  fs::create_directories(old_dir);
  auto hex = [](const std::string& b) {
    const auto h = tracr::protocol::sha256(reinterpret_cast<const uint8_t*>(b.data()), b.size());
    return tracr::protocol::to_hex(h.data(), h.size());
  };
  auto write = [](const fs::path& f, const std::string& b) { std::ofstream(f, std::ios::binary) << b; };
  write(old_dir / "edge_split3_none.npy", "this run's logits");
  write(old_dir / "edge_split6_none.npy", "another database's logits");
  // The new layout: a listed file edited since (kept, with its folder) and a stopped run's .part (removed).
  const fs::path new_dir = base / tracr::store::outputs_dir(path, run);
  fs::create_directories(new_dir);
  write(new_dir / "edge_split9_none.npy", "edited since");
  write(new_dir / "edge_split12_none.npy.part", "half written");
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    for (const auto& [split, content] : {std::pair<const char*, const char*>{"3", "this run's logits"},
                                         {"6", "this run's logits, since rewritten"},
                                         {"9", "this run's logits, since edited"}}) {
      const std::string rel = (std::string(split) == "9" ? tracr::store::outputs_dir(path, run).string()
                                                         : "outputs/run" + std::to_string(run)) +
                              "/edge_split" + split + "_none.npy";
      ASSERT_TRUE(db->insert_rows("outputs",
                                  {"run_id", "participant", "split", "codec", "path", "dtype", "shape", "frames",
                                   "first_frame", "last_frame", "sha256", "source"},
                                  {{std::to_string(run), std::string("edge"), std::string(split), std::string("none"),
                                    rel, std::string("<f4"), std::string("1,1"), std::string("1"), std::string("0"),
                                    std::string("0"), hex(content), std::string("test")}})
                      .ok());
    }
  }
  std::string out;
  ASSERT_EQ(run_cli({"rm", std::to_string(run), "--db", path}, &out), 0) << out;
  EXPECT_FALSE(fs::exists(old_dir / "edge_split3_none.npy"));
  EXPECT_TRUE(fs::exists(old_dir / "edge_split6_none.npy"));
  EXPECT_TRUE(fs::exists(new_dir / "edge_split9_none.npy"));
  EXPECT_FALSE(fs::exists(new_dir / "edge_split12_none.npy.part"));
  EXPECT_NE(out.find("kept " + (new_dir / "edge_split9_none.npy").string()), std::string::npos) << out;
  EXPECT_NE(out.find("kept " + (old_dir / "edge_split6_none.npy").string() + ": run " + std::to_string(run) +
                     " listed it, but its content is no longer what the run wrote"),
            std::string::npos)
      << out;
  // The new naming: a run's files under outputs/<database file name>/run<ID>/.
  EXPECT_EQ(tracr::store::outputs_dir("/any/where/r.db", 7), fs::path("outputs/r.db/run7"));
}

TEST_F(ResultsCliTest, ListFiltersByModelStatusAndName) {
  std::string third;
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    RunInfo r = info("resnet-Sweep-7");
    r.model = "resnet18";
    auto id = db->begin_run(r);
    ASSERT_TRUE(id.ok());
    third = std::to_string(*id);
    ASSERT_TRUE(db->finish_run(*id, RunStatus::failed, "agent lost").ok());
  }
  auto ids = [this](const std::string& out) {  // the id column of the listed rows
    std::vector<std::string> v;
    std::istringstream in(out);
    std::string line;
    std::getline(in, line);  // the database read
    EXPECT_EQ(line, "runs in " + path);
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::string id;
      std::istringstream(line) >> id;  // right-aligned: leading spaces
      v.push_back(id);
    }
    return v;
  };
  std::string out;
  ASSERT_EQ(run_cli({"list", "--db", path}, &out), 0);
  EXPECT_EQ(ids(out).size(), 3u) << out;
  ASSERT_EQ(run_cli({"list", "--model", "resnet18", "--db", path}, &out), 0);
  EXPECT_EQ(ids(out), std::vector<std::string>{third}) << out;
  ASSERT_EQ(run_cli({"list", "--status", "completed", "--db", path}, &out), 0);
  EXPECT_EQ(ids(out), (std::vector<std::string>{std::to_string(run2), std::to_string(run)})) << out;
  ASSERT_EQ(run_cli({"list", "--name", "sweep", "--db", path}, &out), 0);  // any case
  EXPECT_EQ(ids(out), std::vector<std::string>{third}) << out;
  ASSERT_EQ(run_cli({"list", "--model", "alexnet", "--name", "base", "--db", path}, &out), 0);
  EXPECT_EQ(ids(out), std::vector<std::string>{std::to_string(run)}) << out;
  ASSERT_EQ(run_cli({"list", "--model", "vgg16", "--db", path}, &out), 0);
  EXPECT_NE(out.find("no runs in " + path + " match the filters"), std::string::npos) << out;
  // A status that does not exist, a filter on another command: usage errors.
  EXPECT_EQ(run_cli({"list", "--status", "done", "--db", path}, &out), 2);
  EXPECT_EQ(run_cli({"show", "last", "--model", "alexnet", "--db", path}, &out), 2);
}

TEST_F(ResultsCliTest, CompareTakesSeveralRunsAndShowsTheSettingsThatDiffer) {
  int64_t third = 0;
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    // Stored configurations as to_yaml writes them: flat keys and sections.
    const std::string base =
        "# effective tracr experiment configuration\nname: a\nmodel: alexnet\ninput_size: ~\nbatch_size: 1\n"
        "compression: none\nrecord:\n  frames: true\n  layers: true\n";
    ASSERT_EQ(sqlite3_exec(db->handle(),
                           ("UPDATE runs SET config_yaml = '" + base + "' WHERE id IN (" + std::to_string(run) + ", " +
                            std::to_string(run2) + ")")
                               .c_str(),
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    RunInfo r = info("c");
    r.model = "resnet18";
    r.config_yaml =
        "# effective tracr experiment configuration\nname: c\nmodel: resnet18\ninput_size: [3, 64, 64]\n"
        "batch_size: 4\ncompression: fp16\nrecord:\n  frames: true\n  layers: false\n";
    auto id = db->begin_run(r);
    ASSERT_TRUE(id.ok());
    third = *id;
    ASSERT_TRUE(db->add_frames({frame(third, 0, 0, 4000000)}).ok());
    ASSERT_TRUE(db->finish_run(third, RunStatus::completed).ok());
  }
  std::string out;
  ASSERT_EQ(run_cli({"compare", std::to_string(run), std::to_string(run2), std::to_string(third), "--db", path}, &out),
            0)
      << out;
  EXPECT_NE(out.find("C: run " + std::to_string(third) + " c [completed]  model resnet18"), std::string::npos) << out;
  // Only the settings that differ, each with every run's value, sections by dotted name.
  const auto diff = out.substr(out.find("settings that differ"));
  auto cells_of = [&](const std::string& key) {  // the row's cells split at runs of 2+ spaces
    std::vector<std::string> v;
    auto p = diff.find("\n  " + key + " ");
    if (p == std::string::npos) return v;
    const std::string line = diff.substr(p + 3, diff.find('\n', p + 1) - p - 3);
    size_t i = 0;
    while (i < line.size()) {
      size_t e = line.find("  ", i);
      if (e == std::string::npos) e = line.size();
      v.push_back(line.substr(i, e - i));
      i = line.find_first_not_of(' ', e);
      if (i == std::string::npos) break;
    }
    return v;
  };
  EXPECT_EQ(cells_of("batch_size"), (std::vector<std::string>{"batch_size", "1", "1", "4"})) << diff;
  EXPECT_EQ(cells_of("record.layers"), (std::vector<std::string>{"record.layers", "true", "true", "false"})) << diff;
  EXPECT_EQ(cells_of("input_size"), (std::vector<std::string>{"input_size", "~", "~", "[3, 64, 64]"})) << diff;
  EXPECT_TRUE(cells_of("record.frames").empty()) << "an equal setting is not a difference:\n" << diff;
  EXPECT_NE(out.find("warning: the runs differ in model (A alexnet, B alexnet, C resnet18)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("warning: the runs differ in input size (A ~, B ~, C [3, 64, 64])"), std::string::npos) << out;
  EXPECT_NE(out.find("warning: the runs differ in batch size (A 1, B 1, C 4)"), std::string::npos) << out;
  // Per split, each run beside the first: split 0 is 2 ms, 1 ms, 4 ms.
  EXPECT_NE(out.find("B vs A"), std::string::npos) << out;
  EXPECT_NE(out.find("-50.0%"), std::string::npos) << out;
  EXPECT_NE(out.find("+100.0%"), std::string::npos) << out;

  // Two runs with the same settings: no difference, no warning.
  ASSERT_EQ(run_cli({"compare", std::to_string(run), std::to_string(run2), "--db", path}, &out), 0);
  EXPECT_NE(out.find("settings: identical"), std::string::npos) << out;
  EXPECT_EQ(out.find("warning:"), std::string::npos) << out;
  EXPECT_EQ(run_cli({"compare", std::to_string(run), "--db", path}, &out), 2);
}

TEST(ResultsTable, SplitTableIsAlignedAndMarksTheFastestSplit) {
  std::vector<SplitSummary> rows(3);
  for (int i = 0; i < 3; ++i) {
    rows[i].split = i * 5;
    rows[i].frames = 10;
    rows[i].stages["total_ns"] = {1e6 * (3 - i) + 123456, 2e6 * (3 - i)};
    rows[i].stages["head_ns"] = {1e5, 2e5};
    rows[i].stages["network_ns"] = {5e5, 6e5};
    rows[i].stages["server_ns"] = {2e5, 3e5};
    rows[i].mean_raw_bytes = 602112;
    rows[i].mean_wire_bytes = 150528;
  }
  rows[2].frames = 0;  // no data: shown with dashes, never the best
  const std::string t = format_split_table(rows, /*wide=*/true);
  std::vector<std::string> lines;
  std::istringstream in(t);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 6u) << t;
  EXPECT_NE(lines[0].find("split"), std::string::npos);
  EXPECT_NE(lines[0].find("total p95"), std::string::npos);
  EXPECT_EQ(lines[2][0], ' ');
  EXPECT_EQ(lines[3][0], '*');  // split 5: 2.123 ms
  EXPECT_NE(lines[3].find("2.123"), std::string::npos) << t;
  EXPECT_NE(lines[3].find("4.000"), std::string::npos) << t;
  EXPECT_NE(lines[3].find("602112"), std::string::npos) << t;
  EXPECT_NE(lines[3].find("4.00x"), std::string::npos) << t;
  EXPECT_NE(lines[4].find(" - "), std::string::npos) << t;
  EXPECT_EQ(lines[5], "* lowest median total time: split 5");
  // Columns align: every data row has the split column ending at the same place.
  const size_t end = lines[0].find("split") + 5;
  for (int i = 2; i < 5; ++i) EXPECT_NE(lines[i][end - 1], ' ') << lines[i];
}

TEST(ResultsTable, DefaultTableFitsOneHundredTwentyColumnsWithLayerNamesAndAccuracy) {
  std::vector<SplitSummary> rows(3);
  for (int i = 0; i < 3; ++i) {
    rows[i].split = i * 7;
    rows[i].frames = 123456;
    rows[i].failed = 1;
    // Times up to 10 s a frame, a 1 Gbit/s link's worth of bytes.
    for (const char* f : {"total_ns", "head_ns", "encode_ns", "network_ns", "server_ns", "queue_ns", "return_ns", "post_ns"})
      rows[i].stages[f] = {1234.567e6, 9876.543e6};
    rows[i].throughput_fps = 1234.5;
    rows[i].mean_raw_bytes = 602112;
    rows[i].mean_wire_bytes = 150528;
    rows[i].labelled = 400;
    rows[i].top1_correct = 301;
    rows[i].top5_correct = 399;
  }
  const std::map<int, std::string> names = {{7, "features.3"}, {14, "layer3.0.downsample.0.very_long_name"}};
  const std::string narrow = format_split_table(rows, false, names);
  std::istringstream in(narrow);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_GE(lines.size(), 5u) << narrow;
  for (const auto& l : lines) EXPECT_LE(l.size(), 120u) << l;
  EXPECT_NE(lines[2].find("(input)"), std::string::npos) << narrow;
  EXPECT_NE(lines[3].find("features.3"), std::string::npos) << narrow;
  EXPECT_NE(lines[4].find("..ry_long_name"), std::string::npos) << narrow;  // the end of a long name kept
  EXPECT_NE(lines[3].find("75.25%"), std::string::npos) << narrow;            // top-1 301/400
  EXPECT_NE(lines[3].find("99.75%"), std::string::npos) << narrow;            // top-5 399/400
  EXPECT_NE(lines[3].find("185.83"), std::string::npos) << narrow;  // MB/s = 1234.5 frames/s x 150528 B / 1e6
  EXPECT_EQ(lines[0].find("encode med"), std::string::npos) << narrow;
  // Wide: every column, the whole name; no accuracy columns without labels.
  const std::string wide = format_split_table(rows, true, names);
  EXPECT_NE(wide.find("encode med"), std::string::npos);
  EXPECT_NE(wide.find("layer3.0.downsample.0.very_long_name"), std::string::npos);
  // An 80-column terminal (#20: tables wrap to the terminal width): the
  // throughput columns go first, a line says so, the times and accuracy stay.
  const std::string fit = format_split_table(rows, false, names, 80);
  std::istringstream fin(fit);
  for (std::string l; std::getline(fin, l);) EXPECT_LE(l.size(), 80u) << l << "\n" << fit;
  EXPECT_EQ(fit.substr(0, fit.find("(input)")).find("frames/s"), std::string::npos) << fit;  // not a column
  std::string flat = fit;
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  EXPECT_NE(flat.find("frames/s, up MB/s wire left out to fit 80 columns; --wide shows every column)"),
            std::string::npos)
      << fit;
  EXPECT_NE(fit.find("75.25%"), std::string::npos) << fit;
  EXPECT_NE(fit.find("1234.567"), std::string::npos) << fit;
  EXPECT_EQ(format_split_table(rows, false, names, 200), narrow);  // room enough: as it was
  for (auto& r : rows) r.labelled = 0;
  EXPECT_EQ(format_split_table(rows).find("top-1"), std::string::npos);
}

}  // namespace
}  // namespace tracr::controller

namespace tracr::controller {
namespace {

// Begins a run in a child process (the run's controller), lets `then` add to
// it, and lets the child exit: the run is left 'running' by a dead controller.
template <class F>
bool in_dead_controller(const std::string& path, F then) {
  pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    auto db = ResultsDb::open(path);
    if (!db) _exit(10);
    auto run = db->begin_run(info());
    if (!run || !then(*db, *run)) _exit(11);
    _exit(0);
  }
  int status = 0;
  return waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(ResultsDb, SlowFramesBecomeEventsWithTheirPosition) {
  TempDir dir;
  auto db = ResultsDb::open(dir.file("slow.db"));
  ASSERT_TRUE(db.ok());
  auto run = db->begin_run(info());
  ASSERT_TRUE(run.ok());
  std::vector<FrameRecord> batch;
  for (int i = 0; i < 9; ++i) {
    auto f = frame(*run, 4, i, 1000000);
    f.frame = i;
    batch.push_back(f);
  }
  auto stall = frame(*run, 4, 9, 11000000);  // 11x the median: a link stall
  stall.frame = 9;
  batch.push_back(stall);
  auto flagged = frame(*run, 4, 10, 1000000);
  flagged.frame = 10;
  flagged.network_ns = -1;
  flagged.flags = "negative_network";
  batch.push_back(flagged);
  ASSERT_TRUE(db->add_frames(batch).ok());
  ASSERT_TRUE(db->finish_run(*run, RunStatus::completed).ok());
  auto ev = db->events(*run);
  ASSERT_TRUE(ev.ok());
  int slow = 0;
  for (const auto& e : *ev)
    if (e.kind == "slow_frame") {
      ++slow;
      ASSERT_TRUE(e.frame.has_value());
      EXPECT_EQ(*e.frame, 9);
      EXPECT_EQ(e.device, "participant");
      EXPECT_NE(e.message.find("11.0x"), std::string::npos) << e.message;
    }
  EXPECT_EQ(slow, 1);
  auto t = db->split_table(*run);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].slow_frames, 1);
  EXPECT_EQ((*t)[0].flagged, 1);
  // The negative value is in the statistics as measured, not clamped.
  EXPECT_DOUBLE_EQ((*t)[0].stage("network_ns").min_ns, -1);
  // Recomputing replaces the events instead of adding copies.
  ASSERT_TRUE(db->compute_summaries(*run).ok());
  EXPECT_EQ(scalar(*db, "SELECT COUNT(*) FROM events WHERE kind = 'slow_frame'"), "1");
}

TEST(ResultsDb, ProfilesAreFoundAgainByModelShapeBatchDeviceAndHardware) {
  TempDir dir;
  auto db = ResultsDb::open(dir.file("p.db"));
  ASSERT_TRUE(db.ok());
  auto layer = [](int64_t run, int idx, int64_t ns, const std::string& hw) {
    LayerProfileRecord l;
    l.run_id = run;
    l.device = "edge";
    l.device_role = "PARTICIPANT";
    l.layer_index = idx;
    l.model_fp = "fp1";
    l.input_shape = "3,224,224";
    l.batch = 1;
    l.device_kind = "cpu";
    l.hw_id = hw;
    l.median_ns = ns;
    return l;
  };
  const int64_t a = *db->begin_run(info("a")), b = *db->begin_run(info("b")), c = *db->begin_run(info("c"));
  ASSERT_TRUE(db->add_layer_profiles({layer(a, 1, 100, "hw1"), layer(a, 0, 50, "hw1")}).ok());
  ASSERT_TRUE(db->add_layer_profiles({layer(b, 0, 60, "hw1"), layer(b, 1, 110, "hw1")}).ok());
  ASSERT_TRUE(db->add_layer_profiles({layer(c, 0, 999, "hw2")}).ok());  // another machine
  auto p = db->find_profiles("fp1", "3,224,224", 1, "cpu", "hw1");
  ASSERT_TRUE(p.ok()) << p.error().str();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].run_id, b);  // the newest run with that key
  EXPECT_EQ((*p)[0].median_ns, 60);
  EXPECT_EQ((*p)[1].layer_index, 1);
  EXPECT_TRUE(db->find_profiles("fp1", "3,224,224", 8, "cpu", "hw1")->empty());  // another batch
  EXPECT_TRUE(db->find_profiles("fp1", "3,224,224", 1, "cuda:0", "hw1")->empty());
}

TEST(ResultsDb, ReadOnlyOpenNeverCreatesOrChanges) {
  TempDir dir;
  const std::string missing = dir.file("nope/none.db");
  auto r = ResultsDb::open_readonly(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::not_found);
  EXPECT_NE(r.error().message.find("none.db"), std::string::npos);
  EXPECT_FALSE(fs::exists(missing));
  EXPECT_FALSE(fs::exists(dir.file("nope")));

  const std::string path = dir.file("ro.db");
  int64_t id = 0;
  // A run begun by a controller that then died.
  ASSERT_TRUE(in_dead_controller(path, [&](ResultsDb& db, int64_t run) {
    return db.add_frames({frame(run, 1, 0, 500), frame(run, 1, 1, 700)}).ok();
  }));
  id = 1;
  fs::permissions(path, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  auto ro = ResultsDb::open_readonly(path);
  ASSERT_TRUE(ro.ok()) << ro.error().str();
  EXPECT_TRUE(ro->read_only());
  auto t = ro->split_table(id);  // computed in memory, nothing written
  ASSERT_TRUE(t.ok()) << t.error().str();
  EXPECT_DOUBLE_EQ((*t)[0].stage("total_ns").median_ns, 600);
  EXPECT_EQ(scalar(*ro, "SELECT COUNT(*) FROM summaries"), "0");
  // Shown as interrupted, with the reason, but not written: the file still says running.
  EXPECT_EQ(ro->get_run(id)->status, RunStatus::interrupted);
  EXPECT_NE(ro->get_run(id)->error.find("seen read-only"), std::string::npos);
  EXPECT_EQ(scalar(*ro, "SELECT status FROM runs WHERE id = 1"), "running");

  // An older schema is named, with the command that upgrades it.
  const std::string old = dir.file("old.db");
  { ASSERT_TRUE(ResultsDb::open_at_version(old, 2).ok()); }
  auto o = ResultsDb::open_readonly(old);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.error().message.find("tracrctl results migrate"), std::string::npos) << o.error().message;
}

TEST(ResultsDb, CauseOfAnUnfinishedRunIsKeptForTheNextOpen) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  // The controller could not write its database: it leaves the cause beside it.
  ASSERT_TRUE(in_dead_controller(path, [&](ResultsDb&, int64_t run) {
    return static_cast<bool>(std::ofstream(failure_note_path(path, run)) << "database: disk I/O error (insert frames)\n");
  }));
  auto db = ResultsDb::open(path);
  ASSERT_TRUE(db.ok());
  ASSERT_EQ(db->interrupted_on_open().size(), 1u);
  auto run = db->get_run(db->interrupted_on_open()[0]);
  EXPECT_NE(run->error.find("disk I/O error (insert frames)"), std::string::npos) << run->error;
  // Its controller failed (and exited 1 saying so): stored as failed, not interrupted (#24).
  EXPECT_EQ(run->status, RunStatus::failed);
  EXPECT_EQ(scalar(*db, "SELECT kind FROM events WHERE run_id = 1 AND level = 'error'"), "run_failed");
  EXPECT_FALSE(fs::exists(failure_note_path(path, run->id)));
  // A controller that left no cause (only the reserved, blank note) was interrupted.
  const std::string quiet = dir.file("q.db");
  ASSERT_TRUE(in_dead_controller(quiet, [&](ResultsDb&, int64_t run) {
    return static_cast<bool>(std::ofstream(failure_note_path(quiet, run)) << std::string(4096, ' '));
  }));
  auto q = ResultsDb::open(quiet);
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->interrupted_on_open().size(), 1u);
  EXPECT_EQ(q->get_run(q->interrupted_on_open()[0])->status, RunStatus::interrupted);
}

// A database with damaged pages is refused before anything is written to
// it, with what quick_check found and how to recover it (#24).
TEST(ResultsDb, ADamagedDatabaseIsRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  const std::string path = dir.file("d.db");
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    auto run = db->begin_run(info());
    ASSERT_TRUE(run.ok());
    std::vector<FrameRecord> batch;
    for (int i = 0; i < 400; ++i) batch.push_back(frame(*run, 3, i, 1000000 + i));
    ASSERT_TRUE(db->add_frames(batch).ok());
    ASSERT_TRUE(db->finish_run(*run, RunStatus::completed).ok());
  }  // closed: the WAL is checkpointed into the file
  ASSERT_EQ(fs::exists(path + "-wal") ? fs::file_size(path + "-wal") : 0u, 0u);
  const auto size = fs::file_size(path);
  ASSERT_GT(size, 8u * 4096u);
  {
    // Garbage over the middle of the file: b-tree pages, not the header.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2 / 4096 * 4096));
    const std::string junk(2 * 4096, '\xA5');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  const auto before = fs::last_write_time(path);
  auto db = ResultsDb::open(path);
  ASSERT_FALSE(db.ok()) << "a damaged database was opened for writing";
  EXPECT_NE(db.error().message.find(path + ": the database is damaged (PRAGMA quick_check: "), std::string::npos)
      << db.error().message;
  EXPECT_NE(db.error().message.find(".recover"), std::string::npos) << db.error().message;
  EXPECT_EQ(fs::last_write_time(path), before) << "the damaged file was written to";
  // A sound database opens as before.
  auto fresh = ResultsDb::open(dir.file("sound.db"));
  ASSERT_TRUE(fresh.ok());
  auto again = ResultsDb::open(dir.file("sound.db"));
  EXPECT_TRUE(again.ok()) << again.error().str();
}

// A WAL database on read-only media cannot create its -shm file; the read
// commands open it as immutable instead of failing (#24). The read-only
// media is a read-only bind mount of the test's own directory.
TEST(ResultsDb, ReadCommandsReadADatabaseOnReadOnlyMedia) {
  TempDir dir;
  const std::string src = dir.file("src");
  const std::string ro_dir = dir.file("ro");
  fs::create_directories(src);
  fs::create_directories(ro_dir);
  {
    auto db = ResultsDb::open(src + "/r.db");
    ASSERT_TRUE(db.ok());
    auto run = db->begin_run(info("on-a-cd"));
    ASSERT_TRUE(run.ok());
    ASSERT_TRUE(db->add_frames({frame(*run, 2, 0, 1000), frame(*run, 2, 1, 2000)}).ok());
    ASSERT_TRUE(db->finish_run(*run, RunStatus::completed).ok());
  }
  if (std::system(("mount --bind " + src + " " + ro_dir + " && mount -o remount,bind,ro " + ro_dir).c_str()) != 0) {
    if (std::getenv("TRACR_REQUIRE_SSHD")) FAIL() << "cannot make a read-only bind mount (root needed)";
    GTEST_SKIP() << "cannot make a read-only bind mount here (root needed)";
  }
  struct Unmount {
    std::string m;
    ~Unmount() { (void)std::system(("umount " + m).c_str()); }
  } unmount{ro_dir};
  const std::string path = ro_dir + "/r.db";
  ASSERT_FALSE(std::ofstream(ro_dir + "/probe").good()) << "the bind mount is writable";
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok()) << db.error().str();
  EXPECT_TRUE(db->immutable());
  EXPECT_EQ(scalar(*db, "SELECT name FROM runs WHERE id = 1"), "on-a-cd");
  EXPECT_EQ(scalar(*db, "SELECT COUNT(*) FROM frames"), "2");
  // The commands a reader uses.
  EXPECT_EQ(cmd_results({"list", "--db", path}), 0);
  EXPECT_EQ(cmd_results({"show", "1", "--db", path}), 0);
  EXPECT_EQ(cmd_results({"export", "1", "--csv", dir.file("x.csv"), "--db", path}), 0);
  EXPECT_TRUE(fs::exists(dir.file("x.csv")));
  // Writing is refused with the reason, never half-done: said as read-only (#46), not as SQLite's
  // "unable to open database file".
  auto w = ResultsDb::open(path);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find(path + ": the database is read-only here"), std::string::npos)
      << w.error().message;
  EXPECT_EQ(w.error().message.find("unable to open"), std::string::npos) << w.error().message;
}

// A database that cannot be created on a full disk leaves no 0-byte file behind (#46).
TEST(ResultsDb, ADatabaseThatCannotBeCreatedOnAFullDiskLeavesNoFile) {
  TempDir dir;
  const std::string full = dir.file("full");
  fs::create_directories(full);
  if (std::system(("mount -t tmpfs -o size=64k tmpfs " + full).c_str()) != 0) {
    if (std::getenv("TRACR_REQUIRE_SSHD")) FAIL() << "cannot mount a small tmpfs (root needed)";
    GTEST_SKIP() << "cannot mount a small tmpfs here (root needed)";
  }
  struct Unmount {
    std::string m;
    ~Unmount() { (void)std::system(("umount " + m).c_str()); }
  } unmount{full};
  {
    std::ofstream filler(full + "/filler", std::ios::binary);
    const std::string block(4096, 'x');
    for (int i = 0; i < 64 && filler.write(block.data(), block.size()); ++i) filler.flush();
  }
  const std::string path = full + "/r.db";
  auto db = ResultsDb::open(path);
  ASSERT_FALSE(db.ok()) << "the disk was not full";
  std::printf("full disk: %s\n", db.error().message.c_str());
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) EXPECT_FALSE(fs::exists(path + suffix)) << suffix;
}

TEST(ResultsCli, ReadCommandsRefuseAMissingDatabase) {
  TempDir dir;
  const std::string path = dir.file("missing.db");
  for (std::vector<std::string> args :
       {std::vector<std::string>{"list", "--db", path}, {"show", "1", "--db", path}, {"export", "1", "--csv", dir.file("x.csv"), "--db", path}}) {
    EXPECT_EQ(cmd_results(args), 1) << args[0];
    EXPECT_FALSE(fs::exists(path)) << args[0] << " created the database";
  }
}

}  // namespace
}  // namespace tracr::controller
