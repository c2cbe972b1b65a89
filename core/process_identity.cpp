#include "core/process_identity.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tracr::core {

// Fields of /proc/<pid>/stat after the command name: state (field 3) and
// starttime (field 22). False when the process does not exist or /proc is
// unavailable.
namespace {
bool proc_stat(int64_t pid, char* state, int64_t* start_ticks) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return false;
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  std::vector<std::string> f;
  while (rest >> field) f.push_back(field);
  // f[0] = state (field 3), f[19] = starttime (field 22).
  if (f.size() < 20) return false;
  *state = f[0].empty() ? '?' : f[0][0];
  *start_ticks = std::strtoll(f[19].c_str(), nullptr, 10);
  return true;
}

}  // namespace

int64_t self_start_ticks() {
  char st;
  int64_t ticks = 0;
  return proc_stat(getpid(), &st, &ticks) ? ticks : 0;
}

int64_t process_start_ticks(int64_t pid) {
  char st;
  int64_t ticks = 0;
  return pid > 0 && proc_stat(static_cast<pid_t>(pid), &st, &ticks) ? ticks : 0;
}

std::string start_ticks_shell(const std::string& pid) {
  // Fields after the command name (which may hold spaces): state is the 1st, starttime the 20th.
  return "sed 's/.*) //' /proc/" + pid + "/stat 2>/dev/null | cut -d' ' -f20";
}

bool process_alive(int64_t pid, int64_t start_ticks) {
  if (pid <= 0) return false;
  if (pid == getpid()) return true;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  char state = '?';
  int64_t ticks = 0;
  if (!proc_stat(pid, &state, &ticks)) return true;  // exists (kill said so), no /proc: assume alive
  if (state == 'Z' || state == 'X') return false;
  if (start_ticks > 0 && ticks != start_ticks) return false;  // pid reused
  return true;
}

}  // namespace tracr::core
