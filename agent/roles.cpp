#include "agent/roles.hpp"

#include <cstdlib>

#include "protocol/codec.hpp"

namespace tracr::agent {

namespace {

Result<int64_t> to_int(const std::string& opt, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || x < lo || x > hi)
    return make_error(Errc::invalid_argument,
                      opt + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "], got '" + v + "'");
  return static_cast<int64_t>(x);
}

Result<std::vector<int64_t>> to_ints(const std::string& opt, const std::string& v) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= v.size()) {
    auto c = v.find(',', pos);
    auto x = to_int(opt, v.substr(pos, c == std::string::npos ? std::string::npos : c - pos), 0, 1 << 30);
    if (!x) return std::move(x.error());
    out.push_back(*x);
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}

}  // namespace

Status parse_agent_args(const std::vector<std::string>& args, AgentOptions& o) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto val = [&]() -> Result<std::string> {
      if (i + 1 >= args.size()) return make_error(Errc::invalid_argument, a + " needs a value");
      return args[++i];
    };
#define STR_OPT(flag, field)            \
  if (a == flag) {                      \
    auto v = val();                     \
    if (!v) return std::move(v.error()); \
    o.field = *v;                       \
    continue;                           \
  }
#define INT_OPT(flag, field, lo, hi)                \
  if (a == flag) {                                  \
    auto v = val();                                 \
    if (!v) return std::move(v.error());            \
    auto x = to_int(a, *v, lo, hi);                 \
    if (!x) return std::move(x.error());            \
    o.field = static_cast<decltype(o.field)>(*x);   \
    continue;                                       \
  }
    STR_OPT("--role", role)
    STR_OPT("--bind", bind)
    STR_OPT("--raw-bind", raw_bind)
    STR_OPT("--connect", connect)
    STR_OPT("--model", model)
    STR_OPT("--weights", weights)
    STR_OPT("--device", device)
    STR_OPT("--dataset", dataset)
    STR_OPT("--dataset-path", dataset_path)
    STR_OPT("--dataset-split", dataset_split)
    STR_OPT("--class-names", class_names)
    STR_OPT("--codec", codec)
    STR_OPT("--secret-file", secret_file)
    INT_OPT("--num-classes", num_classes, 0, 1 << 24)
    INT_OPT("--seed", seed, 0, INT64_MAX)
    INT_OPT("--profile-layers", profile_reps, 0, 100000)
    INT_OPT("--profile-batch", profile_batch, 1, 4096)
    INT_OPT("--max-samples", max_samples, 0, INT64_MAX)
    INT_OPT("--batch", batch, 1, 4096)
    INT_OPT("--warmup", warmup, 0, 100000)
    INT_OPT("--reps", reps, 1, 1000000)
    INT_OPT("--chunk", chunk_bytes, 4096, 1 << 30)
    INT_OPT("--inflight", inflight, 1, 1024)
    INT_OPT("--topk", topk, 1, 1000)
#undef STR_OPT
#undef INT_OPT
    if (a == "--no-encrypt") { o.encrypt = false; continue; }
    if (a == "--no-x25519") { o.x25519 = false; continue; }
    if (a == "--in-process") { o.in_process = true; continue; }
    if (a == "--input-shape") {
      auto v = val();
      if (!v) return std::move(v.error());
      auto s = to_ints(a, *v);
      if (!s) return std::move(s.error());
      if (s->size() != 3) return make_error(Errc::invalid_argument, "--input-shape expects C,H,W");
      o.input_shape = *s;
      continue;
    }
    if (a == "--splits") {
      auto v = val();
      if (!v) return std::move(v.error());
      o.splits.clear();
      if (*v == "all") continue;
      auto s = to_ints(a, *v);
      if (!s) return std::move(s.error());
      for (auto k : *s) o.splits.push_back(static_cast<int>(k));
      continue;
    }
    return make_error(Errc::invalid_argument, "unknown option '" + a + "'");
  }
  if (o.role != "SERVER" && o.role != "PARTICIPANT")
    return make_error(Errc::invalid_argument, "--role must be SERVER or PARTICIPANT, got '" + o.role + "'");
  if (o.role == "PARTICIPANT") {
    if (o.model.empty()) return make_error(Errc::invalid_argument, "PARTICIPANT needs --model");
    if (o.connect.empty() && !o.in_process)
      return make_error(Errc::invalid_argument, "PARTICIPANT needs --connect ENDPOINT or --in-process");
  }
  auto codec = protocol::CodecSpec::parse(o.codec);
  if (!codec) return make_error(codec.error().code, "--codec: " + codec.error().message);
  return {};
}

int run_role(const AgentOptions& opt, ControlOut& ctl) {
  if (opt.model.empty()) {
    if (opt.role != "SERVER") {
      ctl.send("FAIL", {{"error", "PARTICIPANT needs a model"}});
      return 2;
    }
    return serve(opt, ctl, nullptr);
  }
#if TRACR_WITH_TORCH
  return run_model_role(opt, ctl);
#else
  ctl.send("FAIL", {{"error", "this tracr-agent was built without LibTorch (TRACR_WITH_TORCH=OFF): no models"}});
  return 2;
#endif
}

}  // namespace tracr::agent
