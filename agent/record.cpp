#include "agent/record.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <type_traits>

#include <fmt/format.h>

#include "agent/agent.hpp"

namespace tracr::agent {

#define TRACR_FK_I FieldKind::integer
#define TRACR_FK_N FieldKind::opt_integer
#define TRACR_FK_T FieldKind::text
#define TRACR_FK_R FieldKind::opt_real

const std::vector<FieldInfo>& frame_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_FRAME_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "agent/record_fields.def"
#undef TRACR_FRAME_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& profile_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_PROFILE_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "agent/record_fields.def"
#undef TRACR_PROFILE_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& probe_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_PROBE_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "agent/record_fields.def"
#undef TRACR_PROBE_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& energy_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_ENERGY_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "agent/record_fields.def"
#undef TRACR_ENERGY_FIELD
  };
  return v;
}
const std::vector<FieldInfo>& hw_fields() {
  static const std::vector<FieldInfo> v = {
#define TRACR_HW_FIELD(n, k, unit, side, summ, meaning) {#n, TRACR_FK_##k, unit, side, summ != 0, meaning},
#include "agent/record_fields.def"
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

}  // namespace

std::map<std::string, std::string> to_control(const FrameRecord& r) {
  std::map<std::string, std::string> out;
  visit_frame(r, Emit{&out});
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

Result<FrameRecord> frame_from_control(const ControlMsg& m) {
  return parse_record<FrameRecord>(m, [](FrameRecord& r, const Parse& p) { visit_frame(r, p); });
}
Result<ProfileRecord> profile_from_control(const ControlMsg& m) {
  return parse_record<ProfileRecord>(m, [](ProfileRecord& r, const Parse& p) { visit_profile(r, p); });
}
Result<ProbeRecord> probe_from_control(const ControlMsg& m) {
  return parse_record<ProbeRecord>(m, [](ProbeRecord& r, const Parse& p) { visit_probe(r, p); });
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

}  // namespace tracr::agent
