// settings/ (tracr::settings, no LibTorch): the devices file (devices.hpp: devices_config.yaml, the schema of the
// Python tracr plus documented extensions) and the experiment file
// (experiment.yaml). Both are parsed with yaml-cpp and validated completely
// before anything starts: every error is Errc::config (Errc::io when a file
// cannot be read) with a message of the form
//   <file>:<line>:<column>: <key path>: expected <what>, got <what was there>
// Unknown keys are errors with a did-you-mean from the allowed keys.
// The user-facing reference is config/README.md; the settings table of the
// experiment file is settings_table() (name, type, default, description, env
// override), printed by `tracrctl run --show-config`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/codec.hpp"
#include "protocol/error.hpp"
#include "settings/devices.hpp"
#include "settings/source.hpp"
#include "wire/placement.hpp"

namespace tracr::settings {

// ---------------------------------------------------------------------------
// Experiment (experiment.yaml)

enum class DatasetKind { synthetic, imagefolder, fashion_mnist };
std::string_view dataset_kind_name(DatasetKind k);  // "synthetic" "imagefolder" "fashion_mnist"

struct DatasetSpec {
  DatasetKind kind = DatasetKind::synthetic;
  std::string path;                      // imagefolder: required; fashion_mnist: IDX .gz directory
  std::string class_names_file;          // class_names given as a path
  std::vector<std::string> class_names;  // class_names given as a list
  int64_t max_samples = 0;               // 0 = all (synthetic: 16)
  std::string split = "test";            // fashion_mnist: train | test
  std::vector<double> mean, std;         // normalization, 1 or C values each; empty = the default
  int64_t resize_size = 0;               // imagefolder: shorter side before the crop; 0 = crop x 256 / 224
  std::string interpolation = "bilinear";  // PIL's resize filter: bilinear | bicubic | nearest
};

// The normalization the dataset applies to [0, 1] pixels, (x - mean) / std,
// for an input of `channels` channels: dataset.mean and dataset.std when
// given (1 value, or one per channel), else Fashion-MNIST's training-set
// statistics (0.2860, 0.3530) for fashion_mnist and ImageNet's per-channel
// values for 3-channel images and synthetic inputs. Error config naming
// dataset.mean (with its position) when the count does not fit `channels`, or
// when no default fits them (an image folder read as 1 channel: give both).
struct Normalization {
  std::vector<double> mean, std;
};
struct ExperimentConfig;
Result<Normalization> dataset_normalization(const ExperimentConfig& cfg, int64_t channels);

// The placements a run sweeps. Each entry has one cut point per device of the
// chain (wire/placement.hpp): a plain integer k is the two-tier entry [k]
// (layers [0, k) on the PARTICIPANT, [k, N) on the SERVER), a list [3, 13]
// an entry of a chain of two devices.
struct SplitSpec {
  bool all = true;                      // "all": every placement of the chain (two tiers: 0..N)
  bool plan = false;                    // "plan": the planner's best plan_k placements, chosen at run
                                        // time from the devices' layer profiles and each hop's link probe
  std::vector<wire::Placement> entries;  // when !all: distinct, in the order written
  // Cuts given by layer name (`split: [features.5, layer2.1]`: the cut
  // after that layer): per entry, per cut, the name ("" = given as a
  // number); such a cut is -1 until resolve_split_names. Empty when none is.
  std::vector<std::vector<std::string>> names;
  bool has_names() const { return !names.empty(); }
  // Each entry's first cut: the PARTICIPANT's split (two tiers: the split point).
  std::vector<int> points() const;
};

// One device a frame passes after its PARTICIPANT (`chain:`), with the hop
// into it: the link profile emulated on that hop and the codec of the
// activations crossing it; empty = the experiment's top-level `link` /
// `compression`.
struct ChainHop {
  std::string device;       // a name in the devices file
  std::string link;         // a profile name, or "" = the top-level link
  std::string compression;  // canonical codec text, or "" = the top-level compression
};

struct RecordSpec {
  bool frames = true;  // per-frame rows (frames table)
  bool layers = true;  // per-layer profiles (layer_profiles table)
  bool outputs = false;  // each timed frame's output tensor (outputs/<db file>/run<ID>/*.npy, outputs table)
  // A graph model's heads and tails timed whole (segment_profiles, with
  // layers): at the splits the run sweeps, or at every split it can cut.
  std::string segments = "swept";  // swept | all
  // Early exits: the confidence at every exit the PARTICIPANT reaches, also
  // past the one taken (a threshold sweep needs no re-run; frames_exit_*).
  bool exit_confidences = true;
};

// An early exit (#44): a side classifier on the output of backbone layer
// `after` (by name, or its index as written); it hangs at the cut right after
// that layer. `head`: linear (global average pooling + a linear map to the
// model's classes, trained by `tracrctl train`, read from `file`) or
// torchscript:<path> (the user's own module from that layer's output to the
// classes' logits).
struct ExitSpec {
  std::string after;
  std::string head = "linear";
  std::string file;  // the head's TorchScript file: linear's trained head; for torchscript: the path
};

// When a frame ends at an exit: the first exit whose confidence reaches the
// threshold (measure max_softmax: the top class's probability; entropy: 1 -
// H / ln C, the normalised entropy's complement, so higher is surer for
// both).
struct ExitPolicy {
  std::string measure = "max_softmax";  // max_softmax | entropy
  double threshold = 0.9;
  // `threshold` given as a list: the experiment once per threshold (a sweep
  // axis, after codecs), each a run of its own; empty for one threshold.
  std::vector<double> threshold_list;
};

// The link probe each PARTICIPANT runs over its session before the first frame.
struct ProbeSpec {
  bool enabled = true;
  int rtt_count = 20;              // echo round trips timed (at least 20)
  int duration_ms = 1000;          // bulk transfer time, each way
  int64_t chunk_bytes = 0;         // payload per bulk message; 0: auto (sized each way by a short pass)
};

// Energy (agent/energy.hpp): meters each agent finds, the devices file's
// power_model where it has none, and a radio model for transmission.
struct EnergySpec {
  int idle_ms = 1000;          // idle baseline at agent start (meters only; 0 = none, net energy not computed)
  std::string radio = "auto";  // auto (the link profile when it is 3g, lte or wifi) | none | 3g | lte | wifi
  int layer_window_ms = 50;    // per-layer energy: repeat a layer until the window is at least this long
};

// The adaptive split policy: the controller re-plans from each participant's
// running link estimate and switches its split (a set_split command) when the
// predicted latency gain beats the hysteresis margin.
struct AdaptSpec {
  bool enabled = false;
  int hysteresis_pct = 10;   // switch only when the predicted latency falls by more than this
  int interval_frames = 8;   // re-plan at most once per this many timed frames of the participant
};

// Split training (`tracrctl train`): the model cut at `cuts` into segments
// [0, c1), [c1, c2), ..., [ck, N); segment i runs on device segments[i]
// ("owner" = the data owner whose turn it is). The data owner keeps the
// data, the labels and the loss; segment 0 is always its own.
struct TrainSpec {
  std::vector<int64_t> cuts;             // strictly increasing layer indices
  std::vector<std::string> segments;     // one device name (or "owner") per segment; empty = default
  std::vector<std::string> owners;       // data owners in round-robin order; empty = the first PARTICIPANT
  std::string optimizer = "adam";        // sgd | adam
  double lr = 0.001;
  double momentum = 0.9;                 // sgd
  double weight_decay = 0;
  int epochs = 1;
  int batch_size = 64;
  int64_t train_samples = 0;             // 0 = the whole training split
  int64_t test_samples = 0;              // 0 = the whole test split
  int64_t max_steps = 0;                 // 0 = no limit: stop after this many steps per owner
  int turn_steps = 1;                    // several owners: steps each takes before the next owner's turn
  std::string checkpoint_dir = "results/checkpoints";
  int64_t checkpoint_steps = 0;          // also checkpoint every this many steps (0 = at epoch ends only)
  int threads = 0;                       // LibTorch intra-op threads per agent (0 = its default)
  bool trace_frames = false;             // workers log every frame they receive (tests: what leaves the owner)
  std::string export_path;               // trained model file on the first owner's device ("" = in the checkpoint dir)
};

// A link to emulate between the agents (tc on the path between them).
// Rates in Mbit/s, 0 = not limited; delay, jitter and loss need netem.
struct LinkSpec {
  std::string name;
  double up_mbit = 0;    // PARTICIPANT -> SERVER
  double down_mbit = 0;  // SERVER -> PARTICIPANT
  double delay_ms = 0;   // one way, each direction
  double jitter_ms = 0;
  double loss_pct = 0;
  std::string source;    // where the figures come from
  bool shaped() const { return up_mbit > 0 || down_mbit > 0 || delay_ms > 0 || jitter_ms > 0 || loss_pct > 0; }
};
// The built-in profiles: 3g, lte, wifi, gigabit, wan, unlimited.
const std::vector<LinkSpec>& builtin_links();

// A controller command sent to every PARTICIPANT once it has delivered
// `at_frame` recorded (non-warm-up) frames; the participant applies it at its
// next frame boundary and the event records the frame it took effect at.
struct ScheduledCommand {
  int64_t at_frame = 0;
  std::string op;        // set_split | set_codec | pause | stop
  int split = -1;        // set_split
  std::string codec;     // set_codec (canonical CodecSpec text)
  int64_t pause_ms = 0;  // pause: resumed after this long
};

struct ExperimentConfig {
  std::string source;               // experiment file path ("" when parsed from memory)
  std::string source_text;          // the file as written
  std::string name;                 // default: the file name without extension
  std::string model;                // registry id, e.g. "alexnet" or "torchscript:<path>"
  std::string weights;              // optional weights file
  std::string granularity = "module";  // torchscript: cuts at leaf modules, or "node"
  bool optimize = true;                // torchscript: segments optimized for inference
  std::vector<int64_t> input_size;  // per sample, any rank ([C, H, W], [features], [T, D]); empty = the model's default
  // `input_size` given as a list of sizes: the experiment once per size
  // (after models, before links and codecs), each a run of its own; empty
  // for one size. `input_size` holds the first.
  std::vector<std::vector<int64_t>> input_size_list;
  int64_t num_classes = 0;          // classifier width; 0 = the model's default
  DatasetSpec dataset;
  // The devices after each PARTICIPANT, in the order a frame passes them;
  // empty = the SERVER alone (today's two-tier run, the same as `chain:
  // [<the SERVER's name>]`).
  std::vector<ChainHop> chain;
  SplitSpec split;
  // Per PARTICIPANT (devices-file name): its own split points instead of
  // `split` (#21: participants of one run at different splits, for a joint
  // plan's validation). Participants not named use `split`.
  std::map<std::string, SplitSpec> participant_splits;
  int warmup = 2;
  int repetitions = 5;
  int batch_size = 1;
  std::string compression = "none";  // canonical codec text (CodecSpec::name())
  protocol::CodecSpec codec;         // parsed compression
  // `compression` given as a list: the experiment once per codec (with a list
  // of links, once per link and codec), each a run of its own; empty for one
  // codec. `compression` and `codec` hold the first.
  std::vector<std::string> compression_list;
  // `model` given as a list: the experiment once per model (outermost, before
  // links and codecs), each a run of its own; empty for one model. `model`
  // holds the first.
  std::vector<std::string> model_list;
  bool encryption = true;
  std::string key_exchange = "x25519";  // x25519 | none
  int64_t chunk_bytes = 256 * 1024;
  int inflight = 1;
  int plan_k = 20;  // split: plan: how many of the planner's best placements the run sweeps
  int codec_threads = 1;  // threads coding a frame's parts at each end (0 = one per core)
  int max_consecutive_failures = 3;  // failed frames in a row before the run fails
  int heartbeat_timeout_ms = 5000;   // control-channel silence before an agent is lost / an agent stops
  // A PARTICIPANT that dies or goes silent: "fail" ends the run (every
  // participant), "continue" records it and the others go on.
  std::string on_participant_loss = "continue";  // #46: one participant's loss does not cost the others' rows
  // Every PARTICIPANT starts each split of its sweep together with the
  // others: each waits at the boundary until all have finished the split.
  bool lockstep = false;
  // SERVER batching (#46): requests at the same split and end layer that
  // arrive within max_wait_ms of the first of them run as one tail of up to
  // max frames (their tensors stacked on the batch dimension, the outputs
  // split back per frame). max 1: every frame alone.
  struct ServerBatchSpec {
    int max = 1;
    int max_wait_ms = 0;
  } server_batch;
  RecordSpec record;
  ProbeSpec probe;
  EnergySpec energy;
  AdaptSpec adapt;
  TrainSpec train;
  std::vector<ScheduledCommand> commands;  // in at_frame order
  std::vector<ExitSpec> exits;             // early exits, in backbone order as written (#44)
  ExitPolicy exit_policy;
  // Link profiles to run under, in order (each a run of its own); empty = the
  // link as it is. Names are built-ins or keys of `links`.
  std::vector<std::string> link;
  std::map<std::string, LinkSpec> links;  // user-defined profiles
  std::string link_delay = "tc";          // tc | agent: who applies delay and jitter
  std::string output = "results/tracr.db";
  std::string devices = "config/devices_config.yaml";
  bool devices_explicit = false;  // devices was set (file or env): a missing file is an error
  uint64_t seed = 0;

