// Typed command-line values shared by tracr-agent's and tracrctl's command
// lines (CLI11, Debian's libcli11-dev). CLI11 is a heavy header: include this
// only in the files that build a command line (agent/agent_args.cpp,
// controller/cli/cli.cpp).
//
// Each helper adds an option whose help shows its type and range, and whose
// bad value is a CLI::ValidationError reading
//   --reps: expected an integer 1..1000000, got 'abc'
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace tracr::agent::cli {

// An integer in [lo, hi] into `target` (any integer type).
template <class T>
CLI::Option* add_int(CLI::App* app, const std::string& name, T& target, long long lo, long long hi,
                     const std::string& help) {
  auto* o = app->add_option(name, target, help);
  o->type_name(fmt::format("INT {}..{}", lo, hi));
  o->check(CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
          return fmt::format("expected an integer {}..{}, got '{}'", lo, hi, s);
        return {};
      },
      ""));
  return o;
}

// A number in [lo, hi] (`unit` names it: "milliseconds", "Mbit/s") into `target`
// (double or std::optional<double>).
template <class T>
CLI::Option* add_number(CLI::App* app, const std::string& name, T& target, double lo, double hi,
                        const std::string& unit, const std::string& help) {
  auto* o = app->add_option(name, target, help);
  o->type_name(fmt::format("{} {:g}..{:g}", unit, lo, hi));
  o->check(CLI::Validator(
      [lo, hi, unit](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
          return fmt::format("expected {} {:g}..{:g}, got '{}'", unit, lo, hi, s);
        return {};
      },
      ""));
  return o;
}

// A validator for values of a fixed form: `parse` returns "" when the text
// is good, else what was expected ("expected K/N with 0 <= K < N").
template <class F>
CLI::Validator form(F parse) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        const std::string why = parse(s);
        return why.empty() ? std::string{} : fmt::format("{}, got '{}'", why, s);
      },
      "");
}

// One line from a CLI11 parse error: "unknown option --bogus" for an option
// no command takes, else CLI11's text ("--reps: expected ...").
inline std::string error_text(const CLI::ParseError& e) {
  std::string msg = e.what();
  while (!msg.empty() && msg.back() == '\n') msg.pop_back();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // "The following arguments were not expected: 5 --tail" -> the option
    // no command takes, else the first stray word.
    const auto colon = msg.find(": ");
    std::istringstream words(colon == std::string::npos ? msg : msg.substr(colon + 2));
    std::string w, first, option;
    while (words >> w) {
      if (first.empty()) first = w;
      if (option.empty() && w.size() > 1 && w[0] == '-') option = w;
    }
    msg = option.empty() ? "unexpected argument " + first : "unknown option " + option;
  } else if (dynamic_cast<const CLI::RequiredError*>(&e) && msg == "A subcommand is required") {
    msg = "expected a command";
  }
  return msg;
}

}  // namespace tracr::agent::cli
