#include "controller/results_cli.hpp"

#include "controller/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <set>

namespace tracr::controller {

namespace {

std::string ms(double ns) { return fmt::format("{:.3f}", ns / 1e6); }


// Integral values print as integers ("1500000", not "1.5e+06").
std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
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

struct Opts {
  std::string db;
  std::vector<std::string> positional;
  std::vector<std::string> csv, json;
  int limit = 0;
};

[[noreturn]] void usage_error(const std::string& msg) {
  throw Fatal(make_error(Errc::invalid_argument, msg));
}

Opts parse_opts(const std::vector<std::string>& args) {
  Opts o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) usage_error(a + " needs a value");
      return args[++i];
    };
    if (a == "--db")
      o.db = next();
    else if (a.rfind("--db=", 0) == 0)
      o.db = a.substr(5);
    else if (a == "--csv")
      o.csv.push_back(next());
    else if (a == "--json")
      o.json.push_back(next());
    else if (a == "--limit") {
      const std::string v = next();
      char* e = nullptr;
      long n = std::strtol(v.c_str(), &e, 10);
      if (v.empty() || *e || n < 0) usage_error("--limit: expected a count >= 0, got '" + v + "'");
      o.limit = static_cast<int>(n);
    } else if (a.size() > 1 && a[0] == '-') {
      usage_error("unknown option '" + a + "'; expected --db, --csv, --json or --limit");
    } else {
      o.positional.push_back(a);
    }
  }
  if (o.db.empty()) {
    const char* env = std::getenv("TRACR_OUTPUT");
    o.db = env && *env ? env : "results/tracr.db";
  }
  return o;
}

Result<int64_t> run_id_arg(ResultsDb& db, const std::string& s) {
  if (s == "last" || s == "latest") return db.latest_run();
  char* e = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &e, 10);
  if (s.empty() || *e || errno || v <= 0)
    return make_error(Errc::invalid_argument,
                      "RUN: expected a run id (see `tracrctl results list`) or 'last', got '" + s + "'");
  return static_cast<int64_t>(v);
}

void usage() {
  std::fputs(
      "usage: tracrctl results list [--db PATH] [--limit N]\n"
      "       tracrctl results show RUN [--db PATH]\n"
      "       tracrctl results compare RUN RUN [--db PATH]\n"
      "       tracrctl results export RUN (--csv FILE | --json FILE)... [--db PATH]\n"
      "RUN is a run id or 'last'; the database defaults to $TRACR_OUTPUT or results/tracr.db\n",
      stderr);
}

std::string run_header(const RunRow& r) {
  std::string o = fmt::format("run {}  {}  [{}]\n", r.id, r.name, run_status_name(r.status));
  o += fmt::format("  started {}  ended {}  duration {}\n", r.started_at,
                   r.ended_at.empty() ? "-" : r.ended_at, duration_text(r));
  o += fmt::format("  model {}  codec {}  cipher {}  tracr {}  protocol {}\n", r.model, r.codec, r.cipher,
                   r.tracr_version, r.protocol_version);
  o += fmt::format("  controller {}:{}  frames {}\n", r.controller_host, r.controller_pid, r.frame_count);
  if (!r.error.empty()) o += "  error: " + r.error + "\n";
  return o;
}

