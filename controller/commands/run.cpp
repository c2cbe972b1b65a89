// `tracrctl run`: the command. Agents come up through the launcher
// (launcher.hpp), their control lines are read by an event pump, every row
// goes through the recorder (recorder.hpp), scheduled commands are sent as
// the participants deliver frames, and SIGINT/SIGTERM/SIGHUP stop the run
// cleanly: participants are told to STOP, the frames they still deliver are
// written, the run is marked interrupted.
#include "controller/commands/run.hpp"
#include "controller/cli/help_format.hpp"
#include "controller/commands/report.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "core/user_error.hpp"
#include "fleet/event_pump.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wire/identity.hpp"
#include "wire/control.hpp"
#include "settings/config.hpp"
#include "fleet/launcher.hpp"
#include "controller/session/agent_config.hpp"
#include "controller/session/model_check.hpp"
#include "controller/session/liveness.hpp"
#include "controller/session/run_row.hpp"
#include "controller/session/agent_set.hpp"
#include "controller/session/prelude.hpp"
#include "fleet/process.hpp"
#include "store/recorder.hpp"
#include "store/default_db.hpp"
#include "store/results.hpp"
#include "analysis/tables.hpp"
#include "analysis/plan.hpp"
#include "analysis/chain_plan.hpp"
#include "analysis/report.hpp"
#include "fleet/shaping.hpp"
#include "protocol/crypto.hpp"
#include "protocol/header.hpp"

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;
using namespace tracr::fleet;
using namespace tracr::analysis;

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

using wire::ControlMsg;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

// What the run is doing before its first frame (deploying, loading,
// profiling can take minutes): one line each when stderr is not a terminal,
// else on the line the progress bar takes over.
void draw_phase(const std::string& text, bool tty) {
  if (tty) fmt::print(stderr, "\r  {:<76.76}", text + " ...");
  else fmt::print(stderr, "  {} ...\n", text);
}

// The frames' pace: counted from the first frame line on, so loading and
// profiling (minutes for a large model) do not make it look slower (#45
// friction 2: "about 7986 s left" with 400 s to go).
struct FramePace {
  Clock::time_point first;
  int64_t done_first = -1;  // frames done at the first line; -1: none yet
  // Seconds left at the pace since the first frame line; < 0: not known yet.
  double left(int64_t done, int64_t total) {
    if (done_first < 0) {
      first = Clock::now();
      done_first = done;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - first).count();
    if (done <= done_first || done >= total || secs <= 0) return -1;
    return secs * static_cast<double>(total - done) / static_cast<double>(done - done_first);
  }
};

void draw_progress(int64_t done, int64_t total, int split, Clock::time_point t0, FramePace& pace, bool tty) {
  static int64_t last_pct = -1;
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (total <= 0) return;
  const int64_t pct = done * 100 / total;
  // Time left at the frames' pace so far (frames of later splits may be slower or faster).
  const double left = pace.left(done, total);
  const std::string eta = left >= 0 ? fmt::format(", about {:.0f}s left", left) : std::string();
  if (tty) {
    const int width = 30;
    const int fill = static_cast<int>(width * done / total);
    fmt::print(stderr, "\r  [{}{}] {:>3}%  {}/{} frames  split {:<3} {:.0f}s{}   ", std::string(fill, '#'),
               std::string(width - fill, '.'), pct, done, total, split, secs, eta);
    if (done == total) fmt::print(stderr, "\n");
  } else if (pct / 10 != last_pct / 10 || done == total) {
    fmt::print(stderr, "  progress: {}/{} frames ({}%), split {}, {:.0f}s{}\n", done, total, pct, split, secs, eta);
  }
  last_pct = pct;
}

}  // namespace

