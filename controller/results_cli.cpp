#include "controller/results_cli.hpp"
#include "controller/user_error.hpp"
#include "controller/results_export.hpp"
#include "controller/default_db.hpp"

#include <sqlite3.h>
#include "controller/train.hpp"

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

namespace tracr::controller {

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

// Integral values print as integers ("1500000", not "1.5e+06").
std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
}

Status write_file(const std::string& file, const std::string& text) {
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(Errc::io, fmt::format("{}: cannot write: {}", file, std::strerror(errno)));
    out << text;
    out.flush();
    if (!out) return make_error(Errc::io, fmt::format("{}: write failed: {}", file, std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error(Errc::io, fmt::format("{}: cannot write: {}", file, std::strerror(errno)));
  }
  return {};
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"') o += '"';
    o += ch;
  }
  return o + "\"";
}

namespace {

std::string ms(double ns) { return fmt::format("{:.3f}", ns / 1e6); }



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

// Rows of cells printed with columns padded to their widest cell; columns
// listed in `left` are left-aligned, the others right-aligned.
std::string align(const std::vector<std::vector<std::string>>& rows, const std::set<size_t>& left = {}) {
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  std::string o;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      if (i) line += "  ";
      line += left.count(i) ? fmt::format("{:<{}}", r[i], w[i]) : fmt::format("{:>{}}", r[i], w[i]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    o += line + "\n";
  }
  return o;
}

using Opts = ResultsOptions;

[[noreturn]] void usage_error(const std::string& msg) {
  throw Fatal(make_error(Errc::invalid_argument, msg));
}


}  // namespace

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

namespace {


std::string run_header(const RunRow& r) {
  std::string o = fmt::format("run {}  {}  [{}]\n", r.id, r.name, run_status_name(r.status));
  o += fmt::format("  started {}  ended {}  duration {}\n", r.started_at,
                   r.ended_at.empty() ? "-" : r.ended_at, duration_text(r));
  o += fmt::format("  model {}  codec {}  cipher {}  tracr {}  protocol {}\n", r.model, r.codec, r.cipher,
                   r.tracr_version, r.protocol_version);
  o += fmt::format("  controller {}:{}  frames {}\n", r.controller_host, r.controller_pid, r.frame_count);
  if (!r.link.empty()) o += fmt::format("  link {}: {}\n", r.link, r.shaping);
  if (!r.error.empty()) o += "  error: " + r.error + "\n";
  return o;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int cmd_list(ResultsDb& db, const Opts& o) {
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
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"id", "name", "status", "started", "duration", "model", "codec", "cipher", "frames"}};
  for (const auto& r : *runs)
    rows.push_back({std::to_string(r.id), r.name, std::string(run_status_name(r.status)), r.started_at,
                    duration_text(r), r.model, r.codec, r.cipher, std::to_string(r.frame_count)});
  std::fputs(align(rows, {1, 2, 3, 5, 6, 7}).c_str(), stdout);
  return 0;
}

