// tracrctl's and tracr-agent's command lines, run as the built executables:
// --help on every command, typed errors naming the command and option, exit
// codes, --set overrides with their origin, no LibTorch backtrace ever shown,
// and the generated bash completion.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/system/system_util.hpp"

namespace {

using tracr::testing::CmdResult;
using tracr::testing::sh;
using tracr::testing::TempDir;
using Cmd = CmdResult;

const std::string kCtl = tracr::testing::tracrctl();
const std::string kAgent = std::string(TRACR_BIN_DIR) + "/tracr-agent";

Cmd ctl(const std::string& args) { return sh(kCtl + " " + args); }

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// What a user must never see: LibTorch's backtrace.
void expect_no_backtrace(const Cmd& r) {
  EXPECT_FALSE(has(r.out, "Exception raised from")) << r.out;
  EXPECT_FALSE(has(r.out, "frame #")) << r.out;
}

// The line of `--show-config` output for one setting.
std::string setting_line(const std::string& out, const std::string& name) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return line;
  return "";
}

TEST(Cli, EveryCommandAnswersHelpWithItsOwnOptions) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"run", {"EXPERIMENT", "--show-config", "--in-process", "--wide", "--db", "--trust-new-hosts", "--no-progress", "--agent",
               "--set"}},
      {"train", {"--resume", "--db", "--show-config", "--trust-new-hosts", "--no-progress", "--agent", "--set"}},
      {"link", {"probe"}},
      {"link probe", {"--db", "--trust-new-hosts", "--agent", "--set"}},
      {"plan", {"--validate", "--no-store", "--objective", "--max-latency-ms", "--max-energy-j", "--link",
                "--up-mbit", "--down-mbit", "--rtt-ms", "--radio", "--codecs", "--splits", "--set", "--db"}},
      {"report", {"-o,--out", "--figures", "--db"}},
      {"results", {"list", "show", "compare", "export", "rm", "schema", "migrate"}},
      {"results list", {"--model", "--status", "--name", "--limit", "--db"}},
      {"results show", {"RUN", "--db", "--wide"}},
      {"results compare", {"RUN", "--db"}},
      {"results export", {"--csv", "--json", "--db"}},
      {"results rm", {"RUN", "--db"}},
      {"results schema", {"--markdown"}},
      {"results migrate", {"--db"}},
      {"devices", {"check", "setup"}},
      {"devices check", {"--devices", "--trust-new-hosts", "--agent", "--experiment"}},
      {"devices setup", {"--devices", "--trust-new-hosts", "--agent", "--yes", "--dry-run"}},
      {"agents", {"start", "deploy", "status", "logs", "stop"}},
      {"agents start", {"EXPERIMENT", "--trust-new-hosts", "--agent", "--set"}},
      {"agents deploy", {"--devices", "--agent"}},
      {"agents status", {"--devices", "--state-dir"}},
      {"agents logs", {"--devices", "--tail"}},
      {"agents stop", {"--devices", "--state-dir"}},
      {"models", {}},
      {"profile", {"MODEL", "--input-shape", "SHAPE", "--batch", "--reps", "--weights", "--device", "--csv", "--json"}},
      {"demo", {"--quick", "--reps", "--csv", "--agent", "--sizes", "--chunk", "--window", "--threads", "--configs"}},
      {"bench", {"protocol"}},
      {"bench protocol", {"--quick", "--reps", "--threads", "--no-python", "--compare-only", "--python"}},
      {"convert", {"OLD.yaml", "-o,--output", "--force"}},
      {"codecs", {}},
      {"version", {}},
      {"completion", {"SHELL", "bash"}},
  };
  for (const auto& [cmd, options] : commands) {
    for (const char* flag : {"--help", "-h"}) {
      auto r = ctl(cmd + " " + flag);
      EXPECT_EQ(r.status, 0) << cmd << " " << flag << ": " << r.out;
      EXPECT_TRUE(has(r.out, "tracrctl " + cmd)) << cmd << ": the usage names the command\n" << r.out;
      for (const auto& o : options) EXPECT_TRUE(has(r.out, o)) << cmd << " --help lacks " << o << "\n" << r.out;
    }
  }
  // Typed options show their type and range.
  auto p = ctl("profile --help");
  EXPECT_TRUE(has(p.out, "--reps INT 1..1000000")) << p.out;
}

TEST(Cli, AloneItPrintsEveryCommandAndExits2) {
  auto r = ctl("");
  EXPECT_EQ(r.status, 2) << r.out;
  for (const char* c : {"run", "train", "link", "plan", "report", "results", "devices", "agents", "models", "profile",
                        "demo", "bench", "codecs", "version", "completion"})
    EXPECT_TRUE(has(r.out, std::string("  ") + c + " ")) << c << "\n" << r.out;
  EXPECT_TRUE(has(r.out, "130 SIGINT, 143 SIGTERM")) << "the exit codes are documented\n" << r.out;
  auto help = ctl("--help");
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_TRUE(has(help.out, "profile")) << help.out;
}

