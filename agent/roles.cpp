#include "agent/roles.hpp"
#include "agent/trainer.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace tracr::agent {

Status parse_agent_args(const std::vector<std::string>& args, AgentOptions& o) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto val = [&]() -> Result<std::string> {
      if (i + 1 >= args.size()) return make_error(Errc::invalid_argument, a + " needs a value");
      return args[++i];
    };
    std::string* target = a == "--role"          ? &o.role
                          : a == "--bind"        ? &o.bind
                          : a == "--raw-bind"    ? &o.raw_bind
                          : a == "--connect"     ? &o.connect
                          : a == "--secret-file" ? &o.secret_file
                          : a == "--experiment"  ? &o.experiment_file
                          : a == "--device"      ? &o.torch_device
                                                 : nullptr;
    if (target) {
      auto v = val();
      if (!v) return std::move(v.error());
      *target = *v;
      continue;
    }
    if (a == "--config") {
      auto v = val();
      if (!v) return std::move(v.error());
      if (*v != "stdin") return make_error(Errc::invalid_argument, "--config expects 'stdin', got '" + *v + "'");
      o.config_from_stdin = true;
      continue;
    }
    if (a == "--threads") {
      auto v = val();
      if (!v) return std::move(v.error());
      char* end = nullptr;
      const long k = std::strtol(v->c_str(), &end, 10);
      if (v->empty() || *end != '\0' || k < 1 || k > 1024)
        return make_error(Errc::invalid_argument, "--threads expects a LibTorch thread count 1..1024, got '" + *v + "'");
      o.torch_threads = static_cast<int>(k);
      continue;
    }
    if (a == "--segments") {
      auto v = val();
      if (!v) return std::move(v.error());
      o.train_segments.clear();
      size_t pos = 0;
      while (pos <= v->size()) {
        const size_t comma = v->find(',', pos);
        const std::string item = v->substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        char* end = nullptr;
        const long k = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || k < 0 || k > 100000)
          return make_error(Errc::invalid_argument, "--segments expects segment indices like 1,2, got '" + *v + "'");
        o.train_segments.push_back(static_cast<int>(k));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
      continue;
    }
    if (a == "--worker") {
      auto v = val();
      if (!v) return std::move(v.error());
      const size_t eq = v->find('=');
      char* end = nullptr;
      const long k = eq == std::string::npos ? -1 : std::strtol(v->substr(0, eq).c_str(), &end, 10);
      if (eq == std::string::npos || eq == 0 || *end != '\0' || k < 1 || eq + 1 >= v->size())
        return make_error(Errc::invalid_argument, "--worker expects SEGMENT=ENDPOINT (segment >= 1), got '" + *v + "'");
      o.train_workers.emplace_back(static_cast<int>(k), v->substr(eq + 1));
      continue;
    }
    if (a == "--owner") {
      auto v = val();
      if (!v) return std::move(v.error());
      int k = -1, n = -1;
      char tail = 0;
      if (std::sscanf(v->c_str(), "%d/%d%c", &k, &n, &tail) != 2 || n < 1 || k < 0 || k >= n)
        return make_error(Errc::invalid_argument, "--owner expects K/N with 0 <= K < N, got '" + *v + "'");
      o.owner_index = k;
      o.owners = n;
      continue;
    }
    if (a == "--run-tag") {
      auto v = val();
      if (!v) return std::move(v.error());
      if (v->empty() || v->find('/') != std::string::npos || *v == "." || *v == "..")
        return make_error(Errc::invalid_argument, "--run-tag expects a file name (no '/'), got '" + *v + "'");
      o.run_tag = *v;
      continue;
    }
    if (a == "--resume-step") {
      auto v = val();
      if (!v) return std::move(v.error());
      char* end = nullptr;
      const long long s = std::strtoll(v->c_str(), &end, 10);
      if (v->empty() || *end != '\0' || s < 0)
        return make_error(Errc::invalid_argument, "--resume-step expects a step count >= 0, got '" + *v + "'");
      o.resume_step = s;
      continue;
    }
    if (a == "--no-encrypt") { o.encrypt = false; continue; }
    if (a == "--no-x25519") { o.x25519 = false; continue; }
    if (a == "--in-process") { o.in_process = true; continue; }
    if (a == "--probe-only") { o.probe_only = true; continue; }
    if (a == "--cpu-quota-external") { o.cpu_quota_external = true; continue; }
    if (a == "--meters") { o.list_meters = true; continue; }
    if (a == "--power-model") {
      auto v = val();
      if (!v) return std::move(v.error());
      char* end = nullptr;
      const double idle = std::strtod(v->c_str(), &end);
      double busy = -1;
      if (end != v->c_str() && *end == ',') {
        const char* b = end + 1;
        busy = std::strtod(b, &end);
        if (end == b || *end != '\0') busy = -1;
      }
      if (!(idle >= 0) || !(busy >= idle))
        return make_error(Errc::invalid_argument, "--power-model expects IDLE_W,BUSY_W with 0 <= idle <= busy, got '" + *v + "'");
      o.power_model = std::make_pair(idle, busy);
      continue;
    }
    if (a == "--link-delay-ms" || a == "--link-jitter-ms") {
      auto v = val();
      if (!v) return std::move(v.error());
      char* end = nullptr;
      const double x = std::strtod(v->c_str(), &end);
      if (end == v->c_str() || *end != '\0' || !(x >= 0 && x <= 600000))
        return make_error(Errc::invalid_argument, a + " expects milliseconds 0..600000, got '" + *v + "'");
      (a == "--link-delay-ms" ? o.link_delay_ms : o.link_jitter_ms) = x;
      continue;
    }
    if (a == "--heartbeat-timeout-ms") {
      auto v = val();
      if (!v) return std::move(v.error());
      char* end = nullptr;
      const long x = std::strtol(v->c_str(), &end, 10);
      if (end == v->c_str() || *end != '\0' || x < 1000 || x > 3600000)
        return make_error(Errc::invalid_argument, "--heartbeat-timeout-ms expects milliseconds 1000..3600000, got '" + *v + "'");
      o.heartbeat_timeout_ms = static_cast<int>(x);
      continue;
    }
    if (a == "--cpu-quota" || a == "--cpu-cores") {
      auto v = val();
      if (!v) return std::move(v.error());
      char* end = nullptr;
      const double x = std::strtod(v->c_str(), &end);
      const bool quota = a == "--cpu-quota";
      if (end == v->c_str() || *end != '\0' || !(quota ? x >= 0.01 && x <= 4096 : x >= 1 && x <= 4096 && x == static_cast<int>(x)))
        return make_error(Errc::invalid_argument, a + (quota ? " expects cores 0.01..4096" : " expects a CPU count 1..4096") +
                                                      ", got '" + *v + "'");
      if (quota) o.cpu_quota = x;
      else o.cpu_cores = static_cast<int>(x);
      continue;
    }
    return make_error(Errc::invalid_argument, "unknown option '" + a + "'");
  }
  if (o.list_meters) return {};
  if (o.role != "SERVER" && o.role != "PARTICIPANT" && o.role != "TRAIN_WORKER" && o.role != "TRAIN_OWNER")
    return make_error(Errc::invalid_argument,
                      "--role must be SERVER, PARTICIPANT, TRAIN_WORKER or TRAIN_OWNER, got '" + o.role + "'");
  if ((o.role == "TRAIN_WORKER" || o.role == "TRAIN_OWNER") && !o.config_from_stdin && o.experiment_file.empty())
    return make_error(Errc::invalid_argument, o.role + " needs an experiment: --config stdin or --experiment FILE");
  if (o.role == "TRAIN_WORKER" && o.train_segments.empty())
    return make_error(Errc::invalid_argument, "TRAIN_WORKER needs --segments LIST (the segments it holds)");
  if ((o.role == "TRAIN_WORKER" || o.role == "TRAIN_OWNER") && o.run_tag.empty())
    return make_error(Errc::invalid_argument, o.role + " needs --run-tag TAG (its checkpoint directory)");
  if (o.config_from_stdin && !o.experiment_file.empty())
    return make_error(Errc::invalid_argument, "--config stdin and --experiment FILE exclude each other");
  if (o.role == "PARTICIPANT") {
    if (!o.config_from_stdin && o.experiment_file.empty())
      return make_error(Errc::invalid_argument, "PARTICIPANT needs an experiment: --config stdin or --experiment FILE");
    if (o.connect.empty() && !o.in_process)
      return make_error(Errc::invalid_argument, "PARTICIPANT needs --connect ENDPOINT or --in-process");
  }
  return {};
}

