#include "agent/energy.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace tracr::agent {

using namespace tracr::wire;

namespace {

int64_t process_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

constexpr int kMinUpdates = 10;  // a window shorter than this many meter updates is flagged

}  // namespace

const std::vector<RadioModel>& radio_models() {
  // Huang et al., MobiSys 2012, Table 4: alpha in mW per Mbit/s, beta in mW.
  static const std::vector<RadioModel> v = {
      {"3g", 0.86898, 0.12212, 0.81788},
      {"lte", 0.43839, 0.05197, 1.28804},
      {"wifi", 0.28317, 0.13701, 0.13286},
  };
  return v;
}

const RadioModel* find_radio(const std::string& name) {
  for (const auto& r : radio_models())
    if (r.name == name) return &r;
  return nullptr;
}

std::unique_ptr<EnergyMeter> EnergyMeter::open(const std::optional<PowerModel>& model,
                                               const meters::DiscoverOptions& opt, double slow_read_s) {
  auto e = std::unique_ptr<EnergyMeter>(new EnergyMeter());
  e->found_ = meters::discover(opt);
  e->model_ = model;
  double slowest_read = 0;
  for (auto& m : e->found_.meters) {
    Source s;
    s.label = "measured:" + m->name();
    s.meter = m.get();
    s.period_s = m->update_period_s();
    s.integrated = m->integrated();
    // How long a read takes here: the median of three.
    std::vector<double> t;
    std::optional<double> last;
    for (int i = 0; i < 3; ++i) {
      const auto a = std::chrono::steady_clock::now();
      last = m->joules();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    std::sort(t.begin(), t.end());
    s.read_s = t[1];
    s.sampled = s.read_s >= slow_read_s;
    if (s.sampled) slowest_read = std::max(slowest_read, s.read_s);
    e->latest_.push_back(s.sampled ? last : std::nullopt);
    e->sources_.push_back(s);
  }
  if (model) {
    Source s;
    s.label = "modelled:power_model";
    s.idle_w = model->idle_w;
    e->latest_.push_back(std::nullopt);
    e->sources_.push_back(s);
  }
  if (slowest_read > 0) {
    // Reads take at most ~5 % of one CPU, and come no more often than every 5 ms.
    e->sample_every_s_ = std::max(20 * slowest_read, 0.005);
    // A sampled reading is as fresh as the sampler makes it: windows span 10 of those too.
    for (auto& s : e->sources_)
      if (s.sampled) s.period_s = std::max(s.period_s, e->sample_every_s_);
    const auto every = std::chrono::nanoseconds(static_cast<int64_t>(e->sample_every_s_ * 1e9));
    e->sampler_ = std::thread([p = e.get(), every] { p->sample_loop(every); });
  }
  return e;
}

EnergyMeter::~EnergyMeter() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void EnergyMeter::sample_loop(std::chrono::nanoseconds every) {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (!sources_[i].sampled) continue;
      lk.unlock();
      auto v = sources_[i].meter->joules();  // only this thread reads a sampled meter
      lk.lock();
      latest_[i] = v;
    }
    cv_.wait_for(lk, every, [this] { return stop_; });
  }
}

std::vector<std::string> EnergyMeter::describe() const {
  std::vector<std::string> out;
  for (const auto& i : found_.all)
    out.push_back(i.available ? fmt::format("{} ({}) available", i.name, i.path)
                              : fmt::format("{} unavailable: {}", i.name, i.why));
  for (const auto& s : sources_)
    if (s.sampled)
      out.push_back(fmt::format("{}: a read takes {:.3f} ms here, so it is read every {:.1f} ms in the background and "
                                "a window's edges take its latest reading (rows flagged sampled)",
                                s.label, s.read_s * 1e3, sample_every_s_ * 1e3));
  if (model_)
    out.push_back(fmt::format("power_model idle {} W, busy {} W over {} CPUs (modelled)", model_->idle_w,
                              model_->busy_w, model_->cores));
  return out;
}

double EnergyMeter::max_period_s() const {
  double p = 0;
  for (const auto& s : sources_) p = std::max(p, s.period_s);
  return p;
}

EnergyMeter::Mark EnergyMeter::mark() {
  Mark m;
  m.joules.reserve(sources_.size());
  for (size_t i = 0; i < sources_.size(); ++i) {
    const Source& s = sources_[i];
    if (s.sampled) {
      std::lock_guard<std::mutex> lk(mu_);
      m.joules.push_back(latest_[i]);
    } else {
      m.joules.push_back(s.meter ? s.meter->joules() : std::nullopt);
    }
  }
  m.cpu_ns = process_cpu_ns();
  m.t = std::chrono::steady_clock::now();
  return m;
}