int cmd_show(ResultsDb& db, const Opts& o) {
  if (o.positional.size() != 1) usage_error("expected one RUN");
  auto id = run_id_arg(db, o.positional[0]);
  if (!id) throw Fatal(id.error());
  auto run = db.get_run(*id);
  if (!run) throw Fatal(run.error());
  std::fputs(run_header(*run).c_str(), stdout);
  std::fputs("\n", stdout);
  auto train = db.rows("train_runs", *id);
  if (!train) throw Fatal(train.error());
  if (!train->empty()) {  // a tracrctl train run: per-epoch table, step summary, the exported model
    std::fflush(stdout);
    check_or_throw(print_train_table(db, *id));
  } else {
    check_or_throw(print_split_table(db, *id, stdout, o.wide));
    check_or_throw(print_probe_table(db, *id, stdout));
    check_or_throw(print_energy_table(db, *id, stdout));
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
    std::fputs(align(rows, {0, 1, 2, 3, 6, 7, 8, 9, 10}).c_str(), stdout);
  }
  auto ev = db.events(*id);
  if (!ev) throw Fatal(ev.error());
  if (!ev->empty()) {
    std::fputs("\nevents\n", stdout);
    std::vector<std::vector<std::string>> rows;
    for (const auto& e : *ev)
      rows.push_back({"  " + e.ts, e.level, e.kind, e.device.empty() ? "-" : e.device,
                      e.frame ? "frame " + std::to_string(*e.frame) : "-", e.message});
    std::fputs(align(rows, {0, 1, 2, 3, 4, 5}).c_str(), stdout);
  }
  return 0;
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

int cmd_compare(ResultsDb& db, const Opts& o) {
  if (o.positional.size() < 2) usage_error("expected two or more RUNs");
  const size_t n = o.positional.size();
  std::vector<RunRow> runs(n);
  std::vector<std::map<int, SplitSummary>> tab(n);
  std::vector<std::string> label(n);
  for (size_t i = 0; i < n; ++i) {
    auto id = run_id_arg(db, o.positional[i]);
    if (!id) throw Fatal(id.error());
    auto r = db.get_run(*id);
    if (!r) throw Fatal(r.error());
    runs[i] = *r;
    auto t = db.split_table(*id);
    if (!t) throw Fatal(t.error());
    for (const auto& s : *t) tab[i][s.split] = s;
    label[i] = i < 26 ? std::string(1, static_cast<char>('A' + i)) : "R" + std::to_string(i + 1);
  }
  for (size_t i = 0; i < n; ++i)
    fmt::print("{}: run {} {} [{}]  model {}  codec {}  cipher {}  link {}\n", label[i], runs[i].id, runs[i].name,
               run_status_name(runs[i].status), runs[i].model, runs[i].codec, runs[i].cipher,
               runs[i].link.empty() ? "-" : runs[i].link + " (" + runs[i].shaping + ")");

  // Settings: every one whose value is not the same in all runs.
  std::vector<std::map<std::string, std::string>> set(n);
  std::vector<std::string> keys;  // in the first run's order of appearance, then others'
  for (size_t i = 0; i < n; ++i) set[i] = settings_of(runs[i].config_yaml);
  {
    std::set<std::string> seen;
    for (size_t i = 0; i < n; ++i)
      for (const auto& [k, v] : set[i])
        if (seen.insert(k).second) keys.push_back(k);
  }
  auto value = [&](size_t i, const std::string& k) {
    auto it = set[i].find(k);
    return it == set[i].end() ? std::string("(not recorded)") : it->second;
  };
  std::vector<std::vector<std::string>> diff = {{"  setting"}};
  for (size_t i = 0; i < n; ++i) diff[0].push_back(label[i]);
  for (const auto& k : keys) {
    bool same = true;
    for (size_t i = 1; i < n; ++i) same = same && value(i, k) == value(0, k);
    if (same) continue;
    std::vector<std::string> row = {"  " + k};
    for (size_t i = 0; i < n; ++i) row.push_back(value(i, k));
    diff.push_back(row);
  }
  if (diff.size() == 1) {
    std::fputs("\nsettings: identical\n", stdout);
  } else {
    std::fputs("\nsettings that differ\n", stdout);
    std::set<size_t> left;
    for (size_t c = 0; c <= n; ++c) left.insert(c);
    std::fputs(align(diff, left).c_str(), stdout);
  }
  // What makes times incomparable: another model, input or batch.
  auto warn_if_differs = [&](const std::string& what, const std::function<std::string(size_t)>& get) {
    bool same = true;
    for (size_t i = 1; i < n; ++i) same = same && get(i) == get(0);
    if (same) return;
    std::string vals;
    for (size_t i = 0; i < n; ++i) vals += fmt::format("{}{} {}", i ? ", " : "", label[i], get(i));
    fmt::print("warning: the runs differ in {} ({}): their times and bytes are not comparable split by split\n", what,
               vals);
  };
  warn_if_differs("model", [&](size_t i) { return runs[i].model; });
  warn_if_differs("input size", [&](size_t i) { return value(i, "input_size"); });
  warn_if_differs("batch size", [&](size_t i) { return value(i, "batch_size"); });
  std::fputs("\n", stdout);

  std::set<int> splits;
  for (auto& t : tab)
    for (auto& [k, v] : t) splits.insert(k);
  std::vector<std::string> header = {"split"};
  for (size_t i = 0; i < n; ++i) header.push_back(label[i] + " med ms");
  for (size_t i = 1; i < n; ++i) header.push_back(label[i] + " vs A");
  for (size_t i = 0; i < n; ++i) header.push_back(label[i] + " p95 ms");
  for (size_t i = 0; i < n; ++i) header.push_back(label[i] + " wire B");
  for (size_t i = 0; i < n; ++i) header.push_back(label[i] + " frames");
  // Accuracy where labels exist: a lossy codec's cost beside its time.
  std::vector<bool> labelled(n, false);
  for (size_t i = 0; i < n; ++i)
    for (const auto& [k, v] : tab[i]) labelled[i] = labelled[i] || v.labelled > 0;
  for (size_t i = 0; i < n; ++i)
    if (labelled[i]) {
      header.push_back(label[i] + " top-1");
      header.push_back(label[i] + " top-5");
    }
  std::vector<std::vector<std::string>> rows = {header};
  for (int k : splits) {
    std::vector<const SplitSummary*> s(n, nullptr);
    for (size_t i = 0; i < n; ++i)
      if (tab[i].count(k) && tab[i][k].frames > 0) s[i] = &tab[i][k];
    std::vector<std::string> row = {std::to_string(k)};
    auto med = [&](size_t i) { return s[i]->stage("total_ns").median_ns; };
    for (size_t i = 0; i < n; ++i) row.push_back(s[i] ? ms(med(i)) : "-");
    for (size_t i = 1; i < n; ++i)
      row.push_back(s[0] && s[i] && med(0) > 0 ? fmt::format("{:+.1f}%", (med(i) - med(0)) / med(0) * 100.0) : "-");
    for (size_t i = 0; i < n; ++i) row.push_back(s[i] ? ms(s[i]->stage("total_ns").p95_ns) : "-");
    for (size_t i = 0; i < n; ++i) row.push_back(s[i] ? fmt::format("{:.0f}", s[i]->mean_wire_bytes) : "-");
    for (size_t i = 0; i < n; ++i) row.push_back(tab[i].count(k) ? std::to_string(tab[i][k].frames) : "-");
    for (size_t i = 0; i < n; ++i) {
      if (!labelled[i]) continue;
      const SplitSummary* a = tab[i].count(k) ? &tab[i][k] : nullptr;
      auto pct = [&](int64_t hit) {
        return a && a->labelled > 0 ? fmt::format("{:.2f}%", 100.0 * static_cast<double>(hit) / a->labelled)
                                    : std::string("-");
      };
      bool top5_known = true;
      if (a)
        for (const auto& c : a->codecs) top5_known = top5_known && c.top5_known;
      row.push_back(a ? pct(a->top1_correct) : "-");
      row.push_back(a && top5_known ? pct(a->top5_correct) : "-");
    }
    rows.push_back(row);
  }
  std::fputs(align(rows).c_str(), stdout);
  return 0;
}

// tracrctl results rm RUN [RUN ...]: each run and all its rows.
int cmd_rm(ResultsDb& db, const Opts& o) {
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
    if (auto st = db.delete_run(r.id); !st) {  // a running run, a write error: the command failed
      fmt::print(stderr, "tracrctl results: {}\n", user_text(st.error()));
      return 1;
    }
    fmt::print("removed run {} '{}' [{}] and its {} frames with every other row of it from {}\n", r.id, r.name,
               run_status_name(r.status), r.frame_count, db.path());
  }
  return 0;
}

