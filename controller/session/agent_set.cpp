#include "controller/session/agent_set.hpp"

#include <atomic>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "controller/session/run_row.hpp"
#include "core/user_error.hpp"
#include "fleet/process.hpp"

namespace tracr::controller {

using wire::ControlMsg;


AgentSet::AgentSet(store::Recorder& rec, int heartbeat_timeout_ms, std::string drivers)
    : rec_(rec), drivers_(std::move(drivers)), pump_(agents_), liveness_(heartbeat_timeout_ms) {}

AgentSet::~AgentSet() { pump_.stop(); }

size_t AgentSet::adopt(std::unique_ptr<fleet::AgentConn> conn, const std::string& when) {
  const settings::DeviceConfig& dev = conn->device();
  for (const auto& f : conn->staged()) rec_.event("info", "file_staged", f.describe(), dev.name);
  rec_.event("info", "agent_started",
             fmt::format("{} {} ({}, pid {}){}", wire::role_name(conn->role()), dev.name, settings::transport_name(dev.transport),
                         conn->proc().pid(), when),
             dev.name);
  agents_.push_back(std::move(conn));
  return agents_.size() - 1;
}

void AgentSet::start_reading() {
  pump_.start();
  for (size_t i = 0; i < agents_.size(); ++i) liveness_.launched(i);
}

bool AgentSet::finished(size_t i) const {
  auto it = finished_.find(i);
  return it != finished_.end() && it->second;
}

bool AgentSet::drivers_done() const {
  for (size_t i = 0; i < agents_.size(); ++i)
    if (wire::drives_session(agents_[i]->role()) && !finished(i)) return false;
  return true;
}

void AgentSet::fail(const std::string& why) {
  if (failure_.empty()) failure_ = why;
}

void AgentSet::dispatch(const fleet::Event& e) {
  fleet::AgentConn& a = *agents_[e.agent];
  const std::string& dev = a.device().name;
  liveness_.heard(e.agent);
  if (e.closed) {
    if (!finished(e.agent)) {
      const std::string why = fmt::format("{} agent on {} exited unexpectedly ({}); {}", wire::role_name(a.role()), dev,
                                          e.msg.error().message, log_tail_text(a.proc().log_tail()));
      // While stopping after a signal the session is interrupted anyway; the crash is still recorded.
      if (fleet::SignalCatcher::signal()) rec_.event("warn", "agent_lost", why, dev);
      else if (!(spare_ && spare_(e.agent, why))) fail(why);
    }
    finished_[e.agent] = true;
    return;
  }
  if (!e.msg) {
    fail(fmt::format("{} agent on {}: bad control line: {}", wire::role_name(a.role()), dev, e.msg.error().str()));
    return;
  }
  const ControlMsg& m = *e.msg;
  if (m.kind == "FAIL") {
    fail(fmt::format("{} agent on {} failed: {}", wire::role_name(a.role()), dev, core::reported_error_text(m.get_or("error", "?"))));
    return;
  }
  if (m.kind == "DONE") finished_[e.agent] = true;
  else if (auto st = rec_.on_message(dev, a.role(), m); !st) {
    fail(st.error().message);
    return;
  }
  if (m.kind == "HEARTBEAT" && m.fields.count("stalled_ms")) {
    // The agent answers, but its serving loop has stopped turning (#24).
    // The agent's heartbeat thread judged it idle, not computing (#46).
    fail(fmt::format("{} agent on {} is stuck: its serving loop has made no progress for {} ms (after {} turns) and "
                     "the agent used {} ms of CPU in the last {} ms: not computing, though its control channel still "
                     "answers; ending the run (the limit: {} ms, the larger of 30 s and heartbeat_timeout_ms; a frame "
                     "that computes longer is not a stall)",
                     wire::role_name(a.role()), dev, m.get_or("stalled_ms", "?"), m.get_or("loop", "?"),
                     m.get_or("cpu_ms", "?"), m.get_or("window_ms", "?"), m.get_or("stall_limit_ms", "?")));
    return;
  }
  if (handler_) handler_(e.agent, m);
}

void AgentSet::interrupt(int sig) {
  // Every driving agent is asked to stop after what it has in flight; what
  // it still delivers is recorded.
  stopping_ = true;
  rec_.event("warn", "run_interrupted", fmt::format("{} received: stopping the {}", signal_name(sig), drivers_));
  for (size_t i = 0; i < agents_.size(); ++i)
    if (wire::drives_session(agents_[i]->role()) && !finished(i)) (void)agents_[i]->send("STOP", {});
  stop_deadline_ = Clock::now() + kStopGrace;
}

void AgentSet::wait_until(const std::function<bool()>& done, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (failure_.empty() && !done()) {
    if (const int sig = fleet::SignalCatcher::signal(); sig && !stopping_) interrupt(sig);
    // Before any frame there is nothing in flight to wait for: agents still
    // loading, profiling or probing are stopped at once (#45 friction 8).
    if (stopping_ && (drivers_done() || Clock::now() > stop_deadline_ || (idle_ && idle_()))) break;
    if (watch_)
      if (auto why = watch_(); !why.empty()) {
        fail(why);
        break;
      }
    if (timeout_ms > 0 && Clock::now() > deadline) {
      fail("timed out waiting for the agents");
      break;
    }
    if (auto e = pump_.pop(100)) dispatch(*e);
    rec_.maybe_flush();
    // A database that cannot take the rows ends the session: nothing more could be recorded.
    if (!rec_.write_error().empty()) {
      fail("database: " + rec_.write_error());
      break;
    }
    if (!stopping_ && tick_) tick_();
    for (size_t i = 0; i < agents_.size(); ++i)
      if (!finished(i))
        if (auto why = liveness_.newly_lost(i, std::string(wire::role_name(agents_[i]->role())), agents_[i]->device().name))
          if (!(spare_ && spare_(i, *why))) fail(*why);
  }
  // Lines already read are still recorded.
  while (auto e = pump_.pop(0)) dispatch(*e);
}

void AgentSet::stop_all(int grace_ms) {
  // Every agent of a kind at once, the same grace for all (#46: one after another took
  // about 3 s each, minutes with 64 participants), and what they deliver
  // meanwhile recorded as it comes. A lost agent's connection may be dead (a
  // partition): stopping it is bounded (AgentProc::stop), and it stops by
  // itself on our silence.
  std::vector<int> grace(agents_.size());
  for (size_t i = 0; i < agents_.size(); ++i) {
    finished_[i] = true;
    grace[i] = std::min(grace_ms, liveness_.declared_lost(i) ? 1000 : 3000);
  }
  // The agents that drive sessions (participants) first, then those that
  // serve them: a participant waiting on a reply is not left to its frame
  // timeout by a SERVER that already went.
  for (const bool drivers : {true, false}) {
    std::atomic<size_t> left{0};
    std::vector<std::thread> stops;
    for (size_t i = 0; i < agents_.size(); ++i) {
      if (wire::drives_session(agents_[i]->role()) != drivers) continue;
      ++left;
      stops.emplace_back([this, i, &grace, &left] {
        agents_[i]->stop(grace[i]);
        --left;
      });
    }
    while (left > 0)
      if (auto e = pump_.pop(20)) dispatch(*e);
    for (auto& t : stops) t.join();
  }
  pump_.stop();
  while (auto e = pump_.pop(0)) dispatch(*e);
}

}  // namespace tracr::controller
