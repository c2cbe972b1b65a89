// Placements (wire/placement.hpp) and the experiment's `chain`: the text form
// and its checks, the count and enumeration `split: all` sweeps, chain
// entries read, shown and read back, split entries checked against the
// chain's length (the devices' roles from the chain: test_config.cpp,
// Chain.DevicesTakeTheirRolesFromTheChain).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "settings/config.hpp"
#include "wire/placement.hpp"

namespace tracr::settings {
namespace {

using wire::Placement;

// C(n, k) by Pascal's triangle: an independent count for placement_count.
uint64_t pascal(int n, int k) {
  std::vector<std::vector<uint64_t>> c(n + 1, std::vector<uint64_t>(n + 1, 0));
  for (int i = 0; i <= n; ++i) {
    c[i][0] = 1;
    for (int j = 1; j <= i; ++j) c[i][j] = c[i - 1][j - 1] + c[i - 1][j];
  }
  return c[n][k];
}

TEST(Placement, TextRoundTripsAndBadTextIsNamed) {
  auto p = wire::parse_placement("3|13");
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->cuts, (std::vector<int>{3, 13}));
  EXPECT_EQ(p->text(), "3|13");
  EXPECT_EQ(wire::parse_placement("7")->text(), "7");
  for (const char* bad : {"", "3|", "|3", "a|3", "3||4", "-1", "3|1x"}) {
    auto e = wire::parse_placement(bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.error().code, Errc::invalid_argument);
    EXPECT_NE(e.error().message.find(std::string("placement '") + bad + "'"), std::string::npos) << e.error().message;
  }
}

TEST(Placement, SegmentsCoverTheModelAndChecksNameTheFault) {
  const Placement p{{3, 13}, {}};
  EXPECT_EQ(p.segment(0, 22), std::make_pair(0, 3));
  EXPECT_EQ(p.segment(1, 22), std::make_pair(3, 13));
  EXPECT_EQ(p.segment(2, 22), std::make_pair(13, 22));
  EXPECT_TRUE(wire::check_placement(p, 22).ok());
  EXPECT_TRUE(wire::check_placement(Placement{{5, 5}, {}}, 22).ok());  // an empty middle segment forwards
  EXPECT_TRUE(wire::check_placement(Placement{{0, 22}, {"p", "edge", "cloud"}}, 22).ok());
  const std::pair<Placement, std::string> bad[] = {
      {Placement{{}, {}}, "placement []: no cut points"},
      {Placement{{13, 3}, {}}, "placement 13|3: cut 3 comes after 13; expected non-decreasing"},
      {Placement{{3, 23}, {}}, "placement 3|23: cut 23 is outside 0..22 (a model of 22 layers)"},
      {Placement{{3, 13}, {"p", "edge"}}, "2 devices for 3 segments"},
  };
  for (const auto& [pl, want] : bad) {
    auto st = wire::check_placement(pl, 22);
    ASSERT_FALSE(st.ok()) << want;
    EXPECT_NE(st.error().message.find(want), std::string::npos) << st.error().message;
  }
}

TEST(Placement, AllPlacementsAreEveryNonDecreasingTupleOnce) {
  for (int n : {0, 1, 5, 22}) {
    for (size_t m : {1u, 2u, 3u}) {
      const auto all = wire::all_placements(m, n);
      EXPECT_EQ(all.size(), pascal(n + static_cast<int>(m), static_cast<int>(m))) << n << " " << m;
      EXPECT_EQ(wire::placement_count(m, n), all.size()) << n << " " << m;
      std::set<std::vector<int>> seen;
      for (size_t i = 0; i < all.size(); ++i) {
        EXPECT_TRUE(wire::check_placement(all[i], n).ok()) << all[i].text();
        EXPECT_TRUE(seen.insert(all[i].cuts).second) << all[i].text();
        if (i > 0) {
          EXPECT_TRUE(all[i - 1] < all[i]) << all[i - 1].text() << " then " << all[i].text();
        }
      }
    }
  }
  // AlexNet's 22 layers over two hops: the 276 pairs the chain tests sweep.
  EXPECT_EQ(wire::placement_count(2, 22), 276u);
  // A count beyond 64 bits saturates instead of wrapping.
  EXPECT_EQ(wire::placement_count(60, 1000000), UINT64_MAX);
}

Error experiment_error(const std::string& yaml) {
  auto r = parse_experiment(yaml, "exp.yaml", false);
  if (r.ok()) return make_error(Errc::internal, "parsed: " + yaml);
  return r.error();
}

TEST(Chain, EntriesAreReadShownAndReadBack) {
  auto r = parse_experiment(
      "model: alexnet\nlink: lte\ncompression: fp16\n"
      "chain: [{device: edge, link: wifi, compression: int8}, cloud]\nsplit: [[3, 13], [0, 22]]\n",
      "exp.yaml", false);
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->chain.size(), 2u);
  EXPECT_EQ(r->chain[0].device, "edge");
  EXPECT_EQ(r->chain[0].link, "wifi");
  EXPECT_EQ(r->chain[0].compression, "int8");
  EXPECT_EQ(r->chain[1].device, "cloud");
  EXPECT_EQ(r->chain[1].link, "");  // the top-level link applies
  EXPECT_EQ(chain_hops(*r), 2u);
  ASSERT_EQ(r->split.entries.size(), 2u);
  EXPECT_EQ(r->split.entries[0].text(), "3|13");
  EXPECT_EQ(r->split.entries[1].text(), "0|22");
  EXPECT_EQ(r->link, std::vector<std::string>{"lte"});  // two hops: the top level stays
  EXPECT_EQ(r->compression, "fp16");

