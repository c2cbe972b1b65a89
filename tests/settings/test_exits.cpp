// Early exits in the experiment file (#44): exits, exit_policy and
// record.exit_confidences read, shown, read back, and refused with the
// position and what was expected. The checks that need the model (layers,
// heads) are in tests/system/test_exits.cpp.
#include <gtest/gtest.h>

#include <string>

#include "settings/config.hpp"

namespace tracr::settings {
namespace {

TEST(ExitSettings, ExitsAndThePolicyAreReadShownAndReadBack) {
  auto c = parse_experiment("model: fmnist_cnn\noutput: res/x.db\nexits:\n  - {after: pool1}\n"
                            "  - {after: 5, head: 'torchscript:/tmp/e.pt'}\n"
                            "exit_policy: {measure: entropy, threshold: [0.5, 0.7]}\n"
                            "record: {exit_confidences: false}\n",
                            "e.yaml", false);
  ASSERT_TRUE(c) << c.error().str();
  ASSERT_EQ(c->exits.size(), 2u);
  EXPECT_EQ(c->exits[0].after, "pool1");
  EXPECT_EQ(c->exits[0].head, "linear");
  EXPECT_EQ(c->exits[1].after, "5");
  EXPECT_EQ(c->exits[1].file, "/tmp/e.pt");
  EXPECT_EQ(c->exit_policy.measure, "entropy");
  EXPECT_EQ(c->exit_policy.threshold, 0.5);
  EXPECT_EQ(c->exit_policy.threshold_list, (std::vector<double>{0.5, 0.7}));
  EXPECT_FALSE(c->record.exit_confidences);
  // A linear head's file: as written, else beside the database.
  EXPECT_EQ(exit_head_file(*c, 0), "res/exits/fmnist_cnn.pool1.pt");
  EXPECT_EQ(exit_head_file(*c, 1), "/tmp/e.pt");
  auto back = parse_experiment(to_yaml(*c), "back.yaml", false);
  ASSERT_TRUE(back) << back.error().str() << "\n" << to_yaml(*c);
  EXPECT_EQ(back->exits.size(), 2u);
  EXPECT_EQ(back->exits[1].head, "torchscript:/tmp/e.pt");
  EXPECT_EQ(back->exit_policy.threshold_list, c->exit_policy.threshold_list);
  EXPECT_EQ(back->exit_policy.measure, "entropy");
  EXPECT_FALSE(back->record.exit_confidences);
  // Defaults: no exits, max_softmax at 0.9, confidences recorded.
  auto d = parse_experiment("model: alexnet\n", "d.yaml", false);
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->exits.empty());
  EXPECT_EQ(d->exit_policy.measure, "max_softmax");
  EXPECT_EQ(d->exit_policy.threshold, 0.9);
  EXPECT_TRUE(d->record.exit_confidences);
}

TEST(ExitSettings, BadEntriesAreNamedWithTheirPositionAndWhatWasExpected) {
  auto bad = [](const std::string& yaml, const std::string& expect) {
    auto c = parse_experiment("model: fmnist_cnn\n" + yaml, "b.yaml", false);
    ASSERT_FALSE(c) << yaml;
    EXPECT_NE(c.error().message.find(expect), std::string::npos) << yaml << "\n" << c.error().message;
  };
  bad("exits: [pool1]\n", "exits[0]");
  bad("exits: [{head: linear}]\n", "exits[0].after: missing");
  bad("exits: [{after: pool1}, {after: pool1}]\n", "has an exit already");
  bad("exits: [{after: pool1, head: mlp}]\n", "expected linear (trained by `tracrctl train`) or torchscript:<path>");
  bad("exits: [{after: pool1, head: 'torchscript:a.pt', file: b.pt}]\n", "is for head: linear only");
  bad("exits: [{after: pool1, size: 3}]\n", "size");
  bad("exits: []\n", "exits");
  bad("exit_policy: {threshold: 1.5}\n", "exit_policy.threshold");
  bad("exit_policy: {threshold: [0.5, 0.5]}\n", "listed twice");
  bad("exit_policy: {measure: margin}\n", "exit_policy.measure");
  bad("exits: [{after: pool1}]\nbatch_size: 4\n", "expected batch_size: 1");
}

}  // namespace
}  // namespace tracr::settings
