// tracrctl's command line: the one CLI11 App tree naming every command,
// subcommand and option with its type and description. Each command's
// options land in a typed struct (RunOptions, PlanCommand, ...) handed to
// the command's function; adding a command or an option is one entry in
// build_app() below (completion and --help follow from the tree).
#include "controller/cli/cli.hpp"
#include "controller/cli/help_format.hpp"
#include "core/log.hpp"
#include "core/user_error.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "wire/identity.hpp"
#include "agent/cli_types.hpp"
#include "wire/record.hpp"
#include "controller/commands/convert.hpp"
#include "controller/commands/demo.hpp"
#include "controller/commands/devices.hpp"
#include "controller/commands/models.hpp"
#include "controller/commands/plan.hpp"
#include "controller/commands/report.hpp"
#include "controller/commands/results.hpp"
#include "controller/commands/run.hpp"
#include "controller/commands/train.hpp"
#include "controller/session/run_row.hpp"
#include "fleet/process.hpp"
#include "protocol/codec.hpp"
#include "protocol/error.hpp"

namespace tracr::controller {

using namespace tracr::store;  // the floors below, by their short names
using namespace tracr::fleet;
using namespace tracr::analysis;

namespace {

using agent::cli::add_int;
using agent::cli::add_number;
using agent::cli::form;

std::string bash_completion(const CLI::App& root);

constexpr const char* kExitStatus =
    "exit status (every command): 0 done, 1 failed (a run failed, a device or database error),\n"
    "2 usage or configuration error (nothing was started), 128+signal when interrupted\n"
    "(130 SIGINT, 143 SIGTERM, 129 SIGHUP)";

// The parsed command line: every command's typed options, and the function
// to call once parsing succeeded.
struct Parsed {
  // What the command runs, and the name its ending error is written under.
  std::function<Status()> action;
  std::string prefix;
  RunOptions run, probe, agents_start;
  TrainOptions train;
  PlanCommand plan;
  ReportOptions report;
  ResultsOptions results;
  DevicesOptions devices;
  ProfileOptions profile;
  ConvertOptions convert;
  DemoOptions demo, bench;
  std::string completion_shell;
  std::vector<size_t> demo_sizes;
};

void act(Parsed& p, std::string prefix, std::function<Status()> action) {
  p.prefix = std::move(prefix);
  p.action = std::move(action);
}

// "a,b,c" -> {"a", "b", "c"}.
std::vector<std::string> split_commas(const std::string& s) { return wire::split_on(s, ','); }

// A comma-separated list of integers lo..hi ("expected ... got").
CLI::Validator int_list(long long lo, long long hi, size_t count, const std::string& what) {
  return form([=](const std::string& v) -> std::string {
    const auto items = split_commas(v);
    const std::string expected = fmt::format("expected {} (integers {}..{})", what, lo, hi);
    if (count && items.size() != count) return expected;
    for (const auto& it : items) {
      char* end = nullptr;
      errno = 0;
      const long long k = std::strtoll(it.c_str(), &end, 10);
      if (it.empty() || *end != '\0' || errno == ERANGE || k < lo || k > hi) return expected;
    }
    return "";
  });
}

template <class T>
std::vector<T> to_ints(const std::string& v) {
  std::vector<T> out;
  for (const auto& it : split_commas(v)) out.push_back(static_cast<T>(std::stoll(it)));
  return out;
}

// `--set key=value` (repeatable), checked when the experiment is loaded.
void add_sets(CLI::App* c, std::vector<std::string>& sets) {
  c->add_option("--set", sets,
                "override an experiment setting (after the file and TRACR_* variables; repeatable), e.g. "
                "--set warmup=5 --set dataset.type=synthetic")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false)
      ->check(form([](const std::string& v) -> std::string {
        const size_t eq = v.find('=');
        return eq == std::string::npos || eq == 0 ? "expected KEY=VALUE (a setting of the experiment file)" : "";
      }));
}

void add_experiment(CLI::App* c, std::string& path) {
  c->add_option("EXPERIMENT", path, "the experiment file (config/README.md)")->type_name("EXPERIMENT.yaml")->required();
}

void add_db(CLI::App* c, std::string& db, const std::string& what) {
  c->add_option("--db", db, what)->type_name("PATH");
}

void add_demo_options(CLI::App* c, DemoOptions& o, std::vector<size_t>& sizes) {
  c->add_flag_function(
      "--quick",
      [&o](int64_t) {
        o.warmup = 3;
        o.reps = 20;
        o.stream_frames = 20;
      },
      "a short run (3 warm-up, 20 repetitions, 20 stream frames)");
  add_int(c, "--reps", o.reps, 1, 1000000, "repetitions per size and configuration");
  c->add_option("--csv", o.csv_path, "also write the table as CSV")->type_name("FILE");
  c->add_option("--agent", o.agent_path, "tracr-agent to start (default: next to tracrctl)")->type_name("PATH");
  c->add_option_function<std::string>(
       "--sizes", [&sizes](const std::string& v) { sizes = to_ints<size_t>(v); }, "tensor sizes in bytes")
      ->type_name("B1,B2,...")
      ->check(int_list(1, 1LL << 34, 0, "sizes in bytes like 36864,774400"));
  add_int(c, "--chunk", o.chunk_bytes, 1, 1LL << 32, "chunk size of a frame's parts, bytes");
  add_int(c, "--window", o.window, 1, 4096, "frames in flight during the throughput run");
  add_int(c, "--threads", o.threads, 0, 4096, "participant encode threads (0: every core)");
  c->add_flag_function("--no-python", [&o](int64_t) { o.compare_python = false; },
                       "skip the comparison with the Python tracr pipeline");
  c->add_flag_function("--compare-only", [&o](int64_t) { o.compare_python = o.compare_only = true; },
                       "only the comparison with the Python pipeline, not the codec table");
  c->add_option("--python", o.python, "the Python interpreter (Debian's /usr/bin/python3)")->type_name("PATH");
  c->add_option("--python-script", o.python_script, "bench/python_baseline.py")->type_name("PATH");
  c->add_option_function<std::string>(
       "--configs", [&o](const std::string& v) { o.configs = split_commas(v); },
       "codec/cipher pairs to measure, e.g. none/plain,blosc-lz4/aes")
      ->type_name("CODEC/CIPHER,...")
      ->check(form([](const std::string& v) -> std::string {
        for (const auto& c : split_commas(v))
          if (auto spec = protocol::CodecSpec::parse(c.substr(0, c.find('/'))); !spec)
            return "expected codec/cipher pairs (" + spec.error().message + ")";
        return "";
      }));
}

// run: the sweep
void add_run(CLI::App& app, Parsed& p) {
  auto* run = app.add_subcommand("run",
                                 "bring up agents (local processes or SSH), sweep the splits, record in SQLite, print "
                                 "the per-split table read back from the database");
  run->add_option("EXPERIMENT", p.run.experiment, "the experiment file (config/README.md)")
      ->type_name("EXPERIMENT.yaml");
  run->add_option("--again", p.run.again,
                  "run a stored run's experiment again (its settings as stored, --set on top) into the database it "
                  "came from (--db, default as results list)")
      ->type_name("RUN");
  run->add_flag("--show-config", p.run.show_config,
                "print every setting with its effective value and origin (default, file:line:col, env TRACR_X, "
                "--set key=value) and exit");
  run->add_flag("--in-process", p.run.in_process, "the PARTICIPANT runs the tails itself, no sockets");
  run->add_flag("--wide", p.run.wide,
                "the per-split table with every column (every stage, failed/flagged, samples/s, bytes, ratio); "
                "default: within 120 columns");
  add_db(run, p.run.db, "results database (default: the experiment's output)");
  run->add_flag("--trust-new-hosts", p.run.trust_new_hosts, "SSH: trust and record unknown host keys");
  run->add_flag("--reprofile", p.run.reprofile,
                "time the layers and segments anew instead of reusing the profiles the database holds for the "
                "same model, input, batch, device and settings");
  run->add_flag_function("--no-progress", [&p](int64_t) { p.run.progress = false; }, "no progress line");
  run->add_option("--agent", p.run.agent_path, "tracr-agent to run (default: next to tracrctl)")->type_name("PATH");
  run->add_option("--report", p.run.report,
                  "when every run completed, write the report comparing them (as tracrctl report RUN... -o FILE)")
      ->type_name("FILE.html");
  run->add_option("--repeat", p.run.repeat,
                  "run the whole sweep (every model, link and codec) N times, repetitions outermost, and print the "
                  "median and range over them")
      ->check(CLI::Range(1, 1000))
      ->type_name("N");
  add_sets(run, p.run.sets);
  run->callback([&p] { act(p, "tracrctl run", [&p] { return run_experiment(p.run); }); });
}

// train: split training
void add_train(CLI::App& app, Parsed& p) {
  auto* train = app.add_subcommand("train",
                                   "split training (train.cuts): data owners keep data, labels and the loss, workers "
                                   "their segments; steps, epochs and checkpoints in SQLite, the model exported");
  add_experiment(train, p.train.experiment);
  train->add_option("--resume", p.train.resume, "continue a training run from its newest checkpoint")
      ->type_name("RUN|last");
  add_db(train, p.train.db, "results database (default: the experiment's output)");
  train->add_flag("--show-config", p.train.show_config, "print every setting with its value and origin and exit");
  train->add_flag("--trust-new-hosts", p.train.trust_new_hosts, "SSH: trust and record unknown host keys");
  train->add_flag_function("--no-progress", [&p](int64_t) { p.train.progress = false; }, "no progress line");
  train->add_option("--agent", p.train.agent_path, "tracr-agent to run (default: next to tracrctl)")->type_name("PATH");
  add_sets(train, p.train.sets);
  train->callback([&p] { act(p, "tracrctl train", [&p] { return cmd_train(p.train); }); });
}

// link probe
void add_link_probe(CLI::App& app, Parsed& p) {
  auto* link = app.add_subcommand("link", "measure the link between devices");
  link->require_subcommand(1);
  auto* probe = link->add_subcommand("probe", "measure RTT and throughput both ways between each PARTICIPANT and its "
                                              "SERVER");
  add_experiment(probe, p.probe.experiment);
  add_db(probe, p.probe.db, "results database (default: the experiment's output)");
  probe->add_flag("--trust-new-hosts", p.probe.trust_new_hosts, "SSH: trust and record unknown host keys");
  probe->add_flag_function("--no-progress", [&p](int64_t) { p.probe.progress = false; }, "no progress line");
  probe->add_option("--agent", p.probe.agent_path, "tracr-agent to run (default: next to tracrctl)")->type_name("PATH");
  add_sets(probe, p.probe.sets);
  probe->callback([&p] {
    p.probe.probe_only = true;
    act(p, "tracrctl link probe", [&p] { return run_experiment(p.probe); });
  });
}

// plan
void add_plan(CLI::App& app, Parsed& p) {
  auto* plan = app.add_subcommand("plan",
                                  "predict latency, edge energy and throughput per split from stored layer profiles, "
                                  "bytes and the link; choose a split; --validate compares with the run, --validate-on with another");
  plan->add_option("BASIS", p.plan.target, "a run id, 'last', or an EXPERIMENT.yaml (its model's newest run)")
      ->type_name("RUN|last|EXPERIMENT.yaml")
      ->required();
  add_db(plan, p.plan.db, "results database (default as for results; an EXPERIMENT.yaml's output)");
  plan->add_flag("--validate", p.plan.validate, "compare the predictions with the run's measurements");
  plan->add_option("--validate-on", p.plan.validate_run,
                   "held out: compare with another run of the same model and input (planned for its link unless "
                   "one is given); RUN1,RUN2,... (a --repeat series): one plan per run, then the MAPE's median "
                   "and range over them")
      ->type_name("RUN|last|RUN,...");
  plan->add_flag_function("--no-store", [&p](int64_t) { p.plan.store = false; }, "do not store the plan");
  plan->add_option("--objective", p.plan.plan.objective, "what to minimise or maximise")
      ->type_name("latency|energy|throughput|weighted:W");
  auto opt_number = [&](const std::string& name, std::optional<double>& target, const std::string& unit,
                        const std::string& help) {
    auto holder = std::make_shared<double>(0);
    add_number(plan, name, *holder, 0, 1e12, unit, help)->each([holder, &target](const std::string& v) {
      target = std::stod(v);
    });
  };
  opt_number("--max-latency-ms", p.plan.plan.max_latency_ms, "ms", "constraint: predicted latency at most X");
  opt_number("--max-energy-j", p.plan.plan.max_energy_j, "J", "constraint: participant energy per frame at most X");
  opt_number("--min-accuracy", p.plan.min_accuracy, "",
             "a basis run with early exits: the fastest (split, threshold) whose accuracy is at least X (0..1)");
  plan->add_option("--link", p.plan.link, "a link profile (built-in or the experiment's links)")->type_name("PROFILE");
  opt_number("--up-mbit", p.plan.up_mbit, "Mbit/s", "explicit link: uplink rate");
  opt_number("--down-mbit", p.plan.down_mbit, "Mbit/s", "explicit link: downlink rate (default: the uplink's)");
  opt_number("--rtt-ms", p.plan.rtt_ms, "ms", "explicit link: round-trip time (default: the run's probe)");
  plan->add_option("--radio", p.plan.plan.radio, "radio energy model (default: the link's name when it is one)")
      ->type_name("3g|lte|wifi");
  plan->add_option_function<std::string>(
          "--codecs", [&p](const std::string& v) { p.plan.plan.codecs = split_commas(v); },
          "codecs to plan, each from the newest run of the model that used it")
      ->type_name("C1,C2,...");
  plan->add_option("--participants", p.plan.plan.participants,
                   "participants sharing the SERVER, one frame in flight each (queueing model; default: as many as "
                   "the basis run had, or the --validate-on run)")
      ->check(CLI::Range(1, 100000))
      ->type_name("N");
  plan->add_flag("--joint", p.plan.joint,
                 "plan the participants sharing the SERVER jointly: how many cut at each split (mean latency, or "
                 "total frames/s with --objective throughput); with --validate-on RUN, the assignment RUN made "
                 "(participant_splits), predicted and compared");
  plan->add_option_function<std::string>(
          "--participant-from",
          [&p](const std::string& v) {
            auto runs = to_ints<int64_t>(v);
            p.plan.plan.participant_run = runs.front();
            p.plan.plan.participant_more.assign(runs.begin() + 1, runs.end());
          },
          "the PARTICIPANT's layer and head profiles from this run (another device, profiled once), with the "
          "basis run's SERVER, bytes and link; RUN1,RUN2,...: calibration runs of that device, each layer's time "
          "the median over them")
      ->type_name("RUN[,RUN...]")
      ->check(int_list(1, std::numeric_limits<int64_t>::max(), 0, "run ids RUN or RUN1,RUN2,..."));
  plan->add_option_function<std::string>(
          "--chain", [&p](const std::string& v) { p.plan.chain = split_commas(v); },
          "plan this chain of devices after the basis run's PARTICIPANT (by name in the devices file) from two-tier "
          "runs' layer profiles and link probes of the same devices: every placement predicted; --link one profile "
          "for every hop or one per hop (probe: the hop's stored probe); --validate-on a chain run of those devices")
      ->type_name("DEV1,DEV2,...");
  plan->add_option("--splits", p.plan.plan.splits,
                   "splits to plan: all (default), measured (those whose bytes a run measured), or K1,K2,... "
                   "(a split point, or the layer it cuts after: features.5,avgpool)")
      ->type_name("all|measured|K,...");
  add_sets(plan, p.plan.sets);
  plan->callback([&p] {
    act(p, "tracrctl plan", [&p] {
      p.plan.width = table_width();
      return cmd_plan(p.plan);
    });
  });
}

// report
void add_report(CLI::App& app, Parsed& p) {
  auto* report = app.add_subcommand("report",
                                    "figures comparing runs, drawn by matplotlib (one self-contained HTML page; with "
                                    "--figures each as PDF, SVG, PNG, its CSV and the Python script that draws it): "
                                    "latency, stages, bytes, energy, accuracy, plan error and split over time per split");
  report->add_option("RUN", p.report.runs, "run ids or 'last'")->type_name("RUN ...")->required();
  report->add_option("-o,--out", p.report.out, "the HTML file to write")->type_name("FILE.html");
  report->add_option("--figures", p.report.figures,
                     "write every figure as DIR/<figure>.pdf, .svg, .png, .csv (its data) and .py (the matplotlib "
                     "script that draws it from the CSV)")
      ->type_name("DIR");
  report->add_option("--size", p.report.size, "column: 3.3 in wide, 8 pt text; page: 7 in, 9 pt")
      ->type_name("column|page")
      ->default_str("page");
  auto* log_y = report->add_flag("--log-y", p.report.log_y, "every figure's value axis logarithmic");
  report->add_flag("--linear-y", p.report.linear_y, "every figure's value axis linear (default: log where the values "
                                                    "span more than 20x)")
      ->excludes(log_y);
  report->add_option("--only", p.report.only,
                     "only these figures: latency, stages, bytes, energy, accuracy, plan, plan_error, timeline_split, "
                     "timeline_link, exits, chain, train_loss, train_accuracy")
      ->type_name("FIG,...")
      ->delimiter(',');
  add_db(report, p.report.db, "results database (default $TRACR_OUTPUT, else results/tracr.db here, else the project's)");
  report->callback([&p] { act(p, "tracrctl report", [&p] { return cmd_report(p.report); }); });
}

// results and its subcommands
void add_results(CLI::App& app, Parsed& p) {
  auto* results = app.add_subcommand("results", "read the results database back (RUN: a run id or 'last'; the "
                                                "database: --db, else $TRACR_OUTPUT, else results/tracr.db)");
  results->require_subcommand(1);
  auto results_sub = [&](const std::string& name, const std::string& help, bool db) {
    auto* c = results->add_subcommand(name, help);
    if (db) add_db(c, p.results.db, "results database (default $TRACR_OUTPUT, else results/tracr.db here, else the project's)");
    c->callback([&p, name] {
      p.results.sub = name;
      act(p, "tracrctl results " + name, [&p] { return cmd_results(p.results); });
    });
    return c;
  };
  auto* rlist = results_sub("list", "the runs, newest first", true);
  rlist->add_option("--model", p.results.model, "only runs of this model id")->type_name("MODEL");
  rlist->add_option("--status", p.results.status, "only runs with this status")
      ->type_name("running|completed|failed|interrupted");
  rlist->add_option("--name", p.results.name, "only runs whose name holds this text (any case)")->type_name("TEXT");
  add_int(rlist, "--limit", p.results.limit, 0, 1LL << 30, "at most N runs (0: all)");
  auto* rshow = results_sub("show", "one run: header, per-split table, accuracy, probes, energy", true);
  rshow->add_option("RUN", p.results.positional, "a run id or 'last'")->required();
  rshow->add_flag("--wide", p.results.wide,
                  "every column of the per-split table (default: within 120 columns)");
  results_sub("compare", "runs side by side, median total per split", true)
      ->add_option("RUN", p.results.positional, "two or more run ids")
      ->type_name("RUN RUN ...")
      ->required();
  auto* rexits = results_sub("exits", "a run with early exits: accuracy, exit rate and latency per threshold, swept "
                                      "from its stored confidences (#44)", true);
  rexits->add_option("RUN", p.results.positional, "a run id or 'last'")->required();
  rexits->add_option("--thresholds", p.results.thresholds,
                     "from:to:step or a comma-separated list (default 0.5:0.99:0.01 and the run's own)")
      ->type_name("T");
  rexits->add_option("--measure", p.results.measure, "the confidence measure (default: the run's)")
      ->type_name("max_softmax|entropy");
  rexits->add_option("--csv", p.results.exits_csv, "also write the sweep as tidy CSV")->type_name("FILE");
  auto* rexport = results_sub("export", "runs as CSV (frames; per-split summaries) or one run as JSON (everything)", true);
  rexport->add_option("RUN", p.results.positional, "run ids or 'last'")->type_name("RUN ...")->required();
  rexport->add_option("--csv", p.results.csv, "write the runs' frames as CSV")->type_name("FILE")->allow_extra_args(false);
  rexport->add_option("--summary-csv", p.results.summary_csv, "write one row per run, split and stage (tidy CSV)")
      ->type_name("FILE")
      ->allow_extra_args(false);
  rexport->add_option("--json", p.results.json, "write the run as JSON")->type_name("FILE")->allow_extra_args(false);
  results_sub("rm", "delete runs and all their rows", true)
      ->add_option("RUN", p.results.positional, "run ids or 'last'")
      ->type_name("RUN ...")
      ->required();
  results_sub("schema", "the tables and columns of the results database", false)
      ->add_flag("--markdown", p.results.markdown, "as Markdown (docs/SCHEMA.md)");
  results_sub("migrate", "bring an existing database to this version's schema", true);
}

// devices check/setup, agents start/deploy/status/logs/stop
void add_devices_and_agents(CLI::App& app, Parsed& p) {
  auto devices_options = [&](CLI::App* c, bool agents) {
    c->add_option_function<std::string>(
         "--devices",
         [&p](const std::string& f) {
           p.devices.devices = f;
           p.devices.devices_given = true;
         },
         "the devices file (default config/devices_config.yaml)")
        ->type_name("FILE");
    c->add_flag("--trust-new-hosts", p.devices.trust, "SSH: trust and record unknown host keys");
    c->add_option("--agent", p.devices.agent, "tracr-agent to compare or deploy (default: next to tracrctl)")
        ->type_name("PATH");
    if (agents) {
      add_int(c, "--tail", p.devices.tail, 0, 1LL << 40, "logs: the last BYTES of each log");
      c->add_option("--state-dir", p.devices.state_dir,
                    "only the detached agents recorded in DIR (default: results/agents and every directory "
                    "`agents start` used, as listed in ~/.local/state/tracr/detached-dirs)")
          ->type_name("DIR");
    }
  };
  auto* devices = app.add_subcommand("devices", "the devices of the devices file");
  devices->require_subcommand(1);
  auto* check = devices->add_subcommand(
      "check",
      "reachability, authentication, key permissions, architecture, agent version and its missing shared "
      "libraries, energy meters, declared paths; with --experiment the files a run would stage");
  devices_options(check, false);
  check->add_option("--experiment", p.devices.experiment,
                    "also list, per device, each file of this experiment its role reads: declared, already "
                    "staged, or what the next run uploads (its devices file unless --devices is given)")
      ->type_name("EXP.yaml");
  check->callback([&p] { act(p, "tracrctl devices check", [&p] { return cmd_devices_check(p.devices); }); });
  auto* setup = devices->add_subcommand(
      "setup", "install the agent's runtime Debian packages on every device over SSH (shows them, then asks)");
  devices_options(setup, false);
  setup->add_flag("--yes", p.devices.yes, "install without asking");
  setup->add_flag("--dry-run", p.devices.dry_run, "only print what each device lacks and the command");
  setup->callback([&p] { act(p, "tracrctl devices setup", [&p] { return cmd_devices_setup(p.devices); }); });

  auto* agents = app.add_subcommand("agents", "tracr-agent on the devices: start, deploy, status, logs, stop");
  agents->require_subcommand(1);
  auto* start = agents->add_subcommand("start", "start the experiment's SERVER agent detached (runs reuse it)");
  add_experiment(start, p.agents_start.experiment);
  start->add_flag("--trust-new-hosts", p.agents_start.trust_new_hosts, "SSH: trust and record unknown host keys");
  start->add_option("--agent", p.agents_start.agent_path, "tracr-agent to run (default: next to tracrctl)")
      ->type_name("PATH");
  add_sets(start, p.agents_start.sets);
  start->callback([&p] { act(p, "tracrctl agents start", [&p] { return cmd_agents_start(p.agents_start); }); });
  for (const auto& [verb, help] : std::vector<std::pair<std::string, std::string>>{
           {"deploy", "upload the agent to every SSH device (by content hash)"},
           {"status", "deployed and running agents, and detached SERVER agents"},
           {"logs", "the agents' logs on every SSH device"},
           {"stop", "stop detached SERVER agents (run agents stop with their run)"}}) {
    auto* c = agents->add_subcommand(verb, help);
    devices_options(c, true);
    c->callback([&p, v = verb] { act(p, "tracrctl agents " + v, [&p, v] { return cmd_agents(v, p.devices); }); });
  }
}

// models, profile
void add_models(CLI::App& app, Parsed& p) {
  app.add_subcommand("models", "list the splittable models of the registry")->callback([&p] {
    act(p, "tracrctl models", [] { return cmd_models(); });
  });
  auto* profile = app.add_subcommand("profile",
                                     "per-layer latency (median, p95), bytes and memory on this machine, and the "
                                     "per-split head/tail estimate");
  profile->add_option("MODEL", p.profile.model, "a model id (tracrctl models) or torchscript:FILE")->required();
  profile->add_option_function<std::string>(
             "--input-shape", [&p](const std::string& v) { p.profile.input_shape = to_ints<int64_t>(v); },
             "input shape without the batch, any rank: C,H,W, 4 (features), T,D (tokens) (default: the model's)")
      ->type_name("SHAPE")
      ->check(int_list(1, 65536, 0, "sizes like 3,224,224 or 4 or 16,64"));
  add_int(profile, "--batch", p.profile.batch, 1, 65536, "batch size");
  add_int(profile, "--reps", p.profile.reps, 1, 1000000, "repetitions per layer");
  profile->add_option("--weights", p.profile.weights, "weights file (default: random weights)")->type_name("FILE");
  profile->add_option("--device", p.profile.device, "cpu | cuda | cuda:N | auto")->type_name("DEVICE");
  profile->add_option("--csv", p.profile.csv, "also write one CSV row per layer")->type_name("FILE");
  profile->add_option("--json", p.profile.json, "also write the layers and splits as JSON")->type_name("FILE");
  profile
      ->add_option("--segments", p.profile.segments,
                   "splits whose head and tail are timed whole, as a run executes them: all, none or K1,K2,... "
                   "(default: a traced model's first, last and 3 between; none for a zoo model, which runs layer by "
                   "layer); each timed a third of --reps times after one warm-up")
      ->type_name("all|none|K,...");
  profile->callback([&p] { act(p, "tracrctl profile", [&p] { return cmd_profile(p.profile); }); });
}

// demo, bench protocol
void add_demo(CLI::App& app, Parsed& p) {
  auto* demo = app.add_subcommand("demo",
                                  "start tracr-agent SERVER processes on loopback, send real tensors under each codec "
                                  "and cipher, print the measured table beside raw ZeroMQ");
  add_demo_options(demo, p.demo, p.demo_sizes);
  demo->callback([&p] {
    if (!p.demo_sizes.empty()) p.demo.sizes = p.demo_sizes;
    act(p, "tracrctl demo", [&p] { return run_demo(p.demo); });
  });
  auto* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  auto* bproto = bench->add_subcommand(
      "protocol", "the demo with more repetitions, then the side-by-side table against the Python tracr pipeline "
                  "(bench/python_baseline.py) and raw ZeroMQ on real post-ReLU activations");
  p.bench.warmup = 50;
  p.bench.reps = 500;
  p.bench.stream_frames = 400;
  p.bench.compare_python = true;
  add_demo_options(bproto, p.bench, p.demo_sizes);
  bproto->callback([&p] {
    if (!p.demo_sizes.empty()) p.bench.sizes = p.demo_sizes;
    act(p, "tracrctl bench protocol", [&p] { return run_demo(p.bench); });
  });
}

// convert
void add_convert(CLI::App& app, Parsed& p) {
  auto* convert = app.add_subcommand("convert",
                                     "a Python tracr model config (alexnetsplit.yaml, ...) as a tracr experiment "
                                     "file, listing what could not be carried over (docs/FROM_PYTHON_TRACR.md)");
  convert->add_option("OLD", p.convert.input, "the Python tracr config")->type_name("OLD.yaml")->required();
  convert->add_option("-o,--output", p.convert.output, "write the experiment here (default: stdout)")
      ->type_name("NEW.yaml");
  convert->add_flag("--force", p.convert.force, "replace NEW.yaml when it exists");
  convert->callback([&p] { act(p, "tracrctl convert", [&p] { return cmd_convert(p.convert); }); });
}

// codecs, version, completion
void add_misc(CLI::App& app, Parsed& p) {
  app.add_subcommand("codecs", "list the codecs this build supports")->callback([&p] {
    act(p, "tracrctl codecs", []() -> Status {
      for (const auto& c : protocol::list_codecs()) std::puts(c.c_str());
      return {};
    });
  });
  app.add_subcommand("version", "print versions")->callback([&p] {
    act(p, "tracrctl version", []() -> Status {
      std::printf("tracrctl %s, tensor-frame protocol 1\n", wire::kAgentVersion);
      return {};
    });
  });
  auto* completion = app.add_subcommand("completion", "print a shell completion script: "
                                                      "source <(tracrctl completion bash)");
  completion->add_option("SHELL", p.completion_shell, "the shell")
      ->type_name("bash")
      ->required()
      ->check(CLI::IsMember({"bash"}));
  completion->callback([&p, &app] {
    act(p, "tracrctl completion", [&app]() -> Status {
      if (std::fputs(bash_completion(app).c_str(), stdout) < 0) return core::command_failed("cannot write to stdout");
      return {};
    });
  });
}

// The whole tree. Every command sets p.action to what it runs.
void build_app(CLI::App& app, Parsed& p) {
  app.formatter(wrapping_formatter());  // before the subcommands: they copy it
  app.footer(kExitStatus);
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "every command's options");

