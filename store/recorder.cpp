#include "store/recorder.hpp"
#include "core/log.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>

#include "wire/record.hpp"
#include "protocol/crypto.hpp"
#include "protocol/stats.hpp"
#include "settings/config.hpp"

namespace tracr::store {

Recorder::Recorder(ResultsDb& db, int64_t run_id, bool record_frames, bool record_layers)
    : db_(db), run_id_(run_id), record_frames_(record_frames), record_layers_(record_layers) {}

std::optional<double> Recorder::recent_link_rate(const std::string& device) const {
  auto it = recent_rates_.find(device);
  if (it == recent_rates_.end() || it->second.size() < 3) return std::nullopt;
  std::vector<double> v(it->second.begin(), it->second.end());
  return protocol::median_of(v);
}

int64_t Recorder::timed_frames(const std::string& device) const {
  auto it = timed_by_device_.find(device);
  return it == timed_by_device_.end() ? 0 : it->second;
}

void Recorder::event(std::string_view level, std::string_view kind, const std::string& message,
                     const std::string& device, std::optional<int64_t> frame) {
  if (auto st = db_.add_event(run_id_, level, kind, message, device, frame); !st && write_error_.empty())
    write_error_ = st.error().str();
}

namespace {

Error malformed_line(const std::string& role, const std::string& device, const std::string& kind, const Error& e) {
  return make_error(e.code, fmt::format("{} agent on {} sent a malformed {}: {}", role, device, kind, e.message));
}

// "'out' [21, 8, 8], 'aux' [21, 8, 8]": output tensors for a message.
std::string parts_text(const std::vector<FrameRecord::OutputPart>& parts) {
  std::string o;
  for (const auto& p : parts) o += fmt::format("{}'{}' [{}]", o.empty() ? "" : ", ", p.name, fmt::join(p.shape, ", "));
  return o;
}
}  // namespace

Status Recorder::on_message(const std::string& device, wire::AgentRole agent_role, const wire::ControlMsg& m) {
  const std::string role(wire::role_name(agent_role));  // as stored
  auto malformed = [&](const Error& e) { return malformed_line(role, device, m.kind, e); };
  if (m.kind == "READY") {
    if (m.fields.count("hw_id")) {
      auto hw = wire::hw_from_control(m);
      if (!hw) return malformed(hw.error());
      DeviceRecord d;
      static_cast<wire::HwIdentity&>(d) = *hw;
      d.run_id = run_id_;
      d.device = device;
      d.role = role;
      if (auto st = db_.add_device(d); !st && write_error_.empty()) write_error_ = st.error().str();
    }
    event("info", "agent_ready",
          fmt::format("{} {}: {}", role, device, m.get_or("model", m.get_or("link", ""))), device);
  } else if (m.kind == "PROFILE") {
    auto p = wire::profile_from_control(m);
    if (!p) return malformed(p.error());
    LayerProfileRecord r;
    static_cast<wire::ProfileRecord&>(r) = *p;
    r.run_id = run_id_;
    r.device = device;
    r.device_role = role;
    r.profile_key = m.get_or("profile_key", "");
    r.measured_run = run_id_;
    if (record_layers_) profiles_.push_back(std::move(r));
  } else if (m.kind == "FRAME") {
    TRACR_TRY(on_frame(device, role, m));
  } else if (m.kind == "SEGMENT") {
    auto sp = wire::segment_from_control(m);
    if (!sp) return malformed(sp.error());
    SegmentProfileRow row;
    static_cast<wire::SegmentRecord&>(row) = *sp;
    row.run_id = run_id_;
    row.device = device;
    row.device_role = role;
    row.profile_key = m.get_or("profile_key", "");
    row.measured_run = run_id_;
    if (record_layers_)
      if (auto st = db_.add_segment_profile(row); !st && write_error_.empty()) write_error_ = st.error().str();
  } else if (m.kind == "PROBE") {
    TRACR_TRY(on_probe(device, role, m));
  } else if (m.kind == "REUSED") {
    TRACR_TRY(on_reused(device, role, m));
  } else if (m.kind == "ENERGY") {
    auto e = wire::energy_from_control(m);
    if (!e) return malformed(e.error());
    EnergyRow row;
    static_cast<wire::EnergyRecord&>(row) = *e;
    row.run_id = run_id_;
    // A participant relays its server's tail rows: the energy is the server's.
    const bool participant = agent_role == wire::AgentRole::participant;
    row.device = e->side == "server" && participant ? server_name_ : device;
    row.participant = participant ? device : "";
    energy_.push_back(std::move(row));
  } else if (m.kind == "EVENT") {
    const std::string kind = m.get_or("kind", "agent_event");
    std::optional<int64_t> frame;
    if (auto fr = m.get_int("frame"); fr && *fr >= 0) frame = *fr;
    std::string msg = m.get_or("message", "");
    if (!m.get_or("cmd", "").empty()) msg = fmt::format("command {} {}: {}", m.get_or("cmd", ""), m.get_or("op", ""), msg);
    event(kind == "command_rejected" ? "warn" : "info", kind, msg, device, frame);
  } else if (m.kind == "LOG") {
    on_log(device, role, m);
  }
  maybe_flush();
  return {};
}

Status Recorder::on_frame(const std::string& device, const std::string& role, const wire::ControlMsg& m) {
  auto malformed = [&](const Error& e) { return malformed_line(role, device, m.kind, e); };
  auto f = wire::frame_from_control(m);
  if (!f) return malformed(f.error());
  // What the database would refuse is refused here, naming the field, so
  // one bad row cannot fail a whole batch of good ones.
  if (f->warmup != 0 && f->warmup != 1) return malformed(make_error(Errc::field_type, "warmup must be 0 or 1"));
  if (f->ok != 0 && f->ok != 1) return malformed(make_error(Errc::field_type, "ok must be 0 or 1"));
  FrameRecord r;
  static_cast<wire::FrameRecord&>(r) = *f;
  r.run_id = run_id_;
  r.participant = device;
  r.link = link_;
  r.shaping = shaping_;
  for (auto& h : r.hops) {
    const size_t i = static_cast<size_t>(h.hop - 1);  // hop >= 1 (parsed)
    if (i < chain_.size()) h.device = chain_[i];
    h.codec = i == 0 ? r.codec : i < chain_codecs_.size() ? chain_codecs_[i] : "";
  }
  ++received_;
  if (!r.warmup) ++timed_by_device_[device];
  split_ = static_cast<int>(r.split);
  last_split_[device] = split_;
  if (r.ok) last_est_[device] = r.link_est_mbps;
  if (r.ok && !r.warmup && r.network_ns > 0) {
    auto& q = recent_rates_[device];
    q.push_back(static_cast<double>(r.wire_bytes + r.reply_bytes) * 8e3 / static_cast<double>(r.network_ns));
    if (q.size() > 3) q.pop_front();
  }
  // Progress counters ride along on the line; they are not fields.
  if (auto d = m.get_int("done")) done_ = *d;
  if (auto t = m.get_int("total")) total_ = *t;
  if (!r.outputs.empty() && r.ok && !r.warmup) {
    if (r.outputs_shape.size() != 2)
      return malformed(make_error(Errc::field_type, "outputs_shape must be samples,values"));
    // An older agent names no parts: one unnamed output of all the values.
    if (r.output_parts.empty()) r.output_parts = {{"", {r.outputs_shape[1]}}};
    auto it = outputs_.find({device, r.split, r.codec});
    if (it != outputs_.end()) {
      std::vector<FrameRecord::OutputPart> before;
      for (const auto& f : it->second.files) before.push_back(f.part);
      if (before != r.output_parts)
        return malformed(make_error(Errc::field_type, fmt::format("outputs: tensors {} after {} in earlier frames "
                                                                  "(an output whose shape changes from frame to "
                                                                  "frame cannot be stored; set record.outputs: "
                                                                  "false)",
                                                                  parts_text(r.output_parts), parts_text(before))));
    }
    if (auto st = append_outputs(device, r); !st && write_error_.empty()) write_error_ = st.error().str();
  }
  r.outputs.clear();
  r.outputs.shrink_to_fit();
  if (record_frames_) frames_.push_back(std::move(r));
  return {};
}

Status Recorder::on_probe(const std::string& device, const std::string& role, const wire::ControlMsg& m) {
  auto malformed = [&](const Error& e) { return malformed_line(role, device, m.kind, e); };
  auto pr = wire::probe_from_control(m);
  if (!pr) return malformed(pr.error());
  ProbeRow row;
  static_cast<wire::ProbeRecord&>(row) = *pr;
  row.run_id = run_id_;
  row.participant = device;
  row.link = link_;
  row.shaping = shaping_;
  if (auto st = db_.add_probe(row); !st && write_error_.empty()) write_error_ = st.error().str();
  event("info", "link_probed",
        fmt::format("{}: rtt median {:.3f} ms, up {} Mbit/s, down {} Mbit/s", device, pr->rtt_median_ns / 1e6,
                    pr->up_mbps ? fmt::format("{:.2f}", *pr->up_mbps) : "-",
                    pr->down_mbps ? fmt::format("{:.2f}", *pr->down_mbps) : "-"),
        device);
  return {};
}

// An agent that found its profiles stored under its profile key (#45
// friction 2; the controller listed them in its CONFIG line) timed none: the
// stored rows are copied into this run, each naming the run that timed it.
Status Recorder::on_reused(const std::string& device, const std::string& role, const wire::ControlMsg& m) {
  auto malformed = [&](const std::string& why) {
    return malformed_line(role, device, m.kind, make_error(Errc::field_type, why));
  };
  const std::string key = m.get_or("profile_key", "");
  const std::string what = m.get_or("what", "");
  if (key.empty()) return malformed("profile_key missing");
  if (what != "layers" && what != "segments") return malformed("what must be layers or segments, not '" + what + "'");
  if (!record_layers_) return {};
  flush();  // rows before the copy: the copy may replace none of them
  std::string said;
  if (what == "layers") {
    const auto layers = m.get_int("layers");
    if (!layers || *layers <= 0) return malformed("layers must be a positive count");
    auto from = db_.reuse_layer_profiles(key, *layers, run_id_, device, role);
    if (from)
      said = fmt::format("{} {}: {} layer profiles reused, timed in run {}", role, device, *layers, *from);
    else
      said = fmt::format("{} {}: its layer profiles could not be reused ({}); this run has none of its layers",
                         role, device, from.error().message);
  } else {
    const std::string side = m.get_or("side", "");
    if (side != "head" && side != "tail") return malformed("side must be head or tail, not '" + side + "'");
    std::vector<int> splits;
    std::istringstream in(m.get_or("splits", ""));
    for (std::string t; std::getline(in, t, ',');) {
      char* end = nullptr;
      const long k = std::strtol(t.c_str(), &end, 10);
      if (t.empty() || *end != '\0' || k < 0 || k > 1000000) return malformed("splits must be split points, not '" + t + "'");
      splits.push_back(static_cast<int>(k));
    }
    auto from = db_.reuse_segment_profiles(key, side, splits, run_id_, device, role);
    if (from)
      said = fmt::format("{} {}: {} {} profiles reused, timed in run {}", role, device, splits.size(), side,
                         fmt::join(*from, ", "));
    else
      said = fmt::format("{} {}: its {} profiles could not be reused ({}); this run lacks them", role, device, side,
                         from.error().message);
  }
  event(said.find("could not") == std::string::npos ? "info" : "warn", "profiles_reused",
        said + " (same model, input, batch, device and settings; tracrctl run --reprofile times them again)", device);
  if (core::log_enabled(core::LogLevel::info)) core::log_line(core::LogLevel::info, said + " (--reprofile: time them anew)");
  return {};
}

void Recorder::on_log(const std::string& device, const std::string& role, const wire::ControlMsg& m) {
  std::string level = m.get_or("level", "info");
  if (level != "debug" && level != "info" && level != "warn" && level != "error") level = "info";
  event(level, "agent_log", device + ": " + m.get_or("msg", ""), device);
  // A warning is also the user's to see now (an agent on the reference BLAS, junk from peers), once per run
  // where several agents say the same (every agent's is stored).
  if ((level == "warn" || level == "error") && warned_.insert(m.get_or("msg", "")).second)
    if (const auto lv = level == "warn" ? core::LogLevel::warn : core::LogLevel::error; core::log_enabled(lv))
      core::log_line(lv, fmt::format("{}: {} agent on {}: {}", level == "warn" ? "warning" : "error", role, device,
                                     m.get_or("msg", "")));
}

void Recorder::maybe_flush() {
  if (frames_.size() + profiles_.size() + energy_.size() >= 64 ||
      std::chrono::steady_clock::now() - last_flush_ >= std::chrono::seconds(1))
    flush();
}

void Recorder::flush() {
  last_flush_ = std::chrono::steady_clock::now();
  if (!frames_.empty()) {
    if (auto st = db_.add_frames(frames_); !st) {
      if (write_error_.empty()) write_error_ = st.error().str();
    } else {
      frames_.clear();
    }
  }
  if (!profiles_.empty()) {
    if (auto st = db_.add_layer_profiles(profiles_); !st) {
      if (write_error_.empty()) write_error_ = st.error().str();
    } else {
      profiles_.clear();
    }
  }
  if (!energy_.empty()) {
    if (auto st = db_.add_energy(energy_); !st) {
      if (write_error_.empty()) write_error_ = st.error().str();
    } else {
      energy_.clear();
    }
  }
}

namespace {
// A codec's text as part of a file name: letters, digits, '.', '_', '-' kept, others '-'.
std::string file_part(const std::string& s) {
  std::string o;
  for (char c : s) o += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ? c : '-';
  return o.empty() ? "none" : o;
}

// NumPy format 1.0: magic, version, header length, a dict padded with spaces
// to a multiple of 64 bytes in all, then the data. The length is fixed when
// the file is opened (room for any row count), so the header can be written
// first as a placeholder and filled in when the number of rows is known.
std::string npy_dict(int64_t rows, const std::vector<int64_t>& shape) {
  std::string dims = std::to_string(rows);
  for (auto d : shape) dims += ", " + std::to_string(d);
  if (shape.empty()) dims += ",";  // a 1-tuple
  return fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
}
size_t npy_header_size(const std::vector<int64_t>& shape) {
  const size_t need = 10 + npy_dict(std::numeric_limits<int64_t>::max(), shape).size() + 1;
  return (need + 63) / 64 * 64;
}
std::string npy_header(int64_t rows, const std::vector<int64_t>& shape, size_t size) {
  std::string dict = npy_dict(rows, shape);
  dict.append(size - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string o = "\x93NUMPY";
  o += '\x01';
  o += '\x00';
  o += static_cast<char>(dict.size() & 0xff);
  o += static_cast<char>(dict.size() >> 8);
  return o + dict;
}
}  // namespace

Status Recorder::append_outputs(const std::string& device, const FrameRecord& r) {
  namespace fs = std::filesystem;
  const fs::path base = fs::path(db_.path()).parent_path();
  auto [it, fresh] = outputs_.try_emplace({device, r.split, r.codec});
  OutputAcc& acc = it->second;
  if (fresh) {
    acc.cols = r.outputs_shape[1];
    // One output keeps the plain name; several are told apart by theirs.
    const std::string stem = fmt::format("{}_split{}_{}", file_part(device), r.split, file_part(r.codec));
    std::set<std::string> taken;
    for (size_t i = 0; i < r.output_parts.size(); ++i) {
      OutputFile f;
      f.part = r.output_parts[i];
      f.size = 1;
      for (auto d : f.part.shape) f.size *= d;
      f.header = npy_header_size(f.part.shape);
      std::string name = stem;
      if (r.output_parts.size() > 1) {
        name += "_" + file_part(f.part.name.empty() ? fmt::format("out{}", i) : f.part.name);
        if (!taken.insert(name).second) name += fmt::format("-{}", i);
        taken.insert(name);
      }
      f.rel = (outputs_dir(db_.path(), run_id_) / (name + ".npy")).string();
      acc.files.push_back(std::move(f));
    }
    for (auto& f : acc.files) {
      std::error_code ec;
      fs::create_directories((base / f.rel).parent_path(), ec);
      if (ec) {
        acc.broken = true;
        return make_error(Errc::io, fmt::format("record.outputs: cannot create {}: {}",
                                                (base / f.rel).parent_path().string(), ec.message()));
      }
      const std::string part = (base / f.rel).string() + ".part";
      f.file.reset(std::fopen(part.c_str(), "w+b"), [](std::FILE* fp) { if (fp) std::fclose(fp); });
      const std::string h = npy_header(0, f.part.shape, f.header);  // rows filled in by write_outputs
      if (!f.file || std::fwrite(h.data(), 1, h.size(), f.file.get()) != h.size()) {
        acc.broken = true;
        return make_error(Errc::io, fmt::format("record.outputs: cannot write {}: {}", part, std::strerror(errno)));
      }
    }
  }
  if (acc.broken) return make_error(Errc::io, "record.outputs: " + (acc.files.empty() ? std::string("a file") : acc.files.front().rel) + " could not be opened");
  // Each sample's row is every output's values one after another: each
  // output's slice goes to its own file.
  const int64_t rows = r.outputs_shape[0];
  std::vector<std::string> bytes(acc.files.size());
  for (int64_t row = 0; row < rows; ++row) {
    size_t at = static_cast<size_t>(row * acc.cols);
    for (size_t k = 0; k < acc.files.size(); ++k)
      for (int64_t j = 0; j < acc.files[k].size; ++j, ++at) {
        uint32_t u = 0;
        std::memcpy(&u, &r.outputs[at], 4);
        for (int b = 0; b < 4; ++b) bytes[k] += static_cast<char>(u >> (8 * b));
      }
  }
  for (size_t k = 0; k < acc.files.size(); ++k)
    if (std::fwrite(bytes[k].data(), 1, bytes[k].size(), acc.files[k].file.get()) != bytes[k].size())
      return make_error(Errc::io,
                        fmt::format("record.outputs: writing {}.part: {}", acc.files[k].rel, std::strerror(errno)));
  acc.rows += rows;
  ++acc.frames;
  if (acc.first_frame < 0) acc.first_frame = r.frame;
  acc.last_frame = r.frame;
  return {};
}

Status Recorder::write_outputs() {
  if (outputs_.empty()) return {};
  namespace fs = std::filesystem;
  const fs::path base = fs::path(db_.path()).parent_path();
  std::vector<std::vector<std::optional<std::string>>> rows;
  for (auto& [key, acc] : outputs_) {
    const auto& [participant, split, codec] = key;
    if (acc.broken) continue;  // its error is the write error already
    for (auto& f : acc.files) {
      const fs::path file = base / f.rel, part = file.string() + ".part";
      const std::string h = npy_header(acc.rows, f.part.shape, f.header);
      std::FILE* fp = f.file.get();
      if (std::fseek(fp, 0, SEEK_SET) != 0 || std::fwrite(h.data(), 1, h.size(), fp) != h.size() ||
          std::fflush(fp) != 0)
        return make_error(Errc::io, "record.outputs: cannot finish " + part.string());
      // The hash of the whole file, read back in one piece (one file at a time).
      std::ifstream in(part, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t expected = f.header + static_cast<size_t>(acc.rows * f.size) * 4;
      if (bytes.size() != expected)
        return make_error(Errc::io, fmt::format("record.outputs: {} has {} bytes; expected {}", part.string(),
                                                bytes.size(), expected));
      f.file.reset();
      std::error_code ec;
      fs::rename(part, file, ec);
      if (ec)
        return make_error(Errc::io, fmt::format("cannot rename {} to {}: {}", part.string(), file.string(), ec.message()));
      const auto hash = protocol::sha256(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      std::string shape = std::to_string(acc.rows);
      for (auto d : f.part.shape) shape += "," + std::to_string(d);
      rows.push_back({std::to_string(run_id_), participant, std::to_string(split), codec, f.rel, std::string("<f4"),
                      shape, std::to_string(acc.frames), std::to_string(acc.first_frame),
                      std::to_string(acc.last_frame), protocol::to_hex(hash.data(), hash.size()),
                      std::string("participant: the model's output after the reply was decoded (float32)"),
                      f.part.name});
    }
  }
  return db_.insert_rows("outputs",
                         {"run_id", "participant", "split", "codec", "path", "dtype", "shape", "frames", "first_frame",
                          "last_frame", "sha256", "source", "output"},
                         rows);
}

namespace {
std::string json_value(int64_t v) { return std::to_string(v); }
std::string json_value(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "null"; }
std::string json_value(const std::string& v) { return settings::json_quote(v); }
std::string json_value(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? fmt::format("{}", *v) : "null";
}
}  // namespace

Result<std::string> Recorder::save_unwritten(const std::string& path) const {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return make_error(Errc::io, "cannot write " + path);
  for (const auto& f : frames_) {
    std::string o = fmt::format("{{\"table\":\"frames\",\"run_id\":{},\"participant\":{}", f.run_id,
                                settings::json_quote(f.participant));
    wire::visit_frame(f, [&](const wire::FieldInfo& fi, const auto& v) { o += fmt::format(",\"{}\":{}", fi.name, json_value(v)); });
    out << o << "}\n";
    for (const auto& h : f.hops) {
      std::string x = fmt::format("{{\"table\":\"frame_hops\",\"run_id\":{},\"participant\":{},\"frame\":{},"
                                  "\"device\":{},\"codec\":{}",
                                  f.run_id, settings::json_quote(f.participant), f.frame,
                                  settings::json_quote(h.device), settings::json_quote(h.codec));
      wire::visit_hop(h, [&](const wire::FieldInfo& fi, const auto& v) { x += fmt::format(",\"{}\":{}", fi.name, json_value(v)); });
      out << x << "}\n";
    }
  }
  for (const auto& p : profiles_) {
    std::string o = fmt::format("{{\"table\":\"layer_profiles\",\"run_id\":{},\"device\":{},\"device_role\":{}", p.run_id,
                                settings::json_quote(p.device), settings::json_quote(p.device_role));
    wire::visit_profile(p, [&](const wire::FieldInfo& fi, const auto& v) { o += fmt::format(",\"{}\":{}", fi.name, json_value(v)); });
    out << o << "}\n";
  }
  for (const auto& e : energy_) {
    std::string o = fmt::format("{{\"table\":\"energy\",\"run_id\":{},\"device\":{},\"participant\":{}", e.run_id,
                                settings::json_quote(e.device), settings::json_quote(e.participant));
    wire::visit_energy(e, [&](const wire::FieldInfo& fi, const auto& v) { o += fmt::format(",\"{}\":{}", fi.name, json_value(v)); });
    out << o << "}\n";
  }
  out.flush();
  if (!out) return make_error(Errc::io, "writing " + path + " failed");
  return path;
}

}  // namespace tracr::store
