// Link profiles applied with tc between two namespaced agents: measured by
// the probe, named on every run, frame and probe row, removed after the run
// however it ends (a killed controller's by the next run), refused with the
// reason where the kernel lacks netem, and moving the best split.
#include <signal.h>
#include <sys/wait.h>

#include "system/system_util.hpp"

using namespace tracr::testing;

namespace {

std::string root_qdisc(const NetnsPair& net, bool participant_side) {
  return sh("ip netns exec " + (participant_side ? net.b : net.a) + " tc qdisc show dev " +
            (participant_side ? net.vb : net.va) + " root").out;
}

}  // namespace

TEST(LinkProfiles, ShapedRunsAreMeasuredNamedAndCleanedUp) {
  NetnsPair net("");
  NEED_NETNS(net);
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml", net.devices_yaml());
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  duration_ms: 1500\n  chunk_bytes: 32768\n"
                                       "links:\n  slow: {up_mbit: 8, down_mbit: 4}\nlink: [slow, unlimited]\n", devices);
  y.replace(y.find("split: all"), 10, "split: [0, 22]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("median total ms per split and link profile"), std::string::npos) << r.out;
  EXPECT_EQ(query(db, "select group_concat(link) from runs order by id"), "slow,unlimited");
  EXPECT_NE(query(db, "select shaping from runs where id = 1").find("tbf 8 Mbit/s"), std::string::npos);
  EXPECT_NE(query(db, "select shaping from runs where id = 1").find("tbf 4 Mbit/s"), std::string::npos);
  EXPECT_EQ(query(db, "select shaping from runs where id = 2"), "none");
  // Every frame and probe row names its link and shaping.
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 1 and (link <> 'slow' or shaping not like 'tc:%')"), "0");
  EXPECT_EQ(query(db, "select count(*) from probes where link is null or shaping is null"), "0");
  // The probe measured the emulated rates, and far more without them.
  const double up = std::stod(query(db, "select up_mbps from probes where run_id = 1"));
  const double down = std::stod(query(db, "select down_mbps from probes where run_id = 1"));
  std::printf("slow profile (8 up / 4 down Mbit/s): probe up %.2f, down %.2f Mbit/s\n", up, down);
  // At most the emulated rate (10 % for tbf's bucket and the probe's own
  // timing), and not far below it: on a loaded 2-core machine the probe read
  // 7.15 / 3.66 Mbit/s (-11 %, -9 %), so the lower bound allows 40 % and is
  // still above the other direction's rate (up and down are not swapped).
  EXPECT_LE(up, 8 * 1.1);
  EXPECT_GE(up, 8 * 0.6);
  EXPECT_LE(down, 4 * 1.1);
  EXPECT_GE(down, 4 * 0.6);
  EXPECT_GT(std::stod(query(db, "select up_mbps from probes where run_id = 2")), 50);
  // Nothing is left configured.
  EXPECT_NE(root_qdisc(net, true).find("noqueue"), std::string::npos) << root_qdisc(net, true);
  EXPECT_NE(root_qdisc(net, false).find("noqueue"), std::string::npos) << root_qdisc(net, false);
  EXPECT_TRUE(std::filesystem::is_empty(d.path / "shaping"));
}

// Two axes in one command: a list of links and a list of codecs give one run
// per link and codec (links outer), named NAME@LINK/CODEC, then one table
// comparing them (#20: two codecs used to need two runs, both NAME@lte).
TEST(LinkProfiles, ALinkListTimesACodecListIsOneRunEachAndOneTable) {
  NetnsPair net("");
  NEED_NETNS(net);
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml", net.devices_yaml());
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n"
                                       "links:\n  slow: {up_mbit: 8, down_mbit: 4}\nlink: [slow, unlimited]\n", devices);
  y.replace(y.find("split: all"), 10, "split: [0, 22]");
  y.replace(y.find("compression: blosc-lz4"), 22, "compression: [none, int8]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select group_concat(name || ' ' || link || ' ' || codec, ',') from runs order by id"),
            "system@slow/none slow none,system@slow/int8 slow int8,system@unlimited/none unlimited none,"
            "system@unlimited/int8 unlimited int8");
  // Every frame was sent with its run's codec.
  EXPECT_EQ(query(db, "select count(*) from frames f join runs r on r.id = f.run_id where f.codec <> r.codec"), "0");
  EXPECT_EQ(query(db, "select count(*) from frames where ok = 0"), "0");
  EXPECT_NE(r.out.find("== link profile slow, compression int8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("median total ms per split and link profile and codec (runs 1 2 3 4)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("slow/int8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unlimited/none"), std::string::npos) << r.out;
}

