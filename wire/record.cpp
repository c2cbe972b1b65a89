#include "wire/record.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wire/identity.hpp"
#include "protocol/crypto.hpp"

namespace tracr::wire {

#define TRACR_FK_I FieldKind::integer
#define TRACR_FK_N FieldKind::opt_integer
#define TRACR_FK_T FieldKind::text
#define TRACR_FK_R FieldKind::opt_real

const std::vector<FieldInfo>& frame_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_FRAME_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "wire/record_fields.def"
#undef TRACR_FRAME_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& profile_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_PROFILE_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "wire/record_fields.def"
#undef TRACR_PROFILE_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& hop_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_HOP_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "wire/record_fields.def"
#undef TRACR_HOP_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& probe_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_PROBE_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "wire/record_fields.def"
#undef TRACR_PROBE_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& segment_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_SEGMENT_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "wire/record_fields.def"
#undef TRACR_SEGMENT_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& energy_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_ENERGY_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "wire/record_fields.def"
#undef TRACR_ENERGY_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& hw_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_HW_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "wire/record_fields.def"
#undef TRACR_HW_FIELD
  };
  return v;
}

std::string field_text(int64_t v) { return std::to_string(v); }
std::string field_text(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : std::string(); }
std::string field_text(const std::string& v) { return v; }
std::string field_text(const std::optional<double>& v) { return v ? fmt::format("{:.17g}", *v) : std::string(); }

namespace {

struct Emit {
  std::map<std::string, std::string>* out;
  template <class T>
  void operator()(const FieldInfo& f, const T& v) const {
    (*out)[f.name] = field_text(v);
  }
};

// Parses one field from a control message; the first error wins.
struct Parse {
  const ControlMsg* m;
  std::optional<Error>* err;
  const std::string* kind;
  bool text(const FieldInfo& f, std::string& out) const {
    auto it = m->fields.find(f.name);
    if (it == m->fields.end()) {
      if (!*err) *err = make_error(Errc::missing_field, fmt::format("{} has no field '{}'", *kind, f.name));
      return false;
    }
    out = it->second;
    return true;
  }
  void bad(const FieldInfo& f, const std::string& v, const char* what) const {
    if (!*err)
      *err = make_error(Errc::field_type, fmt::format("{} field '{}' is not {}: '{}'", *kind, f.name, what, v));
  }
  static bool parse_int(const std::string& s, int64_t& v) {
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(s.c_str(), &end, 10);
    if (errno != 0 || s.empty() || *end != '\0') return false;
    v = x;
    return true;
  }
  void operator()(const FieldInfo& f, int64_t& v) const {
    std::string s;
    if (text(f, s) && !parse_int(s, v)) bad(f, s, "an integer");
  }
  void operator()(const FieldInfo& f, std::optional<int64_t>& v) const {
    std::string s;
    if (!text(f, s) || s.empty()) return;
    int64_t x = 0;
    if (parse_int(s, x)) v = x;
    else bad(f, s, "an integer or empty");
  }
  void operator()(const FieldInfo& f, std::string& v) const { text(f, v); }
  void operator()(const FieldInfo& f, std::optional<double>& v) const {
    std::string s;
    if (!text(f, s) || s.empty()) return;
    char* end = nullptr;
    double x = std::strtod(s.c_str(), &end);
    if (*end != '\0' || !std::isfinite(x)) bad(f, s, "a finite number or empty");
    else v = x;
  }
};

template <class R, class V>
Result<R> parse_record(const ControlMsg& m, V visit) {
  R r;
  std::optional<Error> err;
  visit(r, Parse{&m, &err, &m.kind});
  if (err) return std::move(*err);
  return r;
}

std::string escape_name(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '%') o += "%25";
    else if (c == ':') o += "%3A";
    else if (c == ';') o += "%3B";
    else o += c;
  }
  return o;
}

std::string unescape_name(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && s.compare(i, 3, "%25") == 0) o += '%', i += 2;
    else if (s[i] == '%' && s.compare(i, 3, "%3A") == 0) o += ':', i += 2;
    else if (s[i] == '%' && s.compare(i, 3, "%3B") == 0) o += ';', i += 2;
    else o += s[i];
  }
  return o;
}