int cmd_list(ResultsDb& db, const Opts& o) {
  auto runs = db.list_runs(o.limit);
  if (!runs) throw Fatal(runs.error());
  if (runs->empty()) {
    fmt::print("no runs in {}\n", db.path());
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
  if (o.positional.size() != 1) usage_error("results show: expected one RUN");
  auto id = run_id_arg(db, o.positional[0]);
  if (!id) throw Fatal(id.error());
  auto run = db.get_run(*id);
  if (!run) throw Fatal(run.error());
  std::fputs(run_header(*run).c_str(), stdout);
  std::fputs("\n", stdout);
  check_or_throw(print_split_table(db, *id, stdout));
  auto ev = db.events(*id);
  if (!ev) throw Fatal(ev.error());
  if (!ev->empty()) {
    std::fputs("\nevents\n", stdout);
    std::vector<std::vector<std::string>> rows;
    for (const auto& e : *ev) rows.push_back({"  " + e.ts, e.level, e.kind, e.message});
    std::fputs(align(rows, {0, 1, 2, 3}).c_str(), stdout);
  }
  return 0;
}

int cmd_compare(ResultsDb& db, const Opts& o) {
  if (o.positional.size() != 2) usage_error("results compare: expected two RUNs");
  int64_t ids[2];
  RunRow runs[2];
  std::map<int, SplitSummary> tab[2];
  for (int i = 0; i < 2; ++i) {
    auto id = run_id_arg(db, o.positional[i]);
    if (!id) throw Fatal(id.error());
    ids[i] = *id;
    auto r = db.get_run(ids[i]);
    if (!r) throw Fatal(r.error());
    runs[i] = *r;
    auto t = db.split_table(ids[i]);
    if (!t) throw Fatal(t.error());
    for (const auto& s : *t) tab[i][s.split] = s;
  }
  for (int i = 0; i < 2; ++i)
    fmt::print("{}: run {} {} [{}]  model {}  codec {}  cipher {}\n", i == 0 ? "A" : "B", runs[i].id,
               runs[i].name, run_status_name(runs[i].status), runs[i].model, runs[i].codec, runs[i].cipher);
  std::fputs("\n", stdout);
  std::set<int> splits;
  for (auto& t : tab)
    for (auto& [k, v] : t) splits.insert(k);
  std::vector<std::vector<std::string>> rows = {{"split", "A med ms", "B med ms", "delta", "A p95 ms",
                                                 "B p95 ms", "A wire B", "B wire B", "A frames", "B frames"}};
  for (int k : splits) {
    const SplitSummary* a = tab[0].count(k) ? &tab[0][k] : nullptr;
    const SplitSummary* b = tab[1].count(k) ? &tab[1][k] : nullptr;
    auto cell = [](const SplitSummary* s, auto f) { return s && s->frames > 0 ? f(*s) : std::string("-"); };
    std::string delta = "-";
    if (a && b && a->frames > 0 && b->frames > 0 && a->total.median_ns > 0)
      delta = fmt::format("{:+.1f}%", (b->total.median_ns - a->total.median_ns) / a->total.median_ns * 100.0);
    rows.push_back({std::to_string(k), cell(a, [](const SplitSummary& s) { return ms(s.total.median_ns); }),
                    cell(b, [](const SplitSummary& s) { return ms(s.total.median_ns); }), delta,
                    cell(a, [](const SplitSummary& s) { return ms(s.total.p95_ns); }),
                    cell(b, [](const SplitSummary& s) { return ms(s.total.p95_ns); }),
                    cell(a, [](const SplitSummary& s) { return fmt::format("{:.0f}", s.mean_wire_bytes); }),
                    cell(b, [](const SplitSummary& s) { return fmt::format("{:.0f}", s.mean_wire_bytes); }),
                    a ? std::to_string(a->frames) : "-", b ? std::to_string(b->frames) : "-"});
  }
  std::fputs(align(rows).c_str(), stdout);
  return 0;
}

int cmd_export(ResultsDb& db, const Opts& o) {
  if (o.positional.size() != 1) usage_error("results export: expected one RUN");
  if (o.csv.empty() && o.json.empty()) usage_error("results export: expected --csv FILE and/or --json FILE");
  auto id = run_id_arg(db, o.positional[0]);
  if (!id) throw Fatal(id.error());
  for (const auto& f : o.csv) {
    check_or_throw(export_run_csv(db, *id, f));
    fmt::print("wrote {}\n", f);
  }
  for (const auto& f : o.json) {
    check_or_throw(export_run_json(db, *id, f));
    fmt::print("wrote {}\n", f);
  }
  return 0;
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

const char* kFrameCsvHeader =
    "run_id,participant,split,sample,rep,batch,warmup,head_ns,encode_ns,transfer_ns,decode_ns,tail_ns,return_"
    "ns,"
    "total_ns,raw_bytes,wire_bytes,codec,cipher,ok,error,energy_j,energy_source,result_json";

}  // namespace

std::string format_split_table(const std::vector<SplitSummary>& rows) {
  std::vector<std::vector<std::string>> cells = {
      {"", "split", "frames", "failed", "total med", "total p95", "head med", "encode med", "transfer med",
       "transfer p95", "decode med", "tail med", "raw bytes", "wire bytes", "ratio"}};
  cells.push_back({"", "", "", "", "ms", "ms", "ms", "ms", "ms", "ms", "ms", "ms", "", "", ""});
  int best = -1;
  double best_v = 0;
  for (const auto& s : rows)
    if (s.frames > 0 && (best < 0 || s.total.median_ns < best_v)) {
      best = s.split;
      best_v = s.total.median_ns;
    }
  for (const auto& s : rows) {
    const bool any = s.frames > 0;
    auto t = [&](double ns) { return any ? ms(ns) : std::string("-"); };
    std::string ratio = any && s.mean_wire_bytes > 0
                            ? fmt::format("{:.2f}x", s.mean_raw_bytes / s.mean_wire_bytes)
                            : std::string("-");
    cells.push_back({s.split == best ? "*" : "", std::to_string(s.split), std::to_string(s.frames),
                     std::to_string(s.failed), t(s.total.median_ns), t(s.total.p95_ns), t(s.head.median_ns),
                     t(s.encode.median_ns), t(s.transfer.median_ns), t(s.transfer.p95_ns),
                     t(s.decode.median_ns), t(s.tail.median_ns),
                     any ? fmt::format("{:.0f}", s.mean_raw_bytes) : "-",
                     any ? fmt::format("{:.0f}", s.mean_wire_bytes) : "-", ratio});
  }
  std::string out = align(cells, {0});
  if (best >= 0) out += fmt::format("* lowest median total time: split {}\n", best);
  return out;
}

Status print_split_table(ResultsDb& db, int64_t run_id, std::FILE* out) {
  auto rows = db.split_table(run_id);
  if (!rows) return rows.error();
  if (rows->empty()) {
    fmt::print(out, "run {}: no frames recorded\n", run_id);
    return {};
  }
  std::fputs(format_split_table(*rows).c_str(), out);
  std::fflush(out);
  return {};
}

Status export_run_csv(ResultsDb& db, int64_t run_id, const std::string& file) {
  auto run = db.get_run(run_id);
  if (!run) return run.error();
  auto frames = db.frames(run_id);
  if (!frames) return frames.error();
  std::string o = std::string(kFrameCsvHeader) + "\r\n";
  for (const auto& f : *frames) {
    o += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\r\n", f.run_id,
                     csv_field(f.participant), f.split, f.sample, f.rep, f.batch, f.warmup ? 1 : 0, f.head_ns,
                     f.encode_ns, f.transfer_ns, f.decode_ns, f.tail_ns, f.return_ns, f.total_ns, f.raw_bytes,
                     f.wire_bytes, csv_field(f.codec), csv_field(f.cipher), f.ok ? 1 : 0, csv_field(f.error),
                     f.energy_j ? json_num(*f.energy_j) : "", csv_field(f.energy_source),
                     csv_field(f.result_json));
  }
  return write_file(file, o);
}

