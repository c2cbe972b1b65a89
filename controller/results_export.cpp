#include "controller/results_export.hpp"

#include <cmath>

#include <fmt/format.h>

#include "controller/results_cli.hpp"

namespace tracr::controller {

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
  std::vector<std::string> header;
  for (const auto& c : t->columns) header.push_back(c.name);
  std::string o = csv_line(header);
  for (int64_t id : runs) {
    if (auto run = db.get_run(id); !run) return run.error();
    auto rows = db.rows("frames", id);
    if (!rows) return rows.error();
    for (const auto& r : *rows) {
      std::vector<std::string> cells;
      for (const auto& v : r) cells.push_back(v.value_or(""));
      o += csv_line(cells);
    }
  }
  return write_file(file, o);
}

const std::vector<std::string>& summary_csv_columns() {
  static const std::vector<std::string> cols = {
      "run",        "name",           "model",           "codec",           "cipher",       "link",
      "shaping",    "status",         "split",           "layer",           "frames",       "failed",
      "flagged",    "warmup_frames",  "throughput_fps",  "mean_raw_bytes",  "mean_wire_bytes",
      "mean_reply_bytes",             "samples_labelled", "top1_correct",   "top5_correct", "stage",
      "median_ms",  "p95_ms",         "mean_ms",         "min_ms",          "max_ms"};
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
      const auto cut = cuts->find(s.split);
      const std::string layer = s.split == 0 ? "(input)" : cut == cuts->end() ? "" : cut->second;
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
                       num(st.p95_ns / 1e6), num(st.mean_ns / 1e6), num(st.min_ns / 1e6), num(st.max_ns / 1e6)});
      }
    }
  }
  return write_file(file, o);
}

}  // namespace tracr::controller
