// The planner over placements (#43), from one chain run: predicts every
// placement's end-to-end latency from measured inputs only and checks the
// prediction against the placements the run measured.
//
// Model, for placement k1 <= ... <= km over the chain's m devices (device 0
// the PARTICIPANT, N layers, k_{m+1} = N):
//   head(k1)       = sum of the PARTICIPANT's profiled layer means, [0, k1)
//   compute_h      = sum of device h's profiled layer means, [k_h, k_{h+1})
//                    (from a chain run's frames: each device's sums scaled
//                    by its measured segments over their profiled sum)
//   bytes_h        = the request into device h on the wire: the run's median
//                    where a frame crossed cut k_h on hop h, else the layer
//                    output bytes at k_h (the input at 0) x that hop's
//                    measured wire/raw ratio
//   link_h(bytes)  = a_h + b_h x bytes: the hop's encode + network + reply
//                    decode (frame_hops), a line fitted to the run's
//                    per-placement medians (flat when it does not rise)
//   own_h(bytes)   = c_h + d_h x bytes: device h's other_ns, fitted the same
//   post           = the PARTICIPANT's median post_ns + queue_ns
//   latency        = head(k1) + sum_h (link_h + compute_h + own_h) + post
//   throughput     = 1 / max(head, link_h, compute_h + own_h) with frames in
//                    flight (each tier busy on a different frame)
// Both are sums and maxima over the placement's segments, so every
// placement is predicted (C(N+m, m) of them, each O(m) with prefix sums:
// exact, as PipeEdge's dynamic programme is, without needing one at these
// counts). The fit is made on the run's own frames: the error on its
// measured placements is in-sample for the links, own terms and compute
// scales, out of sample for the layers the run did not put on a device.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "protocol/error.hpp"
#include "store/results.hpp"

