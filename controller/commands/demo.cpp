#include "controller/commands/demo.hpp"
#include "core/log.hpp"
#include "core/user_error.hpp"

#include "fleet/launcher.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "wire/control.hpp"
#include "fleet/process.hpp"
#include "protocol/channel.hpp"
#include "protocol/meta_keys.hpp"
#include "protocol/stats.hpp"

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::fleet;

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

using namespace tracr::protocol;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

struct Percentiles {
  double median = 0, p95 = 0;
};
Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.median = protocol::median_of(v);
  p.p95 = protocol::p95_of(v);
  return p;
}

// Post-ReLU float32 activations: N(0,1) with negatives set to zero.
Tensor make_activations(size_t bytes, uint32_t seed) {
  const int64_t n = static_cast<int64_t>(bytes / 4);
  // Real layer shapes where the size is one of the reference activations.
  std::vector<int64_t> shape = {1, n};
  if (bytes == 36864) shape = {1, 256, 6, 6};           // AlexNet pool5
  else if (bytes == 774400) shape = {1, 64, 55, 55};    // AlexNet conv1
  else if (bytes == 3211264) shape = {1, 64, 112, 112}; // ResNet stem
  Tensor t = Tensor::allocate("act", DType::float32, shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto* f = reinterpret_cast<float*>(t.mutable_data());
  for (int64_t i = 0; i < n; ++i) f[i] = std::max(0.f, nd(rng));
  return t;
}

struct Agent {
  std::unique_ptr<AgentConn> conn;
  std::string endpoint, raw_endpoint;
};

// An echo SERVER agent on loopback with a raw ZeroMQ socket beside it.
Result<Agent> start_agent(const std::string& path, bool encrypt, const std::vector<uint8_t>& secret) {
  static const DeviceConfig local = local_device("local");
  LaunchSpec ls;
  ls.device = &local;
  ls.role = wire::AgentRole::server;
  ls.args = {"--bind", "tcp://127.0.0.1:0", "--raw-bind", "tcp://127.0.0.1:0"};
  if (!encrypt) ls.args.push_back("--no-encrypt");
  ls.agent_path = path;
  // The secret also keys the control lines of an agent whose frames are plain.
  ls.secret = secret;
  auto conn = launch_agent(ls);
  if (!conn) return std::move(conn.error());
  auto ready = (*conn)->wait_ready(10000);
  if (!ready) return std::move(ready.error());
  Agent a;
  a.conn = std::move(*conn);
  a.endpoint = ready->get_or("endpoint", "");
  a.raw_endpoint = ready->get_or("raw", "");
  return a;
}

struct Row {
  size_t bytes = 0;
  std::string config;
  Percentiles rtt;
  double raw_rtt = 0;
  uint64_t wire = 0;
  double stream_mbs = 0, raw_stream_mbs = 0;
  double max_err = 0;
  double enc_us = 0;  // participant: frame encode (codec, cipher, hand-off), median
  double srv_us = 0;  // server: frame decode (verify, decrypt, decompress), median
  std::string check;
};

// Raw ZeroMQ: DEALER sends `n` bytes (copied into a message, as a frame's
// bytes would be), ROUTER answers 8 bytes.
std::pair<double, double> raw_zmq(zmq::context_t& ctx, const std::string& ep, const Tensor& t,
                                  const DemoOptions& o) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 10000);  // a dead agent ends the demo instead of hanging it
  s.connect(ep);
  auto recv_ack = [&] {
    zmq::message_t ack;
    if (!s.recv(ack)) throw Fatal(make_error(Errc::timeout, "raw ZeroMQ baseline: no ack within 10 s"));
  };
  auto once = [&] {
    s.send(zmq::message_t(t.data, t.nbytes), zmq::send_flags::none);
    recv_ack();
  };
  for (int i = 0; i < o.warmup; ++i) once();
  std::vector<double> v;
  for (int i = 0; i < o.reps; ++i) {
    auto t0 = Clock::now();
    once();
    v.push_back(us_since(t0));
  }
  // Stream with the same window as the framed run.
  auto t0 = Clock::now();
  int sent = 0, got = 0;
  while (got < o.stream_frames) {
    while (sent < o.stream_frames && sent - got < o.window) {
      s.send(zmq::message_t(t.data, t.nbytes), zmq::send_flags::none);
      ++sent;
    }
    recv_ack();
    ++got;
  }
  double secs = us_since(t0) / 1e6;
  return {percentiles(v).median, static_cast<double>(t.nbytes) * o.stream_frames / secs / 1e6};
}