TEST(LinkProfiles, AKilledControllersShapingIsRemovedByTheNextRun) {
  NetnsPair net("");
  NEED_NETNS(net);
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml", net.devices_yaml());
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\nlinks:\n  slow: {up_mbit: 20}\n"
                                       "link: slow\n", devices);
  y.replace(y.find("repetitions: 1"), 14, "repetitions: 500");
  const std::string exp = d.file("exp.yaml", y);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string bin = tracrctl();
    execl(bin.c_str(), bin.c_str(), "run", exp.c_str(), "--no-progress", static_cast<char*>(nullptr));
    _exit(127);
  }
  bool shaped = false;
  for (int i = 0; i < 600 && !shaped; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    shaped = !query(db, "select 1 from frames limit 1").empty();
  }
  ASSERT_TRUE(shaped);
  ASSERT_NE(root_qdisc(net, true).find("htb"), std::string::npos);
  ASSERT_EQ(kill(pid, SIGKILL), 0);  // no chance to clean up
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_NE(root_qdisc(net, true).find("htb"), std::string::npos) << "shaping outlived its controller";
  // The next run, with no profile at all, removes it first.
  std::string y2 = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n", devices);
  y2.replace(y2.find("split: all"), 10, "split: [22]");
  auto r = sh(tracrctl() + " run " + d.file("exp2.yaml", y2) + " --no-progress");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("removed shaping on " + net.vb), std::string::npos) << r.out;
  EXPECT_NE(root_qdisc(net, true).find("noqueue"), std::string::npos) << root_qdisc(net, true);
}

TEST(LinkProfiles, DelayNeedsNetemAndIsRefusedWithTheReasonWithoutIt) {
  NetnsPair net("");
  NEED_NETNS(net);
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml", net.devices_yaml());
  const bool netem = sh("ip netns exec " + net.a + " tc qdisc add dev " + net.va + " root netem delay 1ms").status == 0;
  sh("ip netns exec " + net.a + " tc qdisc del dev " + net.va + " root");
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\nlinks:\n  far: {up_mbit: 10, delay_ms: 20}\n"
                                       "link: far\n", devices);
  y.replace(y.find("split: all"), 10, "split: [22]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  if (netem) {
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(query(db, "select shaping from runs").find("netem delay 20ms"), std::string::npos);
  } else {
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("netem"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("link_delay: agent"), std::string::npos) << r.out;  // says how to go on
    EXPECT_EQ(query(db, "select count(*) from runs"), "0");  // refused before anything started
  }
  EXPECT_NE(root_qdisc(net, true).find("noqueue"), std::string::npos);
}

TEST(LinkProfiles, TheBestSplitMovesWithTheLinkForASlowParticipant) {
  NetnsPair net("");
  NEED_NETNS(net);
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  // A participant at a quarter of a core: over an EDGE-like uplink
  // (0.2 Mbit/s, ~2 s for the 49 kB input) it should compute locally; over
  // gigabit, offload everything. Built-in 3g left no margin: under CI load
  // local AlexNet at 64x64 took 0.71 s and offloading over 3g 0.60 s. Over
  // edge, offloading took 2.3 s and local 0.96 s (0.16 s of it returning the
  // logits), on gigabit 0.11 s and 0.60 s: each side wins by a factor > 2.
  std::string devices = net.devices_yaml();
  devices.replace(devices.find("netns: " + net.b), 7 + net.b.size(), "netns: " + net.b + "\n    cpu_quota: 0.25");
  std::string y = small_experiment(db,
                                   "record:\n  layers: false\nprobe:\n  enabled: false\n"
                                   "links:\n  edge: {up_mbit: 0.2, down_mbit: 0.2}\nlink: [edge, gigabit]\n",
                                   d.file("devices.yaml", devices));
  y.replace(y.find("split: all"), 10, "split: [0, 22]");
  y.replace(y.find("repetitions: 1"), 14, "repetitions: 3");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  auto best = [&](int run) {
    return query(db, "select split from stage_stats where field = 'total_ns' and run_id = " + std::to_string(run) +
                         " order by median_ns limit 1");
  };
  std::printf("%s", r.out.substr(r.out.find("median total ms per split")).c_str());
  EXPECT_EQ(best(1), "22") << "edge: local execution should win";
  EXPECT_EQ(best(2), "0") << "gigabit: full offload should win";
}

