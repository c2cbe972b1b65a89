// `tracrctl run`: the command. Agents come up through the launcher
// (launcher.hpp), their control lines are read by an event pump, every row
// goes through the recorder (recorder.hpp), scheduled commands are sent as
// the participants deliver frames, and SIGINT/SIGTERM/SIGHUP stop the run
// cleanly: participants are told to STOP, the frames they still deliver are
// written, the run is marked interrupted.
#include "controller/commands/run.hpp"
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

#include <fmt/format.h>

#include "agent/agent.hpp"
#include "agent/control.hpp"
#include "settings/config.hpp"
#include "fleet/launcher.hpp"
#include "controller/session/agent_config.hpp"
#include "controller/session/model_check.hpp"
#include "controller/session/liveness.hpp"
#include "controller/session/run_row.hpp"
#include "fleet/process.hpp"
#include "store/recorder.hpp"
#include "store/results.hpp"
#include "analysis/tables.hpp"
#include "analysis/plan.hpp"
#include "fleet/shaping.hpp"
#include "protocol/crypto.hpp"
#include "protocol/header.hpp"

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;
using namespace tracr::fleet;
using namespace tracr::analysis;

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

using agent::ControlMsg;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

// The signal that ends the run (0: none yet).
int g_signal_now() { return SignalCatcher::signal(); }


// What the run is doing before its first frame (deploying, loading,
// profiling can take minutes): one line each when stderr is not a terminal,
// else on the line the progress bar takes over.
void draw_phase(const std::string& text, bool tty) {
  if (tty) fmt::print(stderr, "\r  {:<76.76}", text + " ...");
  else fmt::print(stderr, "  {} ...\n", text);
}

