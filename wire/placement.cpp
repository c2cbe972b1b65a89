#include "wire/placement.hpp"

#include <charconv>
#include <limits>

#include <fmt/format.h>

namespace tracr::wire {

std::pair<int, int> Placement::segment(size_t i, int num_layers) const {
  const int begin = i == 0 ? 0 : cuts[i - 1];
  const int end = i < cuts.size() ? cuts[i] : num_layers;
  return {begin, end};
}

std::string Placement::text() const {
  std::string out;
  for (size_t i = 0; i < cuts.size(); ++i) out += fmt::format("{}{}", i ? "|" : "", cuts[i]);
  return out;
}

Result<Placement> parse_placement(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return make_error(Errc::invalid_argument,
                      fmt::format("placement '{}': {}; expected cut points joined by '|', e.g. 3|13", text, why));
  };
  if (text.empty()) return bad("empty");
  Placement p;
  size_t at = 0;
  while (true) {
    const size_t bar = text.find('|', at);
    const std::string_view part = text.substr(at, bar == std::string_view::npos ? std::string_view::npos : bar - at);
    int v = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size() || v < 0)
      return bad(fmt::format("'{}' is not a cut point (an integer >= 0)", part));
    p.cuts.push_back(v);
    if (bar == std::string_view::npos) break;
    at = bar + 1;
  }
  return p;
}

Status check_placement(const Placement& p, int num_layers) {
  auto bad = [&](const std::string& why) {
    return make_error(Errc::invalid_argument, fmt::format("placement {}: {}", p.cuts.empty() ? "[]" : p.text(), why));
  };
  if (p.cuts.empty()) return bad("no cut points; expected one per device after the PARTICIPANT");
  for (size_t i = 0; i < p.cuts.size(); ++i) {
    if (p.cuts[i] < 0 || p.cuts[i] > num_layers)
      return bad(fmt::format("cut {} is outside 0..{} (a model of {} layers)", p.cuts[i], num_layers, num_layers));
    if (i > 0 && p.cuts[i] < p.cuts[i - 1])
      return bad(fmt::format("cut {} comes after {}; expected non-decreasing cut points", p.cuts[i], p.cuts[i - 1]));
  }
  if (!p.devices.empty() && p.devices.size() != p.cuts.size() + 1)
    return bad(fmt::format("{} devices for {} segments; expected one device per segment", p.devices.size(),
                           p.cuts.size() + 1));
  return {};
}

uint64_t placement_count(size_t hops, int num_layers) {
  // C(N + m, m) built as a product of exact binomials C(N + i, i).
  const uint64_t n = num_layers < 0 ? 0 : static_cast<uint64_t>(num_layers);
  uint64_t c = 1;
  for (uint64_t i = 1; i <= hops; ++i) {
    // c * (n + i) / i is exact: c * (n + i) = C(n + i, i) * i.
    const unsigned __int128 next = static_cast<unsigned __int128>(c) * (n + i) / i;
    if (next > std::numeric_limits<uint64_t>::max()) return std::numeric_limits<uint64_t>::max();
    c = static_cast<uint64_t>(next);
  }
  return c;
}

std::vector<Placement> all_placements(size_t hops, int num_layers) {
  std::vector<Placement> out;
  if (hops == 0 || num_layers < 0) return out;
  std::vector<int> cuts(hops, 0);
  while (true) {
    out.push_back(Placement{cuts, {}});
    // Next non-decreasing tuple: raise the last cut that can rise, reset the rest to it.
    size_t i = hops;
    while (i > 0 && cuts[i - 1] == num_layers) --i;
    if (i == 0) break;
    ++cuts[i - 1];
    for (size_t j = i; j < hops; ++j) cuts[j] = cuts[i - 1];
  }
  return out;
}

}  // namespace tracr::wire
