#include "analysis/tables.hpp"

#include <fmt/format.h>

#include "core/text.hpp"
#include "protocol/stats.hpp"
#include "store/export.hpp"

namespace tracr::analysis {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;

namespace {

std::string cut_label(const std::map<int, std::string>& cut_names, int split, bool wide) {
  auto it = cut_names.find(split);
  if (split == 0) return "(input)";
  if (it == cut_names.end()) return "-";
  const std::string& n = it->second;
  return !wide && n.size() > 14 ? ".." + n.substr(n.size() - 12) : n;
}

// A placement's cut names joined as its cut points are ("conv2 | fc1").
std::string cuts_label(const std::map<int, std::string>& cut_names, const SplitSummary& s, bool wide) {
  if (!s.chained()) return cut_label(cut_names, s.split, wide);
  std::string out;
  for (int k : s.cuts) out += (out.empty() ? "" : " | ") + cut_label(cut_names, k, wide);
  return out;
}

std::string placement_cell(const SplitSummary& s) {
  return s.placement.empty() ? std::to_string(s.split) : s.placement;
}

bool any_chained(const std::vector<SplitSummary>& rows) {
  for (const auto& s : rows)
    if (s.chained()) return true;
  return false;
}

using Terms = std::vector<std::pair<const char*, const char*>>;

// Medians of each term; per frame the terms add up to total exactly
// (record_fields.def), medians of the terms need not.
const Terms& table_terms(bool wide) {
  static const Terms all_terms = {{"head_ns", "head"},     {"encode_ns", "encode"}, {"network_ns", "network"},
                                  {"server_ns", "server"}, {"queue_ns", "queue"},   {"return_ns", "return"},
                                  {"post_ns", "post"}};
  static const Terms narrow_terms = {{"head_ns", "head"}, {"network_ns", "network"}, {"server_ns", "server"}};
  return wide ? all_terms : narrow_terms;
}

// Two header lines; the narrow table puts the statistic under the stage
// ("total" over "med ms") to stay within 120 columns.
std::vector<std::vector<std::string>> split_table_header(bool wide, bool labels, bool chained) {
  std::vector<std::string> h1 = {"", chained ? "placement" : "split", "cut after", "frames"};
  std::vector<std::string> h2 = {"", "", "", ""};
  auto col = [&](const std::string& name, const std::string& stat, const std::string& unit) {
    h1.push_back(wide || stat.empty() ? name + (stat.empty() ? "" : " " + stat) : name);
    h2.push_back(wide || stat.empty() ? unit : stat + (unit.empty() ? "" : " " + unit));
  };
  if (wide) {
    col("failed", "", "");
    col("flagged", "", "");
  }
  col("total", "med", "ms");
  col("total", "p95", "ms");
  for (const auto& t : table_terms(wide)) col(t.second, "med", "ms");
  if (wide) col("network", "p95", "ms");
  col("frames/s", "", "");
  if (wide) col("samples/s", "", "");
  col("up MB/s", "", "wire");
  if (wide) {
    col("raw bytes", "", "");
    col("wire bytes", "", "");
    col("ratio", "", "");
  }
  if (labels) {
    col("top-1", "", "acc");
    col("top-5", "", "acc");
  }
  return {h1, h2};
}

void add_accuracy_cells(const SplitSummary& s, std::vector<std::string>& row) {
  auto pct = [&](int64_t hit) {
    return s.labelled > 0 ? fmt::format("{:.2f}%", 100.0 * static_cast<double>(hit) / s.labelled) : std::string("-");
  };
  bool top5_known = true;
  for (const auto& c : s.codecs) top5_known = top5_known && c.top5_known;
  row.push_back(pct(s.top1_correct));
  row.push_back(top5_known ? pct(s.top5_correct) : "-");
}

std::vector<std::string> split_table_row(const SplitSummary& s, bool wide, bool labels, bool best,
                                         const std::map<int, std::string>& cut_names) {
  const bool any = s.frames > 0;
  auto t = [&](const char* f, bool p95 = false) {
    if (!any || !s.stages.count(f)) return std::string("-");
    return format_ms(p95 ? s.stage(f).p95_ns : s.stage(f).median_ns);
  };
  const bool fps = any && s.throughput_fps > 0;
  std::vector<std::string> row = {best ? "*" : "", placement_cell(s), cuts_label(cut_names, s, wide),
                                  std::to_string(s.frames)};
  if (wide) {
    row.push_back(std::to_string(s.failed));
    row.push_back(std::to_string(s.flagged));
  }
  row.push_back(t("total_ns"));
  row.push_back(t("total_ns", true));
  for (const auto& term : table_terms(wide)) row.push_back(t(term.first));
  if (wide) row.push_back(t("network_ns", true));
  row.push_back(fps ? fmt::format("{:.1f}", s.throughput_fps) : "-");
  if (wide) {
    // Samples per frame: labelled frames know it; otherwise the run's batch is not in the summary.
    row.push_back(fps && s.labelled > 0 && s.frames > 0
                      ? fmt::format("{:.1f}", s.throughput_fps * static_cast<double>(s.labelled) / s.frames)
                      : "-");
  }
  row.push_back(fps ? fmt::format("{:.2f}", s.throughput_fps * s.mean_wire_bytes / 1e6) : "-");
  if (wide) {
    row.push_back(any ? fmt::format("{:.0f}", s.mean_raw_bytes) : "-");
    row.push_back(any ? fmt::format("{:.0f}", s.mean_wire_bytes) : "-");
    row.push_back(any && s.mean_wire_bytes > 0 ? fmt::format("{:.2f}x", s.mean_raw_bytes / s.mean_wire_bytes)
                                               : std::string("-"));
  }
  if (labels) add_accuracy_cells(s, row);
  return row;
}

// The row (placement) with the lowest median total (rows.size(): none has frames).
size_t lowest_median_row(const std::vector<SplitSummary>& rows) {
  size_t best = rows.size();
  double best_v = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].frames > 0 && (best == rows.size() || rows[i].stage("total_ns").median_ns < best_v)) {
      best = i;
      best_v = rows[i].stage("total_ns").median_ns;
    }
  return best;
}

}  // namespace