TEST(Cli, BadValuesNameTheCommandTheOptionAndWhatWasExpected) {
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {"profile fmnist_cnn --reps abc", "tracrctl profile: --reps: expected an integer 1..1000000, got 'abc'"},
      {"profile fmnist_cnn --batch -1", "tracrctl profile: --batch: expected an integer 1..65536, got '-1'"},
      {"profile alexnet --input-shape 3,0,224",
       "tracrctl profile: --input-shape: expected sizes like 3,224,224 or 4 or 16,64"},
      {"profile alexnet --input-shape 3,x,9", "--input-shape: expected sizes like"},
      {"demo --reps 1.5", "tracrctl demo: --reps: expected an integer"},
      {"bench protocol --window 0", "tracrctl bench protocol: --window: expected an integer 1..4096, got '0'"},
      {"plan last --max-latency-ms fast", "tracrctl plan: --max-latency-ms: expected ms 0..1e+12, got 'fast'"},
      {"plan last --participant-from 99999999999999999999",
       "tracrctl plan: --participant-from: expected run ids RUN or RUN1,RUN2,..."},
      {"results list --limit -3", "tracrctl results list: --limit: expected an integer"},
      {"agents logs --tail lots", "tracrctl agents logs: --tail: expected an integer"},
      {"run x.yaml --set warmup", "tracrctl run: --set: expected KEY=VALUE"},
      {"completion zsh", "tracrctl completion: SHELL"},
      {"profile", "tracrctl profile: MODEL is required"},
      {"results", "tracrctl results: expected a command: list, show, compare, exits, export, rm, schema, migrate"},
      {"bench", "tracrctl bench: expected a command: protocol"},
  };
  for (const auto& c : cases) {
    auto r = ctl(c.args);
    EXPECT_EQ(r.status, 2) << c.args << ": " << r.out;
    EXPECT_TRUE(has(r.out, c.expect)) << c.args << " should say: " << c.expect << "\n" << r.out;
    const std::string cmd = c.expect.substr(0, c.expect.find(':'));
    if (cmd.rfind("tracrctl ", 0) == 0) {
      EXPECT_TRUE(has(r.out, "run '" + cmd + " --help'")) << c.args << "\n" << r.out;
    }
    expect_no_backtrace(r);
  }
}

// Every command returns its ending error to one place (#22): it is written
// once, as "tracrctl COMMAND: message", and one mapping gives the status (2
// for what the user gave, 1 for a failure).
TEST(Cli, EveryCommandsEndingErrorIsWrittenOnceUnderItsNameWithOneExitMapping) {
  TempDir d;
  const std::string none = (d.path / "none.yaml").string();
  const std::string garbage = d.file("garbage.db", "this is not an SQLite database, only text\n");
  struct Case {
    std::string args, line;
    int status;
  };
  const std::vector<Case> cases = {
      {"run " + none, "tracrctl run: " + none + ": experiment file does not exist", 2},
      {"train " + none, "tracrctl train: " + none + ": experiment file does not exist", 2},
      {"link probe " + none, "tracrctl link probe: " + none + ": experiment file does not exist", 2},
      {"agents start " + none, "tracrctl agents start: " + none + ": experiment file does not exist", 2},
      {"convert " + none, "tracrctl convert: " + none + ": cannot read the file", 2},
      {"devices check --devices " + none, "tracrctl devices check: " + none + ": devices file does not exist", 2},
      {"agents stop --devices " + none, "tracrctl agents stop: " + none + ": devices file does not exist", 2},
      {"report 1 -o " + d.file("r.html", "") + " --db " + garbage, "tracrctl report: ", 1},
      {"results list --db " + garbage, "tracrctl results list: ", 1},
      {"results list --status done --db " + garbage,
       "tracrctl results list: --status: expected running, completed, failed or interrupted, got 'done'\nrun "
       "'tracrctl results list --help'",
       2},
      {"plan 1 --db " + garbage, "tracrctl plan: ", 1},
  };
  for (const auto& c : cases) {
    auto r = ctl(c.args);
    EXPECT_EQ(r.status, c.status) << c.args << "\n" << r.out;
    const size_t at = r.out.find(c.line);
    ASSERT_NE(at, std::string::npos) << c.args << " should say: " << c.line << "\n" << r.out;
    // Once: the command does not write it itself as well.
    const std::string head = c.line.substr(0, c.line.find(": ") + 2);
    EXPECT_EQ(r.out.find(head, at + 1), std::string::npos) << c.args << ": written twice\n" << r.out;
    expect_no_backtrace(r);
  }
}

