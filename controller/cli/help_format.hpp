// Help text that fits the terminal: option and command descriptions, the
// command's own description and the footer wrapped
// at word boundaries to the terminal's width (stdout a terminal: its width;
// otherwise $COLUMNS when set; otherwise not wrapped), continuation lines
// indented under the description column.
#pragma once

#include <memory>
#include <string>

namespace CLI {
class Formatter;
}

namespace tracr::controller {

// The width help and tables should fit: the terminal's columns, else
// $COLUMNS, else 0 (unknown: do not wrap).
int terminal_width();

// `text` broken at spaces into lines of at most `width` characters (a word
// longer than that stays whole); width <= 0 leaves it as it is.
std::string wrap_words(const std::string& text, int width);

// A CLI11 formatter that wraps descriptions to terminal_width(); set on the
// App before its subcommands are added (they copy it).
std::shared_ptr<CLI::Formatter> wrapping_formatter();

}  // namespace tracr::controller
