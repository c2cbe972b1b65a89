// Devices and experiment configuration: real files in temporary directories,
// every error class (unknown key with line:column and suggestion, wrong type,
// bad split, bad codec text, missing file) and the templates in config/.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "settings/config.hpp"
#include "protocol/codec.hpp"

namespace tracr::settings {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tracr-config-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& rel) const { return path_ + "/" + rel; }
  // Writes `text` to <dir>/<rel> (creating directories); returns the path.
  std::string write(const std::string& rel, const std::string& text) const {
    const std::string p = file(rel);
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::string path_;
};

// Sets (or, with value nullptr, unsets) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

std::string source_dir() { return TRACR_SOURCE_DIR; }

// Unsets every TRACR_<SETTING> override for the scope, so tests that load
// files with overrides enabled see the files' values only.
class NoSettingOverrides {
 public:
  NoSettingOverrides() {
    for (const auto& s : settings_table()) envs_.push_back(std::make_unique<ScopedEnv>(s.env.c_str(), nullptr));
  }

 private:
  std::vector<std::unique_ptr<ScopedEnv>> envs_;
};

// Runs the scope in another current directory (relative paths resolve there).
class ScopedCwd {
 public:
  explicit ScopedCwd(const std::string& dir) : old_(fs::current_path()) { fs::current_path(dir); }
  ~ScopedCwd() {
    std::error_code ec;
    fs::current_path(old_, ec);
  }
  ScopedCwd(const ScopedCwd&) = delete;
  ScopedCwd& operator=(const ScopedCwd&) = delete;

 private:
  fs::path old_;
};

// The example of the Python tracr README (Quick Start, step 2), verbatim.
const char* kPythonReadmeDevices = R"(devices:
  - device_type: SERVER           # REQUIRED
    connection_params:
      - host: 192.0.0.123         # Your server's IP (REQUIRED)
        user: user1               # Your username (REQUIRED)
        pkey_fp: server.rsa       # Will create this key next (REQUIRED)
        port: 12345               # Communication port (REQUIRED)
        default: true

  - device_type: PARTICIPANT     # REQUIRED
    connection_params:
      - host: 192.0.0.124        # Your edge device's IP (REQUIRED)
        user: user2              # Your username (REQUIRED)
        pkey_fp: edge.rsa        # Will create this key next (REQUIRED)
        port: 12345              # Must match server's port (REQUIRED)
        default: true
)";

Error devices_error(const std::string& yaml, const std::string& name = "devices.yaml") {
  auto r = parse_devices(yaml, name);
  EXPECT_FALSE(r.ok()) << "expected an error for:\n" << yaml;
  return r ? Error{} : r.error();
}

Error experiment_error(const std::string& yaml, const std::string& name = "exp.yaml") {
  auto r = parse_experiment(yaml, name, false);
  EXPECT_FALSE(r.ok()) << "expected an error for:\n" << yaml;
  return r ? Error{} : r.error();
}

// ---------------------------------------------------------------------------
// Devices

TEST(DevicesConfig, PythonTracrReadmeExampleParses) {
  TempDir dir;
  auto r = load_devices(dir.write("config/devices_config.yaml", kPythonReadmeDevices));
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->devices.size(), 2u);
  const DeviceConfig& s = r->server();
  EXPECT_EQ(s.name, "server");
  EXPECT_EQ(s.transport, Transport::ssh);
  EXPECT_EQ(s.work_dir, "~/.cache/tracr");
  EXPECT_EQ(s.connection().host, "192.0.0.123");
  EXPECT_EQ(s.connection().user, "user1");
  EXPECT_EQ(s.connection().pkey_fp, "server.rsa");
  EXPECT_EQ(s.connection().port, 12345);
  EXPECT_EQ(s.connection().ssh_port, 22);
  EXPECT_TRUE(s.connection().is_default);
  ASSERT_EQ(r->participants().size(), 1u);
  EXPECT_EQ(r->participants()[0]->name, "participant");
  EXPECT_EQ(r->participants()[0]->connection().host, "192.0.0.124");
  EXPECT_FALSE(r->embedded);
}

TEST(DevicesConfig, PythonTemplateShapeWithSplitInferenceNetworkParses) {
  auto r = parse_devices(R"(devices:
  - device_type: SERVER
    connection_params:
      - host: 10.0.0.2
        user: me
        pkey_fp: /abs/server_key.rsa
        default: true
  - device_type: PARTICIPANT
    connection_params:
      - host: 10.0.0.3
        user: me
        pkey_fp: participant_key.rsa
        default: true
split_inference_network:
  server: SERVER
  participants:
    - PARTICIPANT
)",
                         "devices.yaml");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->server().connection().pkey_path, "/abs/server_key.rsa");
}

TEST(DevicesConfig, SplitInferenceNetworkMustMatchDevices) {
  Error e = devices_error(R"(devices:
  - {device_type: SERVER, transport: local}
  - {device_type: PARTICIPANT, transport: local}
split_inference_network:
  server: PARTICIPANT
)");
  EXPECT_EQ(e.code, Errc::config);
  EXPECT_NE(e.message.find("devices.yaml:5:11: split_inference_network.server"), std::string::npos)
      << e.message;
}

TEST(DevicesConfig, UnknownKeyNamesLineColumnAndSuggestion) {
  Error e = devices_error(R"(devices:
  - device_type: SERVER
    connection_params:
      - host: 10.0.0.2
        user: me
        pkey_fp: k
        ssh_prot: 2222
  - device_type: PARTICIPANT
    transport: local
)");
  EXPECT_EQ(e.code, Errc::config);
  EXPECT_NE(e.message.find("devices.yaml:7:9: devices[0].connection_params[0].ssh_prot: unknown key"),
            std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("did you mean 'ssh_port'?"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("expected one of: host, user, pkey_fp, port, ssh_port, default"),
            std::string::npos)
      << e.message;
}

TEST(DevicesConfig, UnknownDeviceKeySuggestsExtension) {
  Error e = devices_error("devices:\n  - device_type: SERVER\n    transprt: local\n");
  EXPECT_NE(e.message.find("devices.yaml:3:5: devices[0].transprt: unknown key (did you mean 'transport'?)"),
            std::string::npos)
      << e.message;
}

TEST(DevicesConfig, WrongTypesAreRejectedWithExpectation) {
  const std::string head =
      "devices:\n  - device_type: PARTICIPANT\n    transport: local\n  - device_type: SERVER\n";
  Error port =
      devices_error(head + "    connection_params:\n      - {host: h, user: u, pkey_fp: k, port: abc}\n");
  EXPECT_NE(port.message.find("devices.yaml:6:46: devices[1].connection_params[0].port: expected a TCP port "
                              "0-65535 (0 = ephemeral), got 'abc'"),
            std::string::npos)
      << port.message;
  Error ssh_port = devices_error(
      head + "    connection_params:\n      - {host: h, user: u, pkey_fp: k, ssh_port: 70000}\n");
  EXPECT_NE(ssh_port.message.find("ssh_port: expected a TCP port 1-65535, got '70000'"), std::string::npos)
      << ssh_port.message;
  Error def = devices_error(
      head + "    connection_params:\n      - {host: h, user: u, pkey_fp: k, default: maybe}\n");
  EXPECT_NE(def.message.find("default: expected true or false, got 'maybe'"), std::string::npos)
      << def.message;
  Error type = devices_error("devices:\n  - device_type: EDGE\n");
  EXPECT_NE(
      type.message.find("devices.yaml:2:18: devices[0].device_type: expected one of SERVER | PARTICIPANT, "
                        "got 'EDGE'"),
      std::string::npos)
      << type.message;
  Error list = devices_error("devices: SERVER\n");
  EXPECT_NE(list.message.find("devices.yaml:1:10: devices: expected a list of devices, got 'SERVER'"),
            std::string::npos)
      << list.message;
  Error transport = devices_error(head + "    transport: telnet\n");
  EXPECT_NE(transport.message.find("transport: expected one of local | ssh, got 'telnet'"), std::string::npos)
      << transport.message;
}

TEST(DevicesConfig, SshDevicesNeedHostUserAndKey) {
  Error e = devices_error(
      "devices:\n  - device_type: PARTICIPANT\n    transport: local\n  - device_type: SERVER\n"
      "    connection_params:\n      - host: 10.0.0.1\n        pkey_fp: k\n");
  EXPECT_NE(e.message.find("devices.yaml:6:9: devices[1].connection_params[0].user: missing; required for "
                           "transport: ssh"),
            std::string::npos)
      << e.message;
  Error none = devices_error(
      "devices:\n  - device_type: SERVER\n  - device_type: PARTICIPANT\n    transport: local\n");
  EXPECT_NE(none.message.find("devices[0].connection_params: missing"), std::string::npos) << none.message;
}

TEST(DevicesConfig, TemplatePlaceholdersMustBeReplaced) {
  Error e = devices_error(R"(devices:
  - device_type: SERVER
    connection_params:
      - host: <server_ip_address>
        user: me
        pkey_fp: k
        default: true
  - {device_type: PARTICIPANT, transport: local}
)");
  EXPECT_NE(e.message.find("devices.yaml:4:15: devices[0].connection_params[0].host: placeholder "
                           "'<server_ip_address>' was not replaced"),
            std::string::npos)
      << e.message;
}

// host and user reach libssh and remote shells: what they cannot hold is
// refused at parse time, naming the file, line, column and character (#24).
TEST(DevicesConfig, HostAndUserWithShellOrOptionCharactersAreRefused) {
  auto with = [](const std::string& host, const std::string& user) {
    return devices_error("devices:\n  - device_type: SERVER\n    connection_params:\n      - host: \"" + host +
                         "\"\n        user: \"" + user + "\"\n        pkey_fp: k\n        default: true\n"
                         "  - {device_type: PARTICIPANT, transport: local}\n");
  };
  struct Case {
    std::string host, user, want;
  };
  for (const Case& k : std::vector<Case>{
           {"10.0.0.1; rm -rf /", "pi", "host: '10.0.0.1; rm -rf /' is not a host name or IP address (';' is not allowed)"},
           {"edge 01", "pi", "host: 'edge 01' is not a host name or IP address (' ' is not allowed)"},
           {"$(reboot)", "pi", "host: '$(reboot)' is not a host name or IP address ('$' is not allowed)"},
           {"-oProxyCommand=x", "pi", "host: '-oProxyCommand=x' is not a host name or IP address (it starts with '-'"},
           {"10.0.0.1", "pi user", "user: 'pi user' is not an SSH user name (' ' is not allowed)"},
           {"10.0.0.1", "p\u00e9", "user: 'p\\xC3\\xA9' is not an SSH user name (byte 0xC3 is not allowed)"},
           {"10.0.0.1", "-l", "user: '-l' is not an SSH user name (it starts with '-'"},
       }) {
    Error e = with(k.host, k.user);
    EXPECT_NE(e.message.find("devices.yaml:"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("devices[0].connection_params[0]." + k.want), std::string::npos) << e.message;
  }
  // What real testbeds use still passes.
  for (const std::string host : {"192.168.1.20", "fe80::1", "jetson-nano.local", "edge_01"}) {
    auto r = parse_devices("devices:\n  - device_type: SERVER\n    connection_params:\n      - host: \"" + host +
                           "\"\n        user: ubuntu.admin-2\n        pkey_fp: k\n        default: true\n"
                           "  - {device_type: PARTICIPANT, transport: local}\n",
                           "devices.yaml");
    EXPECT_TRUE(r.ok()) << host << ": " << (r ? "" : r.error().str());
  }
}

TEST(ExperimentConfig, StringSettingsWithControlCharactersAreRefused) {
  Error e = experiment_error("name: \"red\\e[31m\"\nmodel: alexnet\n");
  EXPECT_NE(e.message.find("exp.yaml:1:7: name: 'red\\x1B[31m' holds control character 0x1B; expected a run name"),
            std::string::npos)
      << e.message;
  Error w = experiment_error("model: alexnet\nweights: \"w.pt\\n\"\n");
  EXPECT_NE(w.message.find("exp.yaml:2:10: weights: 'w.pt\\x0A' holds control character 0x0A"), std::string::npos)
      << w.message;
}

TEST(DevicesConfig, AWorkDirWithAControlCharacterIsRefused) {
  Error e = devices_error("devices:\n  - device_type: SERVER\n    transport: local\n    work_dir: \"/tmp/a\\nb\"\n"
                          "  - {device_type: PARTICIPANT, transport: local}\n");
  EXPECT_NE(e.message.find("devices.yaml:4:15: devices[0].work_dir: '/tmp/a\\x0Ab' holds control character 0x0A; "
                           "expected a directory path on the device"),
            std::string::npos)
      << e.message;
}

TEST(DevicesConfig, DefaultConnectionIsSelected) {
  auto r = parse_devices(R"(devices:
  - device_type: SERVER
    connection_params:
      - {host: 10.0.0.1, user: a, pkey_fp: k1}
      - {host: 10.0.0.9, user: b, pkey_fp: k2, ssh_port: 2222, default: true}
  - {device_type: PARTICIPANT, transport: local}
)",
                         "devices.yaml");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->server().connection().host, "10.0.0.9");
  EXPECT_EQ(r->server().connection().ssh_port, 2222);

  Error none = devices_error(R"(devices:
  - device_type: SERVER
    connection_params:
      - {host: 10.0.0.1, user: a, pkey_fp: k1}
      - {host: 10.0.0.9, user: b, pkey_fp: k2}
  - {device_type: PARTICIPANT, transport: local}
)");
  EXPECT_NE(none.message.find("devices.yaml:4:7: devices[0].connection_params: 2 connections and none has "
                              "default: true"),
            std::string::npos)
      << none.message;
  Error two = devices_error(R"(devices:
  - device_type: SERVER
    connection_params:
      - {host: 10.0.0.1, user: a, pkey_fp: k1, default: true}
      - {host: 10.0.0.9, user: b, pkey_fp: k2, default: true}
  - {device_type: PARTICIPANT, transport: local}
)");
  EXPECT_NE(
      two.message.find("devices.yaml:5:57: devices[0].connection_params[1].default: a second connection"),
      std::string::npos)
      << two.message;
}

