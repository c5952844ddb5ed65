// `calibrate --model nccl`: recovering known open parameters of the NCCL model from tables it generated, the
// identifiability verdicts, calibrating on a real 2-node table and predicting the 1-node table of the same system it
// did not see (and back), refusal of degenerate fits, the overlay's round trip and its application to a system.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "collbench/error.h"
#include "collbench/nccl_calibration.h"
#include "collbench/nccl_tests_log.h"
#include "collbench/topology.h"

namespace collbench {
namespace {

const std::string kSource = COLLBENCH_SOURCE_DIR;
/// The real tables of one system (tests/data/realdata/README.md): 2 x 8 H100, 8 x 400G IB (NVLSTree by default), and
/// one 8 x H100 NVLS node.
const std::string kTwoNode = kSource + "/tests/data/realdata/h100x16-2node-ib400-nvlstree-ncclTests309-A.csv";
const std::string kOneNode = kSource + "/tests/data/realdata/h100x8-nvls-dgxcbench.csv";
/// The target for predicting a table of another size than the calibration's.
constexpr double kCrossSizeMedianBound = 0.15;

Topology h100ib() { return loadTopology(kSource + "/topologies/dgx-h100-ib400.json"); }

NcclCalibrationLog realLog(const std::string& path) { return {readNcclTestsLog(path), path, {}}; }

/// An all-reduce table of `ranks` ranks, 8 B .. 1 GiB by 4x, timed by the model with `truth`.
NcclCalibrationLog syntheticLog(const Topology& t, int ranks, const NcclModelParams& truth) {
  NcclSystem sys = ncclSystemOf(t, ranks);
  sys.model = truth;
  NcclTestsLog log;
  log.collective = Collective::AllReduce;
  log.nranks = ranks;
  log.nodes = sys.nodes;
  int line = 1;
  for (std::size_t b = 8; b <= (std::size_t{1} << 30); b *= 4) {
    NcclTestsRow r;
    r.bytes = b;
    r.count = b / 4;
    r.type = "float";
    r.redop = "sum";
    r.line = line++;
    r.outOfPlace.timeUs = ncclChoose(sys, Collective::AllReduce, b, ranks).predictedUs;
    r.inPlace = r.outOfPlace;
    log.rows.push_back(r);
  }
  return {log, "synthetic", {}};
}

const NcclParamFit& param(const NcclCalibration& c, NcclParam p) {
  for (const NcclParamFit& f : c.params) {
    if (f.param == p) return f;
  }
  throw Error(Errc::InvalidArgument, "missing parameter");
}

TEST(NcclCalibrate, RecoversKnownParametersOfOneNode) {
  const Topology t = h100ib();
  NcclModelParams truth;
  truth.nvlsFraction = 0.6;
  truth.nvlsPipelineDepth = 20;
  truth.launchExtraUs[static_cast<std::size_t>(GpuArch::Hopper)] = 4;
  NcclCalibrationOptions opt;
  opt.topology = "dgx-h100-ib400";
  const NcclCalibration c = calibrateNccl(t, {syntheticLog(t, 8, truth)}, opt);
  EXPECT_EQ(c.arch, GpuArch::Hopper);
  EXPECT_EQ(c.nicKind, NicKind::InfiniBand);
  EXPECT_NEAR(param(c, NcclParam::NvlsFraction).value, 0.6, 0.01);
  EXPECT_NEAR(param(c, NcclParam::NvlsPipelineDepth).value, 20, 1);
  EXPECT_NEAR(param(c, NcclParam::LaunchExtraUs).value, 4, 0.2);
  ASSERT_TRUE(c.fit.median.has_value());
  EXPECT_LT(*c.fit.median, 0.005);
  // One node: the network is invisible, and NVLSTree does not exist.
  for (NcclParam p : {NcclParam::NetFraction, NcclParam::NetHopExtraUs, NcclParam::NvlsTreeFraction}) {
    const NcclParamFit& f = param(c, p);
    EXPECT_FALSE(f.identified) << toString(p);
    EXPECT_EQ(f.value, f.prior) << toString(p);
    EXPECT_NE(f.note.find("not identified by these logs (no row depends on it): kept at prior"), std::string::npos)
        << f.note;
  }
}

// One A100 node: the ring Simple rows from 32 MiB up carry P2P read's fill, which the fit recovers; a Hopper node,
// whose GPUs write, has no row that depends on it.
TEST(NcclCalibrate, RecoversP2pReadsFillOnAnAmpereNode) {
  const Topology a100 = loadTopology(kSource + "/topologies/dgx-a100-8x1.json");
  NcclModelParams truth;
  truth.p2pReadFillSlices[static_cast<std::size_t>(GpuArch::Ampere)] = 3;
  const NcclCalibration c = calibrateNccl(a100, {syntheticLog(a100, 8, truth)});
  EXPECT_EQ(c.arch, GpuArch::Ampere);
  const NcclParamFit& fill = param(c, NcclParam::P2pReadFillSlices);
  EXPECT_TRUE(fill.identified) << fill.note;
  EXPECT_NEAR(fill.value, 3, 0.1);
  EXPECT_EQ(fill.prior, NcclModelParams{}.p2pReadFillSlices[static_cast<std::size_t>(GpuArch::Ampere)]);
  const NcclCalibration h100 = calibrateNccl(h100ib(), {syntheticLog(h100ib(), 8, NcclModelParams{})});
  EXPECT_FALSE(param(h100, NcclParam::P2pReadFillSlices).identified);
  EXPECT_EQ(param(h100, NcclParam::P2pReadFillSlices).value, 0);
}

TEST(NcclCalibrate, AParameterTooFewRowsDependOnKeepsItsPrior) {
  // The 2-node IB table runs LL128 at two sizes only (tree LL128 at 256 and 512 KiB), one of them in the fitted half:
  // LL128's rate would absorb that row's noise (it went to its bound, 0.41, before the support rule).
  NcclCalibrationOptions opt;
  opt.topology = "dgx-h100-ib400";
  const NcclCalibration c = calibrateNccl(h100ib(), {realLog(kTwoNode)}, opt);
  const NcclParamFit& ll128 = param(c, NcclParam::Ll128Rate);
  EXPECT_FALSE(ll128.identified);
  EXPECT_EQ(ll128.value, ll128.prior);
  EXPECT_NE(ll128.note.find(fmt::format("on it, {} needed): kept at prior", kNcclMinSupportRows)), std::string::npos)
      << ll128.note;
  // The NVLS stage of NVLSTree, which the rows from 1 MiB up depend on, is fitted.
  EXPECT_TRUE(param(c, NcclParam::NvlsFraction).identified);
}

TEST(NcclCalibrate, TwoNodeCountsSeparateLaunchFromNetworkLatency) {
  const Topology t = h100ib();
  NcclModelParams truth;
  truth.launchExtraUs[static_cast<std::size_t>(GpuArch::Hopper)] = 3;
  truth.netHopExtraUs[static_cast<std::size_t>(NicKind::InfiniBand)] = 5;
  // One node count alone: two constant latencies, which the rows cannot tell apart; the network's is fitted.
  const NcclCalibration two = calibrateNccl(t, {syntheticLog(t, 16, truth)});
  EXPECT_TRUE(param(two, NcclParam::NetHopExtraUs).identified);
  EXPECT_FALSE(param(two, NcclParam::LaunchExtraUs).identified);
  EXPECT_NE(param(two, NcclParam::LaunchExtraUs).note.find("cannot separate it from net_hop_extra_us"),
            std::string::npos);
  // Both node counts: each latency recovered.
  const NcclCalibration both = calibrateNccl(t, {syntheticLog(t, 8, truth), syntheticLog(t, 16, truth)});
  EXPECT_NEAR(param(both, NcclParam::LaunchExtraUs).value, 3, 0.2);
  EXPECT_NEAR(param(both, NcclParam::NetHopExtraUs).value, 5, 0.2);
}

TEST(NcclCalibrate, FitsTheLLProxyQueueFromMultiNodeRows) {
  // The 2-node sweep runs Tree/LL on 1, 2 and 8 channels below 64 KiB: the queue's per-channel cost shows in their
  // slope, which no constant latency explains. One node has no network proxy: not identified there.
  const Topology t = h100ib();
  NcclModelParams truth;
  truth.netChannelUs[static_cast<std::size_t>(NicKind::InfiniBand)] = 2.5;
  const NcclCalibration two = calibrateNccl(t, {syntheticLog(t, 16, truth)});
  const NcclParamFit& fit = param(two, NcclParam::NetChannelUs);
  EXPECT_TRUE(fit.identified) << fit.note;
  EXPECT_NEAR(fit.value, 2.5, 0.1);
  EXPECT_EQ(fit.bounds.upper, 3 * kNcclHopRefUs);
  EXPECT_DOUBLE_EQ(ncclModelParams(two).netChannelUs[static_cast<std::size_t>(NicKind::InfiniBand)], fit.value);
  const NcclCalibration one = calibrateNccl(t, {syntheticLog(t, 8, truth)});
  EXPECT_FALSE(param(one, NcclParam::NetChannelUs).identified);
  EXPECT_NE(param(one, NcclParam::NetChannelUs).note.find("no row depends on it"), std::string::npos);
}

TEST(NcclCalibrate, FitsEfasReadFromItsLongerMessages) {
  // On 2 x p4de, Tree/Simple's network messages outgrow EFA's packet from 32 KiB: those rows carry the read at both
  // hops, which neither the hop's latency (every row) nor a bandwidth explains. One node sends nothing over EFA; IB
  // writes into posted buffers, so there is no read to fit.
  const Topology t = loadTopology("aws-p4de");
  const auto efa = static_cast<std::size_t>(NicKind::Efa);
  NcclModelParams truth;
  truth.netReadUs[efa] = 30;
  const NcclCalibration two = calibrateNccl(t, {syntheticLog(t, 16, truth)});
  const NcclParamFit& fit = param(two, NcclParam::NetReadUs);
  EXPECT_TRUE(fit.identified) << fit.note;
  EXPECT_NEAR(fit.value, 30, 0.5);
  EXPECT_EQ(fit.prior, NcclModelParams{}.netReadUs[efa]);
  EXPECT_DOUBLE_EQ(ncclModelParams(two).netReadUs[efa], fit.value);
  const NcclCalibration one = calibrateNccl(t, {syntheticLog(t, 8, truth)});
  EXPECT_FALSE(param(one, NcclParam::NetReadUs).identified);
  EXPECT_NE(param(one, NcclParam::NetReadUs).note.find("no row depends on it"), std::string::npos);
  const Topology ib = h100ib();
  const NcclCalibration onIb = calibrateNccl(ib, {syntheticLog(ib, 16, NcclModelParams{})});
  EXPECT_FALSE(param(onIb, NcclParam::NetReadUs).identified);
  EXPECT_NE(param(onIb, NcclParam::NetReadUs).note.find("reads no message"), std::string::npos);
}

TEST(NcclCalibrate, BoundsArePhysical) {
  EXPECT_EQ(ncclParamBounds(NcclParam::NvlinkFraction, 0.87).lower, kNcclMinEfficiency);
  EXPECT_EQ(ncclParamBounds(NcclParam::NetFraction, 0.98).upper, 1.0);
  EXPECT_EQ(ncclParamBounds(NcclParam::NetHopExtraUs, 23.4).lower, 0.5 * 23.4);
  EXPECT_EQ(ncclParamBounds(NcclParam::NetHopExtraUs, 23.4).upper, 3 * 23.4);
  EXPECT_EQ(ncclParamBounds(NcclParam::NetHopExtraUs, 0).upper, 3 * kNcclHopRefUs);
  EXPECT_EQ(ncclParamBounds(NcclParam::LaunchExtraUs, 0).upper, 3 * kNcclLaunchRefUs);
  EXPECT_EQ(ncclParamBounds(NcclParam::NetChannelUs, 0).upper, 3 * kNcclHopRefUs);
  EXPECT_EQ(ncclParamBounds(NcclParam::NetChannelUs, 3.8).lower, 0.5 * 3.8);
}

// The test: calibrate on the 2-node table, predict the 1-node table of the same system (only the intra-node
// parameters and the launch floor carry), and the other way round.
TEST(NcclCalibrate, TwoNodeCalibrationPredictsOneNodeTableAndBack) {
  const Topology t = h100ib();
  NcclCalibrationOptions opt;
  opt.topology = "dgx-h100-ib400";
  opt.holdOutEvery = 2;
  const NcclCalibration fromTwo = calibrateNccl(t, {realLog(kTwoNode)}, opt);
  // The 2-node table is NVLSTree at large sizes, whose NVLink stage is the bottleneck: the network's rate is never
  // the limit, and NVLSTree's own fraction only multiplies NVLS's.
  EXPECT_FALSE(param(fromTwo, NcclParam::NetFraction).identified);
  EXPECT_NE(param(fromTwo, NcclParam::NetFraction).note.find("no row depends on it"), std::string::npos);
  EXPECT_FALSE(param(fromTwo, NcclParam::NvlsTreeFraction).identified);
  EXPECT_NE(param(fromTwo, NcclParam::NvlsTreeFraction).note.find("cannot separate it from nvls_fraction"),
            std::string::npos);
  EXPECT_TRUE(param(fromTwo, NcclParam::NvlsFraction).identified);
  const FidelityLog one = predictNcclLog(t, ncclModelParams(fromTwo), realLog(kOneNode), opt);
  EXPECT_EQ(one.ranks, 8);
  EXPECT_EQ(one.rows.size(), 32u);
  std::printf("2-node calibration -> 1-node table: median %.1f%%, p90 %.1f%%\n", 100 * one.all.median,
              100 * one.all.p90);
  EXPECT_LE(one.all.median, kCrossSizeMedianBound);

  const NcclCalibration fromOne = calibrateNccl(t, {realLog(kOneNode)}, opt);
  EXPECT_FALSE(param(fromOne, NcclParam::NetHopExtraUs).identified);
  const FidelityLog two = predictNcclLog(t, ncclModelParams(fromOne), realLog(kTwoNode), opt);
  std::printf("1-node calibration -> 2-node table: median %.1f%%, p90 %.1f%%\n", 100 * two.all.median,
              100 * two.all.p90);
  EXPECT_LE(two.all.median, kCrossSizeMedianBound);
}

// p5 (aws-p5): calibrated on the shared 2-node table (NCCL's own choice; aws-ofi-nccl's tuner leaves 2 nodes to it),
// the model predicts p5 at 4, 8 and 16 nodes from another source, where the tuner picks (NCCL 2.27.7, aws-ofi-nccl
// 1.16.3, 32 MiB-8 GiB).
TEST(NcclCalibrate, TwoNodeP5CalibrationPredictsP5AtFourToSixteenNodes) {
  const Topology t = loadTopology(kSource + "/topologies/aws-p5.json");
  NcclCalibrationOptions opt;
  opt.topology = "aws-p5";
  opt.holdOutEvery = 2;
  const NcclCalibration cal =
      calibrateNccl(t, {realLog(kSource + "/tests/data/realdata/h100x16-2node-efa-p5-awsome.csv")}, opt);
  for (const char* file :
       {"p5_4node_32gpu_crazyguitar_nccl2277_ofi1163.csv", "p5_8node_64gpu_crazyguitar_nccl2277_ofi1163.csv",
        "p5_16node_128gpu_crazyguitar_nccl2277_ofi1163.csv"}) {
    const FidelityLog other =
        predictNcclLog(t, ncclModelParams(cal), realLog(kSource + "/tests/data/publicdata/" + file), opt);
    std::printf("2-node p5 calibration -> %s: median %.1f%%, p90 %.1f%%\n", file, 100 * other.all.median,
                100 * other.all.p90);
    EXPECT_LE(other.all.median, kCrossSizeMedianBound) << file;
  }
}

// The calibration, not the prior, carries: from a prior far off (NVLS at 45% of NVLink, a 25-stage pipeline, 6 us
// per network hop), the 1-node table is mispredicted; calibrated on the 2-node table, it is predicted within bound.
TEST(NcclCalibrate, CalibrationFromAWrongPriorCarriesToAnotherSize) {
  const Topology t = h100ib();
  NcclCalibrationOptions opt;
  opt.topology = "dgx-h100-ib400";
  opt.prior.nvlsFraction = 0.45;
  opt.prior.nvlsPipelineDepth = 25;
  opt.prior.netHopExtraUs[static_cast<std::size_t>(NicKind::InfiniBand)] = 6;
  const FidelityLog before = predictNcclLog(t, opt.prior, realLog(kOneNode), opt);
  const NcclCalibration cal = calibrateNccl(t, {realLog(kTwoNode)}, opt);
  const FidelityLog after = predictNcclLog(t, ncclModelParams(cal), realLog(kOneNode), opt);
  std::printf("wrong prior -> 1-node table: median %.1f%%; calibrated on 2 nodes: median %.1f%%\n",
              100 * before.all.median, 100 * after.all.median);
  EXPECT_GT(before.all.median, kCrossSizeMedianBound);
  EXPECT_LE(after.all.median, kCrossSizeMedianBound);
}

TEST(NcclCalibrate, RefusesDegenerateFits) {
  const Topology t = h100ib();
  // Ten times faster than 8 x H100 can be: every efficiency would have to exceed line rate.
  NcclCalibrationLog fast = realLog(kOneNode);
  for (NcclTestsRow& r : fast.log.rows) r.outOfPlace.timeUs /= 10;
  NcclCalibrationOptions opt;
  opt.topology = "dgx-h100-ib400";
  try {
    calibrateNccl(t, {fast}, opt);
    FAIL() << "a fit beyond line rate was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("degenerate fit, nothing written"), std::string::npos) << m;
    EXPECT_NE(m.find("bound"), std::string::npos) << m;
    EXPECT_NE(m.find("is 'dgx-h100-ib400' the system the logs ran on?"), std::string::npos) << m;
  }
  opt.holdOutEvery = 1;
  EXPECT_THROW(calibrateNccl(t, {realLog(kOneNode)}, opt), Error);
}

TEST(NcclCalibrate, RecordRoundTripsAndApplies) {
  const Topology t = h100ib();
  NcclCalibrationOptions opt;
  opt.topology = "dgx-h100-ib400";
  NcclCalibration c = calibrateNccl(t, {realLog(kOneNode)}, opt);
  c.tool = "collbench test";
  c.commandLine = "collbench calibrate ...";
  const NcclCalibration back = parseNcclCalibration(toJson(c).dump(2), "cal.json");
  EXPECT_EQ(back, c);

  // The overlay applies at another node count of the same system: 4 nodes' prediction uses the fitted NVLS fraction.
  NcclSystem four = ncclSystemOf(t, 32);
  applyNcclCalibration(back, four, "cal.json");
  EXPECT_EQ(four.model.nvlsFraction, param(c, NcclParam::NvlsFraction).value);
  EXPECT_EQ(four.model.launchExtraUs[static_cast<std::size_t>(GpuArch::Hopper)],
            param(c, NcclParam::LaunchExtraUs).value);

  // A record written before net_channel_us, p2p_read_fill_slices or net_read_us was fitted still reads; the model's
  // defaults stand for them.
  nlohmann::json old = toJson(c);
  old["params"].erase("net_channel_us");
  old["params"].erase("p2p_read_fill_slices");
  old["params"].erase("net_read_us");
  const NcclCalibration older = parseNcclCalibration(old.dump(2), "old.json");
  EXPECT_EQ(older.params.size(), c.params.size() - 3);
  EXPECT_EQ(ncclModelParams(older).netChannelUs, NcclModelParams{}.netChannelUs);
  EXPECT_EQ(ncclModelParams(older).p2pReadFillSlices, NcclModelParams{}.p2pReadFillSlices);
  EXPECT_EQ(ncclModelParams(older).netReadUs, NcclModelParams{}.netReadUs);
  EXPECT_EQ(ncclModelParams(older).nvlsFraction, param(c, NcclParam::NvlsFraction).value);

  NcclSystem a100 = four;
  a100.arch = GpuArch::Ampere;
  try {
    applyNcclCalibration(back, a100, "cal.json");
    FAIL() << "an H100 calibration applied to an A100 system";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "calibration 'cal.json' is for hopper/infiniband systems, the topology's are ampere/infiniband");
  }