std::string format_phase_table(const std::vector<FrameRecord>& frames) {
  bool commanded = false;
  for (const auto& f : frames) commanded = commanded || f.policy == "command";
  if (!commanded) return {};
  std::vector<const FrameRecord*> timed;
  for (const auto& f : frames)
    if (!f.warmup && f.ok) timed.push_back(&f);
  std::stable_sort(timed.begin(), timed.end(), [](const FrameRecord* a, const FrameRecord* b) {
    return a->participant != b->participant ? a->participant < b->participant : a->frame < b->frame;
  });
  std::vector<std::vector<std::string>> rows = {
      {"participant", "frames", "split", "codec", "policy", "n", "median ms", "p95 ms", "last 8 median ms"}};
  for (size_t i = 0; i < timed.size();) {
    const FrameRecord& a = *timed[i];
    size_t j = i;
    std::vector<int64_t> totals;
    while (j < timed.size() && timed[j]->participant == a.participant && timed[j]->split == a.split &&
           timed[j]->codec == a.codec && timed[j]->policy == a.policy)
      totals.push_back(timed[j++]->total_ns);
    std::vector<int64_t> last(totals.end() - static_cast<std::ptrdiff_t>(std::min<size_t>(8, totals.size())),
                              totals.end());
    const int64_t first_frame = a.frame, last_frame = timed[j - 1]->frame;
    const size_t n = totals.size();
    const double med = protocol::median_of(totals), p95 = protocol::p95_of(totals);
    rows.push_back({a.participant.empty() ? "-" : a.participant, fmt::format("{}-{}", first_frame, last_frame),
                    std::to_string(a.split), a.codec, a.policy, std::to_string(n), fmt::format("{:.3f}", med / 1e6),
                    fmt::format("{:.3f}", p95 / 1e6), fmt::format("{:.3f}", protocol::median_of(last) / 1e6)});
    i = j;
  }
  return "\nphases in time order: a command changed the split or codec during the run, so the table above\n"
         "pools frames of different times and conditions; compare these instead\n" +
         align(rows, {0, 1, 3, 4});
}