// The devices file's link_profile is applied (rate with tc), and with
// `link_delay: agent` its delay is added by the participant's relay: the
// probe sees the rate, the round trip grows by twice the delay, and every row
// says the delay came from the agent, not from a real link.
TEST(LinkProfiles, DevicesFileProfileWithDelayInTheAgent) {
  NetnsPair net("");
  NEED_NETNS(net);
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = net.devices_yaml("{rate_mbit: 8, delay_ms: 20}");
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  duration_ms: 1500\n  chunk_bytes: 32768\n"
                                       "link_delay: agent\n", d.file("devices.yaml", devices));
  y.replace(y.find("split: all"), 10, "split: [0, 22]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select link from runs"), "devices-file");
  const std::string shaping = query(db, "select shaping from runs");
  EXPECT_NE(shaping.find("tc: up tbf 8 Mbit/s"), std::string::npos) << shaping;
  EXPECT_NE(shaping.find("agent: delay 20 ms each way"), std::string::npos) << shaping;
  EXPECT_EQ(shaping.find("netem"), std::string::npos) << shaping;
  EXPECT_EQ(query(db, "select count(*) from frames where shaping not like '%agent: delay 20 ms%'"), "0");
  EXPECT_EQ(query(db, "select count(*) from probes where shaping not like '%agent: delay 20 ms%'"), "0");
  const double rtt_ms = std::stod(query(db, "select rtt_min_ns from probes")) / 1e6;
  const double up = std::stod(query(db, "select up_mbps from probes"));
  std::printf("devices-file profile 8 Mbit/s + 20 ms in the agent: probe rtt min %.2f ms, up %.2f Mbit/s\n", rtt_ms,
              up);
  EXPECT_GE(rtt_ms, 40.0);  // both ways held 20 ms: a floor, whatever the machine's speed
  // The rate is a ceiling whatever the load; below it the user-space relay
  // and the probe's window on a loaded 2-core machine decide (6.69 Mbit/s
  // once in CI, beside the traced-model tests), so the floor only catches a
  // wrong rate.
  EXPECT_LE(up, 8 * 1.1);
  EXPECT_GE(up, 8 * 0.5);
  // Frames at split 0 (the input crosses the link) took at least the round trip.
  EXPECT_GE(std::stod(query(db, "select min(network_ns) from frames where split = 0")) / 1e6, 40.0);
  EXPECT_NE(root_qdisc(net, true).find("noqueue"), std::string::npos) << root_qdisc(net, true);
}

namespace {

// Three namespaces in a row for a chain (#43): phone -- edge -- cloud, the
// edge with an interface on each side, each hop its own veth pair and /24.
struct NetnsChain {
  std::string phone, edge, cloud, v1p, v1e, v2e, v2c, s1, s2;
  bool ok = false;
  std::string why;
  NetnsChain() {
    const std::string id = std::to_string(getpid() % 100000);
    phone = "tcp" + id, edge = "tce" + id, cloud = "tcc" + id;
    v1p = "v1p" + id, v1e = "v1e" + id, v2e = "v2e" + id, v2c = "v2c" + id;
    s1 = "10.232." + std::to_string(getpid() % 250) + ".";
    s2 = "10.233." + std::to_string(getpid() % 250) + ".";
    if (geteuid() != 0) {
      why = "network namespaces need root";
      return;
    }
    for (const auto& c : std::vector<std::string>{
             "ip netns add " + phone, "ip netns add " + edge, "ip netns add " + cloud,
             "ip link add " + v1p + " type veth peer name " + v1e, "ip link add " + v2e + " type veth peer name " + v2c,
             "ip link set " + v1p + " netns " + phone, "ip link set " + v1e + " netns " + edge,
             "ip link set " + v2e + " netns " + edge, "ip link set " + v2c + " netns " + cloud,
             "ip -n " + edge + " addr add " + s1 + "1/24 dev " + v1e, "ip -n " + phone + " addr add " + s1 + "2/24 dev " + v1p,
             "ip -n " + cloud + " addr add " + s2 + "1/24 dev " + v2c, "ip -n " + edge + " addr add " + s2 + "2/24 dev " + v2e,
             "ip -n " + phone + " link set " + v1p + " up", "ip -n " + edge + " link set " + v1e + " up",
             "ip -n " + edge + " link set " + v2e + " up", "ip -n " + cloud + " link set " + v2c + " up",
             "ip -n " + phone + " link set lo up", "ip -n " + edge + " link set lo up", "ip -n " + cloud + " link set lo up"}) {
      auto r = sh(c);
      if (r.status != 0) {
        why = "'" + c + "' failed: " + r.out;
        return;
      }
    }
    ok = true;
  }
  std::string devices_yaml() const {
    return "devices:\n"
           "  - {device_type: PARTICIPANT, name: phone, transport: local, netns: " + phone +
           ", connection_params: [{host: " + s1 + "2}]}\n"
           "  - {device_type: SERVER, name: edge, transport: local, netns: " + edge +
           ", connection_params: [{host: " + s1 + "1, port: 0}]}\n"
           "  - {device_type: SERVER, name: cloud, transport: local, netns: " + cloud +
           ", connection_params: [{host: " + s2 + "1, port: 0}]}\n";
  }
  std::string qdisc(const std::string& ns, const std::string& dev) const {
    return sh("ip netns exec " + ns + " tc qdisc show dev " + dev + " root").out;
  }
  ~NetnsChain() {
    for (const auto& n : {phone, edge, cloud}) sh("ip netns del " + n);
    for (const auto& v : {v1p, v2e}) sh("ip link del " + v + " 2>/dev/null");  // left outside by a failed setup
  }
};

}  // namespace

