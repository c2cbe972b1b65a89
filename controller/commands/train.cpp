// `tracrctl train EXPERIMENT.yaml`: split training across devices. The
// controller starts a TRAIN_WORKER agent on every device that holds middle
// segments and a TRAIN_OWNER on every data owner, hands each owner the
// workers' endpoints, passes the turn between owners, and records every
// step, epoch, checkpoint and the exported model in SQLite.
#include "controller/commands/train.hpp"
#include "core/user_error.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <functional>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "agent/agent.hpp"
#include "fleet/event_pump.hpp"
#include "fleet/launcher.hpp"
#include "controller/session/model_check.hpp"
#include "controller/session/liveness.hpp"
#include "controller/session/run_row.hpp"
#include "fleet/process.hpp"
#include "store/recorder.hpp"
#include "store/results.hpp"
#include "store/statement.hpp"
#include "controller/commands/run.hpp"
#include "protocol/crypto.hpp"
#include "protocol/header.hpp"

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;
using namespace tracr::fleet;

using namespace tracr::settings;
using agent::ControlMsg;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::optional<std::string> opt_field(const ControlMsg& m, const std::string& k) {
  auto it = m.fields.find(k);
  if (it == m.fields.end()) return std::nullopt;
  return it->second;
}

}  // namespace

Result<TrainLayout> plan_training(const ExperimentConfig& cfg, const DevicesConfig& devices) {
  TrainLayout l;
  if (cfg.train.cuts.empty())
    return make_error(Errc::config, (cfg.source.empty() ? std::string("experiment") : cfg.source) +
                                        ": not a training experiment: set train.cuts (see config/README.md, "
                                        "\"Split training\")");
  // Owners: named, or the first PARTICIPANT.
  if (cfg.train.owners.empty()) {
    if (devices.participants().empty())
      return make_error(Errc::config, fmt::format("{}: train.owners is not set and {} has no PARTICIPANT to be the "
                                                  "data owner; name the owner(s) in train.owners",
                                                  cfg.pos_of("train").str(), devices.source));
    l.owners.push_back(devices.participants().front());
  } else {
    std::set<std::string> seen;
    for (const auto& n : cfg.train.owners) {
      const DeviceConfig* d = devices.find(n);
      if (!d)
        return make_error(Errc::config, fmt::format("{}: train.owners: no device '{}' in {}", cfg.pos_of("train.owners").str(),
                                                    n, devices.source));
      if (!seen.insert(n).second)
        return make_error(Errc::config, fmt::format("{}: train.owners: '{}' is listed twice", cfg.pos_of("train.owners").str(), n));
      l.owners.push_back(d);
    }
  }
  const size_t S = cfg.train.cuts.size() + 1;
  std::vector<std::string> seg = cfg.train.segments;
  if (seg.empty()) {
    const auto server = std::find_if(devices.devices.begin(), devices.devices.end(),
                                     [](const DeviceConfig& d) { return d.role == DeviceRole::server; });
    if (server == devices.devices.end())
      return make_error(Errc::config, fmt::format("{}: train.segments is not set and {} has no SERVER to run the "
                                                  "middle segments; name a device for each segment in train.segments",
                                                  cfg.pos_of("train").str(), devices.source));
    seg.assign(S, server->name);
    seg.front() = "owner";
    if (S >= 3) seg.back() = "owner";
  }
  for (size_t i = 0; i < S; ++i) {
    std::string n = seg[i];
    if (n != "owner") {
      const DeviceConfig* d = devices.find(n);
      if (!d)
        return make_error(Errc::config, fmt::format("{}: train.segments[{}]: no device '{}' in {} (or 'owner')",
                                                    cfg.pos_of("train.segments").str(), i, n, devices.source));
      const bool is_owner = std::any_of(l.owners.begin(), l.owners.end(), [&](const DeviceConfig* o) { return o->name == n; });
      if (is_owner) {
        if (l.owners.size() > 1)
          return make_error(Errc::config, fmt::format("{}: train.segments[{}]: '{}' is one of several data owners; "
                                                      "write 'owner' for the segments every owner keeps",
                                                      cfg.pos_of("train.segments").str(), i, n));
        n = "owner";
      }
    }
    l.segment_device.push_back(n);
  }
  if (l.segment_device.front() != "owner")
    return make_error(Errc::config,
                      fmt::format("{}: train.segments[0]: '{}' is not a data owner; expected owner{} (segment 0 "
                                  "reads the raw data, which never leaves the data owner)",
                                  cfg.pos_of("train.segments").str(), seg.front(),
                                  l.owners.size() == 1 ? " or '" + l.owners.front()->name + "'" : ""));
  if (l.segment_device.back() != "owner")
    l.warnings.push_back(fmt::format(
        "the last segment runs on {}: the gradient of the model's output it receives is derived from the labels "
        "(softmax minus one-hot), so labels can be inferred there; put the last segment on the owner (U-shaped "
        "split) to keep them private",
        l.segment_device.back()));
  for (size_t i = 0; i < S; ++i) {
    if (l.segment_device[i] == "owner") continue;
    const DeviceConfig* d = devices.find(l.segment_device[i]);
    auto it = std::find_if(l.workers.begin(), l.workers.end(), [&](const auto& w) { return w.first == d; });
    if (it == l.workers.end()) l.workers.push_back({d, {static_cast<int>(i)}});
    else it->second.push_back(static_cast<int>(i));
  }
  return l;
}

