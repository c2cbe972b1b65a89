#include "store/export.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "core/atomic_file.hpp"
#include "core/text.hpp"
#include "settings/config.hpp"

namespace tracr::store {

using namespace tracr::core;  // the floors below, by their short names

using settings::json_quote;

Result<std::map<int, std::string>> cut_names(ResultsDb& db, int64_t run_id) {
  // Split k cuts after layer k-1: its name, from the run's model_layers
  // (runs recorded before 2026-12-06: from its layer profiles).
  std::map<int, std::string> out;
  const char* table = "model_layers";
  auto rows = db.rows(table, run_id);
  if (!rows) return rows.error();
  if (rows->empty()) {
    table = "layer_profiles";
    rows = db.rows(table, run_id);
    if (!rows) return rows.error();
  }
  const TableInfo* t = nullptr;
  for (const auto& x : schema_tables())
    if (x.name == table) t = &x;
  size_t idx = 0, name = 0;
  for (size_t i = 0; i < t->columns.size(); ++i) {
    if (t->columns[i].name == "layer_index") idx = i;
    if (t->columns[i].name == "name") name = i;
  }
  for (const auto& r : *rows)
    if (r[idx] && r[name]) out[std::stoi(*r[idx]) + 1] = *r[name];
  return out;
}

// Each cut's layer name ("(input)" for 0), joined by " | " (a chain's placement).
static std::string layers_of(const std::map<int, std::string>& names, const std::vector<int>& cuts) {
  std::string out;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const auto it = names.find(cuts[i]);
    out += (i ? " | " : "") + (cuts[i] == 0 ? std::string("(input)") : it == names.end() ? "" : it->second);
  }
  return out;
}

// "3|13" or "7" as cuts; empty when any part is not a whole number.
static std::vector<int> parse_cuts(const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t bar = std::min(text.find('|', at), text.size());
    const std::string part = text.substr(at, bar - at);
    char* end = nullptr;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0 || v > 1000000) return {};
    out.push_back(static_cast<int>(v));
    at = bar + 1;
  }
  return out;
}

Status export_run_csv(ResultsDb& db, int64_t run_id, const std::string& file) {
  return export_frames_csv(db, {run_id}, file);
}

namespace {

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : ""; }

std::string csv_line(const std::vector<std::string>& cells) {
  std::string o;
  for (size_t i = 0; i < cells.size(); ++i) o += (i ? "," : "") + csv_field(cells[i]);
  return o + "\r\n";  // RFC 4180 line ends, as export_run_csv always wrote
}

}  // namespace

Status export_frames_csv(ResultsDb& db, const std::vector<int64_t>& runs, const std::string& file) {
  const TableInfo* t = nullptr;
  for (const auto& x : schema_tables())
    if (x.name == "frames") t = &x;
  // The table's columns, then the run's name and the layer each frame's cut is after (one naming across
  // exports: run_id and run_name as the summary CSV and the figures' CSVs have them).
  std::vector<std::string> header;
  size_t split_col = SIZE_MAX, placement_col = SIZE_MAX;
  for (const auto& c : t->columns) {
    if (c.name == "split") split_col = header.size();
    if (c.name == "placement") placement_col = header.size();
    header.push_back(c.name);
  }
  header.push_back("run_name");
  header.push_back("layer");
  std::string o = csv_line(header);
  for (int64_t id : runs) {
    auto run = db.get_run(id);
    if (!run) return run.error();
    auto cuts = cut_names(db, id);
    if (!cuts) return cuts.error();
    auto rows = db.rows("frames", id);
    if (!rows) return rows.error();
    for (const auto& r : *rows) {
      std::vector<std::string> cells;
      for (const auto& v : r) cells.push_back(v.value_or(""));
      cells.push_back(run->name);
      // The frame's placement (a chain's cuts, '|'), else its split; a cell that is no cut leaves it empty.
      const size_t col = placement_col < r.size() && r[placement_col] && !r[placement_col]->empty() ? placement_col
                                                                                                    : split_col;
      cells.push_back(col < r.size() && r[col] ? layers_of(*cuts, parse_cuts(*r[col])) : std::string());
      o += csv_line(cells);
    }
  }
  return write_file(file, o);
}

