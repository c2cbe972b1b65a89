// Frames: a bundle of named tensors cut into payload parts, grouped into
// segments (one ZeroMQ multipart message each), compressed and encrypted
// part by part so that encoding part n+1 overlaps sending part n and memory
// stays bounded. FrameWriter and FrameReader hold one direction's state
// (sequence numbers, AEAD counters, keys); they know nothing of sockets.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include <zmq.hpp>

#include "protocol/codec.hpp"
#include "protocol/crypto.hpp"
#include "protocol/header.hpp"
#include "protocol/tensor.hpp"
#include "protocol/worker_pool.hpp"

namespace tracr::protocol {

using Segment = std::vector<zmq::message_t>;
// Receives each finished segment; may send it right away. An error stops the frame.
using SegmentSink = std::function<Status(Segment&&)>;

struct SendOptions {
  CodecSpec codec;
  size_t chunk_bytes = 256 * 1024;    // transformed bytes per payload part (4096 .. Limits::max_chunk_bytes)
  size_t segment_bytes = 256 * 1024;  // payload bytes per segment before the next starts
  // Parts encoded at once: 1 on the calling thread (no pool), 0 one per
  // hardware thread, N a shared pool of N workers. The bytes sent do not
  // depend on it (PROTOCOL.md 4.5); segments still go to the sink in order,
  // each as soon as its parts are ready.
  unsigned threads = 1;
};

struct ReadOptions {
  // Parts decrypted and decoded at once, as SendOptions::threads. With more
  // than one, a frame's parts are decoded while its later segments arrive
  // and a part's auth_failed or decompress_failed is reported when the
  // frame's last segment is fed (the frame is rejected all the same).
  unsigned threads = 1;
};

namespace detail {
// One worker's private state: its AES-GCM contexts and scratch buffers.
struct Lane {
  AesGcm aead;
  std::vector<uint8_t> scratch;         // lossy stream around sparse/blosc
  std::vector<uint8_t> sparse_scratch;  // sparse raw form around blosc
};
// The pool for `threads` (resolved) and one keyed lane per worker, cloned
// from `key` when it has a key. Empty pool for a single thread.
struct Lanes {
  std::shared_ptr<WorkerPool> pool;
  // Shared with the tasks that use them, which may outlive a key change.
  std::shared_ptr<std::vector<Lane>> lanes;
  unsigned threads = 1;
  bool keyed = false;
  // Prepares for `threads` (0: hardware concurrency); Error from cloning keys.
  Status ensure(unsigned threads, const AesGcm& key);
  void forget_keys() {
    lanes.reset();
    keyed = false;
  }
};
}  // namespace detail

// What one frame cost, on the side that wrote or read it.
struct FrameStats {
  uint64_t seq = 0;            // writer: the frame's seq (a reply names it as meta req_seq)
  uint64_t raw_bytes = 0;      // tensor bytes before any codec
  uint64_t payload_bytes = 0;  // payload parts as sent (after codec and cipher)
  uint64_t wire_bytes = 0;     // every ZeroMQ part: headers, payload, seals
  uint32_t segments = 0;
  uint32_t parts = 0;
  int64_t codec_ns = 0;        // lossy + compression (or their inverses)
  int64_t crypto_ns = 0;       // AES-GCM seal/open
  int64_t total_ns = 0;        // whole write/feed time on this side, sink included
  int64_t completed_at_ns = 0; // reader: steady_clock time (ns since its epoch) the frame completed
  int64_t last_segment_at_ns = 0; // reader: steady_clock time its last segment began to be processed
  int64_t last_handoff_at_ns = 0; // writer: steady_clock time the last segment went to the sink
  std::vector<uint64_t> tensor_wire;  // payload bytes per tensor
};

// HEARTBEAT, ERROR, SHUTDOWN and GOODBYE: sealed even on a plain session.
bool msg_type_is_control(MsgType t);

class FrameWriter {
 public:
  void set_session(uint64_t sid) { session_ = sid; }
  uint64_t session() const { return session_; }
  // Switches on encryption for every following frame.
  Status set_key(const Key256& key, const Iv96& iv);
  // Plain session: payloads stay in clear, control messages are sealed with
  // this key (PROTOCOL.md 5.1).
  Status set_control_key(const Key256& key, const Iv96& iv);
  Cipher cipher() const { return cipher_; }

  // Encodes `bundle` as one frame. `proto` supplies type, split, meta, error
  // and hs; seq, session, cipher, counters and descriptors are filled here.
  // Tensors must stay valid until write returns; parts of tensors with a
  // keepalive may be sent without copying and outlive the call.
  Status write(Header proto, const Bundle& bundle, const SendOptions& opt, const SegmentSink& sink,
               FrameStats* stats = nullptr);
  uint64_t next_seq() const { return next_seq_; }

