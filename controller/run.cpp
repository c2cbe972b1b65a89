#include "controller/run.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "agent/control.hpp"
#include "controller/config.hpp"
#include "controller/deploy.hpp"
#include "controller/process.hpp"
#include "controller/results.hpp"
#include "controller/results_cli.hpp"
#include "controller/ssh.hpp"
#include "protocol/crypto.hpp"
#include "protocol/header.hpp"

namespace tracr::controller {

using agent::ControlCodec;
using agent::ControlDir;
using agent::ControlMsg;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

// One agent process, local or remote: its stdin/stdout are the control channel.
class AgentProc {
 public:
  virtual ~AgentProc() = default;
  virtual Status write(const std::string& s) = 0;
  virtual Result<std::string> read_line(int timeout_ms) = 0;
  virtual int stop(int grace_ms) = 0;
  virtual std::string log_tail() = 0;
};

class LocalProc : public AgentProc {
 public:
  LocalProc(ChildProcess p, std::string log) : p_(std::move(p)), log_(std::move(log)) {}
  Status write(const std::string& s) override { return p_.write_stdin(s); }
  Result<std::string> read_line(int t) override { return p_.read_line(t); }
  int stop(int grace_ms) override { return p_.stop(grace_ms); }
  std::string log_tail() override {
    std::FILE* f = std::fopen(log_.c_str(), "r");
    if (!f) return "";
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
  }

 private:
  ChildProcess p_;
  std::string log_;
};

class SshProc : public AgentProc {
 public:
  SshProc(std::unique_ptr<SshSession> s, std::unique_ptr<RemoteProcess> p, std::string log)
      : s_(std::move(s)), p_(std::move(p)), log_(std::move(log)) {}
  Status write(const std::string& d) override { return p_->write_stdin(d); }
  Result<std::string> read_line(int t) override { return p_->read_line(t); }
  int stop(int grace_ms) override {
    auto r = p_->stop(grace_ms);
    return r ? *r : -1;
  }
  std::string log_tail() override {
    auto t = s_->read_file_tail(log_, 4000);
    return t ? *t : p_->stderr_tail();
  }

 private:
  std::unique_ptr<SshSession> s_;
  std::unique_ptr<RemoteProcess> p_;
  std::string log_;
};

struct Launched {
  const DeviceConfig* dev = nullptr;
  std::unique_ptr<AgentProc> proc;
  std::unique_ptr<ControlCodec> ctl;
  std::string role;
};

Result<std::unique_ptr<AgentProc>> start_local(const std::string& agent_path, const std::vector<std::string>& args,
                                               const std::string& log_path, const std::string& netns) {
  std::vector<std::string> argv;
  if (!netns.empty()) argv = {"/usr/sbin/ip", "netns", "exec", netns};  // a namespaced test host
  argv.push_back(agent_path);
  argv.insert(argv.end(), args.begin(), args.end());
  // Local agents share this machine's cores: OpenMP threads that spin while
  // idle would steal them from the other agent and distort every timing.
  auto p = ChildProcess::spawn(argv, log_path, {"OMP_WAIT_POLICY=PASSIVE"});
  if (!p) return std::move(p.error());
  return std::unique_ptr<AgentProc>(new LocalProc(std::move(*p), log_path));
}

Result<std::unique_ptr<AgentProc>> start_ssh(const DeviceConfig& dev, const std::string& agent_path,
                                             const std::vector<std::string>& args, const RunOptions& ro,
                                             const std::string& devices_file, const std::string& log_name) {
  const SshTarget t = device_ssh_target(dev, devices_file, ro.trust_new_hosts);
  auto s = SshSession::connect(t);
  if (!s) {
    std::string hint;
    if (s.error().code == Errc::host_key_unknown)
      hint = " (check the key, then pass --trust-new-hosts to record it in " + t.known_hosts_path + ")";
    return make_error(s.error().code, "device " + dev.name + ": " + s.error().message + hint);
  }
  auto d = deploy_agent(**s, agent_path, dev.work_dir);
  if (!d) return make_error(d.error().code, "device " + dev.name + ": deploy: " + d.error().message);
  // The agent's stderr goes to a log beside it (tracrctl agents logs).
  const std::string log = d->remote_path.substr(0, d->remote_path.rfind('/') + 1) + log_name;
  std::string cmd = shell_quote(d->remote_path);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>> " + shell_quote(log);
  auto p = (*s)->start(cmd);
  if (!p) return make_error(p.error().code, "device " + dev.name + ": start agent: " + p.error().message);
  return std::unique_ptr<AgentProc>(new SshProc(std::move(*s), std::move(*p), log));
}

// Reads control lines of every agent on its own thread into one queue.
struct Event {
  size_t agent = 0;
  Result<ControlMsg> msg = make_error(Errc::internal, "");
  bool closed = false;
};

class EventPump {
 public:
  EventPump(std::vector<Launched>& agents) : agents_(agents) {}
  ~EventPump() { stop(); }
  void start() {
    for (size_t i = 0; i < agents_.size(); ++i)
      threads_.emplace_back([this, i] {
        while (!stop_) {
          auto line = agents_[i].proc->read_line(300);
          if (!line) {
            if (line.error().code == Errc::timeout) continue;
            push(Event{i, std::move(line.error()), true});
            return;
          }
          push(Event{i, agents_[i].ctl->decode(*line), false});
        }
      });
  }
  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }
  std::optional<Event> pop(int timeout_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !q_.empty(); })) return std::nullopt;
    Event e = std::move(q_.front());
    q_.pop_front();
    return e;
  }

 private:
  void push(Event e) {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(e));
    cv_.notify_one();
  }
  std::vector<Launched>& agents_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> q_;
};