namespace {

// The checkpoint a run can resume from: its tag and the newest step every
// device confirmed. Errors name the run and why it cannot be resumed.
struct ResumePoint {
  int64_t run = 0, step = 0;
  std::string tag;
};
Result<ResumePoint> find_resume_point(ResultsDb& db, const std::string& which, const ExperimentConfig& cfg) {
  ResumePoint r;
  if (which == "last") {
    Statement q(db.handle(), "SELECT MAX(run_id) FROM train_runs");
    if (q.prepared() && q.next_row() && !q.is_null(0)) r.run = q.i64(0);
    if (r.run == 0) return make_error(Errc::not_found, db.path() + ": no training run to resume");
  } else {
    char* end = nullptr;
    r.run = std::strtoll(which.c_str(), &end, 10);
    if (which.empty() || *end != '\0' || r.run <= 0)
      return make_error(Errc::invalid_argument, "--resume expects a run id or 'last', got '" + which + "'");
  }
  // train_runs columns: run_id, tag, resumed_from, resume_step, cuts, optimizer, lr, batch_size, epochs, owners, ...
  auto runs = db.rows("train_runs", r.run);
  if (!runs) return runs.error();
  if (runs->empty() || !(*runs)[0][1])
    return make_error(Errc::not_found, fmt::format("{}: run {} is not a training run", db.path(), r.run));
  const auto& row = (*runs)[0];
  r.tag = *row[1];
  if (row[9] && *row[9] != "1")
    return make_error(Errc::invalid_argument, fmt::format("run {} had {} data owners: runs with several owners are "
                                                          "not resumable (the shared segments move on between turns)",
                                                          r.run, *row[9]));
  if (row[4] && *row[4] != join_ints(cfg.train.cuts))
    return make_error(Errc::config, fmt::format("run {} was cut at [{}], this experiment at [{}]: its checkpoints "
                                                "hold other segments",
                                                r.run, *row[4], join_ints(cfg.train.cuts)));
  // train_checkpoints columns: run_id, owner, step, ... ordered by owner, step.
  auto cps = db.rows("train_checkpoints", r.run);
  if (!cps) return cps.error();
  std::optional<int64_t> step;
  for (const auto& c : *cps)
    if (c[1] == "0" && c[2]) step = std::max<int64_t>(step.value_or(0), std::stoll(*c[2]));
  if (!step) return make_error(Errc::not_found, fmt::format("run {} recorded no checkpoint every device confirmed", r.run));
  r.step = *step;
  return r;
}

}  // namespace