Status export_run_json(ResultsDb& db, int64_t run_id, const std::string& file) {
  auto run = db.get_run(run_id);
  if (!run) return run.error();
  auto sums = db.split_table(run_id);
  if (!sums) return sums.error();
  auto frames = db.frames(run_id);
  if (!frames) return frames.error();
  auto layers = db.layer_profiles(run_id);
  if (!layers) return layers.error();
  auto events = db.events(run_id);
  if (!events) return events.error();
  const RunRow& r = *run;
  std::string o = "{\n\"run\": ";
  o += fmt::format(
      "{{\"id\":{},\"name\":{},\"status\":{},\"started_at\":{},\"ended_at\":{},\"tracr_version\":{},"
      "\"protocol_version\":{},\"model\":{},\"codec\":{},\"cipher\":{},\"controller_host\":{},"
      "\"controller_pid\":{},\"error\":{},\"frame_count\":{},\"devices_json\":{},\"config_yaml\":{}}}",
      r.id, json_quote(r.name), json_quote(run_status_name(r.status)), json_quote(r.started_at),
      r.ended_at.empty() ? "null" : json_quote(r.ended_at), json_quote(r.tracr_version), r.protocol_version,
      json_quote(r.model), json_quote(r.codec), json_quote(r.cipher), json_quote(r.controller_host),
      r.controller_pid, r.error.empty() ? "null" : json_quote(r.error), r.frame_count,
      json_quote(r.devices_json), json_quote(r.config_yaml));
  o += ",\n\"summaries\": [";
  for (size_t i = 0; i < sums->size(); ++i) {
    const auto& s = (*sums)[i];
    o += i ? ",\n  " : "\n  ";
    o += fmt::format("{{\"split\":{},\"frames\":{},\"failed\":{}", s.split, s.frames, s.failed);
    const std::pair<const char*, const StageStats*> st[] = {{"total", &s.total},   {"head", &s.head},
                                                            {"encode", &s.encode}, {"transfer", &s.transfer},
                                                            {"decode", &s.decode}, {"tail", &s.tail}};
    for (const auto& [name, v] : st)
      o += fmt::format(",\"{}_median_ns\":{},\"{}_p95_ns\":{}", name, json_num(v->median_ns), name,
                       json_num(v->p95_ns));
    o += fmt::format(",\"mean_raw_bytes\":{},\"mean_wire_bytes\":{}}}", json_num(s.mean_raw_bytes),
                     json_num(s.mean_wire_bytes));
  }
  o += "],\n\"frames\": [";
  for (size_t i = 0; i < frames->size(); ++i) {
    const auto& f = (*frames)[i];
    o += i ? ",\n  " : "\n  ";
    o += fmt::format(
        "{{\"participant\":{},\"split\":{},\"sample\":{},\"rep\":{},\"batch\":{},\"warmup\":{},\"head_ns\":{}"
        ","
        "\"encode_ns\":{},\"transfer_ns\":{},\"decode_ns\":{},\"tail_ns\":{},\"return_ns\":{},\"total_ns\":{}"
        ","
        "\"raw_bytes\":{},\"wire_bytes\":{},\"codec\":{},\"cipher\":{},\"ok\":{},\"error\":{},\"energy_j\":{}"
        ","
        "\"energy_source\":{},\"result_json\":{}}}",
        f.participant.empty() ? "null" : json_quote(f.participant), f.split, f.sample, f.rep, f.batch,
        f.warmup ? "true" : "false", f.head_ns, f.encode_ns, f.transfer_ns, f.decode_ns, f.tail_ns,
        f.return_ns, f.total_ns, f.raw_bytes, f.wire_bytes, json_quote(f.codec), json_quote(f.cipher),
        f.ok ? "true" : "false", f.error.empty() ? "null" : json_quote(f.error),
        f.energy_j ? json_num(*f.energy_j) : "null",
        f.energy_source.empty() ? "null" : json_quote(f.energy_source),
        f.result_json.empty() ? "null" : json_quote(f.result_json));
  }
  o += "],\n\"layer_profiles\": [";
  for (size_t i = 0; i < layers->size(); ++i) {
    const auto& l = (*layers)[i];
    o += i ? ",\n  " : "\n  ";
    o += fmt::format(
        "{{\"device\":{},\"device_role\":{},\"layer_index\":{},\"name\":{},\"type\":{},\"params\":{},"
        "\"macs\":{},"
        "\"out_bytes\":{},\"median_ns\":{},\"p95_ns\":{},\"reps\":{},\"peak_mem_bytes\":{}}}",
        json_quote(l.device), json_quote(l.device_role), l.layer_index, json_quote(l.name),
        json_quote(l.type), l.params, l.macs, l.out_bytes, l.median_ns, l.p95_ns, l.reps,
        l.peak_mem_bytes ? std::to_string(*l.peak_mem_bytes) : "null");
  }
  o += "],\n\"events\": [";
  for (size_t i = 0; i < events->size(); ++i) {
    const auto& e = (*events)[i];
    o += i ? ",\n  " : "\n  ";
    o += fmt::format("{{\"ts\":{},\"level\":{},\"kind\":{},\"message\":{}}}", json_quote(e.ts),
                     json_quote(e.level), json_quote(e.kind), json_quote(e.message));
  }
  o += "]\n}\n";
  return write_file(file, o);
}

