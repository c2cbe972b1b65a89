#include "controller/recorder.hpp"

#include <fmt/format.h>

#include "agent/record.hpp"

namespace tracr::controller {

Recorder::Recorder(ResultsDb& db, int64_t run_id, bool record_frames, bool record_layers)
    : db_(db), run_id_(run_id), record_frames_(record_frames), record_layers_(record_layers) {}

int64_t Recorder::timed_frames(const std::string& device) const {
  auto it = timed_by_device_.find(device);
  return it == timed_by_device_.end() ? 0 : it->second;
}

void Recorder::event(std::string_view level, std::string_view kind, const std::string& message,
                     const std::string& device, std::optional<int64_t> frame) {
  if (auto st = db_.add_event(run_id_, level, kind, message, device, frame); !st && write_error_.empty())
    write_error_ = st.error().str();
}

Status Recorder::on_message(const std::string& device, const std::string& role, const agent::ControlMsg& m) {
  auto malformed = [&](const Error& e) {
    return make_error(e.code, fmt::format("{} agent on {} sent a malformed {}: {}", role, device, m.kind, e.message));
  };
  if (m.kind == "READY") {
    if (m.fields.count("hw_id")) {
      auto hw = agent::hw_from_control(m);
      if (!hw) return malformed(hw.error());
      DeviceRecord d;
      static_cast<agent::HwIdentity&>(d) = *hw;
      d.run_id = run_id_;
      d.device = device;
      d.role = role;
      if (auto st = db_.add_device(d); !st && write_error_.empty()) write_error_ = st.error().str();
    }
    event("info", "agent_ready",
          fmt::format("{} {}: {}", role, device, m.get_or("model", m.get_or("link", ""))), device);
  } else if (m.kind == "PROFILE") {
    auto p = agent::profile_from_control(m);
    if (!p) return malformed(p.error());
    LayerProfileRecord r;
    static_cast<agent::ProfileRecord&>(r) = *p;
    r.run_id = run_id_;
    r.device = device;
    r.device_role = role;
    if (record_layers_) profiles_.push_back(std::move(r));
  } else if (m.kind == "FRAME") {
    auto f = agent::frame_from_control(m);
    if (!f) return malformed(f.error());
    FrameRecord r;
    static_cast<agent::FrameRecord&>(r) = *f;
    r.run_id = run_id_;
    r.participant = device;
    ++received_;
    if (!r.warmup) ++timed_by_device_[device];
    split_ = static_cast<int>(r.split);
    // Progress counters ride along on the line; they are not fields.
    if (auto d = m.get_int("done")) done_ = *d;
    if (auto t = m.get_int("total")) total_ = *t;
    if (record_frames_) frames_.push_back(std::move(r));
  } else if (m.kind == "EVENT") {
    const std::string kind = m.get_or("kind", "agent_event");
    std::optional<int64_t> frame;
    if (auto fr = m.get_int("frame"); fr && *fr >= 0) frame = *fr;
    std::string msg = m.get_or("message", "");
    if (!m.get_or("cmd", "").empty()) msg = fmt::format("command {} {}: {}", m.get_or("cmd", ""), m.get_or("op", ""), msg);
    event(kind == "command_rejected" ? "warn" : "info", kind, msg, device, frame);
  } else if (m.kind == "LOG") {
    std::string level = m.get_or("level", "info");
    if (level != "debug" && level != "info" && level != "warn" && level != "error") level = "info";
    event(level, "agent_log", device + ": " + m.get_or("msg", ""), device);
  }
  maybe_flush();
  return {};
}

void Recorder::maybe_flush() {
  if (frames_.size() + profiles_.size() >= 64 ||
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
}

}  // namespace tracr::controller