  add_run(app, p);
  add_train(app, p);
  add_link_probe(app, p);
  add_plan(app, p);
  add_report(app, p);
  add_results(app, p);
  add_devices_and_agents(app, p);
  add_models(app, p);
  add_demo(app, p);
  add_convert(app, p);
  add_misc(app, p);
}

// The deepest command that was being parsed, and its words ("results list").
const CLI::App* deepest(const CLI::App& app, std::string& path) {
  const CLI::App* at = &app;
  path = app.get_name();
  for (;;) {
    const auto subs = at->get_subcommands();
    if (subs.empty()) return at;
    at = subs.front();
    path += " " + at->get_name();
  }
}

// A bad command line: one line naming the command, the option and what was
// expected, and where to read more. Exit 2.
int usage_error(const CLI::App& app, const CLI::ParseError& e) {
  std::string path;
  const CLI::App* at = deepest(app, path);
  std::string msg = agent::cli::error_text(e);
  // A word where a command was expected: name it and the commands there are.
  const auto extra = at->remaining();
  if (at->get_require_subcommand_min() > 0 && at->get_subcommands().empty()) {
    std::string names;
    for (const auto* s : at->get_subcommands([](const CLI::App*) { return true; }))
      names += (names.empty() ? "" : ", ") + s->get_name();
    if (!extra.empty() && !extra.front().empty() && extra.front()[0] != '-')
      msg = fmt::format("unknown command '{}'; expected one of: {}", extra.front(), names);
    else if (msg == "expected a command")
      msg = "expected a command: " + names;
  }
  // An option of a sibling command given here: say whose it is.
  if (const CLI::App* parent = at->get_parent(); parent && !extra.empty() && extra.front().rfind("--", 0) == 0) {
    const std::string word = extra.front().substr(0, extra.front().find('='));
    for (const auto* sib : parent->get_subcommands([](const CLI::App*) { return true; })) {
      if (sib == at) continue;
      for (const auto* o : sib->get_options())
        if (o->check_lname(word.substr(2))) {
          msg += fmt::format(" ({} is an option of `{} {}`)", word, path.substr(0, path.rfind(' ')), sib->get_name());
          break;
        }
    }
  }
  TRACR_LOG(error, "{}: {}\nrun '{} --help'", path, msg, path);
  return 2;
}

