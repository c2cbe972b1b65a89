#include "controller/cli/help_format.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>

#include <CLI/CLI.hpp>

namespace tracr::controller {

int terminal_width() {
  winsize ws{};
  if (::isatty(1) && ::ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    const int v = std::atoi(c);
    if (v > 0) return v;
  }
  return 0;
}

namespace {

class WrappingFormatter : public CLI::Formatter {
 public:
  std::string make_option_desc(const CLI::Option* opt) const override {
    return wrap(CLI::Formatter::make_option_desc(opt));
  }
  // The command's description and the footer span the whole width.
  std::string make_description(const CLI::App* app) const override {
    return wrap_full(CLI::Formatter::make_description(app));
  }
  std::string make_footer(const CLI::App* app) const override { return wrap_full(CLI::Formatter::make_footer(app)); }
  std::string make_subcommand(const CLI::App* sub) const override {
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true), wrap(sub->get_description()), column_width_);
    return out.str();
  }

 private:
  std::string wrap(const std::string& desc) const {
    const int w = terminal_width();
    const int room = w - static_cast<int>(column_width_) - 1;
    return w > 0 && room >= 20 ? wrap_words(desc, room) : desc;
  }
  static std::string wrap_full(const std::string& text) { return wrap_words(text, terminal_width()); }
};

}  // namespace

std::shared_ptr<CLI::Formatter> wrapping_formatter() { return std::make_shared<WrappingFormatter>(); }

}  // namespace tracr::controller
