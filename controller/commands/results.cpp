#include "controller/commands/results.hpp"
#include "core/log.hpp"

#include "controller/cli/help_format.hpp"
#include "analysis/noise.hpp"
#include "wire/placement.hpp"
#include "analysis/tables.hpp"
#include "core/text.hpp"
#include "core/user_error.hpp"
#include "store/default_db.hpp"
#include "store/export.hpp"

#include "controller/commands/results_exits.hpp"
#include "controller/commands/train.hpp"

#include "settings/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;
using namespace tracr::analysis;

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

namespace {




// Seconds since the epoch of an ISO-8601 UTC timestamp written by
// utc_now_iso(); nullopt when it does not parse.
std::optional<double> parse_iso(const std::string& s) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms) < 6)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + ms / 1000.0;
}

std::string duration_text(const RunRow& r) {
  if (r.ended_at.empty()) return "-";
  auto a = parse_iso(r.started_at), b = parse_iso(r.ended_at);
  if (!a || !b) return "-";
  return fmt::format("{:.1f} s", *b - *a);
}

using Opts = ResultsOptions;

[[noreturn]] void usage_error(const std::string& msg) {
  throw Fatal(make_error(Errc::invalid_argument, msg));
}


}  // namespace

namespace {


// The run's status, with how many participants it went on without
// (on_participant_loss: continue; events participant_lost).
std::string status_text(ResultsDb& db, const RunRow& r) {
  std::string s(run_status_name(r.status));
  auto ev = db.events(r.id);
  if (!ev) return s;
  const auto lost = std::count_if(ev->begin(), ev->end(), [](const EventRecord& e) { return e.kind == "participant_lost"; });
  return lost > 0 ? fmt::format("{} ({} lost)", s, lost) : s;
}

std::string run_header(ResultsDb& db, const RunRow& r) {
  std::string o = fmt::format("run {}  {}  [{}]\n", r.id, r.name, status_text(db, r));
  o += fmt::format("  started {}  ended {}  duration {}\n", r.started_at,
                   r.ended_at.empty() ? "-" : r.ended_at, duration_text(r));
  o += fmt::format("  model {}  codec {}  cipher {}  tracr {}  protocol {}\n", r.model, r.codec, r.cipher,
                   r.tracr_version, r.protocol_version);
  o += fmt::format("  controller {}:{}  frames {}  database {}\n", r.controller_host, r.controller_pid, r.frame_count,
                   db.path());
  if (!r.link.empty()) o += fmt::format("  link {}: {}\n", r.link, r.shaping);
  if (!r.error.empty()) o += "  error: " + r.error + "\n";
  // Each line fitted to the terminal between its fields.
  std::string fitted;
  std::istringstream in(o);
  for (std::string l; std::getline(in, l);) fitted += fit_fields(l, table_width()) + "\n";
  return fitted;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Status cmd_list(ResultsDb& db, const Opts& o) {
  auto all = db.list_runs(0);
  if (!all) throw Fatal(all.error());
  std::vector<RunRow> runs_v;
  for (auto& r : *all) {
    if (!o.model.empty() && r.model != o.model) continue;
    if (!o.status.empty() && run_status_name(r.status) != o.status) continue;
    if (!o.name.empty() && lower(r.name).find(lower(o.name)) == std::string::npos) continue;
    if (o.limit > 0 && static_cast<int>(runs_v.size()) >= o.limit) break;
    runs_v.push_back(std::move(r));
  }
  const auto* runs = &runs_v;
  if (runs->empty()) {
    const bool filtered = !o.model.empty() || !o.status.empty() || !o.name.empty();
    fmt::print("no runs in {}{}\n", db.path(), filtered ? " match the filters" : "");
    return {};
  }
  std::vector<std::vector<std::string>> rows = {
      {"id", "name", "status", "started", "duration", "model", "codec", "cipher", "frames"}};
  for (const auto& r : *runs)
    rows.push_back({std::to_string(r.id), r.name, status_text(db, r), r.started_at,
                    duration_text(r), r.model, r.codec, r.cipher, std::to_string(r.frame_count)});
  // Which database was read (the default one is compiled in: outside the project it may not be the expected one).
  fmt::print("runs in {}\n", db.path());
  // Narrower than the table: cipher, start time, then codec go first.
  std::fputs(fit_table(rows, {1, 2, 3, 5, 6, 7}, table_width(), {7, 3, 6}).c_str(), stdout);
  return {};
}

Status cmd_show(ResultsDb& db, const Opts& o) {
  if (o.positional.size() != 1) usage_error("expected one RUN");
  auto id = run_id_arg(db, o.positional[0]);
  if (!id) throw Fatal(id.error());
  auto run = db.get_run(*id);
  if (!run) throw Fatal(run.error());
  std::fputs(run_header(db, *run).c_str(), stdout);
  std::fputs("\n", stdout);
  auto train = db.rows("train_runs", *id);
  if (!train) throw Fatal(train.error());
  if (!train->empty()) {  // a tracrctl train run: per-epoch table, step summary, the exported model
    std::fflush(stdout);
    check_or_throw(print_train_table(db, *id));
  } else {
    check_or_throw(print_split_table(db, *id, stdout, o.wide, table_width()));
    check_or_throw(print_probe_table(db, *id, stdout, table_width()));
    check_or_throw(print_energy_table(db, *id, stdout));
    check_or_throw(print_exit_summary(db, *id, stdout));
  }
  auto devs = db.devices(*id);
  if (!devs) throw Fatal(devs.error());
  if (!devs->empty()) {
    std::fputs("\ndevices\n", stdout);
    std::vector<std::vector<std::string>> rows = {
        {"  device", "role", "hw_id", "cpu", "cores", "memory", "gpu", "kernel", "libtorch", "agent", "emulated limit"}};
    for (const auto& d : *devs) {
      std::string limit;
      if (d.cpu_quota) limit = fmt::format("{} core(s) of CPU time", *d.cpu_quota);
      if (d.cpu_cores_limit) limit += fmt::format("{}{} CPU(s)", limit.empty() ? "" : ", ", *d.cpu_cores_limit);
      rows.push_back({"  " + d.device, d.role, d.hw_id, d.cpu_model, std::to_string(d.cores),
                      fmt::format("{:.1f} GiB", d.memory_bytes / 1073741824.0), d.gpu.empty() ? "-" : d.gpu, d.kernel,
                      d.libtorch.empty() ? "-" : d.libtorch, d.agent_version, limit.empty() ? "-" : limit});
    }
    std::fputs(fit_table(rows, {0, 1, 2, 3, 6, 7, 8, 9, 10}, table_width(), {7, 9, 8, 2, 5, 6, 3}).c_str(), stdout);
  }
  auto ev = db.events(*id);
  if (!ev) throw Fatal(ev.error());
  if (!ev->empty()) {
    std::fputs("\nevents\n", stdout);
    std::vector<std::vector<std::string>> rows;
    for (const auto& e : *ev)
      rows.push_back({"  " + e.ts, e.level, e.kind, e.device.empty() ? "-" : e.device,
                      e.frame ? "frame " + std::to_string(*e.frame) : "-", e.message});
    std::fputs(align_wrap_last(rows, {0, 1, 2, 3, 4, 5}, table_width()).c_str(), stdout);
  }
  return {};
}

// The settings of a stored run (runs.config_yaml, written by to_yaml: one
// "key: value" line per setting, sections as "top:" then "  sub: value") by
// dotted name.
std::map<std::string, std::string> settings_of(const std::string& yaml) {
  std::map<std::string, std::string> out;
  std::string section;
  size_t pos = 0;
  while (pos < yaml.size()) {
    size_t eol = yaml.find('\n', pos);
    if (eol == std::string::npos) eol = yaml.size();
    std::string line = yaml.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    const bool nested = line[0] == ' ';
    const size_t b = line.find_first_not_of(' ');
    const size_t colon = line.find(':', b);
    if (b == std::string::npos || colon == std::string::npos) continue;
    const std::string key = line.substr(b, colon - b);
    std::string value = colon + 1 < line.size() ? line.substr(colon + 1) : "";
    value.erase(0, std::min(value.find_first_not_of(' '), value.size()));
    if (!nested) {
      if (value.empty()) {
        section = key;  // a section header; its settings follow indented
        continue;
      }
      section.clear();
      out[key] = value;
    } else {
      out[section.empty() ? key : section + "." + key] = value;
    }
  }
  return out;
}

// The runs `results compare` reads: each row, its split table, its
// recorded settings and its letter (A, B, ...).
struct Compared {
  std::vector<RunRow> runs;
  std::vector<std::map<std::vector<int>, SplitSummary>> tab;  // per run, by placement (cut points)
  std::vector<std::map<std::vector<int>, std::vector<int64_t>>> totals;  // per run and placement: timed frames' totals
  std::vector<std::map<std::string, std::string>> set;
  std::vector<std::string> label;
  size_t size() const { return runs.size(); }
  std::string value(size_t i, const std::string& k) const {
    auto it = set[i].find(k);
    return it == set[i].end() ? std::string("(not recorded)") : it->second;
  }
};

Compared load_compared(ResultsDb& db, const std::vector<std::string>& which) {
  Compared c;
  for (size_t i = 0; i < which.size(); ++i) {
    auto id = run_id_arg(db, which[i]);
    if (!id) throw Fatal(id.error());
    auto r = db.get_run(*id);
    if (!r) throw Fatal(r.error());
    auto t = db.split_table(*id);
    if (!t) throw Fatal(t.error());
    c.runs.push_back(*r);
    c.tab.emplace_back();
    for (const auto& sp : *t) c.tab.back()[sp.key()] = sp;
    auto frames = db.frames(*id);
    if (!frames) throw Fatal(frames.error());
    c.totals.emplace_back();
    for (const auto& f : *frames) {
      if (!f.ok || f.warmup) continue;
      std::vector<int> key = {static_cast<int>(f.split)};
      if (auto p = wire::parse_placement(f.placement); p && !p->cuts.empty()) key = p->cuts;
      c.totals.back()[key].push_back(f.total_ns);
    }
    c.set.push_back(settings_of(r->config_yaml));
    c.label.push_back(i < 26 ? std::string(1, static_cast<char>('A' + i)) : "R" + std::to_string(i + 1));
  }
  return c;
}

// Settings: every one whose value is not the same in all runs, in the first
// run's order of appearance, then the others'.
void print_settings_diff(const Compared& c) {
  const size_t n = c.size();
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (size_t i = 0; i < n; ++i)
    for (const auto& [k, v] : c.set[i])
      if (seen.insert(k).second) keys.push_back(k);
  std::vector<std::vector<std::string>> diff = {{"  setting"}};
  for (size_t i = 0; i < n; ++i) diff[0].push_back(c.label[i]);
  for (const auto& k : keys) {
    bool same = true;
    for (size_t i = 1; i < n; ++i) same = same && c.value(i, k) == c.value(0, k);
    if (same) continue;
    std::vector<std::string> row = {"  " + k};
    for (size_t i = 0; i < n; ++i) row.push_back(c.value(i, k));
    diff.push_back(row);
  }
  if (diff.size() == 1) {
    std::fputs("\nsettings: identical\n", stdout);
    return;
  }
  std::fputs("\nsettings that differ\n", stdout);
  std::set<size_t> left;
  for (size_t col = 0; col <= n; ++col) left.insert(col);
  std::fputs(align(diff, left).c_str(), stdout);
}

// What makes times incomparable: another model, input or batch.
void warn_incomparable(const Compared& c) {
  auto warn_if_differs = [&](const std::string& what, const std::function<std::string(size_t)>& get) {
    bool same = true;
    for (size_t i = 1; i < c.size(); ++i) same = same && get(i) == get(0);
    if (same) return;
    std::string vals;
    for (size_t i = 0; i < c.size(); ++i) vals += fmt::format("{}{} {}", i ? ", " : "", c.label[i], get(i));
    fmt::print("warning: the runs differ in {} ({}): their times and bytes are not comparable split by split\n", what,
               vals);
  };
  warn_if_differs("model", [&](size_t i) { return c.runs[i].model; });
  warn_if_differs("input size", [&](size_t i) { return c.value(i, "input_size"); });
  warn_if_differs("batch size", [&](size_t i) { return c.value(i, "batch_size"); });
}

// Top-1 and top-5 of one run at one split ("-" where unknown).
void accuracy_cells(const SplitSummary* a, std::vector<std::string>& row) {
  auto pct = [&](int64_t hit) {
    return a && a->labelled > 0 ? fmt::format("{:.2f}%", 100.0 * static_cast<double>(hit) / a->labelled)
                                : std::string("-");
  };
  bool top5_known = true;
  if (a)
    for (const auto& cs : a->codecs) top5_known = top5_known && cs.top5_known;
  row.push_back(a ? pct(a->top1_correct) : "-");
  row.push_back(a && top5_known ? pct(a->top5_correct) : "-");
}

// A run's change of the median against A at one placement, said against the
// runs' own spread: "-23.7% [-30.1,-15.2]" when the bootstrap interval leaves
// out 0, "within noise (+1.2% [-3.0,+4.1])" when it does not, "+1.2% (n<5)" with too
// few frames to say.
std::string change_cell(const Compared& c, size_t a, size_t b, const std::vector<int>& k) {
  const auto& ta = c.totals[a], &tb = c.totals[b];
  const auto ia = ta.find(k), ib = tb.find(k);
  static const std::vector<int64_t> none;
  const auto& va = ia == ta.end() ? none : ia->second;
  const auto& vb = ib == tb.end() ? none : ib->second;
  const double ma = c.tab[a].at(k).stage("total_ns").median_ns, mb = c.tab[b].at(k).stage("total_ns").median_ns;
  auto ch = analysis::median_change(va, vb);
  if (!ch) return fmt::format("{:+.1f}% (n<{})", (mb - ma) / ma * 100.0, analysis::kBootstrapMinFrames);
  const std::string interval = fmt::format("[{:+.1f},{:+.1f}]", ch->lo_pct, ch->hi_pct);
  return ch->exceeds_spread() ? fmt::format("{:+.1f}% {}", ch->change_pct, interval)
                              : fmt::format("within noise ({:+.1f}% {})", ch->change_pct, interval);
}

// One row per split: medians, change against A, p95, bytes, frames, and
// accuracy where labels exist (a lossy codec's cost beside its time).
std::vector<std::vector<std::string>> compare_rows(Compared& c) {
  const size_t n = c.size();
  std::set<std::vector<int>> splits;  // placements; a two-tier run's are its splits
  bool chained = false;
  for (auto& t : c.tab)
    for (auto& [k, v] : t) {
      splits.insert(k);
      chained = chained || k.size() > 1;
    }
  std::vector<bool> labelled(n, false);
  for (size_t i = 0; i < n; ++i)
    for (const auto& [k, v] : c.tab[i]) labelled[i] = labelled[i] || v.labelled > 0;
  std::vector<std::string> header = {chained ? "placement" : "split"};
  for (const char* col : {" med ms", " vs A", " p95 ms", " wire B", " frames"})
    for (size_t i = std::string(col) == " vs A" ? 1 : 0; i < n; ++i) header.push_back(c.label[i] + col);
  for (size_t i = 0; i < n; ++i)
    if (labelled[i]) header.insert(header.end(), {c.label[i] + " top-1", c.label[i] + " top-5"});
  std::vector<std::vector<std::string>> rows = {header};
  for (const auto& k : splits) {
    std::vector<const SplitSummary*> s(n, nullptr), any(n, nullptr);
    for (size_t i = 0; i < n; ++i)
      if (c.tab[i].count(k)) {
        any[i] = &c.tab[i][k];
        if (any[i]->frames > 0) s[i] = any[i];
      }
    std::string placement;
    for (int cut : k) placement += (placement.empty() ? "" : "|") + std::to_string(cut);
    std::vector<std::string> row = {placement};
    auto med = [&](size_t i) { return s[i]->stage("total_ns").median_ns; };
    for (size_t i = 0; i < n; ++i) row.push_back(s[i] ? format_ms(med(i)) : "-");
    for (size_t i = 1; i < n; ++i) row.push_back(s[0] && s[i] && med(0) > 0 ? change_cell(c, 0, i, k) : "-");
    for (size_t i = 0; i < n; ++i) row.push_back(s[i] ? format_ms(s[i]->stage("total_ns").p95_ns) : "-");
    for (size_t i = 0; i < n; ++i) row.push_back(s[i] ? fmt::format("{:.0f}", s[i]->mean_wire_bytes) : "-");
    for (size_t i = 0; i < n; ++i) row.push_back(any[i] ? std::to_string(any[i]->frames) : "-");
    for (size_t i = 0; i < n; ++i)
      if (labelled[i]) accuracy_cells(any[i], row);
    rows.push_back(row);
  }
  return rows;
}

Status cmd_compare(ResultsDb& db, const Opts& o) {
  if (o.positional.size() < 2) usage_error("expected two or more RUNs");
  Compared c = load_compared(db, o.positional);
  for (size_t i = 0; i < c.size(); ++i)
    fmt::print("{}\n", fit_fields(fmt::format("{}: run {} {} [{}]  model {}  codec {}  cipher {}  link {}", c.label[i],
                                              c.runs[i].id, c.runs[i].name, run_status_name(c.runs[i].status),
                                              c.runs[i].model, c.runs[i].codec, c.runs[i].cipher,
                                              c.runs[i].link.empty() ? "-" : c.runs[i].link + " (" + c.runs[i].shaping + ")"),
                                  table_width()));
  print_settings_diff(c);
  warn_incomparable(c);
  std::fputs("\n", stdout);
  // Narrower than the table: the frame counts, the p95s, then the bytes go
  // first (columns: split, n medians, n-1 changes, n p95, n bytes, n frames).
  const size_t n = c.size();
  std::vector<size_t> drop;
  for (size_t block : {4, 2, 3})
    for (size_t i = 0; i < n; ++i) drop.push_back(block * n + i);
  std::fputs(fit_table(compare_rows(c), {}, table_width(), drop).c_str(), stdout);
  if (n > 1)
    fmt::print("vs A: change of the median total, with the 95 % bootstrap interval of that change ({} resamples of "
               "each run's timed frames); \"within noise\" where the interval includes 0: the runs' own spread "
               "cannot tell them apart\n",
               analysis::kBootstrapResamples);
  return {};
}

// tracrctl results rm RUN [RUN ...]: each run and all its rows.
Status cmd_rm(ResultsDb& db, const Opts& o) {
  if (o.positional.empty()) usage_error("expected one or more RUNs");
  std::vector<RunRow> runs;
  for (const auto& p : o.positional) {  // every id checked before anything is deleted
    auto id = run_id_arg(db, p);
    if (!id) throw Fatal(id.error());
    auto r = db.get_run(*id);
    if (!r) throw Fatal(r.error());
    runs.push_back(*r);
  }
  for (const auto& r : runs) {
    std::vector<std::string> kept;
    if (auto st = db.delete_run(r.id, &kept); !st) {  // a running run, a write error: the command failed
      return core::command_failed(user_text(st.error()));
    }
    fmt::print("removed run {} '{}' [{}] and its {} frames with every other row of it from {}\n", r.id, r.name,
               run_status_name(r.status), r.frame_count, db.path());
    for (const auto& f : kept)
      fmt::print("kept {}: run {} listed it, but its content is no longer what the run wrote (SHA-256 differs: "
                 "rewritten since, e.g. by another database that shared the path before files were named by "
                 "database); delete it yourself if it is not needed\n", f, r.id);
  }
  return {};
}

Status cmd_export(ResultsDb& db, const Opts& o) {
  if (o.positional.empty()) usage_error("expected one or more RUNs");
  if (o.csv.empty() && o.json.empty() && o.summary_csv.empty())
    usage_error("expected --csv FILE, --summary-csv FILE and/or --json FILE");
  if (!o.json.empty() && o.positional.size() != 1)
    usage_error("--json writes one run: give one RUN (--csv and --summary-csv take several)");
  std::vector<int64_t> ids;
  for (const auto& a : o.positional) {
    auto id = run_id_arg(db, a);
    if (!id) throw Fatal(id.error());
    ids.push_back(*id);
  }
  for (const auto& f : o.csv) {
    check_or_throw(export_frames_csv(db, ids, f));
    fmt::print("wrote {} (frames of {} run(s))\n", f, ids.size());
  }
  for (const auto& f : o.summary_csv) {
    check_or_throw(export_summary_csv(db, ids, f));
    fmt::print("wrote {} (one row per run, split and stage; {} run(s))\n", f, ids.size());
  }
  for (const auto& f : o.json) {
    check_or_throw(export_run_json(db, ids.front(), f));
    fmt::print("wrote {}\n", f);
  }
  return {};
}

// The subcommand; usage errors and the database's errors arrive as Fatal
// from the helpers above.
Status results_sub(const ResultsOptions& opts) {
  const std::string& sub = opts.sub;
  Opts o = opts;
  if (o.db.empty()) o.db = default_results_db();
  if (!o.status.empty() && !parse_run_status(o.status))
    usage_error("--status: expected running, completed, failed or interrupted, got '" + o.status + "'");
  if (sub == "list" && !o.positional.empty()) usage_error("unexpected argument '" + o.positional[0] + "'");
  if (sub == "schema") {
    if (!o.positional.empty()) usage_error("unexpected argument '" + o.positional[0] + "'");
    std::fputs((o.markdown ? format_schema_markdown() : format_schema_text()).c_str(), stdout);
    return {};
  }
  if (sub == "migrate" || sub == "rm") {  // the commands that write: an existing database, opened read-write
    if (sub == "migrate" && !o.positional.empty()) usage_error("unexpected argument '" + o.positional[0] + "'");
    if (!std::ifstream(o.db)) return core::command_failed(fmt::format("{}: no such results database", o.db));
    auto db = ResultsDb::open(o.db);
    if (!db) return core::command_failed(user_text(db.error()));
    if (sub == "rm") return cmd_rm(*db, o);
    fmt::print("{}: schema version {}\n", o.db, *db->schema_version());
    return {};
  }
  auto db = ResultsDb::open_readonly(o.db);
  if (!db) return core::command_failed(user_text(db.error()));
  if (sub == "list") return cmd_list(*db, o);
  if (sub == "show") return cmd_show(*db, o);
  if (sub == "compare") return cmd_compare(*db, o);
  if (sub == "exits") {
    if (o.positional.size() != 1) usage_error("expected one RUN");
    auto id = run_id_arg(*db, o.positional[0]);
    if (!id) throw Fatal(id.error());
    const Status st = print_exit_sweep(*db, *id, o.thresholds, o.measure, o.exits_csv);
    if (!st && st.error().code == Errc::invalid_argument) throw Fatal(st.error());
    return st;
  }
  return cmd_export(*db, o);
}

}  // namespace

Status cmd_results(const ResultsOptions& opts) {
  try {
    return results_sub(opts);
  } catch (const Fatal& f) {
    if (f.err.code != Errc::invalid_argument) return f.err;
    return make_error(Errc::invalid_argument,
                      fmt::format("{}\nrun 'tracrctl results {} --help'", user_text(f.err), opts.sub));
  }
}

}  // namespace tracr::controller
