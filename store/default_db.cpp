#include "store/default_db.hpp"

#include <cstdlib>
#include <filesystem>

namespace tracr::store {

std::string default_results_db() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("TRACR_OUTPUT"); env && *env) return env;
  const std::string here = "results/tracr.db";
  std::error_code ec;
  if (fs::exists(here, ec)) return here;
#ifdef TRACR_SOURCE_DIR
  const fs::path project = fs::path(TRACR_SOURCE_DIR) / "results" / "tracr.db";
  if (fs::exists(project, ec)) return project.string();
#endif
  return here;
}

}  // namespace tracr::store
