#include "protocol/frame.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tracr::protocol {

namespace {

using Clock = std::chrono::steady_clock;
int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

// A part buffer handed to ZeroMQ without a copy; freed when ZeroMQ is done.
zmq::message_t adopt(Bytes b, size_t n) {
  auto* holder = new std::shared_ptr<uint8_t>(b.shared());
  return zmq::message_t(
      b.data(), n, [](void*, void* hint) { delete static_cast<std::shared_ptr<uint8_t>*>(hint); },
      holder);
}

zmq::message_t borrow(const uint8_t* p, size_t n, const std::shared_ptr<const void>& keep) {
  auto* holder = new std::shared_ptr<const void>(keep);
  return zmq::message_t(
      const_cast<uint8_t*>(p), n,
      [](void*, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); }, holder);
}

// Seal AAD: header bytes followed by every payload part's tag, so a seal
// authenticates the header and binds the parts' order and count.
void seal_aad(std::vector<uint8_t>& aad, const uint8_t* hdr, size_t hn, const Segment& seg,
              size_t first, size_t n) {
  aad.assign(hdr, hdr + hn);
  for (size_t i = 0; i < n; ++i) {
    const auto& m = seg[first + i];
    const auto* d = static_cast<const uint8_t*>(m.data());
    aad.insert(aad.end(), d + m.size() - kTagBytes, d + m.size());
  }
}

}  // namespace

bool msg_type_is_control(MsgType t) {
  return t == MsgType::heartbeat || t == MsgType::error || t == MsgType::shutdown || t == MsgType::goodbye;
}

Status FrameWriter::set_key(const Key256& key, const Iv96& iv) {
  TRACR_TRY(aead_.set_key(key, iv));
  cipher_ = Cipher::aes256gcm;
  return {};
}

Status FrameWriter::set_control_key(const Key256& key, const Iv96& iv) {
  TRACR_TRY(aead_.set_key(key, iv));
  seal_control_ = true;
  return {};
}