int cmd_export(ResultsDb& db, const Opts& o) {
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
  return 0;
}

}  // namespace

std::string cut_label(const std::map<int, std::string>& cut_names, int split, bool wide) {
  auto it = cut_names.find(split);
  if (split == 0) return "(input)";
  if (it == cut_names.end()) return "-";
  const std::string& n = it->second;
  return !wide && n.size() > 14 ? ".." + n.substr(n.size() - 12) : n;
}

std::string format_split_table(const std::vector<SplitSummary>& rows, bool wide,
                               const std::map<int, std::string>& cut_names) {
  // Medians of each term; per frame the terms add up to total exactly
  // (record_fields.def), medians of the terms need not.
  static const std::vector<std::pair<const char*, const char*>> all_terms = {
      {"head_ns", "head"},     {"encode_ns", "encode"}, {"network_ns", "network"}, {"server_ns", "server"},
      {"queue_ns", "queue"},   {"return_ns", "return"}, {"post_ns", "post"}};
  static const std::vector<std::pair<const char*, const char*>> narrow_terms = {
      {"head_ns", "head"}, {"network_ns", "network"}, {"server_ns", "server"}};
  const auto& terms = wide ? all_terms : narrow_terms;
  bool labels = false;
  for (const auto& s : rows) labels = labels || s.labelled > 0;
  // Two header lines; the narrow table puts the statistic under the stage
  // ("total" over "med ms") to stay within 120 columns.
  std::vector<std::string> h1 = {"", "split", "cut after", "frames"};
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
  for (const auto& t : terms) col(t.second, "med", "ms");
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
  std::vector<std::vector<std::string>> cells = {h1, h2};
  int best = -1;
  double best_v = 0;
  int64_t flagged = 0, slow = 0;
  for (const auto& s : rows) {
    flagged += s.flagged;
    slow += s.slow_frames;
    if (s.frames > 0 && (best < 0 || s.stage("total_ns").median_ns < best_v)) {
      best = s.split;
      best_v = s.stage("total_ns").median_ns;
    }
  }
  for (const auto& s : rows) {
    const bool any = s.frames > 0;
    auto t = [&](const char* f, bool p95 = false) {
      if (!any || !s.stages.count(f)) return std::string("-");
      return ms(p95 ? s.stage(f).p95_ns : s.stage(f).median_ns);
    };
    const bool fps = any && s.throughput_fps > 0;
    std::vector<std::string> row = {s.split == best ? "*" : "", std::to_string(s.split),
                                    cut_label(cut_names, s.split, wide), std::to_string(s.frames)};
    if (wide) {
      row.push_back(std::to_string(s.failed));
      row.push_back(std::to_string(s.flagged));
    }
    row.push_back(t("total_ns"));
    row.push_back(t("total_ns", true));
    for (const auto& term : terms) row.push_back(t(term.first));
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
    if (labels) {
      auto pct = [&](int64_t hit) {
        return s.labelled > 0 ? fmt::format("{:.2f}%", 100.0 * static_cast<double>(hit) / s.labelled) : std::string("-");
      };
      bool top5_known = true;
      for (const auto& c : s.codecs) top5_known = top5_known && c.top5_known;
      row.push_back(pct(s.top1_correct));
      row.push_back(top5_known ? pct(s.top5_correct) : "-");
    }
    cells.push_back(row);
  }
  std::string out = align(cells, {0, 2});
  if (best >= 0) out += fmt::format("* lowest median total time: split {}\n", best);
  if (flagged > 0)
    out += fmt::format("{} frame(s) flagged (negative network time: an assumption broke; see frames.flags)\n", flagged);
  if (slow > 0) out += fmt::format("{} frame(s) slower than 10x their split's median (slow_frame events)\n", slow);
  return out;
}

