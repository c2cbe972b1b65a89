// Where a PARTICIPANT's crossing tensors go: a ZeroMQ session to the SERVER
// agent (NetworkLink), or this process's own segment executor behind an
// in-memory FrameWriter / FrameReader pair (InProcessLink: the same frames,
// codecs and cipher, no socket), so local and networked runs have the same
// numerics and fields.
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "agent/segment.hpp"
#include "protocol/channel.hpp"
#include "protocol/frame.hpp"

namespace tracr::agent {

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
  // The network session, when there is one (link probes use it).
  virtual protocol::Client* client() { return nullptr; }
};

class NetworkLink : public Link {
 public:
  explicit NetworkLink(std::unique_ptr<protocol::Client> c) : c_(std::move(c)) {}
  Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b,
              const protocol::Meta& meta, protocol::FrameStats* stats) override;
  Result<protocol::Frame> recv(int timeout_ms) override { return c_->recv(timeout_ms); }
  std::string cipher() const override { return std::string(protocol::cipher_name(c_->cipher())); }
  protocol::Client* client() override { return c_.get(); }

 private:
  std::unique_ptr<protocol::Client> c_;
};

// Frames go through FrameWriter/FrameReader in memory (encrypted with fresh
// random keys when `encrypt`) to a SegmentExecutor in this process.
class InProcessLink : public Link {
 public:
  InProcessLink(std::unique_ptr<SegmentExecutor> exec, bool encrypt);
  Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b,
              const protocol::Meta& meta, protocol::FrameStats* stats) override;
  Result<protocol::Frame> recv(int timeout_ms) override;
  std::string cipher() const override { return encrypt_ ? "aes-256-gcm" : "none"; }
  bool tail_in_send() const override { return true; }

 private:
  std::unique_ptr<SegmentExecutor> exec_;
  bool encrypt_;
  protocol::FrameWriter up_w_, down_w_;
  protocol::FrameReader up_r_, down_r_;
  std::deque<Result<protocol::Frame>> ready_;
};

}  // namespace tracr::agent
