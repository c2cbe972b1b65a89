// The measurement record through the control channel: every field of
// record_fields.def survives the emitter and the parser unchanged, a missing
// or malformed field is an error naming it, and the identity helper.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "wire/control.hpp"
#include "wire/record.hpp"

using namespace tracr;
using namespace tracr::wire;

namespace {

std::string strip(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Distinct, awkward values in every field: negatives, large numbers, text
// that needs escaping, NULLs and non-NULLs.
FrameRecord awkward_frame() {
  FrameRecord r;
  int64_t n = -3;
  visit_frame(r, [&](const FieldInfo& f, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, int64_t>) v = (n *= -7) + 1;
    else if constexpr (std::is_same_v<T, std::string>) v = std::string(f.name) + " a=b #c%d;\ne";
    else if constexpr (std::is_same_v<T, std::optional<double>>) v = 0.1 + static_cast<double>(n);
    else v = n;
  });
  return r;
}

Result<ControlMsg> through_the_channel(const std::string& kind, const std::map<std::string, std::string>& fields) {
  std::vector<uint8_t> secret(32, 9);
  ControlCodec tx(secret, ControlDir::agent_to_controller), rx(secret, ControlDir::agent_to_controller);
  return rx.decode(strip(tx.encode(kind, fields)));
}

}  // namespace

TEST(Record, EveryFrameFieldSurvivesEmitterAndParser) {
  const FrameRecord in = awkward_frame();
  auto m = through_the_channel("FRAME", to_control(in));
  ASSERT_TRUE(m.ok()) << m.error().str();
  auto out = frame_from_control(*m);
  ASSERT_TRUE(out.ok()) << out.error().str();
  // Field by field, in table order.
  std::vector<std::string> a, b;
  visit_frame(in, [&](const FieldInfo& f, const auto& v) { a.push_back(f.name + ("=" + to_control(in).at(f.name))); (void)v; });
  visit_frame(*out, [&](const FieldInfo& f, const auto& v) { b.push_back(f.name + ("=" + to_control(*out).at(f.name))); (void)v; });
  EXPECT_EQ(a, b);
  EXPECT_EQ(in.network_ns, out->network_ns);
  EXPECT_EQ(in.link_est_mbps, out->link_est_mbps);
  EXPECT_EQ(in.sample_id, out->sample_id);
  // The line carries exactly the table's fields.
  std::set<std::string> names;
  for (const auto& f : frame_fields()) names.insert(f.name);
  std::set<std::string> keys;
  for (const auto& [k, v] : m->fields) keys.insert(k);
  EXPECT_EQ(names, keys);
}

TEST(Record, ProfileAndHardwareFieldsSurviveToo) {
  ProfileRecord p;
  p.layer_index = 7;
  p.name = "features.3";
  p.median_ns = 123456789;
  p.peak_mem_bytes = std::nullopt;  // not measurable: stays NULL, never 0
  p.hw_id = "abc";
  auto m = through_the_channel("PROFILE", to_control(p));
  ASSERT_TRUE(m.ok());
  auto q = profile_from_control(*m);
  ASSERT_TRUE(q.ok()) << q.error().str();
  EXPECT_EQ(q->median_ns, 123456789);
  EXPECT_FALSE(q->peak_mem_bytes.has_value());
  EXPECT_EQ(q->hw_id, "abc");

  HwIdentity h = local_hw_identity();
  EXPECT_GT(h.cores, 0);
  EXPECT_GT(h.memory_bytes, 0);
  EXPECT_EQ(h.hw_id.size(), 16u);
  auto hm = through_the_channel("READY", to_control(h));
  ASSERT_TRUE(hm.ok());
  auto h2 = hw_from_control(*hm);
  ASSERT_TRUE(h2.ok());
  EXPECT_EQ(h2->hw_id, h.hw_id);
  // The id follows the identity: another kernel is another machine kind.
  HwIdentity other = h;
  other.kernel += "-other";
  finish_hw_id(other);
  EXPECT_NE(other.hw_id, h.hw_id);
}

TEST(Record, SegmentProfilesSurviveAndASideThatIsNeitherIsRefused) {
  SegmentRecord s;
  s.split = 12;
  s.side = "tail";
  s.execution = "graph-optimized";
  s.median_ns = 4567890;
  s.mean_ns = 4600000;
  s.reps = 10;
  auto m = through_the_channel("SEGMENT", to_control(s));
  ASSERT_TRUE(m.ok());
  auto q = segment_from_control(*m);
  ASSERT_TRUE(q.ok()) << q.error().str();
  EXPECT_EQ(q->split, 12);
  EXPECT_EQ(q->side, "tail");
  EXPECT_EQ(q->execution, "graph-optimized");
  EXPECT_EQ(q->mean_ns, 4600000);
  auto fields = to_control(s);
  fields["side"] = "middle";
  auto bad = through_the_channel("SEGMENT", fields);
  ASSERT_TRUE(bad.ok());
  auto r = segment_from_control(*bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("SEGMENT field 'side' must be head or tail, got 'middle'"), std::string::npos)
      << r.error().message;
  fields = to_control(s);
  fields["split"] = "-1";
  auto neg = through_the_channel("SEGMENT", fields);
  ASSERT_TRUE(neg.ok());
  EXPECT_FALSE(segment_from_control(*neg).ok());
}

