// `tracrctl models` and `tracrctl profile`: the model registry and local
// per-layer profiling (LibTorch builds only).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#if TRACR_WITH_TORCH
#include <torch/torch.h>

#include "analysis/tables.hpp"
#include "core/atomic_file.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "core/user_error.hpp"
#include "experiments/profile.hpp"
#include "experiments/registry.hpp"
#endif

#include "controller/commands/models.hpp"
#include "protocol/error.hpp"
#include "settings/config.hpp"
#include "settings/source.hpp"

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;
using namespace tracr::analysis;

Status cmd_models() {
#if TRACR_WITH_TORCH
  for (const auto& name : experiments::list_models())
    fmt::print("{:<24} {}\n", name, experiments::model_description(name));
  return {};
#else
  return core::bad_input(std::string("this build has no LibTorch (TRACR_WITH_TORCH=OFF)"));
#endif
}

namespace {
#if TRACR_WITH_TORCH
// What shape `name` takes when none is given (the registry's default), for
// "expected" in a message; "" when the model cannot be built at all.
std::string default_shape(const std::string& name) {
  auto m = experiments::create_model(name, experiments::ModelConfig{});
  if (!m) return "";
  std::string out;
  for (auto d : (*m)->input_shape()) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}
// One CSV row per layer profile.
std::string profile_csv(const std::vector<experiments::LayerProfile>& prof) {
  std::string o = "index,name,type,device,repetitions,median_ms,p95_ms,mean_ms,min_ms,input_bytes,output_bytes,params,"
                  "macs,peak_rss_delta_bytes\r\n";
  for (const auto& l : prof)
    o += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{}\r\n", l.index, csv_field(l.name), csv_field(l.type),
                     csv_field(l.device), l.repetitions, json_num(l.median_ms), json_num(l.p95_ms), json_num(l.mean_ms),
                     json_num(l.min_ms), l.input_bytes, l.output_bytes, l.params, l.macs, l.peak_rss_delta_bytes);
  return o;
}

// A split's head and tail timed whole (either may be missing: no head at 0, no tail at N, or refused).
struct SegmentRow {
  int split = 0;
  std::optional<double> head_ms, tail_ms;
};

// The model, its input, the layers, the per-split estimate and the segments timed whole as JSON.
std::string profile_json(const experiments::SplitModel& model, const std::vector<int64_t>& batched, int reps,
                         const std::vector<experiments::LayerProfile>& prof,
                         const std::vector<experiments::SplitEstimate>& splits, const std::vector<SegmentRow>& segs) {
  std::string o = fmt::format("{{\"model\":{},\"device\":{},\"input\":[{}],\"repetitions\":{},\"layers\":[",
                              settings::json_quote(model.name()), settings::json_quote(model.device().str()),
                              fmt::join(batched, ","), reps);
  for (size_t i = 0; i < prof.size(); ++i) {
    const auto& l = prof[i];
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
  // Heads and tails timed whole (median ms; null where the split has none), as the model executes them.
  auto ms = [](const std::optional<double>& v) { return v ? json_num(*v) : std::string("null"); };
  o += fmt::format("],\"execution\":{},\"segments\":[", settings::json_quote(model.execution()));
  for (size_t i = 0; i < segs.size(); ++i)
    o += fmt::format("{}\n  {{\"split\":{},\"head_ms\":{},\"tail_ms\":{}}}", i ? "," : "", segs[i].split,
                     ms(segs[i].head_ms), ms(segs[i].tail_ms));
  return o + "]}\n";
}

// Writes an output file and says so.
Status write_output(const std::string& path, const std::string& text) {
  if (auto st = write_file(path, text); !st) return core::command_failed(user_text(st.error()));
  fmt::print("wrote {}\n", path);
  return {};
}

// The splits --segments names: all, none, K1,K2,..., or by default a graph
// model's first and last split and 3 evenly between (none for a zoo model:
// its frames run layer by layer, so its layer sums are what a segment costs).
Result<std::vector<int>> segment_splits(const std::string& spec, const experiments::SplitModel& m) {
  const int n = m.num_layers();
  std::vector<int> out;
  if (spec == "none" || (spec.empty() && m.execution() == "layers")) return out;
  if (spec == "all" || spec.empty()) {
    const int step = spec == "all" ? 1 : 0;
    for (int i = 0; i <= (step ? n : 4); ++i) {
      const int k = step ? i : static_cast<int>(std::lround(i * n / 4.0));
      if (out.empty() || out.back() != k) out.push_back(k);
    }
    return out;
  }
  std::istringstream in(spec);
  for (std::string part; std::getline(in, part, ',');) {
    // A layer's name: the split that cuts after it.
    if (!part.empty() && !std::isdigit(static_cast<unsigned char>(part[0])) && part[0] != '-' && part[0] != '+') {
      std::vector<std::string> names;
      for (const auto& l : m.layers()) names.push_back(l.name);
      const auto it = std::find(names.begin(), names.end(), part);
      if (it == names.end()) {
        const std::string near = settings::did_you_mean(part, names);
        return make_error(Errc::invalid_argument,
                          fmt::format("--segments: {} has no layer '{}'{}; expected all, none, or split points "
                                      "K1,K2,... in 0..{} or the names of the layers they cut after",
                                      m.name(), part, near.empty() ? "" : " (did you mean '" + near + "'?)", n));
      }
      out.push_back(static_cast<int>(it - names.begin()) + 1);
      continue;
    }
    char* end = nullptr;
    errno = 0;
    const long k = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || errno != 0 || k < 0 || k > n)
      return make_error(Errc::invalid_argument,
                        fmt::format("--segments: expected all, none or split points K1,K2,... in 0..{} (or layer names; {} has {} "
                                    "layers), got '{}'",
                                    n, m.name(), n, part));
    out.push_back(static_cast<int>(k));
  }
  return out;
}

