// Text every exporter and table shares: a JSON number, an RFC 4180 CSV
// field, and the aligned table every command prints.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace tracr::core {

// Nanoseconds as milliseconds with three decimals ("12.345").
std::string format_ms(double ns);
// A JSON number: integral values as integers ("1500000", not "1.5e+06"),
// non-finite as null.
std::string json_num(double v);
// An RFC 4180 CSV field: quoted (quotes doubled) when it holds a comma, a
// quote or a line break, else as is.
std::string csv_field(const std::string& s);
// `s` safe to write to a terminal: control bytes (ESC and the rest of C0,
// and DEL) as the text \xNN, so that a name from a database or a peer
// cannot move the cursor, recolour or retitle the terminal (#24). Line
// breaks and tabs are kept when `keep_lines` (messages), escaped otherwise
// (table cells). Other bytes, UTF-8 included, are kept.
std::string terminal_text(const std::string& s, bool keep_lines = true);
// Rows of cells, one line each (each cell through terminal_text), columns padded to their widest cell;
// columns listed in `left` are left-aligned, the others right-aligned;
// trailing spaces removed.
std::string align(const std::vector<std::vector<std::string>>& rows, const std::set<size_t>& left = {});
// `text` broken at spaces into lines of at most `width` characters (a word
// longer than that stays whole); width <= 0 leaves it as it is.
std::string wrap_words(const std::string& text, int width);
// `align` with the last column (a message) wrapped at words to fit `width`
// characters under a hanging indent; where the other columns leave fewer
// than 24 characters, the message goes on the next lines, indented by 4.
// width 0: exactly `align`.
std::string align_wrap_last(const std::vector<std::vector<std::string>>& rows, const std::set<size_t>& left,
                            size_t width);
// `align` fitted to `width` characters (0: no limit): while its widest line
// is wider, the next column of `drop` (indices into every row, in the order
// given) is left out. `dropped` gets the indices left out.
std::string align_fit(const std::vector<std::vector<std::string>>& rows, const std::set<size_t>& left, size_t width,
                      const std::vector<size_t>& drop, std::vector<size_t>* dropped = nullptr);

// `align_fit` of a table whose first `header_rows` rows name the columns,
// followed, when columns were left out, by a line naming them ("(cipher,
// started left out to fit 80 columns<hint>)"), wrapped to `width`.
std::string fit_table(const std::vector<std::vector<std::string>>& rows, const std::set<size_t>& left, size_t width,
                      const std::vector<size_t>& drop, size_t header_rows = 1, const std::string& hint = "");

// A line of fields separated by two spaces ("  started X  ended Y  duration
// Z"), wider than `width`, broken between fields; continuation lines are
// indented two spaces more than the line. Fits or width 0: as it is.
std::string fit_fields(const std::string& line, size_t width);

}  // namespace tracr::core
