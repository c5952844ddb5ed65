// The process backend's world options and small wire messages (no processes needed): option validation, the
// collective header's mismatch descriptions, hello checks and control-message decoding of garbage.
#include <gtest/gtest.h>

#include <random>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "process_world.h"

namespace collbench::host {
namespace {

BackendOptions twoRanks() {
  return {{"rank", "1"},
          {"world", "2"},
          {"addresses", "127.0.0.1:4000,127.0.0.1:4001"},
          {"tasks", "worker[0],worker[1]"},
          {"token", "tok"}};
}

std::string errorOf(const BackendOptions& o) {
  try {
    ProcessWorld::fromOptions(o);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    return e.what();
  }
  return "";
}

TEST(ProcessWorld, ParsesOptionsAndDefaults) {
  const ProcessWorld w = ProcessWorld::fromOptions(twoRanks());
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.world, 2);
  EXPECT_EQ(w.master, "127.0.0.1:4000");  // the leader: addresses[0]
  EXPECT_EQ(w.store, "tcp");
  EXPECT_EQ(w.hostOf(1), "127.0.0.1");
  EXPECT_EQ(w.describeRank(1), "worker[1] (rank 1, 127.0.0.1:4001)");
  EXPECT_FALSE(w.timeoutSeconds.has_value());

  const ProcessWorld single = ProcessWorld::fromOptions({});
  EXPECT_EQ(single.world, 1);
  EXPECT_EQ(single.rank, 0);