  const std::string yaml = to_yaml(*r);
  EXPECT_NE(yaml.find("chain: [{device: edge, link: wifi, compression: int8}, cloud]"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("split: [[3, 13], [0, 22]]"), std::string::npos) << yaml;
  auto back = parse_experiment(yaml, "effective.yaml", false);
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(to_yaml(*back), yaml);

  auto ps = resolve_placements(*r, r->split, 22);
  ASSERT_TRUE(ps.ok()) << ps.error().str();
  EXPECT_EQ(ps->size(), 2u);
  auto all = parse_experiment("model: alexnet\nchain: [edge, cloud]\n", "exp.yaml", false);
  ASSERT_TRUE(all.ok()) << all.error().str();
  auto every = resolve_placements(*all, all->split, 22);
  ASSERT_TRUE(every.ok()) << every.error().str();
  EXPECT_EQ(every->size(), 276u);
}

TEST(Chain, OneDeviceChainIsTheTwoTierRunWithItsHopsLinkAndCodec) {
  auto plain = parse_experiment("model: alexnet\nlink: wifi\ncompression: int8\nsplit: [3, 5]\n", "e.yaml", false);
  auto chain = parse_experiment(
      "model: alexnet\nlink: lte\ncompression: [fp16, none]\nchain: [{device: server, link: wifi, compression: int8}]\n"
      "split: [3, [5]]\n",
      "e.yaml", false);
  ASSERT_TRUE(plain.ok()) << plain.error().str();
  ASSERT_TRUE(chain.ok()) << chain.error().str();
  EXPECT_EQ(chain->link, plain->link);
  EXPECT_EQ(chain->compression, plain->compression);
  EXPECT_TRUE(chain->compression_list.empty());
  EXPECT_EQ(chain->split.points(), plain->split.points());
  EXPECT_EQ(chain_hops(*chain), 1u);
  EXPECT_EQ(resolve_splits(*chain, 22).value(), resolve_splits(*plain, 22).value());
}

TEST(Chain, BadEntriesAreNamedWithWhatWasExpected) {
  const std::pair<std::string, std::string> cases[] = {
      {"chain: edge", "exp.yaml:2:8: chain: expected a list of device names or {device, link, compression} maps"},
      {"chain: []", "chain: expected a list of device names"},
      {"chain: [edge, edge]", "chain[1]: device 'edge' is listed twice"},
      {"chain: [{link: wifi}]", "chain[0].device: missing; expected the device's name"},
      {"chain: [{device: edge, rate: 3}]", "chain[0].rate: unknown key"},
      {"chain: [{device: edge, link: wify}]", "chain[0].link: unknown link profile 'wify' (did you mean 'wifi'?)"},
      {"chain: [{device: edge, compression: zip}]", "chain[0].compression: invalid codec 'zip'"},
      {"chain: [\"a b\"]", "chain[0]: a device name of letters"},
      {"chain: [edge, cloud]\nsplit: 3",
       "split[0]: 3 is one cut point; the chain [edge, cloud] has 2 devices after the PARTICIPANT, so every entry "
       "needs 2 cut points (e.g. [3, 13])"},
      {"chain: [edge, cloud]\nsplit: [[3, 13], [4, 5, 6]]", "split[1]: [4, 5, 6] has 3 cut points"},
      {"split: [[3, 13]]", "split[0]: [3, 13] has 2 cut points; the chain (the SERVER alone) has 1 device"},
      {"chain: [edge, cloud]\nsplit: [[13, 3]]", "split[0][1]: cut 3 comes after 13; expected non-decreasing"},
      {"chain: [edge, cloud]\nsplit: [[3, 13], [3, 13]]", "split[1]: placement [3, 13] is listed twice"},
      {"chain: [edge, cloud]\nparticipant_splits: {p1: 4}", "participant_splits.p1[0]: 4 is one cut point"},
      {"split: plan", "split: plan: the planner chooses placements on a chain of two or more devices"},
      {"chain: [edge, cloud]\nsplit: plan\nprobe: {enabled: false}", "split: plan: needs probe.enabled: true"},
      {"chain: [edge, cloud]\nsplit: plan\nrecord: {layers: false}", "split: plan: needs record.layers: true"},
      {"chain: [edge, cloud]\nparticipant_splits: {p1: plan}", "participant_splits.p1: plan: the planner chooses"},
      {"chain: [edge, cloud]\nsplit: plan\nplan_k: 0", "plan_k"},
  };
  for (const auto& [line, want] : cases) {
    Error e = experiment_error("model: alexnet\n" + line + "\n");
    EXPECT_EQ(e.code, Errc::config) << line;
    EXPECT_NE(e.message.find(want), std::string::npos) << line << " -> " << e.message;
  }
}

// split: plan is read, shown and read back; it resolves to no placement yet
// (the planner chooses them when the run starts), any model size.
TEST(Chain, SplitPlanIsReadShownAndLeavesThePlacementsToTheRun) {
  auto r = parse_experiment("model: resnet18\nchain: [edge, cloud]\nsplit: plan\nplan_k: 7\n", "exp.yaml", false);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_TRUE(r->split.plan);
  EXPECT_FALSE(r->split.all);
  EXPECT_EQ(r->plan_k, 7);
  EXPECT_EQ(parse_experiment("model: alexnet\n", "e.yaml", false)->plan_k, 20);
  auto back = parse_experiment(to_yaml(*r), "back.yaml", false);
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_TRUE(back->split.plan);
  EXPECT_EQ(back->plan_k, 7);
  auto ps = resolve_placements(*r, r->split, 60);
  ASSERT_TRUE(ps.ok()) << ps.error().str();
  EXPECT_TRUE(ps->empty());
}

TEST(Chain, SplitAllIsRefusedBeyondAThousandPlacementsNamingTheCount) {
  auto r = parse_experiment("model: resnet18\nchain: [edge, cloud]\n", "exp.yaml", false);
  ASSERT_TRUE(r.ok()) << r.error().str();
  // 60 layers over two hops: C(62, 2) = 1891 placements.
  auto e = resolve_placements(*r, r->split, 60);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("split: all: model 'resnet18' with 60 layers has 1891 placements on a chain of 2 "
                                   "devices; expected at most 1000 for `all`: `split: plan` (the planner's best plan_k "
                                   "placements)"),
            std::string::npos)
      << e.error().message;
  // An explicit entry beyond the model is named with its index.
  auto listed = parse_experiment("model: alexnet\nchain: [edge, cloud]\nsplit: [[3, 13], [3, 23]]\n", "e.yaml", false);
  ASSERT_TRUE(listed.ok());
  auto beyond = resolve_placements(*listed, listed->split, 22);
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.error().message.find("split[1]: placement 3|23: cut 23 is outside 0..22"), std::string::npos)
      << beyond.error().message;
  // Two tiers keep today's unbounded sweep (a node-level graph may have thousands of cuts).
  auto two = parse_experiment("model: alexnet\n", "e.yaml", false);
  EXPECT_EQ(resolve_placements(*two, two->split, 5000)->size(), 5001u);
}

}  // namespace
}  // namespace tracr::settings