int cmd_results(const std::vector<std::string>& args) {
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      usage();
      return args.empty() ? 2 : 0;
    }
    const std::string sub = args[0];
    static const std::vector<std::string> subs = {"list", "show", "compare", "export"};
    if (std::find(subs.begin(), subs.end(), sub) == subs.end()) {
      fmt::print(stderr,
                 "tracrctl results: unknown subcommand '{}'; expected list, show, compare or export\n", sub);
      usage();
      return 2;
    }
    Opts o = parse_opts(std::vector<std::string>(args.begin() + 1, args.end()));
    if (sub == "list" && !o.positional.empty())
      usage_error("results list: unexpected argument '" + o.positional[0] + "'");
    if (sub != "export" && (!o.csv.empty() || !o.json.empty()))
      usage_error("--csv/--json belong to `results export`");
    auto db = ResultsDb::open(o.db);
    if (!db) {
      fmt::print(stderr, "tracrctl results: {}\n", db.error().str());
      return 1;
    }
    try {
      if (sub == "list") return cmd_list(*db, o);
      if (sub == "show") return cmd_show(*db, o);
      if (sub == "compare") return cmd_compare(*db, o);
      return cmd_export(*db, o);
    } catch (const Fatal& f) {
      fmt::print(stderr, "tracrctl results: {}\n", f.what());
      return f.err.code == Errc::invalid_argument ? 2 : 1;
    }
  } catch (const Fatal& f) {
    fmt::print(stderr, "tracrctl results: {}\n", f.what());
    usage();
    return 2;
  }
}

}  // namespace tracr::controller
