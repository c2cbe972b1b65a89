// tracrctl report: the figures of analysis/ drawn by matplotlib into a
// folder, and the page that inlines them.
#include "controller/commands/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/figures.hpp"
#include "analysis/report.hpp"
#include "core/atomic_file.hpp"
#include "core/user_error.hpp"
#include "store/default_db.hpp"

namespace tracr::controller {

using namespace tracr::core;
using namespace tracr::store;
using namespace tracr::analysis;

namespace {

// A private folder for the page's figures when --figures names none; removed after.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tracr-report-XXXXXX").string();
    if (::mkdtemp(tmpl.data())) path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

}  // namespace

Status cmd_report(const ReportOptions& opt) {
  if (opt.out.empty() && opt.figures.empty()) {
    return core::bad_input(std::string("expected -o FILE.html and/or --figures DIR"));
  }
  FigureOptions fo;
  fo.size = opt.size;
  if (opt.log_y || opt.linear_y) fo.log_y = opt.log_y;
  fo.only = opt.only;
  const std::string db_path = opt.db.empty() ? default_results_db() : opt.db;
  auto db = ResultsDb::open_readonly(db_path);
  if (!db) {
    return core::command_failed(user_text(db.error()));
  }
  std::vector<int64_t> runs;
  for (const auto& a : opt.runs) {
    auto id = run_id_arg(*db, a);
    if (!id) {
      return core::bad_input(user_text(id.error()));
    }
    runs.push_back(*id);
  }
  auto figs = build_figures(*db, runs, fo);
  if (!figs) {
    return figs.error().code == Errc::invalid_argument ? core::bad_input(user_text(figs.error()))
                                                : core::command_failed(user_text(figs.error()));
  }
  ScratchDir scratch;
  const std::string dir = opt.figures.empty() ? scratch.path : opt.figures;
  if (dir.empty()) return core::command_failed(std::string("cannot create a temporary folder for the figures"));
  if (auto st = write_figures(*figs, dir, fo); !st) {
    return core::command_failed(user_text(st.error()));
  }
  std::vector<std::string> ids, absent;
  for (const auto& f : *figs) ids.push_back(f.id);
  for (const auto& id : figure_ids()) {  // what the runs have no data for, said rather than left out silently
    bool drawn = false;
    for (const auto& f : *figs) drawn = drawn || f.id == id || f.id.rfind(id + "_", 0) == 0;
    const bool asked = opt.only.empty() || std::find(opt.only.begin(), opt.only.end(), id) != opt.only.end();
    if (!drawn && asked) absent.push_back(id);
  }
  if (!opt.figures.empty())
    fmt::print("wrote {} figures to {} (PDF, SVG, PNG, CSV and the script that draws each; {} size), from {}: {}\n",
               figs->size(), opt.figures, fo.size, db_path, fmt::join(ids, ", "));
  if (!absent.empty()) fmt::print("no data in these runs for: {}\n", fmt::join(absent, ", "));
  if (!opt.out.empty()) {
    auto page = render_report(*db, runs, *figs, dir);
    if (!page) {
      return core::command_failed(user_text(page.error()));
    }
    if (auto st = write_file(opt.out, *page); !st) {
      return core::command_failed(user_text(st.error()));
    }
    fmt::print("wrote {} ({} runs from {}, {} figures, {} bytes, opens without a network)\n", opt.out, runs.size(),
               db_path, figs->size(), page->size());
  }
  return {};
}

}  // namespace tracr::controller
