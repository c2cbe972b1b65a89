// The split pipeline of one experiment, LibTorch side (compiled only when
// TRACR_WITH_TORCH). A PARTICIPANT runs heads [0, k), ships the crossing
// tensors through a Link, and records one FrameRecord per batch; the tail
// [k, N) runs in a TailExecutor, either in the SERVER agent behind a ZeroMQ
// socket (NetworkLink) or in this process behind an in-memory FrameWriter /
// FrameReader pair (InProcessLink: the same frames, codecs and cipher, no
// socket), so local and networked runs have the same numerics and fields.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <deque>
#include <vector>

#include "experiments/datasets.hpp"
#include "experiments/model.hpp"
#include "protocol/channel.hpp"

namespace tracr::agent {

// Model identity shared by both ends (same name, weights, shape, seed =>
// same parameters; checked with a fingerprint at the first request).
struct ModelSpec {
  std::string name;
  std::string weights;
  std::vector<int64_t> input_shape;  // C, H, W; empty = model default
  int64_t num_classes = 0;
  std::string device = "auto";
  uint64_t seed = 0;
};

Result<std::unique_ptr<experiments::SplitModel>> load_model(const ModelSpec& spec);
// Hash of every parameter and buffer (names, shapes, bytes): both ends must agree.
std::string model_fingerprint(const experiments::SplitModel& m);

// Runs tails for any split point. Thread-compatible (one caller at a time).
class TailExecutor {
 public:
  explicit TailExecutor(std::shared_ptr<experiments::SplitModel> model);
  const experiments::SplitModel& model() const { return *model_; }
  // Handles an INFER_REQUEST frame: checks split and fingerprint, runs
  // [split, N), returns the outputs and meta (srv_decode_ns, srv_tail_ns).
  Result<std::pair<protocol::Bundle, protocol::Meta>> handle(const protocol::Frame& f);

 private:
  std::shared_ptr<experiments::SplitModel> model_;
  std::string fingerprint_;
};

// Where the crossing tensors go.
class Link {
 public:
  virtual ~Link() = default;
  virtual Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b,
                      const protocol::Meta& meta, protocol::FrameStats* stats) = 0;
  virtual Result<protocol::Frame> recv(int timeout_ms) = 0;
  virtual std::string cipher() const = 0;
  // True when send() also runs the tail (in-process): the send's wall time is
  // then not all encoding.
  virtual bool tail_in_send() const { return false; }
};

class NetworkLink : public Link {
 public:
  explicit NetworkLink(std::unique_ptr<protocol::Client> c) : c_(std::move(c)) {}
  Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b,
              const protocol::Meta& meta, protocol::FrameStats* stats) override;
  Result<protocol::Frame> recv(int timeout_ms) override { return c_->recv(timeout_ms); }
  std::string cipher() const override { return std::string(protocol::cipher_name(c_->cipher())); }

 private:
  std::unique_ptr<protocol::Client> c_;
};

// Frames go through FrameWriter/FrameReader in memory (encrypted with fresh
// random keys when `encrypt`) to a TailExecutor in this process.
class InProcessLink : public Link {
 public:
  InProcessLink(std::unique_ptr<TailExecutor> tail, bool encrypt);
  Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b,
              const protocol::Meta& meta, protocol::FrameStats* stats) override;
  Result<protocol::Frame> recv(int timeout_ms) override;
  std::string cipher() const override { return encrypt_ ? "aes-256-gcm" : "none"; }
  bool tail_in_send() const override { return true; }

 private:
  std::unique_ptr<TailExecutor> tail_;
  bool encrypt_;
  protocol::FrameWriter up_w_, down_w_;
  protocol::FrameReader up_r_, down_r_;
  std::deque<Result<protocol::Frame>> ready_;
};

struct ParticipantSpec {
  ModelSpec model;
  experiments::DatasetConfig dataset;
  int64_t batch = 1;
  int64_t max_samples = 0;       // 0 = all
  std::vector<int> splits;       // empty = every split 0..N
  int warmup = 1;                // unrecorded passes per split (first batch)
  int reps = 1;                  // recorded passes over the data per split
  std::string codec = "none";
  size_t chunk_bytes = 256 * 1024;
  int inflight = 1;              // frames in flight
  int topk = 5;
  int timeout_ms = 60000;        // per result
};

// One recorded frame; durations in ns from this process's steady clock
// (server-side durations come back in the reply's meta).
// With inflight > 1 frames overlap: transfer_ns then also holds the time a
// reply waited behind other frames' heads (the participant reads replies
// between heads), so compare stage columns at inflight 1.
struct FrameRecord {
  int split = 0;
  int64_t sample = 0;   // index of the first sample of the batch
  int rep = 0;
  int64_t batch = 0;
  int64_t head_ns = 0;      // layers [0, k) on the participant
  int64_t encode_ns = 0;    // participant: codec + cipher + hand-off to ZeroMQ
  int64_t transfer_ns = 0;  // round trip minus every measured compute stage (wire, both ways)
  int64_t decode_ns = 0;    // server: verify + decrypt + decompress
  int64_t tail_ns = 0;      // server: layers [k, N)
  int64_t return_ns = 0;    // participant: decoding the reply
  int64_t post_ns = 0;      // participant: post-processing
  int64_t total_ns = 0;     // head start to post-processing end
  uint64_t raw_bytes = 0;   // crossing tensors, before codec
  uint64_t wire_bytes = 0;  // request frame on the wire (headers, payload, seal)
  std::string codec, cipher;
  std::string result;       // top-1 "label:confidence;..." per sample, or detections count
  int64_t correct = -1;     // samples whose top-1 matched the label (-1 unknown)
  bool ok = true;
  std::string error;
};

// Runs the sweep; calls `emit` for each recorded frame and `progress(done,
// total)`. Errors (model, dataset, link, remote) end the run.
// `stop` is polled before every batch; when it returns true the sweep ends
// with Errc::peer_closed ("stopped by the controller").
Status run_participant(const ParticipantSpec& spec, experiments::SplitModel& model, Link& link,
                       const std::function<void(const FrameRecord&)>& emit,
                       const std::function<void(int64_t, int64_t)>& progress,
                       const std::function<bool()>& stop = {});

}  // namespace tracr::agent