TEST(DevicesConfig, ExtensionsParse) {
  auto r = parse_devices(R"(devices:
  - device_type: SERVER
    name: gpu-box
    transport: ssh
    work_dir: /opt/tracr
    power_model: {idle_w: 25, busy_w: 180.5}
    connection_params:
      - {host: gpu.lan, user: u, pkey_fp: gpu.key, port: 5555}
  - device_type: PARTICIPANT
    name: pi-1
    transport: local
    link_profile: {rate_mbit: 100, delay_ms: 2.5}
  - device_type: PARTICIPANT
    transport: local
)",
                         "devices.yaml");
  ASSERT_TRUE(r.ok()) << r.error().str();
  const auto& s = r->server();
  EXPECT_EQ(s.name, "gpu-box");
  EXPECT_EQ(s.work_dir, "/opt/tracr");
  ASSERT_TRUE(s.power_model.has_value());
  EXPECT_DOUBLE_EQ(s.power_model->idle_w, 25);
  EXPECT_DOUBLE_EQ(s.power_model->busy_w, 180.5);
  EXPECT_FALSE(s.link_profile.has_value());
  EXPECT_EQ(s.connection().port, 5555);
  auto parts = r->participants();
  ASSERT_EQ(parts.size(), 2u);
  ASSERT_TRUE(parts[0]->link_profile.has_value());
  EXPECT_DOUBLE_EQ(parts[0]->link_profile->rate_mbit, 100);
  EXPECT_DOUBLE_EQ(parts[0]->link_profile->delay_ms, 2.5);
  // A SERVER has no link of its own to shape: refused with the position.
  auto srv = parse_devices("devices:\n  - device_type: SERVER\n    transport: local\n    link_profile: {rate_mbit: 1}\n"
                           "  - device_type: PARTICIPANT\n    transport: local\n",
                           "d.yaml");
  ASSERT_FALSE(srv.ok());
  EXPECT_NE(srv.error().message.find("d.yaml:4:19: devices[0].link_profile: applies to PARTICIPANT"), std::string::npos)
      << srv.error().message;
  EXPECT_EQ(parts[0]->name, "pi-1");
  EXPECT_EQ(parts[0]->transport, Transport::local);
  EXPECT_EQ(parts[0]->connection().host, "127.0.0.1");
  EXPECT_EQ(parts[1]->name, "participant2");
  ASSERT_NE(r->find("pi-1"), nullptr);

  Error neg = devices_error(
      "devices:\n  - device_type: SERVER\n    transport: local\n    power_model: {idle_w: -1, busy_w: 2}\n"
      "  - {device_type: PARTICIPANT, transport: local}\n");
  EXPECT_NE(
      neg.message.find("devices.yaml:4:27: devices[0].power_model.idle_w: expected a power in watts >= 0, "
                       "got '-1'"),
      std::string::npos)
      << neg.message;
  Error dup = devices_error(
      "devices:\n  - {device_type: SERVER, transport: local, name: a}\n"
      "  - {device_type: PARTICIPANT, transport: local, name: a}\n");
  EXPECT_NE(dup.message.find("duplicate device name 'a'"), std::string::npos) << dup.message;
}

TEST(DevicesConfig, CpusPinsByNumberAndIsRefusedWithTheReason) {
  auto r = parse_devices(
      "devices:\n  - {device_type: SERVER, transport: local, cpus: [1]}\n"
      "  - {device_type: PARTICIPANT, transport: local, cpus: [0, 2], cpu_quota: 0.25}\n",
      "d.yaml");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->server().cpus, std::vector<int>{1});
  EXPECT_EQ(r->server().cpu_cores, 1);  // the count is the device's cpu_cores
  EXPECT_EQ(r->participants()[0]->cpus, (std::vector<int>{0, 2}));
  EXPECT_EQ(r->participants()[0]->cpu_cores, 2);
  const std::string head =
      "devices:\n  - {device_type: SERVER, transport: local}\n  - device_type: PARTICIPANT\n"
      "    transport: local\n";
  Error twice = devices_error(head + "    cpus: [0, 0]\n");
  EXPECT_NE(twice.message.find("devices.yaml:5:15: devices[1].cpus[1]: expected a list of distinct CPU numbers "
                               "0..4095 (e.g. [1] or [0, 1]), not CPU 0 twice"),
            std::string::npos)
      << twice.message;
  Error scalar = devices_error(head + "    cpus: 1\n");
  EXPECT_NE(scalar.message.find("devices[1].cpus: expected a list of distinct CPU numbers"), std::string::npos)
      << scalar.message;
  Error empty = devices_error(head + "    cpus: []\n");
  EXPECT_NE(empty.message.find("devices[1].cpus: expected a list"), std::string::npos) << empty.message;
  Error range = devices_error(head + "    cpus: [4096]\n");
  EXPECT_NE(range.message.find("devices[1].cpus[0]: expected a list of distinct CPU numbers"), std::string::npos)
      << range.message;
  Error both = devices_error(head + "    cpu_cores: 1\n    cpus: [0]\n");
  EXPECT_NE(both.message.find("devices[1].cpu_cores: expected cpu_cores or cpus, not both"), std::string::npos)
      << both.message;
}

TEST(DevicesConfig, MemoryMbIsThePlannersLimitAndIsStoredWithTheRun) {
  auto r = parse_devices(
      "devices:\n  - {device_type: SERVER, transport: local, memory_mb: 512}\n"
      "  - {device_type: PARTICIPANT, transport: local}\n",
      "d.yaml");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->server().memory_mb, 512.0);
  EXPECT_FALSE(r->participants()[0]->memory_mb.has_value());
  EXPECT_NE(r->to_json().find("\"memory_mb\":512"), std::string::npos) << r->to_json();
  const std::string head = "devices:\n  - {device_type: SERVER, transport: local}\n  - device_type: PARTICIPANT\n"
                           "    transport: local\n";
  for (const char* bad : {"0", "-5", "lots", "2e9"}) {
    Error e = devices_error(head + "    memory_mb: " + bad + "\n");
    EXPECT_NE(e.message.find("devices.yaml:5:16: devices[1].memory_mb: expected a memory limit in MB"),
              std::string::npos)
        << bad << ": " << e.message;
  }
}

TEST(DevicesConfig, NeedsExactlyOneServerAndAParticipant) {
  Error two = devices_error(
      "devices:\n  - {device_type: SERVER, transport: local}\n  - {device_type: SERVER, transport: local, "
      "name: s2}\n"
      "  - {device_type: PARTICIPANT, transport: local}\n");
  EXPECT_NE(
      two.message.find("devices.yaml:2:3: devices: expected exactly one device with device_type: SERVER, "
                       "found 2"),
      std::string::npos)
      << two.message;
  Error none = devices_error("devices:\n  - {device_type: SERVER, transport: local}\n");
  EXPECT_NE(none.message.find("expected at least one device with device_type: PARTICIPANT"),
            std::string::npos)
      << none.message;
}

TEST(DevicesConfig, MissingFileIsIoErrorOrEmbeddedDefault) {
  TempDir dir;
  auto missing = load_devices(dir.file("nope.yaml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::io);
  EXPECT_NE(missing.error().message.find("nope.yaml: devices file does not exist"), std::string::npos)
      << missing.error().message;

  auto def = load_devices_or_default(dir.file("nope.yaml"));
  ASSERT_TRUE(def.ok()) << def.error().str();
  EXPECT_TRUE(def->embedded);
  EXPECT_EQ(def->server().transport, Transport::local);
  EXPECT_EQ(def->server().connection().host, "127.0.0.1");
  ASSERT_EQ(def->participants().size(), 1u);
  EXPECT_EQ(def->participants()[0]->transport, Transport::local);
  EXPECT_EQ(def->participants()[0]->connection().host, "127.0.0.1");

  // An existing but broken file is not replaced by the default.
  auto broken = load_devices_or_default(dir.write("bad.yaml", "devices: [\n"));
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.error().code, Errc::config);
}

TEST(DevicesConfig, YamlSyntaxErrorHasPosition) {
  Error e = devices_error("devices:\n  - device_type: SERVER\n   bad indent: [\n");
  EXPECT_EQ(e.code, Errc::config);
  EXPECT_NE(e.message.find("devices.yaml:"), std::string::npos);
  EXPECT_NE(e.message.find("YAML syntax error"), std::string::npos) << e.message;
}

TEST(DevicesConfig, PkeyIsResolvedUnderProjectPkeysThenConfigPkeys) {
  TempDir dir;
  const std::string devfile = dir.write("config/devices_config.yaml", kPythonReadmeDevices);
  // Neither exists: the project's pkeys/ is the answer.
  EXPECT_EQ(resolve_pkey("server.rsa", devfile),
            fs::path(dir.file("pkeys/server.rsa")).lexically_normal().string());
  // The Python tracr's config/pkeys/ is used when the key is there.
  dir.write("config/pkeys/edge.rsa", "key");
  EXPECT_EQ(resolve_pkey("edge.rsa", devfile),
            fs::path(dir.file("config/pkeys/edge.rsa")).lexically_normal().string());
  // pkeys/ wins when both exist.
  dir.write("pkeys/edge.rsa", "key");
  EXPECT_EQ(resolve_pkey("edge.rsa", devfile),
            fs::path(dir.file("pkeys/edge.rsa")).lexically_normal().string());
  EXPECT_EQ(resolve_pkey("/abs/k", devfile), "/abs/k");
  auto r = load_devices(devfile);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->participants()[0]->connection().pkey_path,
            fs::path(dir.file("pkeys/edge.rsa")).lexically_normal().string());
}