TEST(Cli, UnknownOptionsAndCommandsNameTheCommand) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run x.yaml --bogus", "tracrctl run: unknown option --bogus"},
      {"train x.yaml --bogus", "tracrctl train: unknown option --bogus"},
      {"link probe x.yaml --show-config", "tracrctl link probe: unknown option --show-config"},
      {"results show 1 --model alexnet", "tracrctl results show: unknown option --model"},
      {"results frobnicate", "tracrctl results: unknown command 'frobnicate'; expected one of: list, show, compare"},
      {"devices check --nope", "tracrctl devices check: unknown option --nope"},
      {"agents start x.yaml --tail 5", "tracrctl agents start: unknown option --tail"},
      {"demo --nope", "tracrctl demo: unknown option --nope"},
      {"bench protocol --nope", "tracrctl bench protocol: unknown option --nope"},
      {"report 1 -o x.html --nope", "tracrctl report: unknown option --nope"},
      {"report 1", "tracrctl report: expected -o FILE.html and/or --figures DIR"},
      {"frobnicate", "tracrctl: unknown command 'frobnicate'; expected one of: run, train, link"},
  };
  for (const auto& [args, expect] : cases) {
    auto r = ctl(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.out;
    EXPECT_TRUE(has(r.out, expect)) << args << " should say: " << expect << "\n" << r.out;
  }
}

TEST(Cli, SetOverridesTheFileAndTheEnvironmentAndShowConfigNamesIt) {
  TempDir d;
  const std::string exp = d.file("exp.yaml", "model: fmnist_cnn\nwarmup: 2\nrepetitions: 4\n");
  auto base = ctl("run " + exp + " --show-config");
  ASSERT_EQ(base.status, 0) << base.out;
  EXPECT_TRUE(has(setting_line(base.out, "warmup"), exp + ":2:9")) << setting_line(base.out, "warmup");

  // After the file and after TRACR_*: --set wins, and says so.
  auto r = sh("TRACR_WARMUP=3 " + kCtl + " run " + exp + " --set warmup=7 --set dataset.type=synthetic " +
              "--set 'split=[1, 3]' --show-config");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string warmup = setting_line(r.out, "warmup");
  EXPECT_TRUE(has(warmup, " 7 ")) << warmup;
  EXPECT_TRUE(has(warmup, "--set warmup=7")) << warmup;
  EXPECT_TRUE(has(setting_line(r.out, "split"), "--set split=[1, 3]")) << setting_line(r.out, "split");
  EXPECT_TRUE(has(setting_line(r.out, "repetitions"), exp + ":3:")) << "the file's other values stay";
  auto env_only = sh("TRACR_WARMUP=3 " + kCtl + " run " + exp + " --show-config");
  EXPECT_TRUE(has(setting_line(env_only.out, "warmup"), "env TRACR_WARMUP")) << env_only.out;

  // train takes --set too.
  auto t = ctl("train " + exp + " --set seed=11 --show-config");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_TRUE(has(setting_line(t.out, "seed"), "--set seed=11")) << t.out;

  // A bad key (with a suggestion) and a bad value: exit 2, naming --set key=value.
  auto key = ctl("run " + exp + " --set warmpu=1 --show-config");
  EXPECT_EQ(key.status, 2) << key.out;
  EXPECT_TRUE(has(key.out, "--set warmpu=1: unknown setting 'warmpu' (did you mean 'warmup'?)")) << key.out;
  auto value = ctl("run " + exp + " --set warmup=abc --show-config");
  EXPECT_EQ(value.status, 2) << value.out;
  EXPECT_TRUE(has(value.out, "--set warmup=abc: warmup: expected")) << value.out;
  auto probe = ctl("link probe " + exp + " --set warmup=-1");
  EXPECT_EQ(probe.status, 2) << probe.out;
  EXPECT_TRUE(has(probe.out, "--set warmup=-1: warmup")) << probe.out;
  // plan: --set only with an EXPERIMENT.yaml basis.
  auto plan = ctl("plan 1 --set warmup=1 --db " + (d.path / "none.db").string());
  EXPECT_EQ(plan.status, 2) << plan.out;
  EXPECT_TRUE(has(plan.out, "--set applies to an EXPERIMENT.yaml basis")) << plan.out;
  auto plan_bad = ctl("plan " + exp + " --set modle=alexnet");
  EXPECT_EQ(plan_bad.status, 2) << plan_bad.out;
  EXPECT_TRUE(has(plan_bad.out, "--set modle=alexnet: unknown setting 'modle' (did you mean 'model'?)")) << plan_bad.out;
}

