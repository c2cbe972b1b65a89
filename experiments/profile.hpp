// Per-layer profiling: each layer runs alone on the model's device (warm-up,
// then timed repetitions; CUDA is synchronized around every timed call when
// the model is on a GPU), giving median and p95 latency, output bytes and the
// resident-memory peak of the layer. Results are plain structs (no torch
// types) for the controller to store.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "experiments/model.hpp"

namespace tracr::experiments {

struct LayerProfile {
  int index = 0;
  std::string name;
  std::string type;
  std::string device;          // "cpu", "cuda:0"
  int repetitions = 0;
  double median_ms = 0;
  double p95_ms = 0;           // nearest-rank 95th percentile
  double mean_ms = 0;
  double min_ms = 0;
  int64_t input_bytes = 0;     // bytes of the tensors the layer reads
  int64_t output_bytes = 0;    // bytes of the layer's output at the profiled batch
  int64_t params = 0;
  int64_t macs = 0;            // at the profiled batch
  // Rise of the process's peak RSS over its RSS before one run of the layer
  // (VmHWM reset through /proc/self/clear_refs). -1 when the peak cannot be
  // reset or read (non-Linux, restricted /proc). Host memory only: on CUDA
  // device allocations are not included (the Debian LibTorch is CPU-only;
  // TODO(#3): CUDA caching-allocator peak when built against CUDA).
  int64_t peak_rss_delta_bytes = -1;
};

struct ProfileOptions {
  int warmup = 2;
  int repetitions = 10;
  bool measure_memory = true;
  // Called after each layer's timed repetitions with a function that runs
  // that layer once more, synchronised (the agent measures energy with it,
  // repeating it until its meters' window is long enough).
  std::function<void(int index, const std::function<void()>& run_once)> after_layer;
};

// Profiles every layer of `model` on `input` ([B, C, H, W]). Error when a
// layer fails (named) or options are invalid.
Result<std::vector<LayerProfile>> profile_layers(const SplitModel& model, const at::Tensor& input,
                                                 const ProfileOptions& opts = {});

// One segment of a split timed whole, as a frame runs it: the head run(0, k)
// or the tail run(k, N). A graph model's optimised segments fuse across
// layers, so they cost less (or more) than the sum of their layers.
struct SegmentProfile {
  int split = 0;
  bool head = true;            // head [0, k), else tail [k, N)
  std::string device;          // "cpu", "cuda:0"
  int repetitions = 0;
  double median_ms = 0;
  double p95_ms = 0;
  double mean_ms = 0;
};

// Times the heads (k > 0) or the tails (k < N) of the given splits on
// `input` ([B, ...]): opts.warmup untimed runs, then opts.repetitions timed
// ones each. A tail's input is the head's output at k, computed once
// (untimed). Splits the model refuses (split_refusal) are skipped. Error
// naming the split when a segment fails.
Result<std::vector<SegmentProfile>> profile_segments(const SplitModel& model, const at::Tensor& input,
                                                     const std::vector<int>& splits, bool heads,
                                                     const ProfileOptions& opts = {});

// Per split point k = 0..N: the estimated head (sum of median layer times of
// [0, k)) and tail ([k, N)) latency and what crosses the cut at the profiled
// batch size.
struct SplitEstimate {
  int split = 0;
  double head_ms = 0;
  double tail_ms = 0;
  int64_t crossing_bytes = 0;
  int crossing_tensors = 0;
  std::string last_head_layer;  // "" for k = 0
};
std::vector<SplitEstimate> split_table(const SplitModel& model,
                                       const std::vector<LayerProfile>& profiles, int64_t batch);

// Fixed-width text tables for the CLI.
std::string format_layer_profiles(const std::vector<LayerProfile>& profiles);
std::string format_split_table(const std::vector<SplitEstimate>& splits);

// Current and peak resident set size of this process in bytes (-1 if unknown),
// and resetting the peak (false when the kernel refuses).
int64_t current_rss_bytes();
int64_t peak_rss_bytes();
bool reset_peak_rss();

}  // namespace tracr::experiments