int cmd_train(const TrainOptions& ro) {
  auto loaded = load_experiment(ro.experiment, ro.sets);
  if (!loaded) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(loaded.error()));
    return 2;
  }
  ExperimentConfig cfg = *loaded;
  if (!ro.db.empty()) cfg.output = ro.db;
  if (ro.show_config) {
    std::fputs(format_settings(cfg).c_str(), stdout);
    return 0;
  }
  if (!cfg.model_list.empty()) {
    fmt::print(stderr, "tracrctl train: model: {} models given; a list repeats `tracrctl run` once per model, "
                       "training takes one\n", cfg.model_list.size());
    return 2;
  }
  if (!cfg.compression_list.empty()) {
    fmt::print(stderr, "tracrctl train: compression: {} codecs given; a list repeats `tracrctl run` once per codec, "
                       "training takes one\n", cfg.compression_list.size());
    return 2;
  }
  if (auto st = check_experiment_files(cfg); !st) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(st.error()));
    return 2;
  }
  // Model, input shape and train.cuts against the model's layers, before launching.
  if (auto n = check_experiment_model(cfg); !n) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(n.error()));
    return 2;
  }
  auto devices = load_experiment_devices(cfg, RoleCheck::none);  // segments go to devices by name
  if (!devices) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(devices.error()));
    return 2;
  }
  auto layout = plan_training(cfg, *devices);
  if (!layout) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(layout.error()));
    return 2;
  }
  const std::string agent_path = ro.agent_path.empty() ? self_dir() + "/tracr-agent" : ro.agent_path;
  if (auto st = check_device_agents(*devices); !st) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(st.error()));
    return 2;
  }
  if (access(agent_path.c_str(), X_OK) != 0) {
    fmt::print(stderr, "tracrctl train: cannot find tracr-agent at {} (pass --agent PATH)\n", agent_path);
    return 2;
  }
  auto db = ResultsDb::open(cfg.output);
  if (!db) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(db.error()));
    return 1;
  }
  std::optional<ResumePoint> resume;
  if (!ro.resume.empty()) {
    auto r = find_resume_point(*db, ro.resume, cfg);
    if (!r) {
      fmt::print(stderr, "tracrctl train: --resume: {}\n", user_text(r.error()));
      return 2;
    }
    resume = *r;
  }
  auto stamp = new_run_stamp();
  if (!stamp) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(stamp.error()));
    return 1;
  }
  const std::string tag = resume ? resume->tag : *stamp;
  std::vector<uint8_t> secret(32);
  if (auto rb = protocol::random_bytes(secret.data(), secret.size()); !rb) {
    fmt::print(stderr, "tracrctl train: cannot draw the session secret: {}\n", user_text(rb.error()));
    return 1;
  }

  RunInfo info;
  info.name = cfg.name + " (train)";
  info.config_yaml = to_yaml(cfg);
  info.tracr_version = agent::kAgentVersion;
  info.protocol_version = static_cast<int>(protocol::kVersion);
  info.model = cfg.model;
  info.codec = cfg.compression;
  info.cipher = cfg.encryption ? "aes-256-gcm" : "none";
  info.devices_json = devices->to_json();
  auto run_id = db->begin_run(info);
  if (!run_id) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(run_id.error()));
    return 1;
  }
  RunRowGuard row(*db, *run_id, "train");
  auto txt = [](const std::string& s) -> std::optional<std::string> { return s; };
  auto num = [](auto v) -> std::optional<std::string> { return fmt::format("{}", v); };
  std::string failure;
  auto fail = [&](const std::string& why) {
    if (failure.empty()) failure = why;
  };
  if (auto st = db->insert_rows("train_runs",
                                {"run_id", "tag", "resumed_from", "resume_step", "cuts", "optimizer", "lr", "batch_size",
                                 "epochs", "owners"},
                                {{num(*run_id), txt(tag), resume ? num(resume->run) : std::nullopt,
                                  resume ? num(resume->step) : std::nullopt, txt(join_ints(cfg.train.cuts)),
                                  txt(cfg.train.optimizer), num(cfg.train.lr), num(cfg.train.batch_size),
                                  num(cfg.train.epochs), num(layout->owners.size())}});
      !st)
    fail("database: " + st.error().str());
  // Segment rows; the last one's end and every segment's parameter count
  // come with the agents' READY lines.
  std::vector<std::vector<std::optional<std::string>>> seg_rows;
  {
    int64_t a = 0;
    for (size_t i = 0; i < layout->segment_device.size(); ++i) {
      const int64_t b = i < cfg.train.cuts.size() ? cfg.train.cuts[i] : -1;
      seg_rows.push_back({num(*run_id), num(i), num(a), b >= 0 ? num(b) : std::nullopt,
                          txt(layout->segment_device[i]), std::nullopt});
      a = b;
    }
  }
  const std::vector<std::string> seg_cols = {"run_id", "segment", "first_layer", "end_layer", "device", "params"};
  if (auto st = db->insert_rows("train_segments", seg_cols, seg_rows); !st) fail("database: " + st.error().str());
  std::string layout_text;
  for (size_t i = 0; i < layout->segment_device.size(); ++i)
    layout_text += fmt::format("{}{}", i ? " | " : "", layout->segment_device[i]);
  fmt::print("run {} '{}': train {} cut at [{}] ({}), {} lr {}, batch {}, {} epoch(s), codec {}, cipher {}{}\n", *run_id,
             info.name, cfg.model, join_ints(cfg.train.cuts), layout_text, cfg.train.optimizer, cfg.train.lr,
             cfg.train.batch_size, cfg.train.epochs, cfg.compression, info.cipher,
             resume ? fmt::format(", resuming run {} at step {}", resume->run, resume->step) : "");
  std::fflush(stdout);
  for (const auto& w : layout->warnings) {
    fmt::print(stderr, "tracrctl train: warning: {}\n", w);
    (void)db->add_event(*run_id, "warn", "train_layout", w);
  }

  SignalCatcher signals;  // SIGINT, SIGTERM, SIGHUP: the owners stop after their step, rows are kept

  Recorder rec(*db, *run_id, false, false);
  const std::string log_dir = (fs::path(cfg.output).parent_path() / "logs").string();
  const std::string config_yaml = agent_config_yaml(cfg);
  const ExperimentConfig agent_cfg = agent_experiment(cfg);
  std::vector<std::unique_ptr<AgentConn>> agents;
  auto launch = [&](const DeviceConfig& dev, const std::string& role, std::vector<std::string> args) -> Status {
    LaunchSpec ls;
    ls.device = &dev;
    ls.role = role;
    args.insert(args.end(), {"--run-tag", tag});
    if (resume) args.insert(args.end(), {"--resume-step", std::to_string(resume->step)});
    ls.args = std::move(args);
    ls.agent_path = device_agent_path(dev, agent_path);
    ls.secret = secret;
    ls.log_dir = log_dir.empty() ? "." : log_dir;
    ls.log_name = fmt::format("run-{}-{}-{}.log", *stamp, *run_id, dev.name);
    ls.devices_file = devices->source;
    ls.trust_new_hosts = ro.trust_new_hosts;
    ls.config_yaml = config_yaml;
    ls.experiment = &agent_cfg;
    ls.heartbeat_timeout_ms = cfg.heartbeat_timeout_ms;
    auto conn = launch_agent(ls);
    if (!conn) return std::move(conn.error());
    for (const auto& f : (*conn)->staged()) rec.event("info", "file_staged", f.describe(), dev.name);
    rec.event("info", "agent_started",
              fmt::format("{} {} ({}, pid {})", role, dev.name, transport_name(dev.transport), (*conn)->proc().pid()),
              dev.name);
    agents.push_back(std::move(*conn));
    return {};
  };

  EventPump pump(agents);
  AgentLiveness liveness(cfg.heartbeat_timeout_ms);
  std::map<size_t, bool> finished;
  std::map<size_t, std::string> endpoints;  // worker agents' data endpoints
  std::vector<size_t> owner_agents;
  size_t turn = 0;           // index into owner_agents whose turn it is
  std::map<size_t, bool> waiting;
  std::vector<std::vector<std::optional<std::string>>> steps;
  auto last_flush = Clock::now();
  const auto t0 = Clock::now();
  int64_t steps_seen = 0;
  const bool tty = ro.progress && isatty(2);
  const std::vector<std::string> step_cols = {"owner",   "step",      "epoch",    "batch",    "loss",
                                              "correct", "step_ns",   "fwd_ns",   "bwd_ns",   "remote_ns",
                                              "srv_ns",  "up_bytes",  "down_bytes", "up_raw", "down_raw"};
  const std::vector<std::string> epoch_cols = {"owner",    "epoch",     "step",   "train_loss", "train_acc",
                                               "test_loss", "test_acc", "test_top5", "test_n",  "test_source",
                                               "epoch_ns", "eval_ns",   "up_bytes", "down_bytes"};
  auto row_of = [&](const ControlMsg& m, const std::vector<std::string>& cols) {
    std::vector<std::optional<std::string>> row{num(*run_id)};
    for (const auto& c : cols) row.push_back(opt_field(m, c));
    return row;
  };
  auto with_run = [](std::vector<std::string> cols) {
    cols.insert(cols.begin(), "run_id");
    return cols;
  };
  auto flush_steps = [&] {
    if (steps.empty()) return;
    if (auto st = db->insert_rows("train_steps", with_run(step_cols), steps); !st) fail("database: " + st.error().str());
    steps.clear();
    last_flush = Clock::now();
  };
  auto give_turn = [&] {
    // The next owner still training gets the turn once it asks for it.
    if (owner_agents.size() <= 1) return;
    for (size_t k = 0; k < owner_agents.size(); ++k) {
      const size_t i = owner_agents[(turn + k) % owner_agents.size()];
      if (finished[i]) continue;
      if (!waiting[i]) return;  // its turn: it will ask
      waiting[i] = false;
      turn = (turn + k) % owner_agents.size();
      if (auto st = agents[i]->send("CMD", {{"op", "turn"}, {"id", "0"}}); !st) fail("turn: " + st.error().str());
      return;
    }
  };

  auto handle = [&](const Event& e) {
    AgentConn& a = *agents[e.agent];
    liveness.heard(e.agent);
    if (e.closed) {
      if (!finished[e.agent])
        fail(fmt::format("{} agent on {} exited unexpectedly ({}); {}", a.role(), a.device().name,
                         e.msg.error().message, log_tail_text(a.proc().log_tail())));
      finished[e.agent] = true;
      return;
    }
    if (!e.msg) {
      fail(fmt::format("{} agent on {}: bad control line: {}", a.role(), a.device().name, e.msg.error().str()));
      return;
    }
    const ControlMsg& m = *e.msg;
    if (m.kind == "READY" && a.role() == "TRAIN_WORKER") endpoints[e.agent] = m.get_or("endpoint", "");
    if (m.kind == "READY") {  // "segment=params,..." and the model's layer count
      const std::string sp = m.get_or("seg_params", "");
      for (size_t pos = 0; pos < sp.size();) {
        const size_t comma = std::min(sp.find(',', pos), sp.size());
        const std::string item = sp.substr(pos, comma - pos);
        const size_t eq = item.find('=');
        const long seg = eq == std::string::npos ? -1 : std::strtol(item.substr(0, eq).c_str(), nullptr, 10);
        if (seg >= 0 && static_cast<size_t>(seg) < seg_rows.size()) seg_rows[seg][5] = item.substr(eq + 1);
        pos = comma + 1;
      }
      if (auto n = m.get_int("layers"); n && !seg_rows.empty()) seg_rows.back()[3] = std::to_string(*n);
      if (auto st = db->insert_rows("train_segments", seg_cols, seg_rows); !st) fail("database: " + st.error().str());
    }
    if (m.kind == "FAIL") {
      fail(fmt::format("{} agent on {} failed: {}", a.role(), a.device().name, m.get_or("error", "?")));
      return;
    }
    if (m.kind == "STEP") {
      steps.push_back(row_of(m, step_cols));
      ++steps_seen;
      if (Clock::now() - last_flush > std::chrono::seconds(1) || steps.size() >= 256) flush_steps();
      if (tty)
        fmt::print(stderr, "\r  owner {} epoch {} step {}: loss {:.4f}  ({:.0f} s)   ", m.get_or("owner", "?"),
                   m.get_or("epoch", "?"), m.get_or("step", "?"), std::strtod(m.get_or("loss", "nan").c_str(), nullptr),
                   std::chrono::duration<double>(Clock::now() - t0).count());
    } else if (m.kind == "EPOCH") {
      flush_steps();
      if (auto st = db->insert_rows("train_epochs", with_run(epoch_cols), {row_of(m, epoch_cols)}); !st)
        fail("database: " + st.error().str());
      auto d = [&](const char* k) { return std::strtod(m.get_or(k, "nan").c_str(), nullptr); };
      if (tty) fmt::print(stderr, "\n");
      fmt::print("owner {} epoch {} (step {}): train loss {:.4f} acc {:.4f} | test loss {:.4f} acc {:.4f} top-5 {:.4f} "
                 "({} samples) | {:.1f} s, {:.1f} MB up, {:.1f} MB down\n",
                 m.get_or("owner", "?"), m.get_or("epoch", "?"), m.get_or("step", "?"), d("train_loss"), d("train_acc"),
                 d("test_loss"), d("test_acc"), d("test_top5"), m.get_or("test_n", "?"), d("epoch_ns") / 1e9,
                 d("up_bytes") / 1e6, d("down_bytes") / 1e6);
      std::fflush(stdout);
    } else if (m.kind == "CHECKPOINT") {
      flush_steps();
      if (auto st = db->insert_rows("train_checkpoints", {"run_id", "owner", "step", "epoch", "dir", "at"},
                                    {{num(*run_id), opt_field(m, "owner"), opt_field(m, "step"), opt_field(m, "epoch"),
                                      opt_field(m, "dir"), txt(utc_now_iso())}});
          !st)
        fail("database: " + st.error().str());
    } else if (m.kind == "EXPORT") {
      rec.event("info", "model_exported",
                fmt::format("owner {}: {} ({} tensors, {} values) on {}", m.get_or("owner", "?"), m.get_or("path", "?"),
                            m.get_or("tensors", "?"), m.get_or("values", "?"), a.device().name),
                a.device().name);
      if (m.get_or("owner", "") == "0") {
        Statement q(db->handle(), "UPDATE train_runs SET export_path = ? WHERE run_id = ?");
        if (q.prepared()) {
          const std::string p = m.get_or("path", "");
          q.bind(1, std::string_view(p));
          q.bind(2, *run_id);
          (void)q.step();
        }
      }
    } else if (m.kind == "TRACE") {
      rec.event("debug", "frame_received",
                fmt::format("{} split {} op {} | meta {} | {}", m.get_or("type", "?"), m.get_or("split", "?"),
                            m.get_or("op", "?"), m.get_or("meta", ""), m.get_or("tensors", "")),
                a.device().name);
    } else if (m.kind == "TURN") {
      if (m.get_or("state", "") == "waiting") {
        waiting[e.agent] = true;
      } else {
        turn = (turn + 1) % std::max<size_t>(1, owner_agents.size());
      }
      give_turn();
    } else if (m.kind == "DONE") {
      finished[e.agent] = true;
      give_turn();  // an owner that is done passes its turn on
    }
    if (auto st = rec.on_message(a.device().name, a.role(), m); !st) fail(st.error().message);
  };

  bool stopping = false;
  auto wait_until = [&](const std::function<bool()>& done, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    Clock::time_point stop_deadline{};
    while (failure.empty() && !done()) {
      if (SignalCatcher::signal() && !stopping) {
        stopping = true;
        rec.event("warn", "run_interrupted",
                  fmt::format("{} received: stopping the data owners", signal_name(SignalCatcher::signal())));
        for (size_t i : owner_agents)
          if (!finished[i]) (void)agents[i]->send("STOP", {});
        stop_deadline = Clock::now() + kStopGrace;
      }
      if (stopping && (owner_agents.empty() || Clock::now() > stop_deadline)) break;
      if (timeout_ms > 0 && Clock::now() > deadline) {
        fail("timed out waiting for the agents");
        break;
      }
      if (auto e = pump.pop(100)) handle(*e);
      rec.maybe_flush();
      for (size_t i = 0; i < agents.size(); ++i)
        if (!finished[i])
          if (auto why = liveness.newly_lost(i, agents[i]->role(), agents[i]->device().name)) fail(*why);
    }
    while (auto e = pump.pop(0)) handle(*e);
  };

  // Workers first: their endpoints go to the owners.
  for (const auto& [dev, segs] : layout->workers) {
    if (!failure.empty()) break;
    std::string list;
    for (int s : segs) list += (list.empty() ? "" : ",") + std::to_string(s);
    auto st = launch(*dev, "TRAIN_WORKER",
                     {"--bind", fmt::format("tcp://{}:{}", server_bind_host(*dev), dev->connection().port), "--segments", list});
    if (!st) fail("TRAIN_WORKER " + dev->name + ": " + st.error().str());
  }
  if (failure.empty() && !agents.empty()) {
    pump.start();
    for (size_t i = 0; i < agents.size(); ++i) liveness.launched(i);
    wait_until([&] { return endpoints.size() == agents.size() || SignalCatcher::signal(); }, 600000);
  }
  if (failure.empty() && !SignalCatcher::signal()) {
    std::vector<std::string> worker_args;
    for (size_t w = 0; w < layout->workers.size(); ++w) {
      const DeviceConfig* dev = layout->workers[w].first;
      const std::string ep = dev->transport == Transport::local && dev->netns.empty()
                                 ? endpoints[w]
                                 : reachable_endpoint(endpoints[w], dev->connection().host);
      for (int s : layout->workers[w].second) worker_args.insert(worker_args.end(), {"--worker", fmt::format("{}={}", s, ep)});
    }
    for (size_t k = 0; k < layout->owners.size(); ++k) {
      std::vector<std::string> args = worker_args;
      args.insert(args.end(), {"--owner", fmt::format("{}/{}", k, layout->owners.size())});
      const size_t idx = agents.size();
      auto st = launch(*layout->owners[k], "TRAIN_OWNER", args);
      if (!st) {
        fail("TRAIN_OWNER " + layout->owners[k]->name + ": " + st.error().str());
        break;
      }
      owner_agents.push_back(idx);
    }
  }
  if (failure.empty()) {
    pump.start();
    for (size_t i = 0; i < agents.size(); ++i) liveness.launched(i);
    wait_until(
        [&] {
          for (size_t i : owner_agents)
            if (!finished[i]) return false;
          return true;
        },
        0);
  }
  for (size_t i = 0; i < agents.size(); ++i) {
    finished[i] = true;
    agents[i]->stop(3000);
  }
  pump.stop();
  while (auto e = pump.pop(0)) handle(*e);
  flush_steps();
  rec.flush();
  if (!rec.write_error().empty()) fail("database: " + rec.write_error());
  const int sig = SignalCatcher::signal();
  const SessionOutcome end = session_outcome(std::move(failure), sig);
  failure = end.failure;
  const RunStatus status = end.status;
  if (auto fs2 = row.finish(end); !fs2) {
    // The row could not be finished: the cause goes to stderr with the failure.
    failure = failure.empty() ? fs2.error().str() : failure + "; " + fs2.error().str();
  }
  if (!failure.empty()) {
    fmt::print(stderr, "tracrctl train: run {} {}: {}\n", *run_id, run_status_name(status), failure);
    fmt::print(stderr, "tracrctl train: {} steps recorded in {} (tracrctl results show {}); resume with --resume {}\n",
               steps_seen, cfg.output, *run_id, *run_id);
    return sig ? signal_exit_code(sig) : 1;
  }
  fmt::print("\nrun {} completed: {} steps\n", *run_id, steps_seen);
  if (auto st = print_train_table(*db, *run_id); !st) {
    fmt::print(stderr, "tracrctl train: {}\n", user_text(st.error()));
    return 1;
  }
  return 0;
}

