// NCCL 2.28's choice emulation (collbench/nccl_model.h): environment parsing, selection rules, and the time model
// against six real nccl-tests all_reduce_perf tables (tests/data/realdata/).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "collbench/error.h"
#include "collbench/nccl_model.h"
#include "collbench/nccl_tests_log.h"
#include "collbench/topology.h"

namespace collbench {
namespace {

// ---- Systems of the real tables, by hand (datasheets: NVLink4 18 x 25 GB/s, NVLink3 12 x 25 GB/s, NDR 400 Gb/s
// = 50 GB/s, EFA 100 Gb/s = 12.5 GB/s per interface) ----

NcclSystem dgxH100(int nodes = 1) {
  NcclSystem s;
  s.arch = GpuArch::Hopper;
  s.nodes = nodes;
  s.gpusPerNode = 8;
  s.nvlinkGBps = 450;
  s.nvswitch = true;
  s.nvls = true;
  s.nicsPerNode = 8;
  s.nicGBps = 50;
  s.nicKind = NicKind::InfiniBand;
  return s;
}

NcclSystem dgxA100() {
  NcclSystem s;
  s.arch = GpuArch::Ampere;
  s.nodes = 1;
  s.gpusPerNode = 8;
  s.nvlinkGBps = 300;
  s.nvswitch = true;
  s.nvls = false;
  s.nicsPerNode = 8;
  s.nicGBps = 25;  // 8 x 200 Gb/s HDR
  return s;
}

NcclSystem awsP5(int nodes = 2) {
  NcclSystem s = dgxH100(nodes);
  s.nicsPerNode = 8;  // 32 EFA NICs as aws-ofi-nccl shows them to NCCL: one device of four per GPU
  s.nicGBps = 50;
  s.nicKind = NicKind::Efa2;
  return s;
}

NcclSystem awsP4de(int nodes = 2) {
  NcclSystem s = dgxA100();
  s.nodes = nodes;
  s.nicsPerNode = 4;
  s.nicGBps = 12.5;
  s.nicKind = NicKind::Efa;
  return s;
}

// ---- Environment ----

std::string errorOf(const std::map<std::string, std::string>& vars) {
  try {
    parseNcclEnv(vars);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    return e.what();
  }
  return "";
}

TEST(NcclEnv, BadValuesNameTheVariable) {
  EXPECT_EQ(errorOf({{"NCCL_ALGO", "ring,bogus"}}),
            "NCCL_ALGO=ring,bogus: unknown element 'bogus' (available: Tree, Ring, CollnetDirect, CollnetChain, NVLS, "
            "NVLSTree, PAT)");
  EXPECT_EQ(errorOf({{"NCCL_PROTO", "LL;simple"}}),
            "NCCL_PROTO=LL;simple: entry 'simple' needs a function prefix (only the first may lack one)");
  EXPECT_EQ(errorOf({{"NCCL_ALGO", "allgatherv:ring"}}),
            "NCCL_ALGO=allgatherv:ring: unknown function 'allgatherv' (available: broadcast, reduce, allgather, "
            "reducescatter, allreduce)");
  EXPECT_EQ(errorOf({{"NCCL_MAX_NCHANNELS", "many"}}), "NCCL_MAX_NCHANNELS=many: not an integer");
  EXPECT_EQ(errorOf({{"NCCL_MIN_CTAS", "0"}}), "NCCL_MIN_CTAS=0: out of range (expected 1 .. 64)");
  EXPECT_EQ(errorOf({{"NCCL_NVLS_ENABLE", "3"}}), "NCCL_NVLS_ENABLE=3: out of range (expected 0 .. 2)");
  EXPECT_EQ(errorOf({{"NCCL_NTHREADS", "100"}}), "NCCL_NTHREADS=100: must be a multiple of 32");
  EXPECT_EQ(errorOf({{"NCCL_BUFFSIZE", "-1"}}), "NCCL_BUFFSIZE=-1: out of range (expected 65536 .. 2147483648)");
  EXPECT_EQ(errorOf({{"NCCL_COLLNET_ENABLE", "yes"}}), "NCCL_COLLNET_ENABLE=yes: not an integer");
}

TEST(NcclEnv, ListSyntaxAsNccl) {
  const NcclEnv all = parseNcclEnv({});
  EXPECT_EQ(all.algoEnabled[4], (std::array<int, 7>{1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(all.protoEnabled[4], (std::array<int, 3>{1, 2, 1}));
  const NcclEnv excl = parseNcclEnv({{"NCCL_ALGO", "^ring,NVLS"}});
  EXPECT_EQ(excl.algoEnabled[4], (std::array<int, 7>{1, 0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(excl.algoEnabled[0], excl.algoEnabled[4]);  // no prefix: every function
  const NcclEnv perFunc = parseNcclEnv({{"NCCL_ALGO", "ring;allreduce:tree,nvls"}});
  EXPECT_EQ(perFunc.algoEnabled[4], (std::array<int, 7>{1, 0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(perFunc.algoEnabled[2], (std::array<int, 7>{0, 1, 0, 0, 0, 0, 0}));
  const NcclEnv proto = parseNcclEnv({{"NCCL_PROTO", "^LL128;allreduce:LL128"}});
  EXPECT_EQ(proto.protoEnabled[4], (std::array<int, 3>{0, 1, 0}));
  EXPECT_EQ(proto.protoEnabled[1], (std::array<int, 3>{1, 0, 1}));
  const NcclEnv ch = parseNcclEnv({{"NCCL_MIN_NCHANNELS", "8"}, {"NCCL_MAX_CTAS", "4"}, {"NCCL_BUFFSIZE", "8388608"}});
  EXPECT_EQ(ch.maxChannels, 4);
  EXPECT_EQ(ch.minChannels, 4);  // init.cc: min above max sets both to max
  EXPECT_EQ(ch.buffSize, 8388608u);
}

// ---- Choice ----

TEST(NcclChoose, SmallSizesUseLLOnFewChannelsLargeUseNvls) {
  const NcclChoice small = ncclChoose(dgxH100(), Collective::AllReduce, 8, 8);
  EXPECT_EQ(small.algorithm, NcclAlgorithm::Ring);
  EXPECT_EQ(small.protocol, NcclProtocol::LL);
  EXPECT_EQ(small.channels, 1);                     // enqueue.cc: channels drop while bytes < nc x threads x 8 x nranks
  EXPECT_EQ(small.threads, 96);                     // threads halve down to 3 warps
  EXPECT_NEAR(small.ncclUs, 6.6 + 14 * 0.6, 0.01);  // baseLat + 2(n-1) NVLink LL steps
  const NcclChoice large = ncclChoose(dgxH100(), Collective::AllReduce, std::size_t{1} << 30, 8);
  EXPECT_EQ(large.algorithm, NcclAlgorithm::Nvls);
  EXPECT_EQ(large.protocol, NcclProtocol::Simple);
  EXPECT_EQ(large.channels, 16);  // NVLS_NCHANNELS_SM90
  EXPECT_EQ(large.chunkBytes, 128u * 1024);
  EXPECT_EQ(large.candidates.size(), 21u);
  EXPECT_NE(large.reason.find("NVLS/Simple on 16 channels"), std::string::npos) << large.reason;
}

TEST(NcclChoose, EnvironmentForcesAndExcludes) {
  const std::size_t bytes = std::size_t{1} << 30;
  const NcclChoice ring = ncclChoose(dgxH100(), Collective::AllReduce, bytes, 8, parseNcclEnv({{"NCCL_ALGO", "ring"}}));
  EXPECT_EQ(ring.algorithm, NcclAlgorithm::Ring);
  EXPECT_EQ(ring.channels, 24);  // 12 search channels at 30 GB/s, duplicated
  const NcclChoice notNvls =
      ncclChoose(dgxH100(), Collective::AllReduce, bytes, 8, parseNcclEnv({{"NCCL_ALGO", "^nvls"}}));
  EXPECT_NE(notNvls.algorithm, NcclAlgorithm::Nvls);
  const NcclChoice ll = ncclChoose(dgxH100(), Collective::AllReduce, bytes, 8,
                                   parseNcclEnv({{"NCCL_ALGO", "ring"}, {"NCCL_PROTO", "LL"}}));
  EXPECT_EQ(ll.protocol, NcclProtocol::LL);
  EXPECT_GT(ll.predictedUs, ring.predictedUs);  // LL carries half its bytes as flags
  const NcclChoice bounded = ncclChoose(dgxH100(), Collective::AllReduce, bytes, 8,
                                        parseNcclEnv({{"NCCL_ALGO", "ring"}, {"NCCL_MAX_NCHANNELS", "4"}}));
  EXPECT_EQ(bounded.channels, 4);
  EXPECT_GT(bounded.predictedUs, ring.predictedUs);
  const NcclChoice raised = ncclChoose(dgxH100(), Collective::AllReduce, bytes, 8,
                                       parseNcclEnv({{"NCCL_ALGO", "ring"}, {"NCCL_MIN_NCHANNELS", "32"}}));
  EXPECT_EQ(raised.channels, 32);
  try {
    ncclChoose(dgxH100(), Collective::AllGather, bytes, 8, parseNcclEnv({{"NCCL_ALGO", "tree"}}));
    ADD_FAILURE() << "tree all-gather accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Unsupported);
    EXPECT_STREQ(e.what(), "no NCCL algorithm/protocol available for all_gather on 8 ranks (NCCL_ALGO=tree)");
  }
}

TEST(NcclChoose, NvlsOnlyWithSwitchReductionAndEnabled) {
  const std::size_t bytes = std::size_t{1} << 30;
  const NcclChoice off =
      ncclChoose(dgxH100(), Collective::AllReduce, bytes, 8, parseNcclEnv({{"NCCL_NVLS_ENABLE", "0"}}));
  EXPECT_NE(off.algorithm, NcclAlgorithm::Nvls);
  NcclSystem noReduce = dgxH100();
  noReduce.nvls = false;
  EXPECT_NE(ncclChoose(noReduce, Collective::AllReduce, bytes, 8).algorithm, NcclAlgorithm::Nvls);
  for (const NcclCandidate& c : off.candidates) {
    if (c.algorithm == NcclAlgorithm::Nvls || c.algorithm == NcclAlgorithm::NvlsTree) {
      EXPECT_LT(c.ncclUs, 0);
    }
  }
  // A100 has no multicast: NVLS never appears even when the switch could reduce.
  NcclSystem a100 = dgxA100();
  a100.nvls = true;
  EXPECT_EQ(ncclChoose(a100, Collective::AllReduce, bytes, 8).algorithm, NcclAlgorithm::Ring);
  // Two nodes: NVLSTree by default (NVLS alone needs CollNet), Ring when asked.
  EXPECT_EQ(ncclChoose(dgxH100(2), Collective::AllReduce, bytes, 16).algorithm, NcclAlgorithm::NvlsTree);
}

TEST(NcclChoose, AlgorithmsPerCollectiveAndNodeCount) {
  const std::size_t bytes = std::size_t{1} << 26;
  for (Collective c : {Collective::AllGather, Collective::ReduceScatter, Collective::Broadcast, Collective::Reduce}) {
    const NcclChoice choice = ncclChoose(dgxH100(2), c, bytes, 16);
    EXPECT_EQ(choice.algorithm, NcclAlgorithm::Ring) << toString(c);  // tree and NVLSTree are all-reduce only
    for (const NcclCandidate& cand : choice.candidates) {
      if (cand.algorithm == NcclAlgorithm::Tree || cand.algorithm == NcclAlgorithm::NvlsTree) {
        EXPECT_LT(cand.ncclUs, 0);
      }
    }
  }
  // PAT: all-gather / reduce-scatter with one GPU per node.
  NcclSystem onePerNode = dgxH100(4);
  onePerNode.gpusPerNode = 1;
  const NcclChoice pat = ncclChoose(onePerNode, Collective::AllGather, 1 << 10, 4);
  bool patOffered = false;
  for (const NcclCandidate& cand : pat.candidates)
    patOffered |= cand.algorithm == NcclAlgorithm::Pat && cand.ncclUs >= 0;
  EXPECT_TRUE(patOffered);
  for (const NcclCandidate& cand : ncclChoose(dgxH100(2), Collective::AllGather, 1 << 10, 16).candidates) {
    EXPECT_FALSE(cand.algorithm == NcclAlgorithm::Pat && cand.ncclUs >= 0);
  }
  // CollNet needs a reducing fabric and NCCL_COLLNET_ENABLE=1.
  NcclSystem sharp = dgxH100(4);
  sharp.collnet = true;
  const auto collnetOffered = [&](const NcclEnv& env) {
    for (const NcclCandidate& cand : ncclChoose(sharp, Collective::AllReduce, bytes, 32, env).candidates) {
      if (cand.algorithm == NcclAlgorithm::CollNetDirect && cand.ncclUs >= 0) return true;
    }
    return false;
  };
  EXPECT_FALSE(collnetOffered(NcclEnv{}));
  EXPECT_TRUE(collnetOffered(parseNcclEnv({{"NCCL_COLLNET_ENABLE", "1"}})));
  EXPECT_THROW(ncclChoose(dgxH100(), Collective::Barrier, 8, 8), Error);
}

TEST(NcclChoose, LL128OnlyWhereNcclEnablesIt) {
  // sm90+ allows LL128 up to PXN paths to the NIC; earlier GPUs only up to PXB.
  NcclSystem a100 = awsP4de();
  a100.gpuNicPath = NcclPath::Pxn;
  NcclSystem h100 = dgxH100(2);
  h100.gpuNicPath = NcclPath::Pxn;
  const auto ll128Offered = [](const NcclSystem& s) {
    for (const NcclCandidate& c : ncclChoose(s, Collective::AllReduce, 1 << 22, 16).candidates) {
      if (c.algorithm == NcclAlgorithm::Ring && c.protocol == NcclProtocol::LL128) return c.ncclUs >= 0;
    }
    return false;
  };
  EXPECT_FALSE(ll128Offered(a100));
  EXPECT_TRUE(ll128Offered(h100));
  EXPECT_TRUE(ll128Offered(awsP4de()));  // PIX
}

TEST(NcclPredict, ScalesWithNodeCount) {
  // Deeper trees pay more network hops at small sizes; at large sizes NVLSTree's per-node network traffic doubles
  // beyond two nodes (2S per direction through the NICs instead of S), so busbw falls below the NICs' 392 GB/s, and
  // from 4 nodes NCCL cuts its chunks to 64 KiB, whose messages pace each GPU's network proxy: every GPU heads all 16
  // channels with 2 x 2 connections each (parent and children, averaged over the two trees), 1024 chunks apiece.
  const std::size_t large = std::size_t{8} << 30;
  const double busFactor16 = busBandwidthFactor(Collective::AllReduce, 16);
  const double busFactor64 = busBandwidthFactor(Collective::AllReduce, 64);
  const NcclChoice small2 = ncclChoose(dgxH100(2), Collective::AllReduce, 8, 16);
  const NcclChoice small8 = ncclChoose(dgxH100(8), Collective::AllReduce, 8, 64);
  EXPECT_GT(small8.predictedUs, small2.predictedUs);
  const NcclChoice large2 = ncclChoose(dgxH100(2), Collective::AllReduce, large, 16);
  const NcclChoice large8 = ncclChoose(dgxH100(8), Collective::AllReduce, large, 64);
  EXPECT_EQ(large8.algorithm, NcclAlgorithm::NvlsTree);
  const double bus2 = static_cast<double>(large) * busFactor16 / large2.predictedUs / 1e3;
  const double bus8 = static_cast<double>(large) * busFactor64 / large8.predictedUs / 1e3;
  EXPECT_NEAR(bus2, 470, 20);  // the 2x8 IB table's 468 GB/s
  EXPECT_LT(bus8, bus2);
  EXPECT_LT(bus8, 392 * busFactor64 / 2);
  const NcclModelParams m;
  const auto ib = static_cast<std::size_t>(NicKind::InfiniBand);
  const double wireUs = 65536 / (1e3 * 50);  // a 64 KiB chunk on a GPU's 50 GB/s of NICs
  const double proxyUs = (m.netMessageUs[ib] + m.netMessageWireShare[ib] * wireUs) * (2 * 2 * 16) * 1024;
  EXPECT_GT(large8.predictedUs, proxyUs);
  EXPECT_LT(large8.predictedUs, proxyUs + 400);  // NCCL's latency and the NVLS pipeline on top
  EXPECT_NEAR(bus8, 322, 10);                    // four 4-10-node IB clusters: 316-335 GB/s
  // ncclPredictUs of the chosen triple is the choice's prediction.
  EXPECT_DOUBLE_EQ(
      ncclPredictUs(dgxH100(2), Collective::AllReduce, large, 16, large2.algorithm, large2.protocol, large2.channels),
      large2.predictedUs);
  EXPECT_LT(
      ncclPredictUs(dgxH100(), Collective::AllReduce, large, 8, NcclAlgorithm::NvlsTree, NcclProtocol::Simple, 16),
      0);  // NVLSTree needs more than one node
}

TEST(NcclChoose, NvlsTreeChunkFollowsNcclsVariables) {
  // enqueue.cc: NVLSTree starts from NCCL_NVLS_CHUNKSIZE (128 KiB), capped at 64 KiB from 4 nodes unless
  // NCCL_NVLSTREE_MAX_CHUNKSIZE sets the cap; 16 GiB is large enough that no size rule cuts it further.
  const std::size_t bytes = std::size_t{16} << 30;
  const auto chunk = [&](int nodes, std::map<std::string, std::string> vars) {
    vars["NCCL_ALGO"] = "NVLSTree";
    const NcclChoice c = ncclChoose(dgxH100(nodes), Collective::AllReduce, bytes, 8 * nodes, parseNcclEnv(vars));
    EXPECT_EQ(c.algorithm, NcclAlgorithm::NvlsTree);
    return c.chunkBytes;
  };
  EXPECT_EQ(chunk(2, {}), 128u << 10);
  EXPECT_EQ(chunk(4, {}), 64u << 10);
  EXPECT_EQ(chunk(2, {{"NCCL_NVLS_CHUNKSIZE", "262144"}}), 256u << 10);
  EXPECT_EQ(chunk(4, {{"NCCL_NVLS_CHUNKSIZE", "524288"}}), 64u << 10);  // the many-node cap still applies
  EXPECT_EQ(chunk(4, {{"NCCL_NVLS_CHUNKSIZE", "524288"}, {"NCCL_NVLSTREE_MAX_CHUNKSIZE", "524288"}}), 512u << 10);
  EXPECT_EQ(chunk(4, {{"NCCL_NVLSTREE_MAX_CHUNKSIZE", "524288"}}), 128u << 10);  // at most the NVLS chunk
  // NVLS alone takes NCCL_NVLS_CHUNKSIZE as its cap too.
  const NcclChoice nvls =
      ncclChoose(dgxH100(), Collective::AllReduce, bytes, 8, parseNcclEnv({{"NCCL_NVLS_CHUNKSIZE", "65536"}}));
  EXPECT_EQ(nvls.algorithm, NcclAlgorithm::Nvls);
  EXPECT_EQ(nvls.chunkBytes, 64u << 10);
  try {
    parseNcclEnv({{"NCCL_NVLSTREE_MAX_CHUNKSIZE", "1024"}});
    FAIL() << "a chunk under NVLS's smallest was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("NCCL_NVLSTREE_MAX_CHUNKSIZE=1024: out of range"), std::string::npos)
        << e.what();
  }
  try {
    parseNcclEnv({{"NCCL_NVLS_CHUNKSIZE", "big"}});
    FAIL() << "a chunk that is not a number was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("NCCL_NVLS_CHUNKSIZE=big: not an integer"), std::string::npos) << e.what();
  }
}

TEST(NcclChoose, TreeLL128ChunksAsCalcCollChunking) {
  // 2 x 8 A100 over EFA: nsteps = 1 + log2(2) + 0.1 x 8 = 2.8, so LL128's 576000-byte chunk halves to 72000 (at most
  // 128 KiB) while a channel has fewer than 2.8 x 64 / 8 = 22.4 chunks, then towards 32 KiB below 5.6.
  const struct {
    std::size_t bytes, chunk;
  } cases[] = {{std::size_t{1} << 20, 18000}, {std::size_t{4} << 20, 72000}, {std::size_t{64} << 20, 288000}};
  for (const auto& k : cases) {
    const NcclChoice c = ncclChoose(awsP4de(), Collective::AllReduce, k.bytes, 16);
    ASSERT_EQ(c.algorithm, NcclAlgorithm::Tree) << k.bytes;
    ASSERT_EQ(c.protocol, NcclProtocol::LL128) << k.bytes;
    ASSERT_EQ(c.channels, 8) << k.bytes;
    EXPECT_EQ(c.chunkBytes, k.chunk) << k.bytes;
  }
}

TEST(NcclPredict, LLPaysTheProxyQueueOncePerCall) {
  // The proxy sends an LL call's channels one after another, netChannelUs apart; later hops forward earlier channels
  // meanwhile, so the queue costs (channels - 1) x netChannelUs at any node count.
  const std::size_t bytes = 64 << 10;
  const int channels = 8;
  const double perChannelUs = 2.0;
  for (int nodes : {2, 8, 32}) {
    NcclSystem slow = dgxH100(nodes);
    slow.model.netChannelUs[static_cast<std::size_t>(NicKind::InfiniBand)] = perChannelUs;
    const auto at = [&](const NcclSystem& s, NcclProtocol p) {
      return ncclPredictUs(s, Collective::AllReduce, bytes, 8 * nodes, NcclAlgorithm::Tree, p, channels);
    };
    EXPECT_NEAR(at(slow, NcclProtocol::LL) - at(dgxH100(nodes), NcclProtocol::LL), (channels - 1) * perChannelUs, 1e-9)
        << nodes;
    EXPECT_DOUBLE_EQ(at(slow, NcclProtocol::LL128), at(dgxH100(nodes), NcclProtocol::LL128)) << nodes;
  }
  // One node has no network hop.
  NcclSystem slow = dgxH100();
  slow.model.netChannelUs[static_cast<std::size_t>(NicKind::InfiniBand)] = perChannelUs;
  EXPECT_DOUBLE_EQ(
      ncclPredictUs(slow, Collective::AllReduce, bytes, 8, NcclAlgorithm::Tree, NcclProtocol::LL, channels),
      ncclPredictUs(dgxH100(), Collective::AllReduce, bytes, 8, NcclAlgorithm::Tree, NcclProtocol::LL, channels));
}

TEST(NcclPredict, ANetworkHopStagesAnLLStepInHostMemory) {
  // Each network hop a call crosses stores and forwards an LL step (a channel's data on the wire, two bytes per data
  // byte) at llStagingGBps: the tree's 2 log2(nodes) hops at 4 KiB on one channel, the ring's 2 (nodes - 1) at a
  // channel's share of one rank's piece. A hop at the NICs' rate instead (staging as fast as the wire) is the other
  // term. LL128 and Simple stage nothing.
  const std::size_t bytes = 4 << 10;
  const double stagingGBps = NcclModelParams{}.llStagingGBps, nicsGBps = 8 * 50;
  for (int nodes : {2, 4, 16}) {
    NcclSystem fast = dgxH100(nodes);
    fast.model.llStagingGBps = 1e9;
    const int nranks = 8 * nodes;
    const auto at = [&](const NcclSystem& s, NcclAlgorithm a, NcclProtocol p, int channels) {
      return ncclPredictUs(s, Collective::AllReduce, bytes, nranks, a, p, channels);
    };
    const int treeHops = 2 * (nodes == 2 ? 1 : nodes == 4 ? 2 : 4);
    EXPECT_NEAR(at(dgxH100(nodes), NcclAlgorithm::Tree, NcclProtocol::LL, 1) -
                    at(fast, NcclAlgorithm::Tree, NcclProtocol::LL, 1),
                treeHops * 2.0 * bytes / 1e3 * (1 / stagingGBps - 1 / nicsGBps), 1e-9)
        << nodes;
    const double piece = static_cast<double>(bytes) / 2 / nranks;  // two channels
    EXPECT_NEAR(at(dgxH100(nodes), NcclAlgorithm::Ring, NcclProtocol::LL, 2) -
                    at(fast, NcclAlgorithm::Ring, NcclProtocol::LL, 2),
                2 * (nodes - 1) * 2.0 * piece / 1e3 / stagingGBps, 1e-6)
        << nodes;
    for (const NcclProtocol p : {NcclProtocol::LL128, NcclProtocol::Simple})
      EXPECT_DOUBLE_EQ(at(dgxH100(nodes), NcclAlgorithm::Tree, p, 1), at(fast, NcclAlgorithm::Tree, p, 1)) << nodes;
  }
  // One node has no network hop.
  NcclSystem fast = dgxH100();
  fast.model.llStagingGBps = 1e9;
  EXPECT_DOUBLE_EQ(ncclPredictUs(fast, Collective::AllReduce, bytes, 8, NcclAlgorithm::Ring, NcclProtocol::LL, 1),
                   ncclPredictUs(dgxH100(), Collective::AllReduce, bytes, 8, NcclAlgorithm::Ring, NcclProtocol::LL, 1));
}

TEST(NcclPredict, TreeChannelRunsAtTheTreesRefinedRate) {
  // A tree search channel runs at tune()'s tree refinements per channel: Simple at 0.92 of the graph's speed under
  // perChMaxTreeBw (36 GB/s on Hopper past two nodes), LL at 1/3.8 of that, LL128 at 120/128 of it under
  // perChMaxTreeLL128Bw (29 GB/s there); past two nodes the communicator's channels, duplicated from the search's,
  // share it. Ring's factors (LL 1/2, LL128 0.92 under 36.7 GB/s) read LL 1.8 times and LL128 1.2 times too fast. The
  // rate is the bus bytes of 1 GiB more over the time they add (no correction factor and the same chunks at these
  // sizes).
  const NcclSystem s = dgxH100(4);
  const NcclComm comm = ncclComm(s, 32);
  const double share =
      static_cast<double>(comm.graphs[static_cast<std::size_t>(NcclAlgorithm::Tree)].nChannels) / comm.defaultChannels;
  EXPECT_DOUBLE_EQ(share, 0.5);  // connect.cc doubles sm90's multi-node channels
  const std::size_t gib = std::size_t{1} << 30;
  const double busBytes = static_cast<double>(gib) * 2 * 31 / 32;
  const auto rateGBps = [&](NcclProtocol p) {
    const double us = ncclPredictUs(s, Collective::AllReduce, 2 * gib, 32, NcclAlgorithm::Tree, p, 1) -
                      ncclPredictUs(s, Collective::AllReduce, gib, 32, NcclAlgorithm::Tree, p, 1);
    return busBytes / us / 1e3;
  };
  const double simple = rateGBps(NcclProtocol::Simple);
  EXPECT_GT(simple, 10);
  EXPECT_LE(simple, 36.0 * share + 1e-9);
  // Then each protocol's hardware rate (NcclModelParams::protocolRate) scales what it reaches.
  const auto rate = [&](NcclProtocol p) {
    return s.model.protocolRate[static_cast<std::size_t>(s.arch)][static_cast<std::size_t>(p)];
  };
  EXPECT_NEAR(rateGBps(NcclProtocol::LL), simple / 3.8 * rate(NcclProtocol::LL), 1e-9);
  EXPECT_NEAR(rateGBps(NcclProtocol::LL128),
              std::min(simple / share * 120 / 128, 29.0) * share * rate(NcclProtocol::LL128), 1e-9);
}

/// Sizes of an nccl-tests sweep -b 8 -e 8G -f 4.
std::vector<std::size_t> sweepSizes() {
  std::vector<std::size_t> out;
  for (std::size_t b = 8; b <= (std::size_t{8} << 30); b *= 4) out.push_back(b);
  return out;
}

// enqueue.cc: "NVLS should not need more than 16 channels to get peak BW". NCCL's 16 NVLS channels reach the peak
// (more add nothing); 8, as NCCL_MAX_CTAS or a tuner's rule may give, carry half of it.
TEST(NcclPredict, NvlsChannelsEachCarryASixteenthOfThePeak) {
  const NcclSystem s = dgxH100();
  constexpr std::size_t kBytes = std::size_t{8} << 30;
  const auto busbw = [&](int channels) {
    const double us =
        ncclPredictUs(s, Collective::AllReduce, kBytes, 8, NcclAlgorithm::Nvls, NcclProtocol::Simple, channels);
    return static_cast<double>(kBytes) * 2 * 7 / 8 / us / 1e3;
  };
  const double peak = busbw(16);
  EXPECT_GT(peak, 400);
  EXPECT_NEAR(busbw(32), peak, 1e-9);
  EXPECT_NEAR(busbw(8) / peak, 0.5, 0.01);
  EXPECT_NEAR(busbw(2) / peak, 0.125, 0.01);
  // NCCL's own choice uses the 16, and NCCL_MAX_CTAS=8 (transport/nvls.cc: NVLS channels within the CTA bounds)
  // halves what NVLS reaches.
  const NcclChoice own = ncclChoose(s, Collective::AllReduce, kBytes, 8);
  ASSERT_EQ(own.algorithm, NcclAlgorithm::Nvls);
  EXPECT_EQ(own.channels, 16);
  const NcclChoice eight = ncclChoose(s, Collective::AllReduce, kBytes, 8, parseNcclEnv({{"NCCL_MAX_CTAS", "8"}}));
  if (eight.algorithm == NcclAlgorithm::Nvls) {
    EXPECT_EQ(eight.channels, 8);
    EXPECT_NEAR(own.predictedUs / eight.predictedUs, 0.5, 0.01);
  } else {
    EXPECT_LT(eight.predictedUs, 2 * own.predictedUs);  // NCCL's estimate moved to a ring that does better
  }
  // The communicator's channel bounds leave NVLS's alone; NCCL_NVLS_NCHANNELS sets them.
  EXPECT_EQ(ncclComm(s, 8, parseNcclEnv({{"NCCL_MAX_NCHANNELS", "8"}})).nvlsChannels, 16);
  EXPECT_EQ(ncclComm(s, 8, parseNcclEnv({{"NCCL_MAX_NCHANNELS", "8"}})).nChannels, 8);
  EXPECT_EQ(ncclComm(s, 8, parseNcclEnv({{"NCCL_MAX_CTAS", "8"}})).nvlsChannels, 8);
  EXPECT_EQ(ncclComm(s, 8, parseNcclEnv({{"NCCL_NVLS_NCHANNELS", "4"}})).nvlsChannels, 4);
  EXPECT_EQ(ncclComm(s, 8, parseNcclEnv({{"NCCL_NVLS_NCHANNELS", "4"}, {"NCCL_MIN_CTAS", "12"}})).nvlsChannels, 12);
}

TEST(NcclPredict, FixedChoiceTimeGrowsWithSize) {
  // For every (algorithm, protocol, channels) the predicted time never falls as the size grows.
  for (const NcclSystem& base : {dgxH100(2), awsP5(8), awsP4de(32)}) {
    const int nranks = base.nodes * base.gpusPerNode;
    for (NcclAlgorithm a : {NcclAlgorithm::Tree, NcclAlgorithm::Ring, NcclAlgorithm::NvlsTree}) {
      for (NcclProtocol p : kNcclProtocols) {
        for (int nc : {1, 8, 32}) {
          double last = 0;
          for (std::size_t b : sweepSizes()) {
            const double us = ncclPredictUs(base, Collective::AllReduce, b, nranks, a, p, nc);
            if (us < 0) break;
            EXPECT_GE(us, last) << toString(a) << "/" << toString(p) << " " << nc << " channels at " << b << " B, "
                                << nranks << " ranks, " << toString(base.nicKind);
            last = us;
          }
        }
      }
    }
  }
}

TEST(NcclPredict, NcclChoiceCurveNearlyMonotonicAtOtherNodeCounts) {
  // NCCL's choice on 16, 64 and 256 GPUs of the multi-node systems: no size runs more than 10% faster than a smaller
  // one (a choice switch may dip a little, never by a factor), and the largest sizes run near the network's rate.
  const std::string source = COLLBENCH_SOURCE_DIR;
  for (const char* name : {"dgx-h100-ib400", "aws-p5", "aws-p4de"}) {
    const Topology t = loadTopology(source + "/topologies/" + name + ".json");
    for (int nranks : {16, 64, 256}) {
      const NcclSystem sys = ncclSystemOf(t, nranks);
      double slowest = 0;
      std::size_t slowestAt = 0;
      for (std::size_t b : sweepSizes()) {
        const double us = ncclChoose(sys, Collective::AllReduce, b, nranks).predictedUs;
        // Known exception: on p5 NCCL switches from Tree/LL on 32 channels (128 KiB) to Tree/LL128 on 60, and the
        // model's LL proxy queue of 31 channels makes 128 KiB up to 2x slower than 512 KiB. The real 2-node p5 table
        // dips there too (135 us at 64 KiB, 109 us at 128 KiB), so the queue's growth beyond 16 channels is in doubt.
        const bool p5Switch = std::string(name) == "aws-p5" && slowestAt == (std::size_t{128} << 10);
        EXPECT_GE(us, (p5Switch ? 0.45 : 0.9) * slowest) << name << " -g " << nranks << ": " << b << " B takes " << us
                                                         << " us, " << slowestAt << " B " << slowest << " us";
        if (us > slowest) {
          slowest = us;
          slowestAt = b;
        }
      }
      const std::size_t big = std::size_t{8} << 30;
      const double busbw = static_cast<double>(big) * 2 * (nranks - 1) / nranks /
                           (1e3 * ncclChoose(sys, Collective::AllReduce, big, nranks).predictedUs);
      const double net = sys.nicsPerNode * sys.nicGBps;
      EXPECT_GT(busbw, 0.7 * net) << name << " -g " << nranks;
      EXPECT_LT(busbw, 1.3 * net * 2) << name << " -g " << nranks;  // NVLSTree / tree: up to twice the ring's rate
    }
  }
}

TEST(NcclSystemOf, ReadsTheTopology) {
  Topology t;
  t.name = "two-hosts";
  for (int h = 0; h < 2; ++h) {
    const std::string host = "n" + std::to_string(h);
    t.nodes.push_back({host + ".nvsw", NodeKind::Switch, host, 900, 0});
    t.nodes.push_back({host + ".pcie", NodeKind::Switch, host, 0, 0});
    for (int g = 0; g < 2; ++g) {
      const std::string gpu = host + ".gpu" + std::to_string(g), nic = host + ".nic" + std::to_string(g);
      TopoNode n{gpu, NodeKind::Gpu, host, 1000, 0};
      n.arch = h == 0 && g == 0 ? "" : "hopper";
      t.nodes.push_back(n);
      t.nodes.push_back({nic, NodeKind::Nic, host, 0, 0});
      t.links.push_back({gpu, host + ".nvsw", 450, 0.6, "nvlink"});
      t.links.push_back({gpu, host + ".pcie", 64, 0.5, "pcie"});
      t.links.push_back({nic, host + ".pcie", 64, 0.5, "pcie"});
      t.links.push_back({nic, "fabric", 50, 1.0, "nic"});
      t.ranks.push_back(gpu);
    }
  }
  t.nodes.push_back({"fabric", NodeKind::Switch, "", 200, 0});
  const NcclSystem s = ncclSystemOf(t, 4);
  EXPECT_EQ(s.arch, GpuArch::Hopper);  // first GPU has no arch: 450 GB/s of NVLink says hopper
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.gpusPerNode, 2);
  EXPECT_TRUE(s.nvlink);
  EXPECT_DOUBLE_EQ(s.nvlinkGBps, 450);
  EXPECT_TRUE(s.nvswitch);
  EXPECT_TRUE(s.nvls);
  EXPECT_TRUE(s.collnet);
  EXPECT_EQ(s.nicsPerNode, 2);
  EXPECT_DOUBLE_EQ(s.nicGBps, 50);
  EXPECT_EQ(s.gpuNicPath, NcclPath::Pix);
  EXPECT_EQ(s.nicKind, NicKind::InfiniBand);
  EXPECT_EQ(ncclSystemOf(t, 2).nodes, 1);
  t.nodes[2].arch = "ampere";             // n0.gpu0
  EXPECT_FALSE(ncclSystemOf(t, 4).nvls);  // no multicast before hopper
  EXPECT_THROW(ncclSystemOf(t, 5), Error);
}

// ---- What the system and the benchmark add ----

TEST(NcclSystemOf, NetworkKindIsAWordOfTheTopology) {
  // The kind comes from a word of the name, description or NIC ids: "EFA", "efa2", "RoCEv2", "TCPXO", "tcpx"; not
  // from a word that contains the letters ("default", "process").
  const auto kindOf = [](const std::string& description) {
    Topology t = loadTopology("dgx-h100-ib400");
    t.description = description;
    return ncclSystemOf(t, 16).nicKind;
  };
  EXPECT_EQ(kindOf("the default process layout"), NicKind::InfiniBand);
  EXPECT_EQ(kindOf("8 x 400G RoCEv2 NICs"), NicKind::Roce);
  EXPECT_EQ(kindOf("32 EFA NICs"), NicKind::Efa2);  // hopper: EFA's second generation
  EXPECT_EQ(kindOf("GPUDirect-TCPXO"), NicKind::Tcpxo);
  EXPECT_EQ(kindOf("tcpx rails"), NicKind::Tcpxo);
  EXPECT_EQ(kindOf("an efax-like fabric"), NicKind::InfiniBand);
}

TEST(NcclSystemOf, EfaAndTheTopologysVariables) {
  const NcclSystem p4de = ncclSystemOf(loadTopology("aws-p4de"), 16);
  EXPECT_EQ(p4de.nicKind, NicKind::Efa);
  EXPECT_DOUBLE_EQ(p4de.netPluginLatencyUs, 75);  // aws-ofi-nccl platform-aws
  EXPECT_EQ(p4de.ncclEnv, (std::map<std::string, std::string>{{"NCCL_PROTO", "simple"}}));
  EXPECT_EQ(p4de.nicsPerNode, 4);  // one NIC per two GPUs: nothing to group
  EXPECT_DOUBLE_EQ(p4de.nicGBps, 12.5);
  // p5's 32 NICs reach NCCL as one device per GPU over its four (the plugin's NIC groups), and NCCL builds 16
  // channels on them, as its log says of 2 p5 ("16 coll channels"). aws-p5 holds those 8 devices; the same system
  // written with its 32 NICs of 100 Gb/s is grouped into them.
  const NcclSystem p5 = ncclSystemOf(loadTopology("aws-p5"), 16);
  EXPECT_EQ(p5.nicsPerNode, 8);
  EXPECT_DOUBLE_EQ(p5.nicGBps, 50);
  EXPECT_EQ(ncclChoose(p5, Collective::AllReduce, std::size_t{1} << 30, 16).channels, 16);
  const Topology physical = loadTopology("aws-p5", {{"nics_per_node", "32"}, {"nic_GBps", "12.5"}});
  ASSERT_EQ(std::count_if(physical.nodes.begin(), physical.nodes.end(),
                          [](const TopoNode& n) { return n.kind == NodeKind::Nic && n.host == "n0"; }),
            32);
  const NcclSystem grouped = ncclSystemOf(physical, 16);
  EXPECT_EQ(grouped.nicsPerNode, 8);
  EXPECT_DOUBLE_EQ(grouped.nicGBps, 50);
  // The groups are the host's, also for a call on fewer of its GPUs (2 nodes x 4 GPUs: still 8 devices of 50 GB/s).
  Topology fourPerHost = physical;
  for (int g = 0; g < 4; ++g)
    std::swap(fourPerHost.ranks[static_cast<std::size_t>(g) + 4], fourPerHost.ranks[static_cast<std::size_t>(g) + 8]);
  const NcclSystem half = ncclSystemOf(fourPerHost, 8);
  EXPECT_EQ(half.gpusPerNode, 4);
  EXPECT_EQ(half.nicsPerNode, 8);
  EXPECT_DOUBLE_EQ(half.nicGBps, 50);
  // aws-ofi-nccl's p5 platform: an 8 MiB buffer and 512 KiB NVLS and NVLSTree chunks; its tuner.
  EXPECT_EQ(p5.ncclEnv, (std::map<std::string, std::string>{{"NCCL_BUFFSIZE", "8388608"},
                                                            {"NCCL_NVLSTREE_MAX_CHUNKSIZE", "524288"},
                                                            {"NCCL_NVLS_CHUNKSIZE", "524288"},
                                                            {"NCCL_TUNER_PLUGIN", "libnccl-ofi-tuner.so"}}));
  const NcclSystem ib = ncclSystemOf(loadTopology("dgx-h100-ib400"), 16);
  EXPECT_DOUBLE_EQ(ib.netPluginLatencyUs, 0);  // NCCL's own IB transport reports none
  EXPECT_TRUE(ib.ncclEnv.empty());

  Topology bad = loadTopology("aws-p4de");
  bad.ncclEnv["NCCL_PROTO"] = "LL256";
  try {
    ncclSystemOf(bad, 16);
    FAIL() << "a bad nccl_env value was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidTopology);
    EXPECT_NE(std::string(e.what()).find("aws-p4de: nccl_env: NCCL_PROTO=LL256"), std::string::npos) << e.what();
  }
}

TEST(NcclChoose, TheSystemsVariablesApplyUnderTheUsers) {
  NcclSystem s = awsP4de();
  const NcclChoice free = ncclChoose(s, Collective::AllReduce, 1 << 20, 16);
  EXPECT_NE(free.protocol, NcclProtocol::Simple);
  s.ncclEnv = {{"NCCL_PROTO", "simple"}, {"NCCL_MAX_NCHANNELS", "2"}};
  const NcclChoice system = ncclChoose(s, Collective::AllReduce, 1 << 20, 16);
  EXPECT_EQ(system.protocol, NcclProtocol::Simple);
  EXPECT_LE(system.channels, 2);
  EXPECT_NE(system.reason.find("the system sets NCCL_MAX_NCHANNELS=2 NCCL_PROTO=simple"), std::string::npos)
      << system.reason;
  // The user's variable wins; the system's others still apply.
  const NcclChoice user = ncclChoose(s, Collective::AllReduce, 1 << 20, 16, parseNcclEnv({{"NCCL_PROTO", "LL"}}));
  EXPECT_EQ(user.protocol, NcclProtocol::LL);
  EXPECT_LE(user.channels, 2);
  EXPECT_NE(user.reason.find("NCCL_PROTO=LL; the system sets NCCL_MAX_NCHANNELS=2"), std::string::npos) << user.reason;
  EXPECT_EQ(user.reason.find("NCCL_PROTO=simple"), std::string::npos) << user.reason;
}

// aws-ofi-nccl's p5 polygons (src/tuner/nccl_ofi_regions.cpp), read at nccl-tests sizes: at 32 ranks tree LL128
// below 36 MiB, ring LL128 to the edge from (1 GiB, 17) to (2 GiB, 64), ring Simple beyond; at 128 ranks NVLSTree
// Simple from 2 GiB to the edge from (2.5 GiB, 64) to (7.5 GiB, 160); at 256 ranks NVLSTree between 288 MiB and
// (1 GiB + 1 MiB). A corner belongs to the first polygon in the tuner's order that has it.
TEST(NcclChoose, AwsOfiTunerPicksByItsP5Regions) {
  const NcclSystem p5 = ncclSystemOf(loadTopology("aws-p5"), 256);
  constexpr std::size_t kMiB = std::size_t{1} << 20, kGiB = std::size_t{1} << 30;
  struct Expect {
    int nranks;
    std::size_t bytes;
    NcclAlgorithm algorithm;
    NcclProtocol protocol;
  };
  for (const Expect& e : {Expect{32, 32 * kMiB, NcclAlgorithm::Tree, NcclProtocol::LL128},
                          Expect{32, 64 * kMiB, NcclAlgorithm::Ring, NcclProtocol::LL128},
                          Expect{32, kGiB, NcclAlgorithm::Ring, NcclProtocol::LL128},
                          Expect{32, 2 * kGiB, NcclAlgorithm::Ring, NcclProtocol::Simple},
                          Expect{64, 64 * kMiB, NcclAlgorithm::Tree, NcclProtocol::LL128},
                          Expect{64, 128 * kMiB, NcclAlgorithm::Ring, NcclProtocol::LL128},
                          Expect{64, 2 * kGiB, NcclAlgorithm::Ring, NcclProtocol::LL128},  // a corner
                          Expect{64, 4 * kGiB, NcclAlgorithm::Ring, NcclProtocol::Simple},
                          Expect{128, 256 * kMiB, NcclAlgorithm::Tree, NcclProtocol::LL128},
                          Expect{128, 4 * kGiB, NcclAlgorithm::NvlsTree, NcclProtocol::Simple},
                          Expect{128, 8 * kGiB, NcclAlgorithm::Ring, NcclProtocol::Simple},
                          Expect{256, 512 * kMiB, NcclAlgorithm::NvlsTree, NcclProtocol::Simple},
                          Expect{256, kGiB, NcclAlgorithm::NvlsTree, NcclProtocol::Simple},
                          Expect{256, 2 * kGiB, NcclAlgorithm::Ring, NcclProtocol::LL128},
                          Expect{256, 8 * kGiB, NcclAlgorithm::NvlsTree, NcclProtocol::Simple}}) {
    const NcclChoice c = ncclChoose(p5, Collective::AllReduce, e.bytes, e.nranks);
    EXPECT_EQ(c.tuner, "aws-ofi-nccl") << e.nranks << " ranks, " << e.bytes << " B";
    EXPECT_EQ(c.algorithm, e.algorithm) << e.nranks << " ranks, " << e.bytes << " B: " << c.reason;
    EXPECT_EQ(c.protocol, e.protocol) << e.nranks << " ranks, " << e.bytes << " B: " << c.reason;
    EXPECT_NE(c.reason.find("aws-ofi-nccl's p5 region tuner picks it at " + std::to_string(e.nranks) + " ranks"),
              std::string::npos)
        << c.reason;
    EXPECT_EQ(ncclChoiceSummary(c).rfind("NCCL 2.28 under the aws-ofi-nccl tuner: ", 0), 0u) << ncclChoiceSummary(c);
  }
  // Where the tuner leaves NCCL's own estimate: 2 nodes, NCCL_TUNER_PLUGIN=none, another network, a polygon whose pair
  // the environment turns off with no later polygon holding the point.
  EXPECT_TRUE(ncclChoose(p5, Collective::AllReduce, 64 * kMiB, 16).tuner.empty());
  const NcclChoice own =
      ncclChoose(p5, Collective::AllReduce, 64 * kMiB, 32, parseNcclEnv({{"NCCL_TUNER_PLUGIN", "none"}}));
  EXPECT_TRUE(own.tuner.empty());
  EXPECT_NE(own.reason.find("NCCL's estimate"), std::string::npos) << own.reason;
  EXPECT_FALSE(own.algorithm == NcclAlgorithm::Ring && own.protocol == NcclProtocol::LL128) << own.reason;
  // A library whose name only contains the letters (a profiler) is not aws-ofi-nccl's.
  EXPECT_TRUE(
      ncclChoose(p5, Collective::AllReduce, 64 * kMiB, 32, parseNcclEnv({{"NCCL_TUNER_PLUGIN", "libprofiler.so"}}))
          .tuner.empty());
  EXPECT_TRUE(ncclChoose(ncclSystemOf(loadTopology("dgx-h100-ib400"), 32), Collective::AllReduce, 64 * kMiB, 32,
                         parseNcclEnv({{"NCCL_TUNER_PLUGIN", "libnccl-ofi-tuner.so"}}))
                  .tuner.empty());
  const NcclChoice noNvlsTree =
      ncclChoose(p5, Collective::AllReduce, 4 * kGiB, 128, parseNcclEnv({{"NCCL_ALGO", "^NVLSTree"}}));
  EXPECT_TRUE(noNvlsTree.tuner.empty()) << noNvlsTree.reason;
  EXPECT_NE(noNvlsTree.algorithm, NcclAlgorithm::NvlsTree);
  // A pair the tuner passes over gives way to the next polygon holding the point: (2 GiB, 128) is a corner of ring
  // LL128's polygon and of NVLSTree's; (2 GiB, 64) only of ring LL128's, so it falls to NCCL.
  const NcclEnv noLL128 = parseNcclEnv({{"NCCL_PROTO", "^LL128"}});
  const NcclChoice shared = ncclChoose(p5, Collective::AllReduce, 2 * kGiB, 128, noLL128);
  EXPECT_EQ(shared.tuner, "aws-ofi-nccl");
  EXPECT_EQ(shared.algorithm, NcclAlgorithm::NvlsTree) << shared.reason;
  EXPECT_TRUE(ncclChoose(p5, Collective::AllReduce, 2 * kGiB, 64, noLL128).tuner.empty());
  // Other collectives have no p5 polygons at 8 ranks per node.
  EXPECT_TRUE(ncclChoose(p5, Collective::AllGather, 64 * kMiB, 32).tuner.empty());
}

// NCCL's example tuner (ext-tuner/example/plugin.c) applies the first rule of NCCL_TUNER_CONFIG_FILE that matches and
// whose pair NCCL offers; it sets 1 channel before matching, so a rule's -1 or no rule leaves the call on 1 channel.
TEST(NcclChoose, NcclsExampleTunerAppliesItsFirstMatchingRule) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "collbench_example_tuner.conf";
  {
    std::ofstream out(file);
    out << "# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff\n"
           "allreduce,0,65536,ring,ll,4,1,8\n"
           "allreduce,65537,4194304,nvls,simple,8,-1,-1,-1,-1\n"  // no NVLS on A100: passed over there
           "allreduce,65537,4194304,ring,ll128,-1,-1,-1\n"
           "allreduce,4194305,1073741824,ring,simple,64,1,8,1,0\n"
           "allreduce,0,1073741824,tree,simple,2,1,8,2,-1\n";  // two operations per group: not nccl-tests'
  }
  const NcclEnv env =
      parseNcclEnv({{"NCCL_TUNER_PLUGIN", "libnccl-tuner-example.so"}, {"NCCL_TUNER_CONFIG_FILE", file.string()}});
  ASSERT_EQ(env.tunerRules.size(), 5u);
  const NcclSystem h100 = dgxH100(), a100 = dgxA100();
  struct Expect {
    const NcclSystem* sys;
    std::size_t bytes;
    NcclAlgorithm algorithm;
    NcclProtocol protocol;
    int channels;
  };
  for (const Expect& e : {Expect{&h100, 1024, NcclAlgorithm::Ring, NcclProtocol::LL, 4},
                          Expect{&h100, 1 << 20, NcclAlgorithm::Nvls, NcclProtocol::Simple, 8},
                          Expect{&a100, 1 << 20, NcclAlgorithm::Ring, NcclProtocol::LL128, 1},
                          Expect{&h100, 64 << 20, NcclAlgorithm::Ring, NcclProtocol::Simple, 24}}) {
    const NcclChoice c = ncclChoose(*e.sys, Collective::AllReduce, e.bytes, 8, env);
    EXPECT_EQ(c.tuner, "NCCL example") << e.bytes << ": " << c.reason;
    EXPECT_EQ(c.algorithm, e.algorithm) << e.bytes << ": " << c.reason;
    EXPECT_EQ(c.protocol, e.protocol) << e.bytes << ": " << c.reason;
    EXPECT_EQ(c.channels, e.channels) << e.bytes << ": " << c.reason;  // 64: capped at the communicator's 24
    EXPECT_DOUBLE_EQ(c.predictedUs,
                     ncclPredictUs(*e.sys, Collective::AllReduce, e.bytes, 8, e.algorithm, e.protocol, e.channels));
    EXPECT_NE(c.reason.find("the NCCL example tuner's rule for "), std::string::npos) << c.reason;
  }
  // No rule for 16 ranks: NCCL's own pair, on the 1 channel the plugin set.
  const NcclChoice none = ncclChoose(dgxH100(2), Collective::AllReduce, 64 << 20, 16, env);
  EXPECT_EQ(none.tuner, "NCCL example");
  EXPECT_EQ(none.channels, 1);
  EXPECT_NE(none.reason.find("no rule of the NCCL example tuner matches, and it sets 1 channel all the same; the "
                             "algorithm and protocol are NCCL's estimate's"),
            std::string::npos)
      << none.reason;
  // A named file that cannot be read, and a bad line, are errors that name them.
  try {
    parseNcclEnv({{"NCCL_TUNER_PLUGIN", "libnccl-tuner-example.so"}, {"NCCL_TUNER_CONFIG_FILE", "/nonexistent.conf"}});
    FAIL() << "a missing tuner file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_STREQ(e.what(), "NCCL_TUNER_CONFIG_FILE=/nonexistent.conf: cannot read it");
  }
  {
    std::ofstream out(file);
    out << "allreduce,0,100,ring,ll256,1,1,8\n";
  }
  try {
    parseNcclEnv({{"NCCL_TUNER_PLUGIN", "libnccl-tuner-example.so"}, {"NCCL_TUNER_CONFIG_FILE", file.string()}});
    FAIL() << "a bad tuner line was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find(":1: protocol: unknown protocol"), std::string::npos) << e.what();
  }
  std::filesystem::remove(file);
}

TEST(NcclChoose, PluginLatencyEntersNcclsEstimateNotThePrediction) {
  NcclSystem s = awsP5();
  const auto tree = [&](NcclProtocol p) {
    const NcclChoice c = ncclChoose(s, Collective::AllReduce, 64, 16,
                                    parseNcclEnv({{"NCCL_ALGO", "Tree"}, {"NCCL_PROTO", std::string(toString(p))}}));
    return std::pair{c.ncclUs, c.predictedUs};
  };
  const auto [llBefore, llPredicted] = tree(NcclProtocol::LL);
  const auto [simpleBefore, simplePredicted] = tree(NcclProtocol::Simple);
  s.netPluginLatencyUs = 75;
  // Two nodes: one network step up the tree and one down; Simple pays the latency twice per step (the flush).
  EXPECT_NEAR(tree(NcclProtocol::LL).first - llBefore, 2 * 75, 1e-9);
  EXPECT_NEAR(tree(NcclProtocol::Simple).first - simpleBefore, 2 * 2 * 75, 1e-9);
  EXPECT_DOUBLE_EQ(tree(NcclProtocol::LL).second, llPredicted);
  EXPECT_DOUBLE_EQ(tree(NcclProtocol::Simple).second, simplePredicted);
}

TEST(NcclChoose, OnAnAmdHostNcclsEstimateTakesItsAmdRows) {
  // 2 x 8 A100 on OCI's BM.GPU4.8, whose hosts are AMD EPYC 7542 (the topology's cpu_vendor).
  const NcclSystem amd = ncclSystemOf(loadTopology("oci-a100-roce"), 16);
  ASSERT_EQ(amd.cpuVendor, CpuVendor::Amd);
  EXPECT_EQ(ncclSystemOf(loadTopology("dgx-h100-ib400"), 16).cpuVendor, CpuVendor::Intel);
  EXPECT_EQ(ncclSystemOf(loadTopology("h100-4x8-rail"), 16).cpuVendor, CpuVendor::Intel);  // names none
  NcclSystem intel = amd;
  intel.cpuVendor = CpuVendor::Intel;
  const auto ring = [](const NcclSystem& s, NcclProtocol p, std::size_t bytes) {
    return ncclChoose(s, Collective::AllReduce, bytes, 16,
                      parseNcclEnv({{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", std::string(toString(p))}}))
        .ncclUs;
  };
  // getNetOverhead: the ring's 28 steps inside a node (of 30; 2 cross the network) take at least 1 us each on an
  // Intel host, 2 on an AMD one, three times that for Simple: 3 and 6 against NVLink's 3.4 us Simple step.
  EXPECT_NEAR(ring(amd, NcclProtocol::Simple, 8) - ring(intel, NcclProtocol::Simple, 8), 28 * (6 - 3.4), 1e-3);
  // LL: 1 and 2 against NVLink's 0.6 us step; and llMaxBws' row for several nodes caps ring LL at 22.5 GB/s of bus
  // bandwidth on AMD hosts, 39 on Intel ones (2 nodes), of which 16 / 30 is algorithm bandwidth.
  const std::size_t mib = std::size_t{1} << 20;
  EXPECT_NEAR(ring(amd, NcclProtocol::LL, mib) - ring(intel, NcclProtocol::LL, mib),
              28 * (2 - 1) + mib / 1e3 * 30 / 16 * (1 / 22.5 - 1 / 39.0), 1e-3);
  // So NCCL's choice moves: at 256 KiB the AMD host takes tree LL128 (the OCI table runs 68 us there, the model
  // 69), where an Intel one would take ring LL (93 us in the model).
  const NcclChoice onAmd = ncclChoose(amd, Collective::AllReduce, 256 << 10, 16);
  EXPECT_EQ(onAmd.algorithm, NcclAlgorithm::Tree);
  EXPECT_EQ(onAmd.protocol, NcclProtocol::LL128);
  const NcclChoice onIntel = ncclChoose(intel, Collective::AllReduce, 256 << 10, 16);
  EXPECT_EQ(onIntel.algorithm, NcclAlgorithm::Ring);
  EXPECT_EQ(onIntel.protocol, NcclProtocol::LL);
  // One node: NCCL takes LL's cap by the GPU, not the host.
  const NcclSystem dgx = ncclSystemOf(loadTopology("dgx-a100-8x1"), 8);
  ASSERT_EQ(dgx.cpuVendor, CpuVendor::Amd);
  NcclSystem dgxIntel = dgx;
  dgxIntel.cpuVendor = CpuVendor::Intel;
  for (const NcclProtocol p : {NcclProtocol::LL, NcclProtocol::Simple}) {
    const auto on = [&](const NcclSystem& s) {
      return ncclChoose(s, Collective::AllReduce, mib, 8,
                        parseNcclEnv({{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", std::string(toString(p))}}))
          .ncclUs;
    };
    EXPECT_DOUBLE_EQ(on(dgx), on(dgxIntel)) << toString(p);
  }
}

TEST(NcclChoose, TheLogsNcclVersionTunesNvlsTreeAsThatVersionDid) {
  EXPECT_EQ(ncclVersionCode("2.26.2"), 22602);
  EXPECT_EQ(ncclVersionCode("2.28.9"), kNcclVersionEmulated);
  for (const char* bad : {"", "2.26", "2.26.x", "v2.26.2", "2.260.1", "2.26.2.1"})
    EXPECT_EQ(ncclVersionCode(bad), 0) << bad;
  // 4 x 8 H100 on IB at 4 MiB: 2.28 estimates Tree/LL128 below NVLSTree; 2.26 (bandwidth x 5/6 without NVLS
  // efficiency, 14 us network steps) puts NVLSTree first.
  const NcclSystem s = dgxH100(4);
  NcclEnv env;
  EXPECT_EQ(ncclChoose(s, Collective::AllReduce, 4 << 20, 32, env).algorithm, NcclAlgorithm::Tree);
  env.version = ncclVersionCode("2.26.2");
  const NcclChoice old = ncclChoose(s, Collective::AllReduce, 4 << 20, 32, env);
  EXPECT_EQ(old.algorithm, NcclAlgorithm::NvlsTree);
  // The time model takes that version's NVLSTree network step: 2 x log2(4) steps of 14 us against 20.9.
  NcclEnv nvlsTree = parseNcclEnv({{"NCCL_ALGO", "NVLSTree"}});
  const double now = ncclChoose(s, Collective::AllReduce, 4 << 20, 32, nvlsTree).predictedUs;
  nvlsTree.version = ncclVersionCode("2.26.2");
  EXPECT_NEAR(now - ncclChoose(s, Collective::AllReduce, 4 << 20, 32, nvlsTree).predictedUs, 4 * (20.9 - 14.0), 1e-9);
}

TEST(NcclChoose, AnOlderNcclEstimatesTreesAndRingsWithItsReleasesConstants) {
  // 8 x A100 at 2 MiB. NCCL's ring graph there is 12 channels of 20 GB/s: 240 GB/s of bus bandwidth, 8/14 of it
  // algorithm bandwidth. 2.28 takes ring LL at half of it (capped by llMaxBw 87.7) and chooses it.
  const NcclSystem s = dgxA100();
  const std::size_t bytes = std::size_t{2} << 20;
  const double toAlg = 8.0 / 14.0;
  NcclEnv env;
  EXPECT_EQ(ncclChoose(s, Collective::AllReduce, bytes, 8, env).protocol, NcclProtocol::LL);
  // 2.19 - 2.20 (tuning.cc): ring LL at a quarter, base 6.6 + 14 steps of 0.6 us; LL128 at x0.92 (per-channel cap 20),
  // base 14 + 14 steps of 1.9 us. LL128 is then faster and NCCL takes it.
  env.version = ncclVersionCode("2.19.3");
  const NcclChoice v219 = ncclChoose(s, Collective::AllReduce, bytes, 8, env);
  EXPECT_EQ(v219.algorithm, NcclAlgorithm::Ring);
  EXPECT_EQ(v219.protocol, NcclProtocol::LL128);
  const auto estimate = [&](const NcclChoice& c, NcclProtocol p) {
    for (const NcclCandidate& k : c.candidates)
      if (k.algorithm == NcclAlgorithm::Ring && k.protocol == p) return k.ncclUs;
    return -1.0;
  };
  EXPECT_NEAR(estimate(v219, NcclProtocol::LL), 6.6 + 14 * 0.6 + bytes / (1e3 * 240 / 4 * toAlg), 1e-3);
  EXPECT_NEAR(v219.ncclUs, 14 + 14 * 1.9 + bytes / (1e3 * 240 * 0.92 * toAlg), 1e-3);
  // 2.17 and older: Ampere's bus bandwidth capped at 235 GB/s, ring LL base 3.6 + 14 steps of 0.47 us.
  env.version = ncclVersionCode("2.9.9");
  EXPECT_NEAR(estimate(ncclChoose(s, Collective::AllReduce, bytes, 8, env), NcclProtocol::LL),
              3.6 + 14 * 0.47 + bytes / (1e3 * 235 / 4 * toAlg), 1e-3);
  // The time model does not depend on the release: the same Ring/LL128 call predicts the same under either.
  NcclEnv ll128 = parseNcclEnv({{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "LL128"}});
  const double now = ncclChoose(s, Collective::AllReduce, bytes, 8, ll128).predictedUs;
  ll128.version = ncclVersionCode("2.19.3");
  EXPECT_DOUBLE_EQ(ncclChoose(s, Collective::AllReduce, bytes, 8, ll128).predictedUs, now);
}

TEST(NcclPredict, ANetworkConnectionsSlotsPaceSmallMessages) {
  // A tree LL128 call on 2 nodes whose network hop is made slow enough that its 8 slots per connection, not the links,
  // set the pace: each of a channel's m messages after the first waits 1/8 of a round trip of two network steps
  // (NCCL's NET step, 8.5 us for tree LL128, and the hop's extra). Between two hop extras h1 < h2, the call then grows
  // by its two network hops' latency and the pacing: (2 + (m - 1) / 4) x (h2 - h1).
  const std::size_t bytes = std::size_t{64} << 20;
  const NcclEnv env = parseNcclEnv({{"NCCL_ALGO", "Tree"}, {"NCCL_PROTO", "LL128"}});
  const auto choose = [&](double hopUs) {
    NcclSystem s = dgxH100(2);
    s.model.netHopExtraUs[static_cast<std::size_t>(NicKind::InfiniBand)] = hopUs;
    return ncclChoose(s, Collective::AllReduce, bytes, 16, env);
  };
  const NcclChoice slow = choose(1000), slower = choose(2000);
  ASSERT_EQ(slow.channels, slower.channels);
  ASSERT_EQ(slow.chunkBytes, slower.chunkBytes);
  const double messages = static_cast<double>(bytes) / slow.channels / static_cast<double>(slow.chunkBytes);
  ASSERT_GT(messages, 2);
  const double paced = (messages - 1) * 2 * (8.5 + 1000) / 8;
  EXPECT_GT(slow.predictedUs, paced);  // the pace, not the links, sets the time
  EXPECT_NEAR(slower.predictedUs - slow.predictedUs, (2 + (messages - 1) / 4) * 1000, 1e-6);
  // The same call on the model's IB hop (0 us) moves its bytes at the links' rate, far below the paced time.
  EXPECT_LT(choose(0).predictedUs, paced / 4);
}

TEST(NcclPredict, EfaSendsSmallMessagesWithoutWaitingForTheReceiver) {
  // A 2-node ring all-reduce of 8 B: each of its 2 x 15 steps sends a message of under a byte per channel over the
  // network hop. On IB every message waits for the receiver's posted buffer, so after the first, each waits 1/8 of a
  // round trip of two network steps: between two hop extras h1 < h2 the call grows by its 2 network hops and that
  // pacing, (2 + 29 / 4) x (h2 - h1). On EFA a message of up to 8 KiB leaves at once, and only the 2 hops remain.
  const NcclEnv ring = parseNcclEnv({{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}});
  const auto growth = [&](NcclSystem s, std::size_t bytes) {
    const auto kind = static_cast<std::size_t>(s.nicKind);
    s.model.netHopExtraUs[kind] = 100;
    const double slow = ncclChoose(s, Collective::AllReduce, bytes, 16, ring).predictedUs;
    s.model.netHopExtraUs[kind] = 200;
    return ncclChoose(s, Collective::AllReduce, bytes, 16, ring).predictedUs - slow;
  };
  EXPECT_NEAR(growth(dgxH100(2), 8), (2 + 29.0 / 4) * 100, 1e-6);
  EXPECT_NEAR(growth(awsP4de(2), 8), 2 * 100, 1e-6);
  EXPECT_NEAR(growth(awsP5(2), 8), 2 * 100, 1e-6);
  // 8 MiB on EFA: 8 channels of 1 MiB in 64 KiB steps, above the eager size, wait for the receiver as on IB.
  const NcclChoice big = ncclChoose(awsP4de(2), Collective::AllReduce, 8 << 20, 16, ring);
  const double messages = 30;  // 2 x 15 steps, one message of 64 KiB each
  ASSERT_EQ(big.channels, 8);
  EXPECT_NEAR(growth(awsP4de(2), 8 << 20), (2 + (messages - 1) / 4) * 100, 1e-6);
}

TEST(NcclPredict, EfaOnP4dReadsMessagesLongerThanAPacket) {
  // Tree Simple on one channel sends a call of up to a chunk as one message per network hop, 2 x log2(nodes) hops one
  // after another. Under aws-ofi-nccl's SENDRECV protocol (EFA on p4d) a message of GPU memory longer than one packet
  // waits for the receiver's read at every hop: 32 KiB grows by hops x netReadUs; 8 KiB (one packet) does not, nor LL
  // (its buffer in host memory), nor p5 (aws-ofi-nccl's RDMA protocol writes).
  const auto growth = [](NcclSystem s, std::size_t bytes, const char* proto) {
    const NcclEnv env = parseNcclEnv({{"NCCL_ALGO", "Tree"}, {"NCCL_PROTO", proto}, {"NCCL_MAX_NCHANNELS", "1"}});
    const auto kind = static_cast<std::size_t>(s.nicKind);
    s.model.netReadUs[kind] = 0;
    const double none = ncclChoose(s, Collective::AllReduce, bytes, 8 * s.nodes, env).predictedUs;
    s.model.netReadUs[kind] = 100;
    return ncclChoose(s, Collective::AllReduce, bytes, 8 * s.nodes, env).predictedUs - none;
  };
  EXPECT_NEAR(growth(awsP4de(2), 32 << 10, "Simple"), 2 * 100, 1e-6);
  EXPECT_NEAR(growth(awsP4de(4), 32 << 10, "Simple"), 4 * 100, 1e-6);
  EXPECT_NEAR(growth(awsP4de(2), 8 << 10, "Simple"), 0, 1e-6);
  EXPECT_NEAR(growth(awsP4de(2), 32 << 10, "LL"), 0, 1e-6);
  EXPECT_GT(NcclModelParams{}.netReadUs[static_cast<std::size_t>(NicKind::Efa)], 0);
  EXPECT_EQ(NcclModelParams{}.netReadUs[static_cast<std::size_t>(NicKind::Efa2)], 0);
}

TEST(NcclPredict, AGpusNetworkProxyPostsItsMessagesOneAfterAnother) {
  // NVLSTree over 4 nodes: every GPU heads each of the 16 channels, with a parent and children in NCCL's two trees (2
  // links per channel on the busiest node), each link sending and receiving its 1/8 of the channel in 64 KiB chunks.
  // With a per-message cost slow enough to bind, the call grows by that cost times the GPU's messages.
  const std::size_t bytes = std::size_t{256} << 20;
  const NcclEnv env = parseNcclEnv({{"NCCL_ALGO", "NVLSTree"}});
  const auto ib = static_cast<std::size_t>(NicKind::InfiniBand);
  const auto choose = [&](double messageUs) {
    NcclSystem s = dgxH100(4);
    s.model.netMessageUs[ib] = messageUs;
    s.model.netMessageWireShare[ib] = 0;
    return ncclChoose(s, Collective::AllReduce, bytes, 32, env);
  };
  const NcclChoice slow = choose(10), slower = choose(20);
  ASSERT_EQ(slow.algorithm, NcclAlgorithm::NvlsTree);
  ASSERT_EQ(slow.channels, 16);
  ASSERT_EQ(slow.chunkBytes, std::size_t{64} << 10);
  const double messages = (2 * 2 * 16) * (static_cast<double>(bytes) / 16 / 8 / 65536);
  EXPECT_NEAR(slower.predictedUs - slow.predictedUs, 10 * messages, 1e-6);
  // At the model's IB cost the same call is bound by the messages as well (0.8 us each: the 4-node tables' rate).
  const NcclChoice real = ncclChoose(dgxH100(4), Collective::AllReduce, bytes, 32, env);
  const NcclModelParams m;
  EXPECT_GT(real.predictedUs, (m.netMessageUs[ib] + m.netMessageWireShare[ib] * 65536 / (1e3 * 50)) * messages);
}

TEST(NcclPredict, AThreadLaunchingSeveralGpusPacesSmallCallsAtTheHostsRate) {
  // nccl-tests -g N issues each call as one group of N launches, back to back: a call takes at least what the host
  // needs to issue it, and the GPUs set the time only where they take longer.
  NcclSystem s = dgxH100();
  const NcclChoice one = ncclChoose(s, Collective::AllReduce, 8, 8);
  const NcclChoice bigOne = ncclChoose(s, Collective::AllReduce, std::size_t{64} << 20, 8);
  const double hostEight = s.model.hostGroupUs + 8 * s.model.hostLaunchUs;
  ASSERT_LT(one.predictedUs, hostEight);
  s.gpusPerThread = 8;
  const NcclChoice eight = ncclChoose(s, Collective::AllReduce, 8, 8);
  EXPECT_EQ(eight.algorithm, one.algorithm);  // NCCL's choice does not see the launching thread
  EXPECT_DOUBLE_EQ(eight.ncclUs, one.ncclUs);
  EXPECT_DOUBLE_EQ(eight.predictedUs, hostEight);
  EXPECT_DOUBLE_EQ(ncclChoose(s, Collective::AllReduce, std::size_t{64} << 20, 8).predictedUs, bigOne.predictedUs);
  s.gpusPerThread = 4;
  EXPECT_DOUBLE_EQ(ncclChoose(s, Collective::AllReduce, 8, 4).predictedUs,
                   s.model.hostGroupUs + 4 * s.model.hostLaunchUs);
}

// From NCCL 2.22 the host's work for a call grows with its channels: at 1 MiB NCCL runs ring LL on 24 channels, which
// 8 H100s finish before one thread has issued the call to all of them.
TEST(NcclPredict, FromNccl222EachFurtherChannelAddsToTheHostsPace) {
  NcclSystem s = dgxH100();
  const NcclModelParams& m = s.model;
  const std::size_t bytes = std::size_t{1} << 20;
  s.gpusPerThread = 8;
  const NcclChoice now = ncclChoose(s, Collective::AllReduce, bytes, 8);
  ASSERT_EQ(now.channels, 24);
  EXPECT_NEAR(now.predictedUs, m.hostGroupUs + 8 * (m.hostLaunchUs + 23 * m.hostChannelUs), 1e-9);
  // Without the term: NCCL before 2.22 (a work item per channel, not fitted), and one process per GPU, whose call
  // the host issues far below the GPUs' time.
  NcclSystem noChannelWork = s;
  noChannelWork.model.hostChannelUs = 0;
  const auto same = [&](int gpusPerThread, const NcclEnv& env) {
    s.gpusPerThread = noChannelWork.gpusPerThread = gpusPerThread;
    const NcclChoice with = ncclChoose(s, Collective::AllReduce, bytes, 8, env);
    ASSERT_GT(with.channels, 1);
    EXPECT_DOUBLE_EQ(with.predictedUs, ncclChoose(noChannelWork, Collective::AllReduce, bytes, 8, env).predictedUs);
  };
  NcclEnv nccl2215;
  nccl2215.version = ncclVersionCode("2.21.5");
  same(8, nccl2215);
  same(1, NcclEnv{});
}

TEST(NcclPredict, OnAmpereEachFurtherGpuOfALaunchingThreadAddsItsStagger) {
  NcclSystem s = dgxA100();
  const std::size_t bytes = std::size_t{4} << 20;  // the GPUs, not the host, set the time
  const NcclChoice one = ncclChoose(s, Collective::AllReduce, bytes, 8);
  s.gpusPerThread = 8;
  const NcclChoice eight = ncclChoose(s, Collective::AllReduce, bytes, 8);
  ASSERT_GT(one.predictedUs, s.model.hostGroupUs + 8 * s.model.hostLaunchUs);
  EXPECT_NEAR(eight.predictedUs - one.predictedUs,
              7 * s.model.launchStaggerUs[static_cast<std::size_t>(GpuArch::Ampere)], 1e-9);
}

// P2P read (Ampere over NVLink) fills a ring Simple call's pipeline with p2pReadFillSlices slices, each crossing a
// hop at a channel's share of the NVLink rate: 1 MiB slices from one loop (24 channels x 8 ranks x 2 MiB) up, half of
// a rank's per-channel share below it. Hopper writes, and pays none.
TEST(NcclPredict, RingSimpleOverP2pReadFillsItsPipelineWithSlices) {
  const auto fill = [](NcclSystem s, std::size_t bytes) {
    const auto us = [&] {
      return ncclPredictUs(s, Collective::AllReduce, bytes, 8, NcclAlgorithm::Ring, NcclProtocol::Simple, 24);
    };
    const double with = us();
    s.model.p2pReadFillSlices = {};
    return with - us();
  };
  const NcclSystem a100 = dgxA100();
  const double slices = a100.model.p2pReadFillSlices[static_cast<std::size_t>(GpuArch::Ampere)];
  ASSERT_GT(slices, 0);
  const double channelBytesPerUs =
      300 * a100.model.nvlinkFraction[static_cast<std::size_t>(GpuArch::Ampere)] / 24 * 1e3;
  EXPECT_NEAR(fill(a100, std::size_t{1} << 30), slices * (1 << 20) / channelBytesPerUs, 1e-6);
  EXPECT_NEAR(fill(a100, std::size_t{4} << 30), slices * (1 << 20) / channelBytesPerUs, 1e-6);
  const double share = static_cast<double>(std::size_t{64} << 20) / 24 / 8;
  EXPECT_NEAR(fill(a100, std::size_t{64} << 20), slices * share / 2 / channelBytesPerUs, 1e-6);
  EXPECT_DOUBLE_EQ(fill(dgxH100(), std::size_t{1} << 30), 0);
}

// A ring LL channel runs ringLLChannelRate x NCCL's figure for it; the call's total stays within the links' LL payload
// and NCCL's LL cap, which the communicator's 24 channels reach at large sizes.
TEST(NcclPredict, RingLLChannelsRunAtTheirRateWithinTheLinksCap) {
  const auto slope = [](NcclSystem s, double rate, int channels) {
    s.model.ringLLChannelRate.fill(rate);
    const auto us = [&](std::size_t bytes) {
      return ncclPredictUs(s, Collective::AllReduce, bytes, 8, NcclAlgorithm::Ring, NcclProtocol::LL, channels);
    };
    return us(std::size_t{2} << 20) - us(std::size_t{1} << 20);  // the bandwidth term of 1 MiB
  };
  for (const NcclSystem& s : {dgxH100(), dgxA100()}) {
    const double rate = s.model.ringLLChannelRate[static_cast<std::size_t>(s.arch)];
    EXPECT_NEAR(slope(s, 1.0, 1) / slope(s, rate, 1), rate, 1e-9);
    EXPECT_NEAR(slope(s, 1.0, 4) / slope(s, rate, 4), rate, 1e-9);
    EXPECT_DOUBLE_EQ(slope(s, 1.0, 24), slope(s, rate, 24));  // 24 channels reach the links' cap either way
  }
}

// ---- Real tables ----

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

/// One real table (tests/data/realdata/<file>, or publicdata/ for the ones beyond the shared six), the shipped
/// topology of its system, NCCL's environment there, and the bounds asserted on the per-size |error| of the
/// out-of-place time. The targets are median <= 10%, p90 <= 25%; where the model does not reach them the bound
/// is what it reaches (rounded up), and the comment names the size range that misses.
struct RealTable {
  const char* name;
  const char* file;  ///< under tests/data
  const char* topology;
  std::map<std::string, std::string> env;
  double maxMedian, maxP90;
};

class RealTables : public ::testing::TestWithParam<RealTable> {};

/// As `collbench fidelity` reads the table: the log's ranks and GPUs per thread, the topology's system and variables.
TEST_P(RealTables, PredictedTimeWithinBounds) {
  const RealTable& t = GetParam();
  const NcclTestsLog log = readNcclTestsLog(std::string(COLLBENCH_SOURCE_DIR) + "/tests/data/" + t.file);
  ASSERT_GE(log.rows.size(), 9u);
  NcclSystem sys = ncclSystemOf(loadTopology(t.topology), log.nranks);
  sys.gpusPerThread = log.gpusPerThread();
  NcclEnv env = parseNcclEnv(t.env);
  if (const int v = ncclVersionCode(log.ncclVersion); v > 0) env.version = v;
  std::vector<double> err;
  std::string table;
  for (const NcclTestsRow& r : log.rows) {
    const NcclChoice c = ncclChoose(sys, Collective::AllReduce, r.bytes, log.nranks, env);
    err.push_back(std::abs(c.predictedUs - r.outOfPlace.timeUs) / r.outOfPlace.timeUs);
    table += std::to_string(r.bytes) + " real " + std::to_string(r.outOfPlace.timeUs) + " predicted " +
             std::to_string(c.predictedUs) + " (" + std::to_string(100 * err.back()) + "%) " + c.reason + "\n";
  }
  const double median = quantile(err, 0.5), p90 = quantile(err, 0.9);
  std::printf("%s: median %.1f%% p90 %.1f%%\n", t.file, 100 * median, 100 * p90);
  if (std::getenv("NCCL_MODEL_TABLE")) std::printf("%s", table.c_str());
  EXPECT_LE(median, t.maxMedian) << table;
  EXPECT_LE(p90, t.maxP90) << table;
}

INSTANTIATE_TEST_SUITE_P(
    NcclTests, RealTables,
    ::testing::Values(
        // 8 x H100, NVLS from 2 MiB.
        RealTable{"H100x8Nvls", "realdata/h100x8-nvls-dgxcbench.csv", "dgx-h100-8x1", {}, 0.10, 0.25},
        // 512 KiB .. 8 MiB run 25-34% slower than the model (A100, -g 8: the same system with one process
        // per GPU runs them up to 17% faster than the model, publicdata; the median meets the target).
        RealTable{"A100x8", "realdata/a100x8-ring-ocitutorials-ja.csv", "dgx-a100-8x1", {}, 0.10, 0.27},
        RealTable{"H100x16Ib400NvlsTree",
                  "realdata/h100x16-2node-ib400-nvlstree-ncclTests309-A.csv",
                  "dgx-h100-ib400",
                  {},
                  0.06,
                  0.25},
        // Fitted: IB's cost per network message (1 .. 8 MiB take a flat ~157-178 us: each GPU's proxy
        // posts 180 ring LL128 pieces).
        RealTable{"H100x16Ib400Ring",
                  "realdata/h100x16-2node-ib400-ring-ncclTests309-G.csv",
                  "dgx-h100-ib400",
                  {{"NCCL_ALGO", "Ring"}, {"NCCL_MIN_CTAS", "24"}},
                  0.10,
                  0.25},
        // EFA2: 128 KiB-2 MiB and 8-16 MiB, where NCCL's estimate (with aws-ofi-nccl's 75 us per network
        // step) picks tree LL and LL128, are 12-31% off.
        RealTable{"H100x16EfaP5", "realdata/h100x16-2node-efa-p5-awsome.csv", "aws-p5", {}, 0.10, 0.25},
        RealTable{"A100x16EfaP4de", "realdata/a100x16-2node-efa-p4de-awsome.csv", "aws-p4de", {}, 0.10, 0.13}),
    [](const ::testing::TestParamInfo<RealTable>& p) { return std::string(p.param.name); });

// Published tables beyond the shared six (tests/data/publicdata/README.md: sources, and what each informed).
INSTANTIATE_TEST_SUITE_P(
    PublicTables, RealTables,
    ::testing::Values(
        // 8 x A100 one process per GPU (fitted: Ampere's launch extra; with OCI's RoCE table, LL128's rate; with the
        // Azure table, P2P read's pipeline fill) and -g 8 (with Oracle's, Ampere's launch stagger; with the -g N tables
        // below, the host's pace); 32 MiB runs 13% (-g 1) and 8-128 MiB 13-23% (-g 8) slower than the model.
        RealTable{"A100x8HgxG1", "publicdata/a100sxm80_thanos_np8_g1.csv", "dgx-a100-8x1", {}, 0.10, 0.17},
        RealTable{"A100x8HgxG8", "publicdata/a100sxm80_thanos_g8.csv", "dgx-a100-8x1", {}, 0.11, 0.16},
        // 8 x A100 40 GB in an Azure VM, one process per GPU: 8 B-1 KiB run 18 us where the HGX host above runs 20-24
        // (the model 22.3 with Ampere's launch extra).
        RealTable{"A100x8AzureG1", "publicdata/a100sxm40_azure_ndv4_np8_g1.csv", "dgx-a100-8x1", {}, 0.10, 0.25},
        RealTable{
            "H100x8P5", "publicdata/p5_1node_8gpu_awsbatch.csv", "aws-p5", {{"NCCL_BUFFSIZE", "8388608"}}, 0.10, 0.20},
        // p5's tree and ring LL128 at 2-64 MiB (the shared p5 table's miss).
        RealTable{"H100x16P5Oct24",
                  "publicdata/p5_2node_16gpu_eksblueprints_2024oct.csv",
                  "aws-p5",
                  {{"NCCL_BUFFSIZE", "8388608"}},
                  0.10,
                  0.25},
        RealTable{"H100x16P5Aug24",
                  "publicdata/p5_2node_16gpu_eksblueprints_2024aug.csv",
                  "aws-p5",
                  {{"NCCL_BUFFSIZE", "8388608"}},
                  0.10,
                  0.25},
        // 4 x 8 H100 IB in VMs (NCCL 2.26.2; with the next three and the 10-node table, IB's cost per network message
        // of 64 KiB): 8-32 KiB (tree LL) and 2 MiB run 18-31% slower than the model.
        RealTable{
            "H100x32Ib400", "publicdata/nccltests309_xe9680_4x8_h100_ndr_vm.csv", "dgx-h100-ib400", {}, 0.05, 0.31},
        // A cluster whose owner expected more than its 325 GB/s busbw (NVLSTree in 64 KiB chunks reaches that on 4-10
        // nodes elsewhere too); its 1-8 MiB run 44-75% slower than the model.
        // The medians hold NVLSTree's fill per level of its inter-node tree (nvlsPipelineDepth): 7.1% and 10.9%
        // without.
        RealTable{
            "H100x32Ib400Slow", "publicdata/nccltests309_gjaion_4x8_h100_ib400.csv", "dgx-h100-ib400", {}, 0.06, 0.52},
        RealTable{
            "H100x64Ib400Slow", "publicdata/nccltests309_gjaion_8x8_h100_ib400.csv", "dgx-h100-ib400", {}, 0.10, 0.25},
        // Fitted: TCPXO's network hop and line-rate fraction (the profile's variables come from Google's setup).
        RealTable{"H100x16A3Mega", "publicdata/gcp_a3mega_2x8_h100_tcpxo.csv", "gcp-a3-mega", {}, 0.05, 0.20},
        // Informed LL128's rate and RoCE's hop (the only RoCE table); OCI's RDMA functions in Kubernetes pods. Its
        // hosts are AMD: with Intel's rows NCCL would take ring LL at 256 KiB (+36% there, p90 15.9%).
        RealTable{"A100x16OciRoce", "publicdata/oci_a100sxm40_2x8_roce_okereadme.csv", "oci-a100-roce", {}, 0.04, 0.11},
        // 4 x 8 H100 IB (NCCL 2.24.3): a cluster whose rings reach 330 GB/s busbw (the model 356), and 8-64 KiB 9-13 us
        // above the model's tree LL (10-18 without staging LL's steps, llStagingGBps).
        RealTable{
            "H100x32Ib400Vp", "publicdata/voltagepark_4x8_h100_ib_nccl2243.csv", "dgx-h100-ib400", {}, 0.06, 0.20},
        // Two more 2 x p5 runs (aws-ofi-nccl 1.9.2; one under its tuner): LL128 at 2-32 MiB as the shared p5 table.
        RealTable{"H100x16P5Nccl2223", "publicdata/p5_2node_16gpu_keitaw_nccl2223.csv", "aws-p5", {}, 0.11, 0.23},
        RealTable{
            "H100x16P5OfiTuner", "publicdata/p5_2node_16gpu_keitaw_nccl2203_ofituner.csv", "aws-p5", {}, 0.10, 0.23},
        // p5 at 2-32 nodes (NCCL 2.27.7, aws-ofi-nccl 1.16.3; 32 MiB-8 GiB, times from the source's algbw): from 3
        // nodes its tuner picks (ring LL128 at 64 MiB-2 GiB where NCCL would take trees and NVLSTree; with the -g 8
        // ring below, Hopper's LL128 rate). Tree LL128 at 128-256 MiB on 16-32 nodes runs 20-29% slower than the
        // model, NVLSTree at 512 MiB-1 GiB on 32 nodes 30-44%.
        RealTable{
            "H100x16P5Ofi1163", "publicdata/p5_2node_16gpu_crazyguitar_nccl2277_ofi1163.csv", "aws-p5", {}, 0.05, 0.10},
        RealTable{
            "H100x32P5Ofi1163", "publicdata/p5_4node_32gpu_crazyguitar_nccl2277_ofi1163.csv", "aws-p5", {}, 0.05, 0.08},
        RealTable{
            "H100x64P5Ofi1163", "publicdata/p5_8node_64gpu_crazyguitar_nccl2277_ofi1163.csv", "aws-p5", {}, 0.07, 0.11},
        RealTable{"H100x128P5Ofi1163",
                  "publicdata/p5_16node_128gpu_crazyguitar_nccl2277_ofi1163.csv",
                  "aws-p5",
                  {},
                  0.07,
                  0.24},
        RealTable{"H100x256P5Ofi1163",
                  "publicdata/p5_32node_256gpu_crazyguitar_nccl2277_ofi1163.csv",
                  "aws-p5",
                  {},
                  0.12,
                  0.37},
        // 2 x p4d (A100 40 GB, the same EFA as p4de; NCCL 2.23.4) and 2 x p4de with NCCL_PROTO=simple.
        RealTable{
            "A100x16P4d", "publicdata/p4d_2node_16gpu_dlami2025_nccl2234_ofi1132.csv", "aws-p4de", {}, 0.10, 0.21},
        // 2 x p4d in 2021 (NCCL 2.9.9, the ring forced): EFA's eager sends keep its tiny ring steps unpaced; its
        // 8-128 MiB run 28-50% slower than the model.
        RealTable{"A100x16P4dNccl299Ring",
                  "publicdata/p4d_2node_16gpu_awsefaeks_nccl299_ring.csv",
                  "aws-p4de",
                  {{"NCCL_ALGO", "RING"}},
                  0.17,
                  0.46},
        RealTable{"A100x16P4dePcluster",
                  "publicdata/p4de_2node_16gpu_pclusterworkshop_protosimple.csv",
                  "aws-p4de",
                  {{"NCCL_PROTO", "simple"}},
                  0.10,
                  0.13},
        // A third 8 x A100 -g 8 table (NCCL 2.19.3): 4-16 MiB run 7-19% slower than the model.
        RealTable{"A100x8HgxG8Nccl2193", "publicdata/a100sxm80_dkh_g8_nccl2193.csv", "dgx-a100-8x1", {}, 0.10, 0.21},
        // Single H100 nodes launched by one thread (-g 8, -g 4, -g 2; fitted: the host's pace, NcclModelParams::
        // hostGroupUs, hostLaunchUs and hostChannelUs): NVLS on (Together, Voltage Park), ring forced with NVLS off
        // (with p5's rings, Hopper's LL128 rate, NcclModelParams::protocolRate; its 4-32 MiB still run 8-22% faster
        // than the model), and 4 or 2 of 8 GPUs.
        RealTable{
            "H100x8NvlsG8", "publicdata/h100sxm_8gpu_together_nvls_g8_nccl2262.csv", "dgx-h100-8x1", {}, 0.10, 0.08},
        RealTable{"H100x8VpG8", "publicdata/h100sxm_8gpu_voltagepark_g8_nccl2243.csv", "dgx-h100-8x1", {}, 0.10, 0.10},
        RealTable{"H100x8RingG8",
                  "publicdata/h100sxm_8gpu_together_ring_g8_nccl2262.csv",
                  "dgx-h100-8x1",
                  {{"NCCL_ALGO", "RING"}, {"NCCL_NVLS_ENABLE", "0"}},
                  0.10,
                  0.14},
        RealTable{"H100x4Of8G4", "publicdata/h100sxm_4of8_wayne_quiet_g4_nccl2292.csv", "dgx-h100-8x1", {}, 0.10, 0.12},
        // 8 x H200 (Azure ND H200 v5), NVLS forced, -g 8, NCCL 2.20.5, busbw only (times derived): hgx-h200-8x1's
        // only table. 1 KiB-512 KiB run a flat 30-31 us, 12-17% under the host's pace fitted on the H100 hosts.
        RealTable{"H200x8NvlsG8",
                  "publicdata/h200_8gpu_azure_ndh200v5_nvls_g8_nccl2205.csv",
                  "hgx-h200-8x1",
                  {{"NCCL_ALGO", "NVLS"}},
                  0.10,
                  0.16},
        // A 2-GPU ring: 1-32 MiB run 15-41% slower than the model; 2-16 KiB fall from 15.8 to 12.2 us as sizes grow,
        // below the host's one-channel floor (9 + 2 x 3.25 us), and rise to 17.7 us on 24 channels at 256 KiB.
        RealTable{"H100x2Of8G2", "publicdata/h100sxm_2of8_digitalocean_g2.csv", "dgx-h100-8x1", {}, 0.15, 0.29},
        RealTable{"H100x4Of8G1Double",
                  "publicdata/h100sxm_4of8_xxrjun_np4_g1_double_nccl2292.csv",
                  "dgx-h100-8x1",
                  {},
                  0.10,
                  0.25},
        // 10 x 8 H100 on a 400G fabric the source does not name (NCCL 2.29.2, double, 32 MiB-16 GiB): NVLSTree at
        // 32 MiB and 128 MiB runs 19-37% slower than the model.
        RealTable{
            "H100x80G1Double", "publicdata/h100_10x8_xxrjun_g1_double_nccl2292.csv", "dgx-h100-ib400", {}, 0.10, 0.25},
        RealTable{"H100x8G1Double",
                  "publicdata/h100sxm_dgxlayout_xxrjun_np8_g1_double_nccl2292.csv",
                  "dgx-h100-8x1",
                  {},
                  0.10,
                  0.25}),
    [](const ::testing::TestParamInfo<RealTable>& p) { return std::string(p.param.name); });

// OCI's H100 stack (oci-h100-roce, no table of it above): 2 x 8 H100 over 16 x 200G RoCE, NCCL 2.23.4, five sizes of
// 1-16 GiB from Oracle's troubleshooting guide. NVLSTree runs them at 450-471 GB/s busbw; each row within 3%.
TEST(NcclPredict, OciH100RoceLargeSizesAsOraclesGuideMeasured) {
  const NcclTestsLog log = readNcclTestsLog(std::string(COLLBENCH_SOURCE_DIR) +
                                            "/tests/data/publicdata/oci_h100_2x8_roce_ocihpc_troubleshooting.csv");
  ASSERT_EQ(log.rows.size(), 5u);
  const NcclSystem sys = ncclSystemOf(loadTopology("oci-h100-roce"), log.nranks);
  for (const NcclTestsRow& r : log.rows) {
    const NcclChoice c = ncclChoose(sys, Collective::AllReduce, r.bytes, log.nranks);
    EXPECT_EQ(c.algorithm, NcclAlgorithm::NvlsTree) << r.bytes << ": " << c.reason;
    EXPECT_NEAR(c.predictedUs / r.outOfPlace.timeUs - 1, 0, 0.03) << r.bytes << ": " << c.reason;
  }
}

}  // namespace
}  // namespace collbench