Status print_probe_table(ResultsDb& db, int64_t run_id, std::FILE* out) {
  auto probes = db.probes(run_id);
  if (!probes) return probes.error();
  if (probes->empty()) return {};
  std::vector<std::vector<std::string>> rows = {{"  participant", "trigger", "rtt med ms", "rtt p95 ms", "rtt min ms",
                                                 "up Mbit/s", "down Mbit/s", "up bytes", "down bytes", "cipher"}};
  auto mbps = [](const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("-"); };
  for (const auto& p : *probes)
    rows.push_back({"  " + p.participant, p.trigger, ms(static_cast<double>(p.rtt_median_ns)),
                    ms(static_cast<double>(p.rtt_p95_ns)), ms(static_cast<double>(p.rtt_min_ns)), mbps(p.up_mbps),
                    mbps(p.down_mbps), std::to_string(p.up_bytes), std::to_string(p.down_bytes), p.cipher});
  std::fputs("\nlink probes\n", out);
  std::fputs(align(rows, {0, 1, 9}).c_str(), out);
  return {};
}

Status print_energy_table(ResultsDb& db, int64_t run_id, std::FILE* out) {
  auto stats = db.energy_stats(run_id);
  if (!stats) return stats.error();
  if (stats->empty()) return {};
  // Every figure beside its source: measured:<meter> or modelled:<model>.
  std::vector<std::vector<std::string>> rows = {
      {"  split", "device", "stage", "source", "frames", "median J", "p95 J", "median net J", "p95 net J"}};
  auto j = [](const std::optional<double>& v) { return v ? fmt::format("{:.6f}", *v) : std::string("-"); };
  for (const auto& e : *stats)
    rows.push_back({"  " + std::to_string(e.split), e.device, e.stage, e.source, std::to_string(e.n), j(e.median_j),
                    j(e.p95_j), j(e.median_net_j), j(e.p95_net_j)});
  std::fputs("\nenergy per frame (timed frames; net = idle power subtracted)\n", out);
  std::fputs(align(rows, {1, 2, 3}).c_str(), out);
  return {};
}

