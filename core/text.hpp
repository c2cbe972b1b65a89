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
// Rows of cells, one line each, columns padded to their widest cell;
// columns listed in `left` are left-aligned, the others right-aligned;
// trailing spaces removed.
std::string align(const std::vector<std::vector<std::string>>& rows, const std::set<size_t>& left = {});

}  // namespace tracr::core