Status FrameWriter::write(Header proto, const Bundle& bundle, const SendOptions& opt,
                          const SegmentSink& sink, FrameStats* stats) {
  const auto t_start = Clock::now();
  FrameStats st;
  TRACR_TRY(opt.codec.validate());
  const bool enc = cipher_ != Cipher::none;
  // Every segment is sealed on an encrypted session; on a plain one only
  // control messages, which carry no payload (PROTOCOL.md 5.1).
  const bool sealed = enc || (seal_control_ && msg_type_is_control(proto.type));
  if (sealed && !enc && !bundle.empty())
    return make_error(Errc::invalid_argument, std::string(msg_type_name(proto.type)) +
                                                  " is a control message: it carries no tensors on a plain session");
  const size_t chunk_opt = std::max<size_t>(opt.chunk_bytes, 4096);

  // Descriptors and lossy parameters for every tensor.
  std::vector<TensorDesc> descs;
  descs.reserve(bundle.size());
  for (const auto& t : bundle) {
    if (t.nbytes != static_cast<size_t>(t.numel()) * dtype_size(t.dtype))
      return make_error(Errc::invalid_argument,
                        "tensor '" + t.name + "' has " + std::to_string(t.nbytes) +
                            " bytes, shape and dtype need " +
                            std::to_string(t.numel() * dtype_size(t.dtype)));
    TensorDesc d;
    d.name = t.name;
    d.dtype = t.dtype;
    d.shape = t.shape;
    auto lp = lossy_prepare(opt.codec, t);
    if (!lp) return make_error(lp.error().code, "tensor '" + t.name + "': " + lp.error().message);
    d.lossy = std::move(*lp);
    d.sparse = opt.codec.sparse;
    d.comp = opt.codec.comp;
    if (d.comp == Compressor::blosc) d.cname = opt.codec.cname;
    CodecSpec applied = opt.codec;
    applied.lossy = d.lossy.kind;
    d.codec = applied.name();
    d.raw_bytes = t.nbytes;
    const size_t ws = dtype_size(d.lossy.wire);
    const uint64_t tb = transformed_bytes(d);
    d.chunk_bytes = std::max<size_t>(ws, chunk_opt / ws * ws);
    if (tb > 0 && tb < d.chunk_bytes) d.chunk_bytes = tb;
    d.parts = tb == 0 ? 0 : static_cast<uint32_t>((tb + d.chunk_bytes - 1) / d.chunk_bytes);
    st.raw_bytes += t.nbytes;
    descs.push_back(std::move(d));
  }
  st.tensor_wire.assign(bundle.size(), 0);

  const uint64_t seq = next_seq_++;
  const bool has_work = enc || opt.codec.lossy != Lossy::none || opt.codec.sparse ||
                        opt.codec.comp != Compressor::none;
  // Without per-part work there is nothing to overlap: one segment.
  const size_t seg_budget = has_work ? std::max<size_t>(opt.segment_bytes, 1) : SIZE_MAX;

  Segment seg;
  seg.emplace_back();  // header placeholder
  uint32_t seg_index = 0;
  uint64_t seg_payload = 0;
  uint64_t seg_ctr = next_ctr_;
  std::vector<uint8_t> hdr_bytes, aad;

  auto flush = [&](bool last) -> Status {
    Header h;
    h.type = proto.type;
    h.session = session_;
    h.seq = seq;
    h.split = proto.split;
    h.seg = seg_index;
    h.last = last;
    h.nparts = static_cast<uint32_t>(seg.size() - 1);
    h.cipher = cipher_;
    h.ctr = sealed ? seg_ctr : 0;
    if (seg_index == 0) {
      h.tensors = descs;
      h.meta = proto.meta;
      h.error = proto.error;
      h.hs = proto.hs;
    }
    if (last) h.wire = st.tensor_wire;
    hdr_bytes.clear();
    encode_header(h, hdr_bytes);
    if (hdr_bytes.size() > Limits{}.max_header_bytes)
      return make_error(Errc::limit_exceeded,
                        "frame header would be " + std::to_string(hdr_bytes.size()) +
                            " bytes, above the " + std::to_string(Limits{}.max_header_bytes) +
                            "-byte limit (too many tensors, channels or meta entries)");
    if (sealed) {
      auto t0 = Clock::now();
      seal_aad(aad, hdr_bytes.data(), hdr_bytes.size(), seg, 1, h.nparts);
      zmq::message_t tag(kTagBytes);
      TRACR_TRY(aead_.seal(next_ctr_, aad.data(), aad.size(), nullptr, 0, nullptr,
                           static_cast<uint8_t*>(tag.data())));
      ++next_ctr_;
      st.crypto_ns += ns_since(t0);
      seg.push_back(std::move(tag));
    }
    seg[0] = zmq::message_t(hdr_bytes.data(), hdr_bytes.size());
    for (const auto& m : seg) st.wire_bytes += m.size();
    st.segments++;
    // The last segment is handed to the transport from here on: the peer
    // cannot start on it earlier (the sender's round trip starts here).
    if (last) st.last_handoff_at_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          Clock::now().time_since_epoch()).count();
    TRACR_TRY(sink(std::move(seg)));
    seg.clear();
    seg.emplace_back();
    seg_index++;
    seg_payload = 0;
    seg_ctr = next_ctr_;
    return {};
  };

  for (size_t ti = 0; ti < bundle.size(); ++ti) {
    const Tensor& t = bundle[ti];
    const TensorDesc& d = descs[ti];
    const size_t es = dtype_size(d.dtype), ws = dtype_size(d.lossy.wire);
    const int64_t numel = t.numel();
    const int64_t chunk_elems = static_cast<int64_t>(d.chunk_bytes / ws);
    const bool lossy = d.lossy.kind != Lossy::none;
    const bool sparse = d.sparse;
    const bool blosc = d.comp == Compressor::blosc;
    for (uint32_t j = 0; j < d.parts; ++j) {
      const int64_t first = static_cast<int64_t>(j) * chunk_elems;
      const int64_t count = std::min(chunk_elems, numel - first);
      const uint8_t* src = t.data + static_cast<size_t>(first) * es;
      const size_t tn = static_cast<size_t>(count) * ws;  // transformed bytes of this part
      zmq::message_t part;
      auto t0 = Clock::now();
      if (!lossy && !sparse && !blosc && !enc) {
        part = t.keepalive ? borrow(src, tn, t.keepalive) : zmq::message_t(src, tn);
      } else {
        const size_t coded = sparse  ? sparse_max_encoded(count, ws, blosc)
                             : blosc ? blosc_max_compressed(tn)
                                     : tn;
        const size_t cap = coded + (enc ? kTagBytes : 0);
        Bytes out = Bytes::allocate(cap);
        const uint8_t* plain = src;
        size_t n = tn;
        if (lossy) {
          uint8_t* dst = out.data();
          if (sparse || blosc) {
            if (scratch_.size() < tn) scratch_.resize(tn);
            dst = scratch_.data();
          }
          lossy_encode(d.lossy, src, first, count, dst);
          if (sparse) sparse_int8_recenter(d.lossy, first, count, dst, false);
          plain = dst;
        }
        if (sparse) {
          auto r = sparse_encode(opt.codec, ws, plain, count, out.data(), coded, sparse_scratch_);
          if (!r) return make_error(r.error().code, "tensor '" + t.name + "': " + r.error().message);
          n = *r;
          plain = out.data();
        } else if (blosc) {
          // Exactly the bound: given more room blosc may emit more than it.
          auto r = blosc_compress(opt.codec, ws, plain, tn, out.data(), blosc_max_compressed(tn));
          if (!r) return make_error(r.error().code, "tensor '" + t.name + "': " + r.error().message);
          n = *r;
          plain = out.data();
        }
        st.codec_ns += ns_since(t0);
        if (enc) {
          auto t1 = Clock::now();
          TRACR_TRY(aead_.seal(next_ctr_, nullptr, 0, plain, n, out.data(), out.data() + n));
          ++next_ctr_;
          n += kTagBytes;
          st.crypto_ns += ns_since(t1);
        } else if (plain != out.data()) {
          std::memcpy(out.data(), plain, n);
        }
        part = adopt(std::move(out), n);
      }
      st.tensor_wire[ti] += part.size();
      st.payload_bytes += part.size();
      st.parts++;
      seg_payload += part.size();
      seg.push_back(std::move(part));
      const bool final_part = (ti + 1 == bundle.size()) && (j + 1 == d.parts);
      if (seg_payload >= seg_budget && !final_part) TRACR_TRY(flush(false));
    }
  }
  TRACR_TRY(flush(true));
  st.total_ns = ns_since(t_start);
  if (stats) *stats = std::move(st);
  return {};
}