TEST(DevicesConfig, JsonNamesKeysButHoldsNoKeyMaterial) {
  TempDir dir;
  dir.write("pkeys/server.rsa", "-----BEGIN SECRET-----");
  auto r = load_devices(dir.write("config/devices_config.yaml", kPythonReadmeDevices));
  ASSERT_TRUE(r.ok()) << r.error().str();
  const std::string j = r->to_json();
  EXPECT_NE(j.find("\"pkey_fp\":\"server.rsa\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"device_type\":\"SERVER\""), std::string::npos) << j;
  EXPECT_EQ(j.find("BEGIN"), std::string::npos) << j;
}

// ---------------------------------------------------------------------------
// Experiment

TEST(ExperimentConfig, MinimalFileGetsDocumentedDefaults) {
  NoSettingOverrides no_env;
  TempDir dir;
  auto r = load_experiment(dir.write("exp/alex.yaml", "model: alexnet\n"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->name, "alex");
  EXPECT_EQ(r->model, "alexnet");
  EXPECT_TRUE(r->input_size.empty());
  EXPECT_EQ(r->dataset.kind, DatasetKind::synthetic);
  EXPECT_TRUE(r->split.all);
  EXPECT_EQ(r->warmup, 2);
  EXPECT_EQ(r->repetitions, 5);
  EXPECT_EQ(r->batch_size, 1);
  EXPECT_EQ(r->compression, "none");
  EXPECT_TRUE(r->encryption);
  EXPECT_EQ(r->key_exchange, "x25519");
  EXPECT_EQ(r->chunk_bytes, 256 * 1024);
  EXPECT_EQ(r->probe.chunk_bytes, 0);  // auto
  EXPECT_EQ(r->inflight, 1);
  EXPECT_TRUE(r->record.frames);
  EXPECT_TRUE(r->record.layers);
  EXPECT_EQ(r->output, "results/tracr.db");
  EXPECT_EQ(r->devices, "config/devices_config.yaml");
  EXPECT_FALSE(r->devices_explicit);
  EXPECT_EQ(r->seed, 0u);
  EXPECT_EQ(r->source_text, "model: alexnet\n");
}

TEST(ExperimentConfig, FullFileParses) {
  auto r = parse_experiment(R"(name: sweep-1
model: resnet18
weights: w/resnet18.pt
input_size: 160
dataset:
  type: imagefolder
  path: data/images
  class_names: [cat, dog]
  max_samples: 8
split: [0, 4, 9]
warmup: 0
repetitions: 10
batch_size: 4
compression: "int8_channel+blosc-zstd:level=5,shuffle=bit"
encryption: false
key_exchange: none
chunk_bytes: 1MiB
inflight: 4
record: {frames: true, layers: false}
output: /tmp/r.db
devices: config/lab.yaml
seed: 42
probe: {chunk_bytes: 64KiB}
)",
                            "exp.yaml", false);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->name, "sweep-1");
  EXPECT_EQ(r->weights, "w/resnet18.pt");
  EXPECT_EQ(r->input_size, (std::vector<int64_t>{3, 160, 160}));
  EXPECT_EQ(r->dataset.kind, DatasetKind::imagefolder);
  EXPECT_EQ(r->dataset.class_names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(r->dataset.max_samples, 8);
  EXPECT_FALSE(r->split.all);
  EXPECT_EQ(r->split.points(), (std::vector<int>{0, 4, 9}));
  EXPECT_EQ(r->warmup, 0);
  EXPECT_EQ(r->codec.lossy, protocol::Lossy::int8_channel);
  EXPECT_EQ(r->codec.comp, protocol::Compressor::blosc);
  EXPECT_EQ(r->codec.level, 5);
  EXPECT_EQ(r->compression, r->codec.name());
  EXPECT_FALSE(r->encryption);
  EXPECT_EQ(r->key_exchange, "none");
  EXPECT_EQ(r->chunk_bytes, 1024 * 1024);
  EXPECT_EQ(r->probe.chunk_bytes, 64 * 1024);
  EXPECT_EQ(r->inflight, 4);
  EXPECT_FALSE(r->record.layers);
  EXPECT_TRUE(r->devices_explicit);
  EXPECT_EQ(r->seed, 42u);
  EXPECT_EQ(r->pos_of("split").str(), "exp.yaml:10:8");
  EXPECT_EQ(r->pos_of("record.layers").str(), "exp.yaml:19:32");
  EXPECT_EQ(r->pos_of("seed").str(), "exp.yaml:22:7");
}

TEST(ExperimentConfig, UnknownKeyNamesLineColumnAndSuggestion) {
  Error e = experiment_error("model: alexnet\nwarmpu: 3\n");
  EXPECT_EQ(e.code, Errc::config);
  EXPECT_NE(
      e.message.find("exp.yaml:2:1: warmpu: unknown key (did you mean 'warmup'?); expected one of: name, "
                     "model,"),
      std::string::npos)
      << e.message;
  Error nested = experiment_error("model: alexnet\ndataset:\n  tpye: synthetic\n");
  EXPECT_NE(nested.message.find("exp.yaml:3:3: dataset.tpye: unknown key (did you mean 'type'?)"),
            std::string::npos)
      << nested.message;
  Error far = experiment_error("model: alexnet\nqwertyuiop: 1\n");
  EXPECT_NE(far.message.find("exp.yaml:2:1: qwertyuiop: unknown key; expected one of"), std::string::npos)
      << far.message;
  Error dup = experiment_error("model: alexnet\nwarmup: 1\nwarmup: 2\n");
  EXPECT_NE(dup.message.find("exp.yaml:3:1: warmup: duplicate key"), std::string::npos) << dup.message;
}

TEST(ExperimentConfig, WrongTypesNameKeyAndExpectation) {
  struct Case {
    std::string yaml, want;
  };
  const Case cases[] = {
      {"model: alexnet\nrepetitions: 0\n", "exp.yaml:2:14: repetitions: expected an integer >= 1, got '0'"},
      {"model: alexnet\nwarmup: lots\n", "exp.yaml:2:9: warmup: expected an integer >= 0, got 'lots'"},
      {"model: alexnet\nbatch_size: 1.5\n", "exp.yaml:2:13: batch_size: expected an integer >= 1, got '1.5'"},
      {"model: alexnet\nnum_classes: ten\n", "exp.yaml:2:14: num_classes: expected an integer >= 0, got 'ten'"},
      {"model: alexnet\nencryption: maybe\n", "exp.yaml:2:13: encryption: expected true or false, got 'maybe'"},
      {"model: alexnet\nkey_exchange: rsa\n", "exp.yaml:2:15: key_exchange: expected one of x25519 | none, got 'rsa'"},
      {"model: alexnet\ninflight: 100\n", "exp.yaml:2:11: inflight: expected an integer 1..64, got '100'"},
      {"model: {id: alexnet}\n", "exp.yaml:1:8: model: expected a model id such as alexnet"},
      {"model: alexnet\ninput_size: []\n",
       "exp.yaml:2:13: input_size: expected a positive int n up to 65536 (for [3, n, n]) or a list of 1 to 8 "
       "positive ints up to 65536 such as [C, H, W], [4] or [T, D] (or 1,28,28), got a list"},
      {"model: alexnet\ndataset: synthetic\n",
       "exp.yaml:2:10: dataset: expected a map with keys type, path, class_names, mean, std, max_samples, split, "
       "resize_size, interpolation, got "
       "'synthetic'"},
      {"model: alexnet\ndataset: {type: mnist}\n",
       "exp.yaml:2:17: dataset.type: expected one of synthetic | imagefolder | fashion_mnist, got 'mnist'"},
      {"model: alexnet\nchunk_bytes: 100\n", "exp.yaml:2:14: chunk_bytes: expected a byte count 4096..67108864"},
      {"model: alexnet\nprobe: {chunk_bytes: 100}\n",
       "exp.yaml:2:22: probe.chunk_bytes: expected auto, or a byte count 1024..67108864"},
      {"model: alexnet\nprobe: {chunk_bytes: automatic}\n",
       "exp.yaml:2:22: probe.chunk_bytes: expected auto, or a byte count 1024..67108864"},
      {"model: alexnet\nrecord: {frames: 1}\n", "exp.yaml:2:18: record.frames: expected true or false, got '1'"},
      {"model: alexnet\nseed: -1\n", "exp.yaml:2:7: seed: expected an integer 0..18446744073709551615, got '-1'"},
      {"- model: alexnet\n", "exp.yaml: expected a map of experiment settings (at least 'model'), got a list"},
      {"warmup: 1\n", "exp.yaml: model: missing; expected a model id such as alexnet"},
      {"model: alexnet\ndataset: {type: imagefolder}\n",
       "exp.yaml:2:17: dataset.path: missing; expected the image directory (required for type: imagefolder)"},
      {"model: alexnet\ndataset: {split: train}\n",
       "exp.yaml:2:18: dataset.split: applies to type: fashion_mnist only"},
      {"model: alexnet\ndataset: {type: fashion_mnist, split: validation}\n",
       "exp.yaml:2:39: dataset.split: expected one of train | test, got 'validation'"},
  };
  for (const auto& c : cases) {
    Error e = experiment_error(c.yaml);
    EXPECT_EQ(e.code, Errc::config) << c.yaml;
    EXPECT_NE(e.message.find(c.want), std::string::npos) << "yaml:\n" << c.yaml << "message: " << e.message;
  }
}

