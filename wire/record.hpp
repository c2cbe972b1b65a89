// The measurement record: frames, layer profiles and hardware identity, each
// generated from wire/record_fields.def (one definition per field). The
// agent emits them as control lines (to_control), the controller parses them
// back (from_control) and stores them column by column (visit); nothing the
// agent measures can be dropped on the way, because every step iterates the
// same list. No LibTorch here: the controller links it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wire/control.hpp"
#include "protocol/error.hpp"

namespace tracr::wire {

enum class FieldKind { integer, opt_integer, text, opt_real };

struct FieldInfo {
  const char* name;
  FieldKind kind;
  const char* unit;
  const char* side;
  bool summarise;
  const char* meaning;
};

#define TRACR_FT_I int64_t
#define TRACR_FT_N std::optional<int64_t>
#define TRACR_FT_T std::string
#define TRACR_FT_R std::optional<double>

// One of a sample's most probable classes (frame_topk rows).
struct TopkEntry {
  int64_t pos = 0;         // sample's position in the frame (0-based)
  int64_t rank = 0;        // 1 = most probable
  int64_t class_index = 0;
  std::string class_name;  // '' when the model's classes have no names
  double prob = 0;         // softmax probability
};

// One device of a chain that a frame crossed (frame_hops rows; fields in
// record_fields.def). device and codec are not on the line: the controller
// fills them from the chain it started.
struct HopRecord {
#define TRACR_HOP_FIELD(n, k, ...) TRACR_FT_##k n{};
#include "wire/record_fields.def"
#undef TRACR_HOP_FIELD
  std::string device, codec;
};

// One frame (one batch through head, link, tail and post-processing).
struct FrameRecord {
#define TRACR_FRAME_FIELD(n, k, ...) TRACR_FT_##k n{};
#include "wire/record_fields.def"
#undef TRACR_FRAME_FIELD
  // Not columns of frames: child rows that ride on the FRAME line (keys
  // "topk" and "outputs"/"outputs_shape", see to_control).
  std::vector<TopkEntry> topk;          // per sample, ranks 1..k
  std::vector<float> outputs;           // the output tensor (logits), row-major; empty unless record.outputs
  std::vector<int64_t> outputs_shape;   // [samples, values per sample]
  // How each row of `outputs` splits into the model's output tensors, in
  // order: each one's name and shape per sample (key "outputs_parts"; empty:
  // one unnamed output of outputs_shape[1] values).
  struct OutputPart {
    std::string name;
    std::vector<int64_t> shape;  // without the batch dimension ([] for one value per sample)
    bool operator==(const OutputPart& o) const { return name == o.name && shape == o.shape; }
    bool operator!=(const OutputPart& o) const { return !(*this == o); }
  };
  std::vector<OutputPart> output_parts;
  std::vector<HopRecord> hops;          // a chain's frame: one per device after the participant ("hops")
  FrameRecord() {
    correct = -1;
    top5_correct = -1;
    ok = 1;
  }
};

// One layer's profile on one device.
struct ProfileRecord {
#define TRACR_PROFILE_FIELD(n, k, ...) TRACR_FT_##k n{};
#include "wire/record_fields.def"
#undef TRACR_PROFILE_FIELD
};

// One segment of a graph model timed as its frames run it: the head
// run(0, k) on the PARTICIPANT or the tail run(k, N) on the SERVER. A
// frozen, optimised graph fuses across layers, so the sum of its layers
// timed one by one is not what a frame costs; these rows are (the planner
// prefers them, analysis/plan.cpp).
struct SegmentRecord {
#define TRACR_SEGMENT_FIELD(n, k, ...) TRACR_FT_##k n{};
#include "wire/record_fields.def"
#undef TRACR_SEGMENT_FIELD
};

// One link probe between a participant and its server.
struct ProbeRecord {
#define TRACR_PROBE_FIELD(n, k, ...) TRACR_FT_##k n{};
#include "wire/record_fields.def"
#undef TRACR_PROBE_FIELD
};

// probe.chunk_bytes: auto sizes each way's messages from a pass of
// kProbeSizingBytes messages lasting duration_ms / 5 (at least 50 ms): the
// size at which kAutoMessages messages at that pass's rate fill duration_ms,
// kProbeSizingBytes to kProbeMaxAutoBytes, a multiple of 4096.
inline constexpr int64_t kProbeSizingBytes = 16 * 1024;
inline constexpr int64_t kProbeMaxAutoBytes = 4 * 1024 * 1024;
inline constexpr double kAutoMessages = 32;
int64_t auto_probe_chunk(double mbps, int duration_ms);

// Energy of one window on one side from one source (agent/energy.hpp).
struct EnergyRecord {
#define TRACR_ENERGY_FIELD(n, k, ...) TRACR_FT_##k n{};
#include "wire/record_fields.def"
#undef TRACR_ENERGY_FIELD
  EnergyRecord() { reps = 1; }
};

// What machine an agent runs on.
struct HwIdentity {
#define TRACR_HW_FIELD(n, k, ...) TRACR_FT_##k n{};
#include "wire/record_fields.def"
#undef TRACR_HW_FIELD
};

const std::vector<FieldInfo>& frame_fields();
const std::vector<FieldInfo>& profile_fields();
const std::vector<FieldInfo>& hw_fields();
const std::vector<FieldInfo>& segment_fields();
const std::vector<FieldInfo>& probe_fields();
const std::vector<FieldInfo>& energy_fields();
const std::vector<FieldInfo>& hop_fields();

// Calls f(const FieldInfo&, member&) for every field, in table order.
template <class R, class F>
void visit_frame(R& r, F&& f) {
  const auto& info = frame_fields();
  size_t i = 0;
#define TRACR_FRAME_FIELD(n, ...) f(info[i++], r.n);
#include "wire/record_fields.def"
#undef TRACR_FRAME_FIELD
}
template <class R, class F>
void visit_profile(R& r, F&& f) {
  const auto& info = profile_fields();
  size_t i = 0;
#define TRACR_PROFILE_FIELD(n, ...) f(info[i++], r.n);
#include "wire/record_fields.def"
#undef TRACR_PROFILE_FIELD
}
template <class R, class F>
void visit_segment(R& r, F&& f) {
  const auto& info = segment_fields();
  size_t i = 0;
#define TRACR_SEGMENT_FIELD(n, ...) f(info[i++], r.n);
#include "wire/record_fields.def"
#undef TRACR_SEGMENT_FIELD
}
template <class R, class F>
void visit_probe(R& r, F&& f) {
  const auto& info = probe_fields();
  size_t i = 0;
#define TRACR_PROBE_FIELD(n, ...) f(info[i++], r.n);
#include "wire/record_fields.def"
#undef TRACR_PROBE_FIELD
}
template <class R, class F>
void visit_energy(R& r, F&& f) {
  const auto& info = energy_fields();
  size_t i = 0;
#define TRACR_ENERGY_FIELD(n, ...) f(info[i++], r.n);
#include "wire/record_fields.def"
#undef TRACR_ENERGY_FIELD
}
template <class R, class F>
void visit_hop(R& r, F&& f) {
  const auto& info = hop_fields();
  size_t i = 0;
#define TRACR_HOP_FIELD(n, ...) f(info[i++], r.n);
#include "wire/record_fields.def"
#undef TRACR_HOP_FIELD
}
template <class R, class F>
void visit_hw(R& r, F&& f) {
  const auto& info = hw_fields();
  size_t i = 0;
#define TRACR_HW_FIELD(n, ...) f(info[i++], r.n);
#include "wire/record_fields.def"
#undef TRACR_HW_FIELD
}

// A field's value as control-line text ("" for an empty optional).
std::string field_text(int64_t v);
std::string field_text(const std::optional<int64_t>& v);
std::string field_text(const std::string& v);
std::string field_text(const std::optional<double>& v);

// Control-line fields of a record (every field, always present).
std::map<std::string, std::string> to_control(const FrameRecord& r);
std::map<std::string, std::string> to_control(const ProfileRecord& r);
std::map<std::string, std::string> to_control(const HwIdentity& r);
std::map<std::string, std::string> to_control(const ProbeRecord& r);
std::map<std::string, std::string> to_control(const SegmentRecord& r);
std::map<std::string, std::string> to_control(const EnergyRecord& r);

// FRAME lines also carry the frame's top-k rows as key "topk" (entries
// "pos:rank:class_index:prob:name" separated by ';', name with '%', ':' and
// ';' escaped as %25 %3A %3B) and, with record.outputs, the output tensors as
// "outputs" (hex of little-endian float32), "outputs_shape" ("B,C": per sample,
// its C values, every output tensor's values flattened one after another) and
// "outputs_parts" (per output tensor "name:d1,d2,..", its shape per sample,
// name escaped as in topk, separated by ';'; their sizes add up to C).
// A chain's frame carries its hops as "hops": per device after the
// participant, its hop fields in table order joined by ':' (empty = NULL),
// devices separated by ';'.
// The keys are optional on parse; a malformed one is an error naming it.
// Parses a record back from a control line. Every field must be present
// and well-formed: error missing_field / field_type naming the field and the
// message kind. Keys that are not fields are ignored (e.g. progress counters).
Result<FrameRecord> frame_from_control(const ControlMsg& m);

// "a,b,,c" split on `sep`: {"a", "b", "", "c"} (empty fields kept; "" gives {""}).
std::vector<std::string> split_on(const std::string& s, char sep);
Result<ProfileRecord> profile_from_control(const ControlMsg& m);
Result<HwIdentity> hw_from_control(const ControlMsg& m);
Result<ProbeRecord> probe_from_control(const ControlMsg& m);
// Also checks side: head or tail.
Result<SegmentRecord> segment_from_control(const ControlMsg& m);
// Also checks source: measured:<meter> or modelled:<model>.
Result<EnergyRecord> energy_from_control(const ControlMsg& m);

// The names of the identity terms: total = sum of these (see record_fields.def).
const std::vector<std::string>& identity_terms();
// total_ns minus the sum of the identity terms (0 when the identity holds).
int64_t identity_residual(const FrameRecord& r);

// This machine's identity (no LibTorch fields: the caller adds libtorch/gpu),
// with hw_id computed by finish_hw_id.
HwIdentity local_hw_identity();
void finish_hw_id(HwIdentity& h);

}  // namespace tracr::wire
