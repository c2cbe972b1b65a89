#include "agent/command.hpp"

#include <fmt/format.h>

#include "protocol/codec.hpp"

namespace tracr::agent {

using namespace tracr::protocol;
using namespace tracr::wire;

Result<Command> parse_command(const ControlMsg& m) {
  Command c;
  auto id = m.get_int("id");
  if (!id) return std::move(id.error());
  c.id = *id;
  auto op = m.get_str("op");
  if (!op) return std::move(op.error());
  if (*op == "set_split") {
    c.kind = Command::Kind::set_split;
    auto k = m.get_int("split");
    if (!k) return std::move(k.error());
    if (*k < 0 || *k > 1000000)
      return make_error(Errc::field_type, fmt::format("CMD set_split: split {} is not a split point", *k));
    c.split = static_cast<int>(*k);
  } else if (*op == "set_codec") {
    c.kind = Command::Kind::set_codec;
    auto t = m.get_str("codec");
    if (!t) return std::move(t.error());
    auto spec = CodecSpec::parse(*t);
    if (!spec) return make_error(spec.error().code, "CMD set_codec: " + spec.error().message);
    c.codec = spec->name();
  } else if (*op == "pause") {
    c.kind = Command::Kind::pause;
  } else if (*op == "resume") {
    c.kind = Command::Kind::resume;
  } else if (*op == "stop") {
    c.kind = Command::Kind::stop;
  } else {
    return make_error(Errc::field_type,
                      "CMD op '" + *op + "': expected set_split, set_codec, pause, resume or stop");
  }
  return c;
}

}  // namespace tracr::agent
