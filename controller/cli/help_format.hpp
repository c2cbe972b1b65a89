// Help text that fits the terminal: option and command descriptions, the
// command's own description and the footer wrapped
// at word boundaries to the terminal's width (stdout a terminal: its width;
// otherwise $COLUMNS when set; otherwise not wrapped), continuation lines
// indented under the description column.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/text.hpp"

namespace CLI {
class Formatter;
}

namespace tracr::controller {

// The width help and tables should fit: the terminal's columns, else
// $COLUMNS, else 0 (unknown: do not wrap).
int terminal_width();
// The same for a table's width argument: 0 when unknown (no limit).
inline size_t table_width() { return static_cast<size_t>(terminal_width() > 0 ? terminal_width() : 0); }

using core::wrap_words;  // core/text.hpp

// A CLI11 formatter that wraps descriptions to terminal_width(); set on the
// App before its subcommands are added (they copy it).
std::shared_ptr<CLI::Formatter> wrapping_formatter();

}  // namespace tracr::controller