TEST(ExperimentConfig, SplitAcceptsIndexListOrAll) {
  auto one = parse_experiment("model: alexnet\nsplit: 3\n", "exp.yaml", false);
  ASSERT_TRUE(one.ok()) << one.error().str();
  EXPECT_FALSE(one->split.all);
  EXPECT_EQ(one->split.points(), std::vector<int>{3});
  auto list = parse_experiment("model: alexnet\nsplit: [5, 0, 2]\n", "exp.yaml", false);
  ASSERT_TRUE(list.ok()) << list.error().str();
  EXPECT_EQ(list->split.points(), (std::vector<int>{5, 0, 2}));
  auto all = parse_experiment("model: alexnet\nsplit: all\n", "exp.yaml", false);
  ASSERT_TRUE(all.ok()) << all.error().str();
  EXPECT_TRUE(all->split.all);

  auto sweep = resolve_splits(*all, 4);
  ASSERT_TRUE(sweep.ok());
  EXPECT_EQ(*sweep, (std::vector<int>{0, 1, 2, 3, 4}));
  auto chosen = resolve_splits(*list, 5);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(*chosen, (std::vector<int>{5, 0, 2}));
  auto beyond = resolve_splits(*list, 4);
  ASSERT_FALSE(beyond.ok());
  EXPECT_EQ(beyond.error().code, Errc::config);
  EXPECT_NE(beyond.error().message.find(
                "exp.yaml:2:8: split: split point 5 is beyond model 'alexnet' with 4 layers; "
                "expected 0..4"),
            std::string::npos)
      << beyond.error().message;
}

TEST(ExperimentConfig, BadSplitsAreRejected) {
  const std::string what =
      "split: expected a split point (int >= 0, or the name of the layer it cuts after), a list of split points, or "
      "all; on a chain of m devices, a list of placements of m cut points each, e.g. [[3, 13], [5, 13]], or plan, "
      "got ";
  const std::pair<std::string, std::string> cases[] = {
      {"split: -1", "exp.yaml:2:8: " + what + "'-1'"},
      {"split: []", "exp.yaml:2:8: " + what + "a list"},
      {"split: [1, -2]",
       "exp.yaml:2:12: split[1]: expected a split point (int >= 0, or the name of the layer it cuts after), got '-2'"},
      {"split: [1, 2, 1]",
       "exp.yaml:2:15: split[2]: split point 1 is listed twice; expected distinct points"},
      {"split: {k: 1}", what + "a map"},
  };
  for (const auto& [line, want] : cases) {
    Error e = experiment_error("model: alexnet\n" + line + "\n");
    EXPECT_EQ(e.code, Errc::config);
    EXPECT_NE(e.message.find(want), std::string::npos) << line << " -> " << e.message;
  }
}

// #45 item 9: a cut by the name of the layer it cuts after, kept as written
// until the model's layers resolve it (the controller builds the model).
TEST(ExperimentConfig, SplitsByLayerNameResolveAgainstTheModelsLayers) {
  const std::vector<std::string> layers = {"features.0", "features.1", "features.2", "classifier.6"};
  auto split_line = [](const ExperimentConfig& c) {  // as to_yaml writes it (for the agents and the runs table)
    const std::string y = "\n" + to_yaml(c);
    const size_t at = y.find("\nsplit: ");
    return at == std::string::npos ? std::string("(none)") : y.substr(at + 1, y.find('\n', at + 1) - at - 1);
  };
  auto cfg = parse_experiment("model: alexnet\nsplit: [features.1, 0, classifier.6]\n", "exp.yaml", false);
  ASSERT_TRUE(cfg.ok()) << cfg.error().str();
  EXPECT_TRUE(cfg->split.has_names());
  EXPECT_EQ(split_line(*cfg), "split: [features.1, 0, classifier.6]");
  ASSERT_TRUE(resolve_split_names(*cfg, layers).ok());
  EXPECT_FALSE(cfg->split.has_names());
  EXPECT_EQ(cfg->split.points(), (std::vector<int>{2, 0, 4}));  // the cut after layer i is split i + 1
  EXPECT_EQ(split_line(*cfg), "split: [2, 0, 4]");

  // One named point; a chain's placement mixing names and numbers; participant_splits.
  auto one = parse_experiment("model: alexnet\nsplit: features.2\n", "exp.yaml", false);
  ASSERT_TRUE(one.ok() && resolve_split_names(*one, layers).ok());
  EXPECT_EQ(one->split.points(), std::vector<int>{3});
  auto chain = parse_experiment("model: alexnet\nchain: [edge, server]\nsplit: [[features.0, 3]]\n",
                                "exp.yaml", false);
  ASSERT_TRUE(chain.ok()) << chain.error().str();
  ASSERT_TRUE(resolve_split_names(*chain, layers).ok());
  EXPECT_EQ(chain->split.entries.at(0).cuts, (std::vector<int>{1, 3}));
  auto per = parse_experiment("model: alexnet\nsplit: [1]\nparticipant_splits: {p1: [features.2]}\n", "exp.yaml", false);
  ASSERT_TRUE(per.ok()) << per.error().str();
  ASSERT_TRUE(resolve_split_names(*per, layers).ok());
  EXPECT_EQ(per->participant_splits.at("p1").points(), std::vector<int>{3});
  // A wrong count of cuts names them as written.
  Error count = experiment_error("model: alexnet\nsplit: [[features.0, 3]]\n");
  EXPECT_NE(count.message.find("split[0]: [features.0, 3] has 2 cut points"), std::string::npos) << count.message;

  // A name the model has not: the entry, the nearest name and what is expected.
  auto typo = parse_experiment("model: alexnet\nsplit: [1, feature.2]\n", "exp.yaml", false);
  ASSERT_TRUE(typo.ok());
  auto e = resolve_split_names(*typo, layers);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, Errc::config);
  EXPECT_NE(e.error().message.find("exp.yaml:2:8: split[1]: model 'alexnet' has no layer 'feature.2' (did you mean "
                                   "'features.2'?); expected a split point 0..4 or the name of a layer to cut after"),
            std::string::npos)
      << e.error().message;
  // Named twice (once by number), or out of order along a chain, once resolved.
  auto twice = parse_experiment("model: alexnet\nsplit: [3, features.2]\n", "exp.yaml", false);
  ASSERT_TRUE(twice.ok());
  e = resolve_split_names(*twice, layers);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("split[1]: split 3 is split[0] again, by name"), std::string::npos)
      << e.error().message;
  auto order = parse_experiment("model: alexnet\nchain: [edge, server]\nsplit: [[features.2, 1]]\n", "exp.yaml", false);
  ASSERT_TRUE(order.ok());
  e = resolve_split_names(*order, layers);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("split[0]: cut 1 comes after 3; expected non-decreasing"), std::string::npos)
      << e.error().message;
}

TEST(ExperimentConfig, BadCodecTextReportsCodecMessageWithPosition) {
  const std::string bad = "blosc-snappy";
  auto parsed = protocol::CodecSpec::parse(bad);
  ASSERT_FALSE(parsed.ok());
  Error e = experiment_error("model: alexnet\ncompression: " + bad + "\n");
  EXPECT_EQ(e.code, Errc::config);
  EXPECT_NE(
      e.message.find("exp.yaml:2:14: compression: invalid codec 'blosc-snappy': " + parsed.error().message),
      std::string::npos)
      << e.message;
  Error level = experiment_error("model: alexnet\ncompression: \"blosc-lz4:level=12\"\n");
  EXPECT_NE(level.message.find("exp.yaml:2:14: compression: invalid codec 'blosc-lz4:level=12'"),
            std::string::npos)
      << level.message;

  auto ok = parse_experiment("model: alexnet\ncompression: fp16+blosc-lz4\n", "exp.yaml", false);
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ(ok->compression, protocol::CodecSpec::parse("fp16+blosc-lz4")->name());
}

// `compression` takes a list, as `link` does: one run per codec.
TEST(ExperimentConfig, CompressionListKeepsEachCodecAndRefusesRepeats) {
  auto ok = parse_experiment("model: alexnet\ncompression: [none, int8+blosc-lz4, auto]\n", "exp.yaml", false);
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ(ok->compression_list, (std::vector<std::string>{"none", "int8+blosc-lz4", "auto"}));
  EXPECT_EQ(ok->compression, "none");  // the first, until the series sets each
  EXPECT_NE(format_settings(*ok).find("[none, int8+blosc-lz4, auto]"), std::string::npos) << format_settings(*ok);
  auto single = parse_experiment("model: alexnet\ncompression: [fp16]\n", "exp.yaml", false);
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(single->compression_list.empty());
  EXPECT_EQ(single->compression, "fp16");
  Error twice = experiment_error("model: alexnet\ncompression: [int8, none, int8]\n");
  EXPECT_NE(twice.message.find("exp.yaml:2:27: compression[2]: codec 'int8' is listed twice"), std::string::npos)
      << twice.message;
  Error bad = experiment_error("model: alexnet\ncompression: [none, blosc-snappy]\n");
  EXPECT_NE(bad.message.find("exp.yaml:2:21: compression[1]: invalid codec 'blosc-snappy'"), std::string::npos)
      << bad.message;
  Error empty = experiment_error("model: alexnet\ncompression: []\n");
  EXPECT_NE(empty.message.find("compression: an empty list"), std::string::npos) << empty.message;
}

TEST(ExperimentConfig, ModelListKeepsEachModelAndRefusesRepeatsAndOneWeightsFile) {
  auto ok = parse_experiment("model: [alexnet, resnet18]\n", "exp.yaml", false);
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ(ok->model_list, (std::vector<std::string>{"alexnet", "resnet18"}));
  EXPECT_EQ(ok->model, "alexnet");  // the first, until the series sets each
  EXPECT_NE(format_settings(*ok).find("[alexnet, resnet18]"), std::string::npos) << format_settings(*ok);
  auto single = parse_experiment("model: [vgg11]\n", "exp.yaml", false);
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(single->model_list.empty());
  EXPECT_EQ(single->model, "vgg11");
  Error twice = experiment_error("model: [alexnet, resnet18, alexnet]\n");
  EXPECT_NE(twice.message.find("exp.yaml:1:28: model[2]: model 'alexnet' is listed twice"), std::string::npos)
      << twice.message;
  Error empty = experiment_error("model: []\n");
  EXPECT_NE(empty.message.find("model: an empty list"), std::string::npos) << empty.message;
  Error blank = experiment_error("model: [alexnet, '']\n");
  EXPECT_NE(blank.message.find("model[1]"), std::string::npos) << blank.message;
  Error weights = experiment_error("model: [alexnet, resnet18]\nweights: w.pth\n");
  EXPECT_NE(weights.message.find("weights: one weights file for a list of 2 models"), std::string::npos)
      << weights.message;
}