Result<Row> framed(Client& c, const Tensor& t, const std::string& codec_text, const DemoOptions& o) {
  Row r;
  SendOptions so;
  auto spec = CodecSpec::parse(codec_text);
  if (!spec) return std::move(spec.error());
  so.codec = *spec;
  so.chunk_bytes = o.chunk_bytes;
  so.segment_bytes = o.chunk_bytes;
  so.threads = o.threads;
  Bundle b{t};
  // Correctness first: the server echoes what it decoded.
  {
    FrameStats fs;
    TRACR_TRY(c.send_with(so, MsgType::infer_request, 0, b, {{"echo", int64_t{1}}}, &fs));
    auto res = c.recv(10000);
    if (!res) return std::move(res.error());
    if (res->tensors.size() != 1 || res->tensors[0].nbytes != t.nbytes)
      return make_error(Errc::size_mismatch, "echo returned a different bundle");
    r.wire = fs.payload_bytes;
    const auto* a = reinterpret_cast<const float*>(t.data);
    const auto* e = reinterpret_cast<const float*>(res->tensors[0].data);
    double m = 0;
    for (size_t i = 0; i < t.nbytes / 4; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - e[i])));
    r.max_err = m;
    const bool lossless = spec->lossy == Lossy::none;
    r.check = lossless ? (std::memcmp(t.data, e, t.nbytes) == 0 ? "exact" : "MISMATCH") : "lossy";
    if (lossless && r.check != "exact") return make_error(Errc::internal, "lossless codec changed the bytes");
  }
  std::vector<double> enc_us, srv_us;
  auto once = [&]() -> Status {
    FrameStats fs;
    TRACR_TRY(c.send_with(so, MsgType::infer_request, 0, b, {}, &fs));
    auto res = c.recv(10000);
    if (!res) return std::move(res.error());
    enc_us.push_back(fs.total_ns / 1e3);
    auto it = res->header.meta.find(protocol::meta_key::kSrvDecodeNs);
    if (it != res->header.meta.end())
      if (auto* ns = std::get_if<int64_t>(&it->second)) srv_us.push_back(static_cast<double>(*ns) / 1e3);
    return {};
  };
  for (int i = 0; i < o.warmup; ++i) TRACR_TRY(once());
  std::vector<double> v;
  for (int i = 0; i < o.reps; ++i) {
    auto t0 = Clock::now();
    TRACR_TRY(once());
    v.push_back(us_since(t0));
  }
  r.rtt = percentiles(v);
  r.enc_us = percentiles(enc_us).median;
  r.srv_us = percentiles(srv_us).median;
  auto t0 = Clock::now();
  int sent = 0, got = 0;
  while (got < o.stream_frames) {
    while (sent < o.stream_frames && sent - got < o.window) {
      TRACR_TRY(c.send_with(so, MsgType::infer_request, 0, b));
      ++sent;
    }
    auto res = c.recv(10000);
    if (!res) return std::move(res.error());
    ++got;
  }
  r.stream_mbs = static_cast<double>(t.nbytes) * o.stream_frames / (us_since(t0) / 1e6) / 1e6;
  return r;
}


// ---- side by side with the Python tracr pipeline (issue #14) ----------------