std::string bash_completion(const CLI::App& root) {
  // Per command path ("", "results", "results list"): the words that may follow.
  std::vector<std::pair<std::string, std::string>> cases;
  std::string value_options;  // options that take a value: complete files after them
  std::function<void(const CLI::App*, const std::string&)> walk = [&](const CLI::App* a, const std::string& path) {
    std::string words;
    const auto subs = a->get_subcommands([](const CLI::App*) { return true; });
    for (const auto* s : subs) words += s->get_name() + " ";
    for (const auto* o : a->get_options()) {
      if (o->get_positional()) continue;
      std::vector<std::string> names;
      for (const auto& n : o->get_snames()) names.push_back("-" + n);
      for (const auto& n : o->get_lnames()) names.push_back("--" + n);
      for (const auto& n : names) {
        words += n + " ";
        if (o->get_expected_max() > 0 && value_options.find(" " + n + " ") == std::string::npos)
          value_options += " " + n + " ";
      }
    }
    if (!words.empty()) words.pop_back();
    cases.emplace_back(path, words);
    for (const auto* s : subs) walk(s, path.empty() ? s->get_name() : path + " " + s->get_name());
  };
  walk(&root, "");
  std::string paths;
  for (const auto& [path, words] : cases)
    if (!path.empty()) paths += (paths.empty() ? "'" : "|'") + path + "'";
  std::string o = "# bash completion for tracrctl, generated from its command tree: source <(tracrctl completion bash)\n";
  o += "_tracrctl() {\n";
  o += "  local cur prev path w i words\n";
  o += "  cur=\"${COMP_WORDS[COMP_CWORD]}\"\n";
  o += "  prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n";
  o += "  path=\"\"\n";
  o += "  for ((i = 1; i < COMP_CWORD; i++)); do\n";
  o += "    w=\"${COMP_WORDS[i]}\"\n";
  o += "    case \"${path:+$path }$w\" in\n";
  o += "      " + paths + ") path=\"${path:+$path }$w\" ;;\n";
  o += "    esac\n";
  o += "  done\n";
  o += "  case \" " + value_options + " \" in\n";
  o += "    *\" $prev \"*) COMPREPLY=(); return 0 ;;\n";  // a value: files (complete -o default)
  o += "  esac\n";
  o += "  case \"$path\" in\n";
  for (const auto& [path, words] : cases) o += "    '" + path + "') words='" + words + "' ;;\n";
  o += "  esac\n";
  o += "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n";
  o += "}\n";
  o += "complete -o default -F _tracrctl tracrctl\n";
  return o;
}

}  // namespace

