// What run and train share at the ends of a session (controller/session/
// run_row.hpp), on a real SQLite file: the run row is finished whatever ends
// the command, and a signal, a failure or both give the same status, text and
// event in both commands.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <optional>
#include <string>
#include <vector>

#include "controller/session/run_row.hpp"
#include "core/user_error.hpp"
#include "store/results.hpp"

namespace tracr::controller {
using namespace tracr::store;
namespace {

namespace fs = std::filesystem;

class SessionDb : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tracr-session-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto db = ResultsDb::open(dir_ + "/tracr.db");
    ASSERT_TRUE(db.ok()) << db.error().str();
    db_.emplace(std::move(*db));
    RunInfo info;
    info.name = "session";
    info.model = "alexnet";
    info.config_yaml = "model: alexnet\n";
    auto id = db_->begin_run(info);
    ASSERT_TRUE(id.ok()) << id.error().str();
    run_ = *id;
  }
  void TearDown() override {
    db_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  RunRow row() {
    auto r = db_->get_run(run_);
    EXPECT_TRUE(r.ok()) << r.error().str();
    return r.ok() ? *r : RunRow{};
  }
  std::vector<std::string> event_kinds() {
    std::vector<std::string> kinds;
    auto ev = db_->events(run_);
    EXPECT_TRUE(ev.ok()) << ev.error().str();
    if (ev.ok())
      for (const auto& e : *ev) kinds.push_back(e.kind);
    return kinds;
  }

  std::string dir_;
  std::optional<ResultsDb> db_;
  int64_t run_ = 0;
};

// One mapping from an error to the exit status docs/COMMANDS.md documents.
TEST(ExitCode, UsageAndConfigurationErrorsAreTwoEveryOtherFailureIsOne) {
  EXPECT_EQ(core::exit_code(make_error(Errc::config, "exp.yaml:3:1: split")), 2);
  EXPECT_EQ(core::exit_code(make_error(Errc::invalid_argument, "--last expects a number")), 2);
  EXPECT_EQ(core::exit_code(make_error(Errc::not_found, "no run 7")), 1);
  EXPECT_EQ(core::exit_code(make_error(Errc::io, "database or disk is full")), 1);
  EXPECT_EQ(core::exit_code(make_error(Errc::crypto_backend, "no random bytes")), 1);
  EXPECT_EQ(core::exit_code(make_error(Errc::unreachable, "device pi: no route")), 1);
}

TEST(SessionOutcome, NoFailureAndNoSignalIsCompleted) {
  const auto end = session_outcome("", 0);
  EXPECT_EQ(end.status, RunStatus::completed);
  EXPECT_EQ(end.failure, "");
}

TEST(SessionOutcome, SignalNamesItselfTheSameWayForEveryCommand) {
  EXPECT_EQ(session_outcome("", SIGINT).failure, "interrupted by SIGINT (Ctrl-C)");
  EXPECT_EQ(session_outcome("", SIGTERM).failure, "interrupted by SIGTERM");
  EXPECT_EQ(session_outcome("", SIGHUP).failure, "interrupted by SIGHUP");
  EXPECT_EQ(session_outcome("", SIGHUP).status, RunStatus::interrupted);
  EXPECT_EQ(signal_exit_code(SIGINT), 130);
  EXPECT_EQ(signal_exit_code(SIGTERM), 143);
  EXPECT_EQ(signal_exit_code(SIGHUP), 129);
}

TEST(SessionOutcome, FailureWithoutSignalIsFailedAndKeepsItsCause) {
  const auto end = session_outcome("database: disk I/O error", 0);
  EXPECT_EQ(end.status, RunStatus::failed);
  EXPECT_EQ(end.failure, "database: disk I/O error");
}

TEST(SessionOutcome, FailureDuringSignalIsInterruptedAndKeepsTheFailure) {
  const auto end = session_outcome("PARTICIPANT agent on p1 lost", SIGTERM);
  EXPECT_EQ(end.status, RunStatus::interrupted);
  EXPECT_EQ(end.failure, "interrupted by SIGTERM; the run's last error: PARTICIPANT agent on p1 lost");
}

TEST_F(SessionDb, GuardMarksTheRowFailedWhenTheCommandEndsAbnormally) {
  try {
    RunRowGuard guard(*db_, run_, "train");
    throw std::runtime_error("a bug in the loop");
  } catch (const std::runtime_error&) {
  }
  const RunRow r = row();
  EXPECT_EQ(r.status, RunStatus::failed);
  EXPECT_EQ(r.error, "tracrctl train ended abnormally");
}

TEST_F(SessionDb, FinishedRowIsNotOverwrittenByTheGuard) {
  {
    RunRowGuard guard(*db_, run_, "run");
    ASSERT_TRUE(guard.finish(session_outcome("", 0)).ok());
  }
  const RunRow r = row();
  EXPECT_EQ(r.status, RunStatus::completed);
  EXPECT_EQ(r.error, "");
  const auto kinds = event_kinds();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "run_failed"), 0);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "run_interrupted"), 0);
}

TEST_F(SessionDb, SignalIsRecordedAsInterruptedWithAnEvent) {
  {
    RunRowGuard guard(*db_, run_, "run");
    ASSERT_TRUE(guard.finish(session_outcome("", SIGTERM)).ok());
  }
  const RunRow r = row();
  EXPECT_EQ(r.status, RunStatus::interrupted);
  EXPECT_EQ(r.error, "interrupted by SIGTERM");
  const auto kinds = event_kinds();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "run_interrupted"), kinds.end());
}

TEST_F(SessionDb, AgentLossOrWriteErrorIsRecordedAsFailedWithAnEvent) {
  {
    RunRowGuard guard(*db_, run_, "train");
    ASSERT_TRUE(guard.finish(session_outcome("database: disk full", 0)).ok());
  }
  const RunRow r = row();
  EXPECT_EQ(r.status, RunStatus::failed);
  EXPECT_EQ(r.error, "database: disk full");
  const auto kinds = event_kinds();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "run_failed"), kinds.end());
}

}  // namespace
}  // namespace tracr::controller
