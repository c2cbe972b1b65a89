#include "protocol/frame.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>

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

// One payload part of a frame: tensor index and chunk index within it.
struct PartRef {
  size_t tensor = 0;
  uint32_t chunk = 0;
};

// The elements a part covers.
struct Chunk {
  const Tensor* tensor = nullptr;
  const TensorDesc* desc = nullptr;
  int64_t first = 0;  // first element
  int64_t count = 0;  // elements
};

// A part coded (lossy, sparse, blosc) and waiting for its seal.
struct EncodedPart {
  Bytes out;                       // the part's buffer, room for the tag included
  const uint8_t* plain = nullptr;  // the coded bytes (in out, or the tensor's own)
  size_t n = 0;                    // coded bytes
  size_t tag = 0;                  // kTagBytes when encrypted
  uint64_t ctr = 0;                // AEAD counter, given in wire order
  Status status;
  int64_t codec_ns = 0, crypto_ns = 0;
  size_t size() const { return n + tag; }  // bytes on the wire
};

// Lossy transform, sparse stage and blosc of one chunk into a fresh buffer
// (PROTOCOL.md 4.1). Uses only its arguments, so workers may run it at once
// on different chunks with their own scratch buffers.
Status encode_chunk(const CodecSpec& spec, const Chunk& c, bool enc, std::vector<uint8_t>& scratch,
                    std::vector<uint8_t>& sparse_scratch, EncodedPart& e) {
  const auto t0 = Clock::now();
  const TensorDesc& d = *c.desc;
  const size_t es = dtype_size(d.dtype), ws = dtype_size(d.lossy.wire);
  const size_t tn = static_cast<size_t>(c.count) * ws;  // transformed bytes of this part
  const uint8_t* src = c.tensor->data + static_cast<size_t>(c.first) * es;
  const bool lossy = d.lossy.kind != Lossy::none;
  const bool sparse = d.sparse;
  const bool blosc = d.comp == Compressor::blosc;
  const size_t coded = sparse  ? sparse_max_encoded(c.count, ws, blosc)
                       : blosc ? blosc_max_compressed(tn)
                               : tn;
  e.tag = enc ? kTagBytes : 0;
  e.out = Bytes::allocate(coded + e.tag);
  e.plain = src;
  e.n = tn;
  if (lossy) {
    uint8_t* dst = e.out.data();
    if (sparse || blosc) {
      if (scratch.size() < tn) scratch.resize(tn);
      dst = scratch.data();
    }
    lossy_encode(d.lossy, src, c.first, c.count, dst);
    if (sparse) sparse_int8_recenter(d.lossy, c.first, c.count, dst, false);
    e.plain = dst;
  }
  if (sparse) {
    auto r = sparse_encode(spec, ws, e.plain, c.count, e.out.data(), coded, sparse_scratch);
    if (!r) return make_error(r.error().code, "tensor '" + d.name + "': " + r.error().message);
    e.n = *r;
    e.plain = e.out.data();
  } else if (blosc) {
    // Exactly the bound: given more room blosc may emit more than it.
    auto r = blosc_compress(spec, ws, e.plain, tn, e.out.data(), blosc_max_compressed(tn));
    if (!r) return make_error(r.error().code, "tensor '" + d.name + "': " + r.error().message);
    e.n = *r;
    e.plain = e.out.data();
  }
  e.codec_ns = ns_since(t0);
  return {};
}

// Seals a coded part under its counter into its buffer (ciphertext || tag),
// or moves plain bytes into the buffer on a plain session.
Status finish_part(bool enc, AesGcm& aead, EncodedPart& e) {
  if (enc) {
    const auto t0 = Clock::now();
    TRACR_TRY(aead.seal(e.ctr, nullptr, 0, e.plain, e.n, e.out.data(), e.out.data() + e.n));
    e.crypto_ns = ns_since(t0);
  } else if (e.plain != e.out.data()) {
    std::memcpy(e.out.data(), e.plain, e.n);
  }
  return {};
}