std::string python_script(const DemoOptions& o) {
  if (!o.python_script.empty()) return o.python_script;
  // build/bin/tracrctl -> bench/ of the source tree; else the configured one.
  std::string beside = self_dir() + "/../../bench/python_baseline.py";
  if (access(beside.c_str(), R_OK) == 0) return beside;
  return std::string(TRACR_SOURCE_DIR) + "/bench/python_baseline.py";
}

// Runs `cmd` through the shell; its stdout, or an error naming it.
Result<std::string> capture(const std::string& cmd) {
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return make_error(Errc::io, "cannot run: " + cmd);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = pclose(f);
  if (rc != 0) return make_error(Errc::io, "'" + cmd + "' exited with status " + std::to_string(rc));
  return out;
}

// One activation written by python_baseline.py activations.
Result<Tensor> load_activation(const std::string& dir, size_t bytes) {
  const std::string base = dir + "/act_" + std::to_string(bytes);
  std::ifstream sf(base + ".shape"), df(base + ".f32", std::ios::binary);
  if (!sf || !df) return make_error(Errc::io, base + ".f32/.shape: not written by the Python generator");
  std::vector<int64_t> shape;
  std::string tok;
  while (std::getline(sf, tok, ',')) shape.push_back(std::stoll(tok));
  Tensor t = Tensor::allocate("act", DType::float32, shape);
  if (t.nbytes != bytes || !df.read(reinterpret_cast<char*>(t.mutable_data()), static_cast<std::streamsize>(bytes)))
    return make_error(Errc::size_mismatch, base + ".f32 does not hold " + std::to_string(bytes) + " bytes");
  return t;
}

struct PyRow {
  double rtt = 0, p95 = 0, enc = 0, dec = 0;
  uint64_t wire = 0;
};

// One size of the side-by-side table: python, raw ZeroMQ and tracr with
// each lossless codec on the same activation; its verdicts appended. How
// many rows failed (each logged).
int compare_size(const DemoOptions& o, zmq::context_t& ctx, const std::string& raw_ep, Client& enc, size_t bytes,
                 const Tensor& t, const PyRow& p, std::vector<std::string>& verdicts) {
  int rc = 0;
  const double mbs_py = bytes / p.rtt;  // bytes per us = MB/s
  const double ratio_py = static_cast<double>(bytes) / p.wire;
  const double raw_rtt = raw_zmq(ctx, raw_ep, t, o).first;  // (a lambda below captures it: no structured binding)
  auto line = [&](const std::string& name, double rtt, double p95, uint64_t wire, const std::string& check) {
    fmt::print("{:>9} {:<34} {:>9.1f} {:>9.1f} {:>8.0f} {:>9} {:>6.2f} {:>8.2f} {:>6.2f} {:>7}\n", bytes, name, rtt, p95,
               bytes / rtt, wire, static_cast<double>(bytes) / wire, (bytes / rtt) / mbs_py, rtt / raw_rtt, check);
  };
  line("python pickle+blosc-zstd3/tcp", p.rtt, p.p95, p.wire, "-");
  line("raw zeromq (same bytes)", raw_rtt, raw_rtt, bytes, "-");
  std::string best;
  double best_x = 0, best_ratio = 0;
  std::vector<std::string> cfgs = {"none"};
  cfgs.insert(cfgs.end(), o.lossless.begin(), o.lossless.end());
  double none_x_raw = 0;
  for (const auto& codec : cfgs) {
    auto r = framed(enc, t, codec, o);
    if (!r) {
      TRACR_LOG(error, "tracrctl: {}/aes at {} bytes: {}", codec, bytes, user_text(r.error()));
      ++rc;
      continue;
    }
    line("tracr " + codec + "/aes", r->rtt.median, r->rtt.p95, r->wire, r->check);
    const double ratio = static_cast<double>(bytes) / r->wire;
    const double x = (bytes / r->rtt.median) / mbs_py;
    if (codec == "none") none_x_raw = r->rtt.median / raw_rtt;
    else if (ratio >= ratio_py && x > best_x) {
      best = codec;
      best_x = x;
      best_ratio = ratio;
    }
  }
  if (best.empty())
    verdicts.push_back(fmt::format("{:>9}: no lossless codec reached python's ratio {:.2f}", bytes, ratio_py));
  else
    verdicts.push_back(fmt::format("{:>9}: best lossless at >= python's ratio: {}/aes, {:.1f}x python's throughput "
                                   "(target >= 15x: {}), ratio {:.2f} vs {:.2f}",
                                   bytes, best, best_x, best_x >= 15 ? "met" : "not met", best_ratio, ratio_py));
  if (bytes == 774400)
    verdicts.push_back(fmt::format("{:>9}: encrypted uncompressed round trip none/aes = {:.2f}x raw ZeroMQ "
                                   "(target <= 2x: {})",
                                   bytes, none_x_raw, none_x_raw <= 2 ? "met" : "not met"));
  return rc;
}