TEST(Cli, ProfileWithAShapeTheModelCannotTakeNamesModelAndLayerWithoutABacktrace) {
  auto a = ctl("profile alexnet --input-shape 3,28,28 --reps 1");
  EXPECT_EQ(a.status, 2) << a.out;
  expect_no_backtrace(a);
  EXPECT_TRUE(has(a.out, "tracrctl profile: alexnet")) << a.out;
  EXPECT_TRUE(has(a.out, "layer ")) << "the layer that failed\n" << a.out;
  EXPECT_TRUE(has(a.out, "(its default: 3,224,224)")) << "the expected shape\n" << a.out;
  EXPECT_EQ(std::count(a.out.begin(), a.out.end(), '\n'), 1) << "one line\n" << a.out;

  // Any rank is accepted on the command line; the model says what it takes.
  auto flat = ctl("profile alexnet --input-shape 224 --reps 1");
  EXPECT_EQ(flat.status, 2) << flat.out;
  expect_no_backtrace(flat);
  EXPECT_TRUE(has(flat.out, "(its default: 3,224,224)")) << flat.out;

  auto r = ctl("profile resnet18 --input-shape 1,64,64 --reps 1");
  EXPECT_EQ(r.status, 2) << r.out;
  expect_no_backtrace(r);
  EXPECT_TRUE(has(r.out, "resnet18")) << r.out;
  EXPECT_TRUE(has(r.out, "conv1")) << "the first convolution expects 3 channels\n" << r.out;
}

TEST(Cli, CompletionScriptComesFromTheCommandTree) {
  auto script = ctl("completion bash");
  ASSERT_EQ(script.status, 0) << script.out;
  EXPECT_TRUE(has(script.out, "'run') words='")) << script.out;
  EXPECT_TRUE(has(script.out, "--show-config")) << script.out;
  auto reg = sh("bash -c 'source <(" + kCtl + " completion bash) && complete -p tracrctl'");
  EXPECT_EQ(reg.status, 0) << reg.out;
  EXPECT_TRUE(has(reg.out, "complete -o default -F _tracrctl tracrctl")) << reg.out;
  // Completing for real: what bash would offer after these words.
  auto offer = [&](const std::string& words) {
    return sh("bash -c 'source <(" + kCtl + " completion bash) && COMP_WORDS=(tracrctl " + words +
              ") && COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) && _tracrctl && echo \"${COMPREPLY[*]}\"'")
        .out;
  };
  EXPECT_EQ(offer("run x.yaml --sh"), "--show-config\n");
  EXPECT_EQ(offer("results li"), "list\n");
  EXPECT_EQ(offer("results export 1 --cs"), "--csv\n");
  EXPECT_EQ(offer("agents st"), "start status stop\n");
  EXPECT_EQ(offer("profile alexnet --input-shape 3"), "\n") << "a value: left to file completion";
  EXPECT_EQ(offer("run x.yaml --show-config --in"), "--in-process\n") << "after a flag come options again";
  EXPECT_EQ(offer("report 1 -o --"), "\n") << "-o takes a file, not an option";
}

TEST(Cli, AgentAnswersHelpAndNamesBadOptions) {
  auto help = sh(kAgent + " --help");
  EXPECT_EQ(help.status, 0) << help.out;
  for (const char* o : {"--role", "--bind", "--connect", "--config", "--experiment", "--secret-file",
                        "--heartbeat-timeout-ms", "--cpu-quota", "--power-model", "--segments", "--worker", "--owner",
                        "--run-tag", "--resume-step", "--link-delay-ms", "--meters", "--version"})
    EXPECT_TRUE(has(help.out, o)) << o << "\n" << help.out;
  EXPECT_EQ(sh(kAgent + " -h").status, 0);
  auto version = sh(kAgent + " --version");
  EXPECT_EQ(version.status, 0) << version.out;
  EXPECT_TRUE(has(version.out, "tracr-agent ")) << version.out;

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--role SERVER --bogus", "tracr-agent: unknown option --bogus"},
      {"--role SERVER --threads abc", "tracr-agent: --threads: expected an integer 1..1024, got 'abc'"},
      {"--role TRAIN_OWNER --owner 3/2", "--owner: expected K/N with 0 <= K < N, got '3/2'"},
      {"--role SERVER --config file", "--config: expected 'stdin', got 'file'"},
      {"--role SERVER --power-model 5,1", "--power-model: expected IDLE_W,BUSY_W with 0 <= idle <= busy"},
      {"--role CLIENT", "--role must be SERVER, PARTICIPANT, TRAIN_WORKER or TRAIN_OWNER, got 'CLIENT'"},
      {"--role PARTICIPANT --config stdin", "PARTICIPANT needs --connect ENDPOINT or --in-process"},
  };
  for (const auto& [args, expect] : bad) {
    auto r = sh(kAgent + " " + args + " </dev/null");
    EXPECT_EQ(r.status, 2) << args << ": " << r.out;
    EXPECT_TRUE(has(r.out, expect)) << args << " should say: " << expect << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "run 'tracr-agent --help'")) << r.out;
  }
}

}  // namespace