TEST(Record, MissingOrMalformedFieldIsAnErrorNamingIt) {
  auto fields = to_control(awkward_frame());
  fields.erase("network_ns");
  auto m = through_the_channel("FRAME", fields);
  ASSERT_TRUE(m.ok());
  auto r = frame_from_control(*m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::missing_field);
  EXPECT_NE(r.error().message.find("'network_ns'"), std::string::npos) << r.error().message;

  fields = to_control(awkward_frame());
  fields["total_ns"] = "12x";
  r = frame_from_control(*through_the_channel("FRAME", fields));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::field_type);
  EXPECT_NE(r.error().message.find("'total_ns'"), std::string::npos) << r.error().message;

  fields = to_control(awkward_frame());
  fields["link_est_mbps"] = "nan";
  r = frame_from_control(*through_the_channel("FRAME", fields));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'link_est_mbps'"), std::string::npos);

  // Extra keys (progress counters) are not fields and do not matter.
  fields = to_control(awkward_frame());
  fields["done"] = "3";
  EXPECT_TRUE(frame_from_control(*through_the_channel("FRAME", fields)).ok());
}

TEST(Record, TopkRowsAndOutputTensorRideOnTheFrameLine) {
  FrameRecord in = awkward_frame();
  // Names with the separators the encoding escapes, and '%' itself.
  in.topk = {{0, 1, 207, "golden retriever", 0.625},
             {0, 2, 3, "a:b;c%3A", 0.25},
             {1, 1, 999, "", 1e-7}};
  in.outputs = {1.5f, -0.0f, 3.4028235e38f, -1e-38f, 0.1f, 7.0f};
  in.outputs_shape = {2, 3};
  auto m = through_the_channel("FRAME", to_control(in));
  ASSERT_TRUE(m.ok()) << m.error().str();
  auto out = frame_from_control(*m);
  ASSERT_TRUE(out.ok()) << out.error().str();
  ASSERT_EQ(out->topk.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out->topk[i].pos, in.topk[i].pos);
    EXPECT_EQ(out->topk[i].rank, in.topk[i].rank);
    EXPECT_EQ(out->topk[i].class_index, in.topk[i].class_index);
    EXPECT_EQ(out->topk[i].class_name, in.topk[i].class_name);
    EXPECT_FLOAT_EQ(out->topk[i].prob, in.topk[i].prob);
  }
  EXPECT_EQ(out->outputs_shape, in.outputs_shape);
  ASSERT_EQ(out->outputs.size(), in.outputs.size());
  for (size_t i = 0; i < in.outputs.size(); ++i)  // bit for bit, the sign of -0 included
    EXPECT_EQ(std::memcmp(&out->outputs[i], &in.outputs[i], 4), 0) << i;

  // A malformed payload is an error naming its key.
  auto fields = to_control(in);
  fields["topk"] = "0:1:207:lots:x";
  auto r = frame_from_control(*through_the_channel("FRAME", fields));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::field_type);
  EXPECT_NE(r.error().message.find("'topk'"), std::string::npos) << r.error().message;
  fields = to_control(in);
  fields["outputs_shape"] = "2,4";  // 8 values announced, 6 sent
  r = frame_from_control(*through_the_channel("FRAME", fields));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'outputs'"), std::string::npos) << r.error().message;
  fields = to_control(in);
  fields["outputs"] = "zz" + fields["outputs"].substr(2);
  r = frame_from_control(*through_the_channel("FRAME", fields));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'outputs'"), std::string::npos) << r.error().message;
}

// Each output tensor's name and shape per sample ride beside the values
// (#46: a graph model's outputs are stored each in its own shape).
TEST(Record, OutputTensorsKeepTheirNamesAndShapesOnTheFrameLine) {
  FrameRecord in = awkward_frame();
  in.outputs.assign(2 * 7, 0.5f);
  in.outputs_shape = {2, 7};
  in.output_parts = {{"boxes:a;b%", {2, 3}}, {"", {}}};  // a name with the escaped separators; a scalar per sample
  auto fields = to_control(in);
  EXPECT_EQ(fields["outputs_parts"], "boxes%3Aa%3Bb%25:2,3;:");
  auto out = frame_from_control(*through_the_channel("FRAME", fields));
  ASSERT_TRUE(out.ok()) << out.error().str();
  EXPECT_EQ(out->output_parts, in.output_parts);

  // A frame without the key (an older agent) parses with no parts.
  fields.erase("outputs_parts");
  out = frame_from_control(*through_the_channel("FRAME", fields));
  ASSERT_TRUE(out.ok()) << out.error().str();
  EXPECT_TRUE(out->output_parts.empty());

  // Parts that do not add up to the values per sample, or that are not sizes: errors naming the key.
  for (const std::string bad : {"a:2,3", "a:2,3;b:1;c:1", "a:2,x;b:", "a", "a:-1;b:8"}) {
    fields = to_control(in);
    fields["outputs_parts"] = bad;
    auto r = frame_from_control(*through_the_channel("FRAME", fields));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("'outputs_parts'"), std::string::npos) << bad << ": " << r.error().message;
  }
}