  nlohmann::json doc = toJson(c);
  doc["params"]["nvls_fraction"]["value"] = 1.5;
  try {
    parseNcclCalibration(doc.dump(), "cal.json");
    FAIL() << "a value outside its bounds was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cal.json: params.nvls_fraction.value: 1.5 is outside the bounds [0.3, 1]"),
              std::string::npos)
        << e.what();
  }
  // A hand-edited overlay's misspelt key is refused, not left to the model's default, at every level.
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& message) {
    nlohmann::json bad = toJson(c);
    edit(bad);
    try {
      parseNcclCalibration(bad.dump(), "cal.json");
      ADD_FAILURE() << "read: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::InvalidArgument);
      EXPECT_EQ(std::string(e.what()).rfind("cal.json: " + message, 0), 0U) << e.what();
    }
  };
  refused([](nlohmann::json& d) { d["params"]["nvls_fractoin"] = d["params"]["nvls_fraction"]; },
          "params.nvls_fractoin: unknown field (known: ");
  refused([](nlohmann::json& d) { d["params"]["net_fraction"]["valeu"] = 0.9; },
          "params.net_fraction.valeu: unknown field (known: identified, lower, note, prior, upper, value)");
  refused([](nlohmann::json& d) { d["system"]["nics_per_node"] = 8; }, "system.nics_per_node: unknown field");
  refused([](nlohmann::json& d) { d["fit"]["mean"] = 0.1; }, "fit.mean: unknown field (known: count, median, worst)");
  refused([](nlohmann::json& d) { d["parmas"] = nlohmann::json::object(); }, "parmas: unknown field");
  EXPECT_EQ(parseNcclParam("net_hop_extra_us"), NcclParam::NetHopExtraUs);
  EXPECT_THROW(parseNcclParam("nvlink_speed"), Error);
}

}  // namespace
}  // namespace collbench