  auto o = twoRanks();
  o.erase("token");
  o["addresses"] = "[::1]:4000,[::1]:4001";
  o["timeout"] = "2.5";
  const ProcessWorld v6 = ProcessWorld::fromOptions(o);
  EXPECT_EQ(v6.hostOf(0), "::1");
  EXPECT_EQ(v6.timeoutSeconds, 2.5);
  EXPECT_FALSE(v6.token.empty());  // derived from the addresses
}

TEST(ProcessWorld, RejectsBadOptionsNamingThem) {
  auto o = twoRanks();
  o["rank"] = "2";
  EXPECT_NE(errorOf(o).find("rank=2 is not in 0..1"), std::string::npos);
  o = twoRanks();
  o["rank"] = "x";
  EXPECT_NE(errorOf(o).find("rank=\"x\" is not a number"), std::string::npos);
  o = twoRanks();
  o["addresses"] = "127.0.0.1:4000";
  EXPECT_NE(errorOf(o).find("addresses lists 1 tasks but world=2"), std::string::npos);
  o = twoRanks();
  o["addresses"] = "127.0.0.1:4000,nohostport";
  EXPECT_NE(errorOf(o).find("addresses[1]=\"nohostport\""), std::string::npos);
  o = twoRanks();
  o["store"] = "redis";
  EXPECT_NE(errorOf(o).find("store=\"redis\""), std::string::npos);
  o = twoRanks();
  o["timeout"] = "0";
  EXPECT_NE(errorOf(o).find("timeout=0"), std::string::npos);
}

TEST(CollectiveHeader, RoundTripAndMismatchDescriptions) {
  const Schedule a = buildSchedule({Collective::AllReduce, 2, 1000, DType::F32, ReduceOp::Sum}, "ring");
  const Schedule b = buildSchedule({Collective::AllReduce, 2, 2000, DType::F32, ReduceOp::Sum}, "ring");
  const auto ha = CollectiveHeader::of(a, 0, 5, scheduleFingerprint(a));
  std::string why;
  const auto back = CollectiveHeader::decode(ha.encode(), &why);
  EXPECT_TRUE(why.empty()) << why;
  EXPECT_EQ(describeMismatch(ha, back), "");

  auto theirs = CollectiveHeader::of(b, 1, 5, scheduleFingerprint(b));
  EXPECT_EQ(describeMismatch(ha, theirs),
            "rank 0 (this process) and rank 1 called different collectives: rank 0: count 1000; rank 1: count 2000");
  // Seen from rank 1: the sides keep their order, so a relayed message reads the same wherever it lands.
  EXPECT_EQ(describeMismatch(theirs, ha),
            "rank 1 (this process) and rank 0 called different collectives: rank 0: count 1000; rank 1: count 2000");
  theirs = CollectiveHeader::of(a, 1, 6, scheduleFingerprint(a));
  EXPECT_NE(describeMismatch(ha, theirs).find("rank 0: sequence number 5; rank 1: sequence number 6"),
            std::string::npos);
  theirs = ha;
  theirs.rank = 1;
  theirs.epochs = 3;
  EXPECT_NE(describeMismatch(ha, CollectiveHeader::decode(theirs.encode(), &why))
                .find("rank 0: 1 iterations in a row; rank 1: 3 iterations in a row"),
            std::string::npos);
  const Schedule t = buildSchedule({Collective::AllReduce, 2, 1000, DType::F32, ReduceOp::Sum}, "tree");
  theirs = CollectiveHeader::of(t, 1, 5, scheduleFingerprint(t));
  EXPECT_NE(describeMismatch(ha, theirs).find("different algorithms"), std::string::npos);
  AlgoParams lanes;
  lanes.chunkBytes = 64;
  lanes.channels = 2;
  const Schedule c = buildSchedule({Collective::AllReduce, 2, 1000, DType::F32, ReduceOp::Sum}, "ring", lanes);
  theirs = CollectiveHeader::of(c, 1, 5, scheduleFingerprint(c));
  EXPECT_NE(describeMismatch(ha, theirs).find("different schedules"), std::string::npos);
  const Schedule d = buildSchedule({Collective::AllReduce, 2, 1000, DType::I32, ReduceOp::Max}, "ring");
  theirs = CollectiveHeader::of(d, 1, 5, scheduleFingerprint(d));
  EXPECT_NE(describeMismatch(ha, theirs).find("rank 0: dtype float, op sum; rank 1: dtype int32, op max"),
            std::string::npos)
      << describeMismatch(ha, theirs);

  auto bytes = ha.encode();
  bytes[0] = std::byte{0};
  CollectiveHeader::decode(bytes, &why);
  EXPECT_EQ(why, "not a collbench collective header");
  bytes = ha.encode();
  bytes[4] = std::byte{9};
  CollectiveHeader::decode(bytes, &why);
  EXPECT_NE(why.find("protocol version 9"), std::string::npos);
}

TEST(Hello, ChecksRankWorldTokenAndVersion) {
  Hello h;
  h.rank = 2;
  h.world = 4;
  h.tokenDigest = Hello::digest("tok");
  const auto b = h.encode();
  EXPECT_EQ(Hello::check(b, 2, 4, Hello::digest("tok")), "");
  EXPECT_NE(Hello::check(b, 2, 4, Hello::digest("other")).find("different cluster token"), std::string::npos);
  EXPECT_NE(Hello::check(b, 1, 4, Hello::digest("tok")).find("it says it is rank 2"), std::string::npos);
  EXPECT_NE(Hello::check(b, 2, 3, Hello::digest("tok")).find("4 ranks"), std::string::npos);
  auto v = b;
  v[4] = std::byte{9};
  EXPECT_NE(Hello::check(v, 2, 4, Hello::digest("tok")).find("protocol version 9"), std::string::npos);
  std::array<std::byte, Hello::kBytes> junk{};
  EXPECT_NE(Hello::check(junk, 2, 4, Hello::digest("tok")).find("not a collbench hello"), std::string::npos);
}

TEST(ControlMessage, RoundTripAndGarbage) {
  ControlMessage m{ControlMessage::Kind::Abort, Errc::Timeout, 3, 1, std::string(1000, 'r')};
  const auto back = ControlMessage::decode(m.encode());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->code, Errc::Timeout);
  EXPECT_EQ(back->origin, 3);
  EXPECT_EQ(back->culprit, 1);
  EXPECT_EQ(back->reason.size(), ControlMessage::kMaxReason);  // truncated, never overflowing
  std::mt19937 rng(3);
  for (int i = 0; i < 1000; ++i) {
    std::array<std::byte, ControlMessage::kBytes> junk{};
    for (auto& x : junk) x = static_cast<std::byte>(rng());
    if (i % 2) std::copy_n(m.encode().begin(), 8, junk.begin());  // valid magic and kind, random rest
    const auto d = ControlMessage::decode(junk);
    if (d) {
      EXPECT_LE(d->reason.size(), ControlMessage::kMaxReason);
    }
  }
}

TEST(ClusterToken, DerivedTokensArePinnedAndDependOnTheCluster) {
  // FNV-1a 64 against the published test vectors (Fowler, Noll, Vo): "" is the offset basis.
  EXPECT_EQ(fnv1a(std::string_view("")), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a(std::string_view("a")), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a(std::string_view("foobar")), 0x85944171f73967e8ull);
  // Every task of a cluster derives the same token, in every build and release: computed independently (Python's
  // FNV-1a of the text, seeded with the hash of "collbench cluster token v1").
  EXPECT_EQ(deriveClusterToken("{\"worker\":[\"a:1\"]}"), "derived-a60fa1f8c0fcbb25");
  EXPECT_NE(deriveClusterToken("{\"worker\":[\"a:1\"]}"), deriveClusterToken("{\"worker\":[\"a:2\"]}"));
}

}  // namespace
}  // namespace collbench::host