Result<std::map<int, std::string>> cut_names(ResultsDb& db, int64_t run_id) {
  // Split k cuts after layer k-1: its name, from the run's layer profiles.
  std::map<int, std::string> out;
  auto rows = db.rows("layer_profiles", run_id);
  if (!rows) return rows.error();
  const TableInfo* t = nullptr;
  for (const auto& x : schema_tables())
    if (x.name == "layer_profiles") t = &x;
  size_t idx = 0, name = 0;
  for (size_t i = 0; i < t->columns.size(); ++i) {
    if (t->columns[i].name == "layer_index") idx = i;
    if (t->columns[i].name == "name") name = i;
  }
  for (const auto& r : *rows)
    if (r[idx] && r[name]) out[std::stoi(*r[idx]) + 1] = *r[name];
  return out;
}

Status print_split_table(ResultsDb& db, int64_t run_id, std::FILE* out, bool wide) {
  auto rows = db.split_table(run_id);
  if (!rows) return rows.error();
  if (rows->empty()) {
    fmt::print(out, "run {}: no frames recorded\n", run_id);
    return {};
  }
  auto names = cut_names(db, run_id);
  if (!names) return names.error();
  std::fputs(format_split_table(*rows, wide, *names).c_str(), out);
  // Per split and codec (set_codec commands and compression: auto give a
  // split several), with the sample counts behind each figure.
  std::string lines;
  for (const auto& s : *rows)
    for (const auto& c : s.codecs) {
      if (c.labelled == 0) continue;
      auto pct = [&](int64_t hit) { return fmt::format("{:.2f}%", 100.0 * static_cast<double>(hit) / c.labelled); };
      lines += fmt::format("  split {:>3}  {:<24} {:>7} samples  top-1 {:>7} ({})  top-5 {:>7}\n", s.split, c.codec,
                           c.labelled, pct(c.top1_correct), c.top1_correct,
                           c.top5_known ? fmt::format("{} ({})", pct(c.top5_correct), c.top5_correct) : "-");
    }
  if (!lines.empty()) fmt::print(out, "\naccuracy per split and codec (timed frames with a label)\n{}", lines);
  std::fflush(out);
  return {};
}

Status export_run_csv(ResultsDb& db, int64_t run_id, const std::string& file) {
  return export_frames_csv(db, {run_id}, file);
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

int cmd_results(const ResultsOptions& opts) {
  try {
    const std::string& sub = opts.sub;
    Opts o = opts;
    if (o.db.empty()) o.db = default_results_db();
    if (!o.status.empty() && !parse_run_status(o.status))
      usage_error("--status: expected running, completed, failed or interrupted, got '" + o.status + "'");
    if (sub == "list" && !o.positional.empty())
      usage_error("unexpected argument '" + o.positional[0] + "'");
    if (sub == "schema") {
      if (!o.positional.empty()) usage_error("unexpected argument '" + o.positional[0] + "'");
      std::fputs((o.markdown ? format_schema_markdown() : format_schema_text()).c_str(), stdout);
      return 0;
    }
    if (sub == "migrate" || sub == "rm") {  // the commands that write: an existing database, opened read-write
      if (sub == "migrate" && !o.positional.empty())
        usage_error("unexpected argument '" + o.positional[0] + "'");
      if (!std::ifstream(o.db)) {
        fmt::print(stderr, "tracrctl results: {}: no such results database\n", o.db);
        return 1;
      }
      auto db = ResultsDb::open(o.db);
      if (!db) {
        fmt::print(stderr, "tracrctl results: {}\n", user_text(db.error()));
        return 1;
      }
      if (sub == "migrate") {
        fmt::print("{}: schema version {}\n", o.db, *db->schema_version());
        return 0;
      }
      try {
        return cmd_rm(*db, o);
      } catch (const Fatal& f) {
        fmt::print(stderr, "tracrctl results {}: {}\n", sub, user_text(f.err));
        return f.err.code == Errc::invalid_argument ? 2 : 1;
      }
    }
    auto db = ResultsDb::open_readonly(o.db);
    if (!db) {
      fmt::print(stderr, "tracrctl results: {}\n", user_text(db.error()));
      return 1;
    }
    try {
      if (sub == "list") return cmd_list(*db, o);
      if (sub == "show") return cmd_show(*db, o);
      if (sub == "compare") return cmd_compare(*db, o);
      return cmd_export(*db, o);
    } catch (const Fatal& f) {
      fmt::print(stderr, "tracrctl results {}: {}\n", sub, user_text(f.err));
      return f.err.code == Errc::invalid_argument ? 2 : 1;
    }
  } catch (const Fatal& f) {
    fmt::print(stderr, "tracrctl results {0}: {1}\nrun 'tracrctl results {0} --help'\n", opts.sub, user_text(f.err));
    return 2;
  }
}

}  // namespace tracr::controller