namespace {

// A placement's cut points (a two-tier run's: its split), as the series
// tables key and print them ("3|13").
using Cuts = std::vector<int>;
std::string cuts_text(const Cuts& k) {
  std::string out;
  for (int c : k) out += (out.empty() ? "" : "|") + std::to_string(c);
  return out;
}

// A model as a run name shows it: a registry id as it is, a torchscript:
// file by its name without directory and extension.
std::string model_label(const std::string& model) {
  static const std::string ts = "torchscript:";
  if (model.rfind(ts, 0) != 0) return model;
  return std::filesystem::path(model.substr(ts.size())).stem().string();
}

// An input size as a run name shows it: 3x160x160.
std::string size_label(const std::vector<int64_t>& dims) {
  return dims.empty() ? "default" : fmt::format("{}", fmt::join(dims, "x"));
}

// What a series varies, each run's label in it ("model/size/link/codec",
// the axes the series has), and the axes in words for the table's title.
struct SeriesAxes {
  bool model = false, size = false, link = false, codec = false, threshold = false;
  std::string label(const ExperimentConfig& one, const std::string& link_name) const {
    std::vector<std::string> parts;
    if (model) parts.push_back(model_label(one.model));
    if (size) parts.push_back(size_label(one.input_size));
    if (link) parts.push_back(link_name.empty() ? "-" : link_name);
    if (codec) parts.push_back(one.compression);
    if (threshold) parts.push_back(fmt::format("t{}", one.exit_policy.threshold));
    return fmt::format("{}", fmt::join(parts, "/"));
  }
  std::string words() const {
    std::vector<std::string> axes;
    if (model) axes.push_back("model");
    if (size) axes.push_back("input size");
    if (link) axes.push_back("link profile");
    if (codec) axes.push_back("codec");
    if (threshold) axes.push_back("exit threshold");
    if (axes.empty()) return "run";
    std::string w = axes.back();
    if (axes.size() >= 2) w = axes[axes.size() - 2] + " and " + w;
    for (size_t i = axes.size() - 2; axes.size() > 2 && i-- > 0;) w = axes[i] + ", " + w;
    return w;
  }
};

// The split table of several runs (one per model, input size, link profile
// and/or codec) side by side: the median total per split of each run, its
// best split marked.
void print_series_comparison(const std::string& db_path, const std::vector<int64_t>& runs,
                             const std::vector<std::string>& names, const std::string& what) {
  auto db = ResultsDb::open_readonly(db_path);
  if (!db) return;
  std::vector<std::map<Cuts, double>> med(runs.size());  // by placement
  std::vector<Cuts> best(runs.size());
  std::set<Cuts> splits;
  bool chained = false;
  size_t width = 12;
  for (size_t i = 0; i < runs.size(); ++i) {
    width = std::max(width, names[i].size() + 1);
    auto t = db->split_table(runs[i]);
    if (!t) continue;
    double bv = 0;
    for (const auto& sp : *t) {
      if (sp.frames == 0) continue;
      const double m = sp.stage("total_ns").median_ns;
      med[i][sp.key()] = m;
      splits.insert(sp.key());
      chained = chained || sp.chained();
      if (best[i].empty() || m < bv) {
        best[i] = sp.key();
        bv = m;
      }
    }
  }
  const char* per = chained ? "placement" : "split";
  fmt::print("\nmedian total ms per {} and {} (runs", per, what);
  for (auto id : runs) fmt::print(" {}", id);
  fmt::print("); * = the run's best {}\n{:>7}", per, per);
  for (const auto& n : names) fmt::print("  {:>{}}", n, width);
  fmt::print("\n");
  for (const auto& k : splits) {
    fmt::print("{:>7}", cuts_text(k));
    for (size_t i = 0; i < runs.size(); ++i) {
      auto it = med[i].find(k);
      const std::string cell = it == med[i].end() ? "-" : fmt::format("{:.3f}{}", it->second / 1e6, best[i] == k ? "*" : " ");
      fmt::print("  {:>{}}", cell, width);
    }
    fmt::print("\n");
  }
}

// A run's median total per placement (ns), from its stored summaries.
std::map<Cuts, double> split_medians(ResultsDb& db, int64_t run) {
  std::map<Cuts, double> m;
  auto t = db.split_table(run);
  if (!t) return m;
  for (const auto& sp : *t)
    if (sp.frames > 0) m[sp.key()] = sp.stage("total_ns").median_ns;
  return m;
}

// A repeated series (--repeat N): per configuration (model / link / codec)
// and split, the median over the repetitions of each run's median total,
// with the lowest and highest, and the spread (highest - lowest) / median.
// Runs come repetition-major: run i is configuration i % (runs / reps).
void print_repetition_spread(const std::string& db_path, const std::vector<int64_t>& runs, int reps,
                             const std::vector<std::string>& labels) {
  auto db = ResultsDb::open_readonly(db_path);
  if (!db || runs.empty() || runs.size() % static_cast<size_t>(reps) != 0) return;
  const size_t configs = runs.size() / static_cast<size_t>(reps);
  std::vector<std::string> names(configs, "all");
  std::vector<std::map<Cuts, std::vector<double>>> meds(configs);
  std::set<Cuts> splits;
  for (size_t i = 0; i < runs.size(); ++i) {
    const size_t c = i % configs;
    if (i < configs && !labels[i].empty()) names[c] = labels[i];
    for (const auto& [k, m] : split_medians(*db, runs[i])) {
      meds[c][k].push_back(m / 1e6);
      splits.insert(k);
    }
  }
  fmt::print("\nmedian total ms per split over {} repetitions (runs {}..{}): median of the runs' medians [lowest, "
             "highest], spread = (highest - lowest) / median\n",
             reps, runs.front(), runs.back());
  std::vector<std::vector<std::string>> rows = {{"split"}};
  for (const auto& n : names) {
    rows[0].push_back(n);
    rows[0].push_back("spread");
  }
  for (const auto& k : splits) {
    if (k.size() > 1) rows[0][0] = "placement";
    std::vector<std::string> row = {cuts_text(k)};
    for (size_t c = 0; c < configs; ++c) {
      auto it = meds[c].find(k);
      if (it == meds[c].end() || it->second.empty()) {
        row.insert(row.end(), {"-", "-"});
        continue;
      }
      std::vector<double> v = it->second;
      std::sort(v.begin(), v.end());
      const double med = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
      row.push_back(fmt::format("{:.3f} [{:.3f}, {:.3f}]{}", med, v.front(), v.back(),
                                static_cast<int>(v.size()) < reps ? fmt::format(" ({} of {})", v.size(), reps) : ""));
      row.push_back(med > 0 ? fmt::format("{:.1f}%", 100.0 * (v.back() - v.front()) / med) : "-");
    }
    rows.push_back(std::move(row));
  }
  std::fputs(align(rows, {0}).c_str(), stdout);
}

// One configuration of a series: the experiment as one run takes it, what
// the series varies in it (the run's label), and the line announcing it.
struct SeriesRun {
  ExperimentConfig cfg;
  std::string label, what;
};

// The configurations of the experiment's lists, in run order: models outer,
// then input sizes, then links, then codecs. Exit code 2 when a codec does
// not parse (checked when the file was read, so never in practice).
Result<std::vector<SeriesRun>> series_runs(const ExperimentConfig& cfg, const SeriesAxes& ax) {
  const std::vector<std::string> models = cfg.model_list.empty() ? std::vector<std::string>{cfg.model} : cfg.model_list;
  const std::vector<std::vector<int64_t>> sizes =
      cfg.input_size_list.empty() ? std::vector<std::vector<int64_t>>{cfg.input_size} : cfg.input_size_list;
  const std::vector<std::string> links = cfg.link.empty() ? std::vector<std::string>{""} : cfg.link;
  const std::vector<std::string> codecs =
      cfg.compression_list.empty() ? std::vector<std::string>{cfg.compression} : cfg.compression_list;
  const std::vector<double> thresholds = cfg.exit_policy.threshold_list.empty()
                                             ? std::vector<double>{cfg.exit_policy.threshold}
                                             : cfg.exit_policy.threshold_list;
  std::vector<SeriesRun> out;
  for (const auto& model : models)
  for (const auto& size : sizes)
  for (const auto& name : links)
  for (const auto& codec : codecs)
  for (const double threshold : thresholds) {
    SeriesRun r{cfg, "", ""};
    ExperimentConfig& one = r.cfg;
    one.exit_policy.threshold = threshold;
    one.exit_policy.threshold_list.clear();
    one.model = model;
    one.model_list.clear();
    one.input_size = size;
    one.input_size_list.clear();
    if (!name.empty()) one.link = {name};
    one.compression_list.clear();
    one.compression = codec;
    one.codec = protocol::CodecSpec{};  // auto: chosen per split by the participant
    if (codec != "auto") {
      auto spec = protocol::CodecSpec::parse(codec);
      if (!spec) return make_error(Errc::config, "compression: " + user_text(spec.error()));
      one.codec = *spec;
    }
    std::vector<std::string> what;
    if (ax.model) what.push_back("model " + model);
    if (ax.size) what.push_back("input size " + size_label(size));
    if (!name.empty()) what.push_back("link profile " + name);
    if (ax.codec || what.empty()) what.push_back("compression " + codec);
    if (ax.threshold) what.push_back(fmt::format("exit threshold {}", threshold));
    r.label = ax.label(one, name);
    r.what = fmt::format("{}", fmt::join(what, ", "));
    out.push_back(std::move(r));
  }
  return out;
}

// One run per model, input size, link profile and codec of the experiment's
// lists (models outer, then sizes, then links; with --repeat N the whole
// series N times, repetitions outermost so that drift in the machine's load
// falls on every configuration alike), then the table comparing them. Every
// model and size is checked before the first run starts; a failure or an
// interruption ends the series.
Status run_series(const RunOptions& ro, const ExperimentConfig& cfg, std::vector<int64_t>& runs) {
  SeriesAxes ax;
  ax.model = !cfg.model_list.empty();
  ax.size = !cfg.input_size_list.empty();
  ax.link = !cfg.link.empty();
  ax.codec = !cfg.compression_list.empty();
  ax.threshold = !cfg.exit_policy.threshold_list.empty();
  auto configs = series_runs(cfg, ax);
  if (!configs) {
    return core::bad_input(user_text(configs.error()));
  }
  if (ax.model || ax.size) {
    // Each model at each size, checked before anything starts (a split or a
    // size one model cannot take is found now, not after the other runs).
    const size_t nm = std::max<size_t>(cfg.model_list.size(), 1), ns = std::max<size_t>(cfg.input_size_list.size(), 1);
    for (size_t i = 0; i < nm; ++i)
      for (size_t j = 0; j < ns; ++j) {
        ExperimentConfig one = cfg;
        if (ax.model) one.model = cfg.model_list[i];
        if (ax.size) one.input_size = cfg.input_size_list[j];
        one.model_list.clear();
        one.input_size_list.clear();
        auto named = resolve_layer_names(one);
        auto n = named ? check_experiment_model(one) : Result<int>(named.error());
        if (!n) {
          std::vector<std::string> where;
          if (ax.model) where.push_back(fmt::format("model[{}]", i));
          if (ax.size) where.push_back(fmt::format("input_size[{}]", j));
          return core::bad_input(fmt::format("{}: {}", fmt::join(where, ", "), user_text(n.error())));
        }
      }
  }
  RunOptions one_ro = ro;
  one_ro.codec_in_name = ax.codec;
  one_ro.model_in_name = ax.model;
  one_ro.size_in_name = ax.size;
  const int reps = std::max(ro.repeat, 1);
  // Repetitions resample everything, the profiles too (the planner's advice
  // for profiles far from their frames is to repeat): none is reused.
  if (reps > 1) one_ro.reprofile = true;
  std::vector<std::string> labels;
  for (int rep = 1; rep <= reps; ++rep)
    for (const auto& c : *configs) {
      one_ro.repetition = reps > 1 ? rep : 0;
      fmt::print("\n== {}{}\n", reps > 1 ? fmt::format("repetition {} of {}, ", rep, reps) : "", c.what);
      std::fflush(stdout);
      int64_t id = 0;
      const Status st = run_loaded(one_ro, c.cfg, &id);
      if (id > 0) {
        runs.push_back(id);
        labels.push_back(c.label);
      }
      TRACR_TRY(st);
    }
  if (reps > 1)
    print_repetition_spread(cfg.output, runs, reps, labels);
  else if (runs.size() > 1)
    print_series_comparison(cfg.output, runs, labels, ax.words());
  return {};
}

// --report FILE.html: its directory must exist before anything runs.
Status check_report_path(const std::string& path) {
  if (path.empty()) return {};
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::is_directory(dir, ec)) {
    return core::bad_input(fmt::format(
        "--report {}: directory '{}' does not exist; expected a file in an existing directory", path, dir.string()));
  }
  return {};
}

