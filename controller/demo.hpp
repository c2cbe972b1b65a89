// Protocol demo and end-to-end benchmark: a real tracr-agent SERVER process,
// real tensors over loopback TCP, each configuration beside a raw ZeroMQ
// round trip of the same byte count measured in the same run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

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
};

// Runs the demo and prints the table. Returns a process exit code.
int run_demo(const DemoOptions& opt);

}  // namespace tracr::controller
