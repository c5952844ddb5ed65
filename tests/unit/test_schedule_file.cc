// Schedule files (schedule_file.h): generated schedules survive the write/read round trip op for op, the shipped
// example reads and scales to every size its chunks divide, and each kind of bad file is one line naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/schedule_file.h"
#include "collbench/validator.h"

namespace collbench {
namespace {

using nlohmann::json;

const std::filesystem::path kExample =
    std::filesystem::path(COLLBENCH_SOURCE_DIR) / "examples" / "schedules" / "bidir-ring-4.json";

std::string readText(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Every field an executor reads (a recv's src, a send's dst and a local op's peer are not part of the schedule).
void expectSameOps(const Schedule& want, const Schedule& got) {
  EXPECT_EQ(got.spec.kind, want.spec.kind);
  EXPECT_EQ(got.spec.nranks, want.spec.nranks);
  EXPECT_EQ(got.spec.count, want.spec.count);
  EXPECT_EQ(got.spec.dtype, want.spec.dtype);
  EXPECT_EQ(got.spec.op, want.spec.op);
  EXPECT_EQ(got.spec.root, want.spec.root);
  EXPECT_EQ(got.algorithm, want.algorithm);
  EXPECT_EQ(got.protocol, want.protocol);
  ASSERT_EQ(got.ranks.size(), want.ranks.size());
  for (std::size_t r = 0; r < want.ranks.size(); ++r) {
    const RankProgram &w = want.ranks[r], &g = got.ranks[r];
    EXPECT_EQ(g.scratchBytes, w.scratchBytes) << "rank " << r;
    ASSERT_EQ(g.ops.size(), w.ops.size()) << "rank " << r;
    for (std::size_t i = 0; i < w.ops.size(); ++i) {
      const Op &a = w.ops[i], &b = g.ops[i];
      SCOPED_TRACE(testing::Message() << "rank " << r << " op " << i);
      EXPECT_EQ(b.kind, a.kind);
      if (a.isComm()) {
        EXPECT_EQ(b.peer, a.peer);
      }
      if (a.reads()) {
        EXPECT_EQ(b.src, a.src);
      }
      if (a.writes()) {
        EXPECT_EQ(b.dst, a.dst);
      }
      EXPECT_EQ(b.bytes, a.bytes);
      EXPECT_EQ(b.deps, a.deps);
      EXPECT_EQ(b.channel, a.channel);
    }
  }
  EXPECT_EQ(dump(got), dump(want));
}

struct RoundTripCase {
  Collective kind;
  std::string algorithm;
  int nranks;
  std::size_t count;
  AlgoParams params;
  int root = 0;
};

class ScheduleFileRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(ScheduleFileRoundTrip, ReadBackIsTheGeneratedSchedule) {
  const RoundTripCase& c = GetParam();
  const CollectiveSpec spec{c.kind, c.nranks, c.count, DType::F32, ReduceOp::Sum, c.root};
  const Schedule generated = buildSchedule(spec, c.algorithm, c.params);
  const ScheduleFile written = toScheduleFile(generated, "collbench plan test");
  const std::string text = toJson(written);
  const ScheduleFile read = parseScheduleFile(text, "roundtrip.json");
  EXPECT_EQ(read.chunks, 0u);
  EXPECT_EQ(read.command, "collbench plan test");
  EXPECT_EQ(read.tool, std::string("collbench ") + COLLBENCH_VERSION);
  expectSameOps(generated, read.schedule);
  EXPECT_EQ(toJson(read), text);                      // the writer is deterministic
  expectSameOps(generated, instantiate(read, spec));  // a bytes file at its own size
  EXPECT_EQ(ownSizeBytes(read), std::max(spec.inputBytes(), spec.outputBytes()));
}

AlgoParams twoHosts(int n) {
  AlgoParams p;
  for (int r = 0; r < n; ++r) p.rankHost.push_back(r < n / 2 ? 0 : 1);
  return p;
}

AlgoParams withProtocol(Protocol proto, AlgoParams p = {}) {
  p.protocol = proto;
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Generated, ScheduleFileRoundTrip,
    ::testing::Values(RoundTripCase{Collective::AllReduce, "ring", 4, 1000, {}},
                      RoundTripCase{Collective::AllReduce, "ring", 5, 4099, {0, 2, {}}},
                      RoundTripCase{Collective::AllReduce, "tree", 7, 100000, {16384, 1, {}}},
                      RoundTripCase{Collective::AllReduce, "tree", 4, 1 << 16, {}},
                      RoundTripCase{Collective::AllReduce, "hierarchical", 8, 8192, twoHosts(8)},
                      RoundTripCase{Collective::AllReduce, "hierarchical", 6, 777, twoHosts(6)},
                      RoundTripCase{Collective::ReduceScatter, "ring", 4, 256, {}},
                      RoundTripCase{Collective::AllGather, "ring", 3, 256, {}},
                      RoundTripCase{Collective::Broadcast, "ring", 4, 70000, {4096, 1, {}}, 2},
                      RoundTripCase{Collective::Reduce, "ring", 4, 70000, {4096, 1, {}}, 3},
                      RoundTripCase{Collective::AllReduce, "ring", 4, 1000, withProtocol(Protocol::LL)},
                      RoundTripCase{Collective::AllReduce, "tree", 5, 9000,
                                    withProtocol(Protocol::LL128, {4096, 1, {}})},
                      RoundTripCase{Collective::AllGather, "ring", 3, 256, withProtocol(Protocol::Simple)}),
    [](const auto& p) {
      return std::string(toString(p.param.kind)) + "_" + p.param.algorithm + "_" + std::to_string(p.param.nranks) +
             "_" + std::to_string(p.index);
    });

TEST(ScheduleFile, ExampleScalesToEverySizeItsChunksDivide) {
  const ScheduleFile f = readScheduleFile(kExample.string());
  EXPECT_EQ(f.chunks, 8u);
  EXPECT_EQ(f.schedule.algorithm, "bidir_ring");
  EXPECT_EQ(f.schedule.spec.kind, Collective::AllReduce);
  EXPECT_EQ(f.schedule.spec.nranks, 4);
  EXPECT_EQ(ownSizeBytes(f), 0u);
  for (std::size_t count : {8u, 64u, 8000u, 1u << 20}) {
    const CollectiveSpec spec{Collective::AllReduce, 4, count, DType::F32, ReduceOp::Sum, 0};
    const Schedule s = instantiate(f, spec);
    EXPECT_NO_THROW(validate(s, {false}));
    EXPECT_NO_THROW(validate(s, {true}));
    // Two rings of 2(n-1) steps: each rank sends 12 chunks of count/8 elements, 3/2 x (n-1)/n of its input.
    std::size_t sent = 0;
    for (const Op& op : s.ranks[1].ops) sent += op.kind == OpKind::Send ? op.bytes : 0;
    EXPECT_EQ(sent, 12 * count / 8 * sizeof(float));
    // Rank 2, step 1 of ring 0 sends output chunk 1 (the block it reduced in step 0).
    EXPECT_EQ(s.ranks[2].ops[4].src, (BufRef{BufferKind::Output, 1 * count / 8 * sizeof(float)}));
  }
  const CollectiveSpec odd{Collective::AllReduce, 4, 1001, DType::F32, ReduceOp::Sum, 0};
  try {
    instantiate(f, odd);
    ADD_FAILURE() << "1001 elements were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_EQ(std::string(e.what()),
              kExample.string() +
                  ": chunks: 8 chunks do not divide the input of size 4004 B (1001 float elements); "
                  "run sizes whose input element count is a multiple of 8");
  }
}

std::string instantiateError(const ScheduleFile& f, const CollectiveSpec& spec) {
  try {
    instantiate(f, spec);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    return e.what();
  }
  return "";
}

TEST(ScheduleFile, BytesFileRunsOnlyAtItsOwnSizeAndCollective) {
  const CollectiveSpec spec{Collective::AllReduce, 4, 1024, DType::F32, ReduceOp::Sum, 0};
  const ScheduleFile f = parseScheduleFile(toJson(toScheduleFile(buildSchedule(spec, "ring"))), "ring.json");
  CollectiveSpec other = spec;
  other.count = 2048;
  EXPECT_EQ(instantiateError(f, other),
            "ring.json: collective.count: a file in bytes runs only at its own size, 1024 elements (4096 B), not at "
            "2048 elements (8192 B); write offsets in chunks to run at several sizes");
  other = spec;
  other.nranks = 3;
  EXPECT_EQ(instantiateError(f, other), "ring.json: collective.nranks: the file is for 4 ranks; this run has 3");
  other = spec;
  other.op = ReduceOp::Max;
  EXPECT_EQ(instantiateError(f, other), "ring.json: collective.op: the file reduces with sum; this run with max");
  other = spec;
  other.kind = Collective::Broadcast;
  EXPECT_EQ(instantiateError(f, other), "ring.json: collective.kind: the file is all_reduce; this run is broadcast");
}

TEST(ScheduleFile, NativeSchedulesHaveNoOpsToWrite) {
  Schedule s;
  s.algorithm = "nccl";
  s.native = true;
  EXPECT_THROW(toScheduleFile(s), Error);
}

/// The error of reading the example after `mutate`.
std::string mutatedError(const std::function<void(json&)>& mutate) {
  json doc = json::parse(readText(kExample));
  mutate(doc);
  try {
    parseScheduleFile(doc.dump(), "schedule.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    return e.what();
  }
  return "accepted";
}

json& op(json& doc, int rank, int index) { return doc["ranks"][rank]["ops"][index]; }

TEST(ScheduleFile, ProtocolIsWrittenReadCaseInsensitiveAndKeptAtEverySize) {
  const CollectiveSpec spec{Collective::AllReduce, 4, 1000, DType::F32, ReduceOp::Sum, 0};
  const Schedule ll = buildSchedule(spec, "ring", withProtocol(Protocol::LL));
  ASSERT_EQ(ll.protocol, Protocol::LL);
  EXPECT_NE(toJson(toScheduleFile(ll)).find("\"protocol\": \"LL\""), std::string::npos);
  EXPECT_EQ(toJson(toScheduleFile(buildSchedule(spec, "ring"))).find("protocol"), std::string::npos);
  json doc = json::parse(readText(kExample));
  doc["protocol"] = "ll128";
  const ScheduleFile f = parseScheduleFile(doc.dump(), "example.json");
  EXPECT_EQ(f.schedule.protocol, Protocol::LL128);
  const CollectiveSpec big{Collective::AllReduce, 4, 8 * 1024, DType::F32, ReduceOp::Sum, 0};
  EXPECT_EQ(instantiate(f, big).protocol, Protocol::LL128);
  EXPECT_NE(dump(instantiate(f, big)).find("protocol LL128"), std::string::npos);
}

TEST(ScheduleFile, EachBadFieldIsOneLineNamingRankOpAndField) {
  EXPECT_EQ(mutatedError([](json& d) { d["protocol"] = "LL64"; }),
            "schedule.json: protocol: unknown protocol 'LL64' (available: LL, LL128, Simple)");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 2, 5)["peer"] = 9; }),
            "schedule.json: ranks[2].ops[5].peer: 9 is not a rank (0..3)");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 2, 5)["peer"] = 2; }),
            "schedule.json: ranks[2].ops[5].peer: 2 is this op's own rank; a recv_reduce needs another rank");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 1, 0)["colour"] = "red"; }),
            "schedule.json: ranks[1].ops[0].colour: unknown field (known: channel, chunk_count, deps, dst, group, "
            "kind, peer, root, src)");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 0, 1)["dst"]["buffer"] = "outptu"; }),
            "schedule.json: ranks[0].ops[1].dst.buffer: \"outptu\" is not a buffer (input, output, scratch)");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 3, 0)["src"]["chunk"] = 8; }),
            "schedule.json: ranks[3].ops[0].src.chunk: chunks [8, 9) of the input are out of bounds (it has 8 chunks)");
  EXPECT_EQ(
      mutatedError([](json& d) {
        op(d, 0, 1)["dst"] = {{"buffer", "scratch"}, {"chunk", 0}};
      }),
      "schedule.json: ranks[0].ops[1].dst.chunk: chunks [0, 1) of the scratch are out of bounds (it has 0 chunks: "
      "the rank's scratch_chunks)");
  EXPECT_EQ(mutatedError([](json& d) {
              op(d, 0, 4)["deps"] = {0, 4};
            }),
            "schedule.json: ranks[0].ops[4].deps[1]: 4 is not an earlier op of rank 0 (0..3)");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 1, 2)["kind"] = "sned"; }),
            "schedule.json: ranks[1].ops[2].kind: \"sned\" is not an op (send, recv, recv_reduce, copy, reduce, "
            "switch_reduce, multicast)");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 1, 2)["chunk_count"] = "one"; }),
            "schedule.json: ranks[1].ops[2].chunk_count: expected an integer, got string \"one\"");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 1, 2).erase("src"); }),
            "schedule.json: ranks[1].ops[2].src: missing required field");
  EXPECT_EQ(
      mutatedError([](json& d) { op(d, 1, 0)["bytes"] = 4; }),
      "schedule.json: ranks[1].ops[0].bytes: this file counts chunks (top-level chunks is set): write chunk_count");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 1, 1)["dst"]["offset"] = 4; }),
            "schedule.json: ranks[1].ops[1].dst.offset: unknown field (known: buffer, chunk)");
  EXPECT_EQ(mutatedError([](json& d) { d["collective"]["nranks"] = 5; }),
            "schedule.json: ranks: 4 rank programs for collective.nranks 5");
  EXPECT_EQ(mutatedError([](json& d) { d["collective"]["count"] = 64; }),
            "schedule.json: collective.count: a file in chunks (top-level chunks) runs at every size its chunks "
            "divide; remove count");
  // Cross-op errors come from the validator, named as the file names ops.
  EXPECT_EQ(mutatedError([](json& d) { op(d, 0, 0)["peer"] = 2; }),
            "schedule.json: ranks[0].ops[0]: rank 0 op 0 (send to rank 2, channel 0) has no matching receive on rank "
            "2 (checked with one float element per chunk)");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 0, 0)["chunk_count"] = 2; }),
            "schedule.json: ranks[0].ops[0]: rank 0 op 0 sends 8 bytes to rank 1 but its matching receive (rank 1 op "
            "1) expects 4 bytes (checked with one float element per chunk)");
  // Every rank's step-0 receive of ring 0 waits for its own send, which waits for the next rank's receive: a cycle.
  const std::string deadlock = mutatedError([](json& d) {
    for (int r = 0; r < 4; ++r) op(d, r, 1)["deps"] = {0};
  });
  EXPECT_EQ(deadlock,
            "schedule.json: ranks[0].ops[0]: rank 0 op 0 (send to rank 1): deadlock: this op waits in a cycle of "
            "dependencies and rendezvous matches and can never complete (checked with one float element per chunk)");
  EXPECT_EQ(mutatedError([](json& d) { op(d, 0, 4).erase("deps"); }),
            "schedule.json: ranks[0].ops[4]: rank 0 op 4 (send to rank 1): races with op 1: both touch bytes [12, 16) "
            "of the output and neither is ordered before the other (checked with one float element per chunk)");
  EXPECT_EQ(mutatedError([](json& d) { d["collective"]["kind"] = "reduce_scatter", d["chunks"] = 6; }),
            "schedule.json: chunks: 6 is not a multiple of nranks 4: reduce_scatter's output is 1/nranks of its input, "
            "which must be whole chunks");
  EXPECT_EQ(mutatedError([](json& d) { d["algorithm"] = "auto"; }),
            "schedule.json: algorithm: \"auto\" cannot name a schedule (empty, or auto: the selector's choice)");
  EXPECT_EQ(mutatedError([](json& d) { d["version"] = 2; }),
            "schedule.json: version: version 2 is not supported (this collbench reads version 1)");
  try {
    parseScheduleFile("{\"format\": \"collbench-schedule\",\n \"version\": 1,,}", "broken.json");
    ADD_FAILURE() << "bad JSON accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("broken.json: malformed JSON at line 2, column", 0), 0u) << e.what();
  }
}

TEST(ScheduleFile, BytesFilesNameBytesAndCheckReductionAlignment) {
  const CollectiveSpec spec{Collective::AllReduce, 2, 4, DType::F32, ReduceOp::Sum, 0};
  json doc = json::parse(toJson(toScheduleFile(buildSchedule(spec, "ring"))));
  json bad = doc;
  bad["ranks"][0]["ops"][0]["src"]["offset"] = 12;
  try {
    parseScheduleFile(bad.dump(), "s.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("s.json: ranks[0].ops[0].src.offset: bytes [12, ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("of the input are out of bounds (it has 16 bytes)"), std::string::npos);
  }
  bad = doc;
  bad["collective"].erase("count");
  try {
    parseScheduleFile(bad.dump(), "s.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "s.json: collective.count: missing required field (or give top-level chunks to run at several sizes)");
  }
}

}  // namespace
}  // namespace collbench
