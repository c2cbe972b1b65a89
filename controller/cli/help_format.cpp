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

std::string wrap_words(const std::string& text, int width) {
  if (width <= 0) return text;
  std::string out, line;
  size_t i = 0;
  auto flush = [&](bool nl) {
    out += line;
    if (nl) out += '\n';
    line.clear();
  };
  while (i < text.size()) {
    if (text[i] == '\n') {
      flush(true);
      ++i;
      continue;
    }
    const size_t end = text.find_first_of(" \n", i);
    const std::string word = text.substr(i, end == std::string::npos ? std::string::npos : end - i);
    if (!line.empty() && static_cast<int>(line.size() + 1 + word.size()) > width) flush(true);
    line += (line.empty() ? "" : " ") + word;
    i = end == std::string::npos ? text.size() : end;
    if (i < text.size() && text[i] == ' ') ++i;
  }
  flush(false);
  return out;
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