bool whole_int(const std::string& s, int64_t* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno) return false;
  *v = x;
  return true;
}

Error bad_payload(const ControlMsg& m, const char* key, const std::string& what) {
  return make_error(Errc::field_type, fmt::format("{} field '{}': {}", m.kind, key, what));
}

// The optional "hops" of a chain's FRAME line (record.hpp).
Status parse_hops(const ControlMsg& m, FrameRecord& r) {
  auto it = m.fields.find("hops");
  if (it == m.fields.end() || it->second.empty()) return {};
  const size_t n = hop_fields().size();
  for (const auto& e : split_on(it->second, ';')) {
    const auto p = split_on(e, ':');
    if (p.size() != n)
      return bad_payload(m, "hops", fmt::format("expected {} ':'-separated fields per device, got '{}'", n, e));
    HopRecord h;
    size_t i = 0;
    bool bad = false;
    visit_hop(h, [&](const FieldInfo&, auto& v) {
      const std::string& t = p[i++];
      int64_t x = 0;
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, int64_t>) {
        if (!whole_int(t, &x)) bad = true;
        v = x;
      } else {
        if (t.empty()) return;
        if (!whole_int(t, &x)) bad = true;
        v = x;
      }
    });
    if (bad || h.hop < 1) return bad_payload(m, "hops", "expected whole numbers (hop >= 1), got '" + e + "'");
    r.hops.push_back(std::move(h));
  }
  return {};
}

// The optional "topk" and "outputs" payload of a FRAME line (record.hpp).
Status parse_frame_payload(const ControlMsg& m, FrameRecord& r) {
  TRACR_TRY(parse_hops(m, r));
  if (auto it = m.fields.find("topk"); it != m.fields.end() && !it->second.empty()) {
    for (const auto& e : split_on(it->second, ';')) {
      const auto p = split_on(e, ':');
      TopkEntry t;
      char* end = nullptr;
      if (p.size() != 5 || !whole_int(p[0], &t.pos) || !whole_int(p[1], &t.rank) || !whole_int(p[2], &t.class_index) ||
          (t.prob = std::strtod(p[3].c_str(), &end), p[3].empty() || *end != '\0' || !std::isfinite(t.prob)))
        return bad_payload(m, "topk", "expected entries pos:rank:class_index:prob:name separated by ';', got '" + e + "'");
      t.class_name = unescape_name(p[4]);
      r.topk.push_back(std::move(t));
    }
  }
  auto it = m.fields.find("outputs");
  if (it == m.fields.end() || it->second.empty()) return {};
  auto sh = m.fields.find("outputs_shape");
  int64_t numel = 1;
  if (sh != m.fields.end())
    for (const auto& d : split_on(sh->second, ',')) {
      int64_t v = 0;
      // Sizes bounded before multiplying: a line holds far fewer values than 2^40.
      if (!whole_int(d, &v) || v < 0 || v > (int64_t{1} << 40) || (v > 0 && numel > (int64_t{1} << 40) / v))
        return bad_payload(m, "outputs_shape", "expected sizes like 4,10, got '" + sh->second + "'");
      r.outputs_shape.push_back(v);
      numel *= v;
    }
  if (r.outputs_shape.empty()) return bad_payload(m, "outputs_shape", "missing beside outputs");
  auto bytes = protocol::from_hex(it->second);
  if (!bytes || bytes->size() != static_cast<size_t>(numel) * 4)
    return bad_payload(m, "outputs",
                       fmt::format("expected {} float32 values as hex (shape {}), got {} characters", numel,
                                   sh->second, it->second.size()));
  r.outputs.resize(static_cast<size_t>(numel));
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    const uint8_t* b = bytes->data() + 4 * i;
    const uint32_t u = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
    std::memcpy(&r.outputs[i], &u, 4);
  }
  auto pt = m.fields.find("outputs_parts");
  if (pt == m.fields.end() || pt->second.empty()) return {};
  int64_t per_sample = 0;
  for (const auto& e : split_on(pt->second, ';')) {
    const auto p = split_on(e, ':');
    if (p.size() != 2) return bad_payload(m, "outputs_parts", "expected entries name:d1,d2 separated by ';', got '" + e + "'");
    FrameRecord::OutputPart part{unescape_name(p[0]), {}};
    int64_t n = 1;
    if (!p[1].empty())
      for (const auto& d : split_on(p[1], ',')) {
        int64_t v = 0;
        if (!whole_int(d, &v) || v < 0 || v > (int64_t{1} << 40) || (v > 0 && n > (int64_t{1} << 40) / v))
          return bad_payload(m, "outputs_parts", "expected sizes like logits:10, got '" + e + "'");
        part.shape.push_back(v);
        n *= v;
      }
    per_sample += n;
    if (per_sample > (int64_t{1} << 40)) return bad_payload(m, "outputs_parts", "sizes too large: '" + e + "'");
    r.output_parts.push_back(std::move(part));
  }
  if (r.outputs_shape.size() != 2 || per_sample != r.outputs_shape[1])
    return bad_payload(m, "outputs_parts",
                       fmt::format("its tensors hold {} values per sample; outputs_shape {} says otherwise", per_sample,
                                   sh->second));
  return {};
}

}  // namespace