namespace tracr::analysis {

struct ChainPlanRow {
  std::vector<int> cuts;
  std::string placement;
  double head_ms = 0, post_ms = 0, latency_ms = 0, fps = 0;
  std::vector<double> link_ms, compute_ms, own_ms, wire_bytes;  // per device h = 1..m
  std::string bytes_from;                                      // "measured" or "profiled x ratio" (per hop, ',')
  std::optional<double> measured_ms;                           // the run's median total at this placement
  std::optional<double> error_pct;                             // (predicted - measured) / measured x 100
  // With a device's memory_mb (memory_limit_mb): each device's need in MB
  // (device 0 the PARTICIPANT), weights + the largest live activations of
  // its segment; `fits` false when one exceeds its limit (never chosen).
  std::vector<double> memory_mb;
  bool fits = true;
  // The PARTICIPANT's energy per frame (ChainPlan::energy_source), where its
  // layer energy is known: plan.hpp's EnergyBasis with hop 1 as its link.
  std::optional<double> energy_j;
};

struct ChainPlan {
  int64_t run = 0;
  std::string model;
  std::vector<std::string> devices;  // the PARTICIPANT, then the chain
  int layers = 0;
  std::vector<ChainPlanRow> rows;    // every placement, in order
  std::vector<std::string> fits;     // per hop, how link_h and own_h were fitted
  size_t chosen = 0;                 // lowest predicted latency
  std::optional<size_t> measured_best;
  std::optional<double> mape_pct;    // over measured placements
  std::optional<double> miss_pct;    // the chosen placement's measured median over the measured best's, - 100
  int measured = 0;                  // placements with a measured median
  std::vector<int64_t> held_out;     // the runs measured_ms comes from (empty: this run)
  std::vector<double> held_out_mape; // with two or more held-out runs: the MAPE against each alone
  std::vector<int64_t> profile_runs; // plan --chain: the runs each device's profiles came from (device order)
  // Memory (#43): per device, the devices file's memory_mb as a run stored it
  // (nullopt: no limit); per layer, its weights in bytes (params x 4 B:
  // float32) from the profiles. A segment [a, b) needs its weights plus its
  // largest live activations, max over its layers i of the bytes at cut i
  // (the layer's input) + at cut i+1 (its output), from the profiled outputs
  // (an empty segment: the bytes it passes on). An upper bound on a chain of
  // layers; a graph's tensors skipping layers are counted in the bytes at
  // every cut they cross. The chosen placement is the fastest that fits.
  std::vector<std::optional<double>> memory_limit_mb;
  std::vector<double> layer_weight_bytes;
  int over_memory = 0;               // placements that exceed a limit
  std::string memory_from;           // where the limits came from
  // Participant energy (#43): its layer energy over the head [0, k1), its
  // idle power while the rest of the frame runs (latency - head), and hop
  // 1's radio when hop 1's link names one (3g, lte, wifi): the request's wire
  // bytes up, the reply down (hop 1's measured median, else the model's
  // profiled output bytes), active for hop 1's link time. "" when the
  // PARTICIPANT has no per-layer energy (a meter or power_model, record.layers).
  std::string energy_source;
};

// Error not_found naming what the run lacks (layer profiles of a device,
// frame_hops rows); invalid_argument for a two-tier run.
//
// Held out (`held_out`: runs of the same chain under other links, e.g. the
// two hops' links swapped): each hop's link term moves to the held-out runs'
// network (the median over them of the hop's link probe: smallest round
// trip + bytes at its rate up): where this run probed the hop too, its
// fitted link line moved by the difference of the two probes, else its
// codec line (send encode + reply decode) plus the held-out probe; compute,
// own times and bytes stay this run's. The
// prediction is checked against each placement's median over the held-out
// runs' medians. Error not_found for a held-out hop without a probe.
Result<ChainPlan> plan_chain_run(store::ResultsDb& db, int64_t run_id, const std::vector<int64_t>& held_out = {});

// split: plan (#43): every placement predicted before the run's first frame,
// from the layer profiles of `devices` (the PARTICIPANT, then the chain) and
// each hop's startup link probe (hop h: the probe of device h-1, the sender):
// link_h(bytes) = the probe's smallest round trip + bytes x 8 / its rate up,
// bytes the profiled layer output (no codec ratio is known before frames),
// no device's own time and no post-processing (each 0, said in `fits`).
// Error not_found naming a hop without a probe or a device without profiles.
Result<ChainPlan> plan_chain_from_profiles(store::ResultsDb& db, int64_t run_id,
                                           const std::vector<std::string>& devices);

// plan --chain (#43): a chain planned before it ever ran, from two-tier runs
// of the same devices. Device h's layer profiles: the basis run's where it
// profiled h (by device name), else the newest run of the database that did,
// of the same model (fingerprint), input shape and batch. Hop h's link:
// `links[h-1]` where given (a link profile, resolved by the caller), else a
// stored link probe from device h-1 to device h (a run with h-1 its
// PARTICIPANT and h its SERVER, or the hop of a chain run): its smallest
// round trip + bytes at its rate up, plus the basis run's codec line (encode
// + reply decode against wire bytes). Bytes: the profiled outputs x the basis
// run's measured wire/raw ratio (its codec, on every hop). A device's own
// time (decode, reply encode): fitted where a two-tier run had it as its one
// SERVER, else 0; the PARTICIPANT's post-processing + queue: the basis run's
// median (each source said in `fits`). `check`: chain runs of
// these devices, the prediction compared with each placement's median over
// their medians. Error not_found naming the device without profiles or the
// hop without a link.
struct HopLink {
  double rtt_ms = 0, ms_per_byte = 0;
  std::string source;  // where the figures came from
  std::string name;    // the link profile (hop 1's names the radio of the participant's energy)
};
struct ChainFromRuns {
  std::vector<std::string> chain;             // the devices after the basis run's PARTICIPANT
  std::vector<std::optional<HopLink>> links;  // per hop (empty: every hop from a stored probe)
  std::vector<int64_t> check;
};
Result<ChainPlan> plan_chain_from_runs(store::ResultsDb& db, int64_t basis, const ChainFromRuns& c);

// The rows of the k lowest predicted latencies, best first, leaving out
// placements with a cut in `refused` (cuts the model cannot make) and those
// over a device's memory limit.
std::vector<size_t> best_placements(const ChainPlan& p, size_t k, const std::set<int>& refused = {});

// Stores a plan over placements (#43): a `plans` row (chain, chosen and
// measured best placements, the fits as link_source), plan_placements and
// plan_segments (every placement up to kStoredPlacements, else the chosen,
// the measured and the kStoredBest lowest predicted latencies); its id.
inline constexpr size_t kStoredPlacements = 20000, kStoredBest = 2000;
Result<int64_t> store_chain_plan(store::ResultsDb& db, const ChainPlan& p);

// The plan as text: the chosen and measured best, the fits, and the rows
// (measured placements and the `top` best predicted).
std::string format_chain_plan(const ChainPlan& p, size_t top = 10, size_t width = 0);

}  // namespace tracr::analysis