// Times the heads and tails at `ks` (one warm-up run, then a third of --reps, at least 1: a segment is up to
// the whole model, so this keeps a large model's profile within a few times its layer profile) and prints
// them beside the layer sums; refused cuts are named, not timed.
Result<std::vector<SegmentRow>> print_segments(const experiments::SplitModel& m, const at::Tensor& input,
                                               const std::vector<int>& ks, int reps,
                                               const std::vector<experiments::SplitEstimate>& sums) {
  std::vector<SegmentRow> rows;
  if (ks.empty()) return rows;
  experiments::ProfileOptions po;
  po.warmup = 1;
  po.repetitions = std::max(1, reps / 3);
  auto heads = experiments::profile_segments(m, input, ks, true, po);
  if (!heads) return std::move(heads.error());
  auto tails = experiments::profile_segments(m, input, ks, false, po);
  if (!tails) return std::move(tails.error());
  std::string refused;
  for (int k : ks) {
    if (const std::string why = m.split_refusal(k); !why.empty()) {
      refused += fmt::format("  split {}: not timed: {}\n", k, why);
      continue;
    }
    SegmentRow r{k, {}, {}};
    for (const auto& p : *heads) if (p.split == k) r.head_ms = p.median_ms;
    for (const auto& p : *tails) if (p.split == k) r.tail_ms = p.median_ms;
    rows.push_back(r);
  }
  fmt::print("heads and tails timed whole, as a run executes them ({}), at {} of {} splits (--segments all for "
             "every one), beside the layer sums above (median ms of {} runs after 1 warm-up):\n",
             m.execution(), rows.size(), m.num_layers() + 1, po.repetitions);
  std::vector<std::vector<std::string>> t = {{"split", "last head layer", "head_ms", "layer sum", "tail_ms",
                                              "layer sum"}};
  auto cell = [](const std::optional<double>& v) { return v ? fmt::format("{:.3f}", *v) : std::string("-"); };
  for (const auto& r : rows) {
    const auto& e = sums[static_cast<size_t>(r.split)];
    t.push_back({std::to_string(r.split), r.split == 0 ? "(input)" : e.last_head_layer, cell(r.head_ms),
                 fmt::format("{:.3f}", e.head_ms), cell(r.tail_ms), fmt::format("{:.3f}", e.tail_ms)});
  }
  fmt::print("{}{}\n", align(t, {1}), refused);
  return rows;
}
#endif
}  // namespace

Status cmd_profile(const ProfileOptions& opt) {
#if TRACR_WITH_TORCH
  experiments::ModelConfig cfg;
  cfg.input_shape = opt.input_shape;
  cfg.weights = opt.weights;
  cfg.device = opt.device;
  const int64_t batch = opt.batch;
  const int reps = opt.reps;
  const std::string& csv = opt.csv;
  const std::string& json = opt.json;
  auto model = experiments::create_model(opt.model, cfg);
  if (!model) {  // an unknown model or a shape it cannot take: a usage error
    const std::string msg = model.error().message;
    std::string expected;
    if (!opt.input_shape.empty())
      if (const std::string d = default_shape(opt.model); !d.empty())
        expected = fmt::format("; expected an --input-shape (C,H,W, or any rank such as 4 or T,D) that every "
                               "layer of {} takes (its default: {})",
                               opt.model, d);
    return core::bad_input(fmt::format("{}{}", msg.substr(0, msg.find('\n')), expected));
  }
  auto ks = segment_splits(opt.segments, **model);
  if (!ks) {
    return core::bad_input(ks.error().message);
  }
  // LibTorch throws c10::Error (its what() holds a backtrace) for an input a
  // layer cannot take: a message naming the model, never the trace.
  try {
    const auto& s = (*model)->input_shape();  // any rank
    std::vector<int64_t> batched = {batch};
    batched.insert(batched.end(), s.begin(), s.end());
    torch::NoGradGuard ng;
    auto input = torch::rand(batched).to((*model)->device());
    experiments::ProfileOptions po;
    po.repetitions = reps;
    auto prof = experiments::profile_layers(**model, input, po);
    if (!prof) {
      return core::command_failed(user_text(prof.error()));
    }
    fmt::print("{} on {}, input {}, {} repetitions per layer\n\n", (*model)->name(), (*model)->device().str(),
               fmt::join(batched, "x"), reps);
    fmt::print("{}\n", experiments::format_layer_profiles(*prof));
    const auto splits = experiments::split_table(**model, *prof, batch);
    fmt::print("per-split estimate from these profiles (head on this device, tail on an identical one):\n{}\n",
               experiments::format_split_table(splits));
    auto segs = print_segments(**model, input, *ks, reps, splits);
    if (!segs) {
      return core::command_failed(user_text(segs.error()));
    }
    // The same figures as files: one CSV row per layer; JSON with the layers, the splits and the segments.
    if (!csv.empty()) TRACR_TRY(write_output(csv, profile_csv(*prof)));
    if (!json.empty()) TRACR_TRY(write_output(json, profile_json(**model, batched, reps, *prof, splits, *segs)));
  } catch (const std::exception& ex) {
    return core::bad_input(fmt::format("{} at input {}x{}: {}", opt.model, batch,
                                       fmt::join((*model)->input_shape(), "x"), experiments::torch_error_text(ex)));
  }
  return {};
#else
  return core::bad_input(std::string("this build has no LibTorch (TRACR_WITH_TORCH=OFF)"));
#endif
}

}  // namespace tracr::controller
