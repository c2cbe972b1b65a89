// `compression: auto`: the lossless codec for a split, chosen by trying the
// candidates on a sample of the activations that cross it. Each candidate
// encodes and decodes the sample through the real frame writer and reader
// (with the session's cipher), and the one with the smallest predicted time
// per frame wins: encode + decode + wire bytes at the link's upstream rate.
#pragma once

#include <string>
#include <vector>

#include "protocol/error.hpp"
#include "protocol/tensor.hpp"

namespace tracr::protocol {

// The lossless codecs auto chooses among (lossy ones change results, so
// they are never chosen for the user): none, sparse, blosc-lz4,
// sparse+blosc-lz4, blosc-zstd, sparse+blosc-zstd.
const std::vector<std::string>& auto_codec_candidates();

struct CodecChoiceOptions {
  bool encrypt = true;       // time AES-256-GCM as the session will
  double up_mbps = 0;        // upstream rate; 0 = unknown: wire bytes cost nothing, CPU time decides
  size_t chunk_bytes = 256 * 1024;
  int trials = 3;            // each candidate's encode and decode times are the best of this many
  std::vector<std::string> candidates = auto_codec_candidates();
};

struct CodecTrial {
  std::string codec;
  double encode_ms = 0, decode_ms = 0;  // this process's steady clock, best of the trials
  uint64_t raw_bytes = 0, wire_bytes = 0;
  double link_ms = 0;                   // wire_bytes at up_mbps (0 when unknown)
  double total_ms = 0;                  // encode + decode + link: what is minimised
};

// Every candidate tried on `sample`, best (smallest total_ms) first.
// Error from a candidate that does not parse, or from encoding or decoding
// (a decode that does not reproduce the sample bit for bit is an internal
// error: the candidates are lossless).
Result<std::vector<CodecTrial>> try_codecs(const Bundle& sample, const CodecChoiceOptions& opt);

// "auto: sparse+blosc-lz4 (predicted 1.234 ms: ...); others: ..." for events.
std::string describe_choice(const std::vector<CodecTrial>& trials, double up_mbps);

}  // namespace tracr::protocol
