// The agents of one session, as run and train drive them (#22): launched
// agents are adopted and recorded, their control lines are read by one event
// pump, and one loop waits for them. The loop behaves the same for every
// command:
//   * SIGINT, SIGTERM or SIGHUP: a run_interrupted event, STOP to every
//     driving agent still running (PARTICIPANT, TRAIN_OWNER), kStopGrace for
//     what they still deliver;
//   * an agent that exits or goes silent (AgentLiveness) fails the session
//     unless the loss policy spares it; during a signal it is recorded as
//     agent_lost and the session is interrupted anyway;
//   * a FAIL line, a bad control line, a stuck serving loop (a HEARTBEAT
//     with stalled_ms) or a database that stops taking rows fails it;
//   * stop_all() stops every agent (a lost one is given less time) and
//     records the lines still queued.
// What a command does with the lines (frames, steps, turns) is its handler.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wire/control.hpp"
#include "controller/session/liveness.hpp"
#include "fleet/event_pump.hpp"
#include "fleet/launcher.hpp"
#include "store/recorder.hpp"

namespace tracr::controller {


class AgentSet {
 public:
  using Clock = std::chrono::steady_clock;
  // A command's part of one control line, after the shared part (the
  // recorder has it; FAIL and bad lines never get here).
  using Handler = std::function<void(size_t agent, const wire::ControlMsg& m)>;
  // Whether the loss of an agent (why) is survivable; true when the handler
  // recorded it and the session goes on without that agent.
  using Spare = std::function<bool(size_t agent, const std::string& why)>;
  // Called once per turn of the loop while no signal arrived (scheduled
  // commands, adaptive re-planning).
  using Tick = std::function<void()>;
  // A reason to end the session found outside the agents ("" when none).
  using Watch = std::function<std::string()>;

  // `drivers` names the driving agents in the interrupt event ("participants",
  // "data owners").
  AgentSet(store::Recorder& rec, int heartbeat_timeout_ms, std::string drivers);
  ~AgentSet();
  AgentSet(const AgentSet&) = delete;
  AgentSet& operator=(const AgentSet&) = delete;

  void on_line(Handler h) { handler_ = std::move(h); }
  void on_loss(Spare s) { spare_ = std::move(s); }
  void on_tick(Tick t) { tick_ = std::move(t); }
  void watch(Watch w) { watch_ = std::move(w); }
  // After a signal: true while the drivers have nothing in flight to
  // deliver (a run before its first frame), so the session ends without the
  // grace (#45 friction 8). Unset: the grace always runs (training steps).
  void idle_before_work(std::function<bool()> f) { idle_ = std::move(f); }

  // Records a started agent (its staged files, then agent_started with
  // `when` appended) and keeps it; returns its index.
  size_t adopt(std::unique_ptr<fleet::AgentConn> conn, const std::string& when = "");
  // Reads every agent adopted since the last call; their start-up clocks run.
  void start_reading();

  size_t size() const { return agents_.size(); }
  fleet::AgentConn& operator[](size_t i) { return *agents_[i]; }
  bool finished(size_t i) const;
  void set_finished(size_t i) { finished_[i] = true; }
  bool lost(size_t i) const { return liveness_.declared_lost(i); }
  // Whether every driving agent is done (true when there is none).
  bool drivers_done() const;

  // The first failure is the session's; later ones are dropped.
  void fail(const std::string& why);
  const std::string& failure() const { return failure_; }
  std::string take_failure() { return std::move(failure_); }
  bool stopping() const { return stopping_; }

  // Runs the loop until done() holds, the session fails, the grace after a
  // signal ends, or timeout_ms passes (0: no limit; passing it fails the
  // session). Lines already read are handled before it returns.
  void wait_until(const std::function<bool()>& done, int timeout_ms);
  // Stops every agent (they exit when stdin closes; a lost one within 1 s,
  // the others within grace_ms) and handles the lines still queued.
  void stop_all(int grace_ms = 3000);

 private:
  void dispatch(const fleet::Event& e);
  void interrupt(int sig);

  store::Recorder& rec_;
  std::string drivers_;
  std::vector<std::unique_ptr<fleet::AgentConn>> agents_;
  fleet::EventPump pump_;
  AgentLiveness liveness_;
  std::map<size_t, bool> finished_;
  std::string failure_;
  bool stopping_ = false;
  Clock::time_point stop_deadline_{};
  Handler handler_;
  Spare spare_;
  Tick tick_;
  Watch watch_;
  std::function<bool()> idle_;
};

}  // namespace tracr::controller
