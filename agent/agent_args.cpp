// tracr-agent's command line (CLI11): the one place its options are named,
// typed and described. The controller's launcher, `tracrctl agents start`,
// the demo and the tests pass these options; names and meanings are stable.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "agent/agent.hpp"
#include "wire/identity.hpp"
#include "agent/cli_types.hpp"
#include "agent/roles.hpp"

namespace tracr::agent {

using namespace tracr::wire;

namespace {

constexpr const char* kAgentFooter =
    "The hex session secret is the first line of stdin (or --secret-file FILE, owner-only, for a detached agent),\n"
    "optionally followed by ' clock_ms=N', the controller's Unix time in ms: HELLO timestamps run on it.\n"
    "--config stdin: the controller sends the effective experiment (the YAML `tracrctl run --show-config`\n"
    "describes) as an authenticated CONFIG line; --experiment FILE reads the same YAML from a file.\n"
    "Without either, a SERVER echoes frames (protocol demo; --no-encrypt, --no-x25519 apply to it).\n"
    "stdout carries authenticated control lines; the agent exits when stdin closes, on a STOP line, or, with\n"
    "--heartbeat-timeout-ms MS (tracrctl passes its heartbeat_timeout_ms), when no control line (the controller\n"
    "sends a HEARTBEAT every second) arrives for MS: then it winds down, and exits with status 4 (at once if it\n"
    "is still running MS later).\n"
    "Exit status: 0 done, 2 usage or configuration error, 3 internal error, 4 the controller went silent.";

// The role from --role, and the checks that span several options (which
// role needs what).
Status check_agent_options(AgentOptions& o) {
  if (o.list_meters) return {};
  // --cpus names the CPUs; their count is the device's cpu_cores (identity, power model).
  if (!o.cpus.empty()) {
    std::vector<int> sorted = o.cpus;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return make_error(Errc::invalid_argument, "--cpus names a CPU twice");
    o.cpu_cores = static_cast<int>(o.cpus.size());
  }
  auto role = parse_role(o.role_arg);
  if (!role)
    return make_error(Errc::invalid_argument,
                      "--role must be SERVER, PARTICIPANT, TRAIN_WORKER or TRAIN_OWNER, got '" + o.role_arg + "'");
  o.role = *role;
  const std::string name(role_name(o.role));
  if (is_training(o.role) && !o.config_from_stdin && o.experiment_file.empty())
    return make_error(Errc::invalid_argument, name + " needs an experiment: --config stdin or --experiment FILE");
  if (o.role == AgentRole::train_worker && o.train_segments.empty())
    return make_error(Errc::invalid_argument, "TRAIN_WORKER needs --segments LIST (the segments it holds)");
  if (is_training(o.role) && o.run_tag.empty())
    return make_error(Errc::invalid_argument, name + " needs --run-tag TAG (its checkpoint directory)");
  if (o.config_from_stdin && !o.experiment_file.empty())
    return make_error(Errc::invalid_argument, "--config stdin and --experiment FILE exclude each other");
  if (!o.downstream.empty() && o.role != AgentRole::server)
    return make_error(Errc::invalid_argument, "--downstream is for a SERVER (a chain's middle device), not " + name);
  if (!o.downstream.empty() && !o.config_from_stdin && o.experiment_file.empty())
    return make_error(Errc::invalid_argument,
                      "--downstream needs an experiment (--config stdin or --experiment FILE): a middle device runs "
                      "its segment of the model before it forwards");
  if (o.role == AgentRole::participant) {
    if (!o.config_from_stdin && o.experiment_file.empty())
      return make_error(Errc::invalid_argument, "PARTICIPANT needs an experiment: --config stdin or --experiment FILE");
    if (o.connect.empty() && !o.in_process)
      return make_error(Errc::invalid_argument, "PARTICIPANT needs --connect ENDPOINT or --in-process");
  }
  return {};
}

// Every option of tracr-agent, writing into `o`. `version` is set by --version.
void build_agent_app(CLI::App& app, AgentOptions& o, bool& version) {
  using namespace cli;
  app.footer(kAgentFooter);
  app.add_flag("--version", version, "print the agent and protocol versions and exit");
  app.add_option("--role", o.role_arg, "SERVER | PARTICIPANT | TRAIN_WORKER | TRAIN_OWNER")->type_name("ROLE");
  app.add_flag("--meters", o.list_meters, "list the energy meters found here and exit");
  app.add_option("--bind", o.bind, "SERVER/TRAIN_WORKER: data endpoint to bind (default tcp://127.0.0.1:0)")
      ->type_name("EP");
  app.add_option("--raw-bind", o.raw_bind, "SERVER: raw ZeroMQ ack socket (benchmark baseline)")->type_name("EP");
  app.add_option("--connect", o.connect, "PARTICIPANT: the SERVER's data endpoint")->type_name("EP");
  app.add_option("--downstream", o.downstream,
                 "SERVER: a chain's middle device: requests that say so run their segment here and go on to EP")
      ->type_name("EP");
  app.add_flag("--in-process", o.in_process, "PARTICIPANT: run the tails in this process, no socket");
  app.add_flag("--probe-only", o.probe_only, "PARTICIPANT: measure the link to the SERVER, run no frames");
  app.add_option_function<std::string>(
         "--config",
         [&o](const std::string&) { o.config_from_stdin = true; },
         "where the experiment comes from: 'stdin' (an authenticated CONFIG line from the controller)")
      ->type_name("stdin")
      ->check(form([](const std::string& v) { return v == "stdin" ? "" : "expected 'stdin'"; }));
  app.add_option("--experiment", o.experiment_file, "read the experiment YAML from FILE (detached or standalone)")
      ->type_name("FILE");
  app.add_option("--secret-file", o.secret_file, "read the session secret from FILE (owner-only, 0600); stdin not watched")
      ->type_name("FILE");
  app.add_option("--device", o.torch_device, "LibTorch device: cpu | cuda | cuda:N | auto")->type_name("DEVICE");
  add_int(&app, "--threads", o.torch_threads, 1, 1024, "LibTorch intra-op threads");
  add_int(&app, "--heartbeat-timeout-ms", o.heartbeat_timeout_ms, 1000, 3600000,
          "stop after this long without a control line from the controller");
  add_number(&app, "--link-delay-ms", o.link_delay_ms, 0, 600000, "ms",
             "PARTICIPANT, or a SERVER with --downstream (its hop to the next device): one-way delay a loopback "
             "relay adds to every byte each way (link_delay: agent)");
  add_number(&app, "--link-jitter-ms", o.link_jitter_ms, 0, 600000, "ms",
             "PARTICIPANT, or a SERVER with --downstream: uniform jitter around the delay");
  add_number(&app, "--cpu-quota", o.cpu_quota, 0.01, 4096, "cores", "emulate a slower device: CPU time (cgroup quota)");
  app.add_flag("--cpu-quota-external", o.cpu_quota_external,
               "the launcher applied --cpu-quota already (recorded, not applied again)");
  add_int(&app, "--cpu-cores", o.cpu_cores, 1, 4096, "emulate a slower device: pin to this many CPUs");
  app.add_option("--cpus", o.cpus, "pin to these CPUs by number (N,M,...): emulated devices kept apart on one host")
      ->delimiter(',')
      ->check(CLI::Range(0, 4095))
      ->excludes("--cpu-cores");
  app.add_option_function<std::string>(
         "--power-model",
         [&o](const std::string& v) {
           const size_t c = v.find(',');
           o.power_model = std::make_pair(std::stod(v.substr(0, c)), std::stod(v.substr(c + 1)));
         },
         "the devices file's power_model, for energy without a meter")
      ->type_name("IDLE_W,BUSY_W")
      ->check(form([](const std::string& v) -> std::string {
        const char* what = "expected IDLE_W,BUSY_W with 0 <= idle <= busy";
        char* end = nullptr;
        const double idle = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != ',') return what;
        const char* b = end + 1;
        const double busy = std::strtod(b, &end);
        if (end == b || *end != '\0' || !(idle >= 0) || !(busy >= idle)) return what;
        return "";
      }));
  app.add_flag_function("--no-encrypt", [&o](int64_t) { o.encrypt = false; }, "echo SERVER: frames in the clear");
  app.add_flag_function("--no-x25519", [&o](int64_t) { o.x25519 = false; }, "echo SERVER: no X25519 key exchange");
  // Split training.
  app.add_option_function<std::string>(
         "--segments",
         [&o](const std::string& v) {
           o.train_segments.clear();
           for (size_t pos = 0; pos <= v.size();) {
             const size_t comma = v.find(',', pos);
             o.train_segments.push_back(std::stoi(v.substr(pos, comma - pos)));
             if (comma == std::string::npos) break;
             pos = comma + 1;
           }
         },
         "TRAIN_WORKER: the segments it holds")
      ->type_name("I,J,...")
      ->check(form([](const std::string& v) -> std::string {
        for (size_t pos = 0; pos <= v.size();) {
          const size_t comma = v.find(',', pos);
          const std::string item = v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
          char* end = nullptr;
          const long k = std::strtol(item.c_str(), &end, 10);
          if (item.empty() || *end != '\0' || k < 0 || k > 100000) return "expected segment indices like 1,2";
          if (comma == std::string::npos) break;
          pos = comma + 1;
        }
        return "";
      }));
  app.add_option_function<std::vector<std::string>>(
         "--worker",
         [&o](const std::vector<std::string>& vs) {
           for (const auto& v : vs) {
             const size_t eq = v.find('=');
             o.train_workers.emplace_back(std::stoi(v.substr(0, eq)), v.substr(eq + 1));
           }
         },
         "TRAIN_OWNER: the worker holding a segment (repeatable)")
      ->type_name("SEG=EP")
      ->check(form([](const std::string& v) -> std::string {
        const size_t eq = v.find('=');
        char* end = nullptr;
        const long k = eq == std::string::npos ? -1 : std::strtol(v.substr(0, eq).c_str(), &end, 10);
        if (eq == std::string::npos || eq == 0 || *end != '\0' || k < 1 || eq + 1 >= v.size())
          return "expected SEGMENT=ENDPOINT (segment >= 1)";
        return "";
      }));
  app.add_option_function<std::string>(
         "--owner",
         [&o](const std::string& v) { std::sscanf(v.c_str(), "%d/%d", &o.owner_index, &o.owners); },
         "TRAIN_OWNER: this owner's turn K of N (round-robin)")
      ->type_name("K/N")
      ->check(form([](const std::string& v) -> std::string {
        int k = -1, n = -1;
        char tail = 0;
        if (std::sscanf(v.c_str(), "%d/%d%c", &k, &n, &tail) != 2 || n < 1 || k < 0 || k >= n)
          return "expected K/N with 0 <= K < N";
        return "";
      }));
  app.add_option("--run-tag", o.run_tag, "training: checkpoints under <checkpoint_dir>/<TAG>/")
      ->type_name("TAG")
      ->check(form([](const std::string& v) -> std::string {
        if (v.empty() || v.find('/') != std::string::npos || v == "." || v == "..")
          return "expected a file name (no '/')";
        return "";
      }));
  add_int(&app, "--resume-step", o.resume_step, 0, INT64_MAX, "training: load the checkpoints of this step");
}

}  // namespace

