#include "controller/session/run_row.hpp"

#include <csignal>

namespace tracr::controller {

using namespace tracr::store;

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT (Ctrl-C)";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
  }
  return "a signal";
}

int signal_exit_code(int sig) { return 128 + sig; }

SessionOutcome session_outcome(std::string failure, int sig) {
  SessionOutcome end;
  // A signal is said first: what failed meanwhile (an agent start cut short, say) follows it, so an
  // interrupted run never reads as a device's failure (#45).
  if (sig)
    failure = std::string("interrupted by ") + signal_name(sig) + (failure.empty() ? "" : "; the run's last error: " + failure);
  end.status = failure.empty() ? RunStatus::completed : sig ? RunStatus::interrupted : RunStatus::failed;
  end.failure = std::move(failure);
  return end;
}

Status RunRowGuard::finish(const SessionOutcome& end) {
  finished_ = true;
  if (!end.failure.empty())
    (void)db_.add_event(run_id_, "error", end.status == RunStatus::interrupted ? "run_interrupted" : "run_failed",
                        end.failure);
  return db_.finish_run(run_id_, end.status, end.failure);
}

RunRowGuard::~RunRowGuard() {
  if (!finished_) (void)db_.finish_run(run_id_, RunStatus::failed, "tracrctl " + command_ + " ended abnormally");
}

}  // namespace tracr::controller