void draw_progress(int64_t done, int64_t total, int split, Clock::time_point t0, bool tty) {
  static int64_t last_pct = -1;
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (total <= 0) return;
  const int64_t pct = done * 100 / total;
  // Time left at the pace so far (frames of later splits may be slower or faster).
  const std::string eta = done > 0 && done < total
                              ? fmt::format(", about {:.0f}s left", secs * static_cast<double>(total - done) /
                                                                         static_cast<double>(done))
                              : std::string();
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

// Writes the cause of a run that could not be finished in its database
// beside it, for the next open's interruption reason; stderr always.
// The note is created with its space reserved when the run starts, so that it
// can still be written in place when the disk is full.
constexpr size_t kNoteBytes = 4096;
void reserve_cause_note(const std::string& db_path, int64_t run_id) {
  std::ofstream f(failure_note_path(db_path, run_id), std::ios::trunc);
  if (f) f << std::string(kNoteBytes, ' ');
}
void keep_cause(const std::string& db_path, int64_t run_id, const std::string& cause) {
  fmt::print(stderr, "tracrctl run: run {} could not be finished in {}: {}\n", run_id, db_path, cause);
  std::string text = cause.substr(0, kNoteBytes - 1) + "\n";
  if (std::FILE* f = std::fopen(failure_note_path(db_path, run_id).c_str(), "r+")) {  // in place, no truncation
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
}

}  // namespace

namespace {

// A model as a run name shows it: a registry id as it is, a torchscript:
// file by its name without directory and extension.
std::string model_label(const std::string& model) {
  static const std::string ts = "torchscript:";
  if (model.rfind(ts, 0) != 0) return model;
  return std::filesystem::path(model.substr(ts.size())).stem().string();
}

// The split table of several runs (one per model, link profile and/or
// codec) side by side: the median total per split of each run, its best
// split marked.
void print_series_comparison(const std::string& db_path, const std::vector<int64_t>& runs, bool by_model,
                             bool by_link, bool by_codec) {
  auto db = ResultsDb::open_readonly(db_path);
  if (!db) return;
  std::vector<std::string> names;
  std::vector<std::map<int, double>> med(runs.size());
  std::vector<int> best(runs.size(), -1);
  std::set<int> splits;
  size_t width = 12;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto r = db->get_run(runs[i]);
    std::string n;
    if (!r) n = "?";
    else {
      std::vector<std::string> parts;
      if (by_model) parts.push_back(model_label(r->model));
      if (by_link) parts.push_back(r->link.empty() ? "-" : r->link);
      if (by_codec) parts.push_back(r->codec);
      n = fmt::format("{}", fmt::join(parts, "/"));
    }
    width = std::max(width, n.size() + 1);
    names.push_back(std::move(n));
    auto t = db->split_table(runs[i]);
    if (!t) continue;
    double bv = 0;
    for (const auto& sp : *t) {
      if (sp.frames == 0) continue;
      const double m = sp.stage("total_ns").median_ns;
      med[i][sp.split] = m;
      splits.insert(sp.split);
      if (best[i] < 0 || m < bv) {
        best[i] = sp.split;
        bv = m;
      }
    }
  }
  std::vector<std::string> axes;
  if (by_model) axes.push_back("model");
  if (by_link) axes.push_back("link profile");
  if (by_codec) axes.push_back("codec");
  const std::string what = axes.size() == 1 ? axes[0]
                           : axes.size() == 2 ? axes[0] + " and " + axes[1]
                                              : axes[0] + ", " + axes[1] + " and " + axes[2];
  fmt::print("\nmedian total ms per split and {} (runs", what);
  for (auto id : runs) fmt::print(" {}", id);
  fmt::print("); * = the run's best split\n{:>7}", "split");
  for (const auto& n : names) fmt::print("  {:>{}}", n, width);
  fmt::print("\n");
  for (int k : splits) {
    fmt::print("{:>7}", k);
    for (size_t i = 0; i < runs.size(); ++i) {
      auto it = med[i].find(k);
      const std::string cell = it == med[i].end() ? "-" : fmt::format("{:.3f}{}", it->second / 1e6, best[i] == k ? "*" : " ");
      fmt::print("  {:>{}}", cell, width);
    }
    fmt::print("\n");
  }
}

// One run per model, link profile and codec of the experiment's lists
// (models outer, then links), then the table comparing them. Every model is
// checked before the first run starts; a failure or an interruption ends
// the series.
int run_series(const RunOptions& ro, const ExperimentConfig& cfg) {
  const std::vector<std::string> models = cfg.model_list.empty() ? std::vector<std::string>{cfg.model} : cfg.model_list;
  const std::vector<std::string> links = cfg.link.empty() ? std::vector<std::string>{""} : cfg.link;
  const std::vector<std::string> codecs =
      cfg.compression_list.empty() ? std::vector<std::string>{cfg.compression} : cfg.compression_list;
  RunOptions one_ro = ro;
  one_ro.codec_in_name = codecs.size() > 1;
  one_ro.model_in_name = models.size() > 1;
  if (models.size() > 1)
    for (size_t i = 0; i < models.size(); ++i) {
      ExperimentConfig one = cfg;
      one.model = models[i];
      one.model_list.clear();
      if (auto n = check_experiment_model(one); !n) {
        fmt::print(stderr, "tracrctl run: model[{}]: {}\n", i, user_text(n.error()));
        return 2;
      }
    }
  std::vector<int64_t> runs;
  for (const auto& model : models)
  for (const auto& name : links) {
    for (const auto& codec : codecs) {
      ExperimentConfig one = cfg;
      one.model = model;
      one.model_list.clear();
      if (!name.empty()) one.link = {name};
      one.compression_list.clear();
      one.compression = codec;
      one.codec = protocol::CodecSpec{};  // auto: chosen per split by the participant
      if (codec != "auto") {
        auto spec = protocol::CodecSpec::parse(codec);  // checked when the file was read
        if (!spec) {
          fmt::print(stderr, "tracrctl run: compression: {}\n", user_text(spec.error()));
          return 2;
        }
        one.codec = *spec;
      }
      std::vector<std::string> what;
      if (models.size() > 1) what.push_back("model " + model);
      if (!name.empty()) what.push_back("link profile " + name);
      if (codecs.size() > 1 || (name.empty() && models.size() == 1)) what.push_back("compression " + codec);
      fmt::print("\n== {}\n", fmt::join(what, ", "));
      std::fflush(stdout);
      int64_t id = 0;
      const int rc = run_loaded(one_ro, one, &id);
      if (id > 0) runs.push_back(id);
      if (rc != 0) return rc;
    }
  }
  if (runs.size() > 1) print_series_comparison(cfg.output, runs, models.size() > 1, !links[0].empty(), codecs.size() > 1);
  return 0;
}

}  // namespace