// A chain's frame carries one row per device after the participant; NULLs
// (a figure the reply lacked) stay NULL, and a malformed entry is named.
TEST(Record, AChainsHopsRideOnTheFrameLine) {
  FrameRecord in = awkward_frame();
  HopRecord a, b;
  int64_t n = 5;
  visit_hop(a, [&](const FieldInfo&, auto& v) { v = n++; });
  visit_hop(b, [&](const FieldInfo&, auto& v) { v = -(n++); });
  b.hop = 2;
  b.forward_ns.reset();  // the last device forwards nothing
  b.network_ns.reset();
  in.hops = {a, b};
  auto m = through_the_channel("FRAME", to_control(in));
  ASSERT_TRUE(m.ok()) << m.error().str();
  auto out = frame_from_control(*m);
  ASSERT_TRUE(out.ok()) << out.error().str();
  ASSERT_EQ(out->hops.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    std::vector<std::string> want, got;
    visit_hop(in.hops[i], [&](const FieldInfo&, const auto& v) { want.push_back(field_text(v)); });
    visit_hop(out->hops[i], [&](const FieldInfo&, const auto& v) { got.push_back(field_text(v)); });
    EXPECT_EQ(got, want) << i;
  }
  EXPECT_FALSE(out->hops[1].forward_ns.has_value());
  // Two-tier frames carry none.
  FrameRecord two = awkward_frame();
  auto plain = frame_from_control(*through_the_channel("FRAME", to_control(two)));
  ASSERT_TRUE(plain.ok()) << plain.error().str();
  EXPECT_TRUE(plain->hops.empty());
  EXPECT_EQ(to_control(two).count("hops"), 0u);
  auto fields = to_control(in);
  fields["hops"] = "1:3:13";
  auto r = frame_from_control(*through_the_channel("FRAME", fields));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::field_type);
  EXPECT_NE(r.error().message.find("'hops'"), std::string::npos) << r.error().message;
  fields["hops"] = to_control(in)["hops"];
  fields["hops"][0] = 'x';
  r = frame_from_control(*through_the_channel("FRAME", fields));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'hops'"), std::string::npos) << r.error().message;
}

TEST(Record, IdentityResidualIsTotalMinusTheTerms) {
  FrameRecord r;
  r.head_ns = 10;
  r.encode_ns = 20;
  r.network_ns = -5;  // kept as measured
  r.server_ns = 100;
  r.queue_ns = 0;
  r.return_ns = 3;
  r.post_ns = 2;
  r.total_ns = 130;
  EXPECT_EQ(identity_residual(r), 0);
  r.total_ns = 131;
  EXPECT_EQ(identity_residual(r), 1);
  EXPECT_EQ(identity_terms().size(), 7u);
  for (const auto& t : identity_terms()) {
    bool summarised = false;
    for (const auto& f : frame_fields())
      if (t == f.name) summarised = f.summarise;
    EXPECT_TRUE(summarised) << t << " is an identity term: it must be a summarised field";
  }
}

// probe.chunk_bytes: auto. About 32 messages fill the probe's duration at the
// sizing pass's rate, in whole 4 KiB pages, 16 KiB to 4 MiB.
TEST(ProbeAutoChunk, FillsTheDurationWithAbout32MessagesWithinBounds) {
  // 213 Mbit/s for 1.5 s: 39.9 MB / 32 = 1,248,046 B, down to a 4 KiB page.
  EXPECT_EQ(auto_probe_chunk(213.0, 1500), 304 * 4096);
  EXPECT_EQ(auto_probe_chunk(40.0, 1000), 38 * 4096);   // 156,250 B
  EXPECT_EQ(auto_probe_chunk(1.0, 1000), 16 * 1024);    // 3,906 B: the floor
  EXPECT_EQ(auto_probe_chunk(0.0, 1000), 16 * 1024);    // the pass measured nothing
  EXPECT_EQ(auto_probe_chunk(10000.0, 1500), 4 << 20);  // 58.6 MB: the ceiling
  for (double mbps : {0.5, 3.0, 27.0, 400.0, 950.0, 5000.0})
    for (int ms : {100, 1000, 1500, 3000}) {
      const int64_t b = auto_probe_chunk(mbps, ms);
      EXPECT_EQ(b % 4096, 0);
      EXPECT_GE(b, 16 * 1024);
      EXPECT_LE(b, 4 << 20);
      EXPECT_GE(auto_probe_chunk(mbps * 2, ms), b);  // a faster pass never gives smaller messages
    }
}
