// tracrctl report: the report page and the figures of analysis/ written to files.
#include "controller/commands/report.hpp"

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

Status cmd_report(const ReportOptions& opt) {
  if (opt.out.empty() && opt.figures.empty()) {
    return core::bad_input(std::string("expected -o FILE.html and/or --figures DIR"));
  }
  auto db = ResultsDb::open_readonly(opt.db.empty() ? default_results_db() : opt.db);
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
  if (!opt.out.empty()) {
    auto page = render_report(*db, runs);
    if (!page) {
      return core::command_failed(user_text(page.error()));
    }
    if (auto st = write_file(opt.out, *page); !st) {
      return core::command_failed(user_text(st.error()));
    }
    fmt::print("wrote {} ({} runs, {} bytes, opens without a network)\n", opt.out, runs.size(), page->size());
  }
  if (!opt.figures.empty()) {
    auto figs = build_figures(*db, runs);
    if (!figs) {
      return core::command_failed(user_text(figs.error()));
    }
    if (auto st = write_figures(*figs, opt.figures); !st) {
      return core::command_failed(user_text(st.error()));
    }
    std::vector<std::string> ids;
    for (const auto& f : *figs) ids.push_back(f.id);
    fmt::print("wrote {} figures to {} as SVG, PDF and CSV: {}\n", figs->size(), opt.figures, fmt::join(ids, ", "));
  }
  return {};
}

}  // namespace tracr::controller
