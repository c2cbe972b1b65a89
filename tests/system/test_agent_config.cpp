// Agents get the effective experiment over the authenticated control channel
// and parse it with the controller's own parser: the same names, limits and
// messages on both sides, no argv rebuilt field by field.
#include "fleet/launcher.hpp"
#include "settings/config.hpp"
#include "system/system_util.hpp"

using namespace tracr;
using namespace tracr::fleet;
using namespace tracr::testing;

namespace {

Result<wire::ControlMsg> start_participant(const std::string& yaml, std::unique_ptr<AgentConn>* keep) {
  static const settings::DeviceConfig local = local_device("participant");
  LaunchSpec ls;
  ls.device = &local;
  ls.role = tracr::wire::AgentRole::participant;
  ls.args = {"--in-process"};
  ls.agent_path = std::string(TRACR_BIN_DIR) + "/tracr-agent";
  ls.secret = std::vector<uint8_t>(32, 7);
  ls.config_yaml = yaml;
  auto conn = launch_agent(ls);
  if (!conn) return std::move(conn.error());
  auto ready = (*conn)->wait_ready(120000);
  *keep = std::move(*conn);
  return ready;
}

}  // namespace

TEST(AgentConfig, ParticipantRejectsWhatTheControllerWouldWithTheSameMessage) {
  const std::string yaml = "model: alexnet\ninput_size: [3, 64, 64]\ninflight: 100\n";
  auto ctl = settings::parse_experiment(yaml, "CONFIG from the controller", false);
  ASSERT_FALSE(ctl.ok());
  std::unique_ptr<AgentConn> a;
  auto r = start_participant(yaml, &a);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::remote);
  // The agent's FAIL carries the settings parser's own message, position included.
  EXPECT_NE(r.error().message.find(ctl.error().message), std::string::npos)
      << "agent: " << r.error().message << "\ncontroller: " << ctl.error().message;
  a->stop(3000);
}

TEST(AgentConfig, ParticipantRunsTheExperimentItWasSent) {
  TempDir d;
  // Everything the participant does comes from this YAML: splits, warm-up,
  // repetitions, codec, batch, class names given as a list.
  const std::string yaml =
      "model: alexnet\ninput_size: [3, 64, 64]\nsplit: [3, 7]\nwarmup: 1\nrepetitions: 2\nbatch_size: 2\n"
      "compression: fp16\nrecord: {layers: false}\n"
      "dataset: {type: synthetic, max_samples: 4}\n";
  std::unique_ptr<AgentConn> a;
  auto ready = start_participant(yaml, &a);
  ASSERT_TRUE(ready.ok()) << ready.error().str();
  std::map<std::string, int> per_split;
  int warmups = 0;
  std::set<std::string> codecs, batches;
  for (int i = 0; i < 1000; ++i) {
    auto line = a->proc().read_line(60000);
    ASSERT_TRUE(line.ok()) << line.error().str();
    auto m = a->decode(*line);
    ASSERT_TRUE(m.ok()) << m.error().str();
    if (m->kind == "DONE") break;
    ASSERT_NE(m->kind, "FAIL") << m->get_or("error", "");
    if (m->kind != "FRAME") continue;
    if (m->get_or("warmup", "") == "1") ++warmups;
    else per_split[m->get_or("split", "?")]++;
    codecs.insert(m->get_or("codec", ""));
    batches.insert(m->get_or("batch", ""));
  }
  EXPECT_EQ(per_split, (std::map<std::string, int>{{"3", 4}, {"7", 4}}));  // 2 batches x 2 passes each
  EXPECT_EQ(warmups, 2);
  EXPECT_EQ(codecs, std::set<std::string>{"fp16"});
  EXPECT_EQ(batches, std::set<std::string>{"2"});
  a->stop(3000);
}