// The baseline script's output: "python,BYTES,rtt,p95,wire,enc,dec" rows by
// size, and its "info,..." line into `info`.
std::map<size_t, PyRow> parse_python_rows(const std::string& text, std::string& info) {
  std::map<size_t, PyRow> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::istringstream ls(line);
    std::string x;
    while (std::getline(ls, x, ',')) f.push_back(x);
    if (f.size() > 1 && f[0] == "info") {
      for (size_t i = 1; i < f.size(); ++i) info += (i > 1 ? ", " : "") + f[i];
      continue;
    }
    if (f.size() != 7 || f[0] != "python") continue;
    PyRow r;
    r.rtt = std::stod(f[2]);
    r.p95 = std::stod(f[3]);
    r.wire = std::stoull(f[4]);
    r.enc = std::stod(f[5]);
    r.dec = std::stod(f[6]);
    rows[std::stoull(f[1])] = r;
  }
  return rows;
}

Status compare_python(const DemoOptions& o, zmq::context_t& ctx, const std::string& raw_ep, Client& enc) {
  const std::string script = python_script(o);
  char tmpl[] = "/tmp/tracr-bench-XXXXXX";
  if (!mkdtemp(tmpl)) {
    return core::command_failed(std::string("cannot create a temporary directory"));
  }
  const std::string dir = tmpl;
  struct Cleanup {
    std::string d;
    ~Cleanup() { (void)!std::system(("rm -rf '" + d + "'").c_str()); }
  } cleanup{dir};
  auto gen = capture(o.python + " '" + script + "' activations '" + dir + "' 2>&1");
  if (!gen) {
    return core::command_failed(fmt::format("generating activations: {}", user_text(gen.error())));
  }
  auto py = capture(o.python + " '" + script + "' baseline '" + dir + "' --reps " + std::to_string(o.reps) +
                    " --warmup " + std::to_string(o.warmup));
  if (!py) {
    return core::command_failed(fmt::format("Python baseline: {}", user_text(py.error())));
  }
  std::string py_info;
  const std::map<size_t, PyRow> pyrows = parse_python_rows(*py, py_info);
  fmt::print("\nside by side with the Python tracr pipeline (issue #14): real post-ReLU activations "
             "(bench/python_baseline.py: Fashion-MNIST image, seeded torchvision AlexNet/ResNet-18 layers)\n");
  fmt::print("python = pickle + blosc zstd level 3 byte shuffle + length-prefixed TCP, two processes ({}: {}); "
             "tracr = frames over ZeroMQ to tracr-agent, aes-256-gcm, participant threads {}\n",
             o.python, py_info, o.threads);
  fmt::print("MB/s = tensor bytes / median round trip; ratio = tensor bytes / payload bytes; "
             "x_python = MB/s / python's; x_raw = round trip / raw ZeroMQ's\n\n");
  fmt::print("{:>9} {:<34} {:>9} {:>9} {:>8} {:>9} {:>6} {:>8} {:>6} {:>7}\n", "bytes", "pipeline", "rtt_us", "p95_us",
             "MB/s", "payload_B", "ratio", "x_python", "x_raw", "check");
  int rc = 0;
  std::vector<std::string> verdicts;
  for (size_t bytes : o.sizes) {
    auto t = load_activation(dir, bytes);
    auto pit = pyrows.find(bytes);
    if (!t || pit == pyrows.end()) {
      fmt::print("{:>9} (no real activation of this size from the generator: skipped)\n", bytes);
      continue;
    }
    rc += compare_size(o, ctx, raw_ep, enc, bytes, *t, pit->second, verdicts);
  }
  fmt::print("\n");
  for (const auto& v : verdicts) fmt::print("{}\n", v);
  if (rc) return core::command_failed(fmt::format("{} rows of the side-by-side table failed (above)", rc));
  return {};
}

