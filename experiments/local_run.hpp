// One process, no sockets: run an input through split k exactly as a
// networked run transforms it — head layers, the crossing tensors through the
// protocol codec (lossy stage + optional c-blosc compression, the same
// protocol/codec.hpp functions the wire path uses), tail layers — and time
// each stage. Used for local experiments and to compare with networked runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "experiments/model.hpp"
#include "protocol/codec.hpp"

namespace tracr::experiments {

struct LocalRunResult {
  int split = 0;
  std::string codec;          // CodecSpec::name()
  double head_ms = 0;         // layers [0, k)
  double encode_ms = 0;       // lossy encode + compress of the crossing tensors
  double decode_ms = 0;
  double tail_ms = 0;         // layers [k, N)
  int64_t raw_bytes = 0;      // crossing tensors before the codec
  int64_t wire_bytes = 0;     // after the codec (payload only, no frame header)
  Bundle outputs;             // model outputs (crossing(N))
};

// Error invalid_argument for k outside [0, N]; codec and layer errors pass through.
Result<LocalRunResult> run_split_local(const SplitModel& model, const at::Tensor& input, int k,
                                       const protocol::CodecSpec& codec);

// Applies the codec to a bundle and back (what the receiver gets); adds the
// wire size to *wire_bytes when non-null.
Result<Bundle> codec_roundtrip(const Bundle& in, const protocol::CodecSpec& codec,
                               int64_t* wire_bytes = nullptr);

}  // namespace tracr::experiments
