#include "core/text.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

namespace tracr::core {

std::string format_ms(double ns) { return fmt::format("{:.3f}", ns / 1e6); }

// Integral values print as integers ("1500000", not "1.5e+06").
std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"') o += '"';
    o += ch;
  }
  return o + "\"";
}

// Rows of cells printed with columns padded to their widest cell; columns
// listed in `left` are left-aligned, the others right-aligned.
std::string terminal_text(const std::string& s, bool keep_lines) {
  std::string out;
  out.reserve(s.size());
  for (const unsigned char ch : s) {
    const bool control = ch < 0x20 || ch == 0x7f;
    if (control && !(keep_lines && (ch == '\n' || ch == '\t')))
      out += fmt::format("\\x{:02X}", ch);
    else
      out += static_cast<char>(ch);
  }
  return out;
}

std::string align(const std::vector<std::vector<std::string>>& raw, const std::set<size_t>& left) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(raw.size());
  for (const auto& r : raw) {
    std::vector<std::string> cells;
    cells.reserve(r.size());
    for (const auto& cell : r) cells.push_back(terminal_text(cell, false));
    rows.push_back(std::move(cells));
  }
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  std::string o;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      if (i) line += "  ";
      line += left.count(i) ? fmt::format("{:<{}}", r[i], w[i]) : fmt::format("{:>{}}", r[i], w[i]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    o += line + "\n";
  }
  return o;
}

std::string align_wrap_last(const std::vector<std::vector<std::string>>& rows, const std::set<size_t>& left,
                            size_t width) {
  if (width == 0) return align(rows, left);
  std::vector<std::vector<std::string>> heads;
  for (const auto& r : rows) heads.emplace_back(r.begin(), r.empty() ? r.end() : r.end() - 1);
  std::vector<std::string> lines;
  {
    std::istringstream in(align(heads, left));
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  size_t indent = 0;
  for (const auto& l : lines) indent = std::max(indent, l.size() + 2);
  const bool below = indent + 24 > width;
  const size_t room = below ? (width > 8 ? width - 4 : width) : width - indent;
  const std::string pad(below ? 4 : indent, ' ');
  std::string o;
  for (size_t i = 0; i < lines.size() && i < rows.size(); ++i) {
    const std::string msg = rows[i].empty() ? "" : terminal_text(rows[i].back(), false);
    if (msg.empty()) {
      o += lines[i] + "\n";
      continue;
    }
    std::string wrapped = wrap_words(msg, static_cast<int>(room));
    for (size_t p = wrapped.find('\n'); p != std::string::npos; p = wrapped.find('\n', p + 1 + pad.size()))
      wrapped.insert(p + 1, pad);
    if (below) o += lines[i] + "\n" + pad + wrapped + "\n";
    else o += lines[i] + std::string(indent - lines[i].size(), ' ') + wrapped + "\n";
  }
  return o;
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

std::string align_fit(const std::vector<std::vector<std::string>>& rows, const std::set<size_t>& left, size_t width,
                      const std::vector<size_t>& drop, std::vector<size_t>* dropped) {
  auto widest = [](const std::string& text) {
    size_t w = 0, line = 0;
    for (char c : text) {
      if (c == '\n') {
        w = std::max(w, line);
        line = 0;
      } else {
        ++line;
      }
    }
    return std::max(w, line);
  };
  std::set<size_t> out;
  for (size_t k = 0;; ++k) {
    std::vector<std::vector<std::string>> kept;
    std::set<size_t> kept_left;
    for (const auto& r : rows) {
      std::vector<std::string> cells;
      for (size_t i = 0; i < r.size(); ++i)
        if (!out.count(i)) cells.push_back(r[i]);
      kept.push_back(std::move(cells));
    }
    for (size_t i = 0, j = 0; rows.size() && i < rows.front().size(); ++i)
      if (!out.count(i)) {
        if (left.count(i)) kept_left.insert(j);
        ++j;
      }
    std::string text = align(kept, kept_left);
    if (width == 0 || widest(text) <= width || k >= drop.size()) {
      if (dropped) dropped->assign(out.begin(), out.end());
      return text;
    }
    out.insert(drop[k]);
  }
}

std::string fit_table(const std::vector<std::vector<std::string>>& rows, const std::set<size_t>& left, size_t width,
                      const std::vector<size_t>& drop, size_t header_rows, const std::string& hint) {
  std::vector<size_t> dropped;
  std::string out = align_fit(rows, left, width, drop, &dropped);
  if (dropped.empty() || rows.empty()) return out;
  std::string names;
  for (size_t i : dropped) {
    std::string name;
    for (size_t h = 0; h < header_rows && h < rows.size(); ++h)
      if (i < rows[h].size() && !rows[h][i].empty()) name += (name.empty() ? "" : " ") + rows[h][i];
    name.erase(0, std::min(name.find_first_not_of(' '), name.size()));
    names += (names.empty() ? "" : ", ") + (name.empty() ? std::to_string(i) : name);
  }
  return out + wrap_words("(" + names + " left out to fit " + std::to_string(width) + " columns" + hint + ")",
                          static_cast<int>(width)) + "\n";
}

std::string fit_fields(const std::string& line, size_t width) {
  const bool nl = !line.empty() && line.back() == '\n';
  const std::string body = nl ? line.substr(0, line.size() - 1) : line;
  if (width == 0 || body.size() <= width || body.find('\n') != std::string::npos) return line;
  const size_t b = std::min(body.find_first_not_of(' '), body.size());
  const std::string indent = body.substr(0, b), more = indent + "  ";
  std::string out, cur = indent;
  bool fresh = true;  // nothing on `cur` yet but its indent
  size_t at = b;
  while (at < body.size()) {
    size_t end = body.find("  ", at);
    if (end == std::string::npos) end = body.size();
    const std::string field = body.substr(at, end - at);
    at = std::min(body.find_first_not_of(' ', end), body.size());
    if (field.empty()) continue;
    if (!fresh && cur.size() + 2 + field.size() > width) {
      out += cur + "\n";
      cur = more + field;
    } else {
      cur += (fresh ? "" : "  ") + field;
    }
    fresh = false;
  }
  return out + cur + (nl ? "\n" : "");
}

}  // namespace tracr::core
