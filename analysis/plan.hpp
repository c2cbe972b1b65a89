// The split planner: predicts, per split point, end-to-end latency,
// participant energy and pipelined throughput from measured inputs only,
// chooses a split for an objective under constraints, and validates its
// predictions against a run's measurements.
//
// Model (documented in config/README.md, "Planning"), for split k of N:
//   head(k)  = sum of the PARTICIPANT's profiled layer means, layers [0,k)
//   tail(k)  = sum of the SERVER's profiled layer means, layers [k,N)
//   up(k)    = (wire_bytes(k) - tokens) * 8 / up rate;  down(k) likewise with reply_bytes
//              (tokens: what the emulator's token bucket, when tracr shaped the link with tbf,
//              refilled while the frame was elsewhere: min(burst, rate x the other stages'
//              time); else 0)
//   other(k) = per-frame processing outside layers and link (encode, reply
//              decode, post-processing, the server's own decode): at a split
//              the basis run measured, its medians of those stages (under a
//              CPU quota the encode only as far as the frames' median head +
//              encode exceed head(k), between 0 and its median: the throttle
//              waits it pays are already in the profiled head); elsewhere a
//              line a + b x wire_bytes(k) fitted to them
//   latency(k) = head(k) + up(k) + rtt + tail(k) + down(k) + other(k)
// Layer means come from record.layers profiles (each layer run alone on its
// device, at least 10 times, under the device's CPU limits; the mean, not the
// median, because a CPU quota throttles some runs and not others). Wire and reply bytes are the basis
// run's measured means per split, or (splits it did not run) the profiled
// output bytes crossing the cut times the codec's measured ratio. Rates and
// rtt (the smallest echo round trip, which holds the per-message costs) come
// from the basis run's link probe, or from a link profile's rates and delay
// (rtt = the probe's loopback rtt + 2 x delay).
//   energy(k) = participant layer energy [0,k) (per-layer rows, one source)
//               + idle power x (latency - head) + radio(up bytes, down bytes, up + down + rtt)
//   throughput(k) = 1 / max(head, up, tail + rtt, down) with frames in flight
// A SERVER shared by n participants (one frame in flight each) serves one
// frame at a time: a closed network with the server as a FIFO queue of
// service time S = tail(k) + the server's own per-frame work (the basis run's
// median server_ns - tail_ns) and the rest of the frame as a delay
// Z = latency(k) - S. Mean value analysis (exact when S and Z vary as
// exponentials do):
//   R(1) = S; R(i) = S x (1 + Q(i-1)), X(i) = i / (Z + R(i)), Q(i) = X(i) x R(i)
// and with constant S and Z the cycle settles at max(Z + S, n S):
//   B = max(S, n S - Z)  (the asymptotic bound: no wait below the knee)
// The time at the server is between, by how much the basis run's frames
// vary at split k (Kingman's v = (ca^2 + cs^2) / 2 of their server_ns and
// of the rest of each frame, at most 1; measured splits' median elsewhere,
// 1 when no split has 2 frames):
//   R = B + v x (R(n) - B),  latency_n(k) = Z + R  (queue(k) = R - S)
//   throughput_n(k) = min(throughput(k), 1 / (n x S)) per participant
// n is the basis run's participant count unless given (plan --participants,
// or the held-out run's with --validate-on).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/results.hpp"
#include "protocol/error.hpp"

namespace tracr::agent {
struct RadioModel;
}

