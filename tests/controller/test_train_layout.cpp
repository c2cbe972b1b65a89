// plan_training (#24, "training layouts"): train.segments against the devices
// file, before any agent starts. With one data owner its device name means
// `owner`; segment 0 must be on the owner.
#include <gtest/gtest.h>

#include "controller/commands/train.hpp"

using tracr::controller::plan_training;
using namespace tracr::settings;

namespace {

DevicesConfig devices(int owners) {
  std::string y = "devices:\n  - {device_type: SERVER, name: gpu, transport: local}\n";
  for (int k = 0; k < owners; ++k) y += "  - {device_type: PARTICIPANT, name: pi" + std::to_string(k + 1) + ", transport: local}\n";
  auto d = parse_devices(y, "devices.yaml");
  EXPECT_TRUE(d.ok()) << d.error().str();
  return *d;
}

ExperimentConfig training(const std::string& segments, const std::string& owners = "") {
  auto c = parse_experiment("model: fmnist_cnn\ntrain:\n  cuts: [3, 8]\n  segments: " + segments + "\n" +
                                (owners.empty() ? "" : "  owners: " + owners + "\n"),
                            "t.yaml", false);
  EXPECT_TRUE(c.ok()) << c.error().str();
  return *c;
}

}  // namespace

TEST(TrainLayout, TheOnlyOwnersDeviceNameMeansOwner) {
  const auto devs = devices(1);
  auto l = plan_training(training("[pi1, gpu, pi1]"), devs);
  ASSERT_TRUE(l.ok()) << l.error().str();
  EXPECT_EQ(l->segment_device, (std::vector<std::string>{"owner", "gpu", "owner"}));
  ASSERT_EQ(l->workers.size(), 1u);
  EXPECT_EQ(l->workers[0].first->name, "gpu");
  EXPECT_TRUE(l->warnings.empty());
}

TEST(TrainLayout, SegmentZeroOffTheOwnerIsRefusedNamingTheSetting) {
  auto l = plan_training(training("[gpu, gpu, owner]"), devices(1));
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message.find("t.yaml:4:13: train.segments[0]: 'gpu' is not a data owner; expected owner or "
                                   "'pi1' (segment 0 reads the raw data"),
            std::string::npos)
      << l.error().message;
  // With several owners only `owner` names them all.
  auto two = plan_training(training("[pi1, gpu, owner]", "[pi1, pi2]"), devices(2));
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().message.find("train.segments[0]: 'pi1' is one of several data owners; write 'owner'"),
            std::string::npos)
      << two.error().message;
}