std::map<std::string, std::string> to_control(const FrameRecord& r) {
  std::map<std::string, std::string> out;
  visit_frame(r, Emit{&out});
  if (!r.hops.empty()) {
    std::string t;
    for (const auto& h : r.hops) {
      std::string e;
      size_t i = 0;
      visit_hop(h, [&](const FieldInfo&, const auto& v) { e += (i++ ? ":" : "") + field_text(v); });
      t += (t.empty() ? "" : ";") + e;
    }
    out["hops"] = std::move(t);
  }
  if (!r.topk.empty()) {
    std::string t;
    for (const auto& e : r.topk)
      t += fmt::format("{}{}:{}:{}:{:.9g}:{}", t.empty() ? "" : ";", e.pos, e.rank, e.class_index, e.prob,
                       escape_name(e.class_name));
    out["topk"] = std::move(t);
  }
  if (!r.outputs.empty()) {
    std::vector<uint8_t> bytes(r.outputs.size() * 4);
    for (size_t i = 0; i < r.outputs.size(); ++i) {
      uint32_t u = 0;
      std::memcpy(&u, &r.outputs[i], 4);
      for (int j = 0; j < 4; ++j) bytes[4 * i + j] = static_cast<uint8_t>(u >> (8 * j));
    }
    out["outputs"] = protocol::to_hex(bytes.data(), bytes.size());
    std::string shape;
    for (auto d : r.outputs_shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    out["outputs_shape"] = shape;
    std::string parts;
    for (const auto& p : r.output_parts)
      parts += fmt::format("{}{}:{}", parts.empty() ? "" : ";", escape_name(p.name), fmt::join(p.shape, ","));
    if (!parts.empty()) out["outputs_parts"] = std::move(parts);
  }
  return out;
}
std::map<std::string, std::string> to_control(const ProfileRecord& r) {
  std::map<std::string, std::string> out;
  visit_profile(r, Emit{&out});
  return out;
}
std::map<std::string, std::string> to_control(const ProbeRecord& r) {
  std::map<std::string, std::string> out;
  visit_probe(r, Emit{&out});
  return out;
}
std::map<std::string, std::string> to_control(const SegmentRecord& r) {
  std::map<std::string, std::string> out;
  visit_segment(r, Emit{&out});
  return out;
}
std::map<std::string, std::string> to_control(const EnergyRecord& r) {
  std::map<std::string, std::string> out;
  visit_energy(r, Emit{&out});
  return out;
}
std::map<std::string, std::string> to_control(const HwIdentity& r) {
  std::map<std::string, std::string> out;
  visit_hw(r, Emit{&out});
  return out;
}

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  while (true) {
    const size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

Result<FrameRecord> frame_from_control(const ControlMsg& m) {
  auto r = parse_record<FrameRecord>(m, [](FrameRecord& r, const Parse& p) { visit_frame(r, p); });
  if (r) TRACR_TRY(parse_frame_payload(m, *r));
  return r;
}
Result<ProfileRecord> profile_from_control(const ControlMsg& m) {
  return parse_record<ProfileRecord>(m, [](ProfileRecord& r, const Parse& p) { visit_profile(r, p); });
}
Result<ProbeRecord> probe_from_control(const ControlMsg& m) {
  return parse_record<ProbeRecord>(m, [](ProbeRecord& r, const Parse& p) { visit_probe(r, p); });
}
Result<SegmentRecord> segment_from_control(const ControlMsg& m) {
  auto r = parse_record<SegmentRecord>(m, [](SegmentRecord& r, const Parse& p) { visit_segment(r, p); });
  if (r && r->side != "head" && r->side != "tail")
    return make_error(Errc::field_type, fmt::format("{} field 'side' must be head or tail, got '{}'", m.kind, r->side));
  if (r && r->split < 0)
    return make_error(Errc::field_type, fmt::format("{} field 'split' must be >= 0, got {}", m.kind, r->split));
  return r;
}
Result<EnergyRecord> energy_from_control(const ControlMsg& m) {
  auto r = parse_record<EnergyRecord>(m, [](EnergyRecord& r, const Parse& p) { visit_energy(r, p); });
  if (r && r->source.rfind("measured:", 0) != 0 && r->source.rfind("modelled:", 0) != 0)
    return make_error(Errc::field_type, fmt::format("{} field 'source' must start with measured: or modelled:, got '{}'",
                                                    m.kind, r->source));
  return r;
}
Result<HwIdentity> hw_from_control(const ControlMsg& m) {
  return parse_record<HwIdentity>(m, [](HwIdentity& r, const Parse& p) { visit_hw(r, p); });
}

const std::vector<std::string>& identity_terms() {
  static const std::vector<std::string> v = {"head_ns",  "encode_ns", "network_ns", "server_ns",
                                             "queue_ns", "return_ns", "post_ns"};
  return v;
}

int64_t identity_residual(const FrameRecord& r) {
  return r.total_ns -
         (r.head_ns + r.encode_ns + r.network_ns + r.server_ns + r.queue_ns + r.return_ns + r.post_ns);
}

namespace {
std::string first_match(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      auto c = line.find(':');
      if (c == std::string::npos) continue;
      auto v = line.substr(c + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(0, 1);
      return v;
    }
  return "";
}
}  // namespace

HwIdentity local_hw_identity() {
  HwIdentity h;
  h.cpu_model = first_match("/proc/cpuinfo", "model name");
  if (h.cpu_model.empty()) h.cpu_model = first_match("/proc/cpuinfo", "Model");  // ARM boards
  if (h.cpu_model.empty()) h.cpu_model = first_match("/proc/cpuinfo", "Hardware");
  h.cores = static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN));
  const std::string mem = first_match("/proc/meminfo", "MemTotal");  // "24576000 kB"
  h.memory_bytes = std::strtoll(mem.c_str(), nullptr, 10) * 1024;
  utsname u{};
  if (::uname(&u) == 0) h.kernel = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  h.agent_version = kAgentVersion;
  finish_hw_id(h);
  return h;
}

void finish_hw_id(HwIdentity& h) {
  std::string key;
  visit_hw(h, [&](const FieldInfo& f, const auto& v) {
    if (std::string(f.name) != "hw_id") key += std::string(f.name) + "=" + field_text(v) + "\n";
  });
  h.hw_id = fmt::format("{:016x}", fnv1a(key.data(), key.size()));
}

int64_t auto_probe_chunk(double mbps, int duration_ms) {
  const double bytes = mbps * 1e6 / 8.0 * duration_ms / 1000.0 / kAutoMessages;
  const double fit = std::clamp(bytes, static_cast<double>(kProbeSizingBytes), static_cast<double>(kProbeMaxAutoBytes));
  return static_cast<int64_t>(fit) / 4096 * 4096;
}

}  // namespace tracr::wire
