// Protocol demo and end-to-end benchmark: a real tracr-agent SERVER process,
// real tensors over loopback TCP, each configuration beside a raw ZeroMQ
// round trip of the same byte count measured in the same run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>
#include "protocol/error.hpp"

namespace tracr::controller {

struct DemoOptions {
  std::vector<size_t> sizes = {36864, 774400, 3211264};  // AlexNet pool5, conv1, ResNet stem
  std::vector<std::string> configs = {"none/plain", "none/aes", "blosc-lz4/aes", "blosc-zstd/aes",
                                      "fp16/aes", "int8/aes", "int8_channel+blosc-lz4/aes"};
  int warmup = 10;
  int reps = 100;
  int stream_frames = 100;  // frames per throughput run
  int window = 4;           // frames in flight during the throughput run
  size_t chunk_bytes = 256 * 1024;
  std::string agent_path;   // tracr-agent; found next to tracrctl when empty
  std::string csv_path;     // also write the table as CSV when set
  unsigned threads = 1;     // SendOptions::threads of the participant (0: every core)
  // The side-by-side comparison with the Python tracr pipeline (issue #14):
  // real post-ReLU activations from bench/python_baseline.py, its round trip
  // over TCP, tracr's lossless+AES candidates and raw ZeroMQ on the same bytes.
  bool compare_python = false;
  bool compare_only = false;  // skip the codec table above it
  std::string python = "/usr/bin/python3";  // Debian's, never another on PATH
  std::string python_script;  // bench/python_baseline.py; found from the build tree when empty
  std::vector<std::string> lossless = {"sparse", "sparse+blosc-lz4", "sparse+blosc-zstd",
                                       "blosc-zstd", "sparse+blosc-zstd:level=3"};
};

// Runs the demo and prints the table; fails when a row or the comparison failed.
Status run_demo(const DemoOptions& opt);

}  // namespace tracr::controller