// One received part to decrypt and decode into its place in a tensor;
// checked against its bounds before it is queued.
struct DecodeJob {
  const TensorDesc* desc = nullptr;
  uint8_t* data = nullptr;  // the part (decrypted in place)
  size_t len = 0;           // its bytes without the tag
  uint8_t* dst = nullptr;   // element `firstel` of the tensor
  int64_t firstel = 0, count = 0;
  size_t tn = 0;            // transformed bytes of the chunk
  uint64_t ctr = 0;         // AEAD counter of the part
  std::string where;        // "tensor 'x' part n", for errors
  Status status;
  int64_t codec_ns = 0, crypto_ns = 0;
};

// Decrypts and decodes one part (PROTOCOL.md 4.1 in reverse). Uses only its
// arguments, so workers may run it at once on different parts.
Status decode_chunk(bool enc, AesGcm& aead, std::vector<uint8_t>& scratch,
                    std::vector<uint8_t>& sparse_scratch, DecodeJob& j) {
  const TensorDesc& d = *j.desc;
  const bool lossy = d.lossy.kind != Lossy::none;
  const bool sparse = d.sparse;
  const bool blosc = d.comp == Compressor::blosc;
  const bool coded = sparse || blosc;
  if (enc) {
    auto t0 = Clock::now();
    // Plain tensors decrypt straight into their destination.
    uint8_t* target = (!lossy && !coded) ? j.dst : j.data;
    auto st = aead.open(j.ctr, nullptr, 0, j.data, j.len, target, j.data + j.len);
    j.crypto_ns += ns_since(t0);
    if (!st) return make_error(st.error().code, j.where + ": " + st.error().message);
    if (!lossy && !coded) return {};
  }
  auto t0 = Clock::now();
  if (!lossy && !coded) {
    std::memcpy(j.dst, j.data, j.tn);
  } else {
    const uint8_t* wire = j.data;
    const size_t ws = dtype_size(d.lossy.wire);
    if (coded) {
      uint8_t* target = j.dst;
      if (lossy) {
        if (scratch.size() < j.tn) scratch.resize(j.tn);
        target = scratch.data();
      }
      if (sparse) {
        if (auto st = sparse_decode(j.data, j.len, j.count, ws, blosc, target, sparse_scratch); !st)
          return make_error(st.error().code, j.where + ": " + st.error().message);
        if (lossy) sparse_int8_recenter(d.lossy, j.firstel, j.count, target, true);
      } else {
        TRACR_TRY(blosc_decompress(j.data, j.len, target, j.tn, 1));
      }
      wire = target;
    }
    if (lossy) lossy_decode(d.lossy, wire, j.firstel, j.count, j.dst);
  }
  j.codec_ns += ns_since(t0);
  return {};
}

}  // namespace

Status detail::Lanes::ensure(unsigned n, const AesGcm& key) {
  n = resolve_threads(n);
  if (n != threads || !pool) {
    pool = WorkerPool::shared(n);
    threads = n;
    lanes.reset();
  }
  if (!lanes || lanes->size() != n) {
    lanes = std::make_shared<std::vector<Lane>>(n);
    keyed = false;
  }
  if (!keyed && key.has_key()) {
    for (auto& l : *lanes) {
      auto c = key.clone();
      if (!c) return std::move(c.error());
      l.aead = std::move(*c);
    }
    keyed = true;
  }
  return {};
}

bool msg_type_is_control(MsgType t) {
  return t == MsgType::heartbeat || t == MsgType::error || t == MsgType::shutdown || t == MsgType::goodbye;
}

Status FrameWriter::set_key(const Key256& key, const Iv96& iv) {
  workers_.forget_keys();
  TRACR_TRY(aead_.set_key(key, iv));
  cipher_ = Cipher::aes256gcm;
  return {};
}

