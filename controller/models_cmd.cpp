// `tracrctl models` and `tracrctl profile`: the model registry and local
// per-layer profiling (LibTorch builds only).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#if TRACR_WITH_TORCH
#include <torch/torch.h>

#include "controller/results_cli.hpp"
#include "experiments/profile.hpp"
#include "experiments/registry.hpp"
#endif

#include "protocol/error.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

int cmd_models(const std::vector<std::string>&) {
#if TRACR_WITH_TORCH
  for (const auto& name : experiments::list_models())
    fmt::print("{:<24} {}\n", name, experiments::model_description(name));
  return 0;
#else
  std::fputs("tracrctl models: this build has no LibTorch (TRACR_WITH_TORCH=OFF)\n", stderr);
  return 2;
#endif
}

// tracrctl profile MODEL [--input-shape C,H,W] [--batch B] [--reps N] [--weights F] [--device D]
int cmd_profile(const std::vector<std::string>& args) {
#if TRACR_WITH_TORCH
  if (args.empty() || args[0].empty() || args[0][0] == '-') {
    std::fputs("usage: tracrctl profile MODEL [--input-shape C,H,W] [--batch B] [--reps N] [--weights F] [--device D] "
               "[--csv FILE] [--json FILE]\n",
               stderr);
    return 2;
  }
  experiments::ModelConfig cfg;
  int64_t batch = 1;
  int reps = 10;
  std::string csv, json;
  auto integer = [](const std::string& opt, const std::string& text, int64_t lo, int64_t hi) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
      throw Fatal(make_error(Errc::invalid_argument, fmt::format("profile: {} expects an integer {}..{}, got '{}'", opt,
                                                                 lo, hi, text)));
    return static_cast<int64_t>(v);
  };
  for (size_t i = 1; i < args.size(); ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Fatal(make_error(Errc::invalid_argument, args[i] + " needs a value"));
      return args[++i];
    };
    const std::string a = args[i];
    if (a == "--input-shape") {
      cfg.input_shape.clear();
      std::string s = next();
      size_t pos = 0;
      while (pos <= s.size()) {
        auto c = s.find(',', pos);
        cfg.input_shape.push_back(integer("--input-shape", s.substr(pos, c == std::string::npos ? c : c - pos), 1, 65536));
        if (c == std::string::npos) break;
        pos = c + 1;
      }
      if (cfg.input_shape.size() != 3)
        throw Fatal(make_error(Errc::invalid_argument, "profile: --input-shape expects C,H,W, got '" + s + "'"));
    } else if (a == "--batch") batch = integer(a, next(), 1, 65536);
    else if (a == "--reps") reps = static_cast<int>(integer(a, next(), 1, 1000000));
    else if (a == "--weights") cfg.weights = next();
    else if (a == "--device") cfg.device = next();
    else if (a == "--csv") csv = next();
    else if (a == "--json") json = next();
    else throw Fatal(make_error(Errc::invalid_argument, "profile: unknown option '" + a + "'"));
  }
  auto model = experiments::create_model(args[0], cfg);
  if (!model) {  // an unknown model or a shape it cannot take: a usage error
    const std::string msg = model.error().str();
    fmt::print(stderr, "tracrctl profile: {}\n", msg.substr(0, msg.find('\n')));
    return 2;
  }
  const auto& s = (*model)->input_shape();
  torch::NoGradGuard ng;
  auto input = torch::rand({batch, s[0], s[1], s[2]}).to((*model)->device());
  experiments::ProfileOptions po;
  po.repetitions = reps;
  auto prof = experiments::profile_layers(**model, input, po);
  if (!prof) {
    fmt::print(stderr, "tracrctl profile: {}\n", prof.error().str());
    return 1;
  }
  fmt::print("{} on {}, input {}x{}x{}x{}, {} repetitions per layer\n\n", (*model)->name(), (*model)->device().str(),
             batch, s[0], s[1], s[2], reps);
  fmt::print("{}\n", experiments::format_layer_profiles(*prof));
  const auto splits = experiments::split_table(**model, *prof, batch);
  fmt::print("per-split estimate from these profiles (head on this device, tail on an identical one):\n{}\n",
             experiments::format_split_table(splits));
  // The same figures as files: one CSV row per layer; JSON with the layers and the splits.
  if (!csv.empty()) {
    std::string o = "index,name,type,device,repetitions,median_ms,p95_ms,mean_ms,min_ms,input_bytes,output_bytes,params,"
                    "macs,peak_rss_delta_bytes\r\n";
    for (const auto& l : *prof)
      o += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{}\r\n", l.index, csv_field(l.name), csv_field(l.type),
                       csv_field(l.device), l.repetitions, json_num(l.median_ms), json_num(l.p95_ms),
                       json_num(l.mean_ms), json_num(l.min_ms), l.input_bytes, l.output_bytes, l.params, l.macs,
                       l.peak_rss_delta_bytes);
    if (auto st = write_file(csv, o); !st) {
      fmt::print(stderr, "tracrctl profile: {}\n", st.error().str());
      return 1;
    }
    fmt::print("wrote {}\n", csv);
  }
  if (!json.empty()) {
    std::string o = fmt::format("{{\"model\":{},\"device\":{},\"input\":[{},{},{},{}],\"repetitions\":{},\"layers\":[",
                                settings::json_quote((*model)->name()), settings::json_quote((*model)->device().str()),
                                batch, s[0], s[1], s[2], reps);
    for (size_t i = 0; i < prof->size(); ++i) {
      const auto& l = (*prof)[i];
      o += fmt::format("{}\n  {{\"index\":{},\"name\":{},\"type\":{},\"median_ms\":{},\"p95_ms\":{},\"mean_ms\":{},"
                       "\"min_ms\":{},\"input_bytes\":{},\"output_bytes\":{},\"params\":{},\"macs\":{},"
                       "\"peak_rss_delta_bytes\":{}}}",
                       i ? "," : "", l.index, settings::json_quote(l.name), settings::json_quote(l.type),
                       json_num(l.median_ms), json_num(l.p95_ms), json_num(l.mean_ms), json_num(l.min_ms), l.input_bytes,
                       l.output_bytes, l.params, l.macs, l.peak_rss_delta_bytes);
    }
    o += "],\"splits\":[";
    for (size_t i = 0; i < splits.size(); ++i) {
      const auto& e = splits[i];
      o += fmt::format("{}\n  {{\"split\":{},\"head_ms\":{},\"tail_ms\":{},\"crossing_bytes\":{},"
                       "\"crossing_tensors\":{},\"last_head_layer\":{}}}",
                       i ? "," : "", e.split, json_num(e.head_ms), json_num(e.tail_ms), e.crossing_bytes,
                       e.crossing_tensors, settings::json_quote(e.last_head_layer));
    }
    o += "]}\n";
    if (auto st = write_file(json, o); !st) {
      fmt::print(stderr, "tracrctl profile: {}\n", st.error().str());
      return 1;
    }
    fmt::print("wrote {}\n", json);
  }
  return 0;
#else
  std::fputs("tracrctl profile: this build has no LibTorch (TRACR_WITH_TORCH=OFF)\n", stderr);
  return 2;
#endif
}

}  // namespace tracr::controller