int run_experiment(const RunOptions& ro) {
  auto cfg = load_experiment(ro.experiment, ro.sets);
  if (!cfg) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(cfg.error()));
    return 2;
  }
  if (!ro.db.empty()) cfg->output = ro.db;
  if (ro.probe_only) {
    // Measure the links only: no layer profiles, no frames, a probe always.
    cfg->record.layers = false;
    cfg->probe.enabled = true;
    cfg->compression_list.clear();  // a probe sends no frames: one per link is enough
    cfg->model_list.clear();
    cfg->commands.clear();
    if (ro.in_process) {
      fmt::print(stderr, "tracrctl link probe: an in-process run has no link to probe\n");
      return 2;
    }
  }
  if (ro.show_config) {
    fmt::print("{}", format_settings(*cfg));
    return 0;
  }
  // Lists of models, link profiles and/or codecs: the experiment once with
  // each model, under each link and codec (models outer, then links), one run each.
  if (cfg->link.size() > 1 || !cfg->compression_list.empty() || !cfg->model_list.empty()) return run_series(ro, *cfg);
  return run_loaded(ro, *cfg, nullptr);
}

int run_loaded(const RunOptions& ro, ExperimentConfig cfg_value, int64_t* run_out) {
  ExperimentConfig* cfg = &cfg_value;
  if (auto st = check_experiment_files(*cfg); !st) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(st.error()));
    return 2;
  }
  // Model, input shape and split points: before any agent starts or any row is written.
  if (auto n = check_experiment_model(*cfg); !n) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(n.error()));
    return 2;
  }
  auto devices = load_experiment_devices(*cfg);
  if (!devices) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(devices.error()));
    return 2;
  }
  const std::string agent_path = ro.agent_path.empty() ? self_dir() + "/tracr-agent" : ro.agent_path;
  if (auto st = check_device_agents(*devices); !st) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(st.error()));
    return 2;
  }
  if (access(agent_path.c_str(), X_OK) != 0) {
    fmt::print(stderr, "tracrctl run: cannot find tracr-agent at {} (pass --agent PATH)\n", agent_path);
    return 2;
  }
  auto db = ResultsDb::open(cfg->output);
  if (!db) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(db.error()));
    return 1;
  }
  // The link profile: shaping left by a controller that died is removed
  // first, then this run's is applied (and removed however the run ends).
  const std::string shaping_dir = (fs::path(cfg->output).parent_path() / "shaping").string();
  for (const auto& line : sweep_stale_shaping(shaping_dir, *devices, ro.trust_new_hosts))
    fmt::print(stderr, "tracrctl run: {}\n", line);
  std::optional<settings::LinkSpec> link;
  if (!cfg->link.empty()) {
    auto l = resolve_link(*cfg, cfg->link[0]);
    if (!l) {
      fmt::print(stderr, "tracrctl run: {}\n", user_text(l.error()));
      return 2;
    }
    link = *l;
  }
  // The experiment's profile, or else each participant's link_profile from the devices file.
  const auto plinks = participant_links(link, *devices);
  std::unique_ptr<LinkShaper> shaper;
  if (!plinks.empty()) {
    ShapingContext sctx;
    sctx.state_dir = shaping_dir;
    sctx.devices_file = devices->source;
    sctx.trust_new_hosts = ro.trust_new_hosts;
    sctx.agent_delay = cfg->link_delay == "agent";
    auto sh = LinkShaper::apply(devices->server(), plinks, sctx);
    if (!sh) {
      fmt::print(stderr, "tracrctl run: {}\n", user_text(sh.error()));
      return 2;
    }
    shaper = std::move(*sh);
  }
  RunInfo info;
  info.link = link ? link->name : plinks.empty() ? "" : "devices-file";
  info.shaping = shaper ? shaper->shaping() : "";
  info.name = ro.probe_only ? cfg->name + " (link probe)" : cfg->name;
  if (ro.model_in_name) info.name += "/" + model_label(cfg->model);
  if (link) info.name += "@" + link->name;
  if (ro.codec_in_name) info.name += "/" + cfg->compression;
  info.config_yaml = to_yaml(*cfg);
  info.tracr_version = agent::kAgentVersion;
  info.protocol_version = static_cast<int>(protocol::kVersion);
  info.model = cfg->model;
  info.codec = cfg->compression;
  info.cipher = cfg->encryption ? "aes-256-gcm" : "none";
  info.devices_json = devices->to_json();
  auto run_id = db->begin_run(info);
  if (!run_id) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(run_id.error()));
    return 1;
  }
  if (run_out) *run_out = *run_id;
  // Whatever ends this function (an exception included), the run row is finished.
  RunRowGuard row(*db, *run_id, "run");
  reserve_cause_note(cfg->output, *run_id);
  fmt::print("run {} '{}': model {}, codec {}, cipher {}, devices {}{}{}\n", *run_id, info.name, cfg->model,
             cfg->compression, info.cipher, devices->source, ro.in_process ? " (in-process)" : "",
             info.link.empty() ? "" : fmt::format(", link {} ({})", info.link, info.shaping));
  std::fflush(stdout);  // before the progress lines on stderr

  // SIGINT, SIGTERM and SIGHUP all end the run the same clean way.
  SignalCatcher signals;

  // A SERVER agent started earlier with `tracrctl agents start` for this
  // model is reused (its session secret keys the whole run).
  const DeviceConfig& server = devices->server();
  std::optional<DetachedServer> detached;
  std::unique_ptr<DetachedWatch> detached_watch;  // is it still there? (#24)
  if (!ro.in_process) {
    auto d = read_detached(detached_state_path(cfg->output, server.name));
    if (d && d->identity == server_identity(*cfg)) {
      const bool alive = d->transport != "local" || process_alive(d->pid, d->start_ticks);
      if (alive) detached = *d;
    }
  }
  std::vector<uint8_t> secret(32);
  if (auto rb = protocol::random_bytes(secret.data(), secret.size()); !rb) {
    // A predictable session secret would authenticate nothing.
    fmt::print(stderr, "tracrctl run: cannot draw the session secret: {}\n", user_text(rb.error()));
    return 1;
  }
  if (detached) {
    auto sb = protocol::from_hex(detached->secret_hex);
    if (sb) secret = *sb;
  }
  const std::string log_dir = (fs::path(cfg->output).parent_path() / "logs").string();
  auto stamp = new_run_stamp();
  if (!stamp) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(stamp.error()));
    return 1;
  }
  const std::string run_stamp = *stamp;

  Recorder rec(*db, *run_id, cfg->record.frames, cfg->record.layers);
  rec.set_link(info.link, info.shaping);
  rec.set_server(devices->server().name);
  if (shaper) rec.event("info", "link_shaped", fmt::format("link {}: {}", info.link, info.shaping));
  // Every agent gets the effective experiment and parses it with the same code.
  const std::string config_yaml = agent_config_yaml(*cfg);
  std::vector<std::unique_ptr<AgentConn>> agents;
  std::string failure;
  auto fail = [&](const std::string& why) {
    if (failure.empty()) failure = why;
  };
  const ExperimentConfig agent_cfg = agent_experiment(*cfg);
  // Starts one agent; touches nothing shared, so participants start concurrently.
  auto start = [&](const DeviceConfig& dev, const std::string& role,
                   std::vector<std::string> args) -> Result<std::unique_ptr<AgentConn>> {
    LaunchSpec ls;
    ls.device = &dev;
    ls.role = role;
    ls.args = std::move(args);
    ls.agent_path = device_agent_path(dev, agent_path);
    ls.secret = secret;
    ls.log_dir = log_dir.empty() ? "." : log_dir;
    // Unique per run across databases and controllers (run ids repeat per database).
    ls.log_name = fmt::format("run-{}-{}-{}.log", run_stamp, *run_id, dev.name);
    ls.devices_file = devices->source;
    ls.trust_new_hosts = ro.trust_new_hosts;
    ls.config_yaml = config_yaml;
    ls.experiment = &agent_cfg;
    ls.heartbeat_timeout_ms = cfg->heartbeat_timeout_ms;
    return launch_agent(ls);
  };
  // Records a started agent (its files staged on the device first) and keeps it.
  auto adopt = [&](std::unique_ptr<AgentConn> conn, const std::string& when) {
    const DeviceConfig& dev = conn->device();
    for (const auto& f : conn->staged()) rec.event("info", "file_staged", f.describe(), dev.name);
    rec.event("info", "agent_started",
              fmt::format("{} {} ({}, pid {}){}", conn->role(), dev.name, transport_name(dev.transport),
                          conn->proc().pid(), when),
              dev.name);
    agents.push_back(std::move(conn));
  };
  auto launch = [&](const DeviceConfig& dev, const std::string& role, std::vector<std::string> args) -> Status {
    auto conn = start(dev, role, std::move(args));
    if (!conn) return std::move(conn.error());
    adopt(std::move(*conn), "");
    return {};
  };

  int64_t frames_total = 0, frames_done = 0;
  const bool tty = ro.progress && isatty(2);
  std::set<std::string> phases_seen;  // "device KIND" whose phase line was drawn
  const auto t0 = Clock::now();
  std::string server_endpoint;
  EventPump pump(agents);
  AgentLiveness liveness(cfg->heartbeat_timeout_ms);
  std::map<size_t, bool> finished;
  bool stopping = false;  // STOP sent after a signal: wait for the participants' last frames

  // on_participant_loss: continue (#24): a PARTICIPANT that dies or goes
  // silent while another still runs is recorded and left behind; the run
  // goes on with the others. Returns whether it was (else the run fails).
  std::vector<std::string> lost_participants;
  auto spare = [&](size_t i, const std::string& why) {
    if (cfg->on_participant_loss != "continue" || agents[i]->role() != "PARTICIPANT") return false;
    bool others = false;
    for (size_t j = 0; j < agents.size(); ++j)
      if (j != i && agents[j]->role() == "PARTICIPANT" && !finished[j] && !liveness.declared_lost(j)) others = true;
    if (!others) return false;
    const std::string& dev = agents[i]->device().name;
    rec.event("warn", "participant_lost", why + "; the other participants go on (on_participant_loss: continue)", dev);
    lost_participants.push_back(dev + " after " + std::to_string(rec.timed_frames(dev)) + " timed frames (" + why + ")");
    finished[i] = true;
    return true;
  };
  auto handle = [&](const Event& e) {
    AgentConn& a = *agents[e.agent];
    liveness.heard(e.agent);
    if (e.closed) {
      if (!finished[e.agent]) {
        const std::string why = fmt::format("{} agent on {} exited unexpectedly ({}); {}", a.role(),
                                            a.device().name, e.msg.error().message, log_tail_text(a.proc().log_tail()));
        // While stopping after a signal the run is interrupted anyway; the crash is still recorded.
        if (g_signal_now()) rec.event("warn", "agent_lost", why, a.device().name);
        else if (!spare(e.agent, why)) fail(why);
      }
      finished[e.agent] = true;
      return;
    }
    if (!e.msg) {
      fail(fmt::format("{} agent on {}: bad control line: {}", a.role(), a.device().name, e.msg.error().str()));
      return;
    }
    const ControlMsg& m = *e.msg;
    if (m.kind == "READY" && a.role() == "SERVER") server_endpoint = m.get_or("endpoint", "");
    if (ro.progress && frames_done == 0 && (m.kind == "PROFILE" || m.kind == "SEGMENT" || m.kind == "PROBE") &&
        phases_seen.insert(a.device().name + " " + m.kind).second)
      draw_phase(fmt::format("{} {}: {}", a.role(), a.device().name,
                             m.kind == "PROFILE"   ? "profiling each layer"
                             : m.kind == "SEGMENT" ? std::string("timing the ") +
                                                         (a.role() == "SERVER" ? "tails" : "heads") + " it will run"
                                                   : "link probed, frames next"),
                 tty);
    if (m.kind == "FAIL") {
      fail(fmt::format("{} agent on {} failed: {}", a.role(), a.device().name, m.get_or("error", "?")));
      return;
    }
    if (m.kind == "DONE") {
      finished[e.agent] = true;
      return;
    }
    if (auto st = rec.on_message(a.device().name, a.role(), m); !st) {
      fail(st.error().message);
      return;
    }
    if (m.kind == "HEARTBEAT" && m.fields.count("stalled_ms")) {
      // The agent answers, but its serving loop has stopped turning (#24).
      fail(fmt::format("{} agent on {} is stuck: its serving loop has made no progress for {} ms (after {} turns), "
                       "though its control channel still answers; ending the run",
                       a.role(), a.device().name, m.get_or("stalled_ms", "?"), m.get_or("loop", "?")));
      return;
    }
    if (m.kind == "FRAME" && ro.progress) {
      frames_done = rec.frames_done();
      frames_total = rec.frames_total();
      draw_progress(frames_done, frames_total, rec.current_split(), t0, tty);
    }
  };

  // Scheduled commands, per participant: the next one to send, and a pending resume.
  struct CmdState {
    size_t next = 0;
    std::optional<Clock::time_point> resume_at;
  };
  std::map<size_t, CmdState> cmd_state;
  int64_t cmd_id = 0;
  auto send_cmd = [&](size_t i, std::map<std::string, std::string> fields, const std::string& what) {
    fields["id"] = std::to_string(++cmd_id);
    AgentConn& a = *agents[i];
    if (auto st = a.send("CMD", fields); !st) {
      fail(st.error().message);
      return;
    }
    rec.event("info", "command_sent",
              fmt::format("command {} {} after {} timed frames", cmd_id, what, rec.timed_frames(a.device().name)),
              a.device().name);
  };
  // The adaptive policy: re-plan from the participant's live link estimate.
  struct AdaptState {
    int64_t last_decision = 0;  // timed frames at the last re-plan
  };
  std::map<size_t, AdaptState> adapt_state;
  std::optional<double> probe_rtt_ms;
  auto adapt = [&](size_t i) {
    const std::string& dev = agents[i]->device().name;
    AdaptState& as = adapt_state[i];
    const int64_t timed = rec.timed_frames(dev);
    if (timed - as.last_decision < cfg->adapt.interval_frames) return;
    const auto est = rec.link_estimate(dev);
    const int current = rec.last_split(dev);
    if (!est || *est <= 0 || current < 0) return;
    as.last_decision = timed;
    rec.flush();  // profiles and frames so far, for the planner
    if (!probe_rtt_ms) {
      auto pr = db->probes(*run_id);
      probe_rtt_ms = pr && !pr->empty() ? static_cast<double>(pr->front().rtt_min_ns) / 1e6 : 0.0;
    }
    PlanOptions po;
    PlanLink l;
    l.up_mbps = l.down_mbps = *est;
    l.rtt_ms = *probe_rtt_ms;
    l.name = "live estimate";
    l.source = fmt::format("{}'s running link estimate after {} timed frames", dev, timed);
    po.link = l;
    auto plan = plan_from_run(*db, *run_id, po);
    if (!plan) {
      rec.event("warn", "adapt_skipped", "cannot re-plan: " + plan.error().message, dev);
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
    if (gain <= cfg->adapt.hysteresis_pct) return;
    rec.event("info", "adapt_switch",
              fmt::format("link estimate {:.3f} Mbit/s: split {} predicted {:.3f} ms -> split {} predicted {:.3f} ms "
                          "(gain {:.1f} % > hysteresis {} %)",
                          *est, current, cur->latency_ms, best->split, best->latency_ms, gain, cfg->adapt.hysteresis_pct),
              dev);
    send_cmd(i, {{"op", "set_split"}, {"split", std::to_string(best->split)}},
             fmt::format("set_split {} (adaptive)", best->split));
  };
  auto schedule = [&](size_t first_participant) {
    for (size_t i = first_participant; i < agents.size(); ++i) {
      if (finished[i]) continue;
      if (cfg->adapt.enabled) adapt(i);
      CmdState& cs = cmd_state[i];
      if (cs.resume_at && Clock::now() >= *cs.resume_at) {
        cs.resume_at.reset();
        send_cmd(i, {{"op", "resume"}}, "resume");
      }
      while (cs.next < cfg->commands.size() &&
             rec.timed_frames(agents[i]->device().name) >= cfg->commands[cs.next].at_frame) {
        const ScheduledCommand& c = cfg->commands[cs.next++];
        if (c.op == "set_split") send_cmd(i, {{"op", "set_split"}, {"split", std::to_string(c.split)}}, fmt::format("set_split {}", c.split));
        else if (c.op == "set_codec") send_cmd(i, {{"op", "set_codec"}, {"codec", c.codec}}, "set_codec " + c.codec);
        else if (c.op == "pause") {
          send_cmd(i, {{"op", "pause"}}, fmt::format("pause {} ms", c.pause_ms));
          cs.resume_at = Clock::now() + std::chrono::milliseconds(c.pause_ms);
        } else send_cmd(i, {{"op", "stop"}}, "stop");
      }
    }
  };

  auto wait_until = [&](const std::function<bool()>& done_pred, int timeout_ms, size_t first_participant) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    Clock::time_point stop_deadline{};
    while (failure.empty() && !done_pred()) {
      if (g_signal_now() && !stopping) {
        // Ask every participant to stop after its frames in flight; what it
        // still delivers is recorded.
        stopping = true;
        rec.event("warn", "run_interrupted", fmt::format("{} received: stopping the participants", signal_name(g_signal_now())));
        for (size_t i = first_participant; i < agents.size(); ++i)
          if (!finished[i]) (void)agents[i]->send("STOP", {});
        stop_deadline = Clock::now() + kStopGrace;
      }
      if (stopping && Clock::now() > stop_deadline) break;
      if (detached_watch)
        if (auto why = detached_watch->gone(); !why.empty()) {
          fail(why);
          break;
        }
      if (timeout_ms > 0 && Clock::now() > deadline) {
        fail("timed out waiting for the agents");
        break;
      }
      auto e = pump.pop(100);
      if (e) handle(*e);
      rec.maybe_flush();
      // A database that cannot take the rows ends the run: nothing more could be recorded.
      if (!rec.write_error().empty()) {
        fail("database: " + rec.write_error());
        break;
      }
      if (!stopping) schedule(first_participant);
      for (size_t i = 0; i < agents.size(); ++i)
        if (!finished[i])
          if (auto why = liveness.newly_lost(i, agents[i]->role(), agents[i]->device().name))
            if (!spare(i, *why)) fail(*why);
    }
    // Lines already read are still recorded.
    while (auto e = pump.pop(0)) handle(*e);
  };

  Status st;
  if (detached) {
    server_endpoint = detached->endpoint;
    rec.event("info", "agent_reused",
              fmt::format("SERVER {}: detached agent pid {} at {}", server.name, detached->pid, detached->endpoint),
              server.name);
    fmt::print("using the detached SERVER agent on {} (pid {}, {})\n", server.name, detached->pid, detached->endpoint);
    detached_watch = std::make_unique<DetachedWatch>(*detached, *devices, ro.trust_new_hosts,
                                                     detached->transport == "local" ? 500 : 2000);
    // Its READY (hardware identity) came when it started: recorded for this run too.
    ControlMsg ready;
    ready.kind = "READY";
    ready.fields = detached->ready;
    if (auto st = rec.on_message(server.name, "SERVER", ready); !st) fail(st.error().message);
  } else if (!ro.in_process) {
    if (ro.progress)
      draw_phase(fmt::format("starting the SERVER agent on {} (it loads the model{} first)", server.name,
                             cfg->record.layers ? " and profiles it" : ""),
                 tty);
    st = launch(server, "SERVER", {"--bind", fmt::format("tcp://{}:{}", server_bind_host(server), server.connection().port)});
    if (!st) fail("SERVER " + server.name + ": " + st.error().str());
  }
  if (failure.empty() && !ro.in_process && !detached) {
    pump.start();
    liveness.launched(0);
    wait_until([&] { return !server_endpoint.empty() || g_signal_now(); }, 600000, agents.size());
  }
  // Then every PARTICIPANT.
  const size_t first_participant = agents.size();
  if (failure.empty() && !g_signal_now()) {
    // Every participant is launched at once, each on its own thread (SSH
    // connect, deploy, staging and start overlap); they are kept in device order.
    const auto parts = devices->participants();
    std::vector<std::vector<std::string>> part_args;
    for (const DeviceConfig* p : parts) {
      std::vector<std::string> args;
      if (ro.probe_only) args.push_back("--probe-only");
      if (ro.in_process) args.push_back("--in-process");
      else
        args.insert(args.end(), {"--connect", server.transport == Transport::local && server.netns.empty()
                                                  ? server_endpoint
                                                  : reachable_endpoint(server_endpoint, server.connection().host)});
      if (shaper && !ro.in_process) {
        const auto [delay, jitter] = shaper->agent_delay(p->name);
        if (delay > 0 || jitter > 0)
          args.insert(args.end(), {"--link-delay-ms", fmt::format("{}", delay), "--link-jitter-ms",
                                   fmt::format("{}", jitter)});
      }
      part_args.push_back(std::move(args));
    }
    if (ro.progress)
      draw_phase(fmt::format("starting {} PARTICIPANT agent{} (model{}{})", parts.size(), parts.size() == 1 ? "" : "s",
                             cfg->record.layers ? ", profiles" : "", cfg->probe.enabled ? ", link probe" : ""),
                 tty);
    auto launched = launch_concurrently(parts.size(), [&](size_t i) {
      return start(*parts[i], "PARTICIPANT", part_args[i]);
    });
    for (size_t i = 0; i < parts.size(); ++i) {
      auto& l = launched[i];
      if (!l.conn) {
        fail("PARTICIPANT " + parts[i]->name + ": " + l.conn.error().str());
        continue;
      }
      adopt(std::move(*l.conn), fmt::format("; launch issued at +{:.3f} ms, started at +{:.3f} ms (tracrctl's steady "
                                            "clock, from the first participant launch)",
                                            l.issued_ms, l.started_ms));
    }
  }
  if (failure.empty()) {
    pump.start();
    for (size_t i = 0; i < agents.size(); ++i) liveness.launched(i);
    wait_until(
        [&] {
          for (size_t i = first_participant; i < agents.size(); ++i)
            if (!finished[i]) return false;
          return true;
        },
        0, first_participant);
    if (ro.progress && tty && frames_done < frames_total) fmt::print(stderr, "\n");
  }
  // Stop every agent (they exit when stdin closes) and record the outcome.
  // A lost agent's connection may be dead (a partition): stopping it is
  // bounded (AgentProc::stop), and it stops by itself on our silence.
  for (size_t i = 0; i < agents.size(); ++i) {
    finished[i] = true;
    agents[i]->stop(liveness.declared_lost(i) ? 1000 : 3000);
  }
  pump.stop();
  while (auto e = pump.pop(0)) handle(*e);
  rec.flush();
  if (auto wo = rec.write_outputs(); !wo) failure += (failure.empty() ? "" : "; ") + ("record.outputs: " + wo.error().str());
  if (!rec.write_error().empty()) {
    std::string cause = "database: " + rec.write_error();
    if (rec.unwritten()) {
      // Received rows the database did not take are saved elsewhere, not dropped.
      const char* tmp = std::getenv("TMPDIR");
      const std::string path = fmt::format("{}/tracr-run{}-unwritten-{}.jsonl", tmp && *tmp ? tmp : "/tmp", *run_id, getpid());
      auto saved = rec.save_unwritten(path);
      cause += saved ? fmt::format(" ({} received rows the database did not take are saved in {})", rec.unwritten(), *saved)
                     : fmt::format(" ({} received rows could not be written anywhere: {})", rec.unwritten(), saved.error().str());
    }
    if (failure.empty() || failure == "database: " + rec.write_error()) failure = cause;
    else failure += "; " + cause;
  }
  const int sig = g_signal_now();
  const SessionOutcome end = session_outcome(std::move(failure), sig);
  failure = end.failure;
  const RunStatus status = end.status;
  if (auto fs2 = row.finish(end); !fs2) {
    keep_cause(cfg->output, *run_id, failure.empty() ? fs2.error().str() : failure + "; " + fs2.error().str());
  } else {
    std::error_code ec;
    fs::remove(failure_note_path(cfg->output, *run_id), ec);
  }
  if (!failure.empty()) {
    fmt::print(stderr, "tracrctl run: run {} {}: {}\n", *run_id, run_status_name(status), failure);
    fmt::print(stderr, "tracrctl run: {} frames received, rows written are kept in {} (tracrctl results show {})\n",
               rec.frames_received(), cfg->output, *run_id);
    return sig ? signal_exit_code(sig) : 1;
  }
  if (ro.probe_only) {
    fmt::print("\nrun {} completed: link probes read back from {}\n", *run_id, cfg->output);
    if (auto pst = print_probe_table(*db, *run_id); !pst) {
      fmt::print(stderr, "tracrctl link probe: {}\n", user_text(pst.error()));
      return 1;
    }
    return 0;
  }
  for (const auto& lp : lost_participants)
    fmt::print(stderr, "tracrctl run: warning: run {} went on without participant {}; its frames until then are "
               "recorded (events: participant_lost)\n", *run_id, lp);
  fmt::print("\nrun {} completed{}: per-split table read back from {}\n", *run_id,
             lost_participants.empty() ? "" : fmt::format(" without {} lost participant(s)", lost_participants.size()),
             cfg->output);
  if (auto pst = print_split_table(*db, *run_id, stdout, ro.wide); !pst) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(pst.error()));
    return 1;
  }
  if (auto est = print_energy_table(*db, *run_id); !est) {
    fmt::print(stderr, "tracrctl run: {}\n", user_text(est.error()));
    return 1;
  }
  // After a sweep with layer profiles and a probe: the planner's prediction
  // for this run, validated against what was just measured, and stored.
  if (cfg->record.layers && cfg->probe.enabled && !ro.in_process && (cfg->split.all || cfg->split.points.size() > 1)) {
    auto plan = plan_from_run(*db, *run_id, PlanOptions{});
    if (plan) {
      validate_against(*db, *plan);
      auto id = store_plan(*db, *plan);
      fmt::print("\n{}{}", format_plan(*plan), id ? fmt::format("stored as plan {}\n", *id) : "");
      if (!id) fmt::print(stderr, "tracrctl run: storing the plan: {}\n", user_text(id.error()));
    } else {
      fmt::print("\n(no plan: {})\n", plan.error().message);
    }
  }
  return 0;
}

}  // namespace tracr::controller
