// The validator rejects each kind of malformed schedule with a message naming rank, op and peer.
#include <gtest/gtest.h>

#include "collbench/error.h"
#include "collbench/validator.h"

namespace collbench {
namespace {

Op send(int peer, std::size_t off, std::size_t bytes, std::vector<int> deps = {}, int channel = 0) {
  Op op;
  op.kind = OpKind::Send;
  op.peer = peer;
  op.src = {BufferKind::Input, off};
  op.bytes = bytes;
  op.deps = std::move(deps);
  op.channel = channel;
  return op;
}
Op recv(int peer, std::size_t off, std::size_t bytes, std::vector<int> deps = {}, int channel = 0) {
  Op op;
  op.kind = OpKind::Recv;
  op.peer = peer;
  op.dst = {BufferKind::Output, off};
  op.bytes = bytes;
  op.deps = std::move(deps);
  op.channel = channel;
  return op;
}

Schedule twoRanks(std::vector<Op> r0, std::vector<Op> r1) {
  Schedule s;
  s.spec = {Collective::AllReduce, 2, 4, DType::F32};  // 16-byte buffers
  s.algorithm = "test";
  s.ranks.resize(2);
  s.ranks[0].ops = std::move(r0);
  s.ranks[1].ops = std::move(r1);
  return s;
}

std::string errorOf(const Schedule& s, bool inPlace = false) {
  try {
    validate(s, {inPlace});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidSchedule);
    return e.what();
  }
  return "";
}

TEST(Validator, AcceptsExchange) {
  EXPECT_EQ(errorOf(twoRanks({send(1, 0, 16), recv(1, 0, 16)}, {send(0, 0, 16), recv(0, 0, 16)})), "");
}

TEST(Validator, UnmatchedSend) {
  EXPECT_EQ(errorOf(twoRanks({send(1, 0, 16)}, {})),
            "rank 0 op 0 (send to rank 1, channel 0) has no matching receive on rank 1");
}

TEST(Validator, UnmatchedRecv) {
  EXPECT_EQ(errorOf(twoRanks({}, {recv(0, 0, 8)})),
            "rank 1 op 0 (receive from rank 0, channel 0) has no matching send on rank 0");
}

TEST(Validator, ChannelsMatchSeparately) {
  EXPECT_NE(errorOf(twoRanks({send(1, 0, 16, {}, 1)}, {recv(0, 0, 16, {}, 0)})).find("no matching receive"),
            std::string::npos);
}

TEST(Validator, SizeMismatch) {
  EXPECT_EQ(errorOf(twoRanks({send(1, 0, 16)}, {recv(0, 0, 8)})),
            "rank 0 op 0 sends 16 bytes to rank 1 but its matching receive (rank 1 op 0) expects 8 bytes");
}

TEST(Validator, OutOfBounds) {
  EXPECT_EQ(errorOf(twoRanks({send(1, 8, 16)}, {recv(0, 0, 16)})),
            "rank 0 op 0 (send to rank 1): src in+[8, 24) is out of bounds of the in (16 bytes)");
}

TEST(Validator, BadPeer) {
  EXPECT_EQ(errorOf(twoRanks({send(5, 0, 16)}, {})), "rank 0 op 0 (send): peer 5 is not another rank of 2");
}

TEST(Validator, ForwardDependency) {
  EXPECT_EQ(errorOf(twoRanks({send(1, 0, 16, {1}), recv(1, 0, 16)}, {send(0, 0, 16), recv(0, 0, 16)})),
            "rank 0 op 0 (send to rank 1): dependency 1 is not an earlier op of the rank");
}

TEST(Validator, Deadlock) {
  // Both ranks receive before they send: under rendezvous nobody can start.
  const std::string e = errorOf(twoRanks({recv(1, 0, 16), send(1, 0, 16, {0})}, {recv(0, 0, 16), send(0, 0, 16, {0})}));
  EXPECT_NE(e.find("rank 0 op 0 (recv from rank 1): deadlock"), std::string::npos) << e;
}

TEST(Validator, CrossedOrderDeadlock) {
  // Rank 0 sends on ch0 then ch1 in sequence; rank 1 receives ch1 before ch0.
  const std::string e =
      errorOf(twoRanks({send(1, 0, 8, {}, 0), send(1, 8, 8, {0}, 1)}, {recv(0, 0, 8, {}, 1), recv(0, 8, 8, {0}, 0)}));
  EXPECT_NE(e.find("deadlock"), std::string::npos) << e;
}

TEST(Validator, WriteRace) {
  // Two receives into the same output bytes with no order between them.
  Schedule s = twoRanks({send(1, 0, 16), send(1, 0, 16)}, {recv(0, 0, 16), recv(0, 0, 16)});
  const std::string e = errorOf(s);
  EXPECT_NE(e.find("rank 1 op 1 (recv from rank 0): races with op 0"), std::string::npos) << e;
  s.ranks[1].ops[1].deps = {0};
  EXPECT_EQ(errorOf(s), "");
}

TEST(Validator, InPlaceRace) {
  // Out of place this is fine; in place the receive overwrites what the concurrent send reads.
  const Schedule s = twoRanks({send(1, 0, 16), recv(1, 0, 16)}, {send(0, 0, 16), recv(0, 0, 16)});
  EXPECT_EQ(errorOf(s, false), "");
  EXPECT_NE(errorOf(s, true).find("races with op 0"), std::string::npos);
}

TEST(Validator, UnalignedReduction) {
  Op rr;
  rr.kind = OpKind::RecvReduce;
  rr.peer = 0;
  rr.src = {BufferKind::Input, 2};
  rr.dst = {BufferKind::Output, 2};
  rr.bytes = 4;
  const Schedule s = twoRanks({send(1, 0, 4)}, {rr});
  EXPECT_NE(errorOf(s).find("is not aligned to 4-byte elements"), std::string::npos);
}

}  // namespace
}  // namespace collbench
