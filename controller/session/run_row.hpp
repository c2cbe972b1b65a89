// What run and train share at the two ends of a session: the run row from
// begin_run to finish_run, and how a signal that ends the session is named,
// waited for and turned into an exit code.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "protocol/error.hpp"
#include "store/results.hpp"

namespace tracr::controller {

// After SIGINT, SIGTERM or SIGHUP the session sends STOP to the agents that
// drive it (participants, data owners) and waits this long for what they
// still deliver before it stops them.
inline constexpr std::chrono::seconds kStopGrace{10};

// "SIGINT (Ctrl-C)", "SIGTERM", "SIGHUP"; "a signal" for any other number.
const char* signal_name(int sig);
// The exit code of a session a signal ended: 128 + sig (130, 143, 129).
int signal_exit_code(int sig);

// How a session ended.
struct SessionOutcome {
  store::RunStatus status = store::RunStatus::completed;
  std::string failure;  // "" when completed
};
// completed when there is no failure and no signal; interrupted when a
// signal arrived (failure "interrupted by <signal_name>", then "; the run's
// last error: <failure>" where one was recorded); failed otherwise.
SessionOutcome session_outcome(std::string failure, int sig);

// The run row of one session. Whatever ends the command (an exception
// included), the row is finished: failed with "tracrctl <command> ended
// abnormally" unless finish() ran.
class RunRowGuard {
 public:
  RunRowGuard(store::ResultsDb& db, int64_t run_id, std::string command)
      : db_(db), run_id_(run_id), command_(std::move(command)) {}
  ~RunRowGuard();
  RunRowGuard(const RunRowGuard&) = delete;
  RunRowGuard& operator=(const RunRowGuard&) = delete;

  // Records the outcome: a run_interrupted or run_failed event naming the
  // failure, then the row's status and error. The error of finish_run
  // passes through (the caller keeps the cause elsewhere); the guard no
  // longer fires either way.
  Status finish(const SessionOutcome& end);

 private:
  store::ResultsDb& db_;
  int64_t run_id_;
  std::string command_;
  bool finished_ = false;
};

}  // namespace tracr::controller