Status print_train_table(ResultsDb& db, int64_t run_id) {
  auto epochs = db.rows("train_epochs", run_id);
  if (!epochs) return epochs.error();
  auto steps = db.rows("train_steps", run_id);
  if (!steps) return steps.error();
  auto runs = db.rows("train_runs", run_id);
  if (!runs) return runs.error();
  if (runs->empty()) return make_error(Errc::not_found, fmt::format("run {} is not a training run", run_id));
  // Per owner: median step time and mean bytes per step, from the step rows.
  std::map<std::string, std::vector<double>> step_ms;
  std::map<std::string, std::pair<double, double>> bytes;  // up, down sums
  for (const auto& r : *steps) {
    const std::string owner = r[1].value_or("?");
    if (r[7]) step_ms[owner].push_back(std::stod(*r[7]) / 1e6);
    if (r[12]) bytes[owner].first += std::stod(*r[12]);
    if (r[13]) bytes[owner].second += std::stod(*r[13]);
  }
  fmt::print("{:>5} {:>5} {:>7} {:>10} {:>9} {:>9} {:>8} {:>8} {:>9}\n", "owner", "epoch", "steps", "train_loss",
             "train_acc", "test_loss", "test_acc", "top5", "epoch_s");
  for (const auto& r : *epochs) {
    auto f = [&](size_t i, const char* fmtspec) {
      return r[i] ? fmt::format(fmt::runtime(fmtspec), std::stod(*r[i])) : std::string("-");
    };
    fmt::print("{:>5} {:>5} {:>7} {:>10} {:>9} {:>9} {:>8} {:>8} {:>9}\n", r[1].value_or("?"), r[2].value_or("?"),
               r[3].value_or("?"), f(4, "{:.4f}"), f(5, "{:.4f}"), f(6, "{:.4f}"), f(7, "{:.4f}"), f(8, "{:.4f}"),
               r[11] ? fmt::format("{:.1f}", std::stod(*r[11]) / 1e9) : "-");
  }
  for (auto& [owner, v] : step_ms) {
    std::sort(v.begin(), v.end());
    const double n = static_cast<double>(v.size());
    fmt::print("owner {}: {} steps, median step {:.2f} ms, per step {:.1f} kB up and {:.1f} kB down on the wire\n", owner,
               v.size(), v[v.size() / 2], bytes[owner].first / n / 1e3, bytes[owner].second / n / 1e3);
  }
  const auto& tr = runs->front();
  if (tr[10]) fmt::print("trained model: {}\n", *tr[10]);
  return {};
}

}  // namespace tracr::controller