// ---------------------------------------------------------------------------

struct FrameReader::Pending {
  Frame frame;
  std::vector<TensorDesc> descs;
  uint32_t next_seg = 1;
  uint64_t total_parts = 0;
  uint64_t consumed = 0;
  size_t tensor = 0;    // cursor: tensor index
  uint32_t chunk = 0;   // cursor: chunk index within that tensor
  bool failed = false;  // a segment was rejected; drop the rest of the frame
  Clock::time_point started;
  Clock::time_point last_segment;  // when its latest segment arrived
  uint64_t held_bytes = 0;         // tensor bytes allocated for it
};

uint64_t FrameReader::pending_bytes() const { return pending_ ? pending_->held_bytes : 0; }

std::optional<Error> FrameReader::abandon_stale(std::chrono::steady_clock::time_point older_than) {
  if (!pending_ || pending_->last_segment >= older_than) return std::nullopt;
  return drop_pending(": its next segment did not arrive in time; dropped");
}

Status FrameReader::set_key(const Key256& key, const Iv96& iv) {
  TRACR_TRY(aead_.set_key(key, iv));
  cipher_ = Cipher::aes256gcm;
  return {};
}

Status FrameReader::set_control_key(const Key256& key, const Iv96& iv) {
  TRACR_TRY(aead_.set_key(key, iv));
  seal_control_ = true;
  return {};
}

void RejectCounters::add(Errc code) {
  switch (code) {
    case Errc::auth_failed: auth_failed++; break;
    case Errc::replay: replay++; break;
    case Errc::truncated: truncated++; break;
    case Errc::decompress_failed:
    case Errc::codec_params:
    case Errc::unknown_codec: codec++; break;
    case Errc::malformed_header:
    case Errc::bad_magic:
    case Errc::unsupported_version:
    case Errc::unknown_message_type:
    case Errc::field_type:
    case Errc::missing_field:
    case Errc::limit_exceeded:
    case Errc::size_mismatch:
    case Errc::unsupported_dtype: malformed++; break;
    default: other++; break;
  }
}

Error FrameReader::reject(Error e) {
  rejected_.add(e.code);
  return e;
}

std::optional<Error> FrameReader::abandon() {
  if (!pending_) return std::nullopt;
  return drop_pending(" ended before its last segment arrived");
}

std::optional<Error> FrameReader::drop_pending(const char* why) {
  auto seq = pending_->frame.header.seq;
  bool failed = pending_->failed;
  pending_.reset();
  if (failed) return std::nullopt;  // already reported
  return reject(make_error(Errc::truncated, "frame " + std::to_string(seq) + why));
}

