// The results schema as data: every table and column with type, unit,
// meaning and who measures it. Frame, layer-profile and hardware columns
// come from wire/record_fields.def; the controller's own columns are listed
// here. `tracrctl results schema` prints it, docs/SCHEMA.md is generated from
// it, and a test checks a fresh database against it column by column.
#include <fmt/format.h>

#include <algorithm>

#include "store/results.hpp"

namespace tracr::store {

namespace {

std::string sql_type(wire::FieldKind k) {
  switch (k) {
    case wire::FieldKind::integer:
    case wire::FieldKind::opt_integer: return "INTEGER";
    case wire::FieldKind::text: return "TEXT";
    case wire::FieldKind::opt_real: return "REAL";
  }
  return "TEXT";
}

void add_fields(TableInfo& t, const std::vector<wire::FieldInfo>& fields) {
  for (const auto& f : fields) t.columns.push_back({f.name, sql_type(f.kind), f.unit, f.side, f.meaning});
}

// The placement column that keys summaries, stage_stats, accuracy and
// energy_stats beside split (migration 19).
ColumnInfo placement_column() {
  return {"placement", "TEXT", "", "participant",
          "the frames' cut points joined by '|' (frames.placement): \"7\" on a two-tier run, \"3|13\" on a chain of "
          "two; several placements of a chain run may share a split (the first cut)"};
}

// Accuracy columns of summaries (per split) and accuracy (per split and codec).
void add_accuracy(TableInfo& t) {
  t.columns.insert(
      t.columns.end(),
      {{"labelled", "INTEGER", "samples", "controller",
        "samples of the ok, non-warm-up frames whose labels the model's classes cover (frames.correct >= 0)"},
       {"top1_correct", "INTEGER", "samples", "participant", "sum of frames.correct: samples whose most probable class was the label"},
       {"top5_correct", "INTEGER", "samples", "participant",
        "sum of frames.top5_correct: samples whose label was among the 5 most probable"},
       {"top1_acc", "REAL", "", "controller", "top1_correct / labelled; NULL when nothing is labelled"},
       {"top5_acc", "REAL", "", "controller",
        "top5_correct / labelled; NULL when nothing is labelled or frames predate top5_correct"}});
}

TableInfo runs_table() {
  TableInfo t{"runs", "one row per `tracrctl run`", {}};
  t.columns = {
      {"id", "INTEGER", "", "controller", "run id"},
      {"name", "TEXT", "", "config", "experiment name"},
      {"status", "TEXT", "", "controller", "running | completed | failed | interrupted"},
      {"started_at", "TEXT", "UTC", "controller", "ISO-8601 UTC, ms, controller's wall clock"},
      {"ended_at", "TEXT", "UTC", "controller", "ISO-8601 UTC, ms; NULL while running"},
      {"config_yaml", "TEXT", "", "config", "the effective experiment configuration (as --show-config)"},
      {"tracr_version", "TEXT", "", "controller", "tracrctl version"},
      {"protocol_version", "INTEGER", "", "controller", "tensor-frame protocol version"},
      {"model", "TEXT", "", "config", "model registry id"},
      {"codec", "TEXT", "", "config", "codec the run started with (frames name the one they used)"},
      {"cipher", "TEXT", "", "config", "aes-256-gcm or none"},
      {"devices_json", "TEXT", "", "config", "devices used (no key material)"},
      {"controller_host", "TEXT", "", "controller", "host name of the controller"},
      {"controller_pid", "INTEGER", "", "controller", "controller process id"},
      {"controller_start", "INTEGER", "ticks", "controller",
       "controller process start time (clock ticks since boot, /proc) to tell a reused pid apart"},
      {"error", "TEXT", "", "controller", "why a failed or interrupted run ended (the first cause, kept as is)"},
      {"link", "TEXT", "", "config", "link profile the run ran under (NULL: the link as it is)"},
      {"shaping", "TEXT", "", "controller", "how the link was emulated: tc qdiscs and where, or none (NULL: none)"},
  };
  return t;
}

TableInfo frames_table() {
  TableInfo t{"frames", "one row per frame (one batch through head, link, tail, post-processing); warm-up frames included with warmup = 1", {}};
  t.columns = {{"id", "INTEGER", "", "controller", "row id"},
               {"run_id", "INTEGER", "", "controller", "-> runs.id"},
               {"participant", "TEXT", "", "controller", "device name of the participant that sent the frame"},
               {"link", "TEXT", "", "config", "link profile in force (the run's)"},
               {"shaping", "TEXT", "", "controller", "how that link was emulated (tc ..., or NULL: not emulated)"}};
  add_fields(t, wire::frame_fields());
  t.columns.push_back({"legacy_transfer_ns", "INTEGER", "ns", "participant",
                       "rows written before schema 3 only: round trip minus every stage, clamped at 0 (not comparable "
                       "with network_ns); NULL for newer rows"});
  return t;
}

// Profiles reused across runs (#45 friction 2, migration 25).
void add_reuse_columns(TableInfo& t) {
  t.columns.push_back({"profile_key", "TEXT", "", "agent",
                       "hash of what times a profile: model fingerprint, layers, input shape, batch, compute device, "
                       "execution, threads, repetitions and hardware identity (hw_id); a later run whose agent "
                       "computes the same key reuses the rows instead of profiling again (tracrctl run --reprofile "
                       "does not); NULL in rows of older agents"});
  t.columns.push_back({"measured_run", "INTEGER", "", "controller",
                       "the run whose agent timed this row: this run's id, or the earlier run a reused row was "
                       "copied from; NULL in rows stored before reuse existed (timed by this run)"});
}

TableInfo layer_profiles_table() {
  TableInfo t{"layer_profiles",
              "one row per (run, device, layer); reusable across runs by (model_fp, input_shape, batch, device_kind, hw_id)",
              {}};
  t.columns = {{"run_id", "INTEGER", "", "controller", "-> runs.id"},
               {"device", "TEXT", "", "controller", "device name"},
               {"device_role", "TEXT", "", "controller", "SERVER or PARTICIPANT"}};
  add_fields(t, wire::profile_fields());
  add_reuse_columns(t);
  return t;
}

TableInfo segment_profiles_table() {
  TableInfo t{"segment_profiles",
              "one row per (run, device, side, split) of a graph model: the head [0,k) timed whole on the "
              "PARTICIPANT, the tail [k,N) on the SERVER, as its frames run them (fused and optimised segments "
              "cost less than their layers timed one by one); the planner prefers them to layer sums",
              {}};
  t.columns = {{"run_id", "INTEGER", "", "controller", "-> runs.id"},
               {"device", "TEXT", "", "controller", "device name"},
               {"device_role", "TEXT", "", "controller", "SERVER or PARTICIPANT"}};
  add_fields(t, wire::segment_fields());
  add_reuse_columns(t);
  return t;
}

TableInfo devices_table() {
  TableInfo t{"devices", "hardware identity of every device in a run (reported by its agent at READY)", {}};
  t.columns = {{"run_id", "INTEGER", "", "controller", "-> runs.id"},
               {"device", "TEXT", "", "controller", "device name"},
               {"role", "TEXT", "", "controller", "SERVER or PARTICIPANT"}};
  add_fields(t, wire::hw_fields());
  return t;
}

TableInfo probes_table() {
  TableInfo t{"probes", "one row per link probe between a participant and its server, or on a chain a device and the next (RTT, throughput both ways)", {}};
  t.columns = {{"id", "INTEGER", "", "controller", "row id"},
               {"run_id", "INTEGER", "", "controller", "-> runs.id"},
               {"participant", "TEXT", "", "controller", "device name of the device that probed: the PARTICIPANT (its hop to the first device), or on a chain a device probing its hop to the next one (#43)"},
               {"link", "TEXT", "", "config", "link profile in force (the run's)"},
               {"shaping", "TEXT", "", "controller", "how that link was emulated (tc ..., or NULL: not emulated)"}};
  add_fields(t, wire::probe_fields());
  return t;
}

TableInfo summaries_table() {
  TableInfo t{"summaries", "one row per (run, placement), computed from frames when a run ends (or on demand)", {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"split", "INTEGER", "", "controller", "split point (a chain's first cut)"},
      {"frames", "INTEGER", "", "controller", "ok, non-warm-up frames the statistics cover"},
      {"failed", "INTEGER", "", "controller", "non-warm-up frames with ok = 0"},
      {"warmup_frames", "INTEGER", "", "controller", "stored warm-up frames (left out of the statistics)"},
      {"flagged", "INTEGER", "", "controller", "frames whose flags are set (e.g. negative_network); kept in the statistics"},
      {"slow_frames", "INTEGER", "", "controller", "frames slower than 10x the split's median total (each also a slow_frame event)"},
      {"throughput_fps", "REAL", "frames/s", "controller",
       "frames / (last end_ns - first start_ns) per participant, summed over participants"},
      {"mean_raw_bytes", "REAL", "bytes", "controller", "mean raw_bytes"},
      {"mean_wire_bytes", "REAL", "bytes", "controller", "mean wire_bytes"},
      {"mean_reply_bytes", "REAL", "bytes", "controller", "mean reply_bytes"},
  };
  add_accuracy(t);
  t.columns.push_back(placement_column());
  return t;
}

TableInfo accuracy_table() {
  TableInfo t{"accuracy",
              "per (run, placement, codec): top-1 and top-5 accuracy of the timed frames with labels, so a lossy "
              "codec's cost shows beside the lossless one's",
              {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"split", "INTEGER", "", "controller", "split point"},
      {"codec", "TEXT", "", "participant", "codec of the frames (frames.codec)"},
  };
  add_accuracy(t);
  t.columns.push_back(placement_column());
  return t;
}

TableInfo frame_topk_table() {
  TableInfo t{"frame_topk",
              "per (run, participant, frame, sample position, rank): the participant's k most probable classes "
              "of every sample (k = 5, fewer when the model has fewer classes), from the softmax of the model's "
              "output",
              {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"participant", "TEXT", "", "controller", "-> frames.participant"},
      {"frame", "INTEGER", "", "participant", "-> frames.frame"},
      {"pos", "INTEGER", "", "participant", "sample's position in the frame (0-based)"},
      {"sample", "INTEGER", "", "participant", "dataset index of the sample (frames.sample + pos)"},
      {"rank", "INTEGER", "", "participant", "1 = most probable"},
      {"class_index", "INTEGER", "", "participant", "class index in the model's output"},
      {"class_name", "TEXT", "", "participant",
       "the dataset's class name when it has as many classes as the model, else the ImageNet name for a "
       "1000-class model (experiments/imagenet_classes.txt), else ''"},
      {"prob", "REAL", "", "participant", "softmax probability (float32, computed on the participant)"},
  };
  return t;
}

TableInfo frame_hops_table() {
  TableInfo t{"frame_hops",
              "per (run, participant, frame, hop) of a chain's frame: each device after the participant, its segment, "
              "the bytes into and out of it and every stage timed on the device that ran it (identities in "
              "wire/record_fields.def: the hops add up to frames.total_ns)",
              {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"participant", "TEXT", "", "controller", "-> frames.participant"},
      {"frame", "INTEGER", "", "participant", "-> frames.frame"},
      {"device", "TEXT", "", "controller", "the chain's device h (chain: in the experiment)"},
      {"codec", "TEXT", "", "config", "codec of the request into the device: its chain entry's compression, else the "
                                      "run's (hop 1: frames.codec)"},
  };
  add_fields(t, wire::hop_fields());
  return t;
}

TableInfo model_layers_table() {
  TableInfo t{"model_layers",
              "per (run, layer): the model's layers by name as the controller built it before the run, whether or "
              "not record.layers profiled them (split k cuts after layer k-1)",
              {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"layer_index", "INTEGER", "", "controller", "0-based layer index (as layer_profiles.layer_index)"},
      {"name", "TEXT", "", "controller", "the layer's name (a zoo model's module, a graph model's node)"},
  };
  return t;
}

TableInfo outputs_table() {
  TableInfo t{"outputs",
              "per (run, participant, split, codec, output tensor) with record.outputs: a .npy file of that "
              "output tensor (a classifier's logits; each of a graph model's tuple or dict outputs) over the timed "
              "ok frames, in its own shape",
              {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"participant", "TEXT", "", "controller", "participant whose frames they are"},
      {"split", "INTEGER", "", "participant", "split point"},
      {"codec", "TEXT", "", "participant", "codec of the frames"},
      {"path", "TEXT", "", "controller",
       "the .npy file, relative to the database's directory (outputs/<database file name>/run<ID>/<participant>_split<k>_<codec>.npy, with _<output> before .npy when the model has several outputs; outputs/run<ID>/... for runs recorded before 2026-12-03)"},
      {"dtype", "TEXT", "", "controller", "numpy dtype of the file (<f4: little-endian float32)"},
      {"shape", "TEXT", "", "controller",
       "rows,d1,d2,..: one row per sample, then the output's own shape per sample (rows,classes for logits; runs "
       "recorded before 2026-12-06 stored every output of a sample flattened into one row)"},
      {"frames", "INTEGER", "", "controller", "frames in the file"},
      {"first_frame", "INTEGER", "", "participant", "first frames.frame in the file"},
      {"last_frame", "INTEGER", "", "participant",
       "last frames.frame; rows follow the frames in frame order, each frame's samples in batch order"},
      {"sha256", "TEXT", "", "controller", "SHA-256 of the file (hex)"},
      {"source", "TEXT", "", "controller",
       "where the numbers come from: the participant's copy of the model's output after the reply was decoded, "
       "sent as float32 on its FRAME line"},
      {"output", "TEXT", "", "participant",
       "the output tensor's name in the model (a zoo model's output, a graph model's output or dict key); '' "
       "for runs recorded before 2026-12-06"},
  };
  return t;
}

TableInfo stage_stats_table() {
  TableInfo t{"stage_stats", "per (run, placement, field): statistics of every summarised frame field", {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"split", "INTEGER", "", "controller", "split point"},
      {"field", "TEXT", "", "controller", "frames column (a field with summarise = 1 in record_fields.def)"},
      {"median_ns", "REAL", "ns", "controller", "exact median over ok, non-warm-up frames"},
      {"p95_ns", "REAL", "ns", "controller", "nearest-rank 95th percentile"},
      {"mean_ns", "REAL", "ns", "controller", "mean"},
      {"min_ns", "REAL", "ns", "controller", "minimum (negative network_ns stays negative)"},
      {"max_ns", "REAL", "ns", "controller", "maximum"},
      placement_column(),
  };
  return t;
}

TableInfo energy_table() {
  TableInfo t{"energy",
              "one row per energy figure: a frame's head, whole frame, server tail or transmission, a profiled "
              "layer, or an agent's idle baseline; each names its source (measured:<meter> or modelled:<model>)",
              {}};
  t.columns = {{"id", "INTEGER", "", "controller", "row id"},
               {"run_id", "INTEGER", "", "controller", "-> runs.id"},
               {"device", "TEXT", "", "controller", "device whose energy it is (the SERVER's name for side = server)"},
               {"participant", "TEXT", "", "controller", "participant whose frame it was (NULL for a server's idle and layer rows)"}};
  add_fields(t, wire::energy_fields());
  return t;
}

TableInfo energy_stats_table() {
  TableInfo t{"energy_stats", "per (run, placement, device, stage, source): statistics of the timed frames' energy",
              {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"split", "INTEGER", "", "controller", "split point"},
      {"device", "TEXT", "", "controller", "device whose energy it is"},
      {"stage", "TEXT", "", "controller", "head, frame, tail or transmit"},
      {"source", "TEXT", "", "controller", "measured:<meter> or modelled:<model>: never shown without it"},
      {"n", "INTEGER", "", "controller", "rows (non-warm-up frames)"},
      {"median_j", "REAL", "J", "controller", "median gross joules per frame"},
      {"p95_j", "REAL", "J", "controller", "nearest-rank 95th percentile of gross joules"},
      {"median_net_j", "REAL", "J", "controller", "median net joules (idle subtracted); NULL without an idle figure"},
      {"p95_net_j", "REAL", "J", "controller", "95th percentile of net joules"},
      placement_column(),
  };
  return t;
}

TableInfo plans_table() {
  TableInfo t{"plans", "one row per `tracrctl plan`: the basis run, the link and objective, the chosen split and, "
                       "with --validate [RUN], how far predictions were from that run's measurements", {}};
  t.columns = {
      {"id", "INTEGER", "", "controller", "row id"},
      {"created_at", "TEXT", "UTC", "controller", "when the plan was made"},
      {"basis_run", "INTEGER", "", "controller", "-> runs.id: the run whose layer profiles, bytes and probe were used"},
      {"model", "TEXT", "", "controller", "model id"},
      {"input_shape", "TEXT", "", "agent",
       "profiled input shape per sample, comma-separated: C,H,W for images, any rank (4; T,D) otherwise"},
      {"objective", "TEXT", "", "controller", "latency | energy | throughput | weighted:W"},
      {"link", "TEXT", "", "controller", "link planned for: a profile name, probe, or given"},
      {"link_source", "TEXT", "", "controller", "where the link figures come from"},
      {"up_mbps", "REAL", "Mbit/s", "controller", "participant -> server rate used"},
      {"down_mbps", "REAL", "Mbit/s", "controller", "server -> participant rate used"},
      {"rtt_ms", "REAL", "ms", "controller", "round trip used (the probe's smallest, plus 2 x a profile's delay)"},
      {"overhead", "TEXT", "", "controller", "the per-frame processing term and how it was fitted"},
      {"energy_source", "TEXT", "", "controller",
       "label of the predicted energy (modelled:plan(<layer energy source>, radio-...)); NULL: no energy predicted"},
      {"chosen", "INTEGER", "", "controller", "chosen split (NULL: none meets the constraints)"},
      {"chosen_codec", "TEXT", "", "controller", "codec of the chosen split"},
      {"mape_pct", "REAL", "%", "controller",
       "validation: mean absolute percentage error of predicted latency over the measured splits"},
      {"measured_best", "INTEGER", "", "controller", "validation: the split with the lowest measured median total"},
      {"miss_pct", "REAL", "%", "controller",
       "validation: chosen split's measured median over the measured best's, minus 100 (0: it is the best)"},
      {"validation_run", "INTEGER", "", "controller",
       "-> runs.id: the run the plan was validated against (basis_run, or another run of the same model: held out); "
       "NULL: not validated"},
      {"participants", "INTEGER", "", "controller",
       "participants planned as sharing the SERVER (the basis run's count, --participants, or the held-out run's); "
       "NULL in plans stored before schema 13 (one)"},
      {"server_model", "TEXT", "", "controller",
       "how the shared SERVER was modelled (modelled:mva-bound(...): a closed network with a FIFO server, its wait "
       "between the constant-times bound and mean value analysis by how much the basis run's frames vary; "
       "modelled:mva(...) before it: mean value analysis alone); NULL: one participant, not shared"},
      {"participant_run", "INTEGER", "", "controller",
       "the run whose PARTICIPANT layer and head profiles (and layer energy) the plan used (plan --participant-from: "
       "another device); NULL: the basis run's"},
      {"head_vs_frames_pct", "REAL", "%", "controller",
       "validation: the median over the measured splits of (head_ms - the validation run's median head_ns) / that x "
       "100: how far the PARTICIPANT's profiles were from its frames' compute; NULL: not validated or no head timed"},
      {"tail_vs_frames_pct", "REAL", "%", "controller",
       "validation: the same for the SERVER's tail (tail_ms against the frames' median tail_ns)"},
      // Plans of chains (#43, migration 26): their rows are in plan_placements and plan_segments.
      {"chain", "TEXT", "", "controller",
       "a plan over placements: its devices in order, the PARTICIPANT first ('phone -> edge -> cloud'); link_source "
       "then holds how each hop's terms were fitted ('; '), chosen / measured_best are NULL and the placement "
       "columns below say them; NULL: a two-tier plan (plan_rows)"},
      {"placements", "INTEGER", "", "controller",
       "placements predicted; plan_placements holds every one up to 20,000, else the chosen, the measured, and the "
       "2,000 lowest predicted latencies"},
      {"chosen_placement", "TEXT", "", "controller",
       "the chosen placement, cut points joined by '|' (the lowest predicted latency within the memory limits)"},
      {"measured_best_placement", "TEXT", "", "controller",
       "validation: the placement with the lowest measured median total"},
      {"validation_runs", "TEXT", "", "controller",
       "the runs a chain plan was checked on, comma-separated (measured_ms is the median over their medians); the "
       "basis run alone when it was checked on its own frames"},
      {"memory_limits", "TEXT", "", "controller",
       "the devices' memory_mb the plan kept to and where each came from; NULL: no limit set"},
  };
  return t;
}

TableInfo plan_placements_table() {
  TableInfo t{"plan_placements", "per (chain plan, placement): the predicted latency and, where measured, the measurement",
              {}};
  t.columns = {
      {"plan_id", "INTEGER", "", "controller", "-> plans.id"},
      {"placement", "TEXT", "", "controller", "cut points joined by '|' (frames.placement)"},
      {"head_ms", "REAL", "ms", "controller", "the PARTICIPANT's head [0, k1): its profiled layer means"},
      {"post_ms", "REAL", "ms", "controller", "the PARTICIPANT's post-processing + queue (a run's medians; 0 for split: plan)"},
      {"latency_ms", "REAL", "ms", "controller",
       "head + the sum over the hops of link + compute + own (plan_segments) + post"},
      {"fps", "REAL", "frames/s", "controller",
       "pipelined throughput: 1 / the slowest stage (head, a hop's link, a device's compute + own)"},
      {"bytes_from", "TEXT", "", "controller",
       "per hop, ',': measured (the run's median at that cut and hop) or profiled x ratio"},
      {"fits", "INTEGER", "", "controller", "1 = every device's need is within its memory_mb (or none is set)"},
      {"measured_ms", "REAL", "ms", "controller", "validation: the median total at this placement (plans.validation_runs)"},
      {"error_pct", "REAL", "%", "controller", "validation: (predicted - measured) / measured x 100"},
      {"energy_j", "REAL", "J", "controller",
       "the PARTICIPANT's energy per frame: layer energy [0, k1) + idle power x (latency - head) + hop 1's radio model "
       "(plans.energy_source); NULL: no per-layer energy for it"},
  };
  return t;
}

TableInfo plan_segments_table() {
  TableInfo t{"plan_segments",
              "per (chain plan, placement, device): the segment that device runs and the terms predicted for it", {}};
  t.columns = {
      {"plan_id", "INTEGER", "", "controller", "-> plans.id"},
      {"placement", "TEXT", "", "controller", "-> plan_placements.placement"},
      {"position", "INTEGER", "", "controller", "the device's place in the chain: 0 the PARTICIPANT, h the device hop h reaches"},
      {"device", "TEXT", "", "controller", "device name"},
      {"first_layer", "INTEGER", "", "controller", "first layer it runs"},
      {"end_layer", "INTEGER", "", "controller", "one past the last (first_layer = end_layer: it runs none)"},
      {"link_ms", "REAL", "ms", "controller",
       "hop into this device: encode + network + reply decode as fitted (plans.link_source); NULL at position 0"},
      {"compute_ms", "REAL", "ms", "controller", "its layers' profiled means (scaled to a chain run's frames where it had them)"},
      {"own_ms", "REAL", "ms", "controller", "its other per-frame work (decode, reply encode) as fitted; NULL at position 0"},
      {"wire_bytes", "REAL", "bytes", "controller", "the request into this device on the wire; NULL at position 0"},
      {"memory_mb", "REAL", "MB", "controller",
       "its need: its layers' weights (params x 4 B) + its largest live activations; NULL when no device set memory_mb"},
  };
  return t;
}

TableInfo plan_rows_table() {
  TableInfo t{"plan_rows", "per (plan, split): the prediction and, when validated, the measurement", {}};
  t.columns = {
      {"plan_id", "INTEGER", "", "controller", "-> plans.id"},
      {"split", "INTEGER", "", "controller", "split point"},
      {"codec", "TEXT", "", "controller", "codec planned (the basis run's, or one asked for with --codecs)"},
      {"head_ms", "REAL", "ms", "controller", "the participant's head [0,k): its segment profile's mean, else the sum of its layer profiles' means (compute_from)"},
      {"up_ms", "REAL", "ms", "controller", "wire_bytes x 8 / up rate"},
      {"rtt_ms", "REAL", "ms", "controller", "round trip"},
      {"tail_ms", "REAL", "ms", "controller", "the server's tail [k,N): its segment profile's mean, else the sum of its layer profiles' means (compute_from)"},
      {"down_ms", "REAL", "ms", "controller", "reply_bytes x 8 / down rate"},
      {"other_ms", "REAL", "ms", "controller", "per-frame processing outside layers and link: at a split the basis run measured, its medians of encode, return, post and server-overhead (with plan --participant-from, the calibration runs' participant share and the basis's server share); elsewhere a + b x wire_bytes fitted to them (plans.overhead)"},
      {"latency_ms", "REAL", "ms", "controller", "head + up + rtt + tail + down + other (+ queue_ms when the SERVER is shared)"},
      {"fps", "REAL", "frames/s", "controller", "pipelined throughput: 1 / max(head, up, tail + rtt, down)"},
      {"wire_bytes", "REAL", "bytes", "controller", "request bytes on the wire"},
      {"reply_bytes", "REAL", "bytes", "controller", "reply bytes on the wire"},
      {"bytes_from", "TEXT", "", "controller", "measured (the basis run's mean at this split) or profiled x ratio (layer output bytes x the codec's measured ratio)"},
      {"energy_j", "REAL", "J", "controller", "participant energy per frame: layer energy [0,k) + idle power while waiting + radio model"},
      {"feasible", "INTEGER", "", "controller", "1 = meets the latency and energy bounds"},
      {"measured_ms", "REAL", "ms", "controller", "validation: the basis run's median total at this split"},
      {"compute_from", "TEXT", "", "controller", "where head_ms / tail_ms came from: segments (both timed whole), layers (both sums of layer profiles), or head segment, tail layers (and the reverse); NULL in plans stored before schema 12"},
      {"error_pct", "REAL", "%", "controller", "validation: (predicted - measured) / measured x 100"},
      {"queue_ms", "REAL", "ms", "controller", "predicted wait for a SERVER shared by plans.participants (inside latency_ms); 0 with one participant; NULL in plans stored before schema 13"},
  };
  return t;
}

TableInfo plan_assignments_table() {
  TableInfo t{"plan_assignments",
              "per (joint plan, split): how many of the participants sharing the SERVER cut there (plan --joint) and "
              "what each is predicted, and measured when validated on a run whose participants each ran one split",
              {}};
  t.columns = {
      {"plan_id", "INTEGER", "", "controller", "-> plans.id"},
      {"split", "INTEGER", "", "controller", "split point"},
      {"codec", "TEXT", "", "controller", "codec"},
      {"participants", "INTEGER", "", "controller", "participants at this split"},
      {"latency_ms", "REAL", "ms", "controller",
       "predicted latency of each (multi-class mean value analysis: plans.server_model's terms, one class per split)"},
      {"queue_ms", "REAL", "ms", "controller", "predicted wait for the SERVER, inside latency_ms"},
      {"fps", "REAL", "frames/s", "controller", "predicted frames/s of each, one frame in flight"},
      {"measured_ms", "REAL", "ms", "controller",
       "validation: the median total of the frames at this split (plans.validation_run); NULL: not validated"},
      {"error_pct", "REAL", "%", "controller", "validation: (predicted - measured) / measured x 100"},
      {"model", "TEXT", "", "controller",
       "how the queue was solved: modelled:mva-exact(...) or modelled:mva-schweitzer(...) (multi-class mean value "
       "analysis); modelled:mva-bound-exact(1 class, ...) for one class, plans.server_model's model"},
  };
  return t;
}

TableInfo train_runs_table() {
  TableInfo t{"train_runs", "one row per `tracrctl train` run: its checkpoint tag, what it resumed, the optimizer", {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"tag", "TEXT", "", "controller",
       "checkpoint directory name on every device (<train.checkpoint_dir>/<tag>/); a resumed run keeps its origin's"},
      {"resumed_from", "INTEGER", "", "controller", "run whose checkpoints this run continued (NULL: a fresh start)"},
      {"resume_step", "INTEGER", "steps", "controller", "the checkpoint step it continued from"},
      {"cuts", "TEXT", "", "config", "train.cuts"},
      {"optimizer", "TEXT", "", "config", "train.optimizer"},
      {"lr", "REAL", "", "config", "train.lr"},
      {"batch_size", "INTEGER", "samples", "config", "train.batch_size"},
      {"epochs", "INTEGER", "", "config", "train.epochs"},
      {"owners", "INTEGER", "", "config", "data owners"},
      {"export_path", "TEXT", "", "owner",
       "the trained model (state dict by layer name, torch.save format) on the first owner's device"},
  };
  return t;
}

TableInfo train_segments_table() {
  TableInfo t{"train_segments", "per segment of a training run: its layers and its device", {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"segment", "INTEGER", "", "config", "segment index (0 = the data owner's first)"},
      {"first_layer", "INTEGER", "", "config", "first layer of the segment"},
      {"end_layer", "INTEGER", "", "config", "one past its last layer"},
      {"device", "TEXT", "", "config", "device holding it (owner = the data owner(s))"},
      {"params", "INTEGER", "", "controller", "trainable parameters of its layers"},
  };
  return t;
}

TableInfo train_steps_table() {
  TableInfo t{"train_steps", "one row per training step (one batch forward through every segment, loss on the owner, gradients back)", {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"owner", "INTEGER", "", "owner", "data owner index"},
      {"step", "INTEGER", "", "owner", "steps this owner has done, this one included (1-based)"},
      {"epoch", "INTEGER", "", "owner", "epoch (0-based)"},
      {"batch", "INTEGER", "samples", "owner", "samples in the batch"},
      {"loss", "REAL", "", "owner", "cross-entropy of the batch (mean), computed on the owner before the update"},
      {"correct", "INTEGER", "samples", "owner", "top-1 hits in the batch before the update"},
      {"step_ns", "INTEGER", "ns", "owner", "whole step, owner's steady clock"},
      {"fwd_ns", "INTEGER", "ns", "owner", "forward through every segment, owner's steady clock"},
      {"bwd_ns", "INTEGER", "ns", "owner", "loss, backward through every segment and the updates, owner's steady clock"},
      {"remote_ns", "INTEGER", "ns", "owner", "time the owner waited on workers (request written to reply decoded)"},
      {"srv_ns", "INTEGER", "ns", "workers", "the workers' own time for this step's frames (their steady clocks, as reported in meta srv_ns)"},
      {"up_bytes", "INTEGER", "bytes", "owner", "bytes the owner sent on the wire (activations forward, gradients back)"},
      {"down_bytes", "INTEGER", "bytes", "owner", "bytes the owner received on the wire"},
      {"up_raw", "INTEGER", "bytes", "owner", "tensor bytes it sent before codec and cipher"},
      {"down_raw", "INTEGER", "bytes", "owner", "tensor bytes it received after decoding"},
  };
  return t;
}

TableInfo train_epochs_table() {
  TableInfo t{"train_epochs", "per (owner, epoch): training loss and accuracy, then the test evaluation", {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"owner", "INTEGER", "", "owner", "data owner index"},
      {"epoch", "INTEGER", "", "owner", "epoch (0-based); a run stopped by train.max_steps ends a partial one"},
      {"step", "INTEGER", "", "owner", "steps done at the evaluation"},
      {"train_loss", "REAL", "", "owner", "mean loss of the epoch's steps (sample-weighted)"},
      {"train_acc", "REAL", "", "owner", "top-1 accuracy over the epoch's batches, each before its update"},
      {"test_loss", "REAL", "", "owner", "mean cross-entropy on the test samples after the epoch"},
      {"test_acc", "REAL", "", "owner", "top-1 accuracy on the test samples"},
      {"test_top5", "REAL", "", "owner", "top-5 accuracy on the test samples"},
      {"test_n", "INTEGER", "samples", "owner", "test samples evaluated"},
      {"test_source", "TEXT", "", "owner", "what was evaluated: the test split, or the training data when the dataset has none"},
      {"epoch_ns", "INTEGER", "ns", "owner", "training time of the epoch, owner's steady clock"},
      {"eval_ns", "INTEGER", "ns", "owner", "evaluation time, owner's steady clock"},
      {"up_bytes", "INTEGER", "bytes", "owner", "bytes sent on the wire during the epoch's training steps"},
      {"down_bytes", "INTEGER", "bytes", "owner", "bytes received on the wire during them"},
  };
  return t;
}

TableInfo train_checkpoints_table() {
  TableInfo t{"train_checkpoints", "checkpoints every device confirmed (resume points for tracrctl train --resume)", {}};
  t.columns = {
      {"run_id", "INTEGER", "", "controller", "-> runs.id"},
      {"owner", "INTEGER", "", "owner", "data owner index"},
      {"step", "INTEGER", "", "owner", "steps done when saved"},
      {"epoch", "INTEGER", "", "owner", "epoch it was saved in (or at the end of)"},
      {"dir", "TEXT", "", "owner", "checkpoint directory on each device"},
      {"at", "TEXT", "UTC", "controller", "ISO-8601 UTC, ms, when the controller recorded it"},
  };
  return t;
}

TableInfo events_table() {
  TableInfo t{"events", "structured events: agents started and lost, commands applied, pauses, slow frames, run finished", {}};
  t.columns = {
      {"id", "INTEGER", "", "controller", "row id"},
      {"run_id", "INTEGER", "", "controller", "-> runs.id (NULL outside a run)"},
      {"ts", "TEXT", "UTC", "controller", "ISO-8601 UTC, ms, when the controller recorded it"},
      {"level", "TEXT", "", "controller", "debug | info | warn | error"},
      {"kind", "TEXT", "", "controller",
       "run_started, agent_started, agent_ready, command_sent, command_applied, command_rejected, paused, resumed, "
       "stopped, slow_frame, agent_log, run_failed, run_finished, run_interrupted, ..."},
      {"message", "TEXT", "", "controller", "human-readable detail"},
      {"device", "TEXT", "", "controller", "device the event concerns (NULL when none)"},
      {"frame", "INTEGER", "", "agent", "frame position on that device: the frame number the event precedes or concerns"},
  };
  return t;
}

TableInfo schema_migrations_table() {
  TableInfo t{"schema_migrations", "applied schema migrations", {}};
  t.columns = {{"version", "INTEGER", "", "controller", "migration number"},
               {"name", "TEXT", "", "controller", "what it changed"},
               {"applied_at", "TEXT", "UTC", "controller", "when"}};
  return t;
}

std::vector<TableInfo> build() {
  return {runs_table(),
          frames_table(),
          layer_profiles_table(),
          model_layers_table(),
          segment_profiles_table(),
          devices_table(),
          probes_table(),
          summaries_table(),
          accuracy_table(),
          frame_topk_table(),
          outputs_table(),
          stage_stats_table(),
          frame_hops_table(),
          energy_table(),
          energy_stats_table(),
          plans_table(),
          plan_rows_table(),
          plan_assignments_table(),
          plan_placements_table(),
          plan_segments_table(),
          train_runs_table(),
          train_segments_table(),
          train_steps_table(),
          train_epochs_table(),
          train_checkpoints_table(),
          events_table(),
          schema_migrations_table()};
}

}  // namespace

const std::vector<TableInfo>& schema_tables() {
  static const std::vector<TableInfo> v = build();
  return v;
}

size_t column_of(const std::string& table, const std::string& column) {
  for (const auto& t : schema_tables())
    if (t.name == table)
      for (size_t i = 0; i < t.columns.size(); ++i)
        if (t.columns[i].name == column) return i;
  throw Fatal(make_error(Errc::internal, "the results schema has no column " + table + "." + column));
}

std::string format_schema_text() {
  std::string o;
  for (const auto& t : schema_tables()) {
    o += fmt::format("{}: {}\n", t.name, t.meaning);
    size_t w[4] = {0, 0, 0, 0};
    for (const auto& c : t.columns) {
      w[0] = std::max(w[0], c.name.size());
      w[1] = std::max(w[1], c.type.size());
      w[2] = std::max(w[2], c.unit.size());
      w[3] = std::max(w[3], c.side.size());
    }
    for (const auto& c : t.columns)
      o += fmt::format("  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", c.name, w[0], c.type, w[1], c.unit.empty() ? "-" : c.unit,
                       std::max<size_t>(w[2], 1), c.side, w[3], c.meaning);
    o += "\n";
  }
  return o;
}

std::string format_schema_markdown() {
  std::string o =
      "# Results database schema\n\n"
      "Generated by `tracrctl results schema --markdown` from the field table (wire/record_fields.def) and\n"
      "store/schema.cpp; a test keeps this file and the database in step with them.\n"
      "`side` says who measures or sets the value.\n\n";
  for (const auto& t : schema_tables()) {
    o += fmt::format("## {}\n\n{}\n\n| column | type | unit | side | meaning |\n|---|---|---|---|---|\n", t.name, t.meaning);
    for (const auto& c : t.columns) {
      std::string m = c.meaning;
      for (size_t i = 0; (i = m.find('|', i)) != std::string::npos; i += 2) m.replace(i, 1, "\\|");
      o += fmt::format("| `{}` | {} | {} | {} | {} |\n", c.name, c.type, c.unit.empty() ? "" : c.unit, c.side, m);
    }
    o += "\n";
  }
  return o;
}

}  // namespace tracr::store