std::string format_split_table(const std::vector<SplitSummary>& rows, bool wide,
                               const std::map<int, std::string>& cut_names, size_t width) {
  bool labels = false;
  int64_t flagged = 0, slow = 0;
  for (const auto& s : rows) {
    labels = labels || s.labelled > 0;
    flagged += s.flagged;
    slow += s.slow_frames;
  }
  const size_t best = lowest_median_row(rows);
  const bool chained = any_chained(rows);
  auto cells = split_table_header(wide, labels, chained);
  for (size_t i = 0; i < rows.size(); ++i)
    cells.push_back(split_table_row(rows[i], wide, labels, i == best, cut_names));
  // Narrower than the table (a terminal of `width` columns): up MB/s,
  // frames/s, total p95 and frames go first, in that order.
  std::string out = wide ? align(cells, {0, 2})
                         : fit_table(cells, {0, 2}, width, {10, 9, 5, 3}, 2, "; --wide shows every column");
  if (best < rows.size())
    out += fmt::format("* lowest median total time: {} {}\n", chained ? "placement" : "split", placement_cell(rows[best]));
  if (flagged > 0)
    out += fmt::format("{} frame(s) flagged (negative network time: an assumption broke; see frames.flags)\n", flagged);
  if (slow > 0)
    out += fmt::format("{} frame(s) slower than 10x their {}'s median (slow_frame events)\n", slow,
                       chained ? "placement" : "split");
  return out;
}

Status print_probe_table(ResultsDb& db, int64_t run_id, std::FILE* out, size_t width) {
  auto probes = db.probes(run_id);
  if (!probes) return probes.error();
  if (probes->empty()) return {};
  std::vector<std::vector<std::string>> rows = {{"  participant", "trigger", "rtt med ms", "rtt p95 ms", "rtt min ms",
                                                 "up Mbit/s", "down Mbit/s", "messages up/down", "up bytes",
                                                 "down bytes", "cipher"}};
  auto mbps = [](const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("-"); };
  // The bulk message size each way, and whether the probe sized it (auto).
  auto messages = [](const wire::ProbeRecord& p) {
    const int64_t down = p.chunk_sizing.empty() ? p.chunk_bytes : p.down_chunk_bytes;  // before schema 17: one size
    return fmt::format("{}/{} KiB{}", p.chunk_bytes / 1024, down / 1024, p.chunk_sizing == "auto" ? " auto" : "");
  };
  for (const auto& p : *probes)
    rows.push_back({"  " + p.participant, p.trigger, format_ms(static_cast<double>(p.rtt_median_ns)),
                    format_ms(static_cast<double>(p.rtt_p95_ns)), format_ms(static_cast<double>(p.rtt_min_ns)),
                    mbps(p.up_mbps), mbps(p.down_mbps), messages(p), std::to_string(p.up_bytes),
                    std::to_string(p.down_bytes), p.cipher});
  std::fputs("\nlink probes\n", out);
  std::fputs(fit_table(rows, {0, 1, 10}, width, {8, 9, 10, 7, 4, 3}).c_str(), out);
  return {};
}

Status print_energy_table(ResultsDb& db, int64_t run_id, std::FILE* out) {
  auto stats = db.energy_stats(run_id);
  if (!stats) return stats.error();
  if (stats->empty()) return {};
  // Every figure beside its source: measured:<meter> or modelled:<model>.
  std::vector<std::vector<std::string>> rows = {
      {"  split", "device", "stage", "source", "frames", "median J", "p95 J", "median net J", "p95 net J"}};
  for (const auto& e : *stats)
    if (e.placement.find('|') != std::string::npos) rows[0][0] = "  placement";
  auto j = [](const std::optional<double>& v) { return v ? fmt::format("{:.6f}", *v) : std::string("-"); };
  for (const auto& e : *stats)
    rows.push_back({"  " + (e.placement.empty() ? std::to_string(e.split) : e.placement), e.device, e.stage, e.source, std::to_string(e.n), j(e.median_j),
                    j(e.p95_j), j(e.median_net_j), j(e.p95_net_j)});
  std::fputs("\nenergy per frame (timed frames; net = idle power subtracted)\n", out);
  std::fputs(align(rows, {1, 2, 3}).c_str(), out);
  return {};
}