Status FrameReader::decode_parts(Pending& p, Segment& seg, size_t first, size_t n, uint64_t ctr) {
  const bool enc = cipher_ != Cipher::none;
  for (size_t i = 0; i < n; ++i) {
    // Advance the cursor past empty tensors.
    while (p.tensor < p.descs.size() && p.chunk >= p.descs[p.tensor].parts) {
      p.tensor++;
      p.chunk = 0;
    }
    if (p.tensor >= p.descs.size())
      return make_error(Errc::size_mismatch, "frame " + std::to_string(p.frame.header.seq) +
                                                 " has more parts than its tensors need");
    const TensorDesc& d = p.descs[p.tensor];
    Tensor& out = p.frame.tensors[p.tensor];
    const size_t es = dtype_size(d.dtype), ws = dtype_size(d.lossy.wire);
    const int64_t chunk_elems = static_cast<int64_t>(d.chunk_bytes / ws);
    const int64_t numel = static_cast<int64_t>(d.raw_bytes / es);
    const int64_t firstel = static_cast<int64_t>(p.chunk) * chunk_elems;
    const int64_t count = std::min(chunk_elems, numel - firstel);
    const size_t tn = static_cast<size_t>(count) * ws;
    const bool lossy = d.lossy.kind != Lossy::none;
    const bool sparse = d.sparse;
    const bool blosc = d.comp == Compressor::blosc;
    const bool coded = sparse || blosc;  // the part's size is not the chunk's
    zmq::message_t& m = seg[first + i];
    auto* data = static_cast<uint8_t*>(m.data());
    size_t len = m.size();
    uint8_t* dst = out.mutable_data() + static_cast<size_t>(firstel) * es;
    const std::string where = "tensor '" + d.name + "' part " + std::to_string(p.chunk);

    if (enc) {
      if (len < kTagBytes) return make_error(Errc::size_mismatch, where + " is shorter than a tag");
      len -= kTagBytes;
    }
    if (!coded && len != tn)
      return make_error(Errc::size_mismatch, where + " has " + std::to_string(len) + " bytes, expected " +
                                                 std::to_string(tn));
    const size_t bound = sparse ? sparse_max_encoded(count, ws, blosc) : blosc_max_compressed(tn);
    if (coded && len > bound)
      return make_error(Errc::size_mismatch, where + " is larger than its compressed bound (" + std::to_string(len) + " > " + std::to_string(bound) + ")");
    if (enc) {
      auto t0 = Clock::now();
      // Plain tensors decrypt straight into their destination.
      uint8_t* target = (!lossy && !coded) ? dst : data;
      auto st = aead_.open(ctr + i, nullptr, 0, data, len, target, data + len);
      p.frame.stats.crypto_ns += ns_since(t0);
      if (!st) return make_error(st.error().code, where + ": " + st.error().message);
      if (!lossy && !coded) {
        p.chunk++;
        continue;
      }
    }
    auto t0 = Clock::now();
    if (!lossy && !coded) {
      std::memcpy(dst, data, tn);
    } else {
      const uint8_t* wire = data;
      if (sparse) {
        uint8_t* target = dst;
        if (lossy) {
          if (scratch_.size() < tn) scratch_.resize(tn);
          target = scratch_.data();
        }
        if (auto st = sparse_decode(data, len, count, ws, blosc, target, sparse_scratch_); !st)
          return make_error(st.error().code, where + ": " + st.error().message);
        if (lossy) sparse_int8_recenter(d.lossy, firstel, count, target, true);
        wire = target;
      } else if (blosc) {
        uint8_t* target = dst;
        if (lossy) {
          if (scratch_.size() < tn) scratch_.resize(tn);
          target = scratch_.data();
        }
        TRACR_TRY(blosc_decompress(data, len, target, tn, 1));
        wire = target;
      }
      if (lossy) lossy_decode(d.lossy, wire, firstel, count, dst);
    }
    p.frame.stats.codec_ns += ns_since(t0);
    p.chunk++;
  }
  return {};
}

