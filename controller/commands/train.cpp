// `tracrctl train EXPERIMENT.yaml`: split training across devices. The
// controller starts a TRAIN_WORKER agent on every device that holds middle
// segments and a TRAIN_OWNER on every data owner, hands each owner the
// workers' endpoints, passes the turn between owners, and records every
// step, epoch, checkpoint and the exported model in SQLite.
#include "controller/commands/train.hpp"
#include "core/log.hpp"
#include "core/user_error.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "wire/identity.hpp"
#include "fleet/event_pump.hpp"
#include "fleet/launcher.hpp"
#include "controller/session/model_check.hpp"
#include "controller/session/liveness.hpp"
#include "controller/session/run_row.hpp"
#include "controller/session/agent_set.hpp"
#include "controller/commands/train_exits.hpp"
#include "controller/session/prelude.hpp"
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
using wire::ControlMsg;
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
  auto runs = db.rows("train_runs", r.run);
  if (!runs) return runs.error();
  static const size_t kTag = column_of("train_runs", "tag"), kOwners = column_of("train_runs", "owners"),
                      kCuts = column_of("train_runs", "cuts");
  if (runs->empty() || !(*runs)[0][kTag])
    return make_error(Errc::not_found, fmt::format("{}: run {} is not a training run", db.path(), r.run));
  const auto& row = (*runs)[0];
  r.tag = *row[kTag];
  if (row[kOwners] && *row[kOwners] != "1")
    return make_error(Errc::invalid_argument, fmt::format("run {} had {} data owners: runs with several owners are "
                                                          "not resumable (the shared segments move on between turns)",
                                                          r.run, *row[kOwners]));
  if (row[kCuts] && *row[kCuts] != join_ints(cfg.train.cuts))
    return make_error(Errc::config, fmt::format("run {} was cut at [{}], this experiment at [{}]: its checkpoints "
                                                "hold other segments",
                                                r.run, *row[kCuts], join_ints(cfg.train.cuts)));
  // Ordered by owner, step.
  auto cps = db.rows("train_checkpoints", r.run);
  if (!cps) return cps.error();
  static const size_t kCpOwner = column_of("train_checkpoints", "owner"),
                      kCpStep = column_of("train_checkpoints", "step");
  std::optional<int64_t> step;
  for (const auto& c : *cps)
    if (c[kCpOwner] == "0" && c[kCpStep]) step = std::max<int64_t>(step.value_or(0), std::stoll(*c[kCpStep]));
  if (!step) return make_error(Errc::not_found, fmt::format("run {} recorded no checkpoint every device confirmed", r.run));
  r.step = *step;
  return r;
}

}  // namespace

namespace {

std::optional<std::string> txt(const std::string& s) { return s; }
template <typename T>
std::optional<std::string> num(T v) {
  return fmt::format("{}", v);
}

const std::vector<std::string> kSegCols = {"run_id", "segment", "first_layer", "end_layer", "device", "params"};
const std::vector<std::string> kStepCols = {"owner",   "step",     "epoch",      "batch",  "loss",
                                            "correct", "step_ns",  "fwd_ns",     "bwd_ns", "remote_ns",
                                            "srv_ns",  "up_bytes", "down_bytes", "up_raw", "down_raw"};
const std::vector<std::string> kEpochCols = {"owner",     "epoch",    "step",      "train_loss", "train_acc",
                                             "test_loss", "test_acc", "test_top5", "test_n",     "test_source",
                                             "epoch_ns",  "eval_ns",  "up_bytes",  "down_bytes"};

std::vector<std::string> with_run(std::vector<std::string> cols) {
  cols.insert(cols.begin(), "run_id");
  return cols;
}

// One training run: the prelude, the layout and its rows, the workers (their
// endpoints go to the owners), the data owners taking turns on shared
// segments, every step, epoch and checkpoint recorded, the outcome.
class TrainSession {
 public:
  TrainSession(const TrainOptions& ro, ExperimentConfig& cfg) : ro_(ro), cfg_(cfg) {}
  Status run();