// The report of the runs (tracrctl report), once every run completed.
Status write_run_report(const RunOptions& ro, const std::string& db, const std::vector<int64_t>& runs,
                        const Status& rc) {
  if (ro.report.empty() || runs.empty()) return rc;
  if (!rc) {
    TRACR_LOG(error,
              "tracrctl run: --report {}: not written, the {} did not complete (tracrctl report RUN... -o "
              "FILE writes it from what was recorded)",
              ro.report, runs.size() > 1 ? "series" : "run");
    return rc;
  }
  ReportOptions opt;
  for (auto id : runs) opt.runs.push_back(std::to_string(id));
  opt.out = ro.report;
  opt.db = db;
  return cmd_report(opt);
}

}  // namespace

// --again RUN: the run's stored experiment (its effective settings as the
// run stored them, paths as they were resolved from the directory tracrctl
// ran in), TRACR_* and --set on top; its output the database it came from.
Result<ExperimentConfig> again_experiment(const RunOptions& ro) {
  const std::string path = ro.db.empty() ? store::default_results_db() : ro.db;
  auto db = ResultsDb::open_readonly(path);
  if (!db) return make_error(Errc::not_found, fmt::format("--again {}: {}", ro.again, db.error().message));
  auto id = run_id_arg(*db, ro.again);
  if (!id) return make_error(id.error().code, fmt::format("--again {}: {}", ro.again, id.error().message));
  auto run = db->get_run(*id);
  if (!run) return make_error(run.error().code, fmt::format("--again {}: {}", ro.again, run.error().message));
  auto ends = [&](const std::string& tail) {
    return run->name.size() >= tail.size() && run->name.compare(run->name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends(" (train)") || ends(" (link probe)"))
    return make_error(Errc::invalid_argument,
                      fmt::format("--again {}: run {} '{}' of {} is a {}, not a sweep; expected a run of tracrctl run "
                                  "({})",
                                  ro.again, *id, run->name, path, ends(" (train)") ? "training run" : "link probe",
                                  ends(" (train)") ? "a training run goes on with tracrctl train EXP --resume RUN"
                                                   : "probe again with tracrctl link probe EXP"));
  if (run->config_yaml.empty())
    return make_error(Errc::not_found, fmt::format("--again {}: run {} of {} stored no experiment", ro.again, *id,
                                                   path));
  auto cfg = parse_experiment(run->config_yaml, fmt::format("run {} of {} (its stored experiment)", *id, path), true,
                              ro.sets);
  if (!cfg) return make_error(Errc::config, user_text(cfg.error()));
  cfg->output = path;
  if (!ro.show_config)
    fmt::print("again: run {} '{}' of {}, its stored experiment{} (relative paths from the directory it ran in)\n",
               *id, run->name, path, ro.sets.empty() ? std::string() : fmt::format(" with {}", fmt::join(ro.sets, ", ")));
  return cfg;
}

Status run_experiment(const RunOptions& ro) {
  if (ro.again.empty() == ro.experiment.empty())
    return core::bad_input(std::string(ro.again.empty() ? "expected an EXPERIMENT.yaml or --again RUN"
                                                        : "expected an EXPERIMENT.yaml or --again RUN, not both"));
  auto cfg = ro.again.empty() ? load_experiment(ro.experiment, ro.sets) : again_experiment(ro);
  if (!cfg) {
    if (!ro.again.empty() && cfg.error().code != Errc::config && cfg.error().code != Errc::invalid_argument)
      return std::move(cfg.error());  // a database or run that is not there: exit 1
    return core::bad_input(user_text(cfg.error()));
  }
  if (!ro.db.empty()) cfg->output = ro.db;
  if (ro.probe_only) {
    // Measure the links only: no layer profiles, no frames, a probe always.
    cfg->record.layers = false;
    cfg->probe.enabled = true;
    cfg->compression_list.clear();  // a probe sends no frames: one per link is enough
    cfg->model_list.clear();
    cfg->input_size_list.clear();
    cfg->commands.clear();
    if (ro.in_process) {
      return core::bad_input(std::string("an in-process run has no link to probe"));
    }
  }
  if (ro.show_config) {
    fmt::print("{}", format_settings(*cfg));
    return {};
  }
  // Lists of models, input sizes, link profiles and/or codecs: the
  // experiment once with each model at each size, under each link and codec
  // (models outer, then sizes, then links), one run each.
  TRACR_TRY(check_report_path(ro.report));
  std::vector<int64_t> runs;
  if (cfg->link.size() > 1 || !cfg->compression_list.empty() || !cfg->model_list.empty() ||
      !cfg->input_size_list.empty() || !cfg->exit_policy.threshold_list.empty() || ro.repeat > 1) {
    const Status st = run_series(ro, *cfg, runs);
    return write_run_report(ro, cfg->output, runs, st);
  }
  int64_t id = 0;
  const Status st = run_loaded(ro, *cfg, &id);
  if (id > 0) runs.push_back(id);
  return write_run_report(ro, cfg->output, runs, st);
}

namespace {

// One run, from its checks to its tables: the prelude, the link profile,
// the run row, the agents (the SERVER first, then every PARTICIPANT at
// once), the session loop with scheduled commands and adaptive re-planning,
// the outcome, then the tables and the plan read back from the database.
class RunSession {
 public:
  RunSession(const RunOptions& ro, ExperimentConfig& cfg) : ro_(ro), cfg_(cfg) {}
  Status run(int64_t* run_out);

 private:
  Status prepare();
  Status shape_link();
  Status open_row();
  Status connect();
  Result<std::unique_ptr<AgentConn>> start(const DeviceConfig& dev, wire::AgentRole role,
                                           std::vector<std::string> args);
  void start_server();
  void start_chain();
  Status shape_chain(const ShapingContext& sctx);
  const DeviceConfig& first_hop() const;
  std::vector<std::string> participant_args(const DeviceConfig& p) const;
  void start_participants();
  void on_line(size_t i, const ControlMsg& m);
  void draw_profiling(const AgentConn& a, const ControlMsg& m);
  bool spare(size_t i, const std::string& why);
  void send_cmd(size_t i, std::map<std::string, std::string> fields, const std::string& what);
  void adapt(size_t i);
  void send_planned_placements(size_t i);
  void schedule();
  void release_step();
  Status finish();
  Status report();

  const RunOptions& ro_;
  ExperimentConfig& cfg_;
  SessionPrelude pre_;
  std::optional<ResultsDb> db_;
  std::optional<settings::LinkSpec> link_;
  std::unique_ptr<LinkShaper> shaper_;  // removes the shaping however the run ends (a chain's hop 1)
  // A chain's hops after the first (hop h at h - 2): from device h - 2 of the chain to device h - 1.
  std::vector<std::unique_ptr<LinkShaper>> hop_shapers_;
  RunInfo info_;
  int64_t run_id_ = 0;
  std::unique_ptr<RunRowGuard> row_;
  std::string link_name_;  // the experiment's link profile, "devices-file", or "" (none); a chain's per hop
  std::string chain_shaping_;  // a shaped chain's shaping text, per hop
  std::unique_ptr<SessionLaunch> launch_;
  std::optional<DetachedServer> detached_;
  std::unique_ptr<DetachedWatch> detached_watch_;  // is it still there? (#24)
  std::unique_ptr<Recorder> rec_;
  std::unique_ptr<AgentSet> agents_;
  std::string server_endpoint_;  // where participants connect: the SERVER's, or a chain's first device's
  std::map<std::string, std::string> endpoints_;  // every serving agent's endpoint from its READY, by device
  bool tty_ = false;
  std::set<std::string> phases_seen_;  // "device KIND" whose phase line was drawn
  int64_t frames_total_ = 0, frames_done_ = 0;
  Clock::time_point t0_ = Clock::now();
  FramePace pace_;
  std::map<std::string, int64_t> profiled_;  // "device KIND": PROFILE / SEGMENT lines so far
  std::vector<std::string> lost_participants_;
  // Scheduled commands, per participant: the next one to send, and a pending resume.
  struct CmdState {
    size_t next = 0;
    std::optional<Clock::time_point> resume_at;
  };
  std::map<size_t, CmdState> cmd_state_;
  int64_t cmd_id_ = 0;
  std::map<size_t, int64_t> last_decision_;  // adaptive: timed frames at the last re-plan
  std::map<size_t, double> last_rate_;       // adaptive: the link rate that re-plan used (Mbit/s)
  std::optional<double> probe_rtt_ms_;
  std::set<size_t> step_waiting_;  // lockstep: participants waiting at a step boundary
  int steps_released_ = 0;
  std::set<size_t> placements_wanted_;  // split: plan: participants waiting for the planner's placements
  std::set<int> refused_cuts_;          // split: plan: cuts the model refuses (from the participants)
};

// Checks, database, link profile: nothing started, nothing written yet.
Status RunSession::prepare() {
  TRACR_TRY(check_session(cfg_, RoleCheck::inference, ro_.agent_path, pre_));
  if (pre_.devices.chain.size() > 1 && ro_.in_process)
    return core::bad_input(fmt::format("--in-process runs two tiers in one process; chain: [{}] needs its agents",
                                       fmt::join(pre_.devices.chain, ", ")));
  auto db = ResultsDb::open(cfg_.output);
  if (!db) {
    return core::command_failed(user_text(db.error()));
  }
  db_.emplace(std::move(*db));
  return shape_link();
}

// The link profile: shaping left by a controller that died is removed
// first, then this run's is applied (and removed however the run ends).
Status RunSession::shape_link() {
  const std::string shaping_dir = (fs::path(cfg_.output).parent_path() / "shaping").string();
  for (const auto& line : sweep_stale_shaping(shaping_dir, pre_.devices, ro_.trust_new_hosts))
    TRACR_LOG(info, "tracrctl run: {}", line);
  if (!cfg_.link.empty()) {
    auto l = resolve_link(cfg_, cfg_.link[0]);
    if (!l) {
      return core::bad_input(user_text(l.error()));
    }
    link_ = *l;
  }
  ShapingContext sctx;
  sctx.state_dir = shaping_dir;
  sctx.devices_file = pre_.devices.source;
  sctx.trust_new_hosts = ro_.trust_new_hosts;
  sctx.agent_delay = cfg_.link_delay == "agent";
  if (pre_.devices.chain.size() > 1) return shape_chain(sctx);
  // The experiment's profile, or else each participant's link_profile from the devices file.
  const auto plinks = participant_links(link_, pre_.devices);
  link_name_ = link_ ? link_->name : plinks.empty() ? "" : "devices-file";
  if (plinks.empty()) return {};
  auto sh = LinkShaper::apply(pre_.devices.server(), plinks, sctx);
  if (!sh) {
    return core::bad_input(user_text(sh.error()));
  }
  shaper_ = std::move(*sh);
  return {};
}

// A chain's hops, each on its own path (#43): hop 1 from every participant
// to the chain's first device, hop h from device h - 1 to device h; each
// takes its `chain:` entry's link, else the experiment's (else, on hop 1,
// each participant's link_profile). The run's link names them per hop,
// "wifi|wan" ("-" unshaped), and its shaping text says each hop's.
Status RunSession::shape_chain(const ShapingContext& sctx) {
  const auto& chain = pre_.devices.chain;
  std::vector<std::string> names, texts;
  bool any = false;
  for (size_t h = 1; h <= chain.size(); ++h) {
    std::optional<settings::LinkSpec> link = link_;
    if (h - 1 < cfg_.chain.size() && !cfg_.chain[h - 1].link.empty()) {
      auto l = resolve_link(cfg_, cfg_.chain[h - 1].link);
      if (!l) return core::bad_input(user_text(l.error()));
      link = *l;
    }
    const DeviceConfig& to = *pre_.devices.find(chain[h - 1]);
    const std::string hop = fmt::format("hop {} ({} -> {})", h, h == 1 ? "participants" : chain[h - 2], to.name);
    std::vector<ParticipantLink> links;
    if (h == 1) {
      links = participant_links(link, pre_.devices);
    } else if (link && link->shaped()) {
      links.push_back({pre_.devices.find(chain[h - 2]), *link});
    }
    names.push_back(link ? link->name : h == 1 && !links.empty() ? "devices-file" : "-");
    std::unique_ptr<LinkShaper> shaper;
    if (!links.empty()) {
      auto sh = LinkShaper::apply(to, links, sctx);
      if (!sh) {
        const std::string why = user_text(sh.error());
        std::string hint;
        if (why.find("over loopback") != std::string::npos)
          hint = "; for a chain, `sudo bash scripts/netns_testbed.sh up --chain --devices FILE` makes three "
                 "namespaces in a row and writes their devices file";
        else if (h > 1 && why.find("root qdisc") != std::string::npos)
          hint = fmt::format("; if hop {} shaped that interface, {} reaches both its neighbours through one "
                             "interface: shaping both hops on one interface is not built yet, give {} an interface "
                             "per hop (as the chain test-bed does) or shape one of the two hops",
                             h - 1, chain[h - 2], chain[h - 2]);
        return core::bad_input(fmt::format("{}: {}{}", hop, why, hint));
      }
      shaper = std::move(*sh);
      texts.push_back(fmt::format("{}: {}", hop, shaper->shaping()));
      any = true;
    }
    if (h == 1) shaper_ = std::move(shaper);
    else hop_shapers_.push_back(std::move(shaper));
  }
  if (!any) return {};
  link_name_ = fmt::format("{}", fmt::join(names, "|"));
  chain_shaping_ = fmt::format("{}", fmt::join(texts, "; "));
  return {};
}

// The run row, and the line that announces the run.
Status RunSession::open_row() {
  std::string name = ro_.probe_only ? cfg_.name + " (link probe)" : cfg_.name;
  if (ro_.model_in_name) name += "/" + model_label(cfg_.model);
  if (ro_.size_in_name) name += "/" + size_label(cfg_.input_size);
  if (link_) name += "@" + link_->name;
  if (ro_.codec_in_name) name += "/" + cfg_.compression;
  if (ro_.repetition > 0) name += fmt::format("#{}", ro_.repetition);
  info_ = session_run_info(cfg_, pre_, std::move(name));
  info_.link = link_name_;
  info_.shaping = !chain_shaping_.empty() ? chain_shaping_ : shaper_ ? shaper_->shaping() : "";
  TRACR_TRY(begin_session_row(*db_, info_, run_id_));
  // Whatever ends the run (an exception included), its row is finished.
  row_ = std::make_unique<RunRowGuard>(*db_, run_id_, "run");
  fmt::print("run {} '{}': model {}, codec {}, cipher {}, devices {}{}{}\n", run_id_, info_.name, cfg_.model,
             cfg_.compression, info_.cipher, pre_.devices.source, ro_.in_process ? " (in-process)" : "",
             info_.link.empty() ? "" : fmt::format(", link {} ({})", info_.link, info_.shaping));
  std::fflush(stdout);  // before the progress lines on stderr
  return {};
}

// The session's secret, names and recorder. A SERVER agent started earlier
// with `tracrctl agents start` for this model is reused (its session secret
// keys the whole run).
Status RunSession::connect() {
  const DeviceConfig& server = pre_.devices.server();
  if (!ro_.in_process && pre_.devices.chain.size() <= 1) {
    auto d = read_detached(detached_state_path(cfg_.output, server.name));
    if (d && d->identity == server_identity(cfg_) && (d->transport != "local" || process_alive(d->pid, d->start_ticks)))
      detached_ = *d;
  }
  std::vector<uint8_t> secret;
  TRACR_TRY(draw_session_secret(secret));
  if (detached_)
    if (auto sb = protocol::from_hex(detached_->secret_hex)) secret = *sb;
  auto stamp = new_run_stamp();
  if (!stamp) {
    return core::command_failed(user_text(stamp.error()));
  }
  // Every agent gets the effective experiment and parses it with the same code.
  launch_ = std::make_unique<SessionLaunch>(cfg_, pre_, std::move(secret), *stamp, run_id_, ro_.trust_new_hosts);
  if (cfg_.record.layers && !ro_.reprofile) launch_->profiles_known = profiles_known_text(*db_);
  rec_ = std::make_unique<Recorder>(*db_, run_id_, cfg_.record.frames, cfg_.record.layers);
  rec_->set_link(info_.link, info_.shaping);
  rec_->set_server(first_hop().name);  // the reply's srv_energy is the device the participant sends to
  if (pre_.devices.chain.size() > 1) {
    std::vector<std::string> codecs;
    for (size_t i = 0; i < pre_.devices.chain.size(); ++i)
      codecs.push_back(i < cfg_.chain.size() && !cfg_.chain[i].compression.empty() ? cfg_.chain[i].compression
                                                                                    : cfg_.compression);
    rec_->set_chain(pre_.devices.chain, codecs);
  }
  if (shaper_ || !chain_shaping_.empty())
    rec_->event("info", "link_shaped", fmt::format("link {}: {}", info_.link, info_.shaping));
  tty_ = ro_.progress && isatty(2);
  agents_ = std::make_unique<AgentSet>(*rec_, cfg_.heartbeat_timeout_ms, "participants");
  agents_->on_line([this](size_t i, const ControlMsg& m) { on_line(i, m); });
  agents_->on_loss([this](size_t i, const std::string& why) { return spare(i, why); });
  agents_->on_tick([this] { schedule(); });
  agents_->watch([this] { return detached_watch_ ? detached_watch_->gone() : std::string(); });
  agents_->idle_before_work([this] { return rec_->frames_done() == 0; });
  return {};
}

// Starts one agent; touches nothing shared, so participants start concurrently.
Result<std::unique_ptr<AgentConn>> RunSession::start(const DeviceConfig& dev, wire::AgentRole role,
                                                     std::vector<std::string> args) {
  return launch_agent(launch_->spec(dev, role, std::move(args)));
}

// The SERVER: the detached one, or one of this run (waited for until it
// serves); none for an in-process run.
void RunSession::start_server() {
  const DeviceConfig& server = pre_.devices.server();
  if (detached_) {
    server_endpoint_ = detached_->endpoint;
    rec_->event("info", "agent_reused",
                fmt::format("SERVER {}: detached agent pid {} at {}", server.name, detached_->pid, detached_->endpoint),
                server.name);
    fmt::print("using the detached SERVER agent on {} (pid {}, {})\n", server.name, detached_->pid, detached_->endpoint);
    detached_watch_ = std::make_unique<DetachedWatch>(*detached_, pre_.devices, ro_.trust_new_hosts,
                                                      detached_->transport == "local" ? 500 : 2000);
    // Its READY (hardware identity) came when it started: recorded for this run too.
    ControlMsg ready;
    ready.kind = "READY";
    ready.fields = detached_->ready;
    if (auto st = rec_->on_message(server.name, wire::AgentRole::server, ready); !st) agents_->fail(st.error().message);
    return;
  }
  if (ro_.in_process) return;
  if (pre_.devices.chain.size() > 1) return start_chain();
  if (ro_.progress)
    draw_phase(fmt::format("starting the SERVER agent on {} (it loads the model{} first)", server.name,
                           cfg_.record.layers ? " and profiles it" : ""),
               tty_);
  auto conn = start(server, wire::AgentRole::server, {"--bind", fmt::format("tcp://{}:{}", server_bind_host(server), server.connection().port)});
  if (!conn) {
    agents_->fail("SERVER " + server.name + ": " + user_text(conn.error()));
    return;
  }
  agents_->adopt(std::move(*conn));
  agents_->start_reading();
  agents_->wait_until([&] { return !server_endpoint_.empty() || SignalCatcher::signal(); }, 600000);
}

// A chain of two or more devices (#43), from its end backwards: each device
// is a SERVER agent, each but the last started with --downstream at the
// next one's endpoint (PROTOCOL.md 3.4 "Forwarding"), each waited for until
// it serves. Participants connect to the first.
void RunSession::start_chain() {
  const auto& chain = pre_.devices.chain;
  std::string next;
  const DeviceConfig* next_dev = nullptr;
  for (size_t i = chain.size(); i-- > 0 && agents_->failure().empty() && !SignalCatcher::signal();) {
    const DeviceConfig& dev = *pre_.devices.find(chain[i]);
    if (ro_.progress)
      draw_phase(fmt::format("starting the chain's device {} of {} on {} ({})", i + 1, chain.size(), dev.name,
                             next_dev ? "it forwards to " + next_dev->name : std::string("the last")),
                 tty_);
    std::vector<std::string> args = {"--bind", fmt::format("tcp://{}:{}", server_bind_host(dev), dev.connection().port)};
    if (next_dev) {
      args.insert(args.end(), {"--downstream", next_dev->transport == Transport::local && next_dev->netns.empty()
                                                   ? next
                                                   : reachable_endpoint(next, next_dev->connection().host)});
      // link_delay: agent on the hop out of this device (hop i + 2): its own relay adds the delay.
      if (i < hop_shapers_.size() && hop_shapers_[i]) {
        const auto [delay, jitter] = hop_shapers_[i]->agent_delay(dev.name);
        if (delay > 0 || jitter > 0)
          args.insert(args.end(),
                      {"--link-delay-ms", fmt::format("{}", delay), "--link-jitter-ms", fmt::format("{}", jitter)});
      }
    }
    auto conn = start(dev, wire::AgentRole::server, args);
    if (!conn) {
      agents_->fail(fmt::format("chain device {} ({} of {}): {}", dev.name, i + 1, chain.size(), user_text(conn.error())));
      return;
    }
    agents_->adopt(std::move(*conn));
    agents_->start_reading();
    agents_->wait_until([&] { return endpoints_.count(dev.name) || SignalCatcher::signal(); }, 600000);
    if (!endpoints_.count(dev.name)) return;
    next = endpoints_[dev.name];
    next_dev = &dev;
  }
  server_endpoint_ = next;
}

// Where participants send their frames: the SERVER, or a chain's first device.
const DeviceConfig& RunSession::first_hop() const {
  const auto& chain = pre_.devices.chain;
  return chain.size() > 1 ? *pre_.devices.find(chain.front()) : pre_.devices.server();
}

std::vector<std::string> RunSession::participant_args(const DeviceConfig& p) const {
  const DeviceConfig& server = first_hop();
  std::vector<std::string> args;
  if (ro_.probe_only) args.push_back("--probe-only");
  if (ro_.in_process) args.push_back("--in-process");
  else
    args.insert(args.end(), {"--connect", server.transport == Transport::local && server.netns.empty()
                                              ? server_endpoint_
                                              : reachable_endpoint(server_endpoint_, server.connection().host)});
  if (shaper_ && !ro_.in_process) {
    const auto [delay, jitter] = shaper_->agent_delay(p.name);
    if (delay > 0 || jitter > 0)
      args.insert(args.end(), {"--link-delay-ms", fmt::format("{}", delay), "--link-jitter-ms", fmt::format("{}", jitter)});
  }
  return args;
}

// Every PARTICIPANT is launched at once, each on its own thread (SSH
// connect, deploy, staging and start overlap); they are kept in device order.
void RunSession::start_participants() {
  const auto parts = pre_.devices.participants();
  std::vector<std::vector<std::string>> part_args;
  for (const DeviceConfig* p : parts) part_args.push_back(participant_args(*p));
  if (ro_.progress)
    draw_phase(fmt::format("starting {} PARTICIPANT agent{} (model{}{})", parts.size(), parts.size() == 1 ? "" : "s",
                           cfg_.record.layers ? ", profiles" : "", cfg_.probe.enabled ? ", link probe" : ""),
               tty_);
  auto launched = launch_concurrently(parts.size(), [&](size_t i) { return start(*parts[i], wire::AgentRole::participant, part_args[i]); });
  for (size_t i = 0; i < parts.size(); ++i) {
    auto& l = launched[i];
    if (!l.conn) {
      agents_->fail("PARTICIPANT " + parts[i]->name + ": " + user_text(l.conn.error()));
      continue;
    }
    agents_->adopt(std::move(*l.conn), fmt::format("; launch issued at +{:.3f} ms, started at +{:.3f} ms (tracrctl's "
                                                   "steady clock, from the first participant launch)",
                                                   l.issued_ms, l.started_ms));
  }
}

// run's part of a control line: the SERVER's endpoint, the phase lines
// before the first frame, the progress bar.
void RunSession::on_line(size_t i, const ControlMsg& m) {
  AgentConn& a = (*agents_)[i];
  if (m.kind == "READY" && a.role() == wire::AgentRole::server) {
    endpoints_[a.device().name] = m.get_or("endpoint", "");
    if (pre_.devices.chain.size() <= 1) server_endpoint_ = m.get_or("endpoint", "");
  }
  if (m.kind == "EVENT" && m.get_or("kind", "") == "step_waiting") step_waiting_.insert(i);
  if (m.kind == "EVENT" && m.get_or("kind", "") == "placements_wanted") {
    placements_wanted_.insert(i);
    for (const auto& k : wire::split_on(m.get_or("refused", ""), ','))
      if (!k.empty()) refused_cuts_.insert(std::atoi(k.c_str()));
  }
  if (!ro_.progress) return;
  if (frames_done_ == 0 && (m.kind == "PROFILE" || m.kind == "SEGMENT" || m.kind == "PROBE"))
    draw_profiling(a, m);
  if (m.kind == "FRAME") {
    frames_done_ = rec_->frames_done();
    frames_total_ = rec_->frames_total();
    draw_progress(frames_done_, frames_total_, rec_->current_split(), t0_, pace_, tty_);
  }
}

// The phase before the first frame, as its own bar on a terminal: layers
// profiled of the model's (a line each, else only the phase's first),
// heads or tails timed, the link probed (profiles reused: the recorder's line).
void RunSession::draw_profiling(const AgentConn& a, const ControlMsg& m) {
  const std::string who = fmt::format("{} {}: ", wire::role_name(a.role()), a.device().name);
  const int64_t n = ++profiled_[a.device().name + " " + m.kind];
  if (!tty_ && !phases_seen_.insert(a.device().name + " " + m.kind).second) return;
  const auto layers = static_cast<int64_t>(pre_.layer_names.size());
  if (m.kind == "PROFILE")
    draw_phase(who + (layers <= 0 ? std::string("profiling each layer")
                      : tty_      ? fmt::format("profiling layer {}/{}", n, layers)
                                  : fmt::format("profiling its {} layers", layers)),
               tty_);
  else if (m.kind == "SEGMENT")
    draw_phase(who + fmt::format("timing the {} it will run{}", a.role() == wire::AgentRole::server ? "tails" : "heads",
                                 tty_ ? fmt::format(" ({} so far)", n) : ""),
               tty_);
  else
    draw_phase(who + "link probed, frames next", tty_);
}

// on_participant_loss: continue (#24): a PARTICIPANT that dies or goes
// silent while another still runs is recorded and left behind; the run
// goes on with the others. Returns whether it was (else the run fails).
bool RunSession::spare(size_t i, const std::string& why) {
  AgentSet& s = *agents_;
  if (cfg_.on_participant_loss != "continue" || s[i].role() != wire::AgentRole::participant) return false;
  bool others = false;
  for (size_t j = 0; j < s.size(); ++j)
    if (j != i && s[j].role() == wire::AgentRole::participant && !s.finished(j) && !s.lost(j)) others = true;
  if (!others) return false;
  const std::string& dev = s[i].device().name;
  rec_->event("warn", "participant_lost", why + "; the other participants go on (on_participant_loss: continue)", dev);
  lost_participants_.push_back(dev + " after " + std::to_string(rec_->timed_frames(dev)) + " timed frames (" + why + ")");
  s.set_finished(i);
  return true;
}

void RunSession::send_cmd(size_t i, std::map<std::string, std::string> fields, const std::string& what) {
  fields["id"] = std::to_string(++cmd_id_);
  AgentConn& a = (*agents_)[i];
  if (auto st = a.send("CMD", fields); !st) {
    agents_->fail(st.error().message);
    return;
  }
  rec_->event("info", "command_sent",
              fmt::format("command {} {} after {} timed frames", cmd_id_, what, rec_->timed_frames(a.device().name)),
              a.device().name);
}

// The adaptive policy: re-plan from the participant's live link rate, the
// median of its last 3 frames' rates (the agent's 8-frame estimate until 3
// have come), every adapt.interval_frames timed frames, and at once when
// that rate has moved by 2x from the one the last re-plan used (#21: a
// throttle took 6 frames to act on, the 8-frame estimate still holding the
// fast link's frames).
void RunSession::adapt(size_t i) {
  const std::string& dev = (*agents_)[i].device().name;
  const int64_t timed = rec_->timed_frames(dev);
  const auto recent = rec_->recent_link_rate(dev);
  const auto window = rec_->link_estimate(dev);
  const auto used = last_rate_.find(i);
  const bool moved = recent && used != last_rate_.end() && (*recent < used->second / 2 || *recent > used->second * 2);
  if (timed - last_decision_[i] < cfg_.adapt.interval_frames && !moved) return;
  const std::optional<double> est = recent ? recent : window;
  const int current = rec_->last_split(dev);
  if (!est || *est <= 0 || current < 0) return;
  last_decision_[i] = timed;
  last_rate_[i] = *est;
  rec_->flush();  // profiles and frames so far, for the planner
  if (!probe_rtt_ms_) {
    auto pr = db_->probes(run_id_);
    probe_rtt_ms_ = pr && !pr->empty() ? static_cast<double>(pr->front().rtt_min_ns) / 1e6 : 0.0;
  }
  PlanOptions po;
  PlanLink l;
  l.up_mbps = l.down_mbps = *est;
  l.rtt_ms = *probe_rtt_ms_;
  l.name = "live estimate";
  l.source = fmt::format("{}'s {} after {} timed frames", dev,
                         recent ? "median link rate of its last 3 frames" : "running link estimate", timed);
  po.link = l;
  auto plan = plan_from_run(*db_, run_id_, po);
  if (!plan) {
    rec_->event("warn", "adapt_skipped", "cannot re-plan: " + plan.error().message, dev);
    return;
  }
  const PlanRow* cur = nullptr;
  const PlanRow* best = nullptr;
  for (const auto& r : plan->rows) {
    if (r.split == current) cur = &r;
    if (r.split == plan->chosen) best = &r;
  }
  if (!cur || !best || best->split == current) return;
  const double gain = (cur->latency_ms - best->latency_ms) / cur->latency_ms * 100;
  if (gain <= cfg_.adapt.hysteresis_pct) return;
  rec_->event("info", "adapt_switch",
              fmt::format("link estimate {:.3f} Mbit/s ({}{}): split {} predicted {:.3f} ms -> split {} predicted "
                          "{:.3f} ms (gain {:.1f} % > hysteresis {} %)",
                          *est, recent ? "median of the last 3 frames" : "the agent's 8-frame estimate",
                          moved ? ", moved 2x since the last re-plan" : "", current, cur->latency_ms, best->split,
                          best->latency_ms, gain, cfg_.adapt.hysteresis_pct),
              dev);
  send_cmd(i, {{"op", "set_split"}, {"split", std::to_string(best->split)}},
           fmt::format("set_split {} (adaptive)", best->split));
}

// split: plan (#43): once a participant has profiled and probed (the chain's
// devices did both before their READY), the planner predicts every
// placement from this run's rows so far and the participant sweeps the
// plan_k best, best first. The choice is recorded (placements_planned) with
// each placement's predicted latency and the terms it came from.
void RunSession::send_planned_placements(size_t i) {
  const std::string& dev = (*agents_)[i].device().name;
  rec_->flush();  // profiles and probes so far, for the planner
  std::vector<std::string> devices = {dev};
  devices.insert(devices.end(), pre_.devices.chain.begin(), pre_.devices.chain.end());
  auto plan = analysis::plan_chain_from_profiles(*db_, run_id_, devices);
  if (!plan) {
    agents_->fail(fmt::format("split: plan for {}: {}", dev, user_text(plan.error())));
    return;
  }
  std::string list, predicted;
  const auto best = analysis::best_placements(*plan, static_cast<size_t>(cfg_.plan_k), refused_cuts_);
  if (best.empty()) {
    agents_->fail(fmt::format("split: plan for {}: every placement{} has a cut the model refuses", dev,
                              plan->memory_from.empty() ? "" : " that fits the devices' memory_mb"));
    return;
  }
  for (size_t r : best) {
    const auto& row = plan->rows[r];
    list += (list.empty() ? "" : ",") + row.placement;
    predicted += fmt::format("{}{} {:.3f} ms", predicted.empty() ? "" : ", ", row.placement, row.latency_ms);
  }
  rec_->event("info", "placements_planned",
              fmt::format("split: plan: the {} best of {} placements by predicted latency (plan_k {}{}): {}; from {}",
                          best.size(), plan->rows.size(), cfg_.plan_k,
                          refused_cuts_.empty() ? std::string()
                                                : fmt::format(", leaving out cuts the model refuses: {}",
                                                              fmt::join(refused_cuts_, ",")),
                          predicted, fmt::join(plan->fits, "; ")),
              dev);
  if (ro_.progress) draw_phase(fmt::format("PARTICIPANT {}: the planner chose {}", dev, list), tty_);
  send_cmd(i, {{"op", "placements"}, {"placements", list}}, "placements " + list + " (split: plan)");
}

// lockstep: once every participant still running waits at its step boundary
// (each sends step_waiting with its last frames back), all go on together. A
// participant that finished or was lost no longer holds the others.
void RunSession::release_step() {
  if (step_waiting_.empty()) return;
  AgentSet& s = *agents_;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i].role() == wire::AgentRole::participant && !s.finished(i) && !s.lost(i) && !step_waiting_.count(i)) return;
  const std::set<size_t> waiting = std::exchange(step_waiting_, {});
  const int step = steps_released_++;
  for (size_t i : waiting)
    if (!s.finished(i))
      send_cmd(i, {{"op", "resume"}}, fmt::format("resume (lockstep: step {}, {} participants)", step, waiting.size()));
}

