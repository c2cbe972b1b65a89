#include "agent/link.hpp"

#include <utility>
#include <vector>

#include "protocol/crypto.hpp"
#include "protocol/meta_keys.hpp"

namespace tracr::agent {

using namespace tracr::protocol;

Status NetworkLink::send(const SendOptions& so, int32_t split, const Bundle& b, const Meta& meta,
                         FrameStats* stats) {
  return c_->send_with(so, MsgType::infer_request, split, b, meta, stats);
}

InProcessLink::InProcessLink(std::unique_ptr<SegmentExecutor> exec, bool encrypt)
    : exec_(std::move(exec)), encrypt_(encrypt) {
  up_w_.set_session(1);
  up_r_.set_session(1);
  down_w_.set_session(1);
  down_r_.set_session(1);
  if (encrypt_) {
    Key256 k1{}, k2{};
    Iv96 i1{}, i2{};
    // Keys from a failed random source would be predictable: fatal.
    for (auto [p, n] : {std::pair<uint8_t*, size_t>{k1.data(), k1.size()}, {k2.data(), k2.size()}, {i1.data(), i1.size()},
                        {i2.data(), i2.size()}})
      if (auto st = random_bytes(p, n); !st) throw Fatal(st.error());
    (void)up_w_.set_key(k1, i1);
    (void)up_r_.set_key(k1, i1);
    (void)down_w_.set_key(k2, i2);
    (void)down_r_.set_key(k2, i2);
  }
}

Status InProcessLink::send(const SendOptions& so, int32_t split, const Bundle& b, const Meta& meta,
                           FrameStats* stats) {
  std::vector<Segment> segs;
  auto collect = [&](Segment&& s) {
    segs.push_back(std::move(s));
    return Status{};
  };
  Header h;
  h.type = MsgType::infer_request;
  h.split = split;
  h.meta = meta;
  TRACR_TRY(up_w_.write(h, b, so, collect, stats));
  for (auto& s : segs)
    for (auto& fr : up_r_.feed(s)) {
      if (!fr) {
        ready_.push_back(std::move(fr.error()));
        continue;
      }
      auto res = exec_->handle(*fr);
      std::vector<Segment> back;
      auto collect_back = [&](Segment&& x) {
        back.push_back(std::move(x));
        return Status{};
      };
      Header r;
      r.split = split;
      Bundle outputs;
      if (res) {
        r.type = MsgType::infer_result;
        r.meta = res->second;
        outputs = std::move(res->first);
      } else {
        r.type = MsgType::error;
        r.error = res.error();
      }
      r.meta[protocol::meta_key::kReqSeq] = static_cast<int64_t>(fr->header.seq);
      SendOptions reply;  // results go back uncompressed, like the SERVER agent's replies
      TRACR_TRY(down_w_.write(r, outputs, reply, collect_back));
      for (auto& x : back)
        for (auto& out : down_r_.feed(x)) ready_.push_back(std::move(out));
    }
  return {};
}

Result<Frame> InProcessLink::recv(int) {
  if (ready_.empty()) return make_error(Errc::timeout, "no reply pending in the in-process link");
  auto r = std::move(ready_.front());
  ready_.pop_front();
  return r;
}

}  // namespace tracr::agent