const std::vector<std::string>& summary_csv_columns() {
  static const std::vector<std::string> cols = {
      "run_id",     "run_name",       "model",           "codec",           "cipher",       "link",
      "shaping",    "status",         "split",           "layer",           "frames",       "failed",
      "flagged",    "warmup_frames",  "throughput_fps",  "mean_raw_bytes",  "mean_wire_bytes",
      "mean_reply_bytes",             "samples_labelled", "top1_correct",   "top5_correct", "stage",
      "median_ms",  "p95_ms",         "mean_ms",         "min_ms",          "max_ms",       "placement"};
  return cols;
}

Status export_summary_csv(ResultsDb& db, const std::vector<int64_t>& runs, const std::string& file) {
  std::string o = csv_line(summary_csv_columns());
  for (int64_t id : runs) {
    auto run = db.get_run(id);
    if (!run) return run.error();
    auto sums = db.split_table(id);
    if (!sums) return sums.error();
    auto cuts = cut_names(db, id);
    if (!cuts) return cuts.error();
    for (const auto& s : *sums) {
      const std::string layer = layers_of(*cuts, s.cuts.empty() ? std::vector<int>{s.split} : s.cuts);
      for (const auto& [field, st] : s.stages) {
        const std::string stage = field.size() > 3 && field.substr(field.size() - 3) == "_ns"
                                      ? field.substr(0, field.size() - 3)
                                      : field;
        o += csv_line({std::to_string(run->id), run->name, run->model, run->codec, run->cipher, run->link, run->shaping,
                       std::string(run_status_name(run->status)), std::to_string(s.split), layer,
                       std::to_string(s.frames), std::to_string(s.failed), std::to_string(s.flagged),
                       std::to_string(s.warmup_frames), num(s.throughput_fps), num(s.mean_raw_bytes),
                       num(s.mean_wire_bytes), num(s.mean_reply_bytes), std::to_string(s.labelled),
                       std::to_string(s.top1_correct), std::to_string(s.top5_correct), stage, num(st.median_ns / 1e6),
                       num(st.p95_ns / 1e6), num(st.mean_ns / 1e6), num(st.min_ns / 1e6), num(st.max_ns / 1e6),
                       s.placement});
      }
    }
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
        "\"labelled\":{},\"top1_correct\":{},\"top5_correct\":{},\"placement\":{}}}",
        summaries.size() > 1 ? "," : "", x.split, x.frames, x.failed, x.warmup_frames, x.flagged, x.slow_frames,
        json_num(x.throughput_fps), json_num(x.mean_raw_bytes), json_num(x.mean_wire_bytes),
        json_num(x.mean_reply_bytes), x.labelled, x.top1_correct, x.top5_correct, json_quote(x.placement));
    for (const auto& [field, v] : x.stages)
      stages += fmt::format(
          "{}\n  {{\"split\":{},\"field\":{},\"median_ns\":{},\"p95_ns\":{},\"mean_ns\":{},\"min_ns\":{},\"max_ns\":{},"
          "\"placement\":{}}}",
          stages.size() > 1 ? "," : "", x.split, json_quote(field), json_num(v.median_ns), json_num(v.p95_ns),
          json_num(v.mean_ns), json_num(v.min_ns), json_num(v.max_ns), json_quote(x.placement));
  }
  std::string o = "{";
  bool first = true;
  auto add = [&](const std::string& key, const std::string& body) {
    o += fmt::format("{}\n\"{}\": {}", first ? "" : ",", key, body);
    first = false;
  };
  for (const char* table :
       {"runs", "devices", "probes", "summaries", "stage_stats", "accuracy", "energy_stats", "frames", "frame_topk",
        "frame_hops", "outputs", "energy", "model_layers", "layer_profiles", "segment_profiles", "events"}) {
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
