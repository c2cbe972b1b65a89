// The roles a tracr-agent runs in, named once. The names travel on the
// agent's command line (--role), in its READY control line, and into the
// results database (layer_profiles.device_role, devices.role, ...), so they
// are part of the interface: SERVER, PARTICIPANT, TRAIN_WORKER, TRAIN_OWNER.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace tracr::wire {

enum class AgentRole { server, participant, train_worker, train_owner };

inline constexpr std::array<AgentRole, 4> kAgentRoles = {AgentRole::server, AgentRole::participant,
                                                         AgentRole::train_worker, AgentRole::train_owner};

constexpr std::string_view role_name(AgentRole r) {
  switch (r) {
    case AgentRole::server: return "SERVER";
    case AgentRole::participant: return "PARTICIPANT";
    case AgentRole::train_worker: return "TRAIN_WORKER";
    case AgentRole::train_owner: return "TRAIN_OWNER";
  }
  return "?";
}

// The role a name gives (exactly as role_name writes it), or nothing.
constexpr std::optional<AgentRole> parse_role(std::string_view name) {
  for (AgentRole r : kAgentRoles)
    if (role_name(r) == name) return r;
  return std::nullopt;
}

// The training roles (tracrctl train), which need an experiment and a run tag.
constexpr bool is_training(AgentRole r) { return r == AgentRole::train_worker || r == AgentRole::train_owner; }

// Whether an agent of this role drives its session (sends the frames or the
// training steps): it is the one sent STOP, and the session ends when every
// such agent has finished.
constexpr bool drives_session(AgentRole r) { return r == AgentRole::participant || r == AgentRole::train_owner; }

}  // namespace tracr::wire
