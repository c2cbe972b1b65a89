// Emulating a link with Linux tc on the path between two agents: on the
// participant's interface towards the SERVER (up) and on the SERVER's
// interface towards the participant (down). A device is shaped where its
// agent runs: in its network namespace (`netns:`, the local test-bed), on
// this machine (a local device outside a namespace; never loopback), or over
// SSH on a real device whose user may run tc (root, or passwordless
// `sudo -n`). Only traffic to the peer's address is shaped (htb with a u32
// filter on the peer; everything else, SSH included, passes unshaped); netem
// under that class adds delay, jitter and loss where the kernel has it, or
// the participant agent's delay relay adds delay and jitter when the
// experiment says `link_delay: agent`.
//
// Every shaped interface is written down in a state file first, so a
// controller that dies leaves nothing behind for long: the next run removes
// its shaping (sweep_stale_shaping). What was applied is a text that every
// run, frame and probe row stores (`shaping`).
#pragma once

#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "protocol/error.hpp"
#include "settings/config.hpp"

namespace tracr::fleet {

struct ShapingContext {
  std::string state_dir;          // <results dir>/shaping
  std::string devices_file;       // for SSH targets (keys relative to it)
  bool trust_new_hosts = false;
  bool agent_delay = false;       // experiment link_delay: agent
};

// The link one participant gets.
struct ParticipantLink {
  const settings::DeviceConfig* participant = nullptr;
  settings::LinkSpec link;
};

class LinkShaper {
 public:
  // Shapes each participant's link to `server`. Links that shape nothing
  // (unlimited) leave that pair alone. Errors (config) name the device and
  // why: loopback, no permission to run tc (with what to do), an interface
  // that already has a root qdisc, netem missing for delay/jitter/loss.
  // Nothing stays applied when it fails.
  static Result<std::unique_ptr<LinkShaper>> apply(const settings::DeviceConfig& server,
                                                   const std::vector<ParticipantLink>& links,
                                                   const ShapingContext& ctx);
  ~LinkShaper();  // removes what it applied
  // Removes every qdisc this shaper added; idempotent. Returns one line per
  // interface it could not clean (its state file is kept for the next run).
  std::vector<std::string> remove();
  // "none", or e.g. "tc htb: up 5.85 Mbit/s on vp12 (namespace trp12) to 10.1.1.1; ...; agent: delay 20 ms".
  const std::string& shaping() const { return text_; }
  // Delay and jitter (ms, one way) the participant's agent must apply
  // itself (link_delay: agent); {0, 0} when none.
  std::pair<double, double> agent_delay(const std::string& participant) const;

 private:
  struct Shaped {
    settings::DeviceConfig device;
    std::string dev, state_file;
  };
  std::vector<Shaped> shaped_;
  std::map<std::string, std::pair<double, double>> agent_delay_;
  std::string text_ = "none";
  ShapingContext ctx_;
};


// What `tracrctl devices check` reports: whether tc may be run on the device
// (as root, through sudo -n, or not, and why) and whether its kernel has
// netem (tried in a throwaway network namespace). One line.
std::string tc_capability(const settings::DeviceConfig& d, const std::string& devices_file, bool trust_new_hosts);

// Removes shaping whose controller no longer runs (state files under
// state_dir); SSH devices are reached through `devices`. Returns what it
// removed or could not, one line each.
std::vector<std::string> sweep_stale_shaping(const std::string& state_dir, const settings::DevicesConfig& devices,
                                             bool trust_new_hosts);

// The link each participant gets from an experiment's profile (when set) or
// from the devices file's `link_profile` of each participant (when the
// experiment sets none); empty when neither shapes anything.
std::vector<ParticipantLink> participant_links(const std::optional<settings::LinkSpec>& experiment_link,
                                               const settings::DevicesConfig& devices);

}  // namespace tracr::fleet