namespace tracr::analysis {

struct PlanLink {
  double up_mbps = 0, down_mbps = 0;  // 0 = not limited (transfer time 0)
  double rtt_ms = 0;
  // Bytes a message sends at once after an idle gap: tracr's tbf bucket on an
  // emulated link (0 on a real one).
  double up_burst = 0, down_burst = 0;
  std::string name;    // link profile or "probe"
  std::string source;  // where the figures come from
};

struct PlanOptions {
  std::string objective = "latency";  // latency | energy | throughput | weighted:W (W in [0,1] on latency)
  std::optional<double> max_latency_ms, max_energy_j;
  std::optional<PlanLink> link;       // default: the basis run's probe
  std::string radio;                  // 3g | lte | wifi | "" (default: the link's name when it is one)
  // Codecs to plan (canonical texts); empty = the basis run's. Each other
  // codec's bytes and costs come from the newest run of the same model and
  // input that used it.
  std::vector<std::string> codecs;
  // Which splits to plan: "" or "all" every split of the model; "measured"
  // those whose bytes a run measured (per codec: the run that codec's bytes
  // came from); else a comma list of split points.
  std::string splits;
  // Participants sharing the SERVER (the queueing model above); 0 = as many
  // as the basis run had.
  int participants = 0;
  std::string participants_source;  // why that many ("" = as given)
  // The PARTICIPANT's layer and head-segment profiles (and its layer
  // energy) from this run instead of the basis: another device, profiled
  // once, planned with the basis run's SERVER, bytes and link (0 = the
  // basis). The run must be of the same model, input and layers.
  int64_t participant_run = 0;
  // Further calibration runs of the same PARTICIPANT: each layer's and head
  // segment's time is then the median over all of them (--participant-from A,B,C).
  std::vector<int64_t> participant_more;
};

struct PlanRow {
  int split = 0;
  std::string codec;
  double head_ms = 0, tail_ms = 0, up_ms = 0, down_ms = 0, rtt_ms = 0, overhead_ms = 0, latency_ms = 0, fps = 0;
  double queue_ms = 0;  // predicted wait for the shared SERVER (0 with one participant); inside latency_ms
  // The queueing model's terms (plan.hpp above): the SERVER's service time
  // per frame (tail + its own work), and the latency with one participant.
  double service_ms = 0, alone_ms = 0;
  double variability = 1;  // Kingman's v of the basis run's frames at this split (the model above)
  double wire_bytes = 0, reply_bytes = 0;
  std::string bytes_from;            // "measured" | "profiled x ratio"
  // Where head_ms and tail_ms came from: "segments" (both timed whole, or
  // empty), "layers" (sums of layer profiles), or "head segment, tail
  // layers" and the reverse.
  std::string compute_from;
  std::optional<double> energy_j;    // participant, per frame
  bool feasible = true;              // meets the constraints
  // With a memory_mb limit on either device (devices file): the PARTICIPANT's
  // need (layers [0, k)) and the SERVER's ([k, N)) in MB (analysis/memory_need.hpp),
  // and whether one exceeds its limit (the row is then not feasible).
  std::vector<double> memory_mb;
  bool over_memory = false;
  std::optional<double> measured_ms; // validation: the run's median total
  std::optional<double> error_pct;   // (predicted - measured) / measured x 100
};

struct Plan {
  int64_t basis_run = 0;
  int64_t participant_run = 0;  // --participant-from: the PARTICIPANT's profiles came from this run (0: the basis)
  std::vector<int64_t> participant_more;  // and from these runs too (median per layer)
  std::string model, input_shape, objective;
  PlanLink link;
  std::string energy_source;  // label of the energy figures ("" = no energy predicted)
  std::string overhead;       // how the per-frame processing term was obtained
  std::string splits_note;    // which splits the rows were limited to ("" = every split)
  std::string compute_note;   // how head and tail times were obtained
  std::string devices_note;   // the devices whose profiles were used ("" = the run stored none)
  int participants = 1;       // participants sharing the SERVER
  std::string server_model;   // how the shared server was modelled ("" = one participant: not shared)
  std::string memory_note;    // the devices' memory limits and how many rows exceed one ("" = no limit set)
  int over_memory = 0;        // rows over a device's memory_mb
  std::vector<PlanRow> rows;
  std::string basis_codec;    // the basis run's codec (validation compares its rows)
  int chosen = -1;            // -1: no split meets the constraints
  std::string chosen_codec;
  // Validation (against a run's measured medians: the basis run's, or held
  // out, another run of the same model and input):
  int64_t validation_run = 0;  // 0: not validated
  std::optional<double> mape_pct;
  int measured_best = -1;
  std::optional<double> miss_pct;  // chosen's measured latency over the measured best's, minus 100
  // The profiles against the validation run's frames, compute only: the
  // median over its measured splits of (planned head - its frames' median
  // head_ns) / that x 100, and the same for the SERVER's tail (tail_ns).
  // How far the devices' speed moved between profiling and those frames.
  std::optional<double> head_vs_frames_pct, tail_vs_frames_pct;
  int head_vs_frames_splits = 0, tail_vs_frames_splits = 0;
};

// How far (in %) the profiles may be from the frames before the plan's text
// warns that its error says more about the load than the model.
inline constexpr double kProfileFarPct = 25.0;

// Plans from a stored run (its layer profiles on both devices, its frames'
// bytes, its probe). Error not_found naming what is missing and how to get it.
Result<Plan> plan_from_run(store::ResultsDb& db, int64_t run_id, const PlanOptions& opt);
// Adds a run's measured medians (the basis run's when `run` is 0), the error
// per split for that run's codec, MAPE and whether the chosen split is the
// measured best (by how much it misses).
void validate_against(store::ResultsDb& db, Plan& p, int64_t run = 0);
// Repeated runs of one condition against one another: each run's median
// total per split predicted by the median over the other runs of their
// medians at that split (the splits every run measured). This is the error
// that remains when the prediction is another run of the same condition: no
// plan of these runs can be expected to come much closer (plan --validate-on
// A,B,... prints it beside the planner's error).
struct Repeatability {
  std::vector<double> mape_pct;  // per run, in the order given
  int best_agrees = 0;           // runs whose measured best split is the best of the others' medians
  int splits = 0;                // splits compared
};
// invalid_argument with fewer than 2 runs or no split measured by all.
Result<Repeatability> repeatability(store::ResultsDb& db, const std::vector<int64_t>& runs);
struct JointPlan;  // analysis/joint.hpp
// Stores a plan (plans + plan_rows, and a joint plan's plan_assignments); returns its id.
Result<int64_t> store_plan(store::ResultsDb& db, const Plan& p, const JointPlan* joint = nullptr);
// The plan as text; its prose lines wrap at words to `width` (0: no limit).
std::string format_plan(const Plan& p, size_t width = 0);

// Least squares a + b x over (bytes, ms) points; a cost cannot fall with
// bytes, so the line is flat (b = 0, a the mean) when it does not rise.
std::pair<double, double> fit_cost_line(const std::vector<std::pair<double, double>>& pts);

// The PARTICIPANT's energy per frame (plan.hpp's energy(k); the chain
// planner's too): its layer energy of one source (a measured one before a
// modelled one), that source's idle power while it waits, and a radio model
// for the bytes it sends and receives and the time its radio is active.
struct EnergyBasis {
  bool known = false;                 // per-layer energy for every layer
  std::vector<double> layer_j;        // J per layer
  std::optional<double> idle_w;       // the source's idle power
  const agent::RadioModel* radio = nullptr;
  std::string source;                 // modelled:plan(<layer source>[, radio-NAME]); "" when not known
  // layers [0, k) + idle power x (latency - head) + the radio: bytes each way and its active time.
  double joules(int k, double head_ms, double latency_ms, double up_bytes, double down_bytes, double radio_ms) const;
};
// `device`'s layer energy in run `run_id` (all n layers of one source), with
// the radio model named `radio` (3g | lte | wifi; none for another name).
Result<EnergyBasis> participant_energy(store::ResultsDb& db, int64_t run_id, const std::string& device, int n,
                                       const std::string& radio);

// What the plan command (controller/commands/plan.cpp) shares with the planner:
// The link as run `run` measured it with its probe (tbf's bucket included
// where tracr emulated it); not_found when it has none.
Result<PlanLink> probe_link(const store::RunRow& run, const store::ProbeRow* probe);
// A device as its profiles describe it: "PARTICIPANT edge (4 cores, CPU quota ...)".
std::string device_text(const store::DeviceRecord& d);
// Whether two devices run layers at the same speed: the machine, its emulated limits, the GPU it uses.
bool same_device(const store::DeviceRecord& a, const store::DeviceRecord& b);
// Whether two runs ran the same model: the same fingerprint (every parameter
// and buffer) when both recorded layer profiles, else the same model text
// (so torchscript:r18.pt and torchscript:results/heldout/r18.pt, one file
// named from two directories, are one model).
bool same_model(store::ResultsDb& db, const store::RunRow& a, const store::RunRow& b);
bool same_model(const std::string& fp_a, const std::string& model_a, const std::string& fp_b,
                const std::string& model_b);
// PARTICIPANT devices of a run (its agents' READY rows); at least 1.
Result<int> run_participants(store::ResultsDb& db, int64_t run_id);
// The time at a SERVER shared by n participants of service time s and delay
// z (the model above): between the constant-times bound max(s, n s - z) and
// the MVA's response time `mva` by the variability v (at most 1).
double server_time_ms(double mva, double s, double z, int n, double v);

}  // namespace tracr::analysis