std::vector<std::string> model_args(const ExperimentConfig& cfg);

// What a SERVER agent must have been started with to serve this experiment.
std::string server_identity(const ExperimentConfig& cfg) {
  ExperimentConfig c = cfg;
  c.record.layers = false;
  std::string id;
  for (const auto& a : model_args(c)) id += a + "\x1f";
  return id;
}

std::vector<std::string> model_args(const ExperimentConfig& cfg) {
  std::vector<std::string> a{"--model", cfg.model, "--seed", std::to_string(cfg.seed)};
  if (!cfg.weights.empty()) a.insert(a.end(), {"--weights", fs::absolute(cfg.weights).string()});
  if (!cfg.input_size.empty())
    a.insert(a.end(), {"--input-shape", fmt::format("{},{},{}", cfg.input_size[0], cfg.input_size[1], cfg.input_size[2])});
  if (!cfg.encryption) a.push_back("--no-encrypt");
  if (cfg.key_exchange == "none") a.push_back("--no-x25519");
  if (cfg.record.layers)
    a.insert(a.end(), {"--profile-layers", std::to_string(std::max(3, cfg.repetitions)), "--profile-batch",
                       std::to_string(cfg.batch_size)});
  return a;
}

std::vector<std::string> participant_args(const ExperimentConfig& cfg) {
  std::vector<std::string> a;
  const char* kind = cfg.dataset.kind == DatasetKind::fashion_mnist ? "fashion-mnist"
                     : cfg.dataset.kind == DatasetKind::imagefolder ? "imagefolder"
                                                                    : "synthetic";
  a.insert(a.end(), {"--dataset", kind});
  if (!cfg.dataset.path.empty()) a.insert(a.end(), {"--dataset-path", fs::absolute(cfg.dataset.path).string()});
  if (cfg.dataset.kind == DatasetKind::fashion_mnist) a.insert(a.end(), {"--dataset-split", cfg.dataset.split});
  if (!cfg.dataset.class_names_file.empty())
    a.insert(a.end(), {"--class-names", fs::absolute(cfg.dataset.class_names_file).string()});
  int64_t max_samples = cfg.dataset.max_samples;
  if (cfg.dataset.kind == DatasetKind::synthetic && max_samples == 0) max_samples = 16;
  a.insert(a.end(), {"--max-samples", std::to_string(max_samples), "--batch", std::to_string(cfg.batch_size),
                     "--warmup", std::to_string(cfg.warmup), "--reps", std::to_string(cfg.repetitions),
                     "--codec", cfg.compression, "--chunk", std::to_string(cfg.chunk_bytes), "--inflight",
                     std::to_string(cfg.inflight)});
  std::string splits = "all";
  if (!cfg.split.all) {
    splits.clear();
    for (size_t i = 0; i < cfg.split.points.size(); ++i) splits += (i ? "," : "") + std::to_string(cfg.split.points[i]);
  }
  a.insert(a.end(), {"--splits", splits});
  return a;
}

// "tcp://0.0.0.0:PORT" as seen from a participant that reaches the server at `host`.
std::string reachable_endpoint(const std::string& bound, const std::string& host) {
  auto colon = bound.rfind(':');
  if (colon == std::string::npos) return bound;
  return "tcp://" + host + bound.substr(colon);
}