// A chain run: every device's stages per placement, each timed where it ran.
Status print_hop_table(ResultsDb& db, int64_t run_id, std::FILE* out, size_t width) {
  auto hops = db.hop_summaries(run_id);
  if (!hops) return hops.error();
  if (hops->empty()) return {};
  std::vector<std::vector<std::string>> rows = {{"  placement", "hop", "device", "codec", "frames", "in wire B",
                                                 "encode ms", "network ms", "compute ms", "forward ms", "other ms",
                                                 "device ms", "reply decode ms"}};
  auto cell = [](const HopSummary& h, const char* f, bool ms) {
    auto it = h.median.find(f);
    if (it == h.median.end()) return std::string("-");
    return ms ? format_ms(it->second) : fmt::format("{:.0f}", it->second);
  };
  for (const auto& h : *hops)
    rows.push_back({"  " + h.placement, std::to_string(h.hop), h.device, h.codec, std::to_string(h.frames),
                    cell(h, "in_wire_bytes", false), cell(h, "send_encode_ns", true), cell(h, "network_ns", true),
                    cell(h, "compute_ns", true), cell(h, "forward_ns", true), cell(h, "other_ns", true),
                    cell(h, "server_ns", true), cell(h, "reply_decode_ns", true)});
  std::fputs("\nevery device of the chain, medians over timed ok frames (frame_hops): encode, network and reply "
             "decode timed by the device before it, the rest by the device; device = compute + forward + other\n",
             out);
  std::fputs(fit_table(rows, {0, 2, 3}, width, {12, 9, 5}).c_str(), out);
  return {};
}

Status print_split_table(ResultsDb& db, int64_t run_id, std::FILE* out, bool wide, size_t width) {
  auto rows = db.split_table(run_id);
  if (!rows) return rows.error();
  if (rows->empty()) {
    fmt::print(out, "run {}: no frames recorded\n", run_id);
    return {};
  }
  auto names = cut_names(db, run_id);
  if (!names) return names.error();
  std::string table = format_split_table(*rows, wide, *names, width);
  auto frames = db.frames(run_id);
  if (!frames) return frames.error();
  const std::string phases = format_phase_table(*frames);
  if (!phases.empty()) {
    // The star compares splits that ran at different times (#21: after a
    // throttle, the split run before it read as the lowest).
    const std::string star = "* lowest median total time: ";
    if (auto at = table.find(star); at != std::string::npos) {
      const size_t eol = table.find('\n', at);
      table.insert(eol, " (pooled over the whole run; see the phases below)");
    }
    table += phases;
  }
  std::fputs(table.c_str(), out);
  TRACR_TRY(print_hop_table(db, run_id, out, width));
  // Per split and codec (set_codec commands and compression: auto give a
  // split several), with the sample counts behind each figure.
  std::string lines;
  for (const auto& s : *rows)
    for (const auto& c : s.codecs) {
      if (c.labelled == 0) continue;
      auto pct = [&](int64_t hit) { return fmt::format("{:.2f}%", 100.0 * static_cast<double>(hit) / c.labelled); };
      lines += fmt::format("  {} {:>3}  {:<24} {:>7} samples  top-1 {:>7} ({})  top-5 {:>7}\n",
                           s.chained() ? "placement" : "split", placement_cell(s), c.codec,
                           c.labelled, pct(c.top1_correct), c.top1_correct,
                           c.top5_known ? fmt::format("{} ({})", pct(c.top5_correct), c.top5_correct) : "-");
    }
  if (!lines.empty()) fmt::print(out, "\naccuracy per split and codec (timed frames with a label)\n{}", lines);
  std::fflush(out);
  return {};
}

}  // namespace tracr::analysis