std::vector<EnergyRecord> EnergyMeter::between(const Mark& a, const Mark& b, int64_t reps) const {
  std::vector<EnergyRecord> out;
  const int64_t window = std::chrono::duration_cast<std::chrono::nanoseconds>(b.t - a.t).count();
  const double win_s = static_cast<double>(window) / 1e9;
  const double n = static_cast<double>(std::max<int64_t>(reps, 1));
  const int64_t cpu = b.cpu_ns - a.cpu_ns;
  for (size_t i = 0; i < sources_.size(); ++i) {
    const Source& s = sources_[i];
    EnergyRecord r;
    r.source = s.label;
    r.window_ns = window;
    r.reps = std::max<int64_t>(reps, 1);
    r.cpu_ns = cpu;
    std::vector<std::string> flags;
    if (s.meter) {
      if (i >= a.joules.size() || i >= b.joules.size() || !a.joules[i] || !b.joules[i]) {
        // A failed read gives no figure, not a zero; the row says why.
        flags.push_back("read_failed");
      } else {
        r.joules = (*b.joules[i] - *a.joules[i]) / n;
      }
      if (s.period_s > 0 && win_s < kMinUpdates * s.period_s) flags.push_back("short_window");
      if (s.integrated) flags.push_back("integrated");
      if (s.sampled) flags.push_back("sampled");
    } else if (model_) {
      const double dyn = (model_->busy_w - model_->idle_w) * (static_cast<double>(cpu) / 1e9) /
                         std::max(model_->cores, 1e-9);
      r.joules = (model_->idle_w * win_s + dyn) / n;
    }
    r.idle_w = s.idle_w;
    if (r.joules && s.idle_w) r.net_joules = *r.joules - *s.idle_w * win_s / n;
    std::string f;
    for (const auto& x : flags) f += (f.empty() ? "" : ",") + x;
    r.flags = f;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<EnergyRecord> EnergyMeter::measure_idle(int ms) {
  // Idle power is measured for meters only (the power model states its own).
  const bool has_meter = std::any_of(sources_.begin(), sources_.end(), [](const Source& s) { return s.meter; });
  if (ms <= 0 || !has_meter) return {};
  // At least 10 updates of the slowest meter.
  const int need = static_cast<int>(std::ceil(max_period_s() * kMinUpdates * 1000));
  const int wait = std::max(ms, need);
  const Mark a = mark();
  std::this_thread::sleep_for(std::chrono::milliseconds(wait));
  const Mark b = mark();
  const double win_s = std::chrono::duration<double>(b.t - a.t).count();
  for (size_t i = 0; i < sources_.size(); ++i) {
    Source& s = sources_[i];
    if (s.meter && a.joules[i] && b.joules[i] && win_s > 0) s.idle_w = (*b.joules[i] - *a.joules[i]) / win_s;
  }
  auto rows = between(a, b, 1);
  for (auto& r : rows) r.stage = "idle";
  return rows;
}

EnergyRecord radio_energy(const RadioModel& radio, int64_t up_bytes, int64_t down_bytes, int64_t network_ns) {
  EnergyRecord r;
  r.stage = "transmit";
  r.source = "modelled:radio-" + radio.name;
  r.window_ns = network_ns;
  const double up_mbit = static_cast<double>(up_bytes) * 8 / 1e6, down_mbit = static_cast<double>(down_bytes) * 8 / 1e6;
  // A negative network time (flagged on the frame) gives no base-power term rather than a negative one.
  const double secs = network_ns > 0 ? static_cast<double>(network_ns) / 1e9 : 0.0;
  r.joules = radio.alpha_up * up_mbit + radio.alpha_down * down_mbit + radio.beta * secs;
  r.net_joules = r.joules;
  if (network_ns < 0) r.flags = "negative_network";
  return r;
}

std::string pack_energy(const std::vector<EnergyRecord>& rows) {
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    size_t idx = 0;
    visit_energy(r, [&](const FieldInfo&, const auto& v) {
      std::string t = field_text(v);
      // Tabs and newlines cannot occur in our own values; replaced if they ever do.
      std::replace(t.begin(), t.end(), '\t', ' ');
      std::replace(t.begin(), t.end(), '\n', ' ');
      line += (idx++ ? "\t" : "") + t;
    });
    out += line + "\n";
  }
  return out;
}

Result<std::vector<EnergyRecord>> unpack_energy(const std::string& text) {
  std::vector<EnergyRecord> out;
  std::istringstream in(text);
  std::string line;
  const auto& fields = energy_fields();
  while (std::getline(in, line)) {
    std::vector<std::string> cols;
    size_t start = 0;
    for (;;) {
      const auto tab = line.find('\t', start);
      cols.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (cols.size() != fields.size())
      return make_error(Errc::field_type, fmt::format("server energy row has {} fields, expected {}: '{}'", cols.size(),
                                                      fields.size(), line));
    ControlMsg m;
    m.kind = "server energy";
    for (size_t i = 0; i < fields.size(); ++i) m.fields[fields[i].name] = cols[i];
    auto r = energy_from_control(m);
    if (!r) return std::move(r.error());
    out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace tracr::agent