void draw_progress(int64_t done, int64_t total, int split, Clock::time_point t0, bool tty) {
  static int64_t last_pct = -1;
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (total <= 0) return;
  const int64_t pct = done * 100 / total;
  if (tty) {
    const int width = 30;
    const int fill = static_cast<int>(width * done / total);
    fmt::print(stderr, "\r  [{}{}] {:>3}%  {}/{} frames  split {:<3} {:.0f}s ", std::string(fill, '#'),
               std::string(width - fill, '.'), pct, done, total, split, secs);
    if (done == total) fmt::print(stderr, "\n");
  } else if (pct / 10 != last_pct / 10 || done == total) {
    fmt::print(stderr, "  progress: {}/{} frames ({}%), split {}, {:.0f}s\n", done, total, pct, split, secs);
  }
  last_pct = pct;
}

}  // namespace

std::string detached_state_path(const std::string& output_db, const std::string& device) {
  return (fs::path(output_db).parent_path() / "agents" / (device + ".state")).string();
}

Result<DetachedServer> read_detached(const std::string& path) {
  std::ifstream f(path);
  if (!f) return make_error(Errc::not_found, "no detached agent state at " + path);
  DetachedServer d;
  std::string line;
  while (std::getline(f, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto k = line.substr(0, eq);
    auto v = agent::pct_decode(line.substr(eq + 1));
    if (!v) return make_error(Errc::config, path + ": bad value for " + k);
    if (k == "device") d.device = *v;
    else if (k == "transport") d.transport = *v;
    else if (k == "endpoint") d.endpoint = *v;
    else if (k == "secret") d.secret_hex = *v;
    else if (k == "identity") d.identity = *v;
    else if (k == "log") d.log = *v;
    else if (k == "pid") d.pid = std::atol(v->c_str());
  }
  if (d.endpoint.empty() || d.secret_hex.empty() || d.pid <= 0)
    return make_error(Errc::config, path + ": incomplete detached agent state");
  return d;
}

Status write_detached(const std::string& path, const DetachedServer& d) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  // The state holds the session secret: owner-only, like a private key.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return make_error(Errc::io, "cannot write " + tmp);
    fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write, ec);
    f << "device=" << agent::pct_encode(d.device) << "\ntransport=" << agent::pct_encode(d.transport)
      << "\nendpoint=" << agent::pct_encode(d.endpoint) << "\nsecret=" << d.secret_hex
      << "\nidentity=" << agent::pct_encode(d.identity) << "\nlog=" << agent::pct_encode(d.log)
      << "\npid=" << d.pid << "\n";
  }
  fs::rename(tmp, path, ec);
  if (ec) return make_error(Errc::io, "cannot write " + path + ": " + ec.message());
  return {};
}

SshTarget device_ssh_target(const DeviceConfig& dev, const std::string& devices_file, bool trust_new_hosts) {
  const auto& c = dev.connection();
  SshTarget t;
  t.host = c.host;
  t.port = c.ssh_port;
  t.user = c.user;
  t.key_path = c.pkey_path;
  t.known_hosts_path = (fs::path(devices_file).parent_path().parent_path() / "pkeys" / "known_hosts").string();
  if (const char* kh = std::getenv("TRACR_KNOWN_HOSTS")) t.known_hosts_path = kh;
  t.trust_on_first_use = trust_new_hosts;
  return t;
}