 private:
  Status prepare();
  Status open_row();
  void insert_layout_rows();
  Status connect();
  Status launch(const DeviceConfig& dev, wire::AgentRole role, std::vector<std::string> args);
  void start_workers();
  void start_owners();
  void on_line(size_t i, const ControlMsg& m);
  void on_ready(const ControlMsg& m);
  void on_epoch(const ControlMsg& m);
  void on_export(const ControlMsg& m, const std::string& device);
  void draw_step(const ControlMsg& m);
  void flush_steps();
  std::string save_unwritten_steps() const;
  void give_turn();
  std::vector<std::optional<std::string>> row_of(const ControlMsg& m, const std::vector<std::string>& cols) const;
  Status finish();

  const TrainOptions& ro_;
  ExperimentConfig& cfg_;
  SessionPrelude pre_;
  TrainLayout layout_;
  std::optional<ResultsDb> db_;
  std::optional<ResumePoint> resume_;
  std::string stamp_, tag_;
  std::vector<uint8_t> secret_;
  RunInfo info_;
  int64_t run_id_ = 0;
  std::unique_ptr<RunRowGuard> row_;
  std::unique_ptr<SessionLaunch> launch_;
  std::unique_ptr<Recorder> rec_;
  std::unique_ptr<AgentSet> agents_;
  // Segment rows; the last one's end and every segment's parameter count
  // come with the agents' READY lines.
  std::vector<std::vector<std::optional<std::string>>> seg_rows_;
  std::map<size_t, std::string> endpoints_;  // worker agents' data endpoints
  std::vector<size_t> owner_agents_;
  size_t turn_ = 0;  // index into owner_agents_ whose turn it is
  std::map<size_t, bool> waiting_;
  std::vector<std::vector<std::optional<std::string>>> steps_, unwritten_steps_;
  Clock::time_point last_flush_ = Clock::now();
  const Clock::time_point t0_ = Clock::now();
  int64_t steps_seen_ = 0;
  bool tty_ = false;
  // Progress per owner: its first step in this run and when it came; the
  // tenth of its steps last reported.
  std::map<std::string, std::pair<int64_t, Clock::time_point>> step_pace_;
  std::map<std::string, int64_t> step_tenth_;
};

// Checks, layout, database, resume point, names: nothing started yet.
Status TrainSession::prepare() {
  // Segments go to devices by name: no SERVER/PARTICIPANT rule.
  TRACR_TRY(check_session(cfg_, RoleCheck::none, ro_.agent_path, pre_));
  auto layout = plan_training(cfg_, pre_.devices);
  if (!layout) {
    return core::bad_input(user_text(layout.error()));
  }
  layout_ = std::move(*layout);
  auto db = ResultsDb::open(cfg_.output);
  if (!db) {
    return core::command_failed(user_text(db.error()));
  }
  db_.emplace(std::move(*db));
  if (!ro_.resume.empty()) {
    auto r = find_resume_point(*db_, ro_.resume, cfg_);
    if (!r) {
      return core::bad_input("--resume: " + user_text(r.error()));
    }
    resume_ = *r;
  }
  auto stamp = new_run_stamp();
  if (!stamp) {
    return core::command_failed(user_text(stamp.error()));
  }
  stamp_ = *stamp;
  tag_ = resume_ ? resume_->tag : stamp_;
  return draw_session_secret(secret_);
}

// The run row, the training rows and the line that announces the run.
Status TrainSession::open_row() {
  info_ = session_run_info(cfg_, pre_, cfg_.name + " (train)");
  TRACR_TRY(begin_session_row(*db_, info_, run_id_));
  row_ = std::make_unique<RunRowGuard>(*db_, run_id_, "train");
  rec_ = std::make_unique<Recorder>(*db_, run_id_, false, false);
  agents_ = std::make_unique<AgentSet>(*rec_, cfg_.heartbeat_timeout_ms, "data owners");
  insert_layout_rows();
  std::string layout_text;
  for (size_t i = 0; i < layout_.segment_device.size(); ++i)
    layout_text += fmt::format("{}{}", i ? " | " : "", layout_.segment_device[i]);
  fmt::print("run {} '{}': train {} cut at [{}] ({}), {} lr {}, batch {}, {} epoch(s), codec {}, cipher {}{}\n", run_id_,
             info_.name, cfg_.model, join_ints(cfg_.train.cuts), layout_text, cfg_.train.optimizer, cfg_.train.lr,
             cfg_.train.batch_size, cfg_.train.epochs, cfg_.compression, info_.cipher,
             resume_ ? fmt::format(", resuming run {} at step {}", resume_->run, resume_->step) : "");
  std::fflush(stdout);
  for (const auto& w : layout_.warnings) {
    TRACR_LOG(warn, "tracrctl train: warning: {}", w);
    rec_->event("warn", "train_layout", w);
  }
  return {};
}

void TrainSession::insert_layout_rows() {
  if (auto st = db_->insert_rows("train_runs",
                                 {"run_id", "tag", "resumed_from", "resume_step", "cuts", "optimizer", "lr", "batch_size",
                                  "epochs", "owners"},
                                 {{num(run_id_), txt(tag_), resume_ ? num(resume_->run) : std::nullopt,
                                   resume_ ? num(resume_->step) : std::nullopt, txt(join_ints(cfg_.train.cuts)),
                                   txt(cfg_.train.optimizer), num(cfg_.train.lr), num(cfg_.train.batch_size),
                                   num(cfg_.train.epochs), num(layout_.owners.size())}});
      !st)
    agents_->fail("database: " + user_text(st.error()));
  int64_t a = 0;
  for (size_t i = 0; i < layout_.segment_device.size(); ++i) {
    const int64_t b = i < cfg_.train.cuts.size() ? cfg_.train.cuts[i] : -1;
    seg_rows_.push_back(
        {num(run_id_), num(i), num(a), b >= 0 ? num(b) : std::nullopt, txt(layout_.segment_device[i]), std::nullopt});
    a = b;
  }
  if (auto st = db_->insert_rows("train_segments", kSegCols, seg_rows_); !st) agents_->fail("database: " + user_text(st.error()));
}

Status TrainSession::connect() {
  launch_ = std::make_unique<SessionLaunch>(cfg_, pre_, secret_, stamp_, run_id_, ro_.trust_new_hosts);
  tty_ = ro_.progress && isatty(2);
  agents_->on_line([this](size_t i, const ControlMsg& m) { on_line(i, m); });
  return {};
}

Status TrainSession::launch(const DeviceConfig& dev, wire::AgentRole role, std::vector<std::string> args) {
  args.insert(args.end(), {"--run-tag", tag_});
  if (resume_) args.insert(args.end(), {"--resume-step", std::to_string(resume_->step)});
  auto conn = launch_agent(launch_->spec(dev, role, std::move(args)));
  if (!conn) return std::move(conn.error());
  agents_->adopt(std::move(*conn));
  return {};
}

// Workers first, waited for until each serves: their endpoints go to the owners.
void TrainSession::start_workers() {
  for (const auto& [dev, segs] : layout_.workers) {
    std::string list;
    for (int s : segs) list += (list.empty() ? "" : ",") + std::to_string(s);
    auto st = launch(*dev, wire::AgentRole::train_worker,
                     {"--bind", fmt::format("tcp://{}:{}", server_bind_host(*dev), dev->connection().port), "--segments", list});
    if (!st) {
      agents_->fail("TRAIN_WORKER " + dev->name + ": " + user_text(st.error()));
      return;
    }
  }
  if (agents_->size() == 0) return;
  agents_->start_reading();
  agents_->wait_until([&] { return endpoints_.size() == agents_->size() || SignalCatcher::signal(); }, 600000);
}

void TrainSession::start_owners() {
  std::vector<std::string> worker_args;
  for (size_t w = 0; w < layout_.workers.size(); ++w) {
    const DeviceConfig* dev = layout_.workers[w].first;
    const std::string ep = dev->transport == Transport::local && dev->netns.empty()
                               ? endpoints_[w]
                               : reachable_endpoint(endpoints_[w], dev->connection().host);
    for (int s : layout_.workers[w].second) worker_args.insert(worker_args.end(), {"--worker", fmt::format("{}={}", s, ep)});
  }
  for (size_t k = 0; k < layout_.owners.size(); ++k) {
    std::vector<std::string> args = worker_args;
    args.insert(args.end(), {"--owner", fmt::format("{}/{}", k, layout_.owners.size())});
    const size_t idx = agents_->size();
    if (auto st = launch(*layout_.owners[k], wire::AgentRole::train_owner, args); !st) {
      agents_->fail("TRAIN_OWNER " + layout_.owners[k]->name + ": " + user_text(st.error()));
      return;
    }
    owner_agents_.push_back(idx);
  }
}

std::vector<std::optional<std::string>> TrainSession::row_of(const ControlMsg& m,
                                                            const std::vector<std::string>& cols) const {
  std::vector<std::optional<std::string>> row{num(run_id_)};
  for (const auto& c : cols) row.push_back(opt_field(m, c));
  return row;
}

void TrainSession::flush_steps() {
  if (steps_.empty()) return;
  last_flush_ = Clock::now();
  if (unwritten_steps_.empty()) {
    auto st = db_->insert_rows("train_steps", with_run(kStepCols), steps_);
    if (st) {
      steps_.clear();
      return;
    }
    agents_->fail("database: " + user_text(st.error()));
  }
  // Steps the database did not take are kept for a file, never dropped.
  unwritten_steps_.insert(unwritten_steps_.end(), steps_.begin(), steps_.end());
  steps_.clear();
}

// Whether a field's text is a JSON number as it stands.
bool is_number(const std::string& v) {
  static const std::regex number(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
  return std::regex_match(v, number);
}

// The received steps the database did not take, as JSON lines in $TMPDIR:
// what the failure says about them.
std::string TrainSession::save_unwritten_steps() const {
  const char* tmp = std::getenv("TMPDIR");
  const std::string path =
      fmt::format("{}/tracr-run{}-unwritten-steps-{}.jsonl", tmp && *tmp ? tmp : "/tmp", run_id_, getpid());
  std::ofstream out(path, std::ios::trunc);
  const auto cols = with_run(kStepCols);
  for (const auto& row : unwritten_steps_) {
    std::string o = "{\"table\":\"train_steps\"";
    for (size_t c = 0; c < cols.size() && c < row.size(); ++c)
      o += fmt::format(",\"{}\":{}", cols[c], !row[c] ? "null" : is_number(*row[c]) ? *row[c] : settings::json_quote(*row[c]));
    out << o << "}\n";
  }
  out.flush();
  return out ? fmt::format("{} received steps the database did not take are saved in {}", unwritten_steps_.size(), path)
             : fmt::format("{} received steps could not be written anywhere ({} failed)", unwritten_steps_.size(), path);
}

// The next owner still training gets the turn once it asks for it.
void TrainSession::give_turn() {
  if (owner_agents_.size() <= 1) return;
  for (size_t k = 0; k < owner_agents_.size(); ++k) {
    const size_t i = owner_agents_[(turn_ + k) % owner_agents_.size()];
    if (agents_->finished(i)) continue;
    if (!waiting_[i]) return;  // its turn: it will ask
    waiting_[i] = false;
    turn_ = (turn_ + k) % owner_agents_.size();
    if (auto st = (*agents_)[i].send("CMD", {{"op", "turn"}, {"id", "0"}}); !st) agents_->fail("turn: " + user_text(st.error()));
    return;
  }
}

// "segment=params,..." and the model's layer count complete the segment rows.
void TrainSession::on_ready(const ControlMsg& m) {
  const std::string sp = m.get_or("seg_params", "");
  for (size_t pos = 0; pos < sp.size();) {
    const size_t comma = std::min(sp.find(',', pos), sp.size());
    const std::string item = sp.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    const long seg = eq == std::string::npos ? -1 : std::strtol(item.substr(0, eq).c_str(), nullptr, 10);
    if (seg >= 0 && static_cast<size_t>(seg) < seg_rows_.size()) seg_rows_[seg][5] = item.substr(eq + 1);
    pos = comma + 1;
  }
  if (auto n = m.get_int("layers"); n && !seg_rows_.empty()) seg_rows_.back()[3] = std::to_string(*n);
  if (auto st = db_->insert_rows("train_segments", kSegCols, seg_rows_); !st) agents_->fail("database: " + user_text(st.error()));
}

void TrainSession::on_epoch(const ControlMsg& m) {
  flush_steps();
  if (auto st = db_->insert_rows("train_epochs", with_run(kEpochCols), {row_of(m, kEpochCols)}); !st)
    agents_->fail("database: " + user_text(st.error()));
  auto d = [&](const char* k) { return std::strtod(m.get_or(k, "nan").c_str(), nullptr); };
  if (tty_) fmt::print(stderr, "\n");
  fmt::print("owner {} epoch {} (step {}): train loss {:.4f} acc {:.4f} | test loss {:.4f} acc {:.4f} top-5 {:.4f} "
             "({} samples) | {:.1f} s, {:.1f} MB up, {:.1f} MB down\n",
             m.get_or("owner", "?"), m.get_or("epoch", "?"), m.get_or("step", "?"), d("train_loss"), d("train_acc"),
             d("test_loss"), d("test_acc"), d("test_top5"), m.get_or("test_n", "?"), d("epoch_ns") / 1e9,
             d("up_bytes") / 1e6, d("down_bytes") / 1e6);
  std::fflush(stdout);
}

void TrainSession::on_export(const ControlMsg& m, const std::string& device) {
  rec_->event("info", "model_exported",
              fmt::format("owner {}: {} ({} tensors, {} values) on {}", m.get_or("owner", "?"), m.get_or("path", "?"),
                          m.get_or("tensors", "?"), m.get_or("values", "?"), device),
              device);
  if (m.get_or("owner", "") != "0") return;
  Statement q(db_->handle(), "UPDATE train_runs SET export_path = ? WHERE run_id = ?");
  if (!q.prepared()) return;
  const std::string p = m.get_or("path", "");
  q.bind(1, std::string_view(p));
  q.bind(2, run_id_);
  (void)q.step();
}

// The progress of one owner's steps: on a terminal one line redrawn, else
// a line at every tenth of its steps; the time left is at the pace of the
// steps since its first one in this run (start-up and a resume excluded).
void TrainSession::draw_step(const ControlMsg& m) {
  const std::string owner = m.get_or("owner", "?");
  const auto step_field = m.get_int("step"), total_field = m.get_int("total");
  const int64_t step = step_field ? *step_field : 0, total = total_field ? *total_field : 0;
  const auto now = Clock::now();
  auto& [first_step, first_at] = step_pace_.try_emplace(owner, step, now).first->second;
  const double secs = std::chrono::duration<double>(now - first_at).count();
  const int64_t done = step - first_step;
  const std::string of = total > 0 ? fmt::format("/{}", total) : "";
  const std::string left = total > step && done > 0
                               ? fmt::format(", about {:.0f} s left", secs / static_cast<double>(done) *
                                                                           static_cast<double>(total - step))
                               : "";
  const double loss = std::strtod(m.get_or("loss", "nan").c_str(), nullptr);
  if (tty_) {
    fmt::print(stderr, "\r  owner {} epoch {} step {}{}: loss {:.4f}  ({:.0f} s{})   ", owner, m.get_or("epoch", "?"),
               step, of, loss, std::chrono::duration<double>(now - t0_).count(), left);
    return;
  }
  const int64_t tenth = total > 0 ? step * 10 / total : -1;
  auto last = step_tenth_.try_emplace(owner, -1).first;
  if (total <= 0 || tenth == last->second) return;
  last->second = tenth;
  fmt::print(stderr, "  progress: owner {} step {}{} ({}%), epoch {}, loss {:.4f}, {:.0f} s{}\n", owner, step, of,
             step * 100 / total, m.get_or("epoch", "?"), loss, std::chrono::duration<double>(now - t0_).count(), left);
}

// train's part of a control line: endpoints, steps, epochs, checkpoints,
// the exported model, traces and the owners' turns.
void TrainSession::on_line(size_t i, const ControlMsg& m) {
  AgentConn& a = (*agents_)[i];
  if (m.kind == "READY" && a.role() == wire::AgentRole::train_worker) endpoints_[i] = m.get_or("endpoint", "");
  if (m.kind == "READY") on_ready(m);
  if (m.kind == "STEP") {
    steps_.push_back(row_of(m, kStepCols));
    ++steps_seen_;
    if (Clock::now() - last_flush_ > std::chrono::seconds(1) || steps_.size() >= 256) flush_steps();
    if (ro_.progress) draw_step(m);
  } else if (m.kind == "EPOCH") {
    on_epoch(m);
  } else if (m.kind == "CHECKPOINT") {
    flush_steps();
    if (auto st = db_->insert_rows("train_checkpoints", {"run_id", "owner", "step", "epoch", "dir", "at"},
                                   {{num(run_id_), opt_field(m, "owner"), opt_field(m, "step"), opt_field(m, "epoch"),
                                     opt_field(m, "dir"), txt(utc_now_iso())}});
        !st)
      agents_->fail("database: " + user_text(st.error()));
  } else if (m.kind == "EXPORT") {
    on_export(m, a.device().name);
  } else if (m.kind == "TRACE") {
    rec_->event("debug", "frame_received",
                fmt::format("{} split {} op {} | meta {} | {}", m.get_or("type", "?"), m.get_or("split", "?"),
                            m.get_or("op", "?"), m.get_or("meta", ""), m.get_or("tensors", "")),
                a.device().name);
  } else if (m.kind == "TURN") {
    if (m.get_or("state", "") == "waiting") waiting_[i] = true;
    else turn_ = (turn_ + 1) % std::max<size_t>(1, owner_agents_.size());
    give_turn();
  } else if (m.kind == "DONE") {
    give_turn();  // an owner that is done passes its turn on
  }
}

Status TrainSession::run() {
  TRACR_TRY(prepare());
  TRACR_TRY(open_row());
  SignalCatcher signals;  // SIGINT, SIGTERM, SIGHUP: the owners stop after their step, rows are kept
  TRACR_TRY(connect());
  if (agents_->failure().empty()) start_workers();
  if (agents_->failure().empty() && !SignalCatcher::signal()) start_owners();
  if (agents_->failure().empty()) {
    agents_->start_reading();
    agents_->wait_until([&] { return agents_->drivers_done(); }, 0);
  }
  agents_->stop_all();
  flush_steps();
  return finish();
}

Status TrainSession::finish() {
  std::string failure = agents_->take_failure();
  if (!unwritten_steps_.empty()) failure += (failure.empty() ? "" : "; ") + save_unwritten_steps();
  const SessionOutcome end = finish_session(*rec_, *row_, std::move(failure), cfg_.output, run_id_, "train");
  if (!end.failure.empty()) {
    // The top level exits 128+N when signal N ended it (SignalCatcher::signal()).
    TRACR_LOG(error, "tracrctl train: run {} {}: {}", run_id_, run_status_name(end.status), end.failure);
    return core::command_failed(fmt::format(
        "{} steps received, rows written are kept in {} (tracrctl results show {}); resume with --resume {}",
        steps_seen_, cfg_.output, run_id_, run_id_));
  }
  fmt::print("\nrun {} completed: {} steps\n", run_id_, steps_seen_);
  if (auto st = print_train_table(*db_, run_id_); !st) {
    return core::command_failed(user_text(st.error()));
  }
  return {};
}

}  // namespace

Status cmd_train(const TrainOptions& ro) {
  auto loaded = load_experiment(ro.experiment, ro.sets);
  if (!loaded) {
    return core::bad_input(user_text(loaded.error()));
  }
  ExperimentConfig cfg = *loaded;
  if (!ro.db.empty()) cfg.output = ro.db;
  if (ro.show_config) {
    std::fputs(format_settings(cfg).c_str(), stdout);
    return {};
  }
  if (!cfg.model_list.empty()) {
    return core::bad_input(
        fmt::format("model: {} models given; a list repeats `tracrctl run` once per model, training takes one",
                    cfg.model_list.size()));
  }
  if (!cfg.compression_list.empty()) {
    return core::bad_input(
        fmt::format("compression: {} codecs given; a list repeats `tracrctl run` once per codec, training takes one",
                    cfg.compression_list.size()));
  }
  if (!cfg.input_size_list.empty()) {
    return core::bad_input(
        fmt::format("input_size: {} sizes given; a list repeats `tracrctl run` once per size, training takes one",
                    cfg.input_size_list.size()));
  }
  // Early exits without split training: their linear heads, on this machine.
  if (!cfg.exits.empty() && cfg.train.cuts.empty()) return train_exit_heads(cfg);
  TrainSession session(ro, cfg);
  return session.run();
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
  auto step_col = [](const char* c) { return column_of("train_steps", c); };
  static const size_t kOwner = step_col("owner"), kStepNs = step_col("step_ns"), kUp = step_col("up_bytes"),
                      kDown = step_col("down_bytes");
  for (const auto& r : *steps) {
    const std::string owner = r[kOwner].value_or("?");
    if (r[kStepNs]) step_ms[owner].push_back(std::stod(*r[kStepNs]) / 1e6);
    if (r[kUp]) bytes[owner].first += std::stod(*r[kUp]);
    if (r[kDown]) bytes[owner].second += std::stod(*r[kDown]);
  }
  fmt::print("{:>5} {:>5} {:>7} {:>10} {:>9} {:>9} {:>8} {:>8} {:>9}\n", "owner", "epoch", "steps", "train_loss",
             "train_acc", "test_loss", "test_acc", "top5", "epoch_s");
  auto epoch_col = [](const char* c) { return column_of("train_epochs", c); };
  static const size_t kEpOwner = epoch_col("owner"), kEpoch = epoch_col("epoch"), kEpStep = epoch_col("step"),
                      kEpochNs = epoch_col("epoch_ns");
  for (const auto& r : *epochs) {
    auto f = [&](const char* column) {
      const auto& v = r[epoch_col(column)];
      return v ? fmt::format("{:.4f}", std::stod(*v)) : std::string("-");
    };
    fmt::print("{:>5} {:>5} {:>7} {:>10} {:>9} {:>9} {:>8} {:>8} {:>9}\n", r[kEpOwner].value_or("?"),
               r[kEpoch].value_or("?"), r[kEpStep].value_or("?"), f("train_loss"), f("train_acc"), f("test_loss"),
               f("test_acc"), f("test_top5"), r[kEpochNs] ? fmt::format("{:.1f}", std::stod(*r[kEpochNs]) / 1e9) : "-");
  }
  for (auto& [owner, v] : step_ms) {
    std::sort(v.begin(), v.end());
    const double n = static_cast<double>(v.size());
    fmt::print("owner {}: {} steps, median step {:.2f} ms, per step {:.1f} kB up and {:.1f} kB down on the wire\n", owner,
               v.size(), v[v.size() / 2], bytes[owner].first / n / 1e3, bytes[owner].second / n / 1e3);
  }
  const auto& exported = runs->front()[column_of("train_runs", "export_path")];
  if (exported) fmt::print("trained model: {}\n", *exported);
  return {};
}

}  // namespace tracr::controller