int tracrctl_main(int argc, char** argv) {
  // A pipe to an agent that died must be an error value, not a signal that
  // kills tracrctl before it has written what it received.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"tracrctl: split-computing experiments (a DNN cut at a layer, the head on a PARTICIPANT, the tail "
               "on a SERVER). Every command answers --help.",
               "tracrctl"};
  auto parsed = std::make_unique<Parsed>();
  Parsed& p = *parsed;
  try {
    build_app(app, p);
    if (argc < 2) {
      std::fputs(app.help().c_str(), stdout);
      return 2;
    }
    if (argc == 2 && std::string(argv[1]) == "help") {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::string path;
      const CLI::App* at = deepest(app, path);
      const std::string prev = path.substr(0, path.rfind(' ') == std::string::npos ? 0 : path.rfind(' '));
      std::fputs(at->help(prev).c_str(), stdout);
      return 0;
    } catch (const CLI::CallForAllHelp&) {
      std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
      return 0;
    } catch (const CLI::ParseError& e) {
      return usage_error(app, e);
    }
    if (!p.action) {
      TRACR_LOG(error, "tracrctl: expected a command\nrun 'tracrctl --help'");
      return 2;
    }
    // The one place a command's ending error is written and mapped to the
    // exit status: 2 for a usage error, 128+N when signal N ended it, else 1.
    const Status st = p.action();
    if (st) return 0;
    TRACR_LOG(error, "{}: {}", p.prefix, without_backtrace(core::user_text(st.error())));
    const int sig = SignalCatcher::signal();
    return sig ? signal_exit_code(sig) : core::exit_code(st.error());
  } catch (const Fatal& f) {
    TRACR_LOG(error, "tracrctl: {}", without_backtrace(core::user_text(f.err)));
    return core::exit_code(f.err);
  } catch (const std::exception& e) {
    // Never a backtrace (LibTorch's c10::Error carries one in what()).
    TRACR_LOG(error, "tracrctl: {}", without_backtrace(e.what()));
    return 1;
  }
}

}  // namespace tracr::controller
