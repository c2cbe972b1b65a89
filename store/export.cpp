#include "store/export.hpp"

#include <fmt/format.h>

#include "core/atomic_file.hpp"
#include "core/text.hpp"
#include "settings/config.hpp"

namespace tracr::store {

using namespace tracr::core;  // the floors below, by their short names

using settings::json_quote;

Status export_run_csv(ResultsDb& db, int64_t run_id, const std::string& file) {
  auto run = db.get_run(run_id);
  if (!run) return run.error();
  auto rows = db.rows("frames", run_id);
  if (!rows) return rows.error();
  const TableInfo* t = nullptr;
  for (const auto& x : schema_tables())
    if (x.name == "frames") t = &x;
  std::string o;
  for (size_t i = 0; i < t->columns.size(); ++i) o += (i ? "," : "") + t->columns[i].name;
  o += "\r\n";
  for (const auto& r : *rows) {
    for (size_t i = 0; i < r.size(); ++i) o += (i ? "," : "") + (r[i] ? csv_field(*r[i]) : std::string());
    o += "\r\n";
  }
  return write_file(file, o);
}

namespace {
// One table's rows for a run as a JSON array of objects (every column, NULL as null).
Result<std::string> json_rows(ResultsDb& db, const std::string& table, int64_t run_id) {
  auto rows = db.rows(table, run_id);
  if (!rows) return rows.error();
  const TableInfo* t = nullptr;
  for (const auto& x : schema_tables())
    if (x.name == table) t = &x;
  std::string o = "[";
  for (size_t r = 0; r < rows->size(); ++r) {
    o += r ? ",\n  {" : "\n  {";
    for (size_t i = 0; i < t->columns.size(); ++i) {
      const auto& v = (*rows)[r][i];
      o += fmt::format("{}\"{}\":", i ? "," : "", t->columns[i].name);
      if (!v) o += "null";
      else if (t->columns[i].type == "TEXT") o += json_quote(*v);
      else o += *v;
    }
    o += "}";
  }
  return o + "]";
}
}  // namespace

Status export_run_json(ResultsDb& db, int64_t run_id, const std::string& file) {
  auto run = db.get_run(run_id);
  if (!run) return run.error();
  // Stored summaries, or computed now for a run that has none stored (a
  // running run, or a read-only database).
  auto sums = db.split_table(run_id);
  if (!sums) return sums.error();
  std::string summaries = "[", stages = "[";
  for (const auto& x : *sums) {
    summaries += fmt::format(
        "{}\n  {{\"split\":{},\"frames\":{},\"failed\":{},\"warmup_frames\":{},\"flagged\":{},\"slow_frames\":{},"
        "\"throughput_fps\":{},\"mean_raw_bytes\":{},\"mean_wire_bytes\":{},\"mean_reply_bytes\":{},"
        "\"labelled\":{},\"top1_correct\":{},\"top5_correct\":{}}}",
        summaries.size() > 1 ? "," : "", x.split, x.frames, x.failed, x.warmup_frames, x.flagged, x.slow_frames,
        json_num(x.throughput_fps), json_num(x.mean_raw_bytes), json_num(x.mean_wire_bytes),
        json_num(x.mean_reply_bytes), x.labelled, x.top1_correct, x.top5_correct);
    for (const auto& [field, v] : x.stages)
      stages += fmt::format(
          "{}\n  {{\"split\":{},\"field\":{},\"median_ns\":{},\"p95_ns\":{},\"mean_ns\":{},\"min_ns\":{},\"max_ns\":{}}}",
          stages.size() > 1 ? "," : "", x.split, json_quote(field), json_num(v.median_ns), json_num(v.p95_ns),
          json_num(v.mean_ns), json_num(v.min_ns), json_num(v.max_ns));
  }
  std::string o = "{";
  bool first = true;
  auto add = [&](const std::string& key, const std::string& body) {
    o += fmt::format("{}\n\"{}\": {}", first ? "" : ",", key, body);
    first = false;
  };
  for (const char* table :
       {"runs", "devices", "probes", "summaries", "stage_stats", "accuracy", "energy_stats", "frames", "frame_topk",
        "outputs", "energy", "layer_profiles", "events"}) {
    const std::string t = table;
    if (t == "summaries") {
      add(t, summaries + "]");
      continue;
    }
    if (t == "stage_stats") {
      add(t, stages + "]");
      continue;
    }
    auto rows = json_rows(db, table, run_id);
    if (!rows) return rows.error();
    std::string body = *rows;
    if (t == "runs") {  // one run: an object, not an array
      auto a = body.find('{'), b = body.rfind('}');
      body = a == std::string::npos ? "null" : body.substr(a, b - a + 1);
    }
    add(t == "runs" ? "run" : t, body);
  }
  o += "\n}\n";
  return write_file(file, o);
}

}  // namespace tracr::store