// `input_size` takes a list of sizes (#20: a sweep over input sizes needed
// one experiment file per size); a list of ints stays one shape.
TEST(ExperimentConfig, InputSizeListKeepsEachSizeAndOneShapeStaysOne) {
  auto ok = parse_experiment("model: alexnet\ninput_size: [[3, 64, 64], 32, [1, 28, 28]]\n", "exp.yaml", false);
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ(ok->input_size_list,
            (std::vector<std::vector<int64_t>>{{3, 64, 64}, {3, 32, 32}, {1, 28, 28}}));
  EXPECT_EQ(ok->input_size, (std::vector<int64_t>{3, 64, 64}));  // the first, until the series sets each
  EXPECT_NE(format_settings(*ok).find("[[3, 64, 64], [3, 32, 32], [1, 28, 28]]"), std::string::npos)
      << format_settings(*ok);
  auto shape = parse_experiment("model: alexnet\ninput_size: [16, 64]\n", "exp.yaml", false);
  ASSERT_TRUE(shape.ok());
  EXPECT_TRUE(shape->input_size_list.empty());
  EXPECT_EQ(shape->input_size, (std::vector<int64_t>{16, 64}));
  auto single = parse_experiment("model: alexnet\ninput_size: [[3, 48, 48]]\n", "exp.yaml", false);
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(single->input_size_list.empty());
  EXPECT_EQ(single->input_size, (std::vector<int64_t>{3, 48, 48}));
  // A later layer (--set) with one size replaces the list.
  auto set = parse_experiment("model: alexnet\ninput_size: [[3, 64, 64], 32]\n", "exp.yaml", false, {"input_size=1,28,28"});
  ASSERT_TRUE(set.ok()) << set.error().str();
  EXPECT_TRUE(set->input_size_list.empty());
  EXPECT_EQ(set->input_size, (std::vector<int64_t>{1, 28, 28}));
  Error twice = experiment_error("model: alexnet\ninput_size: [[3, 32, 32], 64, 32]\n");
  EXPECT_NE(twice.message.find("exp.yaml:2:31: input_size[2]: input size [3, 32, 32] is listed twice"),
            std::string::npos)
      << twice.message;
  Error bad = experiment_error("model: alexnet\ninput_size: [[3, 32, 32], [3, 0, 5]]\n");
  EXPECT_NE(bad.message.find("input_size[1][1]"), std::string::npos) << bad.message;
  Error huge = experiment_error("model: alexnet\ninput_size: [[3, 32, 32], [3, 65536, 65536]]\n");
  EXPECT_NE(huge.message.find("values per sample"), std::string::npos) << huge.message;
}

TEST(ExperimentConfig, MissingFileIsIoError) {
  TempDir dir;
  auto r = load_experiment(dir.file("missing.yaml"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::io);
  EXPECT_NE(r.error().message.find("missing.yaml: experiment file does not exist"), std::string::npos)
      << r.error().message;
  auto d = load_experiment(dir.file(""));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, Errc::io);
}

TEST(ExperimentConfig, ExplicitDevicesFileMustExistDefaultOneMayNot) {
  TempDir dir;
  auto implicit = parse_experiment("model: alexnet\n", "exp.yaml", false);
  ASSERT_TRUE(implicit.ok());
  implicit->devices = dir.file("config/devices_config.yaml");  // the default path, absent
  auto d = load_experiment_devices(*implicit);
  ASSERT_TRUE(d.ok()) << d.error().str();
  EXPECT_TRUE(d->embedded);

  auto expl = parse_experiment("model: alexnet\ndevices: " + dir.file("lab.yaml") + "\n", "exp.yaml", false);
  ASSERT_TRUE(expl.ok());
  auto e = load_experiment_devices(*expl);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, Errc::io);
  EXPECT_NE(e.error().message.find("exp.yaml:2:10: devices: "), std::string::npos) << e.error().message;
}

TEST(ExperimentConfig, CheckFilesNamesTheKeyOfAMissingFile) {
  TempDir dir;
  auto r = parse_experiment("model: alexnet\nweights: " + dir.file("none.pt") + "\n", "exp.yaml", false);
  ASSERT_TRUE(r.ok());
  Status s = check_experiment_files(*r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::io);
  EXPECT_NE(s.error().message.find("exp.yaml:2:10: weights: '" + dir.file("none.pt") + "' does not exist"),
            std::string::npos)
      << s.error().message;
  dir.write("none.pt", "x");
  EXPECT_TRUE(check_experiment_files(*r).ok());
  // A device would be read forever: refused before anything starts (#24).
  for (const char* dev : {"/dev/zero", "/dev/urandom"}) {
    auto z = parse_experiment(std::string("model: alexnet\nweights: ") + dev + "\n", "exp.yaml", false);
    ASSERT_TRUE(z.ok());
    Status zs = check_experiment_files(*z);
    ASSERT_FALSE(zs.ok()) << dev;
    EXPECT_NE(zs.error().message.find(std::string("exp.yaml:2:10: weights: '") + dev +
                                      "' is not a regular file (a device, FIFO or socket)"),
              std::string::npos)
        << zs.error().message;
  }
  // A symlink loop is said as one, not as a missing file (#24).
  std::filesystem::create_symlink(dir.file("loop_b"), dir.file("loop_a"));
  std::filesystem::create_symlink(dir.file("loop_a"), dir.file("loop_b"));
  auto loop = parse_experiment("model: alexnet\nweights: " + dir.file("loop_a") + "\n", "exp.yaml", false);
  ASSERT_TRUE(loop.ok());
  Status ls = check_experiment_files(*loop);
  ASSERT_FALSE(ls.ok());
  EXPECT_NE(ls.error().message.find("exp.yaml:2:10: weights: '" + dir.file("loop_a") +
                                    "' cannot be looked up: a loop of symbolic links; expected an existing file"),
            std::string::npos)
      << ls.error().message;

  auto folder = parse_experiment(
      "model: alexnet\ndataset:\n  type: imagefolder\n  path: " + dir.file("imgs") + "\n", "exp.yaml", false);
  ASSERT_TRUE(folder.ok()) << folder.error().str();
  Status fs_ = check_experiment_files(*folder);
  ASSERT_FALSE(fs_.ok());
  EXPECT_NE(fs_.error().message.find("exp.yaml:4:9: dataset.path:"), std::string::npos)
      << fs_.error().message;
  // A folder without one image is refused here, not by the PARTICIPANT after
  // the agents started (#24); an image in any class subfolder, any case, will do.
  std::filesystem::create_directories(dir.file("imgs/cat"));
  dir.write("imgs/cat/notes.txt", "not an image");
  Status empty = check_experiment_files(*folder);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("exp.yaml:4:9: dataset.path: '" + dir.file("imgs") +
                                       "' holds no .jpg, .jpeg or .png file"),
            std::string::npos)
      << empty.error().message;
  dir.write("imgs/cat/a.PNG", "x");
  EXPECT_TRUE(check_experiment_files(*folder).ok());
}

TEST(ExperimentConfig, EnvironmentOverridesFileWithSameChecks) {
  NoSettingOverrides no_env;
  const std::string yaml = "model: alexnet\nwarmup: 3\nsplit: all\n";
  {
    ScopedEnv w("TRACR_WARMUP", "7");
    ScopedEnv s("TRACR_SPLIT", "[1, 2]");
    ScopedEnv c("TRACR_COMPRESSION", "int8+blosc-zstd:level=5,shuffle=bit");
    ScopedEnv o("TRACR_RECORD_LAYERS", "false");
    auto r = parse_experiment(yaml, "exp.yaml", true);
    ASSERT_TRUE(r.ok()) << r.error().str();
    EXPECT_EQ(r->warmup, 7);
    EXPECT_EQ(r->split.points(), (std::vector<int>{1, 2}));
    EXPECT_EQ(r->codec.lossy, protocol::Lossy::int8);
    EXPECT_FALSE(r->record.layers);
    EXPECT_EQ(r->pos_of("warmup").str(), "env TRACR_WARMUP");
    auto no_env = parse_experiment(yaml, "exp.yaml", false);
    ASSERT_TRUE(no_env.ok());
    EXPECT_EQ(no_env->warmup, 3);
  }
  {
    ScopedEnv bad("TRACR_REPETITIONS", "0");
    auto r = parse_experiment(yaml, "exp.yaml", true);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::config);
    EXPECT_NE(r.error().message.find("env TRACR_REPETITIONS: repetitions: expected an integer >= 1, got '0'"),
              std::string::npos)
        << r.error().message;
  }
}

TEST(ExperimentConfig, SetOverridesComeAfterFileAndEnvironmentWithSameChecks) {
  NoSettingOverrides no_env;
  const std::string yaml = "model: alexnet\nwarmup: 3\nsplit: all\n";
  {
    ScopedEnv w("TRACR_WARMUP", "7");
    auto r = parse_experiment(yaml, "exp.yaml", true, {"warmup=9", "split=[0, 2]", "dataset.type=synthetic"});
    ASSERT_TRUE(r.ok()) << r.error().str();
    EXPECT_EQ(r->warmup, 9) << "--set wins over the environment";
    EXPECT_EQ(r->split.points(), (std::vector<int>{0, 2}));
    EXPECT_EQ(r->pos_of("warmup").str(), "--set warmup=9");
    EXPECT_EQ(r->pos_of("split").str(), "--set split=[0, 2]");
    bool shown = false;
    for (const auto& v : describe_settings(*r))
      if (v.info.name == "warmup") shown = v.value == "9" && v.origin == "--set warmup=9";
    EXPECT_TRUE(shown) << format_settings(*r);
  }
  struct Bad {
    std::string set, expect;
  };
  for (const Bad& b : std::vector<Bad>{
           {"warmpu=1", "--set warmpu=1: unknown setting 'warmpu' (did you mean 'warmup'?); expected one of: name"},
           {"warmup=abc", "--set warmup=abc: warmup: expected"},
           {"repetitions=0", "--set repetitions=0: repetitions: expected an integer >= 1, got '0'"},
           {"=3", "--set =3: expected key=value"},
           {"warmup", "--set warmup: expected key=value"},
           {"dataset=synthetic", "--set dataset=synthetic: unknown setting 'dataset'"},
       }) {
    auto r = parse_experiment(yaml, "exp.yaml", false, {b.set});
    ASSERT_FALSE(r.ok()) << b.set;
    EXPECT_EQ(r.error().code, Errc::config) << b.set;
    EXPECT_NE(r.error().message.find(b.expect), std::string::npos) << b.set << ": " << r.error().message;
  }
}

// Agents parse the controller's to_yaml with the same parser: every shipped
// template and every dataset type must come back identical.
TEST(ExperimentConfig, EffectiveYamlOfEveryTemplateAndDatasetTypeRoundTrips) {
  std::vector<std::pair<std::string, std::string>> cases;
  for (const auto& e : fs::directory_iterator(source_dir() + "/config/experiments")) {
    std::ifstream f(e.path());
    cases.emplace_back(e.path().string(), std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()));
  }
  cases.emplace_back("synthetic", "model: alexnet\ncommands: [{at_frame: 3, set_split: 2}, {at_frame: 5, set_codec: fp16}, "
                                  "{at_frame: 6, pause_ms: 10}, {at_frame: 9, stop: true}]\n");
  cases.emplace_back("imagefolder", "model: alexnet\ndataset: {type: imagefolder, path: /tmp/imgs, class_names: /tmp/n.txt}\n");
  ASSERT_GE(cases.size(), 4u);
  for (const auto& [name, text] : cases) {
    auto r = parse_experiment(text, name, false);
    ASSERT_TRUE(r.ok()) << name << ": " << r.error().str();
    const std::string y = to_yaml(*r);
    auto back = parse_experiment(y, "effective.yaml", false);
    ASSERT_TRUE(back.ok()) << name << ": " << back.error().str() << "\n" << y;
    EXPECT_EQ(to_yaml(*back), y) << name;
    EXPECT_EQ(back->commands.size(), r->commands.size()) << name;
  }
}