std::vector<Result<Frame>> FrameReader::feed(Segment& seg) {
  std::vector<Result<Frame>> out;
  const auto t0 = Clock::now();
  if (seg.empty()) {
    out.emplace_back(reject(make_error(Errc::malformed_header, "empty message")));
    return out;
  }
  const auto* hb = static_cast<const uint8_t*>(seg[0].data());
  const size_t hn = seg[0].size();
  auto hr = decode_header(hb, hn, lim_);
  if (!hr) {
    out.emplace_back(reject(std::move(hr.error())));
    return out;
  }
  Header& h = *hr;
  const bool enc = cipher_ != Cipher::none;
  int64_t seal_ns = 0;
  auto fail = [&](Error e) {
    out.emplace_back(reject(std::move(e)));
    return std::move(out);
  };
  const bool sealed = enc || (seal_control_ && msg_type_is_control(h.type));
  // A peer without our keys (e.g. a restarted server) can only say why in
  // plain text; surface it as a remote error, never as data.
  if (h.type == MsgType::error && h.error && h.cipher == Cipher::none && h.seg == 0 &&
      (h.cipher != cipher_ || (sealed && seg.size() == 1 + size_t{h.nparts})))
    return fail(make_error(Errc::remote, "peer sent an unauthenticated ERROR: " + h.error->str()));
  if (session_ != 0 && h.session != session_)
    return fail(make_error(Errc::wrong_session, "frame for session " + std::to_string(h.session) +
                                                    ", this connection is session " +
                                                    std::to_string(session_)));
  if (h.cipher != cipher_)
    return fail(make_error(Errc::cipher_mismatch,
                           "frame cipher '" + std::string(cipher_name(h.cipher)) +
                               "' but the session negotiated '" + std::string(cipher_name(cipher_)) + "'"));
  if (sealed && !enc && h.nparts != 0)
    return fail(make_error(Errc::size_mismatch, std::string(msg_type_name(h.type)) +
                                                    " on a plain session must carry no payload parts, got " +
                                                    std::to_string(h.nparts)));
  const size_t want_parts = 1 + h.nparts + (sealed ? 1 : 0);
  if (seg.size() != want_parts)
    return fail(make_error(sealed && !enc ? Errc::auth_failed : Errc::size_mismatch,
                           "segment has " + std::to_string(seg.size()) + " parts, header says " +
                               std::to_string(want_parts) +
                               (sealed && !enc ? " (control messages on this plain session are sealed)" : "")));
  if (sealed) {
    if (h.ctr <= last_ctr_)
      return fail(make_error(Errc::replay, "counter " + std::to_string(h.ctr) + " of frame " +
                                               std::to_string(h.seq) + " is not above " +
                                               std::to_string(last_ctr_) + " (replayed or reordered)"));
    if (h.ctr > UINT64_MAX - h.nparts - 1)
      return fail(make_error(Errc::limit_exceeded, "counter range overflows"));
    for (size_t i = 1; i <= h.nparts; ++i)
      if (seg[i].size() < kTagBytes)
        return fail(make_error(Errc::size_mismatch, "payload part shorter than its tag"));
    if (seg.back().size() != kTagBytes)
      return fail(make_error(Errc::size_mismatch, "seal part is not 16 bytes"));
    std::vector<uint8_t> aad;
    seal_aad(aad, hb, hn, seg, 1, h.nparts);
    auto t1 = Clock::now();
    auto st = aead_.open(h.ctr + h.nparts, aad.data(), aad.size(), nullptr, 0, nullptr,
                         static_cast<const uint8_t*>(seg.back().data()));
    if (!st)
      return fail(make_error(st.error().code, "seal of frame " + std::to_string(h.seq) + " segment " +
                                                  std::to_string(h.seg) + ": " + st.error().message));
    last_ctr_ = h.ctr + h.nparts;  // the header is authentic: its counters are spent
    seal_ns = ns_since(t1);
  }

  if (h.seg == 0) {
    if (pending_) {
      if (auto e = abandon()) out.emplace_back(std::move(*e));
    }
    if (h.seq <= last_seq_)
      return fail(make_error(Errc::replay, "frame " + std::to_string(h.seq) + " is not after frame " +
                                               std::to_string(last_seq_) + " (replayed or reordered)"));
    last_seq_ = h.seq;
    auto total = validate_descs(h.tensors, lim_);
    std::optional<Error> bad;
    if (!total) {
      bad = std::move(total.error());
    } else if (h.last && h.wire.size() != h.tensors.size()) {
      bad = make_error(Errc::size_mismatch, "last segment must list wire bytes of every tensor");
    } else {
      uint64_t raw = 0;  // within max_frame_bytes: validate_descs checked it
      for (const auto& d : h.tensors) raw += d.raw_bytes;
      if (raw > lim_.session_budget_bytes)
        bad = make_error(Errc::limit_exceeded, "frame " + std::to_string(h.seq) + " declares " +
                                                   std::to_string(raw) +
                                                   " tensor bytes, above this session's memory budget of " +
                                                   std::to_string(lim_.session_budget_bytes) + " bytes");
    }
    if (bad) {
      if (!h.last) {  // absorb the frame's remaining segments silently
        auto p = std::make_shared<Pending>();
        p->failed = true;
        p->frame.header.seq = h.seq;
        p->next_seg = 1;
        p->last_segment = t0;
        pending_ = std::move(p);
      }
      return fail(std::move(*bad));
    }
    auto p = std::make_shared<Pending>();
    p->started = t0;
    p->last_segment = t0;
    p->total_parts = *total;
    p->descs = h.tensors;
    for (const auto& d : p->descs) p->frame.tensors.push_back(Tensor::allocate(d.name, d.dtype, d.shape));
    p->frame.header_bytes.assign(hb, hb + hn);
    p->frame.header = std::move(h);
    p->frame.stats.raw_bytes = 0;
    for (const auto& d : p->descs) p->frame.stats.raw_bytes += d.raw_bytes;
    p->held_bytes = p->frame.stats.raw_bytes;
    p->frame.stats.tensor_wire.assign(p->descs.size(), 0);
    p->frame.stats.crypto_ns += seal_ns;
    pending_ = std::move(p);
  } else {
    if (!pending_ || pending_->frame.header.seq != h.seq || pending_->next_seg != h.seg) {
      if (pending_ && pending_->failed && pending_->frame.header.seq == h.seq) {
        pending_->last_segment = t0;
        if (h.last) pending_.reset();
        return out;  // rest of a frame already rejected
      }
      return fail(make_error(Errc::unexpected_message,
                             "segment " + std::to_string(h.seg) + " of frame " + std::to_string(h.seq) +
                                 " does not continue the frame in progress"));
    }
    pending_->next_seg++;
    pending_->last_segment = t0;
    pending_->frame.stats.crypto_ns += seal_ns;
    if (h.last) pending_->frame.header.wire = h.wire;
  }

  Pending& p = *pending_;
  if (p.failed) {
    if (h.last) pending_.reset();
    return out;
  }
  if (p.consumed + h.nparts > p.total_parts) {
    p.failed = true;
    if (h.last) pending_.reset();
    return fail(make_error(Errc::size_mismatch, "frame carries more parts than its tensors need"));
  }
  // Attribute payload bytes to tensors before the parts are decrypted in place.
  {
    size_t tcur = p.tensor;
    uint32_t ccur = p.chunk;
    for (size_t i = 0; i < h.nparts; ++i) {
      while (tcur < p.descs.size() && ccur >= p.descs[tcur].parts) { tcur++; ccur = 0; }
      if (tcur < p.descs.size()) p.frame.stats.tensor_wire[tcur] += seg[1 + i].size();
      ccur++;
    }
  }
  auto st = decode_parts(p, seg, 1, h.nparts, h.ctr);
  for (const auto& m : seg) p.frame.stats.wire_bytes += m.size();
  for (size_t i = 1; i <= h.nparts; ++i) p.frame.stats.payload_bytes += seg[i].size();
  p.frame.stats.parts += h.nparts;
  p.frame.stats.segments++;
  p.consumed += h.nparts;
  if (!st) {
    p.failed = true;
    Error e = std::move(st.error());
    e.message = "frame " + std::to_string(p.frame.header.seq) + ": " + e.message;
    if (h.last) pending_.reset();
    return fail(std::move(e));
  }
  p.frame.stats.total_ns += ns_since(t0);
  if (!h.last) return out;
  p.frame.stats.last_segment_at_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
  auto done = std::move(pending_);
  if (done->consumed != done->total_parts)
    return fail(make_error(Errc::truncated, "frame " + std::to_string(done->frame.header.seq) +
                                                " ended with " + std::to_string(done->consumed) + " of " +
                                                std::to_string(done->total_parts) + " parts"));
  if (done->frame.header.wire != done->frame.stats.tensor_wire)
    return fail(make_error(Errc::size_mismatch, "frame " + std::to_string(done->frame.header.seq) +
                                                    " wire byte totals disagree with its parts"));
  done->frame.stats.completed_at_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  out.emplace_back(std::move(done->frame));
  return out;
}

}  // namespace tracr::protocol
