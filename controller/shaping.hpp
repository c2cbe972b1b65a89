// Emulating a link with Linux tc on the path between two agents. Today the
// path must run between network namespaces (devices with `netns:`, the local
// test-bed): each end's interface towards the other gets a root qdisc, tbf
// for rates, netem where delay, jitter or loss are asked for and the kernel
// has it. Every shaped interface is written down in a state file first, so a
// controller that dies leaves nothing behind for long: the next run removes
// its shaping (sweep_stale_shaping). What was applied is a text that every
// run, frame and probe row stores (`shaping`).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "protocol/error.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

class LinkShaper {
 public:
  // Shapes `link` between `server` and each participant. A link that shapes
  // nothing (unlimited) returns a shaper that did nothing ("none"). Errors
  // (config) name the device and why: not in a namespace, an interface that
  // already has a qdisc, netem missing for a delay/jitter/loss profile.
  static Result<std::unique_ptr<LinkShaper>> apply(const settings::LinkSpec& link,
                                                   const settings::DeviceConfig& server,
                                                   const std::vector<const settings::DeviceConfig*>& participants,
                                                   const std::string& state_dir);
  ~LinkShaper();  // removes what it applied
  // Removes every qdisc this shaper added; idempotent.
  void remove();
  // "none", or e.g. "tc tbf: up 5.85 Mbit/s on vp12 (ns trp12), down 5.85 Mbit/s on vs12 (ns trs12)".
  const std::string& shaping() const { return text_; }

 private:
  struct Shaped {
    std::string netns, dev, state_file;
  };
  std::vector<Shaped> shaped_;
  std::string text_ = "none";
};

// Removes shaping whose controller no longer runs (state files under
// state_dir); returns what it removed, one line each.
std::vector<std::string> sweep_stale_shaping(const std::string& state_dir);

}  // namespace tracr::controller
