#include "agent/roles.hpp"
#include "agent/trainer.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace tracr::agent {

using namespace tracr::wire;

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

protocol::ChannelOptions agent_channel_options(const AgentOptions& o, AgentRole role) {
  protocol::ChannelOptions co;
  co.role = std::string(role_name(role));
  co.security.encrypt = o.encrypt;
  co.security.x25519 = o.x25519;
  co.security.secret = o.secret;
  co.security.clock = o.clock;
  return co;
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
    if (opt.role != AgentRole::server) {
      ctl.send("FAIL", {{"error", "PARTICIPANT needs a model"}});
      return 2;
    }
    return serve(opt, ctl, nullptr);
  }
#if TRACR_WITH_TORCH
  if (opt.role == AgentRole::train_worker) return run_train_worker(opt, ctl);
  if (opt.role == AgentRole::train_owner) return run_train_owner(opt, ctl);
  return run_model_role(opt, ctl);
#else
  ctl.send("FAIL", {{"error", "this tracr-agent was built without LibTorch (TRACR_WITH_TORCH=OFF): no models"}});
  return 2;
#endif
}

}  // namespace tracr::agent
