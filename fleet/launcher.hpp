// The one way tracrctl starts a tracr-agent it talks to: a local process
// (optionally inside a network namespace) or a process over SSH (deployed
// first). The agent's stdin/stdout are its control channel: the session
// secret goes in as the first stdin line (never argv), authenticated control
// lines come back (agent -> controller) and go in (controller -> agent:
// STOP, CMD). Used by `tracrctl run`, `tracrctl demo` and the tests;
// detached SERVER agents (`tracrctl agents start`) share its device and
// argument helpers.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "wire/agent_role.hpp"
#include "wire/control.hpp"
#include "settings/config.hpp"
#include "fleet/ssh.hpp"
#include "fleet/staging.hpp"

namespace tracr::fleet {

// One agent process; its stdin/stdout are the control channel.
class AgentProc {
 public:
  virtual ~AgentProc() = default;
  virtual Status write(const std::string& s) = 0;
  virtual Result<std::string> read_line(int timeout_ms) = 0;
  // Closes stdin (the agent ends its run and exits), waits up to grace_ms,
  // then kills it; returns its exit status (-1 when unknown).
  virtual int stop(int grace_ms) = 0;
  virtual std::string log_tail() = 0;
  virtual long pid() const = 0;  // on its own machine
};

struct LaunchSpec {
  const settings::DeviceConfig* device = nullptr;
  wire::AgentRole role = wire::AgentRole::server;
  std::vector<std::string> args;    // after --role
  std::string agent_path;           // tracr-agent on this machine
  std::vector<uint8_t> secret;      // session secret
  std::string log_dir;              // local agents: stderr log directory
  std::string log_name;             // file name of the stderr log (local dir or beside the remote agent);
                                    // empty: a local agent shares tracrctl's stderr
  std::string devices_file;         // for SSH targets (known_hosts beside it)
  bool trust_new_hosts = false;
  // SSH only: connect with this target instead of the device's (tests, or a
  // caller that already resolved one), and run an agent already installed at
  // this remote path instead of deploying agent_path.
  std::optional<SshTarget> ssh_target;
  std::string installed_path;
  // The effective experiment YAML, sent as the CONFIG control line right
  // after the secret (the agent is started with --config stdin); empty for
  // an echo SERVER.
  std::string config_yaml;
  // Sent on the CONFIG line beside it: the profiles the run's database
  // holds by profile key (AgentOptions::profiles_known); "" = none.
  std::string profiles_known;
  // The experiment behind config_yaml, paths absolute (agent_experiment).
  // Over SSH the files this role reads are made available on the device
  // (staging.hpp: declared paths or content-hashed copies) and the agent gets
  // this experiment with their device paths instead of config_yaml.
  const settings::ExperimentConfig* experiment = nullptr;
  // Both directions of the control channel carry a HEARTBEAT every
  // kControlHeartbeatMs; the agent (started with --heartbeat-timeout-ms)
  // stops when it hears nothing from tracrctl for this long (the experiment's
  // heartbeat_timeout_ms). 0: the agent never does.
  int heartbeat_timeout_ms = 5000;
};

// Period of the HEARTBEAT lines each end of a control channel sends.
inline constexpr int kControlHeartbeatMs = 1000;

// A started agent: the process and both directions of its control channel.
// From launch_agent on, a thread sends it a HEARTBEAT line every
// kControlHeartbeatMs until stop().
class AgentConn {
 public:
  AgentConn(const settings::DeviceConfig* dev, wire::AgentRole role, std::unique_ptr<AgentProc> proc,
            const std::vector<uint8_t>& secret);
  ~AgentConn();
  const settings::DeviceConfig& device() const { return *dev_; }
  wire::AgentRole role() const { return role_; }
  AgentProc& proc() { return *proc_; }
  // Decodes one line from the agent (MAC, sequence).
  Result<wire::ControlMsg> decode(const std::string& line) { return in_.decode(line); }
  // Sends an authenticated line to the agent (STOP, CMD, HEARTBEAT);
  // thread-safe, lines leave in sequence order.
  Status send(const std::string& kind, const std::map<std::string, std::string>& fields);
  // Starts the heartbeat thread (idempotent).
  void start_heartbeat(int period_ms = kControlHeartbeatMs);
  // Ends the heartbeats, then stops the process (AgentProc::stop) and
  // returns its exit status. Callers stop agents through here, never
  // through proc().stop(), so no heartbeat races the closing stdin.
  int stop(int grace_ms);
  // Reads lines until READY (returned) or FAIL (error remote), skipping
  // others. Error timeout after timeout_ms, peer_closed when the agent exits
  // first (with its exit status); both stop the agent and carry its log tail.
  Result<wire::ControlMsg> wait_ready(int timeout_ms);
  // The experiment's files made available on its device at launch (SSH).
  const std::vector<StagedFile>& staged() const { return staged_; }
  void set_staged(std::vector<StagedFile> s) { staged_ = std::move(s); }
  // Stops the agent and returns `code` with "<role> agent on <device> <what>",
  // its exit status and the tail of its log.
  Error abandon(Errc code, const std::string& what);

