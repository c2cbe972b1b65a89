// Energy on an agent: every meter this machine has (meters/), or a power
// model from the devices file where it has none, read at the edges of a
// window (a frame's head, a server's tail, repeated runs of one layer), and
// a radio model for the participant's transmission. Each row names its
// source: measured:<meter> or modelled:<model>. An agent with neither meter
// nor model produces no rows, never a guess.
//
// Method: counters, not power samples, are read at window edges (the GPU is
// synchronised by the caller before a window closes); idle power is measured
// over a quiet window at run start and subtracted (gross and net are both
// kept); a window shorter than 10 meter updates is flagged short_window.
//
// A meter slow to read (NVML: milliseconds a read on some machines) would put
// its reads inside the frame's timed stages (the head's end is in encode_ns,
// the server's marks in server_ns). Such a meter is read by a background
// thread instead, and a mark takes its latest reading: its rows are flagged
// sampled, and describe() says how long a read took and how often it is taken.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "wire/record.hpp"
#include "meters/meters.hpp"

namespace tracr::agent {

// The linear utilisation model: P = idle_w + (busy_w - idle_w) * u, with u
// the CPU time used over (window x cores). Fan, Weber, Barroso, "Power
// provisioning for a warehouse-sized computer", ISCA 2007.
struct PowerModel {
  double idle_w = 0;
  double busy_w = 0;
  double cores = 1;  // CPUs the agent may use (affinity count, or its CPU quota when lower)
};

// Radio power while transferring, P = alpha_up * up_Mbps + alpha_down *
// down_Mbps + beta, so a transfer costs alpha_up * Mbit_up + alpha_down *
// Mbit_down + beta * seconds. Huang et al., "A Close Examination of
// Performance and Power Characteristics of 4G LTE Networks", MobiSys 2012,
// Table 4 (the figures Neurosurgeon, ASPLOS 2017, used). Tail energy after a
// transfer (RRC states) is not modelled: frames follow each other.
struct RadioModel {
  std::string name;     // "3g" | "lte" | "wifi"
  double alpha_up = 0;  // W per Mbit/s (J per Mbit)
  double alpha_down = 0;
  double beta = 0;      // W
};
const std::vector<RadioModel>& radio_models();
const RadioModel* find_radio(const std::string& name);

class EnergyMeter {
 public:
  // A meter whose median read takes at least this long is sampled in the
  // background rather than read at a mark.
  static constexpr double kSlowReadS = 100e-6;
  // Opens every meter discover() finds; adds the power model when given.
  static std::unique_ptr<EnergyMeter> open(const std::optional<PowerModel>& model,
                                           const meters::DiscoverOptions& opt = {},
                                           double slow_read_s = kSlowReadS);
  ~EnergyMeter();
  EnergyMeter(const EnergyMeter&) = delete;
  EnergyMeter& operator=(const EnergyMeter&) = delete;
  // Whether any source (meter or model) exists.
  bool any() const { return !sources_.empty(); }
  // Meters seen, usable or not, and the model: one line each.
  std::vector<std::string> describe() const;

  struct Mark {
    std::chrono::steady_clock::time_point t;
    int64_t cpu_ns = 0;
    std::vector<std::optional<double>> joules;  // per source (the model's entry unused)
  };
  Mark mark();
  // One row per source for the window between two marks (reps repetitions
  // inside it). Fills source, joules, net_joules, idle_w, window_ns, reps,
  // cpu_ns, flags; the caller fills side, stage, frame, split, layer_index.
  std::vector<wire::EnergyRecord> between(const Mark& a, const Mark& b, int64_t reps = 1) const;
  // Measures idle power over ms milliseconds of sleep; returns the idle rows.
  std::vector<wire::EnergyRecord> measure_idle(int ms);
  // The longest counter update period among the meters (0 with the model only).
  double max_period_s() const;

 private:
  EnergyMeter() = default;
  struct Source {
    std::string label;   // measured:rapl:package-0 | modelled:power_model
    meters::Meter* meter = nullptr;
    double period_s = 0;
    bool integrated = false;
    std::optional<double> idle_w;
    double read_s = 0;   // median time one read took at open
    bool sampled = false;  // read by the sampler thread; a mark takes the latest reading
  };
  void sample_loop(std::chrono::nanoseconds every);
  meters::Discovered found_;
  std::optional<PowerModel> model_;
  std::vector<Source> sources_;
  double sample_every_s_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::optional<double>> latest_;  // per source, sampled ones only (under mu_)
  std::thread sampler_;
};

// The transmission row of one frame: wire bytes each way over the measured
// network time, under `radio`.
wire::EnergyRecord radio_energy(const RadioModel& radio, int64_t up_bytes, int64_t down_bytes, int64_t network_ns);

// Server rows travel in the reply's meta as text (one row per line, fields
// tab-separated) and come back as rows on the participant.
std::string pack_energy(const std::vector<wire::EnergyRecord>& rows);
Result<std::vector<wire::EnergyRecord>> unpack_energy(const std::string& text);

}  // namespace tracr::agent
