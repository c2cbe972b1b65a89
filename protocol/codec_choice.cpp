#include "protocol/codec_choice.hpp"

#include <chrono>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "protocol/codec.hpp"
#include "protocol/crypto.hpp"
#include "protocol/frame.hpp"

namespace tracr::protocol {

const std::vector<std::string>& auto_codec_candidates() {
  static const std::vector<std::string> v = {"none",       "sparse",     "blosc-lz4", "sparse+blosc-lz4",
                                             "blosc-zstd", "sparse+blosc-zstd"};
  return v;
}

Result<std::vector<CodecTrial>> try_codecs(const Bundle& sample, const CodecChoiceOptions& opt) {
  using Clock = std::chrono::steady_clock;
  std::vector<CodecTrial> out;
  Key256 key{};
  Iv96 iv{};
  if (opt.encrypt) {
    TRACR_TRY(random_bytes(key.data(), key.size()));
    TRACR_TRY(random_bytes(iv.data(), iv.size()));
  }
  for (const auto& text : opt.candidates) {
    auto spec = CodecSpec::parse(text);
    if (!spec) return make_error(spec.error().code, "auto codec candidate '" + text + "': " + spec.error().message);
    CodecTrial t;
    t.codec = spec->name();
    t.encode_ms = t.decode_ms = std::numeric_limits<double>::infinity();
    SendOptions so;
    so.codec = *spec;
    so.chunk_bytes = opt.chunk_bytes;
    so.segment_bytes = opt.chunk_bytes;
    FrameWriter w;
    FrameReader r;
    if (opt.encrypt) {
      TRACR_TRY(w.set_key(key, iv));
      TRACR_TRY(r.set_key(key, iv));
    }
    for (int k = 0; k < std::max(1, opt.trials); ++k) {
      std::vector<Segment> segs;
      Header h;
      h.type = MsgType::infer_request;
      h.split = 0;
      FrameStats st;
      const auto t0 = Clock::now();
      TRACR_TRY(w.write(h, sample, so, [&](Segment&& s) {
        segs.push_back(std::move(s));
        return Status{};
      }, &st));
      const auto t1 = Clock::now();
      std::vector<Result<Frame>> frames;
      for (auto& s : segs)
        for (auto& f : r.feed(s)) frames.push_back(std::move(f));
      const auto t2 = Clock::now();
      if (frames.size() != 1 || !frames[0])
        return make_error(Errc::internal, "auto codec candidate " + t.codec + ": its own frame did not decode" +
                                              (frames.size() == 1 ? ": " + frames[0].error().str() : std::string()));
      // Lossless candidates must give the sample back exactly.
      const Bundle& got = frames[0]->tensors;
      bool same = got.size() == sample.size();
      for (size_t i = 0; same && i < got.size(); ++i)
        same = got[i].nbytes == sample[i].nbytes &&
               (sample[i].nbytes == 0 || std::memcmp(got[i].data, sample[i].data, sample[i].nbytes) == 0);
      if (!same) return make_error(Errc::internal, "auto codec candidate " + t.codec + " did not round-trip exactly");
      t.encode_ms = std::min(t.encode_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
      t.decode_ms = std::min(t.decode_ms, std::chrono::duration<double, std::milli>(t2 - t1).count());
      t.raw_bytes = st.raw_bytes;
      t.wire_bytes = st.wire_bytes;
    }
    t.link_ms = opt.up_mbps > 0 ? static_cast<double>(t.wire_bytes) * 8.0 / (opt.up_mbps * 1e3) : 0.0;
    t.total_ms = t.encode_ms + t.decode_ms + t.link_ms;
    out.push_back(t);
  }
  std::stable_sort(out.begin(), out.end(), [](const CodecTrial& a, const CodecTrial& b) { return a.total_ms < b.total_ms; });
  return out;
}

std::string describe_choice(const std::vector<CodecTrial>& trials, double up_mbps) {
  if (trials.empty()) return "auto: no candidate";
  auto one = [&](const CodecTrial& t) {
    return fmt::format("{} {:.3f} ms (encode {:.3f}, decode {:.3f}, {} of {} B{})", t.codec, t.total_ms, t.encode_ms,
                       t.decode_ms, t.wire_bytes, t.raw_bytes,
                       up_mbps > 0 ? fmt::format(" at {:.2f} Mbit/s: {:.3f}", up_mbps, t.link_ms) : std::string());
  };
  std::string s = "auto chose " + one(trials[0]) + (up_mbps > 0 ? "" : "; link rate unknown: CPU time decided") +
                  "; others:";
  for (size_t i = 1; i < trials.size(); ++i) s += (i > 1 ? "; " : " ") + one(trials[i]);
  return s;
}

}  // namespace tracr::protocol
