// A placement: where a model of N layers is cut and which device runs each
// piece. Cuts k1 <= k2 <= ... <= km split the layers into m + 1 segments:
// segment 0 is [0, k1) on the PARTICIPANT, segment i is [k_i, k_{i+1}) on the
// i-th device after it, and segment m is [k_m, N) on the last. Today's
// two-tier run is the case m = 1 (one cut, the split k). Equal cuts leave a
// device an empty segment: it forwards what it receives.
//
// The one type of a run's placement: settings' `split` entries are
// placements, and training's train.cuts + train.segments (strictly increasing
// cuts, a device per segment) are one too. Text form: the cuts joined by '|'
// ("3|13"; "7" for two tiers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/error.hpp"

namespace tracr::wire {

struct Placement {
  std::vector<int> cuts;             // k1 <= ... <= km, one per device after the PARTICIPANT
  std::vector<std::string> devices;  // empty, or one name per segment (cuts.size() + 1)

  size_t hops() const { return cuts.size(); }
  // Segment i's layers [begin, end) in a model of num_layers layers (i <= hops()).
  std::pair<int, int> segment(size_t i, int num_layers) const;
  // "3|13"
  std::string text() const;
  bool operator==(const Placement& o) const { return cuts == o.cuts && devices == o.devices; }
  bool operator<(const Placement& o) const { return cuts < o.cuts; }
};

// Parses the text form ("3|13", "7"). Error invalid_argument naming the text
// and what was expected (cut points of digits joined by '|').
Result<Placement> parse_placement(std::string_view text);

// Error invalid_argument when the cuts are empty, decrease, or leave 0..N, or
// when devices is neither empty nor one per segment; the message names the
// placement and the model's layer count.
Status check_placement(const Placement& p, int num_layers);

// How many placements of `hops` cuts a model of num_layers layers has: the
// non-decreasing tuples over 0..N, C(N + hops, hops). Saturates at UINT64_MAX.
uint64_t placement_count(size_t hops, int num_layers);

// Every placement of `hops` cuts over 0..N in lexicographic order (no
// devices). The caller bounds the count first (placement_count).
std::vector<Placement> all_placements(size_t hops, int num_layers);

}  // namespace tracr::wire