// server.batch (#46): one map, both numbers checked, from the file, the
// environment and --set, and back through to_yaml.
TEST(ExperimentConfig, ServerBatchIsOneMapCheckedFromEverySource) {
  NoSettingOverrides no_env;
  auto d = parse_experiment("model: alexnet\n", "exp.yaml", false);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->server_batch.max, 1);
  EXPECT_EQ(d->server_batch.max_wait_ms, 0);
  auto r = parse_experiment("model: alexnet\nserver:\n  batch: {max: 8, max_wait_ms: 25}\n", "exp.yaml", false);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->server_batch.max, 8);
  EXPECT_EQ(r->server_batch.max_wait_ms, 25);
  auto back = parse_experiment(to_yaml(*r), "effective.yaml", false);
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(back->server_batch.max, 8);
  EXPECT_EQ(back->server_batch.max_wait_ms, 25);
  auto set = parse_experiment("model: alexnet\n", "exp.yaml", false, {"server.batch={max: 4}"});
  ASSERT_TRUE(set.ok()) << set.error().str();
  EXPECT_EQ(set->server_batch.max, 4);
  EXPECT_EQ(set->server_batch.max_wait_ms, 0);
  {
    ScopedEnv e("TRACR_SERVER_BATCH", "{max: 2, max_wait_ms: 5}");
    auto env = parse_experiment("model: alexnet\n", "exp.yaml", true);
    ASSERT_TRUE(env.ok()) << env.error().str();
    EXPECT_EQ(env->server_batch.max, 2);
    EXPECT_EQ(env->server_batch.max_wait_ms, 5);
  }
  struct Bad {
    std::string yaml, expect;
  };
  for (const Bad& b : std::vector<Bad>{
           {"server:\n  batch: 8\n", "exp.yaml:3:10: server.batch: expected a map {max: B (1..1024), max_wait_ms: W"},
           {"server:\n  batch: {max: 0}\n", "server.batch.max: expected an integer 1..1024 (frames per batch)"},
           {"server:\n  batch: {max: 4, max_wait_ms: -1}\n", "server.batch.max_wait_ms: expected an integer 0..60000"},
           {"server:\n  batch: {max: 4, wait: 1}\n", "server.batch.wait: unknown key (did you mean 'max_wait_ms'?)"},
           {"server:\n  bacth: {max: 4}\n", "did you mean 'batch'"},
       }) {
    auto e = parse_experiment("model: alexnet\n" + b.yaml, "exp.yaml", false);
    ASSERT_FALSE(e.ok()) << b.yaml;
    EXPECT_NE(e.error().str().find(b.expect), std::string::npos) << b.yaml << ": " << e.error().str();
  }
}

TEST(ExperimentConfig, EffectiveYamlRoundTrips) {
  auto r = parse_experiment(R"(model: "torchscript:/m/x.pt"
name: "odd: name #1"
input_size: [1, 28, 28]
dataset: {type: fashion_mnist, class_names: [a, "b, c", "true"], max_samples: 3, split: train}
split: [2, 1]
compression: "bf16+blosc-zlib:level=9"
encryption: false
chunk_bytes: 8192
probe: {chunk_bytes: 32KiB}
seed: 18446744073709551615
)",
                            "exp.yaml", false);
  ASSERT_TRUE(r.ok()) << r.error().str();
  const std::string y = to_yaml(*r);
  auto back = parse_experiment(y, "effective.yaml", false);
  ASSERT_TRUE(back.ok()) << back.error().str() << "\n" << y;
  EXPECT_EQ(to_yaml(*back), y);
  EXPECT_EQ(back->name, "odd: name #1");
  EXPECT_EQ(back->dataset.class_names, (std::vector<std::string>{"a", "b, c", "true"}));
  EXPECT_EQ(back->dataset.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(back->seed, 18446744073709551615ull);
  EXPECT_EQ(back->compression, r->compression);
  EXPECT_EQ(back->probe.chunk_bytes, 32 * 1024);
  auto dflt = parse_experiment("model: alexnet\n", "exp.yaml", false);
  ASSERT_TRUE(dflt.ok());
  auto dback = parse_experiment(to_yaml(*dflt), "effective.yaml", false);
  ASSERT_TRUE(dback.ok()) << dback.error().str();
  EXPECT_EQ(dback->probe.chunk_bytes, 0);  // auto survives the round trip
}

TEST(ExperimentConfig, SettingsTableCoversEverySettingOnce) {
  const auto& t = settings_table();
  std::set<std::string> names, envs;
  for (const auto& s : t) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_TRUE(envs.insert(s.env).second) << s.env;
    EXPECT_EQ(s.env.rfind("TRACR_", 0), 0u) << s.env;
    EXPECT_FALSE(s.type.empty()) << s.name;
    EXPECT_FALSE(s.default_value.empty()) << s.name;
    EXPECT_FALSE(s.description.empty()) << s.name;
  }
  for (const char* n : {"name",
                        "model",
                        "weights",
                        "input_size",
                        "dataset.type",
                        "dataset.path",
                        "dataset.class_names",
                        "dataset.max_samples",
                        "dataset.split",
                        "dataset.resize_size",
                        "dataset.interpolation",
                        "split",
                        "warmup",
                        "repetitions",
                        "batch_size",
                        "compression",
                        "encryption",
                        "key_exchange",
                        "chunk_bytes",
                        "inflight",
                        "heartbeat_timeout_ms",
                        "record.frames",
                        "record.layers",
                        "record.outputs",
                        "record.segments",
                        "num_classes",
                        "dataset.mean",
                        "dataset.std",
                        "output",
                        "devices",
                        "seed",
                        "granularity",
                        "optimize",
                        "dataset.resize_size",
                        "dataset.interpolation",
                        "on_participant_loss",
                        "lockstep",
                        "chain",
                        "plan_k",
                        "exits",
                        "exit_policy.measure",
                        "exit_policy.threshold",
                        "record.exit_confidences",
                        "server.batch"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(names.size(), 77u);

  auto r = parse_experiment("model: alexnet\nwarmup: 4\n", "exp.yaml", false);
  ASSERT_TRUE(r.ok());
  auto rows = describe_settings(*r);
  ASSERT_EQ(rows.size(), t.size());
  for (const auto& v : rows) {
    if (v.info.name == "warmup") {
      EXPECT_EQ(v.value, "4");
      EXPECT_EQ(v.origin, "exp.yaml:2:9");
    }
    if (v.info.name == "repetitions") {
      EXPECT_EQ(v.value, "5");
      EXPECT_EQ(v.origin, "default");
    }
  }
  const std::string text = format_settings(*r);
  EXPECT_NE(text.find("TRACR_WARMUP"), std::string::npos);
  EXPECT_NE(text.find("exp.yaml:2:9"), std::string::npos);
}

TEST(ExperimentConfig, DidYouMeanPicksCloseCandidatesOnly) {
  EXPECT_EQ(did_you_mean("warmpu", {"warmup", "model"}), "warmup");
  EXPECT_EQ(did_you_mean("Compresion", {"compression", "encryption"}), "compression");
  EXPECT_EQ(did_you_mean("pkey", {"host", "pkey_fp"}), "pkey_fp");
  EXPECT_EQ(did_you_mean("zzzzzz", {"host", "user"}), "");
}

TEST(ExperimentConfig, ASecondYamlDocumentIsAnErrorAtItsLine) {
  Error e = experiment_error("model: alexnet\nsplit: [1]\n---\nmodel: vgg16\nsplit: [3]\n");
  EXPECT_EQ(e.code, Errc::config);
  EXPECT_NE(e.message.find("exp.yaml:3:1: a second YAML document begins here ('---'); expected one experiment per file"),
            std::string::npos)
      << e.message;
  // The `---` may carry the document on its line; a document start before the first one is not a second one.
  Error inline_doc = experiment_error("---\nmodel: alexnet\n\n--- {model: vgg16}\n");
  EXPECT_NE(inline_doc.message.find("exp.yaml:4:1: a second YAML document"), std::string::npos) << inline_doc.message;
  // A lone trailing `---` (an empty document) holds nothing that could be lost.
  auto ok = parse_experiment("---\nmodel: alexnet\n---\n", "exp.yaml", false);
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ(ok->model, "alexnet");
  // The devices file too, from a real file.
  TempDir dir;
  auto d = load_devices(dir.write("devices.yaml", std::string(kPythonReadmeDevices) + "---\n" + kPythonReadmeDevices));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find(dir.file("devices.yaml") + ":17:1: a second YAML document begins here ('---'); "
                                   "expected one devices list per file"),
            std::string::npos)
      << d.error().message;
}

TEST(ExperimentConfig, RelativePathsInTheFileResolveAgainstItsDirectory) {
  NoSettingOverrides no_env;
  TempDir dir;
  const std::string exp = dir.write("lab/exp/e.yaml", R"(model: torchscript:models/net.pt
devices: ../devices.yaml
output: ../../results/r.db
weights: w/model.pt
dataset:
  type: imagefolder
  path: imgs
  class_names: names.txt
train:
  cuts: [1]
  checkpoint_dir: ckpt
  export: out/model.pt
)");
  dir.write("lab/devices.yaml", kPythonReadmeDevices);
  dir.write("lab/exp/models/net.pt", "x");
  dir.write("lab/exp/w/model.pt", "x");
  dir.write("lab/exp/names.txt", "a\nb\n");
  fs::create_directories(dir.file("lab/exp/imgs/a"));
  dir.write("lab/exp/imgs/a/x.png", "x");
  fs::create_directories(dir.file("elsewhere"));
  ScopedCwd cwd(dir.file("elsewhere"));  // tracrctl run from an unrelated directory
  auto r = load_experiment(exp);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->devices, dir.file("lab/devices.yaml"));
  EXPECT_EQ(r->output, dir.file("results/r.db"));
  EXPECT_EQ(r->weights, dir.file("lab/exp/w/model.pt"));
  EXPECT_EQ(r->dataset.path, dir.file("lab/exp/imgs"));
  EXPECT_EQ(r->dataset.class_names_file, dir.file("lab/exp/names.txt"));
  EXPECT_EQ(r->model, "torchscript:" + dir.file("lab/exp/models/net.pt"));
  // Paths on the devices stay as written.
  EXPECT_EQ(r->train.checkpoint_dir, "ckpt");
  EXPECT_EQ(r->train.export_path, "out/model.pt");
  // Everything it names is found although the current directory holds none of it.
  EXPECT_TRUE(check_experiment_files(*r).ok()) << check_experiment_files(*r).error().str();
  auto devs = load_experiment_devices(*r);
  ASSERT_TRUE(devs.ok()) << devs.error().str();
  EXPECT_FALSE(devs->embedded);

  // The experiment named by a relative path: the results stay relative (and normalised).
  {
    ScopedCwd in_lab(dir.file("lab"));
    auto rel = load_experiment("exp/e.yaml");
    ASSERT_TRUE(rel.ok()) << rel.error().str();
    EXPECT_EQ(rel->devices, "devices.yaml");
    EXPECT_EQ(rel->output, "../results/r.db");
    EXPECT_EQ(rel->weights, "exp/w/model.pt");
  }
  // A value from the environment is relative to the current directory, as typed in the shell.
  {
    ScopedEnv out("TRACR_OUTPUT", "mine.db");
    ScopedEnv w("TRACR_WEIGHTS", "w/other.pt");
    auto env = load_experiment(exp);
    ASSERT_TRUE(env.ok()) << env.error().str();
    EXPECT_EQ(env->output, "mine.db");
    EXPECT_EQ(env->weights, "w/other.pt");
    EXPECT_EQ(env->devices, dir.file("lab/devices.yaml"));
  }
  // Absolute and home paths are used as given.
  auto abs = load_experiment(dir.write("lab/exp/abs.yaml", "model: alexnet\noutput: /tmp/x.db\nweights: ~/w.pt\n"));
  ASSERT_TRUE(abs.ok()) << abs.error().str();
  EXPECT_EQ(abs->output, "/tmp/x.db");
  EXPECT_EQ(abs->weights, "~/w.pt");
  // Defaults are relative to the current directory.
  auto def = load_experiment(dir.write("lab/exp/def.yaml", "model: alexnet\n"));
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->output, "results/tracr.db");
  EXPECT_EQ(def->devices, "config/devices_config.yaml");
}