Status parse_agent_args(const std::vector<std::string>& args, AgentOptions& opt) {
  CLI::App app{"tracr-agent", "tracr-agent"};
  bool version = false;
  build_agent_app(app, opt, version);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return make_error(Errc::invalid_argument, "--help is answered by tracr-agent itself");
  } catch (const CLI::ParseError& e) {
    return make_error(Errc::invalid_argument, cli::error_text(e));
  }
  return check_agent_options(opt);
}

int parse_agent_command_line(int argc, char** argv, AgentOptions& opt) {
  CLI::App app{"tracr-agent: one split-computing role (SERVER, PARTICIPANT, TRAIN_WORKER, TRAIN_OWNER) under a "
               "controller, over authenticated control lines on stdin/stdout",
               "tracr-agent"};
  bool version = false;
  build_agent_app(app, opt, version);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tracr-agent: %s\nrun 'tracr-agent --help'\n", cli::error_text(e).c_str());
    return 2;
  }
  if (version) {
    std::printf("tracr-agent %s protocol 1\n", kAgentVersion);
    return 0;
  }
  if (auto st = check_agent_options(opt); !st) {
    std::fprintf(stderr, "tracr-agent: %s\nrun 'tracr-agent --help'\n", st.error().message.c_str());
    return 2;
  }
  return -1;
}

}  // namespace tracr::agent