// Once per turn of the loop: adaptive re-planning, a pending resume, and the
// experiment's commands whose frame has come, per participant.
void RunSession::schedule() {
  for (size_t i : std::exchange(placements_wanted_, {}))
    if (!agents_->finished(i)) send_planned_placements(i);
  release_step();
  for (size_t i = 0; i < agents_->size(); ++i) {
    if ((*agents_)[i].role() != wire::AgentRole::participant || agents_->finished(i)) continue;
    if (cfg_.adapt.enabled) adapt(i);
    CmdState& cs = cmd_state_[i];
    if (cs.resume_at && Clock::now() >= *cs.resume_at) {
      cs.resume_at.reset();
      send_cmd(i, {{"op", "resume"}}, "resume");
    }
    while (cs.next < cfg_.commands.size() &&
           rec_->timed_frames((*agents_)[i].device().name) >= cfg_.commands[cs.next].at_frame) {
      const ScheduledCommand& c = cfg_.commands[cs.next++];
      if (c.op == "set_split") send_cmd(i, {{"op", "set_split"}, {"split", std::to_string(c.split)}}, fmt::format("set_split {}", c.split));
      else if (c.op == "set_codec") send_cmd(i, {{"op", "set_codec"}, {"codec", c.codec}}, "set_codec " + c.codec);
      else if (c.op == "pause") {
        send_cmd(i, {{"op", "pause"}}, fmt::format("pause {} ms", c.pause_ms));
        cs.resume_at = Clock::now() + std::chrono::milliseconds(c.pause_ms);
      } else send_cmd(i, {{"op", "stop"}}, "stop");
    }
  }
}