using ClientResult = Result<std::unique_ptr<Client>>;

// The codec table: for each size and codec/cipher pair, the framed round
// trip and stream against raw ZeroMQ measured right before it. A failed row
// starts a fresh session (its replies may still be in flight). How many
// rows failed (each logged).
int codec_table(const DemoOptions& o, zmq::context_t& ctx, const std::string& raw_ep,
                const std::function<ClientResult(bool)>& connect, ClientResult& enc, ClientResult& plain,
                std::vector<Row>& rows) {
  int rc = 0;
  fmt::print("{:>9} {:<28} {:>9} {:>9} {:>8} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>6} {:>9} {:>8}\n", "bytes",
             "codec/cipher", "rtt_us", "p95_us", "enc_us", "dec_us", "raw_us", "x_raw", "payload_B", "MB/s", "raw_MB/s",
             "x_raw", "max_err", "check");
  for (size_t bytes : o.sizes) {
    Tensor t = make_activations(bytes, static_cast<uint32_t>(bytes));
    for (const auto& cfg : o.configs) {
      // The baseline is measured right before each row, so both share the
      // machine's conditions of the moment.
      auto [raw_rtt, raw_mbs] = raw_zmq(ctx, raw_ep, t, o);
      auto slash = cfg.find('/');
      std::string codec = cfg.substr(0, slash);
      bool aes = slash != std::string::npos && cfg.substr(slash + 1) == "aes";
      auto r = framed(aes ? **enc : **plain, t, codec, o);
      if (!r) {
        TRACR_LOG(error, "tracrctl: {} at {} bytes: {}", cfg, bytes, user_text(r.error()));
        ++rc;
        auto fresh = connect(aes);
        if (!fresh) {
          TRACR_LOG(error, "tracrctl: reconnect: {}", user_text(fresh.error()));
          break;
        }
        (aes ? enc : plain) = std::move(fresh);
        continue;
      }
      r->bytes = bytes;
      r->config = cfg;
      r->raw_rtt = raw_rtt;
      r->raw_stream_mbs = raw_mbs;
      fmt::print("{:>9} {:<28} {:>9.1f} {:>9.1f} {:>8.1f} {:>8.1f} {:>9.1f} {:>6.2f} {:>9} {:>9.0f} {:>9.0f} {:>6.2f} {:>9.2g} {:>8}\n",
                 bytes, cfg, r->rtt.median, r->rtt.p95, r->enc_us, r->srv_us, raw_rtt, r->rtt.median / raw_rtt, r->wire,
                 r->stream_mbs, raw_mbs, r->stream_mbs / raw_mbs, r->max_err, r->check);
      rows.push_back(*r);
    }
  }
  fmt::print("\nx_raw: framed / raw ZeroMQ (round trip: lower is better; stream: higher is better). "
             "rejected frames: client {} ; MB/s counts raw tensor bytes.\n",
             (*enc)->rejected().total() + (*plain)->rejected().total());
  return rc;
}