  // Where each setting (dotted name, e.g. "dataset.type") was set; settings
  // left at their default are absent.
  std::map<std::string, SourcePos> origin;
  SourcePos pos_of(const std::string& setting) const;
};

// Reads and validates an experiment file, then applies TRACR_<NAME>
// environment overrides (each parsed as a YAML scalar or flow value, with the
// same checks), then the command line's `--set key=value` overrides, in
// order (the same per-key text path; origin "--set key=value"; error config
// naming `--set key=value` for an unknown key or a bad value). Relative paths written in the file (devices, output,
// weights, dataset.path, dataset.class_names, a torchscript: model) are
// resolved against the file's directory; those from the environment and the
// defaults stay relative to the current directory. A second YAML document
// in the file is an error at its `---` line. Error io when the file cannot
// be read, config otherwise.
Result<ExperimentConfig> load_experiment(const std::string& path, const std::vector<std::string>& sets = {});
// The same from text held in memory (`source` names it in messages).
// With use_env false, TRACR_* variables are ignored.
Result<ExperimentConfig> parse_experiment(const std::string& text, const std::string& source,
                                          bool use_env = true, const std::vector<std::string>& sets = {});

// The split points to run for a model with `num_layers` layers (split k puts
// layers [0, k) on the PARTICIPANT, so k ranges over 0..num_layers). Error
// config, with the position of `split`, for a point beyond num_layers.
Result<std::vector<int>> resolve_splits(const ExperimentConfig& cfg, int num_layers);

// Cuts given by layer name in `split` and `participant_splits`, resolved
// against the model's layers in order (`layers`, as the controller built
// the model): the cut after layer i is i + 1. Afterwards the entries are
// numbers as if written so (has_names() false). Error config naming the
// key, the entry and the name, with the nearest layer name, for a name the
// model has not; for cuts out of order or entries listed twice once named.
Status resolve_split_names(ExperimentConfig& cfg, const std::vector<std::string>& layers);

// The file exit i's head is read from (and, for head: linear, trained into
// by `tracrctl train`): as written, else <output's directory>/exits/
// <model>.<after>.pt (<model>: the registry id, or a torchscript: file's stem).
std::string exit_head_file(const ExperimentConfig& cfg, size_t i);

// How many devices follow each PARTICIPANT: the chain's length (1 when no
// chain is given: the SERVER).
size_t chain_hops(const ExperimentConfig& cfg);

// The most placements `split: all` sweeps on a chain of two or more devices.
inline constexpr uint64_t kMaxAllPlacements = 1000;

// The placements a split spec (`split`, or a participant_splits entry named
// by `key`) runs on the experiment's chain, for a model of num_layers layers:
// `all` = every placement (on a chain of two or more devices: refused when
// there are more than kMaxAllPlacements, naming the count), `plan` = none
// yet (the planner chooses them when the run starts), else the entries
// as written, each checked against 0..N and for order. Error config with the
// position of `key` and the entry's index.
Result<std::vector<wire::Placement>> resolve_placements(const ExperimentConfig& cfg, const SplitSpec& sp,
                                                       int num_layers, const std::string& key = "split");

// The profile `name` as the experiment defines it (user-defined first, then
// built-ins). Error config naming the unknown profile, with a suggestion,
// at the experiment's `link:` or, when the name came from a command-line
// option, at that `flag` ("--link").
Result<LinkSpec> resolve_link(const ExperimentConfig& cfg, const std::string& name, const std::string& flag = "");

// Checks that files the experiment names exist: weights, dataset.path,
// dataset.class_names (a path). Error io with the key's position.
Status check_experiment_files(const ExperimentConfig& cfg);

// The devices file the experiment uses: load_devices when `devices` was set
// explicitly, load_devices_or_default otherwise. With a `chain` (and roles
// inference) the roles come from it: its devices, of either device_type, are
// the chain (DevicesConfig::chain), its last one the SERVER; the PARTICIPANTs
// are the PARTICIPANT devices outside it (at least one); SERVER devices
// outside it take no part and are left out. Error config at `chain` naming a
// device the file lacks, with the names it has.
Result<DevicesConfig> load_experiment_devices(const ExperimentConfig& cfg, RoleCheck roles = RoleCheck::inference);

// The effective configuration as YAML (every setting, defaults included), as
// stored in runs.config_yaml; parse_experiment accepts it back.
std::string to_yaml(const ExperimentConfig& cfg);

// One row of the settings table.
struct SettingInfo {
  std::string name;  // dotted: "warmup", "dataset.type", "record.frames"
  std::string type;  // "int >= 0", "bool", "codec text", ...
  std::string default_value;
  std::string description;
  std::string env;  // "TRACR_WARMUP", "TRACR_DATASET_TYPE", ...
};
// Every setting of experiment.yaml, in documentation order.
const std::vector<SettingInfo>& settings_table();

struct SettingValue {
  SettingInfo info;
  std::string value;   // effective value as YAML flow text
  std::string origin;  // "default", "file:line:col", "env TRACR_X" or "--set key=value"
};
// The settings table with the effective values of cfg (for --show-config).
std::vector<SettingValue> describe_settings(const ExperimentConfig& cfg);
// describe_settings as an aligned text table.
std::string format_settings(const ExperimentConfig& cfg);

}  // namespace tracr::settings