std::optional<PowerModel> agent_power_model(const AgentOptions& o) {
  if (!o.power_model) return std::nullopt;
  PowerModel m;
  m.idle_w = o.power_model->first;
  m.busy_w = o.power_model->second;
  cpu_set_t set;
  CPU_ZERO(&set);
  double cores = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  if (o.cpu_cores > 0) cores = std::min<double>(cores, o.cpu_cores);
  if (o.cpu_quota > 0) cores = std::min(cores, o.cpu_quota);
  m.cores = cores;
  return m;
}

HwIdentity agent_hw_identity(const AgentOptions& o) {
  HwIdentity h = local_hw_identity();
  if (o.cpu_quota > 0) h.cpu_quota = o.cpu_quota;
  if (o.cpu_cores > 0) h.cpu_cores_limit = o.cpu_cores;
  finish_hw_id(h);
  return h;
}

int run_role(const AgentOptions& opt, ControlOut& ctl) {
  if (!opt.experiment) {
    if (opt.role != "SERVER") {
      ctl.send("FAIL", {{"error", "PARTICIPANT needs a model"}});
      return 2;
    }
    return serve(opt, ctl, nullptr);
  }
#if TRACR_WITH_TORCH
  if (opt.role == "TRAIN_WORKER") return run_train_worker(opt, ctl);
  if (opt.role == "TRAIN_OWNER") return run_train_owner(opt, ctl);
  return run_model_role(opt, ctl);
#else
  ctl.send("FAIL", {{"error", "this tracr-agent was built without LibTorch (TRACR_WITH_TORCH=OFF): no models"}});
  return 2;
#endif
}

}  // namespace tracr::agent