Status RunSession::run(int64_t* run_out) {
  TRACR_TRY(prepare());
  TRACR_TRY(open_row());
  if (run_out) *run_out = run_id_;
  SignalCatcher signals;  // SIGINT, SIGTERM and SIGHUP all end the run the same clean way
  TRACR_TRY(connect());
  start_server();
  if (agents_->failure().empty() && !SignalCatcher::signal()) start_participants();
  if (agents_->failure().empty()) {
    agents_->start_reading();
    agents_->wait_until([&] { return agents_->drivers_done(); }, 0);
    if (ro_.progress && tty_ && frames_done_ < frames_total_) fmt::print(stderr, "\n");
  }
  // Every agent stopped (they exit when stdin closes), then the outcome.
  // Interrupted before any frame (#45 friction 8: Ctrl-C while agents
  // start took 16 s): nothing to deliver, so no grace to wait out.
  agents_->stop_all(SignalCatcher::signal() && rec_->frames_done() == 0 ? 1000 : 3000);
  return finish();
}

Status RunSession::finish() {
  std::string failure = agents_->take_failure();
  rec_->flush();
  if (auto wo = rec_->write_outputs(); !wo)
    failure += (failure.empty() ? "" : "; ") + ("record.outputs: " + user_text(wo.error()));
  const SessionOutcome end = finish_session(*rec_, *row_, std::move(failure), cfg_.output, run_id_, "run");
  if (!end.failure.empty()) {
    // The top level exits 128+N when signal N ended it (SignalCatcher::signal()).
    TRACR_LOG(error, "tracrctl run: run {} {}: {}", run_id_, run_status_name(end.status), end.failure);
    return core::command_failed(
        fmt::format("{} frames received, rows written are kept in {} (tracrctl results show {})",
                    rec_->frames_received(), cfg_.output, run_id_));
  }
  return report();
}