void write_demo_csv(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream f(path);
  f << "bytes,config,rtt_median_us,rtt_p95_us,raw_rtt_us,rtt_ratio,payload_bytes,stream_MBps,raw_stream_MBps,max_abs_err\n";
  for (const auto& r : rows)
    f << fmt::format("{},{},{:.2f},{:.2f},{:.2f},{:.3f},{},{:.1f},{:.1f},{:.3g}\n", r.bytes, r.config, r.rtt.median,
                     r.rtt.p95, r.raw_rtt, r.rtt.median / r.raw_rtt, r.wire, r.stream_mbs, r.raw_stream_mbs, r.max_err);
}

}  // namespace

Status run_demo(const DemoOptions& o) {
  std::string agent = o.agent_path.empty() ? self_dir() + "/tracr-agent" : o.agent_path;
  if (access(agent.c_str(), X_OK) != 0) {
    return core::bad_input(fmt::format("cannot find tracr-agent at {} (pass --agent PATH)", agent));
  }
  std::vector<uint8_t> secret(32);
  if (auto rb = random_bytes(secret.data(), secret.size()); !rb) {
    return core::command_failed(fmt::format("cannot draw the session secret: {}", user_text(rb.error())));
  }
  auto enc_agent = start_agent(agent, true, secret);
  auto plain_agent = start_agent(agent, false, secret);
  if (!enc_agent || !plain_agent) {
    return core::command_failed(user_text(!enc_agent ? enc_agent.error() : plain_agent.error()));
  }
  zmq::context_t ctx(1);
  auto connect = [&](bool encrypt) {
    ChannelOptions co;
    co.security.encrypt = encrypt;
    co.security.secret = secret;
    return Client::connect(ctx, encrypt ? enc_agent->endpoint : plain_agent->endpoint, co);
  };
  auto enc = connect(true);
  auto plain = connect(false);
  if (!enc || !plain) {
    return core::command_failed(user_text(!enc ? enc.error() : plain.error()));
  }
  // Keep reading the agents' control lines (heartbeats): a full pipe would
  // block an agent.
  std::atomic<bool> draining{true};
  auto drain = [&](AgentProc& p) {
    return std::thread([&] {
      while (draining) (void)p.read_line(200);
    });
  };
  std::thread d1 = drain(enc_agent->conn->proc()), d2 = drain(plain_agent->conn->proc());
  struct Joiner {
    std::atomic<bool>& flag;
    std::thread &a, &b;
    ~Joiner() {
      flag = false;
      if (a.joinable()) a.join();
      if (b.joinable()) b.join();
    }
  } joiner{draining, d1, d2};
  fmt::print("tracr protocol demo: tracr-agent SERVER pid {} (aes-256-gcm, x25519) and pid {} (plain) "
             "on loopback TCP\n",
             enc_agent->conn->proc().pid(), plain_agent->conn->proc().pid());
  fmt::print("round trip = request frame with the tensor, reply frame with the server's measurements; "
             "{} warm-up + {} timed; stream = {} frames, {} in flight\n\n",
             o.warmup, o.reps, o.stream_frames, o.window);
  std::vector<Row> rows;
  const int failed_rows = o.compare_only ? 0 : codec_table(o, ctx, enc_agent->raw_endpoint, connect, enc, plain, rows);
  const Status python = o.compare_python ? compare_python(o, ctx, enc_agent->raw_endpoint, **enc) : Status{};
  if (!o.csv_path.empty()) write_demo_csv(o.csv_path, rows);
  draining = false;
  if (d1.joinable()) d1.join();
  if (d2.joinable()) d2.join();
  enc_agent->conn->stop(3000);
  plain_agent->conn->stop(3000);
  if (failed_rows) return core::command_failed(fmt::format("{} rows of the codec table failed (above)", failed_rows));
  return python;
}

}  // namespace tracr::controller