 private:
  uint64_t session_ = 0;
  uint64_t next_seq_ = 1;
  uint64_t next_ctr_ = 1;
  Cipher cipher_ = Cipher::none;
  bool seal_control_ = false;
  Errc last_remote_code_ = Errc::ok;
  AesGcm aead_;
  std::vector<uint8_t> scratch_;         // lossy output before sparse/blosc
  std::vector<uint8_t> sparse_scratch_;  // sparse raw form before blosc
  detail::Lanes workers_;                // threads > 1
};

// A complete, verified frame.
struct Frame {
  Header header;                   // segment 0's header
  std::vector<uint8_t> header_bytes;  // segment 0's header as received
  Bundle tensors;
  FrameStats stats;
};

// Frames rejected so far, by reason. The reader carries on after each.
struct RejectCounters {
  uint64_t malformed = 0;     // header/limits/size errors
  uint64_t auth_failed = 0;   // tampered
  uint64_t replay = 0;        // replayed or reordered
  uint64_t truncated = 0;     // a frame that never got its remaining segments
  uint64_t codec = 0;         // decompression / codec parameter errors
  uint64_t other = 0;
  uint64_t total() const { return malformed + auth_failed + replay + truncated + codec + other; }
  // Counts one rejection under the kind its code belongs to.
  void add(Errc code);
  RejectCounters& operator+=(const RejectCounters& o) {
    malformed += o.malformed;
    auth_failed += o.auth_failed;
    replay += o.replay;
    truncated += o.truncated;
    codec += o.codec;
    other += o.other;
    return *this;
  }
};

class FrameReader {
 public:
  explicit FrameReader(Limits lim = {}, ReadOptions ro = {}) : lim_(lim), ro_(ro) {}
  // Frames must then carry this session id (0: accept any).
  void set_session(uint64_t sid) { session_ = sid; }
  // Every following segment must be encrypted with this key.
  Status set_key(const Key256& key, const Iv96& iv);
  // Plain session: control messages must be sealed with this key
  // (PROTOCOL.md 5.1); an unsealed ERROR comes out as `remote`.
  Status set_control_key(const Key256& key, const Iv96& iv);
  Cipher cipher() const { return cipher_; }
  const Limits& limits() const { return lim_; }

  // Consumes one segment (its parts are modified: decrypted in place; with
  // threads > 1 its payload parts may be moved out to be decoded later).
  // Returns the outcomes it produced, in order: completed frames and the
  // errors that rejected frames (a pending frame cut short by the start of
  // the next one comes out as `truncated` before it). Empty while a frame is
  // still incomplete.
  std::vector<Result<Frame>> feed(Segment& seg);
  const RejectCounters& rejected() const { return rejected_; }
  // Drops a partially received frame (e.g. on peer reset); counts it truncated.
  std::optional<Error> abandon();
  // Drops the partial frame, if any, whose latest segment arrived before
  // `older_than` (its sender stalled or left); counts it truncated.
  std::optional<Error> abandon_stale(std::chrono::steady_clock::time_point older_than);
  // Tensor bytes allocated for the frame in progress (0 when none).
  uint64_t pending_bytes() const;
  // The code an unauthenticated ERROR named (it comes out of feed() as
  // `remote`), for the latest such ERROR; ok when none came. Its text is
  // the peer's, never parsed: callers that act on the code read it here.
  Errc last_remote_code() const { return last_remote_code_; }

 private:
  struct Pending;
  Error reject(Error e);
  // Drops the pending frame; `truncated` with `why` unless already reported.
  std::optional<Error> drop_pending(const char* why);
  std::optional<Error> continuation_out_of_order(const Header& h, std::chrono::steady_clock::time_point t0,
                                                 std::vector<Result<Frame>>& out);
  Status decode_parts(Pending& p, Segment& seg, size_t first, size_t n, uint64_t ctr);

  Limits lim_;
  ReadOptions ro_;
  detail::Lanes workers_;  // threads > 1
  uint64_t session_ = 0;
  uint64_t last_seq_ = 0;
  uint64_t last_ctr_ = 0;
  Cipher cipher_ = Cipher::none;
  bool seal_control_ = false;
  Errc last_remote_code_ = Errc::ok;
  AesGcm aead_;
  RejectCounters rejected_;
  std::shared_ptr<Pending> pending_;
  std::vector<uint8_t> scratch_;         // decompressed/unpacked stream before lossy decode
  std::vector<uint8_t> sparse_scratch_;  // sparse raw form after blosc
};

}  // namespace tracr::protocol
