#include "controller/cli.hpp"

#include "agent/agent.hpp"

#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "controller/demo.hpp"
#include "controller/plan.hpp"
#include "controller/train.hpp"
#include "controller/report.hpp"
#include "controller/results_cli.hpp"
#include "controller/run.hpp"
#include "protocol/codec.hpp"
#include "protocol/error.hpp"

namespace tracr::controller {

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

int cmd_models(const std::vector<std::string>& args);
int cmd_profile(const std::vector<std::string>& args);
int cmd_devices(const std::vector<std::string>& args);
int cmd_agents(const std::vector<std::string>& args);

namespace {

void usage() {
  std::puts(
      "usage: tracrctl <command> [options]\n"
      "\n"
      "commands:\n"
      "  run EXPERIMENT.yaml [--show-config] [--in-process] [--wide] [--db PATH] [--trust-new-hosts] [--no-progress]\n"
      "        bring up agents (local processes or SSH), sweep the splits, record in SQLite,\n"
      "        print the per-split table read back from the database\n"
      "        (exit 0 done, 1 failed, 2 configuration error, 130/143/129 interrupted)\n"
      "  train EXPERIMENT.yaml [--resume RUN|last] [--db PATH] [--show-config] [--trust-new-hosts]\n"
      "        split training (train.cuts): data owners keep data, labels and the loss, workers their\n"
      "        segments; every step, epoch and checkpoint in SQLite, the trained model exported\n"
      "  link probe EXPERIMENT.yaml [--db PATH] [--trust-new-hosts]\n"
      "        measure RTT and throughput both ways between each PARTICIPANT and its SERVER\n"
      "  results list [--model M] [--status S] [--name SUBSTR] | show RUN | compare RUN RUN [RUN ...]\n"
      "        | export RUN --csv F|--json F | rm RUN [RUN ...]   [--db PATH]\n"
      "  plan RUN|last|EXPERIMENT.yaml [--validate] [--objective O] [--link PROFILE] [--max-latency-ms X] ...\n"
      "        predict latency, edge energy and throughput per split from stored layer profiles, bytes and\n"
      "        the link; choose a split; --validate compares with the run's measurements (stored in plans)\n"
      "  report RUN [RUN ...] -o FILE.html [--db PATH]\n"
      "        one self-contained HTML page: time, bytes and energy per split, predicted vs measured,\n"
      "        split and link estimate over time, settings and hardware (Chart.js inlined)\n"
      "  results schema [--markdown] | results migrate [--db PATH]\n"
      "  devices check [--devices FILE] [--trust-new-hosts]\n"
      "        reachability, authentication, key permissions, architecture, agent version\n"
      "  agents deploy|status|logs|stop [--devices FILE] [--trust-new-hosts] [--tail BYTES]\n"
      "        upload the agent (by content hash), list deployed/running agents, fetch logs, stop them\n"
      "  models            list the splittable models of the registry\n"
      "  profile MODEL [--input-shape C,H,W] [--batch B] [--reps N] [--weights F] [--device D]\n"
      "        per-layer latency (median, p95), bytes and memory on this machine, and the\n"
      "        per-split head/tail estimate\n"
      "  demo [--quick] [--reps N] [--csv FILE] [--agent PATH]\n"
      "        start tracr-agent SERVER processes on loopback, send real tensors\n"
      "        under each codec and cipher, print the measured table beside raw ZeroMQ\n"
      "  bench protocol [same options as demo] [--threads N] [--no-python | --compare-only]\n"
      "        the demo with more repetitions (the protocol benchmark), then the side-by-side\n"
      "        table against the Python tracr pipeline (bench/python_baseline.py, /usr/bin/python3)\n"
      "        and raw ZeroMQ on real post-ReLU activations\n"
      "  codecs            list the codecs this build supports\n"
      "  version           print versions\n"
      "\n"
      "exit status (every command): 0 done, 1 failed (a run failed, a device or database error),\n"
      "2 usage or configuration error (nothing was started), 128+signal when interrupted\n"
      "(130 SIGINT, 143 SIGTERM, 129 SIGHUP)\n");
}

std::vector<size_t> parse_sizes(const std::string& s) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    auto comma = s.find(',', pos);
    out.push_back(std::stoull(s.substr(pos, comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

int cmd_demo(const std::vector<std::string>& args, bool bench) {
  DemoOptions o;
  if (bench) {
    o.warmup = 50;
    o.reps = 500;
    o.stream_frames = 400;
    o.compare_python = true;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Fatal(make_error(Errc::invalid_argument, a + " needs a value"));
      return args[++i];
    };
    if (a == "--quick") {
      o.warmup = 3;
      o.reps = 20;
      o.stream_frames = 20;
    } else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--csv") o.csv_path = next();
    else if (a == "--agent") o.agent_path = next();
    else if (a == "--sizes") o.sizes = parse_sizes(next());
    else if (a == "--chunk") o.chunk_bytes = std::stoull(next());
    else if (a == "--window") o.window = std::stoi(next());
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::stoul(next()));
    else if (a == "--no-python") o.compare_python = false;
    else if (a == "--compare-only") o.compare_python = o.compare_only = true;
    else if (a == "--python") o.python = next();
    else if (a == "--python-script") o.python_script = next();
    else if (a == "--configs") {
      o.configs.clear();
      std::string s = next();
      size_t pos = 0;
      while (pos <= s.size()) {
        auto c = s.find(',', pos);
        o.configs.push_back(s.substr(pos, c - pos));
        if (c == std::string::npos) break;
        pos = c + 1;
      }
    } else throw Fatal(make_error(Errc::invalid_argument, "demo: unknown option '" + a + "'"));
  }
  for (const auto& c : o.configs) {
    auto spec = protocol::CodecSpec::parse(c.substr(0, c.find('/')));
    if (!spec) throw Fatal(spec.error());
  }
  return run_demo(o);
}

}  // namespace

int tracrctl_main(int argc, char** argv) {
  // A pipe to an agent that died must be an error value, not a signal that
  // kills tracrctl before it has written what it received.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      usage();
      return args.empty() ? 2 : 0;
    }
    const std::string cmd = args[0];
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (cmd == "demo") return cmd_demo(rest, false);
    if (cmd == "run") return cmd_run(rest);
    if (cmd == "link") return cmd_link(rest);
    if (cmd == "plan") return cmd_plan(rest);
    if (cmd == "train") return cmd_train(rest);
    if (cmd == "report") return cmd_report(rest);
    if (cmd == "results") return cmd_results(rest);
    if (cmd == "models") return cmd_models(rest);
    if (cmd == "profile") return cmd_profile(rest);
    if (cmd == "devices") return cmd_devices(rest);
    if (cmd == "agents") return cmd_agents(rest);
    if (cmd == "bench") {
      if (rest.empty() || rest[0] != "protocol") {
        std::fputs("tracrctl bench: expected 'protocol'\n", stderr);
        return 2;
      }
      return cmd_demo(std::vector<std::string>(rest.begin() + 1, rest.end()), true);
    }
    if (cmd == "codecs") {
      for (const auto& c : protocol::list_codecs()) std::puts(c.c_str());
      return 0;
    }
    if (cmd == "version") {
      std::printf("tracrctl %s, tensor-frame protocol 1\n", agent::kAgentVersion);
      return 0;
    }
    fmt::print(stderr, "tracrctl: unknown command '{}'\n", cmd);
    usage();
    return 2;
  } catch (const Fatal& f) {
    fmt::print(stderr, "tracrctl: {}\n", f.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    // A number option that is not a number (std::stoi and friends).
    fmt::print(stderr, "tracrctl: an option expected a number: {}\n", e.what());
    return 2;
  } catch (const std::out_of_range& e) {
    fmt::print(stderr, "tracrctl: an option's number is out of range: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tracrctl: {}\n", e.what());
    return 1;
  }
}

}  // namespace tracr::controller