// A chain shaped per hop (#43): phone -> edge at 8 Mbit/s with tc, edge ->
// cloud the built-in `wan` (50 Mbit/s with tc, 20 ms each way in the edge's
// own delay relay): the run names both hops' links and shaping, the second
// hop's network time holds the WAN's round trip at every frame, the first
// hop's transfer of the input is no faster than its rate, and nothing is
// left configured on any of the four interfaces.
TEST(LinkProfiles, AChainIsShapedPerHop) {
  NetnsChain net;
  NEED_NETNS(net);
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe: {enabled: false}\nlink_delay: agent\n"
                                       "links:\n  slow: {up_mbit: 8, down_mbit: 8}\n"
                                       "chain: [{device: edge, link: slow}, {device: cloud, link: wan}]\n",
                                   d.file("devices.yaml", net.devices_yaml()));
  y.replace(y.find("split: all"), 10, "split: [[0, 0], [3, 13], [22, 22]]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select link from runs"), "slow|wan");
  const std::string shaping = query(db, "select shaping from runs");
  EXPECT_NE(shaping.find("hop 1 (participants -> edge): tc: up tbf 8 Mbit/s"), std::string::npos) << shaping;
  EXPECT_NE(shaping.find("hop 2 (edge -> cloud): tc: up tbf 50 Mbit/s"), std::string::npos) << shaping;
  EXPECT_NE(shaping.find("agent: delay 20 ms each way in edge's delay relay"), std::string::npos) << shaping;
  EXPECT_EQ(query(db, "select count(*) from frames f join runs r on r.id = f.run_id where f.link <> 'slow|wan' or "
                      "f.shaping <> r.shaping"),
            "0");
  EXPECT_EQ(query(db, "select count(*) from frames where ok = 1"), "6");  // 3 placements x 2 samples, all named
  // Floors, whatever the machine's load: the edge's round trip to the cloud holds the WAN's (both
  // ways held 20 ms in its relay), and on hop 1 the input (split 0) crosses at no more than 8 Mbit/s.
  // (Hop 2's network_ns is a residual, as frames.network_ns is: the round trip less stages timed on
  // the two devices; once, on a loaded machine, it read 37.0 ms, time counted in a stage having
  // overlapped the transfer. It is reported, and bounded loosely.)
  const double rtt_ms = std::stod(query(db, "select min(forward_ns) from frame_hops where hop = 1")) / 1e6;
  const double wan_ms = std::stod(query(db, "select min(network_ns) from frame_hops where hop = 2")) / 1e6;
  EXPECT_GE(rtt_ms, 40.0);
  EXPECT_GE(wan_ms, 30.0);  // the residual: the delay less what overlapped it
  const double in_bytes = std::stod(query(db, "select min(in_wire_bytes) from frame_hops h join frames f using "
                                              "(run_id, participant, frame) where h.hop = 1 and f.split = 0"));
  const double hop1_ms = std::stod(query(db, "select min(h.network_ns) from frame_hops h join frames f using "
                                             "(run_id, participant, frame) where h.hop = 1 and f.split = 0")) / 1e6;
  std::printf("chain shaped per hop: edge -> cloud round trip min %.1f ms, hop 2 (wan) network min %.1f ms; hop 1 (8 Mbit/s) input %.0f bytes, network min "
              "%.1f ms (rate floor %.1f ms)\n", rtt_ms, wan_ms, in_bytes, hop1_ms, in_bytes * 8 / 8e6 * 1e3);
  EXPECT_GE(hop1_ms, 0.8 * in_bytes * 8 / 8e6 * 1e3);  // tbf's bucket lets a little through at once
  for (const auto& [ns, dev] : {std::pair{net.phone, net.v1p}, {net.edge, net.v1e}, {net.edge, net.v2e},
                                {net.cloud, net.v2c}})
    EXPECT_NE(net.qdisc(ns, dev).find("noqueue"), std::string::npos) << dev << ": " << net.qdisc(ns, dev);
  EXPECT_TRUE(std::filesystem::is_empty(d.path / "shaping"));
}