TEST(ExperimentConfig, ShowConfigNamesTheDevicesFileARunUses) {
  NoSettingOverrides no_env;
  TempDir dir;
  const std::string exp = dir.write("exp.yaml", "model: alexnet\n");
  auto devices_row = [](const ExperimentConfig& c) {
    for (const auto& v : describe_settings(c))
      if (v.info.name == "devices") return v;
    return SettingValue{};
  };
  {
    // No config/devices_config.yaml here: the embedded default, and the place looked in.
    ScopedCwd cwd(dir.file(""));
    auto r = load_experiment(exp);
    ASSERT_TRUE(r.ok());
    const auto v = devices_row(*r);
    EXPECT_EQ(v.value, "<embedded default>");
    EXPECT_NE(v.origin.find("config/devices_config.yaml not found from " + fs::current_path().string()),
              std::string::npos)
        << v.origin;
    EXPECT_NE(format_settings(*r).find("<embedded default>"), std::string::npos);
    EXPECT_TRUE(load_experiment_devices(*r)->embedded);
    // The effective YAML (what a run stores) says the setting was not set, and parses back so: the
    // same embedded default (run --again, #45; a path here would read back as a file that must exist).
    EXPECT_NE(to_yaml(*r).find("\ndevices: ~\n"), std::string::npos);
    auto back = parse_experiment(to_yaml(*r), "stored");
    ASSERT_TRUE(back.ok()) << back.error().str();
    EXPECT_FALSE(back->devices_explicit);
    EXPECT_TRUE(load_experiment_devices(*back)->embedded);
  }
  dir.write("config/devices_config.yaml", kPythonReadmeDevices);
  {
    ScopedCwd cwd(dir.file(""));
    auto r = load_experiment(exp);
    ASSERT_TRUE(r.ok());
    const auto v = devices_row(*r);
    EXPECT_EQ(v.value, "config/devices_config.yaml");
    EXPECT_EQ(v.origin, "default");
    EXPECT_FALSE(load_experiment_devices(*r)->embedded);
    // The default file the run loaded is stored by its path: run again, it must still be there.
    EXPECT_NE(to_yaml(*r).find("\ndevices: config/devices_config.yaml\n"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------
// Templates in config/

TEST(ConfigTemplates, DevicesTemplatesParse) {
  auto tmpl = load_devices(source_dir() + "/config/devices_template.yaml");
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().str();
  EXPECT_EQ(tmpl->server().transport, Transport::ssh);
  EXPECT_EQ(tmpl->participants().size(), 1u);

  auto local = load_devices(source_dir() + "/config/devices_local.yaml");
  ASSERT_TRUE(local.ok()) << local.error().str();
  auto embedded = load_devices_or_default("/nonexistent/devices_config.yaml");
  ASSERT_TRUE(embedded.ok());
  // The file is the embedded default written out.
  DevicesConfig a = *local, b = *embedded;
  a.source = b.source = "";
  a.embedded = b.embedded = false;
  EXPECT_EQ(a.to_json(), b.to_json());
}

TEST(ConfigTemplates, ExperimentTemplatesParse) {
  NoSettingOverrides no_env;
  int n = 0;
  for (const auto& e : fs::directory_iterator(source_dir() + "/config/experiments")) {
    if (e.path().extension() != ".yaml") continue;
    ++n;
    auto r = load_experiment(e.path().string());
    ASSERT_TRUE(r.ok()) << r.error().str();
    EXPECT_FALSE(r->model.empty());
  }
  EXPECT_GE(n, 2);
  auto q = load_experiment(source_dir() + "/config/experiments/quickstart.yaml");
  ASSERT_TRUE(q.ok()) << q.error().str();
  EXPECT_EQ(q->model, "alexnet");
  EXPECT_EQ(q->dataset.kind, DatasetKind::synthetic);
  EXPECT_TRUE(q->split.all);
  EXPECT_EQ(q->compression, "none");
  EXPECT_TRUE(q->encryption);
  auto f = load_experiment(source_dir() + "/config/experiments/fashion_mnist.yaml");
  ASSERT_TRUE(f.ok()) << f.error().str();
  EXPECT_EQ(f->dataset.kind, DatasetKind::fashion_mnist);
  EXPECT_EQ(f->dataset.split, "test");
}

// The templates name their devices files and databases relative to
// themselves: they work from the project root and from anywhere else.
TEST(ConfigTemplates, ExperimentTemplatesWorkFromAnyDirectory) {
  NoSettingOverrides no_env;
  TempDir elsewhere;
  for (const std::string& cwd : {source_dir(), elsewhere.file("")}) {
    ScopedCwd in(cwd);
    for (const auto& e : fs::directory_iterator(source_dir() + "/config/experiments")) {
      if (e.path().extension() != ".yaml") continue;
      const std::string name = e.path().filename().string();
      // From the root the README's command line: tracrctl run config/experiments/X.yaml
      const std::string arg = cwd == source_dir() ? "config/experiments/" + name : e.path().string();
      auto r = load_experiment(arg);
      ASSERT_TRUE(r.ok()) << arg << ": " << r.error().str();
      if (r->devices_explicit) {
        auto d = load_experiment_devices(*r);
        ASSERT_TRUE(d.ok()) << arg << " from " << cwd << ": " << d.error().str();
        EXPECT_FALSE(d->embedded);
      }
      // Every database lands in the project's results/.
      EXPECT_EQ(fs::weakly_canonical(fs::absolute(r->output)).parent_path(),
                fs::weakly_canonical(fs::path(source_dir()) / "results"))
          << arg << " from " << cwd << ": output " << r->output;
      if (cwd == source_dir()) {
        EXPECT_EQ(r->output.rfind("results/", 0), 0u) << arg << ": " << r->output;
      }
      // Weights a template names are the ones training writes under the project's results/.
      if (!r->weights.empty()) {
        EXPECT_EQ(fs::weakly_canonical(fs::absolute(r->weights)).parent_path(),
                  fs::weakly_canonical(fs::path(source_dir()) / "results"))
            << arg << " from " << cwd << ": weights " << r->weights;
      }
    }
  }
}

// Input shapes of any rank, in YAML and in `--set`'s comma form (issue #20:
// `--set input_size=1,28,28` was refused).
TEST(ExperimentConfig, InputSizeTakesAnyRankAndTheCommaForm) {
  NoSettingOverrides no_env;
  auto parse = [](const std::string& text, std::vector<std::string> sets = {}) {
    return parse_experiment(text, "exp.yaml", false, sets);
  };
  auto feats = parse("model: m\ninput_size: [4]\n");
  ASSERT_TRUE(feats.ok()) << feats.error().str();
  EXPECT_EQ(feats->input_size, (std::vector<int64_t>{4}));
  auto tokens = parse("model: m\ninput_size: [16, 64]\n");
  ASSERT_TRUE(tokens.ok()) << tokens.error().str();
  EXPECT_EQ(tokens->input_size, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(parse("model: m\ninput_size: 160\n")->input_size, (std::vector<int64_t>{3, 160, 160}));
  auto set = parse("model: m\n", {"input_size=1,28,28"});
  ASSERT_TRUE(set.ok()) << set.error().str();
  EXPECT_EQ(set->input_size, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(parse("model: m\n", {"input_size=[12, 32]"})->input_size, (std::vector<int64_t>{12, 32}));
  EXPECT_EQ(parse("model: m\n", {"input_size=4, 2"})->input_size, (std::vector<int64_t>{4, 2}));
  // The effective YAML says the same shape.
  auto back = parse(to_yaml(*tokens));
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(back->input_size, tokens->input_size);
  for (const std::string bad : {"1,,28", "1,28,", "1,0,28", "1,x,28", "1,2,3,4,5,6,7,8,9"}) {
    auto r = parse("model: m\n", {"input_size=" + bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("--set input_size=" + bad + ": input_size: expected a positive int"),
              std::string::npos)
        << r.error().message;
  }
  auto zero = parse("model: m\ninput_size: [4, 0]\n");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("input_size[1]: expected a positive int"), std::string::npos)
      << zero.error().message;
  // The limits are named (#24: [3,100000,100000] was refused without them).
  auto huge = parse("model: m\ninput_size: [3, 100000, 100000]\n");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message.find("exp.yaml:2:17: input_size[1]: expected a positive int up to 65536, got '100000'"),
            std::string::npos)
      << huge.error().message;
  for (const auto& [text, where] : std::vector<std::pair<std::string, std::string>>{
           {"input_size: [3, 60000, 60000]", "exp.yaml:2:13"},
           {"input_size: 20000", "exp.yaml:2:13"},
           {"input_size: 3,20000,20000", "exp.yaml:2:13"}}) {
    auto big = parse("model: m\n" + text + "\n");
    ASSERT_FALSE(big.ok()) << text;
    EXPECT_NE(big.error().message.find(where + ": input_size: "), std::string::npos) << big.error().message;
    EXPECT_NE(big.error().message.find(" values per sample; expected at most 268435456 (one frame carries at most "
                                       "1 GiB of tensor bytes"),
              std::string::npos)
        << big.error().message;
  }
  EXPECT_NE(parse("model: m\ninput_size: [3, 60000, 60000]\n").error().message.find("[3, 60000, 60000] is 10800000000 values"),
            std::string::npos);
  EXPECT_TRUE(parse("model: m\ninput_size: [3, 8192, 8192]\n").ok());
}

TEST(ExperimentConfig, ResizeSizeAndInterpolationAreImageDatasetSettings) {
  NoSettingOverrides no_env;
  auto parse = [](const std::string& text) { return parse_experiment(text, "exp.yaml", false); };
  auto def = parse("model: m\ndataset: {type: imagefolder, path: /tmp/i}\n");
  ASSERT_TRUE(def.ok()) << def.error().str();
  EXPECT_EQ(def->dataset.resize_size, 0);
  EXPECT_EQ(def->dataset.interpolation, "bilinear");
  auto r = parse("model: m\ndataset: {type: imagefolder, path: /tmp/i, resize_size: 232, interpolation: bicubic}\n");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->dataset.resize_size, 232);
  EXPECT_EQ(r->dataset.interpolation, "bicubic");
  auto back = parse(to_yaml(*r));
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(back->dataset.resize_size, 232);
  EXPECT_EQ(back->dataset.interpolation, "bicubic");
  EXPECT_TRUE(parse("model: m\ndataset: {type: fashion_mnist, interpolation: nearest}\n").ok());
  struct Bad {
    std::string text, expect;
  };
  for (const Bad& b : std::vector<Bad>{
           {"model: m\ndataset: {type: imagefolder, path: /i, interpolation: lanczos}\n",
            "dataset.interpolation: expected one of bilinear | bicubic | nearest, got 'lanczos'"},
           {"model: m\ndataset: {type: imagefolder, path: /i, resize_size: -1}\n", "dataset.resize_size: expected"},
           {"model: m\ndataset: {type: fashion_mnist, resize_size: 32}\n",
            "dataset.resize_size: applies to type: imagefolder only"},
           {"model: m\ndataset: {interpolation: bicubic}\n",
            "dataset.interpolation: applies to image datasets; expected no dataset.interpolation for type: synthetic"},
       }) {
    auto e = parse(b.text);
    ASSERT_FALSE(e.ok()) << b.text;
    EXPECT_NE(e.error().message.find(b.expect), std::string::npos) << b.text << "\n" << e.error().message;
  }
}

TEST(ExperimentConfig, DatasetNormalizationDefaultsAndChecks) {
  NoSettingOverrides no_env;
  auto parse = [](const std::string& text) { return parse_experiment(text, "exp.yaml", false); };
  // Defaults: ImageNet's per channel for 3 channels, Fashion-MNIST's statistics for it.
  auto img = parse("model: alexnet\ndataset: {type: imagefolder, path: /tmp/i}\n");
  ASSERT_TRUE(img.ok()) << img.error().str();
  auto n = dataset_normalization(*img, 3);
  ASSERT_TRUE(n.ok()) << n.error().str();
  EXPECT_EQ(n->mean, (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(n->std, (std::vector<double>{0.229, 0.224, 0.225}));
  // A 1-channel image folder has no default: named, with the key's position when written.
  auto gray = dataset_normalization(*img, 1);
  ASSERT_FALSE(gray.ok());
  EXPECT_EQ(gray.error().code, Errc::config);
  EXPECT_NE(gray.error().message.find("dataset.mean: no default for an image folder read as 1 channel"),
            std::string::npos)
      << gray.error().message;
  auto fm = parse("model: fmnist_cnn\ndataset: {type: fashion_mnist}\n");
  ASSERT_TRUE(fm.ok());
  EXPECT_EQ(dataset_normalization(*fm, 1)->mean, (std::vector<double>{0.2860}));
  // Given values: a number or a list, round-tripping through the effective YAML.
  auto given = parse("model: fmnist_cnn\ndataset:\n  type: imagefolder\n  path: /tmp/i\n  mean: 0.286\n  std: [0.353]\n");
  ASSERT_TRUE(given.ok()) << given.error().str();
  auto g = dataset_normalization(*given, 1);
  ASSERT_TRUE(g.ok()) << g.error().str();
  EXPECT_EQ(g->mean, (std::vector<double>{0.286}));
  EXPECT_EQ(g->std, (std::vector<double>{0.353}));
  auto back = parse(to_yaml(*given));
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(back->dataset.mean, given->dataset.mean);
  EXPECT_EQ(back->dataset.std, given->dataset.std);
  // Counts that do not fit the channels, or a mean without its std.
  auto three = parse("model: alexnet\ndataset:\n  type: imagefolder\n  path: /tmp/i\n  mean: [0.5, 0.5]\n  std: [0.2, 0.2]\n");
  ASSERT_TRUE(three.ok());
  auto bad = dataset_normalization(*three, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("exp.yaml:5:9: dataset.mean: 2 values for an input of 3 channels; expected 1 or 3"),
            std::string::npos)
      << bad.error().message;
  auto alone = parse("model: alexnet\ndataset: {type: imagefolder, path: /tmp/i, mean: 0.5}\n");
  ASSERT_TRUE(alone.ok());
  EXPECT_NE(dataset_normalization(*alone, 3).error().message.find("dataset.std is missing"), std::string::npos);
  // Value errors name the entry.
  auto zero = parse("model: alexnet\ndataset:\n  std: [0.2, 0, 0.2]\n");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("dataset.std[1]: expected a number > 0"), std::string::npos)
      << zero.error().message;
}

TEST(ConfigTemplates, ReadmeDocumentsEverySetting) {
  std::ifstream in(source_dir() + "/config/README.md");
  ASSERT_TRUE(in.good());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& s : settings_table()) {
    EXPECT_NE(text.find("`" + s.name + "`"), std::string::npos) << s.name << " is not documented";
    EXPECT_NE(text.find(s.env), std::string::npos) << s.env << " is not documented";
  }
  for (const char* k :
       {"device_type", "connection_params", "host", "user", "pkey_fp", "port", "ssh_port", "default",
        "transport", "work_dir", "name", "power_model", "link_profile", "split_inference_network"})
    EXPECT_NE(text.find(std::string("`") + k), std::string::npos) << k << " is not documented";
}

}  // namespace
}  // namespace tracr::settings

namespace tracr::settings {
namespace {
TEST(TrainSettings, SegmentsCutsAndOwnerAreCheckedWithPositions) {
  auto ok = parse_experiment(
      "model: fmnist_cnn\ntrain:\n  cuts: [3, 7]\n  segments: [owner, server, owner]\n  optimizer: sgd\n  lr: 0.05\n",
      "t.yaml", false);
  ASSERT_TRUE(ok) << ok.error().str();
  EXPECT_EQ(ok->train.cuts, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(ok->train.segments.size(), 3u);
  EXPECT_EQ(ok->train.optimizer, "sgd");
  EXPECT_DOUBLE_EQ(ok->train.lr, 0.05);
  // The effective YAML parses back to the same training settings.
  auto back = parse_experiment(to_yaml(*ok), "back.yaml", false);
  ASSERT_TRUE(back) << back.error().str();
  EXPECT_EQ(back->train.cuts, ok->train.cuts);
  EXPECT_EQ(back->train.segments, ok->train.segments);
  EXPECT_DOUBLE_EQ(back->train.lr, 0.05);

  auto count = parse_experiment("model: m\ntrain:\n  cuts: [3]\n  segments: [owner, a, owner]\n", "t.yaml", false);
  ASSERT_FALSE(count);
  EXPECT_NE(count.error().message.find("expected one per segment: 2"), std::string::npos) << count.error().str();
  EXPECT_NE(count.error().message.find("t.yaml:4"), std::string::npos) << count.error().str();
  // Segment 0 off the owner is refused against the devices file (plan_training,
  // tests/controller/test_train_layout.cpp): with one owner its device name is
  // the owner too.
  EXPECT_TRUE(parse_experiment("model: m\ntrain:\n  cuts: [3]\n  segments: [pi, owner]\n", "t.yaml", false));
  auto order = parse_experiment("model: m\ntrain:\n  cuts: [5, 5]\n", "t.yaml", false);
  ASSERT_FALSE(order);
  EXPECT_NE(order.error().message.find("strictly increasing"), std::string::npos) << order.error().str();
  auto lr = parse_experiment("model: m\ntrain:\n  lr: 0\n", "t.yaml", false);
  ASSERT_FALSE(lr);
  EXPECT_NE(lr.error().message.find("> 0"), std::string::npos) << lr.error().str();
  auto opt = parse_experiment("model: m\ntrain:\n  optimizer: rmsprop\n", "t.yaml", false);
  ASSERT_FALSE(opt);
}
// The default each setting documents (settings_table, --show-config, the
// config README) is the value a default ExperimentConfig shows: a default
// changed in the struct without its text (or the reverse) fails here. A
// documented default may add a gloss in parentheses ("~ (none)"); the few
// that depend on the file (name) or are required (model) say so in angle
// brackets or "(required)".
TEST(ExperimentConfig, EveryDocumentedDefaultIsTheStructsDefault) {
  auto cfg = parse_experiment("model: alexnet\n", "<memory>", false);
  ASSERT_TRUE(cfg) << cfg.error().message;
  int compared = 0;
  for (const auto& s : describe_settings(*cfg)) {
    if (s.origin != "default") continue;  // model, set above
    const std::string& doc = s.info.default_value;
    if (doc.front() == '<' || doc == "(required)") continue;
    const bool same = doc == s.value || doc.rfind(s.value + " (", 0) == 0;
    EXPECT_TRUE(same) << s.info.name << ": documented default '" << doc << "', the struct's '" << s.value << "'";
    ++compared;
  }
  EXPECT_GT(compared, 60);  // every setting but name and model
}

}  // namespace
}  // namespace tracr::settings

namespace tracr::settings {
namespace {

// Two SERVER devices (edge, cloud) and two PARTICIPANTs (phone, cam): not a
// two-tier devices file, but a chain names its roles.
constexpr const char* kChainDevices = R"(devices:
  - {device_type: PARTICIPANT, name: phone, connection_params: [{host: 127.0.0.1}], transport: local}
  - {device_type: SERVER, name: edge, connection_params: [{host: 127.0.0.1}], transport: local}
  - {device_type: SERVER, name: cloud, connection_params: [{host: 127.0.0.1}], transport: local}
  - {device_type: PARTICIPANT, name: cam, connection_params: [{host: 127.0.0.1}], transport: local}
)";

Result<DevicesConfig> chain_devices(const TempDir& dir, const std::string& chain) {
  const std::string dev = dir.write("devices.yaml", kChainDevices);
  auto cfg = parse_experiment("model: alexnet\ndevices: " + dev + "\nchain: " + chain + "\n", "exp.yaml", false);
  if (!cfg) return cfg.error();
  return load_experiment_devices(*cfg);
}

TEST(Chain, DevicesTakeTheirRolesFromTheChain) {
  TempDir dir;
  // Without a chain the file is refused as today: two SERVERs.
  {
    const std::string dev = dir.write("devices.yaml", kChainDevices);
    auto cfg = parse_experiment("model: alexnet\ndevices: " + dev + "\n", "exp.yaml", false);
    ASSERT_TRUE(cfg.ok());
    auto d = load_experiment_devices(*cfg);
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message.find("expected exactly one device with device_type: SERVER, found 2"),
              std::string::npos);
  }
  auto two = chain_devices(dir, "[edge, cloud]");
  ASSERT_TRUE(two.ok()) << two.error().str();
  EXPECT_EQ(two->chain, (std::vector<std::string>{"edge", "cloud"}));
  EXPECT_EQ(two->server().name, "cloud");
  ASSERT_EQ(two->participants().size(), 2u);
  EXPECT_EQ(two->participants()[0]->name, "phone");
  EXPECT_EQ(two->participants()[1]->name, "cam");

  // One device, of PARTICIPANT type: cam serves; the SERVER devices outside the chain take no part.
  auto one = chain_devices(dir, "[cam]");
  ASSERT_TRUE(one.ok()) << one.error().str();
  EXPECT_EQ(one->server().name, "cam");
  ASSERT_EQ(one->participants().size(), 1u);
  EXPECT_EQ(one->participants()[0]->name, "phone");
  EXPECT_EQ(one->find("edge"), nullptr);
  EXPECT_EQ(one->find("cloud"), nullptr);

  auto unknown = chain_devices(dir, "[edge, clowd]");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("chain[1]: device 'clowd' is not in devices file"), std::string::npos)
      << unknown.error().message;
  EXPECT_NE(unknown.error().message.find("expected one of its devices (phone, edge, cloud, cam)"), std::string::npos);

  auto everyone = chain_devices(dir, "[phone, cam, cloud]");
  ASSERT_FALSE(everyone.ok());
  EXPECT_NE(everyone.error().message.find("chain: takes every PARTICIPANT of devices file"), std::string::npos)
      << everyone.error().message;
}

}  // namespace
}  // namespace tracr::settings