int run_experiment(const RunOptions& ro) {
  auto cfg = load_experiment(ro.experiment);
  if (!cfg) {
    fmt::print(stderr, "tracrctl run: {}\n", cfg.error().str());
    return 2;
  }
  if (!ro.db.empty()) cfg->output = ro.db;
  if (ro.show_config) {
    fmt::print("{}", format_settings(*cfg));
    return 0;
  }
  if (auto st = check_experiment_files(*cfg); !st) {
    fmt::print(stderr, "tracrctl run: {}\n", st.error().str());
    return 2;
  }
  auto devices = load_experiment_devices(*cfg);
  if (!devices) {
    fmt::print(stderr, "tracrctl run: {}\n", devices.error().str());
    return 2;
  }
  const std::string agent_path = ro.agent_path.empty() ? self_dir() + "/tracr-agent" : ro.agent_path;
  if (access(agent_path.c_str(), X_OK) != 0) {
    fmt::print(stderr, "tracrctl run: cannot find tracr-agent at {} (pass --agent PATH)\n", agent_path);
    return 2;
  }
  auto db = ResultsDb::open(cfg->output);
  if (!db) {
    fmt::print(stderr, "tracrctl run: {}\n", db.error().str());
    return 1;
  }
  RunInfo info;
  info.name = cfg->name;
  info.config_yaml = to_yaml(*cfg);
  info.tracr_version = "0.1.0";
  info.protocol_version = static_cast<int>(protocol::kVersion);
  info.model = cfg->model;
  info.codec = cfg->compression;
  info.cipher = cfg->encryption ? "aes-256-gcm" : "none";
  info.devices_json = devices->to_json();
  auto run_id = db->begin_run(info);
  if (!run_id) {
    fmt::print(stderr, "tracrctl run: {}\n", run_id.error().str());
    return 1;
  }
  // Whatever ends this function (an exception included), the run row is finished.
  bool finished_row = false;
  struct FinishGuard {
    std::function<void()> fn;
    ~FinishGuard() { fn(); }
  } finish_guard{[&] {
    if (!finished_row) (void)db->finish_run(*run_id, RunStatus::failed, "tracrctl run ended abnormally");
  }};
  fmt::print("run {} '{}': model {}, codec {}, cipher {}, devices {}{}\n", *run_id, cfg->name, cfg->model,
             cfg->compression, info.cipher, devices->source, ro.in_process ? " (in-process)" : "");
  std::fflush(stdout);  // before the progress lines on stderr

  // A SERVER agent started earlier with `tracrctl agents start` for this
  // model is reused (its session secret keys the whole run).
  const DeviceConfig& server = devices->server();
  std::optional<DetachedServer> detached;
  if (!ro.in_process) {
    auto d = read_detached(detached_state_path(cfg->output, server.name));
    if (d && d->identity == server_identity(*cfg)) {
      const bool alive = d->transport != "local" || ::kill(static_cast<pid_t>(d->pid), 0) == 0;
      if (alive) detached = *d;
    }
  }
  std::vector<uint8_t> secret(32);
  (void)protocol::random_bytes(secret.data(), secret.size());
  if (detached) {
    auto sb = protocol::from_hex(detached->secret_hex);
    if (sb) secret = *sb;
  }
  const std::string secret_line = protocol::to_hex(secret.data(), secret.size()) + "\n";
  const std::string log_dir = (fs::path(cfg->output).parent_path() / "logs").string();
  std::error_code ec;
  fs::create_directories(log_dir.empty() ? "." : log_dir, ec);

  std::vector<Launched> agents;
  std::string failure;
  auto fail = [&](const std::string& why) {
    if (failure.empty()) failure = why;
  };
  auto launch = [&](const DeviceConfig& dev, const std::string& role, std::vector<std::string> args) -> Status {
    args.insert(args.begin(), {"--role", role});
    Result<std::unique_ptr<AgentProc>> p = make_error(Errc::internal, "");
    if (dev.transport == Transport::local)
      p = start_local(agent_path, args, fmt::format("{}/run-{}-{}.log", log_dir.empty() ? "." : log_dir, *run_id, dev.name),
                      dev.netns);
    else
      p = start_ssh(dev, agent_path, args, ro, devices->source, fmt::format("run-{}-{}.log", *run_id, dev.name));
    if (!p) return std::move(p.error());
    TRACR_TRY((*p)->write(secret_line));
    Launched l;
    l.dev = &dev;
    l.proc = std::move(*p);
    l.ctl = std::make_unique<ControlCodec>(secret, ControlDir::agent_to_controller);
    l.role = role;
    agents.push_back(std::move(l));
    (void)db->add_event(*run_id, "info", "agent_started", fmt::format("{} {} ({})", role, dev.name, transport_name(dev.transport)));
    return {};
  };

  std::vector<FrameRecord> batch;
  std::vector<LayerProfileRecord> profiles;
  int64_t frames_total = 0, frames_done = 0;
  int current_split = 0;
  const bool tty = ro.progress && isatty(2);
  const auto t0 = Clock::now();
  auto flush = [&] {
    if (!batch.empty()) {
      if (auto st = db->add_frames(batch); !st) fail("database: " + st.error().str());
      batch.clear();
    }
    if (!profiles.empty()) {
      if (auto st = db->add_layer_profiles(profiles); !st) fail("database: " + st.error().str());
      profiles.clear();
    }
  };

  struct sigaction sa {}, old_sa{};
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, &old_sa);
  g_interrupted = false;

  // Bring up the SERVER (unless the participant runs tails in-process).
  std::string server_endpoint;
  std::vector<Launched>* all = &agents;
  std::unique_ptr<EventPump> pump;
  std::map<size_t, Clock::time_point> last_seen;
  std::map<size_t, bool> finished;

  auto handle = [&](const Event& e) {
    Launched& a = (*all)[e.agent];
    last_seen[e.agent] = Clock::now();
    if (e.closed) {
      if (!finished[e.agent] && !g_interrupted)
        fail(fmt::format("{} agent on {} exited unexpectedly ({}); log tail:\n{}", a.role, a.dev->name,
                         e.msg.error().message, a.proc->log_tail()));
      return;
    }
    if (!e.msg) {
      fail(fmt::format("{} agent on {}: bad control line: {}", a.role, a.dev->name, e.msg.error().str()));
      return;
    }
    const ControlMsg& m = *e.msg;
    if (m.kind == "READY") {
      if (a.role == "SERVER") server_endpoint = m.get_or("endpoint", "");
      (void)db->add_event(*run_id, "info", "agent_ready", fmt::format("{} {}: {}", a.role, a.dev->name, m.get_or("model", m.get_or("link", ""))));
    } else if (m.kind == "FAIL") {
      fail(fmt::format("{} agent on {} failed: {}", a.role, a.dev->name, m.get_or("error", "?")));
    } else if (m.kind == "LOG") {
      (void)db->add_event(*run_id, m.get_or("level", "info"), "agent_log", a.dev->name + ": " + m.get_or("msg", ""));
    } else if (m.kind == "PROFILE" || m.kind == "FRAME") {
      // Every numeric field must parse: a malformed record fails the run
      // instead of being stored with zeros.
      std::string bad;
      auto gi = [&](const char* k) -> int64_t {
        auto v = m.get_int(k);
        if (!v && bad.empty()) bad = v.error().message;
        return v ? *v : 0;
      };
      auto gd = [&](const char* k) -> double {
        auto v = m.get_double(k);
        if (!v && bad.empty()) bad = v.error().message;
        return v ? *v : 0;
      };
      if (m.kind == "PROFILE") {
        LayerProfileRecord r;
        r.run_id = *run_id;
        r.device = a.dev->name;
        r.device_role = a.role;
        r.layer_index = static_cast<int>(gi("index"));
        r.name = m.get_or("name", "");
        r.type = m.get_or("type", "");
        r.params = gi("params");
        r.macs = gi("macs");
        r.out_bytes = gi("output_bytes");
        r.median_ns = static_cast<int64_t>(gd("median_ms") * 1e6);
        r.p95_ns = static_cast<int64_t>(gd("p95_ms") * 1e6);
        r.reps = static_cast<int>(gi("reps"));
        if (int64_t pk = gi("peak_rss_delta"); pk >= 0) r.peak_mem_bytes = pk;  // -1: not measurable here
        if (bad.empty()) profiles.push_back(std::move(r));
      } else {
        FrameRecord r;
        r.run_id = *run_id;
        r.participant = a.dev->name;
        r.split = static_cast<int>(gi("split"));
        r.sample = gi("sample");
        r.rep = static_cast<int>(gi("rep"));
        r.batch = static_cast<int>(gi("batch"));
        r.head_ns = gi("head_ns");
        r.encode_ns = gi("encode_ns");
        r.transfer_ns = gi("transfer_ns");
        r.decode_ns = gi("decode_ns");
        r.tail_ns = gi("tail_ns");
        r.return_ns = gi("return_ns");
        r.total_ns = gi("total_ns");
        r.raw_bytes = gi("raw_bytes");
        r.wire_bytes = gi("wire_bytes");
        r.codec = m.get_or("codec", "");
        r.cipher = m.get_or("cipher", "");
        r.result_json = fmt::format("{{\"top1\":{},\"correct\":{}}}", json_quote(m.get_or("result", "")), gi("correct"));
        frames_done = gi("done");
        frames_total = gi("total");
        current_split = r.split;
        if (bad.empty() && cfg->record.frames) batch.push_back(std::move(r));
        if (batch.size() >= 64) flush();
        if (bad.empty() && ro.progress) draw_progress(frames_done, frames_total, current_split, t0, tty);
      }
      if (!bad.empty()) fail(fmt::format("{} agent on {} sent a malformed {}: {}", a.role, a.dev->name, m.kind, bad));
    } else if (m.kind == "DONE") {
      finished[e.agent] = true;
    }
  };

  auto wait_until = [&](const std::function<bool()>& done_pred, int timeout_ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (failure.empty() && !done_pred()) {
      if (g_interrupted) {
        fail("interrupted (Ctrl-C)");
        break;
      }
      if (timeout_ms > 0 && Clock::now() > deadline) {
        fail("timed out waiting for the agents");
        break;
      }
      auto e = pump->pop(200);
      if (e) handle(*e);
      for (size_t i = 0; i < all->size(); ++i)
        if (!finished[i] && last_seen.count(i) &&
            Clock::now() - last_seen[i] > std::chrono::milliseconds(ro.heartbeat_timeout_ms))
          fail(fmt::format("{} agent on {} lost: no heartbeat for {} ms", (*all)[i].role, (*all)[i].dev->name,
                           ro.heartbeat_timeout_ms));
    }
  };

  Status st;
  if (detached) {
    server_endpoint = detached->endpoint;
    (void)db->add_event(*run_id, "info", "agent_reused",
                        fmt::format("SERVER {}: detached agent pid {} at {}", server.name, detached->pid, detached->endpoint));
    fmt::print("using the detached SERVER agent on {} (pid {}, {})\n", server.name, detached->pid, detached->endpoint);
  } else if (!ro.in_process) {
    // A local agent binds loopback, or its own address inside its namespace;
    // a remote one binds every interface.
    std::string bind_host = server.transport == Transport::ssh ? "0.0.0.0"
                            : server.netns.empty()             ? "127.0.0.1"
                                                               : server.connection().host;
    auto args = model_args(*cfg);
    args.insert(args.end(), {"--bind", fmt::format("tcp://{}:{}", bind_host, server.connection().port)});
    st = launch(server, "SERVER", args);
    if (!st) fail("SERVER " + server.name + ": " + st.error().str());
  }
  if (failure.empty() && !ro.in_process && !detached) {
    pump = std::make_unique<EventPump>(agents);
    pump->start();
    last_seen[0] = Clock::now();
    wait_until([&] { return !server_endpoint.empty(); }, 600000);
    pump->stop();
  }
  // Then every PARTICIPANT.
  const size_t first_participant = agents.size();
  if (failure.empty()) {
    for (const DeviceConfig* p : devices->participants()) {
      auto args = model_args(*cfg);
      auto pa = participant_args(*cfg);
      args.insert(args.end(), pa.begin(), pa.end());
      if (ro.in_process) args.push_back("--in-process");
      else
        args.insert(args.end(), {"--connect", server.transport == Transport::local && server.netns.empty()
                                                  ? server_endpoint
                                                  : reachable_endpoint(server_endpoint, server.connection().host)});
      st = launch(*p, "PARTICIPANT", args);
      if (!st) {
        fail("PARTICIPANT " + p->name + ": " + st.error().str());
        break;
      }
    }
  }
  if (failure.empty()) {
    pump = std::make_unique<EventPump>(agents);
    pump->start();
    for (size_t i = 0; i < agents.size(); ++i) last_seen[i] = Clock::now();
    wait_until(
        [&] {
          for (size_t i = first_participant; i < agents.size(); ++i)
            if (!finished[i]) return false;
          return true;
        },
        0);
    if (ro.progress && tty && frames_done < frames_total) fmt::print(stderr, "\n");
  }
  if (pump) pump->stop();
  // Stop every agent (they exit when stdin closes) and record the outcome.
  for (auto& a : agents) {
    finished[&a - &agents[0]] = true;
    a.proc->stop(3000);
  }
  flush();
  sigaction(SIGINT, &old_sa, nullptr);
  const RunStatus status = failure.empty() ? RunStatus::completed
                           : g_interrupted ? RunStatus::interrupted
                                           : RunStatus::failed;
  if (!failure.empty()) (void)db->add_event(*run_id, "error", "run_failed", failure);
  finished_row = true;
  if (auto fs2 = db->finish_run(*run_id, status, failure); !fs2)
    fmt::print(stderr, "tracrctl run: {}\n", fs2.error().str());
  if (!failure.empty()) {
    fmt::print(stderr, "tracrctl run: run {} {}: {}\n", *run_id, run_status_name(status), failure);
    fmt::print(stderr, "tracrctl run: rows written so far are kept in {} (tracrctl results show {})\n",
               cfg->output, *run_id);
    return 1;
  }
  fmt::print("\nrun {} completed: per-split table read back from {}\n", *run_id, cfg->output);
  if (auto pst = print_split_table(*db, *run_id); !pst) {
    fmt::print(stderr, "tracrctl run: {}\n", pst.error().str());
    return 1;
  }
  return 0;
}