Status FrameWriter::set_control_key(const Key256& key, const Iv96& iv) {
  workers_.forget_keys();
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
  // Within the spec's bounds on a part (PROTOCOL.md 8: 4 KiB .. 64 MiB).
  const size_t chunk_opt = std::clamp<size_t>(opt.chunk_bytes, 4096, Limits{}.max_chunk_bytes);

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
  st.seq = seq;
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

  // Every part of the frame, in wire order.
  std::vector<PartRef> parts;
  for (size_t ti = 0; ti < bundle.size(); ++ti)
    for (uint32_t j = 0; j < descs[ti].parts; ++j) parts.push_back({ti, j});
  auto chunk_of = [&](const PartRef& r) {
    const TensorDesc& d = descs[r.tensor];
    const int64_t chunk_elems = static_cast<int64_t>(d.chunk_bytes / dtype_size(d.lossy.wire));
    const int64_t first = static_cast<int64_t>(r.chunk) * chunk_elems;
    return Chunk{&bundle[r.tensor], &d, first, std::min(chunk_elems, bundle[r.tensor].numel() - first)};
  };
  // Appends one finished part to the segment, flushing it when full.
  auto append = [&](size_t k, zmq::message_t part) -> Status {
    st.tensor_wire[parts[k].tensor] += part.size();
    st.payload_bytes += part.size();
    st.parts++;
    seg_payload += part.size();
    seg.push_back(std::move(part));
    if (seg_payload >= seg_budget && k + 1 != parts.size()) TRACR_TRY(flush(false));
    return {};
  };

  const unsigned threads = resolve_threads(opt.threads);
  if (threads <= 1 || !has_work || parts.size() <= 1) {
    for (size_t k = 0; k < parts.size(); ++k) {
      const Chunk c = chunk_of(parts[k]);
      const bool coded = c.desc->lossy.kind != Lossy::none || c.desc->sparse || c.desc->comp == Compressor::blosc;
      zmq::message_t part;
      if (!coded && !enc) {
        const uint8_t* src = c.tensor->data + static_cast<size_t>(c.first) * dtype_size(c.desc->dtype);
        const size_t tn = static_cast<size_t>(c.count) * dtype_size(c.desc->lossy.wire);
        part = c.tensor->keepalive ? borrow(src, tn, c.tensor->keepalive) : zmq::message_t(src, tn);
      } else {
        EncodedPart e;
        TRACR_TRY(encode_chunk(opt.codec, c, enc, scratch_, sparse_scratch_, e));
        if (enc) e.ctr = next_ctr_++;
        TRACR_TRY(finish_part(enc, aead_, e));
        st.codec_ns += e.codec_ns;
        st.crypto_ns += e.crypto_ns;
        part = adopt(std::move(e.out), e.size());
      }
      TRACR_TRY(append(k, std::move(part)));
    }
  } else {
    // Parallel: workers code parts ahead of the one being placed; this thread
    // takes them in order, gives each its counter (which depends on where
    // the earlier parts' sizes put the segment boundaries, as above), lets a
    // worker seal it, and hands each segment over once its parts are sealed.
    TRACR_TRY(workers_.ensure(threads, aead_));
    WorkerPool& pool = *workers_.pool;
    std::vector<EncodedPart> slots(parts.size());
    std::vector<std::future<void>> coded(parts.size()), sealed_f(parts.size());
    struct Drain {  // tasks reference slots, lanes and tensors: wait for them on any exit
      std::vector<std::future<void>>& a;
      std::vector<std::future<void>>& b;
      ~Drain() {
        for (auto& f : a)
          if (f.valid()) f.wait();
        for (auto& f : b)
          if (f.valid()) f.wait();
      }
    } drain{coded, sealed_f};
    const size_t window = 2 * size_t{pool.size()};
    size_t submitted = 0, placed_from = 0;
    detail::Lane* lanes = workers_.lanes->data();
    const CodecSpec& spec = opt.codec;
    for (size_t k = 0; k < parts.size(); ++k) {
      for (; submitted < parts.size() && submitted < k + window; ++submitted) {
        const Chunk c = chunk_of(parts[submitted]);
        EncodedPart* e = &slots[submitted];
        coded[submitted] = pool.submit([c, e, enc, lanes, &spec](unsigned w) {
          e->status = encode_chunk(spec, c, enc, lanes[w].scratch, lanes[w].sparse_scratch, *e);
        });
      }
      coded[k].get();
      EncodedPart& e = slots[k];
      TRACR_TRY(e.status);
      if (enc) e.ctr = next_ctr_++;
      if (enc)
        sealed_f[k] = pool.submit([&e, lanes](unsigned w) { e.status = finish_part(true, lanes[w].aead, e); });
      else
        e.status = finish_part(false, aead_, e);
      // The segment boundary depends only on sizes, known before sealing.
      seg_payload += e.size();
      const bool full = seg_payload >= seg_budget && k + 1 != parts.size();
      if (!full && k + 1 != parts.size()) continue;
      seg_payload = 0;  // append() counts it again
      for (size_t i = placed_from; i <= k; ++i) {
        if (sealed_f[i].valid()) sealed_f[i].get();
        TRACR_TRY(slots[i].status);
        st.codec_ns += slots[i].codec_ns;
        st.crypto_ns += slots[i].crypto_ns;
        const size_t n = slots[i].size();
        TRACR_TRY(append(i, adopt(std::move(slots[i].out), n)));
      }
      placed_from = k + 1;
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
  // threads > 1: parts being decoded by workers (they write into frame.tensors).
  std::deque<DecodeJob> jobs;
  std::vector<std::future<void>> inflight;
  // Waits for every part's task; the first failure in part order, if any.
  Status finish_jobs();
  ~Pending() {
    for (auto& f : inflight)
      if (f.valid()) f.wait();
  }
};

uint64_t FrameReader::pending_bytes() const { return pending_ ? pending_->held_bytes : 0; }

std::optional<Error> FrameReader::abandon_stale(std::chrono::steady_clock::time_point older_than) {
  if (!pending_ || pending_->last_segment >= older_than) return std::nullopt;
  return drop_pending(": its next segment did not arrive in time; dropped");
}

Status FrameReader::set_key(const Key256& key, const Iv96& iv) {
  workers_.forget_keys();
  TRACR_TRY(aead_.set_key(key, iv));
  cipher_ = Cipher::aes256gcm;
  return {};
}

Status FrameReader::set_control_key(const Key256& key, const Iv96& iv) {
  workers_.forget_keys();
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
  Error e = make_error(Errc::truncated, "frame " + std::to_string(seq) + why);
  e.frame_seq = seq;
  return reject(std::move(e));
}

// A segment other than the next one of the frame in progress: one was lost
// (or the peer misbehaves). Each frame gets one refusal, never one per
// segment, so the ERRORs stay one per request (PROTOCOL.md 3.4): the frame
// in progress, if another, is truncated; this frame is refused once and its
// later segments are absorbed. nullopt: nothing more to say.
std::optional<Error> FrameReader::continuation_out_of_order(const Header& h, Clock::time_point t0,
                                                            std::vector<Result<Frame>>& out) {
  const bool same = pending_ && pending_->frame.header.seq == h.seq;
  std::string why = "segment " + std::to_string(h.seg) + " of frame " + std::to_string(h.seq);
  if (same) {
    why += " arrived where segment " + std::to_string(pending_->next_seg) + " was expected (a segment was lost)";
    pending_->failed = true;
    pending_->last_segment = t0;
    if (h.last) pending_.reset();
    return make_error(Errc::unexpected_message, why);
  }
  if (pending_)
    if (auto e = abandon()) out.emplace_back(std::move(*e));
  if (h.seq <= last_seq_)
    return make_error(Errc::unexpected_message, why + " does not continue the frame in progress (frame " +
                                                    std::to_string(h.seq) + " is not after frame " +
                                                    std::to_string(last_seq_) + ")");
  // The frame's first segment never came: refuse it now, absorb the rest.
  last_seq_ = h.seq;
  if (!h.last) {
    auto p = std::make_shared<Pending>();
    p->failed = true;
    p->frame.header.seq = h.seq;
    p->next_seg = h.seg + 1;
    p->last_segment = t0;
    pending_ = std::move(p);
  }
  return make_error(Errc::unexpected_message, why + " arrived before its segment 0 (a segment was lost)");
}

Status FrameReader::decode_parts(Pending& p, Segment& seg, size_t first, size_t n, uint64_t ctr) {
  const bool enc = cipher_ != Cipher::none;
  const unsigned threads = resolve_threads(ro_.threads);
  std::shared_ptr<Segment> held;  // parallel: the parts live until their tasks are done
  std::shared_ptr<std::vector<detail::Lane>> lanes;
  if (threads > 1 && n > 0) {
    TRACR_TRY(workers_.ensure(threads, aead_));
    lanes = workers_.lanes;
    held = std::make_shared<Segment>(std::move(seg));
  }
  Segment& parts = held ? *held : seg;  // NOLINT(bugprone-use-after-move): seg is moved only when held
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
    DecodeJob j;
    j.desc = &d;
    j.firstel = static_cast<int64_t>(p.chunk) * chunk_elems;
    j.count = std::min(chunk_elems, numel - j.firstel);
    j.tn = static_cast<size_t>(j.count) * ws;
    j.ctr = ctr + i;
    const bool sparse = d.sparse;
    const bool blosc = d.comp == Compressor::blosc;
    const bool coded = sparse || blosc;  // the part's size is not the chunk's
    zmq::message_t& m = parts[first + i];
    j.data = static_cast<uint8_t*>(m.data());
    j.len = m.size();
    j.dst = out.mutable_data() + static_cast<size_t>(j.firstel) * es;
    j.where = "tensor '" + d.name + "' part " + std::to_string(p.chunk);

    if (enc) {
      if (j.len < kTagBytes) return make_error(Errc::size_mismatch, j.where + " is shorter than a tag");
      j.len -= kTagBytes;
    }
    if (!coded && j.len != j.tn)
      return make_error(Errc::size_mismatch, j.where + " has " + std::to_string(j.len) + " bytes, expected " +
                                                 std::to_string(j.tn));
    const size_t bound = sparse ? sparse_max_encoded(j.count, ws, blosc) : blosc_max_compressed(j.tn);
    if (coded && j.len > bound)
      return make_error(Errc::size_mismatch, j.where + " is larger than its compressed bound (" + std::to_string(j.len) + " > " + std::to_string(bound) + ")");
    p.chunk++;
    if (!held) {
      auto st = decode_chunk(enc, aead_, scratch_, sparse_scratch_, j);
      p.frame.stats.crypto_ns += j.crypto_ns;
      p.frame.stats.codec_ns += j.codec_ns;
      TRACR_TRY(st);
      continue;
    }
    p.jobs.push_back(std::move(j));
    DecodeJob* jp = &p.jobs.back();
    p.inflight.push_back(workers_.pool->submit([jp, enc, lanes, held](unsigned w) {
      detail::Lane& l = (*lanes)[w];
      jp->status = decode_chunk(enc, l.aead, l.scratch, l.sparse_scratch, *jp);
    }));
  }
  return {};
}

Status FrameReader::Pending::finish_jobs() {
  for (auto& f : inflight) f.get();
  inflight.clear();
  Status first_error;
  for (auto& j : jobs) {
    frame.stats.crypto_ns += j.crypto_ns;
    frame.stats.codec_ns += j.codec_ns;
    if (!j.status && first_error) first_error = std::move(j.status);
  }
  jobs.clear();
  return first_error;
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
  // Every refusal from here on is about frame h.seq: the ERROR that answers
  // it names that frame (PROTOCOL.md 3.4, req_seq).
  auto fail = [&](Error e) {
    if (e.frame_seq == 0) e.frame_seq = h.seq;
    out.emplace_back(reject(std::move(e)));
    return std::move(out);
  };
  const bool sealed = enc || (seal_control_ && msg_type_is_control(h.type));
  // A peer without our keys (e.g. a restarted server) can only say why in
  // plain text; surface it as a remote error, never as data.
  if (h.type == MsgType::error && h.error && h.cipher == Cipher::none && h.seg == 0 &&
      (h.cipher != cipher_ || (sealed && seg.size() == 1 + size_t{h.nparts}))) {
    last_remote_code_ = h.error->code;
    return fail(make_error(Errc::remote, "peer sent an unauthenticated ERROR: " + h.error->str()));
  }
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
    p->frame.header = h;  // copied: h.last and h.nparts are read below
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
      if (auto lost = continuation_out_of_order(h, t0, out)) return fail(std::move(*lost));
      return out;
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
  for (const auto& m : seg) p.frame.stats.wire_bytes += m.size();
  for (size_t i = 1; i <= h.nparts; ++i) p.frame.stats.payload_bytes += seg[i].size();
  auto st = decode_parts(p, seg, 1, h.nparts, h.ctr);  // threads > 1: may take seg's parts
  p.frame.stats.parts += h.nparts;
  p.frame.stats.segments++;
  p.consumed += h.nparts;
  // Parts decoded by workers: the frame is complete once they are.
  if (st && h.last) st = p.finish_jobs();
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