 private:
  const settings::DeviceConfig* dev_;
  wire::AgentRole role_;
  std::unique_ptr<AgentProc> proc_;
  wire::ControlCodec in_, out_;
  std::mutex send_mu_;  // one writer at a time: encode and write together
  wire::Heartbeat hb_;
  std::vector<StagedFile> staged_;
};

// Starts the agent on spec.device (local or SSH, deploying it first), writes
// the secret. Over SSH, before the agent starts: a deployed agent with shared
// libraries missing on the device is refused (error config naming them, see
// missing_libraries_message), and the experiment's files are staged. Errors
// name the device and what failed (SSH hints included).
Result<std::unique_ptr<AgentConn>> launch_agent(const LaunchSpec& spec);

// The first line an agent reads (stdin, or its --secret-file): the session
// secret in hex, then this controller's clock now ("HEX clock_ms=N"). The
// agent's HELLO timestamps run on that clock (PROTOCOL.md 6.3), so devices
// whose own clocks were never set agree with each other.
std::string agent_secret_line(const std::string& secret_hex);

// Runs fn(0) .. fn(n-1) each on its own thread, all started before any is
// waited for; returns when all have returned.
void run_concurrently(size_t n, const std::function<void(size_t)>& fn);

// One launch of launch_concurrently: the agent (or why it did not start) and
// when its launch was issued and returned, in ms on this process's steady
// clock from the earliest launch issued.
struct ConcurrentLaunch {
  Result<std::unique_ptr<AgentConn>> conn = make_error(Errc::internal, "not launched");
  double issued_ms = 0;
  double started_ms = 0;
};
// start(0) .. start(n-1) concurrently (run_concurrently); results in index order.
std::vector<ConcurrentLaunch> launch_concurrently(
    size_t n, const std::function<Result<std::unique_ptr<AgentConn>>(size_t)>& start);

// The known_hosts file of a devices file: pkeys/known_hosts of its project,
// the nearest directory from the devices file's own upwards with pkeys/ and
// config/ side by side (config/devices_config.yaml and
// results/ssh_testbed/devices.yaml: the project's pkeys/known_hosts); when
// there is none, pkeys/known_hosts beside the devices file. Absolute.
std::string known_hosts_for(const std::string& devices_file);

// The SSH target of a device: its default connection, its key, and the
// known_hosts file known_hosts_for(devices_file) (or $TRACR_KNOWN_HOSTS).
SshTarget device_ssh_target(const settings::DeviceConfig& dev, const std::string& devices_file, bool trust_new_hosts);

// The agent arguments that make it emulate the device's CPU limits
// (cpu_quota, cpu_cores in the devices file); empty when it has none.
std::vector<std::string> device_limit_args(const settings::DeviceConfig& dev);

// The tracr-agent to run on `dev`: its devices-file `agent`, else `fallback`.
std::string device_agent_path(const settings::DeviceConfig& dev, const std::string& fallback);
// Every device's own `agent` exists and is executable here, and every SSH
// device's private key is one SshSession::connect accepts (check_private_key);
// error config naming the devices file position, the device and the path
// otherwise. Nothing is contacted.
Status check_device_agents(const settings::DevicesConfig& devices);

// A device that runs agents as local processes on loopback (tracrctl demo).
settings::DeviceConfig local_device(const std::string& name);

// The address a SERVER agent binds on this device: loopback for a local
// agent, its own address inside its namespace, every interface over SSH.
std::string server_bind_host(const settings::DeviceConfig& dev);
// "tcp://0.0.0.0:PORT" as seen from a participant that reaches the server at `host`.
std::string reachable_endpoint(const std::string& bound, const std::string& host);

}  // namespace tracr::fleet