// The completed run's tables, read back from the database, and after a
// sweep with layer profiles and a probe the planner's prediction for it,
// validated against what was just measured, and stored.
Status RunSession::report() {
  if (ro_.probe_only) {
    fmt::print("\nrun {} completed: link probes read back from {}\n", run_id_, cfg_.output);
    if (auto pst = print_probe_table(*db_, run_id_, stdout, table_width()); !pst) {
      return core::command_failed(user_text(pst.error()));
    }
    return {};
  }
  for (const auto& lp : lost_participants_)
    TRACR_LOG(warn,
              "tracrctl run: warning: run {} went on without participant {}; its frames until then are "
              "recorded (events: participant_lost)",
              run_id_, lp);
  fmt::print("\nrun {} completed{}: per-split table read back from {}\n", run_id_,
             lost_participants_.empty() ? "" : fmt::format(" without {} lost participant(s)", lost_participants_.size()),
             cfg_.output);
  if (auto pst = print_split_table(*db_, run_id_, stdout, ro_.wide, table_width()); !pst) {
    return core::command_failed(user_text(pst.error()));
  }
  if (auto est = print_energy_table(*db_, run_id_); !est) {
    return core::command_failed(user_text(est.error()));
  }
  if (!cfg_.record.layers || !cfg_.probe.enabled || ro_.in_process || (!cfg_.split.all && cfg_.split.entries.size() <= 1) ||
      pre_.devices.chain.size() > 1)  // the planner plans two tiers
    return {};
  auto plan = plan_from_run(*db_, run_id_, PlanOptions{});
  if (!plan) {
    fmt::print("\n(no plan: {})\n", plan.error().message);
    return {};
  }
  validate_against(*db_, *plan);
  auto id = store_plan(*db_, *plan);
  fmt::print("\n{}{}", format_plan(*plan, table_width()), id ? fmt::format("stored as plan {}\n", *id) : "");
  if (!id) TRACR_LOG(warn, "tracrctl run: storing the plan: {}", user_text(id.error()));
  return {};
}

}  // namespace

Status run_loaded(const RunOptions& ro, ExperimentConfig cfg, int64_t* run_out) {
  RunSession session(ro, cfg);
  return session.run(run_out);
}

}  // namespace tracr::controller