TEST(LinkProfiles, DevicesCheckReportsWhetherTcMayRun) {
  NetnsPair net("");
  NEED_NETNS(net);
  TempDir d;
  auto r = sh(tracrctl() + " devices check --devices " + d.file("devices.yaml", net.devices_yaml()));
  EXPECT_EQ(r.status, 0) << r.out;
  // As root: tc runs without sudo; netem is reported as the kernel has it.
  const bool netem = sh("unshare -n tc qdisc add dev lo root netem delay 1ms").status == 0;
  EXPECT_NE(r.out.find(std::string("tc: yes (root), netem: ") + (netem ? "yes" : "no")), std::string::npos) << r.out;
}

// A dead controller's state file for a namespace that no longer exists (its
// qdiscs went with it) is forgotten by the next run, not reported forever.
TEST(LinkProfiles, StateForAVanishedNamespaceIsForgotten) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::filesystem::create_directories(d.path / "shaping");
  std::ofstream(d.path / "shaping" / "edge_trgone1_veth0.shaping")
      << "device=edge\ntransport=local\nnetns=trgone1\ndev=veth0\nsudo=\npid=999999999\nstart=1\n";
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n");
  y.replace(y.find("split: all"), 10, "split: [22]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("forgot shaping on veth0 in namespace trgone1"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::is_empty(d.path / "shaping"));
}

// Someone else's shaping is never replaced (#20): a root qdisc already on the server's end of the veth refuses
// the run, naming the device, the interface and what is there, and the remedy it prints runs as printed (with
// the `ip netns exec` its namespace needs). The participant's end, shaped before the server's, is undone; the
// other qdisc stays until the remedy removes it, and the run then goes ahead.
TEST(LinkProfiles, AQdiscThatIsNotOursIsLeftAloneAndItsRemedyRunsAsPrinted) {
  NetnsPair net("");
  NEED_NETNS(net);
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml", net.devices_yaml());
  ASSERT_EQ(sh("ip netns exec " + net.a + " tc qdisc add dev " + net.va + " root tbf rate 100mbit burst 32kbit latency 400ms")
                .status,
            0);
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n"
                                       "links:\n  slow: {up_mbit: 8, down_mbit: 4}\nlink: slow\n", devices);
  y.replace(y.find("split: all"), 10, "split: [22]");
  const std::string exp = d.file("exp.yaml", y);
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("interface " + net.va + " on server"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("already has a root qdisc (qdisc tbf"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tracr never replaces its shaping"), std::string::npos) << r.out;
  const std::string marker = "remove it with: ";
  const size_t at = r.out.find(marker);
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string remedy = r.out.substr(at + marker.size(), r.out.find('\n', at) - at - marker.size());
  EXPECT_EQ(remedy, "ip netns exec " + net.a + " tc qdisc del dev " + net.va + " root");
  // Nothing of ours stays; theirs does.
  EXPECT_NE(root_qdisc(net, true).find("noqueue"), std::string::npos) << root_qdisc(net, true);
  EXPECT_NE(root_qdisc(net, false).find("qdisc tbf"), std::string::npos) << root_qdisc(net, false);
  EXPECT_TRUE(std::filesystem::is_empty(d.path / "shaping"));
  // The remedy as printed, then the same run.
  ASSERT_EQ(sh(remedy).status, 0);
  r = sh(tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select count(*) from runs where status = 'completed' and shaping like '%tbf 4 Mbit/s%'"), "1");
  EXPECT_NE(root_qdisc(net, false).find("noqueue"), std::string::npos) << root_qdisc(net, false);
}
