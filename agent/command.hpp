// The controller's commands to a PARTICIPANT (CMD control lines), applied
// by the pipeline between frames. No LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "protocol/error.hpp"
#include "wire/control.hpp"

namespace tracr::agent {

// A command from the controller, applied between frames (wire/control_kinds.def lists
// the line kinds). id is the controller's number for it, echoed in events.
struct Command {
  enum class Kind { set_split, set_codec, pause, resume, stop } kind = Kind::stop;
  int64_t id = 0;
  int split = -1;     // set_split
  std::string codec;  // set_codec
};
// Parses a CMD control line: op=set_split split=K | op=set_codec codec=TEXT |
// op=pause | op=resume | op=stop, id=N. Error names the field.
Result<Command> parse_command(const wire::ControlMsg& m);

}  // namespace tracr::agent