int cmd_run(const std::vector<std::string>& args) {
  RunOptions ro;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Fatal(make_error(Errc::invalid_argument, a + " needs a value"));
      return args[++i];
    };
    if (a == "--show-config") ro.show_config = true;
    else if (a == "--trust-new-hosts") ro.trust_new_hosts = true;
    else if (a == "--in-process") ro.in_process = true;
    else if (a == "--no-progress") ro.progress = false;
    else if (a == "--db") ro.db = next();
    else if (a == "--agent") ro.agent_path = next();
    else if (!a.empty() && a[0] == '-') throw Fatal(make_error(Errc::invalid_argument, "run: unknown option '" + a + "'"));
    else if (ro.experiment.empty()) ro.experiment = a;
    else throw Fatal(make_error(Errc::invalid_argument, "run: more than one experiment file given"));
  }
  if (ro.experiment.empty()) throw Fatal(make_error(Errc::invalid_argument, "run: expected an experiment YAML file"));
  return run_experiment(ro);
}

}  // namespace tracr::controller

// ---- detached SERVER agents (tracrctl agents start / stop) ------------------

namespace tracr::controller {

namespace {

// Reads control lines from an agent's log, in order, until READY or FAIL.
Result<std::string> wait_ready_in_log(const std::function<Result<std::string>()>& read_log,
                                      const std::vector<uint8_t>& secret, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    auto text = read_log();
    if (text) {
      ControlCodec ctl(secret, ControlDir::agent_to_controller);
      size_t pos = 0, nl;
      while ((nl = text->find('\n', pos)) != std::string::npos) {
        const std::string line = text->substr(pos, nl - pos);
        pos = nl + 1;
        auto m = ctl.decode(line);
        if (!m) continue;  // stderr lines share the log
        if (m->kind == "FAIL") return make_error(Errc::remote, "agent failed: " + m->get_or("error", "?"));
        if (m->kind == "READY") return m->get_or("endpoint", "");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return make_error(Errc::timeout, "the detached agent did not report READY in time");
}

std::string read_local(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

int cmd_agents_start(const std::vector<std::string>& args) {
  std::string exp, agent_path;
  bool trust = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--trust-new-hosts") trust = true;
    else if (args[i] == "--agent" && i + 1 < args.size()) agent_path = args[++i];
    else if (!args[i].empty() && args[i][0] != '-' && exp.empty()) exp = args[i];
    else throw Fatal(make_error(Errc::invalid_argument, "agents start: unexpected '" + args[i] + "'"));
  }
  if (exp.empty()) throw Fatal(make_error(Errc::invalid_argument, "agents start: expected an experiment YAML file"));
  if (agent_path.empty()) agent_path = self_dir() + "/tracr-agent";
  auto cfg = load_experiment(exp);
  if (!cfg) {
    fmt::print(stderr, "tracrctl agents start: {}\n", cfg.error().str());
    return 2;
  }
  auto devices = load_experiment_devices(*cfg);
  if (!devices) {
    fmt::print(stderr, "tracrctl agents start: {}\n", devices.error().str());
    return 2;
  }
  const DeviceConfig& server = devices->server();
  const std::string state = detached_state_path(cfg->output, server.name);
  if (auto old = read_detached(state); old && (old->transport != "local" || ::kill(static_cast<pid_t>(old->pid), 0) == 0)) {
    fmt::print("SERVER agent on {} already running (pid {}, {}); `tracrctl agents stop` first\n", server.name, old->pid,
               old->endpoint);
    return old->identity == server_identity(*cfg) ? 0 : 1;
  }
  std::vector<uint8_t> secret(32);
  (void)protocol::random_bytes(secret.data(), secret.size());
  const std::string secret_hex = protocol::to_hex(secret.data(), secret.size());
  ExperimentConfig no_profile = *cfg;
  no_profile.record.layers = false;
  std::vector<std::string> a = model_args(no_profile);
  a.insert(a.begin(), {"--role", "SERVER"});
  std::string bind_host = server.transport == Transport::ssh ? "0.0.0.0"
                          : server.netns.empty()             ? "127.0.0.1"
                                                             : server.connection().host;
  a.insert(a.end(), {"--bind", fmt::format("tcp://{}:{}", bind_host, server.connection().port)});

  DetachedServer d;
  d.device = server.name;
  d.transport = std::string(transport_name(server.transport));
  d.identity = server_identity(*cfg);
  Result<std::string> endpoint = make_error(Errc::internal, "");
  if (server.transport == Transport::local) {
    const std::string dir = fs::path(state).parent_path().string();
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string secret_file = dir + "/" + server.name + ".secret";
    {
      std::ofstream f(secret_file, std::ios::trunc);
      fs::permissions(secret_file, fs::perms::owner_read | fs::perms::owner_write, ec);
      f << secret_hex << "\n";
    }
    d.log = dir + "/" + server.name + ".log";
    std::vector<std::string> argv;
    if (!server.netns.empty()) argv = {"/usr/sbin/ip", "netns", "exec", server.netns};
    argv.push_back(agent_path);
    argv.insert(argv.end(), a.begin(), a.end());
    argv.insert(argv.end(), {"--secret-file", secret_file});
    auto pid = spawn_detached(argv, d.log, {"OMP_WAIT_POLICY=PASSIVE"});
    if (!pid) {
      fmt::print(stderr, "tracrctl agents start: {}\n", pid.error().str());
      return 1;
    }
    d.pid = *pid;
    endpoint = wait_ready_in_log([&]() -> Result<std::string> { return read_local(d.log); }, secret, 600000);
  } else {
    auto s = SshSession::connect(device_ssh_target(server, devices->source, trust));
    if (!s) {
      fmt::print(stderr, "tracrctl agents start: device {}: {}\n", server.name, s.error().str());
      return 1;
    }
    auto dep = deploy_agent(**s, agent_path, server.work_dir);
    if (!dep) {
      fmt::print(stderr, "tracrctl agents start: device {}: deploy: {}\n", server.name, dep.error().str());
      return 1;
    }
    const std::string dir = dep->remote_path.substr(0, dep->remote_path.rfind('/') + 1);
    const std::string secret_file = dir + server.name + ".secret";
    d.log = dir + server.name + "-detached.log";
    auto w = (*s)->run("umask 077 && cat > " + shell_quote(secret_file), secret_hex + "\n");
    if (!w || w->exit_status != 0) {
      fmt::print(stderr, "tracrctl agents start: device {}: cannot write the secret file\n", server.name);
      return 1;
    }
    std::string cmd = "setsid nohup " + shell_quote(dep->remote_path);
    for (const auto& x : a) cmd += " " + shell_quote(x);
    cmd += " --secret-file " + shell_quote(secret_file) + " > " + shell_quote(d.log) + " 2>&1 < /dev/null & echo $!";
    auto r = (*s)->run(cmd);
    if (!r || r->exit_status != 0) {
      fmt::print(stderr, "tracrctl agents start: device {}: cannot start the agent: {}\n", server.name,
                 r ? r->err : r.error().str());
      return 1;
    }
    d.pid = std::atol(r->out.c_str());
    endpoint = wait_ready_in_log([&]() { return (*s)->read_file_tail(d.log, 1u << 20); }, secret, 600000);
    if (endpoint) endpoint = reachable_endpoint(*endpoint, server.connection().host);
  }
  if (!endpoint) {
    fmt::print(stderr, "tracrctl agents start: {}: {}\n", server.name, endpoint.error().str());
    return 1;
  }
  d.endpoint = *endpoint;
  d.secret_hex = secret_hex;
  if (auto st = write_detached(state, d); !st) {
    fmt::print(stderr, "tracrctl agents start: {}\n", st.error().str());
    return 1;
  }
  fmt::print("SERVER agent on {} running detached: pid {}, {}, serving {}; runs of this model reuse it until "
             "`tracrctl agents stop`\n",
             server.name, d.pid, d.endpoint, cfg->model);
  return 0;
}

int stop_detached_agents(const std::string& state_dir, bool trust, const std::string& devices_file) {
  std::error_code ec;
  if (!fs::is_directory(state_dir, ec)) return 0;
  int bad = 0;
  for (const auto& e : fs::directory_iterator(state_dir, ec)) {
    if (e.path().extension() != ".state") continue;
    auto d = read_detached(e.path().string());
    if (!d) {
      fmt::print(stderr, "{}\n", d.error().str());
      ++bad;
      continue;
    }
    if (d->transport == "local") {
      ::kill(static_cast<pid_t>(d->pid), SIGTERM);
      for (int i = 0; i < 50 && ::kill(static_cast<pid_t>(d->pid), 0) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (::kill(static_cast<pid_t>(d->pid), 0) == 0) ::kill(static_cast<pid_t>(d->pid), SIGKILL);
      fs::remove(fs::path(state_dir) / (d->device + ".secret"), ec);
    } else {
      auto devs = load_devices_or_default(devices_file);
      const DeviceConfig* dev = devs ? devs->find(d->device) : nullptr;
      if (!dev) {
        fmt::print(stderr, "detached agent on {}: device not in {}\n", d->device, devices_file);
        ++bad;
        continue;
      }
      auto s = SshSession::connect(device_ssh_target(*dev, devs->source, trust));
      if (!s) {
        fmt::print(stderr, "detached agent on {}: {}\n", d->device, s.error().str());
        ++bad;
        continue;
      }
      const std::string pid = std::to_string(d->pid);
      (void)(*s)->run("kill " + pid + " 2>/dev/null; sleep 1; kill -9 " + pid + " 2>/dev/null; rm -f " +
                      shell_quote(d->log.substr(0, d->log.size() - std::string("-detached.log").size()) + ".secret"));
    }
    fs::remove(e.path(), ec);
    fmt::print("stopped the detached SERVER agent on {} (pid {})\n", d->device, d->pid);
  }
  return bad ? 1 : 0;
}

}  // namespace tracr::controller
