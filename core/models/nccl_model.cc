// NCCL's choice for a call, emulated from NVIDIA/nccl v2.28.9-1 (commit dbc86fd06e8b0c4517b95d8958a09ccacf9520c9),
// and a time model of the call on the machine. Facts and figures come from NCCL's sources named next to each
// constant; only what they leave open (achievable fractions of line rate, per-interconnect latency floors) is
// fitted, on the nccl-tests tables of tests/data/realdata/ (NcclModelParams, nccl_model.h).
#include "collbench/nccl_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "aws_ofi_tuner.h"
#include "collbench/error.h"
#include "collbench/tuning.h"

namespace collbench {

namespace {

// ---- NCCL's constants ------------------------------------------------------------------------------------------
constexpr int kAlgos = 7, kProtos = 3;
constexpr int kTree = 0, kRing = 1, kCollNetDirect = 2, kCollNetChain = 3, kNvls = 4, kNvlsTree = 5, kPat = 6;
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
/// ncclFuncStr order (src/include/nccl_common.h).
constexpr int kFuncBroadcast = 0, kFuncReduce = 1, kFuncAllGather = 2, kFuncReduceScatter = 3, kFuncAllReduce = 4;
constexpr const char* kFuncNames[NcclEnv::kFunctions] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                                         "AllReduce"};
constexpr const char* kAlgoNames[kAlgos] = {"Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT"};
constexpr const char* kProtoNames[kProtos] = {"LL", "LL128", "Simple"};

/// tuning.cc ncclTunerConstantsDefaults.baseLatencies [algo][proto], us.
constexpr double kBaseLatUs[kAlgos][kProtos] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0},      {0, 0, 0},
                                                {0, 0, 0},        {0, 0, 0},        {8.0, 8.0, 8.0}};
/// tuning.cc hwLatencies [NVLINK, PCI, NET][algo][proto]: latency of one pipeline step, us.
constexpr double kHwLatUs[3][kAlgos][kProtos] = {
    {{.6, 1.25, 4.0}, {.6, 1.9, 3.4}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 25}, {0, 0, 25}, {0, 0, 4.0}},
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}},
    {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 31}, {0, 0, 30}, {0, 0, 18}, {0, 0, 20.9}, {0, 0, 14}}};
constexpr int kHwNvlink = 0, kHwPci = 1, kHwNet = 2;
/// tuning.cc llMaxBws [GPU arch row for one node | CPU row for more][N1, N2, N4], GB/s; rows: Volta / Intel,
/// Ampere / AMD, Hopper, Blackwell.
constexpr double kLlMaxBw[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
/// tuning.cc perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws, perChMaxNVLSTreeBws [arch][N1, N2, N4].
constexpr double kPerChRingLL128[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {73.4, 34.6, 73.4}};
constexpr double kPerChTreeLL128[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChTree[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
constexpr double kPerChNvlsTree[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 43.8}};
/// tuning.cc nvlsEfficiency by arch.
constexpr double kNvlsEfficiency[4] = {0.0, 0.0, 0.85, 0.74};
/// tuning.cc treeCorrectionFactor [proto][log2(bytes >> 6)], 64 B .. 256 MiB.
constexpr double kTreeCorrection[kProtos][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
/// tuning.cc ncclTopoGetAlgoTime: multi-node Simple ring all-reduce latency x1.4 (sm >= 80, else x1.9) once a
/// channel-rank gets 64 bytes or more.
constexpr double kRingPlateauFactor = 1.4, kRingPlateauFactorPreAmpere = 1.9;
constexpr std::size_t kRingPlateauBytes = 64;
/// tuning.cc getNetOverhead: us per network step (Intel 1.0, AMD 2.0), x3 for Simple.
constexpr double kNetOverheadIntelUs = 1.0, kNetOverheadAmdUs = 2.0, kNetOverheadSimpleFactor = 3.0;
/// tuning.cc: PAT bandwidth x0.75; tree x0.85 where the tree graph degenerates to a chain (1 GPU per node); tree
/// all-reduce x0.92, tree LL x1/3.8, tree LL128 x7/9 (one node) or x120/128; ring LL x0.5, ring LL128 x0.92.
constexpr double kPatFactor = .75, kTreePatternFactor = .85, kTreeFactor = .92, kTreeLLFactor = 1.0 / 3.8;
constexpr double kTreeLL128FactorN1 = 7.0 / 9.0, kTreeLL128FactorNet = 120.0 / 128.0;
constexpr double kRingLLFactor = .5, kRingLL128Factor = .92;
/// tuning.cc: CollNetDirect bandwidth x0.85 on sm90+; 0.4 us per extra local rank (arity serialisation); collnet
/// AllGather/ReduceScatter at min(bwIntra, 0.9 bwInter) per local rank.
constexpr double kCollNetSm90Factor = .85, kCollNetArityUs = 0.4, kCollNetInterFactor = .9;
/// NCCL 2.19 .. 2.27 tuning.cc: NVLS and NVLSTree bus bandwidth x 5/6 to algorithm bandwidth; NVLSTree's network step
/// 14 us (2.28: 20.9). 2.28 is the first version with nvlsEfficiency (NCCL_VERSION_CODE 22800). The time model takes
/// the version's NVLSTree step too: the 2x8 H100 IB table (2.26.2) runs NVLSTree at 4-8 MiB within 2-5% of it, 15-16%
/// below 2.28's.
constexpr double kNvlsRatioBefore228 = 5.0 / 6.0, kNvlsTreeNetLatBefore228Us = 14.0;
constexpr int kNcclVersionNvlsEfficiency = 22800;
/// NCCL's estimate for trees and rings by release (tuning.cc at each tag), for logs of an older NCCL: its choice
/// follows its own constants. The time model keeps 2.28's (kBaseLatUs, kHwLatUs), which its fits were made with.
/// Releases where a rule of the estimate changed: 2.18 (per-step network overhead on rings; before it, sm80's bus
/// bandwidth capped at 235 GB/s and LL's intra-node step x1.8 on several nodes), 2.21 (ring LL at half the ring's
/// bandwidth, a quarter before), 2.23 (ring all-reduce over 2 (nodes - 1) network steps, 2 nodes before; one Hopper
/// node's own llMaxBw, Ampere's before; with one GPU per node every network step the tree's). 2.22 changed the host's
/// work for a call instead (one work item per call, NcclModelParams::hostChannelUs).
constexpr int kNccl218 = 21800, kNccl221 = 22100, kNccl222 = 22200, kNccl223 = 22300;
constexpr double kAmpereBusBwCapBefore218 = 235.0, kLLNetIntraLatFactorBefore218 = 1.8, kRingLLFactorBefore221 = .25;
/// The latencies of trees and rings from one release on.
struct ReleaseLatencies {
  int since;              ///< NCCL_VERSION_CODE of the first release with these values
  double baseLat[2][3];   ///< [tree, ring][proto], us
  double hwLat[3][2][3];  ///< [NVLINK, PCI, NET][tree, ring][proto], us
};
/// 2.23 on: kBaseLatUs and kHwLatUs.
constexpr ReleaseLatencies currentReleaseLatencies() {
  ReleaseLatencies r{kNccl223, {}, {}};
  for (const int a : {kTree, kRing}) {
    for (int p = 0; p < kProtos; ++p) {
      r.baseLat[a][p] = kBaseLatUs[a][p];
      for (int hw = 0; hw < 3; ++hw) r.hwLat[hw][a][p] = kHwLatUs[hw][a][p];
    }
  }
  return r;
}
/// Oldest first; 2.9.9 .. 2.17.1 share the first (NCCL older than 2.9 is taken as 2.9; 2.9's LL128 cap per
/// collective, 16.9 GB/s per channel for all-reduce, as 2.10's 20). Tree Simple's step is 28 us on NVLink in
/// 2.19 .. 2.22 (4 in 2.18 and from 2.23).
constexpr ReleaseLatencies kReleaseLatencies[] = {
    {0,
     {{4.4, 4.4, 0}, {3.6, 10.0, 8.4}},
     {{{.52, 1.25, 28}, {.47, 1.9, 3.4}}, {{1.0, 1.9, 28}, {1.0, 2.5, 5.7}}, {{5.0, 8.5, 28}, {2.7, 4.0, 9.6}}}},
    {kNccl218,
     {{6.8, 14.0, 0}, {6.6, 14.0, 8.4}},
     {{{.6, 1.25, 4}, {.6, 1.9, 3.4}}, {{1.0, 1.9, 6}, {1.0, 2.5, 5.7}}, {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}}}},
    {21900,
     {{6.8, 14.0, 0}, {6.6, 14.0, 8.4}},
     {{{.6, 1.25, 28}, {.6, 1.9, 3.4}}, {{1.0, 1.9, 28}, {1.0, 2.5, 5.7}}, {{5.0, 8.5, 28}, {2.7, 4.0, 14.0}}}},
    currentReleaseLatencies(),
};
const ReleaseLatencies& releaseLatencies(int version) {
  const ReleaseLatencies* found = &kReleaseLatencies[0];
  for (const ReleaseLatencies& r : kReleaseLatencies) {
    if (version >= r.since) found = &r;
  }
  return *found;
}
/// PAT latency: log2(nodes) x interLat / 3.5 + 2.8 us per rank (tuning.cc).
constexpr double kPatLogDivisor = 3.5, kPatPerRankUs = 2.8;

/// src/graph/topo.h: NCCL's bandwidth of one NVLink (GB/s) by arch, and of PCIe Gen3 x16.
constexpr double kNcclNvlinkBw[4] = {20.0, 20.0, 20.6, 40.1};  // SM70, SM80, SM90, SM100_NVLINK_BW
constexpr double kNcclPciBw = 12.0;                            // PCI_BW
/// Datasheet bandwidth of one NVLink per direction (GB/s): NVLink2/3/4 25 (V100 6 links = 150, A100 12 = 300,
/// H100 18 = 450), NVLink5 50 (B200 18 = 900).
constexpr double kNvlinkLinkGBps[4] = {25.0, 25.0, 25.0, 50.0};
/// src/graph/search.cc speed arrays (GB/s per channel) tried by the topology search: before sm90, sm90, sm100.
const std::vector<double> kSpeedIntra = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0};
const std::vector<double> kSpeedInter = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                                         7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
const std::vector<double> kSm90SpeedIntra = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0};
const std::vector<double> kSm90SpeedInter = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                             15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
const std::vector<double> kSm100SpeedIntra = {90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0};
const std::vector<double> kSm100SpeedInter = {96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0,
                                              17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
/// search.cc: a lower speed is tried only while it is more than 0.49 of the best found; channels are duplicated
/// when the speed is at least 25 GB/s (not on sm90+ below 50 GB/s with more than 4 channels).
constexpr double kSpeedStepRatio = .49, kDupMinBw = 25.0, kDupSm90MinBw = 50.0;
constexpr int kDupSm90MaxChannels = 4;
/// device.h MAXCHANNELS; the ring search keeps at most MAXCHANNELS/2 (init.cc); NVLS arity 32, direct arity 7.
constexpr int kMaxChannels = 64, kMaxSearchChannels = 32, kMaxNvlsArity = 32, kMaxDirectArity = 7;
/// connect.cc: on sm90+ multi-node rings with bwIntra above 45 GB/s and fewer than 16 channels get twice the channels.
constexpr double kSm90DoubleMinBw = 45.0;
constexpr int kSm90DoubleMaxChannels = 16;
/// transport/nvls.cc: NVLS channels (NVLS_NCHANNELS_SM90 16; sm100: 24 in one NVLink domain, 32 multi-node).
constexpr int kNvlsChannelsSm90 = 16, kNvlsChannelsSm100Single = 24, kNvlsChannelsSm100Multi = 32;
/// device.h thread counts: WARP_SIZE 32, NCCL_MAX_NTHREADS 640, NCCL_SIMPLE_MAX_NTHREADS 512, NCCL_LL_MAX_NTHREADS
/// 512, NCCL_LL128_MAX_NTHREADS 640; tuning.cc: Simple rings of at most PCI_BW use 256 threads.
constexpr int kWarp = 32, kMaxThreads = 640, kSimpleMaxThreads = 512, kLLMaxThreads = 512, kLL128MaxThreads = 640;
constexpr int kSimplePciThreads = 256;
/// comm.h thread thresholds (bytes per thread before more threads/channels): LL 8 (x nRanks for rings), LL128 8,
/// Simple 64; CollNet 512.
constexpr int kLLThreshold = 8, kLL128Threshold = 8, kSimpleThreshold = 64, kCollNetThreshold = 512;
/// device.h NCCL_STEPS 8; init.cc buffer sizes: LL 8 lines/thread x 512 threads x 8 steps x 16-byte lines (8 of
/// each 16 bytes are flags), LL128 120 elements/thread x 640 threads x 8 steps x 8 bytes (120 of 128 bytes are data),
/// Simple 4 MiB; collectives.h ALLREDUCE_CHUNKSTEPS 4, SLICESTEPS 2 (the same for AllGather, ReduceScatter).
constexpr int kSteps = 8;
constexpr std::size_t kLLBuffBytes = 8 * 512 * kSteps * 16;
constexpr std::size_t kLL128BuffBytes = 120 * 640 * kSteps * 8;
constexpr int kChunkSteps = 4, kSliceSteps = 2;
constexpr std::size_t kLL128LineBytes = 128, kLL128LineDataBytes = 120;
/// enqueue.cc calcCollChunking shrinks NVLS chunks (NCCL_NVLS_CHUNKSIZE, NcclEnv::nvlsChunkSize) to 64/32/16 KiB below
/// 64/8/2 chunks per concurrent op, NVLSTree to 256/128/64/32 KiB below 32/16/4/1; NVLSTree takes at most 64 KiB from
/// 4 nodes unless NCCL_NVLSTREE_MAX_CHUNKSIZE says otherwise (2.19.3 on; the variable exists from 2.20).
constexpr std::size_t kNvlsTreeManyNodesChunkBytes = 64 * 1024;
/// enqueue.cc calcCollChunking for Tree LL128: nsteps = 1 + log2(nodes) + 0.1 ppn; the chunk halves while a channel
/// has fewer than nsteps x 64 / ppn chunks (down to 128 KiB), then fewer than nsteps x 16 / ppn (down to 32 KiB).
constexpr double kTreeLL128StepsPerRank = 0.1, kTreeLL128ManyChunks = 64, kTreeLL128FewChunks = 16;
constexpr std::size_t kTreeLL128MidChunkBytes = 131072, kTreeLL128MinChunkBytes = 32768;

// ---- The time model's own constants (fitted where NCCL's sources and datasheets leave them open) ---------------
/// Protocol payload efficiency (device.h): LL lines carry 4 data bytes per 8 (a 4-byte flag per 4-byte word), LL128
/// 120 of 128 bytes, Simple all.
constexpr double kProtoPayload[kProtos] = {0.5, 120.0 / 128.0, 1.0};
// The fitted fractions, latency floors and NVLS pipeline depth are NcclSystem::model (NcclModelParams, nccl_model.h),
// so that a calibration can override them per system.

constexpr double kBytesPerUsPerGBps = 1e3;  // 1 GB/s = 1e3 bytes/us

/// aws-ofi-nccl src/platform-aws: the latency its EFA platforms report to NCCL (p4d, p4de, p5, p5e 75 us).
constexpr double kAwsOfiNcclLatencyUs = 75.0;

int ai(NcclAlgorithm a) { return static_cast<int>(a); }
int pi(NcclProtocol p) { return static_cast<int>(p); }
int archIndex(GpuArch a) { return static_cast<int>(a); }
int nodeIndex(int nodes) { return nodes <= 2 ? nodes - 1 : 2; }

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

/// Whether `text` names a network `kind` as a word: a run of letters and digits that is `kind`, optionally followed by
/// digits, "v" and digits (RoCEv2, efa2) or `suffix` (TCPXO). "default" and "process" name neither EFA nor RoCE.
bool namesNetwork(std::string_view text, std::string_view kind, std::string_view suffix = {}) {
  const std::string t = lower(text);
  const auto isWordChar = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; };
  const auto allDigits = [](std::string_view r) {
    return std::all_of(r.begin(), r.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
  };
  for (std::size_t i = 0; i < t.size();) {
    if (!isWordChar(t[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < t.size() && isWordChar(t[j])) ++j;
    const std::string_view word = std::string_view(t).substr(i, j - i);
    if (word.substr(0, kind.size()) == kind) {
      const std::string_view rest = word.substr(kind.size());
      if (allDigits(rest) || (rest.size() > 1 && rest[0] == 'v' && allDigits(rest.substr(1))) ||
          (!suffix.empty() && rest == suffix)) {
        return true;
      }
    }
    i = j;
  }
  return false;
}

int funcIndex(Collective c) {
  switch (c) {
    case Collective::Broadcast:
      return kFuncBroadcast;
    case Collective::Reduce:
      return kFuncReduce;
    case Collective::AllGather:
      return kFuncAllGather;
    case Collective::ReduceScatter:
      return kFuncReduceScatter;
    case Collective::AllReduce:
      return kFuncAllReduce;
    case Collective::Barrier:
      break;
  }
  throw Error(Errc::InvalidArgument, "NCCL has no barrier collective (nccl-tests times it as an all-reduce)");
}

Collective collectiveOf(int func) {
  constexpr Collective kByFunc[NcclEnv::kFunctions] = {Collective::Broadcast, Collective::Reduce, Collective::AllGather,
                                                       Collective::ReduceScatter, Collective::AllReduce};
  return kByFunc[func];
}

int log2i(std::size_t v) { return v == 0 ? -1 : static_cast<int>(std::bit_width(v)) - 1; }

}  // namespace

// ---- Names ---------------------------------------------------------------------------------------------------------

std::string_view toString(NcclAlgorithm a) { return kAlgoNames[ai(a)]; }
std::string_view toString(NcclProtocol p) { return kProtoNames[pi(p)]; }
std::string_view toString(GpuArch a) {
  constexpr const char* kNames[] = {"volta", "ampere", "hopper", "blackwell"};
  return kNames[archIndex(a)];
}
std::string_view toString(NicKind k) {
  constexpr const char* kNames[] = {"infiniband", "roce", "efa", "efa2", "tcpxo"};
  return kNames[static_cast<int>(k)];
}

NcclAlgorithm parseNcclAlgorithm(std::string_view s) {
  const std::string l = lower(s);
  for (int a = 0; a < kAlgos; ++a) {
    if (l == lower(kAlgoNames[a])) return static_cast<NcclAlgorithm>(a);
  }
  throw Error(Errc::InvalidArgument,
              fmt::format("unknown NCCL algorithm '{}' (available: tree, ring, collnetdirect, collnetchain, nvls, "
                          "nvlstree, pat)",
                          printable(s)));
}

NcclProtocol parseNcclProtocol(std::string_view s) {
  const std::string l = lower(s);
  for (int p = 0; p < kProtos; ++p) {
    if (l == lower(kProtoNames[p])) return static_cast<NcclProtocol>(p);
  }
  throw Error(Errc::InvalidArgument,
              fmt::format("unknown NCCL protocol '{}' (available: ll, ll128, simple)", printable(s)));
}

GpuArch parseGpuArch(std::string_view s) {
  const std::string l = lower(s);
  if (l == "volta" || l == "v100" || l == "sm70") return GpuArch::Volta;
  if (l == "ampere" || l == "a100" || l == "sm80") return GpuArch::Ampere;
  if (l == "hopper" || l == "h100" || l == "h200" || l == "sm90") return GpuArch::Hopper;
  if (l == "blackwell" || l == "b200" || l == "gb200" || l == "sm100") return GpuArch::Blackwell;
  throw Error(Errc::InvalidArgument,
              fmt::format("unknown GPU arch '{}' (available: volta, ampere, hopper, blackwell)", printable(s)));
}

// ---- Environment ---------------------------------------------------------------------------------------------------

NcclEnv::NcclEnv() {
  for (auto& f : algoEnabled) f.fill(1);
  for (auto& f : protoEnabled) f = {1, 2, 1};  // LL128 on by default only where tuning.cc's rules allow it
}

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      if (i > start) out.push_back(s.substr(start, i - start));  // strtok skips empty tokens
      start = i + 1;
    }
  }
  return out;
}

/// tuning.cc parseList: "[prefix:][^]elem,elem;prefix:[^]elem..." where only the first entry may lack a prefix.
template <std::size_t N>
void parseList(const std::string& var, const std::string& value, const char* const (&elems)[N],
               std::array<std::array<int, N>, NcclEnv::kFunctions>& list) {
  const auto bad = [&](const std::string& why) {
    return Error(Errc::InvalidArgument, fmt::format("{}={}: {}", var, printable(value), why));
  };
  const std::vector<std::string> entries = split(value, ';');
  if (entries.empty()) throw bad("empty list");
  for (std::size_t i = 0; i < entries.size(); ++i) {
    std::string prefix, elemList = entries[i];
    if (const std::size_t colon = entries[i].find(':'); colon != std::string::npos) {
      prefix = entries[i].substr(0, colon);
      elemList = entries[i].substr(colon + 1);
    } else if (i > 0) {
      throw bad(fmt::format("entry '{}' needs a function prefix (only the first may lack one)", entries[i]));
    }
    const bool exclude = !elemList.empty() && elemList[0] == '^';
    if (exclude) elemList.erase(0, 1);
    const std::vector<std::string> names = split(elemList, ',');
    if (names.empty()) throw bad("empty list");
    std::array<int, N> row;
    row.fill(exclude ? 1 : 0);
    for (const std::string& name : names) {
      std::size_t e = 0;
      while (e < N && lower(name) != lower(elems[e])) ++e;
      if (e == N) {
        std::string known;
        for (const char* k : elems) known += (known.empty() ? "" : ", ") + std::string(k);
        throw bad(fmt::format("unknown element '{}' (available: {})", printable(name), known));
      }
      row[e] = exclude ? 0 : 1;
    }
    bool found = false;
    for (int f = 0; f < NcclEnv::kFunctions; ++f) {
      if (!prefix.empty() && lower(prefix) != lower(kFuncNames[f])) continue;
      found = true;
      list[static_cast<std::size_t>(f)] = row;
    }
    if (!found) {
      throw bad(
          fmt::format("unknown function '{}' (available: broadcast, reduce, allgather, reducescatter, "
                      "allreduce)",
                      printable(prefix)));
    }
  }
}

long long parseInteger(const std::string& var, const std::string& value, long long min, long long max) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 0);
  if (value.empty() || end == nullptr || *end != '\0' || errno == ERANGE) {
    throw Error(Errc::InvalidArgument, fmt::format("{}={}: not an integer", var, printable(value)));
  }
  if (v < min || v > max) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}={}: out of range (expected {} .. {})", var, printable(value), min, max));
  }
  return v;
}

}  // namespace

namespace {

/// Whether a NCCL_TUNER_PLUGIN value (a library name or path) has `word` among the words of its name, any case:
/// "ofi" in libnccl-ofi-tuner.so, "example" in libnccl-tuner-example.so.
bool namesTuner(std::string_view lib, std::string_view word) {
  std::string token;
  for (std::size_t i = 0; i <= lib.size(); ++i) {
    const auto ch = i < lib.size() ? static_cast<unsigned char>(lib[i]) : '\0';
    if (std::isalnum(ch) != 0) {
      token += static_cast<char>(std::tolower(ch));
    } else {
      if (token == word) return true;
      token.clear();
    }
  }
  return false;
}

/// NCCL's example tuner's rules (ext-tuner/example/plugin.c): NCCL_TUNER_CONFIG_FILE, else nccl_tuner.conf in the
/// working directory, where a missing file means no rules (the plugin's "using defaults").
void loadExampleTunerRules(NcclEnv& env) {
  constexpr const char* kDefaultFile = "nccl_tuner.conf";
  const std::string path = env.tunerConfigFile.empty() ? kDefaultFile : env.tunerConfigFile;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!env.tunerConfigFile.empty()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("NCCL_TUNER_CONFIG_FILE={}: cannot read it", printable(env.tunerConfigFile)));
    }
    env.tunerRules.clear();
    return;
  }
  std::ostringstream text;
  text << in.rdbuf();
  env.tunerRules = parseNcclTunerCsv(text.str(), path);
}

/// parseNcclEnv's work on an environment that may already hold other variables.
void applyNcclVars(NcclEnv& env, const std::map<std::string, std::string>& vars) {
  for (const auto& [name, value] : vars) {
    if (name.rfind("NCCL_", 0) == 0) env.vars[name] = value;
  }
  const auto get = [&](const char* name) -> const std::string* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : &it->second;
  };
  if (const std::string* v = get("NCCL_PROTO")) {
    parseList("NCCL_PROTO", *v, kProtoNames, env.protoEnabled);
    env.proto = *v;
  }
  if (const std::string* v = get("NCCL_ALGO")) {
    parseList("NCCL_ALGO", *v, kAlgoNames, env.algoEnabled);
    env.algo = *v;
  }
  // connect.cc ncclMinNchannels / ncclMaxNchannels, init.cc minCTAs / maxCTAs: the tighter of each pair applies to
  // the communicator's channels; transport/nvls.cc bounds NVLS channels by the CTA pair alone.
  for (const char* name : {"NCCL_MIN_NCHANNELS", "NCCL_MIN_CTAS"}) {
    if (const std::string* v = get(name)) {
      const int n = static_cast<int>(parseInteger(name, *v, 1, kMaxChannels));
      env.minChannels = std::max(env.minChannels, n);
      if (std::string_view(name) == "NCCL_MIN_CTAS") env.minCtas = n;
    }
  }
  for (const char* name : {"NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS"}) {
    if (const std::string* v = get(name)) {
      const int n = static_cast<int>(parseInteger(name, *v, 1, kMaxChannels));
      env.maxChannels = std::min(env.maxChannels, n);
      if (std::string_view(name) == "NCCL_MAX_CTAS") env.maxCtas = n;
    }
  }
  // init.cc: min > max sets both to max.
  if (env.minChannels > env.maxChannels) env.minChannels = env.maxChannels;
  if (env.minCtas > env.maxCtas) env.minCtas = env.maxCtas;
  if (const std::string* v = get("NCCL_NVLS_NCHANNELS")) {
    env.nvlsChannels = static_cast<int>(parseInteger("NCCL_NVLS_NCHANNELS", *v, 1, kMaxChannels));
  }
  if (const std::string* v = get("NCCL_NVLS_ENABLE")) {
    env.nvlsEnable = static_cast<int>(parseInteger("NCCL_NVLS_ENABLE", *v, 0, 2));
  }
  if (const std::string* v = get("NCCL_COLLNET_ENABLE")) {
    env.collnetEnable = static_cast<int>(parseInteger("NCCL_COLLNET_ENABLE", *v, 0, 1));
  }
  // At least one 64 KiB slice per step (a smaller buffer leaves Simple's chunk under its 16-byte grain).
  constexpr long long kMinBuffSize = 1 << 16, kMaxBuffSize = 1LL << 31;
  if (const std::string* v = get("NCCL_BUFFSIZE")) {
    env.buffSize = static_cast<std::size_t>(parseInteger("NCCL_BUFFSIZE", *v, kMinBuffSize, kMaxBuffSize));
  }
  // NVLS chunks are cut to 16 KiB at the smallest (enqueue.cc calcCollChunking), so a cap below it never applies.
  constexpr long long kMinNvlsChunk = 16 << 10;
  if (const std::string* v = get("NCCL_NVLS_CHUNKSIZE")) {
    env.nvlsChunkSize = static_cast<std::size_t>(parseInteger("NCCL_NVLS_CHUNKSIZE", *v, kMinNvlsChunk, kMaxBuffSize));
  }
  if (const std::string* v = get("NCCL_NVLSTREE_MAX_CHUNKSIZE")) {
    env.nvlsTreeMaxChunkSize =
        static_cast<std::size_t>(parseInteger("NCCL_NVLSTREE_MAX_CHUNKSIZE", *v, kMinNvlsChunk, kMaxBuffSize));
  }
  if (const std::string* v = get("NCCL_TUNER_PLUGIN")) env.tunerPlugin = *v;
  if (const std::string* v = get("NCCL_TUNER_CONFIG_FILE")) env.tunerConfigFile = *v;
  if ((get("NCCL_TUNER_PLUGIN") || get("NCCL_TUNER_CONFIG_FILE")) && namesTuner(env.tunerPlugin, "example")) {
    loadExampleTunerRules(env);
  }
  if (const std::string* v = get("NCCL_NTHREADS")) {
    // tuning.cc getNthreads: multiples of 32 between 64 and 512 (NCCL clamps others with a warning).
    const long long nt = parseInteger("NCCL_NTHREADS", *v, 2 * kWarp, kSimpleMaxThreads);
    if (nt % kWarp != 0) {
      throw Error(Errc::InvalidArgument, fmt::format("NCCL_NTHREADS={}: must be a multiple of {}", *v, kWarp));
    }
    env.nThreads = static_cast<int>(nt);
  }
}

}  // namespace

NcclEnv parseNcclEnv(const std::map<std::string, std::string>& vars) {
  NcclEnv env;
  applyNcclVars(env, vars);
  return env;
}

namespace {

/// The variables `sys` sets that `env` does not name: those the system contributes.
std::map<std::string, std::string> systemOnlyVars(const NcclSystem& sys, const NcclEnv& env) {
  std::map<std::string, std::string> unset;
  for (const auto& [name, value] : sys.ncclEnv) {
    if (env.vars.count(name) == 0) unset.emplace(name, value);
  }
  return unset;
}

}  // namespace

NcclEnv ncclEnvOnSystem(const NcclSystem& sys, const NcclEnv& env) {
  const std::map<std::string, std::string> unset = systemOnlyVars(sys, env);
  if (unset.empty()) return env;
  NcclEnv out = env;
  applyNcclVars(out, unset);
  return out;
}

namespace {

/// The NCCL variables of the process environment the model honours.
std::map<std::string, std::string> processNcclVars() {
  std::map<std::string, std::string> vars;
  for (const char* name :
       {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS",
        "NCCL_NVLS_NCHANNELS", "NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_BUFFSIZE", "NCCL_NTHREADS",
        "NCCL_NVLS_CHUNKSIZE", "NCCL_NVLSTREE_MAX_CHUNKSIZE", "NCCL_TUNER_PLUGIN", "NCCL_TUNER_CONFIG_FILE"}) {
    if (const char* v = std::getenv(name)) vars[name] = v;
  }
  return vars;
}

}  // namespace

NcclEnv ncclEnvFromProcess() { return parseNcclEnv(processNcclVars()); }

int ncclVersionCode(std::string_view version) {
  int part[3] = {0, 0, 0};
  std::size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    const auto [end, ec] = std::from_chars(version.data() + at, version.data() + version.size(), part[i]);
    if (ec != std::errc() || part[i] < 0 || part[i] > 99) return 0;
    at = static_cast<std::size_t>(end - version.data());
    if (i < 2) {
      if (at >= version.size() || version[at] != '.') return 0;
      ++at;
    }
  }
  return at == version.size() ? part[0] * 10000 + part[1] * 100 + part[2] : 0;
}

NcclEnv ncclEnvWith(std::string_view assignments, std::string_view what) {
  std::map<std::string, std::string> vars = processNcclVars();
  std::size_t at = 0;
  while (at < assignments.size()) {
    if (std::isspace(static_cast<unsigned char>(assignments[at]))) {
      ++at;
      continue;
    }
    std::size_t end = at;
    while (end < assignments.size() && !std::isspace(static_cast<unsigned char>(assignments[end]))) ++end;
    const std::string_view item = assignments.substr(at, end - at);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || item.substr(0, 5) != "NCCL_") {
      throw Error(Errc::InvalidArgument,
                  fmt::format("{}: '{}' is not NCCL_<NAME>=VALUE", what, printable(std::string(item))));
    }
    vars[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
    at = end;
  }
  return parseNcclEnv(vars);
}

// ---- System from a topology ----------------------------------------------------------------------------------------

NcclSystem ncclSystemOf(const Topology& t, int nranks) {
  const std::vector<int> hosts = rankHosts(t, nranks);  // throws for too few ranks
  NcclSystem s;
  std::map<int, int> perHost;
  for (int h : hosts) ++perHost[h];
  s.nodes = static_cast<int>(perHost.size());
  s.gpusPerNode = 0;
  for (const auto& [h, n] : perHost) s.gpusPerNode = std::max(s.gpusPerNode, n);

  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < t.nodes.size(); ++i) index[t.nodes[i].id] = i;
  const TopoNode& gpu = t.nodes[index.at(t.ranks.at(0))];
  const auto other = [&](const TopoLink& l, const std::string& id) -> const TopoNode* {
    if (l.a == id) return &t.nodes[index.at(l.b)];
    if (l.b == id) return &t.nodes[index.at(l.a)];
    return nullptr;
  };
  double nvlinkGBps = 0;
  s.nvswitch = s.nvls = false;
  std::set<std::string> gpuNeighbours;
  for (const TopoLink& l : t.links) {
    const TopoNode* o = other(l, gpu.id);
    if (o == nullptr) continue;
    gpuNeighbours.insert(o->id);
    if (l.linkClass != "nvlink") continue;
    nvlinkGBps += l.bandwidthGBps;
    if (o->kind == NodeKind::Switch && !o->host.empty()) {
      s.nvswitch = true;
      s.nvls = s.nvls || o->reduceGBps > 0;
    }
  }
  s.nvlink = nvlinkGBps > 0;
  s.nvlinkGBps = nvlinkGBps;
  constexpr double kBlackwellMinGBps = 800, kHopperMinGBps = 400, kAmpereMinGBps = 250;  // 900 / 450 / 300 / 150
  if (!gpu.arch.empty()) {
    s.arch = parseGpuArch(gpu.arch);
  } else if (s.nvlink) {
    s.arch = nvlinkGBps >= kBlackwellMinGBps ? GpuArch::Blackwell
             : nvlinkGBps >= kHopperMinGBps  ? GpuArch::Hopper
             : nvlinkGBps >= kAmpereMinGBps  ? GpuArch::Ampere
                                             : GpuArch::Volta;
  }
  if (s.arch < GpuArch::Hopper) s.nvls = false;  // multicast objects need sm90 (search.cc skips NVLS below 90)

  // The words a network kind is read from: the topology's name and description, and its host's NIC ids.
  std::string names = t.name + " " + t.description;
  s.nicsPerNode = 0;
  s.nicGBps = 0;
  s.collnet = false;
  s.gpuNicPath = NcclPath::Phb;
  for (const TopoNode& n : t.nodes) {
    if (n.kind == NodeKind::Switch && n.host.empty() && n.reduceGBps > 0) s.collnet = true;
    if (n.kind != NodeKind::Nic || n.host != gpu.host) continue;
    ++s.nicsPerNode;
    names += " " + n.id;
    for (const TopoLink& l : t.links) {
      const TopoNode* o = other(l, n.id);
      if (o == nullptr) continue;
      if (l.linkClass == "nic" || l.linkClass == "fabric") s.nicGBps = std::max(s.nicGBps, l.bandwidthGBps);
      if (o->id == gpu.id || (gpuNeighbours.count(o->id) > 0 && o->kind == NodeKind::Switch)) {
        s.gpuNicPath = NcclPath::Pix;
      }
    }
  }
  if (namesNetwork(names, "roce")) s.nicKind = NicKind::Roce;
  if (namesNetwork(names, "tcpx", "o")) s.nicKind = NicKind::Tcpxo;
  if (namesNetwork(names, "efa")) {
    s.nicKind = s.arch >= GpuArch::Hopper ? NicKind::Efa2 : NicKind::Efa;
    s.netPluginLatencyUs = kAwsOfiNcclLatencyUs;
    // aws-ofi-nccl's RDMA protocol shows NCCL one device per GPU, striping over that GPU's NICs (its log: "NIC group
    // 0 device #0 .. #3" on p5; NCCL: "via NET/AWS Libfabric/<gpu>", 16 coll channels on 2 p5), so NCCL searches
    // 8 NICs of 4 x 100 Gb/s there, not 32 of 100. The groups follow the host's GPUs, however many of them a call uses.
    const auto hostGpus = static_cast<int>(std::count_if(t.nodes.begin(), t.nodes.end(), [&](const TopoNode& n) {
      return n.kind == NodeKind::Gpu && n.host == gpu.host;
    }));
    if (hostGpus > 0 && s.nicsPerNode > hostGpus && s.nicsPerNode % hostGpus == 0) {
      const int nicsPerGpu = s.nicsPerNode / hostGpus;
      s.nicGBps *= nicsPerGpu;
      s.nicsPerNode = hostGpus;
    }
  }
  try {
    parseNcclEnv(t.ncclEnv);
  } catch (const Error& e) {
    throw Error(Errc::InvalidTopology, fmt::format("{}: nccl_env: {}", printable(t.name), e.what()));
  }
  s.ncclEnv = t.ncclEnv;
  if (t.cpuVendor == "amd") s.cpuVendor = CpuVendor::Amd;
  return s;
}

// ---- NCCL's topology search and channel setup, reduced to what the tuning needs ----------------------------------

namespace {

const std::vector<double>& speeds(GpuArch arch, bool inter) {
  if (arch >= GpuArch::Blackwell) return inter ? kSm100SpeedInter : kSm100SpeedIntra;
  if (arch == GpuArch::Hopper) return inter ? kSm90SpeedInter : kSm90SpeedIntra;
  return inter ? kSpeedInter : kSpeedIntra;
}

/// NCCL's view of one GPU's intra-node bandwidth: NVLink count x its per-link constant, or PCIe.
double ncclIntraBw(const NcclSystem& s) {
  if (!s.nvlink) return kNcclPciBw;
  const int a = archIndex(s.arch);
  return std::round(s.nvlinkGBps / kNvlinkLinkGBps[a]) * kNcclNvlinkBw[a];
}

/// search.cc ncclTopoCompute for rings: start at the fastest speed the links allow, take channels while every GPU's
/// link (and, across nodes, every NIC) has room, and try slower speeds while they stay above 0.49 of the best;
/// keep the most total bandwidth; then ncclTopoDupChannels.
NcclGraph ringGraph(const NcclSystem& s, int nodes) {
  const bool inter = nodes > 1;
  const std::vector<double>& sp = speeds(s.arch, inter);
  const double intraBw = ncclIntraBw(s);
  const double maxBw = inter ? std::min(intraBw, s.nicGBps) : intraBw;
  const auto channelsAt = [&](double speed) {
    int n = std::min(kMaxSearchChannels, static_cast<int>(intraBw / speed));
    if (inter) n = std::min(n, s.nicsPerNode * static_cast<int>(s.nicGBps / speed));
    return n;
  };
  std::size_t i = 0;
  while (i + 1 < sp.size() && sp[i] > maxBw) ++i;
  NcclGraph g;
  g.nChannels = channelsAt(sp[i]);
  g.bwIntra = g.bwInter = sp[i];
  for (std::size_t j = i + 1; j < sp.size() && g.nChannels * g.bwIntra < intraBw && sp[j] / g.bwInter > kSpeedStepRatio;
       ++j) {
    const int n = channelsAt(sp[j]);
    if (n * sp[j] > g.nChannels * g.bwIntra) {
      g.nChannels = n;
      g.bwIntra = g.bwInter = sp[j];
    }
  }
  if (g.nChannels < 1) {  // search.cc falls back to one channel at 0.1 GB/s over SYS paths
    g.nChannels = 1;
    g.bwIntra = g.bwInter = 0.1;
  }
  const bool dup = g.bwIntra >= kDupMinBw &&
                   !(s.arch >= GpuArch::Hopper && g.bwIntra < kDupSm90MinBw && g.nChannels > kDupSm90MaxChannels);
  if (dup) {
    const int d = std::min(2 * g.nChannels, kMaxSearchChannels);
    const int div = (d + g.nChannels - 1) / g.nChannels;
    g.bwIntra /= div;
    g.bwInter /= div;
    g.nChannels = d;
  }
  g.typeIntra = s.nvlink ? NcclPath::Nvl : NcclPath::Pxb;
  g.typeInter = inter ? s.gpuNicPath : NcclPath::Pix;
  return g;
}

/// The highest speed of `sp` not above `limit` (the slowest when none is).
double speedAtMost(const std::vector<double>& sp, double limit) {
  for (double v : sp) {
    if (v <= limit) return v;
  }
  return sp.back();
}

}  // namespace

namespace {

/// transport/nvls.cc: the NVLS channels NCCL gives a communicator (16 on sm90; sm100 24 in one NVLink domain, 32
/// across nodes). enqueue.cc: "NVLS should not need more than 16 channels to get peak BW", so the time model takes
/// this count as the one that reaches NVLS's peak, each channel carrying its share.
int nvlsDefaultChannels(const NcclSystem& s) {
  if (s.arch < GpuArch::Blackwell) return kNvlsChannelsSm90;
  return s.nodes > 1 ? kNvlsChannelsSm100Multi : kNvlsChannelsSm100Single;
}

/// ncclComm under an environment the system's variables are already applied to.
NcclComm buildComm(const NcclSystem& sysIn, int nranks, const NcclEnv& env) {
  if (nranks < 1) throw Error(Errc::InvalidArgument, fmt::format("nranks must be at least 1, got {}", nranks));
  NcclComm c;
  c.sys = sysIn;
  c.version = env.version;
  NcclSystem& s = c.sys;
  s.gpusPerNode = std::max(1, std::min(s.gpusPerNode, nranks));
  s.nodes = (nranks + s.gpusPerNode - 1) / s.gpusPerNode;
  const int nodes = s.nodes, ppn = s.gpusPerNode;
  const bool inter = nodes > 1;
  const std::vector<double>& sp = speeds(s.arch, inter);
  const double intraBw = ncclIntraBw(s);

  NcclGraph ring = ringGraph(s, nodes);
  // Tree: the ring's channels; with several nodes pass 2 raises bwIntra (up to twice bwInter) while NVLink has room.
  NcclGraph tree = ring;
  if (inter)
    tree.bwIntra = std::max(ring.bwIntra, speedAtMost(sp, std::min(2 * ring.bwInter - 1e-9, intraBw / ring.nChannels)));
  c.graphs[kRing] = ring;
  c.graphs[kTree] = tree;
  c.graphs[kPat] = ring;

  // NVLS (search.cc: needs NVSwitches and sm90; one channel per GPU, each pulling its share; transport/nvls.cc: the
  // multicast support NCCL_NVLS_ENABLE allows).
  const bool nvls = s.nvls && s.nvswitch && s.arch >= GpuArch::Hopper && env.nvlsEnable != 0 && ppn >= 2;
  if (nvls) {
    NcclGraph g;
    g.nChannels = std::min(kMaxNvlsArity, ppn);
    const double perGpu = intraBw * ppn / (ppn - 1);  // non-ring patterns may use ngpus/(ngpus-1) of the link
    g.bwIntra = speedAtMost(sp, std::min(intraBw, perGpu / g.nChannels));
    g.bwInter = inter ? speedAtMost(sp, s.nicGBps * s.nicsPerNode / g.nChannels) : g.bwIntra;
    g.typeIntra = NcclPath::Nvl;
    g.typeInter = ring.typeInter;
    c.graphs[kNvls] = c.graphs[kNvlsTree] = g;
    c.nvlsChannels =
        std::max(env.minCtas, std::min(env.maxCtas, env.nvlsChannels > 0 ? env.nvlsChannels : nvlsDefaultChannels(s)));
  }
  // CollNet (init.cc: NCCL_COLLNET_ENABLE=1, a network that reduces, more than one node).
  c.collnet = s.collnet && env.collnetEnable == 1 && inter;
  if (c.collnet) {
    c.graphs[kCollNetChain] = tree;
    NcclGraph direct = tree;
    direct.nChannels = std::min(kMaxDirectArity + 1, ppn);
    c.graphs[kCollNetDirect] = direct;
  }

  // connect.cc ncclTopoPostset: channels duplicated (x2), x1.5 for CollNet when bwIntra > bwInter with several GPUs
  // per node, x2 on sm90+ multi-node rings above 45 GB/s with < 16 channels; then NCCL_MAX/MIN_NCHANNELS.
  int n = std::min(kMaxChannels, 2 * ring.nChannels);
  if (c.collnet && tree.bwIntra > tree.bwInter && nranks > nodes) n = std::min(kMaxChannels, n + n / 2);
  if (s.arch >= GpuArch::Hopper && inter && ring.bwIntra > kSm90DoubleMinBw && n < kSm90DoubleMaxChannels) n *= 2;
  c.defaultChannels = n;
  n = std::min(n, env.maxChannels);
  n = std::max(n, env.minChannels);
  c.nChannels = n;
  return c;
}

}  // namespace

NcclComm ncclComm(const NcclSystem& sys, int nranks, const NcclEnv& env) {
  return buildComm(sys, nranks, ncclEnvOnSystem(sys, env));
}

// ---- NCCL's tuning (ncclTopoTuneModel, ncclTopoGetAlgoTime) --------------------------------------------------------

namespace {

struct Tuned {
  double bw = 0;   ///< NCCL's algorithm bandwidth, GB/s (0 = not offered)
  double lat = 0;  ///< us
};

double llMaxBw(const NcclSystem& s) {
  const int row = s.nodes == 1 ? archIndex(s.arch) : (s.cpuVendor == CpuVendor::Amd ? 1 : 0);
  return kLlMaxBw[row][nodeIndex(s.nodes)];
}

int nstepsOf(int func, int nranks) {
  if (func == kFuncAllReduce) return 2 * (nranks - 1);
  if (func == kFuncAllGather || func == kFuncReduceScatter) return nranks - 1;
  return nranks;
}

/// Whether algorithm `a` exists for function `f` at all (tuning.cc's loop skips, enqueue.cc's support checks).
bool offered(const NcclComm& c, int f, int a, int p, int nranks) {
  const NcclSystem& s = c.sys;
  const int ppn = s.gpusPerNode;
  if ((f == kFuncBroadcast || f == kFuncReduce) && a != kRing) return false;
  if ((f == kFuncAllGather || f == kFuncReduceScatter) && a != kPat && a != kRing && a != kNvls && a != kCollNetDirect)
    return false;
  if (f == kFuncAllReduce && a == kPat) return false;
  if ((a == kNvls || a == kNvlsTree) && p != kSimple) return false;
  if ((a == kCollNetDirect || a == kCollNetChain) && p != kSimple) return false;
  if (a == kPat && (p != kSimple || s.nodes != nranks)) return false;  // PAT: Simple, one GPU per node
  if ((a == kNvls || a == kNvlsTree) && (c.nvlsChannels == 0 || c.graphs[static_cast<std::size_t>(a)].nChannels < 2))
    return false;
  if ((a == kNvls || a == kNvlsTree) && f != kFuncAllReduce && ppn > kMaxNvlsArity) return false;
  if (a == kNvlsTree && s.nodes == 1) return false;
  if (a == kNvls && s.nodes > 1 && !c.collnet) return false;
  if ((a == kCollNetDirect || a == kCollNetChain) && (!c.collnet || ppn > kMaxDirectArity + 1)) return false;
  if (a == kCollNetDirect && !s.nvswitch) return false;
  // AllGather / ReduceScatter over NVLS or CollNetDirect across nodes need the network's collectives and 1:1 GPU:NIC.
  if ((a == kNvls || a == kCollNetDirect) && (f == kFuncAllGather || f == kFuncReduceScatter) && s.nodes > 1)
    return false;
  return true;
}

/// LL128's default enablement (tuning.cc): on sm90+ up to PXN paths, else up to PXB; NVLink-class intra paths.
bool ll128Default(const NcclComm& c, int a) {
  const NcclGraph& g = c.graphs[static_cast<std::size_t>(a)];
  const bool interOk = c.sys.arch >= GpuArch::Hopper ? g.typeInter <= NcclPath::Pxn : g.typeInter <= NcclPath::Pxb;
  return interOk && g.typeIntra <= NcclPath::Nvb;
}

/// tuning.cc: NCCL's latency of one network step of algorithm `a` and protocol `p` (the tree's with one GPU per node;
/// 2.19 .. 2.27's for NVLSTree where the version is older than 2.28), without the plugin's.
double netStepLatUs(const NcclComm& c, int a, int p, int nranks) {
  if (a == kNvlsTree && c.version < kNcclVersionNvlsEfficiency) return kNvlsTreeNetLatBefore228Us;
  return nranks == c.sys.nodes ? kHwLatUs[kHwNet][kTree][p] : kHwLatUs[kHwNet][a][p];
}

/// NCCL's bandwidth and latency of one (algorithm, protocol). `ncclEstimate`: NCCL's own estimate, as the version
/// NCCL runs computes it, with the network plugin's reported latency on each network step; else the latency the time
/// model (predict) starts from, without the plugin's latency (the model has its own per-hop term).
Tuned tune(const NcclComm& c, int f, int a, int p, int nranks, bool ncclEstimate) {
  const NcclSystem& s = c.sys;
  const NcclGraph& g = c.graphs[static_cast<std::size_t>(a)];
  const int nodes = s.nodes, arch = archIndex(s.arch), idx2 = nodeIndex(nodes);
  const double ppn = static_cast<double>(nranks) / nodes;
  const int nsteps = nstepsOf(f, nranks);
  const bool collnet = a == kCollNetDirect || a == kCollNetChain;
  double bw = nodes <= 2 || collnet ? g.bwIntra : g.bwInter;
  // NCCL 2.19 .. 2.27 tune NVLS and NVLSTree on the graph's bandwidths alone (2.28 adds nvlsEfficiency and the
  // per-channel NVLSTree limit) and convert their bus bandwidth with 5/6.
  const bool nvlsBefore228 = ncclEstimate && c.version < kNcclVersionNvlsEfficiency;
  if ((a == kNvls || a == kNvlsTree) && nvlsBefore228) {
    bw = a == kNvls ? std::min(g.bwIntra, g.bwInter) : std::min(g.bwIntra, nodes <= 2 ? g.bwInter : g.bwInter / 2);
  } else if (a == kNvls || a == kNvlsTree) {
    double intra = g.bwIntra * kNvlsEfficiency[arch] * (g.nChannels - 1) / g.nChannels;
    intra *= f == kFuncAllReduce ? 2.0 : (ppn - 1) / ppn;  // all-reduce pipelines two operations
    const double interBw = g.bwInter * ((nodes <= 2 && a == kNvlsTree) ? 2 : 1);
    bw = std::min({intra, interBw, a == kNvlsTree ? kPerChNvlsTree[arch][idx2] : std::numeric_limits<double>::max()});
  }
  // The estimate takes the constants of the log's release for trees and rings; the time model 2.28's.
  const int release = ncclEstimate ? c.version : kNcclVersionEmulated;
  const ReleaseLatencies& latencies = releaseLatencies(release);
  const bool treeOrRing = a == kTree || a == kRing;
  double busBw = g.nChannels * bw;
  if (release < kNccl218 && s.arch == GpuArch::Ampere) busBw = std::min(busBw, kAmpereBusBwCapBefore218);
  const double llMax = s.nodes == 1 && s.arch == GpuArch::Hopper && release < kNccl223
                           ? kLlMaxBw[archIndex(GpuArch::Ampere)][0]
                           : llMaxBw(s);
  if (a == kRing && p == kLL)
    busBw = std::min(llMax, busBw * (release < kNccl221 ? kRingLLFactorBefore221 : kRingLLFactor));
  if (a == kRing && p == kLL128) busBw = std::min(busBw * kRingLL128Factor, g.nChannels * kPerChRingLL128[arch][idx2]);
  if (a == kTree && f == kFuncAllReduce) busBw = std::min(busBw * kTreeFactor, g.nChannels * kPerChTree[arch][idx2]);
  if (a == kTree && p == kLL) busBw = std::min(busBw * kTreeLLFactor, llMax);
  if (a == kTree && p == kLL128) {
    busBw = std::min(busBw * (nodes == 1 ? kTreeLL128FactorN1 : kTreeLL128FactorNet),
                     g.nChannels * kPerChTreeLL128[arch][idx2]);
  }
  if (a == kTree && ppn == 1) busBw *= kTreePatternFactor;  // one GPU per node: the tree graph is a chain
  if (a == kPat) busBw *= kPatFactor;
  if (a == kCollNetDirect) {
    if (f == kFuncAllGather || f == kFuncReduceScatter) {
      busBw = ppn * std::min(g.bwIntra, g.bwInter * kCollNetInterFactor);
    } else {
      double factor = ppn / g.nChannels;  // GPU/NIC ratio
      factor -= (factor - 1) / 2;
      busBw /= factor;
      if (s.arch >= GpuArch::Hopper) busBw *= kCollNetSm90Factor;
    }
  }
  if (!(a != kRing && (f == kFuncAllGather || f == kFuncReduceScatter))) {
    const bool nvls = a == kNvls || a == kNvlsTree;
    busBw *= nvls && nvlsBefore228 ? kNvlsRatioBefore228
             : a == kRing || nvls  ? static_cast<double>(nranks) / nsteps
                                   : 0.5;
  }
  Tuned t;
  t.bw = busBw;
  const auto hwLat = [&](int hw, int algo) {
    return algo == kTree || algo == kRing ? latencies.hwLat[hw][algo][p] : kHwLatUs[hw][algo][p];
  };
  t.lat = treeOrRing ? latencies.baseLat[a][p] : kBaseLatUs[a][p];
  const int intraHw = g.typeIntra == NcclPath::Nvl ? kHwNvlink : kHwPci;
  double intraLat = hwLat(intraHw, a);
  if (treeOrRing && nodes > 1 && p == kLL && release < kNccl218) intraLat *= kLLNetIntraLatFactorBefore218;
  double interLat =
      treeOrRing ? hwLat(kHwNet, nranks == nodes && release >= kNccl223 ? kTree : a) : netStepLatUs(c, a, p, nranks);
  if (ncclEstimate) interLat += (p == kSimple ? 2 : 1) * s.netPluginLatencyUs;  // Simple adds the flush's too
  const int ranksPerNode = nranks / nodes;
  if (a == kRing) {
    const int hw = nodes == 1 ? intraHw : kHwNet;
    double lat = hwLat(hw, a);
    if (f == kFuncReduce || f == kFuncBroadcast) {
      // Rings of different channels differ (sameChannels 0 on NVSwitch); Simple adds the tree's chunk latency.
      if (p == kSimple) lat = hwLat(hw, kTree);
      t.lat += nsteps * lat;
    } else {
      double netOverhead = 0;
      if (nodes > 1 && release >= kNccl218) {
        netOverhead = s.cpuVendor == CpuVendor::Amd ? kNetOverheadAmdUs : kNetOverheadIntelUs;
        if (p == kSimple) netOverhead *= kNetOverheadSimpleFactor;
      }
      intraLat = std::max(intraLat, netOverhead);
      const int interSteps = nodes == 1            ? 0
                             : f != kFuncAllReduce ? nodes - 1
                             : release >= kNccl223 ? 2 * (nodes - 1)
                                                   : 2 * nodes;
      t.lat += (nsteps - interSteps) * intraLat + interSteps * interLat;
    }
  } else if (a == kTree) {
    if (f == kFuncAllReduce)
      t.lat += 2 * ((ranksPerNode - 1) * intraLat + log2i(static_cast<std::size_t>(nodes)) * interLat);
  } else if (a == kCollNetDirect) {
    t.lat += 2 * (std::min(1, ranksPerNode - 1) * intraLat + (ranksPerNode - 1) * kCollNetArityUs) + interLat;
  } else if (a == kCollNetChain) {
    t.lat += 2 * (ranksPerNode - 1) * intraLat + interLat;
  } else if (a == kNvls) {
    t.lat = intraLat + (nodes > 1 ? interLat : 0);
  } else if (a == kNvlsTree) {
    t.lat += intraLat + 2 * log2i(static_cast<std::size_t>(nodes)) * interLat;
  } else if (a == kPat) {
    if (f == kFuncAllGather || f == kFuncReduceScatter) {
      t.lat += log2i(static_cast<std::size_t>(nodes)) * (interLat / kPatLogDivisor) + nranks * kPatPerRankUs;
    }
  }
  return t;
}

/// ncclTopoGetAlgoTime for one call (numPipeOps 1): latency + bytes / bandwidth with the tree correction and the
/// ring plateau.
double algoTime(const NcclComm& c, int f, int a, int p, std::size_t bytes, int nranks) {
  Tuned t = tune(c, f, a, p, nranks, true);
  if (!(t.bw > 0)) return -1;
  const int logSize = log2i(bytes >> 6);
  if (a == kTree && f == kFuncAllReduce && logSize >= 0 && logSize < 23) t.bw *= kTreeCorrection[p][logSize];
  if (a == kRing && p == kSimple && c.sys.nodes > 1 && f == kFuncAllReduce &&
      bytes / static_cast<std::size_t>(c.nChannels * nranks) >= kRingPlateauBytes) {
    t.lat *= c.sys.arch >= GpuArch::Ampere ? kRingPlateauFactor : kRingPlateauFactorPreAmpere;
  }
  return t.lat + static_cast<double>(bytes) / (kBytesPerUsPerGBps * t.bw);
}

bool enabled(const NcclComm& c, const NcclEnv& env, int f, int a, int p) {
  const auto fi = static_cast<std::size_t>(f);
  if (env.algoEnabled[fi][static_cast<std::size_t>(a)] == 0) return false;
  const int pe = env.protoEnabled[fi][static_cast<std::size_t>(p)];
  if (pe == 0) return false;
  if (pe == 2 && p == kLL128) return ll128Default(c, a);
  return true;
}

/// tuning.cc getNthreads.
int envThreads(int env, int min, int max, int def) {
  if (env <= 0) return def;
  if (env % kWarp != 0 || env > max) return max;
  return std::max(env, min);
}

int maxThreadsOf(const NcclComm& c, const NcclEnv& env, int a, int p) {
  if (p == kLL) return envThreads(env.nThreads, 2 * kWarp, kLLMaxThreads, kLLMaxThreads);
  if (p == kLL128) return kLL128MaxThreads;  // NCCL_LL128_NTHREADS, not modelled
  if (a == kRing) {
    const NcclGraph& g = c.graphs[kRing];
    const int def = g.bwIntra * g.nChannels <= kNcclPciBw ? kSimplePciThreads : kSimpleMaxThreads;
    return envThreads(env.nThreads, 2 * kWarp, kSimpleMaxThreads, def);
  }
  if (a == kTree) return envThreads(env.nThreads, 2 * kWarp, kSimpleMaxThreads, kSimpleMaxThreads);
  return kMaxThreads;
}

long thresholdOf(int a, int p, int nranks) {
  if (a == kCollNetDirect || a == kCollNetChain) return p == kSimple ? kCollNetThreshold : kSimpleThreshold;
  const long t = p == kLL ? kLLThreshold : p == kLL128 ? kLL128Threshold : kSimpleThreshold;
  return a == kRing && p == kLL ? t * nranks : t;
}

/// enqueue.cc topoGetAlgoInfo: channels and threads for the chosen algorithm and protocol.
void channelsAndThreads(const NcclComm& c, const NcclEnv& env, int a, int p, std::size_t bytes, int nranks, int& nc,
                        int& nt) {
  const auto nb = static_cast<long double>(bytes);
  nc = c.nChannels;
  nt = maxThreadsOf(c, env, a, p);
  long thr = thresholdOf(a, p, nranks);
  if (a == kCollNetDirect) {
    const int heads = c.graphs[kCollNetDirect].nChannels;
    bool more = true;
    for (int ncSwitch = 16; ncSwitch >= 1 && more; ncSwitch /= 2) {
      while ((more = nb < static_cast<long double>(nc) * nt * heads * thr) && nc > ncSwitch) {
        if (nc == ncSwitch + ncSwitch / 2) thr /= 2;
        --nc;
      }
    }
  } else if (a == kNvls || a == kNvlsTree) {
    nc = c.sys.nodes > 1 && a == kNvls ? std::min(c.nvlsChannels, c.nChannels) : c.nvlsChannels;
  } else {
    while (nb < static_cast<long double>(nc) * nt * thr && nc >= 2) --nc;
  }
  if (a != kNvls && a != kNvlsTree && a != kCollNetDirect) {
    while (nb < static_cast<long double>(nc) * nt * thr && nt % 128 == 0) nt /= 2;
  }
  if (p == kSimple && a == kRing) nt += kWarp;      // extra warp for sync
  if (p == kSimple && a == kTree) nt += 4 * kWarp;  // split thread model
  if (nt / kWarp < 3) nt = 3 * kWarp;
  if (a == kTree || a == kPat) nt = kMaxThreads;
}

/// enqueue.cc calcCollChunking: the chunk (data bytes per channel and step) and slice.
void chunking(const NcclComm& c, const NcclEnv& env, int f, int a, int p, std::size_t bytes, int nc, std::size_t& chunk,
              std::size_t& slice) {
  const std::size_t buff = p == kLL ? kLLBuffBytes : p == kLL128 ? kLL128BuffBytes : env.buffSize;
  const std::size_t step = buff / kSteps;
  const bool ringSimple = p == kSimple && a == kRing;
  const int chunkSteps = ringSimple && f != kFuncBroadcast && f != kFuncReduce ? kChunkSteps : 1;
  const int sliceSteps = ringSimple && f != kFuncBroadcast && f != kFuncReduce ? kSliceSteps : 1;
  chunk = step * static_cast<std::size_t>(chunkSteps);
  if (p == kLL) chunk /= 2;
  if (p == kLL128) chunk = chunk / kLL128LineBytes * kLL128LineDataBytes;
  const auto ops = static_cast<std::size_t>(nc) * static_cast<std::size_t>(c.graphs[kNvls].nChannels);
  if (a == kNvls) {
    chunk = std::min(chunk, env.nvlsChunkSize);
    for (auto [times, size] : {std::pair<std::size_t, std::size_t>{64, 65536}, {8, 32768}, {2, 16384}}) {
      if (bytes < times * ops * chunk && chunk > size) chunk = size;
    }
  } else if (a == kNvlsTree) {
    const std::size_t cap = env.nvlsTreeMaxChunkSize > 0 ? env.nvlsTreeMaxChunkSize
                            : c.sys.nodes >= 4           ? kNvlsTreeManyNodesChunkBytes
                                                         : env.nvlsChunkSize;
    chunk = std::min(env.nvlsChunkSize, cap);
    for (auto [times, size] : {std::pair<std::size_t, std::size_t>{32, 262144}, {16, 131072}, {4, 65536}, {1, 32768}}) {
      if (bytes < times * ops * chunk && chunk > size) chunk = size;
    }
  } else if (a == kTree && p == kLL128) {
    // Tree LL128 halves its chunk down to 128 KiB while a channel gets fewer than nsteps x 64 / ppn chunks, then down
    // to 32 KiB below nsteps x 16 / ppn, nsteps = 1 + log2(nodes) + 0.1 ppn.
    const double ppn = c.sys.gpusPerNode;
    const double nsteps = 1 + log2i(static_cast<std::size_t>(c.sys.nodes)) + kTreeLL128StepsPerRank * ppn;
    const auto perChannelChunks = [&] {  // whole chunks per channel
      return std::floor(static_cast<double>(bytes) / static_cast<double>(static_cast<std::size_t>(nc) * chunk));
    };
    while (perChannelChunks() < nsteps * kTreeLL128ManyChunks / ppn && chunk > kTreeLL128MidChunkBytes) chunk /= 2;
    while (perChannelChunks() < nsteps * kTreeLL128FewChunks / ppn && chunk > kTreeLL128MinChunkBytes) chunk /= 2;
  }
  slice = ringSimple ? step * static_cast<std::size_t>(sliceSteps) : chunk;
}

}  // namespace

// ---- The time model ------------------------------------------------------------------------------------------------

namespace {

/// busbw (GB/s, nccl-tests' convention) the hardware sustains for algorithm `a` and protocol `p` at large sizes.
double bottleneckBusBw(const NcclSystem& s, int f, int a, int p, int nranks) {
  const int nodes = s.nodes, ppn = s.gpusPerNode;
  const double busFactor = busBandwidthFactor(collectiveOf(f), nranks);
  const double link = s.nvlink ? s.nvlinkGBps : kNcclPciBw;
  const double intraBus = link * s.model.nvlinkFraction[static_cast<std::size_t>(archIndex(s.arch))];
  const double net = s.nicsPerNode * s.nicGBps * s.model.netFraction[static_cast<std::size_t>(s.nicKind)];
  // NVLS all-reduce moves S(1 + 1/ppn) through each GPU's links each way; gathers and scatters S(ppn-1)/ppn.
  const double nvlsAlg = link * s.model.nvlsFraction / (f == kFuncAllReduce ? 1.0 + 1.0 / ppn : 1.0);
  // Per node and direction the network carries S for a 2-node tree or in-network reduction, 2S for deeper trees.
  const double treeNetAlg = nodes <= 2 ? net : net / 2;
  double bus = 0;
  switch (a) {
    case kRing:
    case kPat:
      bus = nodes > 1 ? std::min(intraBus, net) : intraBus;
      break;
    case kTree:
      bus = nodes > 1 ? std::min(intraBus, treeNetAlg * busFactor) : intraBus;
      break;
    case kNvls:
      bus = nodes > 1 ? std::min(nvlsAlg, net) * busFactor : (f == kFuncAllReduce ? nvlsAlg * busFactor : nvlsAlg);
      break;
    case kNvlsTree:
      bus = std::min(nvlsAlg * s.model.nvlsTreeFraction, treeNetAlg) * busFactor;
      break;
    case kCollNetDirect:
    case kCollNetChain:
      bus = std::min(intraBus / busFactor, net) * busFactor;
      break;
    default:
      break;
  }
  bus *= kProtoPayload[p];
  if (p == kLL) bus = std::min(bus, llMaxBw(s));
  return bus;
}

/// Bandwidth one channel of the algorithm reaches (busbw, GB/s): NCCL's per-channel graph bandwidth through the
/// refinements tune() applies to the algorithm and protocol, per channel (the search's speed is what one channel's
/// SMs sustain), comm channels sharing search ones.
double perChannelBusBw(const NcclComm& c, int a, int p) {
  const NcclGraph& g = c.graphs[static_cast<std::size_t>(a)];
  const NcclSystem& s = c.sys;
  const int arch = archIndex(s.arch), idx2 = nodeIndex(s.nodes);
  double bw = s.nodes <= 2 ? g.bwIntra : g.bwInter;
  if (a == kRing || a == kPat) bw *= static_cast<double>(g.nChannels) / c.defaultChannels;
  if (a == kTree) {
    bw = std::min(bw * kTreeFactor, kPerChTree[arch][idx2]);
    if (p == kLL) bw *= kTreeLLFactor;
    if (p == kLL128) {
      bw = std::min(bw * (s.nodes == 1 ? kTreeLL128FactorN1 : kTreeLL128FactorNet), kPerChTreeLL128[arch][idx2]);
    }
    // From 3 nodes a tree channel runs at the network's rate per search channel (bwInter), capped per search channel
    // (tuning.cc sums the caps over graph->nChannels); the communicator's duplicated channels share it, as rings share
    // theirs. On 2 nodes NCCL rates trees by the NVLink side (bwIntra), which the fits of the 2-node tables hold.
    if (s.nodes > 2) bw *= static_cast<double>(g.nChannels) / c.defaultChannels;
    return bw;
  }
  if (p == kLL) bw *= kRingLLFactor * s.model.ringLLChannelRate[static_cast<std::size_t>(arch)];
  if (p == kLL128) bw = std::min(bw * kRingLL128Factor, kPerChRingLL128[arch][idx2]);
  return bw;
}

double predict(const NcclComm& c, int f, int a, int p, std::size_t bytes, int nranks, int nc, std::size_t chunk) {
  const NcclSystem& s = c.sys;
  // One rank: NCCL's ring Simple launch, a local copy.
  if (nranks == 1)
    return kBaseLatUs[kRing][kSimple] + s.model.launchExtraUs[static_cast<std::size_t>(archIndex(s.arch))];
  Tuned t = tune(c, f, a, p, nranks, false);
  if (!(t.bw > 0)) return -1;
  // Latency: NCCL's per-step model, with each network hop's extra latency and the arch's launch floor.
  const auto arch = static_cast<std::size_t>(archIndex(s.arch));
  const int gpusPerThread = std::max(1, s.gpusPerThread);
  double lat = t.lat + s.model.launchExtraUs[arch] + (gpusPerThread - 1) * s.model.launchStaggerUs[arch];
  // The network hops a call's data crosses one after another.
  const int netHops = s.nodes <= 1 ? 0
                      : a == kRing ? (f == kFuncAllReduce ? 2 * (s.nodes - 1) : s.nodes - 1)
                      : a == kPat  ? log2i(static_cast<std::size_t>(s.nodes))
                      : a == kNvls || a == kCollNetDirect || a == kCollNetChain
                          ? 1
                          : 2 * log2i(static_cast<std::size_t>(s.nodes));
  if (s.nodes > 1) {
    lat += netHops * s.model.netHopExtraUs[static_cast<std::size_t>(s.nicKind)];
    // LL over the network: a proxy thread progresses its channels one action at a time (proxy.cc progressOps,
    // transport/net.cc sendProxyProgress: it checks every flag of a channel's host-memory LL step, then isends it), so
    // the channels' steps leave one after another, netChannelUs apart. The queue is paid once per call, not per hop:
    // the proxies of the next node forward channel i while this node's still sends channel i + 1 (a tandem pipeline).
    if (p == kLL) lat += (nc - 1) * s.model.netChannelUs[static_cast<std::size_t>(s.nicKind)];
  }
  const Collective coll = collectiveOf(f);
  const double busBytes = static_cast<double>(bytes) * busBandwidthFactor(coll, nranks);
  double bw = bottleneckBusBw(s, f, a, p, nranks);
  if (a != kNvls && a != kNvlsTree) bw = std::min(bw, nc * perChannelBusBw(c, a, p));
  // Fewer NVLS channels than NCCL's default (NCCL_MAX_CTAS, NCCL_NVLS_NCHANNELS, a tuner's count) carry that share of
  // the peak.
  if (a == kNvls || a == kNvlsTree) bw *= std::min(1.0, static_cast<double>(nc) / nvlsDefaultChannels(s));
  bw *= s.model.protocolRate[static_cast<std::size_t>(archIndex(s.arch))][static_cast<std::size_t>(p)];
  // tuning.cc: trees run below their model at medium sizes; NCCL's own correction factor applies to the hardware too.
  const int logSize = log2i(bytes >> 6);
  if (a == kTree && f == kFuncAllReduce && logSize >= 0 && logSize < 23) bw *= kTreeCorrection[p][logSize];
  // NVLS pipeline fill and drain: `depth` chunk times of one channel (rings need none: all their links work at once).
  // NVLS and NVLSTree give each of a channel's heads one chunk per loop (all_reduce.h), so a call smaller than one loop
  // streams pieces of a head's share.
  const int heads = std::max(1, c.graphs[kNvls].nChannels);
  const double chunkBytes = std::min(static_cast<double>(chunk), static_cast<double>(bytes) / nc);
  const double perChannelAlgBw = bw / busBandwidthFactor(coll, nranks) / nc;
  double fillUs = 0;
  if ((a == kNvls || a == kNvlsTree) && chunk > 0) {
    const double headChunk = std::min(static_cast<double>(chunk), static_cast<double>(bytes) / nc / heads);
    fillUs = s.model.nvlsPipelineDepth * headChunk / (kBytesPerUsPerGBps * perChannelAlgBw);
    // NVLSTree's inter-node tree: every level beyond the one of 2 nodes stores and forwards a chunk up and again down.
    if (a == kNvlsTree && s.nodes > 2) {
      const int extraHops = 2 * (log2i(static_cast<std::size_t>(s.nodes)) - 1);
      fillUs += extraHops * headChunk / (kBytesPerUsPerGBps * perChannelAlgBw);
    }
  }
  // A ring Simple step over P2P read (NVLink between Ampere GPUs: paths.cc) fills its pipeline with slices that each
  // cross a hop at the channel's share of the NVLink rate (a call below one loop slices its per-rank share in two).
  if (a == kRing && p == kSimple && chunk > 0 && s.nvlink && s.gpusPerNode > 1) {
    const double piece = std::min(static_cast<double>(chunk), static_cast<double>(bytes) / nc / nranks);
    const double slice = piece * kSliceSteps / kChunkSteps;
    const double channelGBps = s.nvlinkGBps * s.model.nvlinkFraction[arch] / nc;
    fillUs += s.model.p2pReadFillSlices[arch] * slice / (kBytesPerUsPerGBps * channelGBps);
  }
  // The network side: what one connection carries, and in how many messages.
  // - Each network connection of a channel holds NCCL_STEPS messages (device.h; transport/net.cc posts a receive per
  //   free slot), and a slot comes back one round trip after its message left: two network steps, NCCL's and the
  //   hop's extra. In the chain of such hops a call's data crosses, every message after the first leaves 1 / NCCL_STEPS
  //   of a round trip after the one before. This binds where messages are small against a connection's bytes on a
  //   slow network: tree LL128's 18-72 KB chunks on EFA. EFA sends messages of up to kEfaEagerBytes without waiting
  //   for the receiver, so a ring's tiny steps there are not paced.
  // - One proxy thread per GPU posts and completes every message of the GPU's network connections, one after another
  //   (proxy.cc progressOps, transport/net.cc), netMessageUs each, and tests each one on every pass while it is on the
  //   wire (netMessageWireShare of its time on the GPU's NICs). This binds where a GPU has many messages: a ring's
  //   per-step pieces, NVLSTree's per-head chunks over 4 or more nodes or on EFA.
  double windowUs = 0, proxyUs = 0;
  if (s.nodes > 1 && chunk > 0 && (a == kRing || a == kTree || a == kNvlsTree)) {
    const double perChannel = static_cast<double>(bytes) / nc;
    // A ring edge carries the bus bytes, in pieces of at most one step; a tree edge each byte once per direction;
    // NVLSTree splits a channel's bytes over its NVLS heads (one per GPU of the node), each head's own connection, in
    // chunks.
    const double carried = a == kRing       ? perChannel * busBandwidthFactor(coll, nranks)
                           : a == kNvlsTree ? perChannel / heads
                                            : perChannel;
    const double step = a == kRing && p == kSimple ? static_cast<double>(chunk) / kChunkSteps : chunkBytes;
    const double message = a == kNvlsTree ? std::min(static_cast<double>(chunk), carried)
                                          : std::min(step, a == kRing ? perChannel / nranks : perChannel);
    const auto kind = static_cast<std::size_t>(s.nicKind);
    // A message of GPU memory (Simple's and LL128's buffers; LL's sits in host memory) longer than one packet lands
    // only once the receiver has read it where the network reads such messages (netReadUs): the call's first message
    // pays it at every hop of its path, and every message holds its slot that much longer.
    const double readUs = p != kLL && message > kEfaEagerBytes ? s.model.netReadUs[kind] : 0;
    lat += netHops * readUs;
    const double roundTripUs = 2 * (netStepLatUs(c, a, p, nranks) + s.model.netHopExtraUs[kind]) + readUs;
    if (message > 0) {
      if (!(s.nicKind == NicKind::Efa || s.nicKind == NicKind::Efa2) || message > kEfaEagerBytes)
        windowUs = std::max(0.0, carried / message - 1) * roundTripUs / kSteps;
      // A GPU's connections, sending and receiving: a ring's or tree's channels cross the network at one GPU of a
      // node each (so a GPU serves channels / ppn of them); NVLSTree's at every GPU, each a head of every channel. A
      // tree node links to its parent and children: in NCCL's two binary trees over 3 or more nodes the busiest node is
      // inner in one (3 links) and a leaf in the other (1), 2 per channel on average; over 2 nodes 1.
      const int treeLinks = s.nodes <= 2 ? 1 : 2;
      const double channelsPerGpu = std::ceil(static_cast<double>(nc) / s.gpusPerNode);
      const double connections = a == kRing   ? 2 * channelsPerGpu
                                 : a == kTree ? 2 * treeLinks * channelsPerGpu
                                              : 2.0 * treeLinks * nc;
      const double gpuNicGBps = s.nicsPerNode * s.nicGBps / s.gpusPerNode;
      const double wireUs = gpuNicGBps > 0 ? message / (kBytesPerUsPerGBps * gpuNicGBps) : 0;
      const double perMessageUs = s.model.netMessageUs[kind] + s.model.netMessageWireShare[kind] * wireUs;
      proxyUs = perMessageUs * connections * std::ceil(carried / message);
    }
  }
  // A tree channel forwards each chunk hop by hop, up the inter-node tree (log2 nodes hops) and down again. The
  // network proxy sends a step only once the GPU has posted all of it (transport/net.cc: one message per step), so
  // every network hop is store-and-forward for every protocol; Simple also waits for whole chunks on the intra-node
  // chain (ppn - 1 hops each way), where LL and LL128 stream line by line. A chunk crosses a hop at the line rate of
  // the channel's share of the node's NICs or of the GPU's NVLinks.
  // LL's network steps are staged in host memory (transport/net.cc: the send buffer of LL sits there, and the proxy
  // checks every line's flags before it sends the step): the GPU writes the step over PCIe, the proxy reads it, and
  // only then does it leave. So a network hop also stores and forwards an LL step at llStagingGBps.
  if (a == kTree && f == kFuncAllReduce && chunk > 0) {
    const int intraHops = p == kSimple ? 2 * (s.gpusPerNode - 1) : 0;
    const double wireBytes = chunkBytes / kProtoPayload[p];
    const double netShare = s.nicsPerNode * s.nicGBps / nc, intraShare = (s.nvlink ? s.nvlinkGBps : kNcclPciBw) / nc;
    const double netHopGBps = p == kLL ? std::min(netShare, s.model.llStagingGBps) : netShare;
    if (netHops > 0 && netHopGBps > 0) fillUs += netHops * wireBytes / (kBytesPerUsPerGBps * netHopGBps);
    fillUs += intraHops * wireBytes / (kBytesPerUsPerGBps * intraShare);
  }
  // A ring's network hop stages each step of its pipeline, a channel's share of one rank's piece.
  if (a == kRing && p == kLL && netHops > 0 && chunk > 0) {
    const double piece = std::min(static_cast<double>(chunk), static_cast<double>(bytes) / nc / nranks);
    fillUs += netHops * piece / kProtoPayload[p] / (kBytesPerUsPerGBps * s.model.llStagingGBps);
  }
  // From 2.22 the host's work for a call grows with its channels (NcclModelParams::hostChannelUs); the floor of
  // hostGroupUs and hostLaunchUs is a one-channel call's.
  const double channelHostUs = c.version >= kNccl222 ? (nc - 1) * s.model.hostChannelUs : 0;
  const double hostPaceUs =
      (gpusPerThread > 1 ? s.model.hostGroupUs : 0) + gpusPerThread * (s.model.hostLaunchUs + channelHostUs);
  return std::max(lat + fillUs + std::max({busBytes / (kBytesPerUsPerGBps * bw), windowUs, proxyUs}), hostPaceUs);
}

}  // namespace

namespace {

/// enqueue.cc: a call runs on at most the communicator's channels of its kind (NVLS and NVLSTree: its NVLS channels).
int channelsOfKind(const NcclComm& c, int a) { return a == kNvls || a == kNvlsTree ? c.nvlsChannels : c.nChannels; }

}  // namespace

double ncclPredictUs(const NcclSystem& sys, Collective collective, std::size_t bytes, int nranks,
                     NcclAlgorithm algorithm, NcclProtocol protocol, int channels) {
  const int f = funcIndex(collective);
  const NcclEnv env = ncclEnvOnSystem(sys, NcclEnv{});
  const NcclComm c = buildComm(sys, nranks, env);
  const int a = ai(algorithm), p = pi(protocol);
  if (nranks > 1 && !offered(c, f, a, p, nranks)) return -1;
  const int cap = channelsOfKind(c, a);
  const int nc = std::max(1, cap > 0 ? std::min(channels, cap) : channels);
  std::size_t chunk = 0, slice = 0;
  chunking(c, env, f, a, p, bytes, nc, chunk, slice);
  return predict(c, f, a, p, bytes, nranks, nc, chunk);
}

namespace {

/// The candidate of (algorithm a, protocol p) in a choice's table (NCCL's order, protocols innermost).
const NcclCandidate& candidateAt(const NcclChoice& choice, int a, int p) {
  return choice.candidates[static_cast<std::size_t>(a) * kProtos + static_cast<std::size_t>(p)];
}

constexpr const char* kAwsOfiTunerName = "aws-ofi-nccl";
constexpr const char* kExampleTunerName = "NCCL example";

/// What a tuner plugin did to a call: the (algorithm, protocol) it gave cost 0, the channels it set (0: NCCL's), and
/// why, for the choice's reason.
struct TunerPick {
  std::string tuner;  ///< "" where no tuner applies
  std::optional<std::pair<NcclAlgorithm, NcclProtocol>> pair;
  int channels = 0;
  std::string why;
};

/// The tuner plugin NCCL loads (NcclEnv::tunerPlugin) and what it does to the call; both pass over pairs NCCL does not
/// offer or the environment turns off (NCCL marks them "ignore" in the cost table they see).
/// - aws-ofi-nccl's (a library name with "ofi" in it) on EFA with Hopper GPUs, p5 and p5e (its platform check reads
///   the instance type; the network kind and GPU generation stand for it here): aws_ofi_tuner.h.
/// - NCCL's example (ext-tuner/example/plugin.c): the first rule of its file that matches; it sets the call's channels
///   to 1 before matching and to the rule's where the rule gives them, so a rule's -1, or no rule at all, leaves 1
///   channel (NCCL takes any nonzero count from a tuner: enqueue.cc).
TunerPick tunerPick(const NcclComm& c, const NcclEnv& env, const NcclChoice& choice, Collective collective,
                    std::size_t bytes, int nranks) {
  // NCCL's cost table: a candidate it offers under the environment has an estimate.
  const auto available = [&](NcclAlgorithm a, NcclProtocol p) { return candidateAt(choice, ai(a), pi(p)).ncclUs >= 0; };
  TunerPick out;
  if (namesTuner(env.tunerPlugin, "ofi") && c.sys.nicKind == NicKind::Efa2 && c.sys.arch == GpuArch::Hopper) {
    out.pair = awsOfiP5TunerChoice(collective, bytes, nranks, c.sys.nodes, available);
    if (out.pair) out.tuner = kAwsOfiTunerName;
    out.why = fmt::format("{}'s p5 region tuner picks it at {} ranks", kAwsOfiTunerName, nranks);
  } else if (namesTuner(env.tunerPlugin, "example") && collective != Collective::Barrier) {
    const auto pairOf = [](const NcclTunerRule& r) {
      std::pair<NcclAlgorithm, NcclProtocol> p{};
      for (NcclAlgorithm a : kNcclAlgorithms)
        if (ncclTunerAlgorithmName(a) == r.algorithm) p.first = a;
      for (NcclProtocol q : kNcclProtocols)
        if (ncclTunerProtocolName(q) == r.protocol) p.second = q;
      return p;
    };
    const NcclTunerRule* rule =
        matchNcclTunerRule(env.tunerRules, collective, bytes, c.sys.nodes, nranks, [&](const NcclTunerRule& r) {
          const auto [a, p] = pairOf(r);
          return available(a, p);
        });
    out.tuner = kExampleTunerName;
    out.channels = rule != nullptr && rule->channels > 0 ? rule->channels : 1;
    if (rule != nullptr) {
      out.pair = pairOf(*rule);
      out.why = fmt::format("the {} tuner's rule for {}..{} B picks it{}", kExampleTunerName, rule->minBytes,
                            rule->maxBytes, rule->channels > 0 ? "" : ", on 1 channel (the rule gives none)");
    } else {
      out.why = fmt::format("no rule of the {} tuner matches, and it sets 1 channel all the same", kExampleTunerName);
    }
  }
  return out;
}

}  // namespace

NcclChoice ncclChoose(const NcclSystem& sys, Collective collective, std::size_t bytes, int nranks,
                      const NcclEnv& userEnv) {
  const NcclEnv env = ncclEnvOnSystem(sys, userEnv);
  const int f = funcIndex(collective);
  const NcclComm c = buildComm(sys, nranks, env);
  NcclChoice out;
  out.version = c.version;
  if (nranks == 1) {  // enqueue.cc: one rank is a copy (ring Simple, time 0)
    out.channels = 1;
    out.threads = kSimpleMaxThreads;
    out.predictedUs = predict(c, f, kRing, kSimple, bytes, 1, 1, 0);
    out.reason = "one rank: a local copy";
    return out;
  }
  double best = std::numeric_limits<double>::max();
  int bestA = -1, bestP = -1;
  for (int a = 0; a < kAlgos; ++a) {
    for (int p = 0; p < kProtos; ++p) {
      NcclCandidate cand{static_cast<NcclAlgorithm>(a), static_cast<NcclProtocol>(p), -1, -1};
      if (offered(c, f, a, p, nranks) && enabled(c, env, f, a, p)) {
        cand.ncclUs = algoTime(c, f, a, p, bytes, nranks);
        if (cand.ncclUs >= 0) {
          int nc = 0, nt = 0;
          channelsAndThreads(c, env, a, p, bytes, nranks, nc, nt);
          std::size_t chunk = 0, slice = 0;
          chunking(c, env, f, a, p, bytes, nc, chunk, slice);
          cand.predictedUs = predict(c, f, a, p, bytes, nranks, nc, chunk);
          if (cand.ncclUs < best) {
            best = cand.ncclUs;
            bestA = a;
            bestP = p;
          }
        }
      }
      out.candidates.push_back(cand);
    }
  }
  if (bestA < 0) {
    throw Error(Errc::Unsupported,
                fmt::format("no NCCL algorithm/protocol available for {} on {} ranks{}{}", toString(collective), nranks,
                            env.algo.empty() ? "" : fmt::format(" (NCCL_ALGO={})", printable(env.algo)),
                            env.proto.empty() ? "" : fmt::format(" (NCCL_PROTO={})", printable(env.proto))));
  }
  const int ownA = bestA, ownP = bestP;
  const TunerPick pick = tunerPick(c, env, out, collective, bytes, nranks);
  if (pick.pair) {
    bestA = ai(pick.pair->first);
    bestP = pi(pick.pair->second);
    best = candidateAt(out, bestA, bestP).ncclUs;
  }
  out.tuner = pick.pair || pick.channels > 0 ? pick.tuner : std::string();
  out.algorithm = static_cast<NcclAlgorithm>(bestA);
  out.protocol = static_cast<NcclProtocol>(bestP);
  channelsAndThreads(c, env, bestA, bestP, bytes, nranks, out.channels, out.threads);
  // A tuner's channel count replaces NCCL's, within the communicator's channels of the kind.
  if (pick.channels > 0) out.channels = std::min(pick.channels, channelsOfKind(c, bestA));
  chunking(c, env, f, bestA, bestP, bytes, out.channels, out.chunkBytes, out.sliceBytes);
  out.ncclUs = best;
  out.predictedUs = predict(c, f, bestA, bestP, bytes, nranks, out.channels, out.chunkBytes);
  // The runner-up names what the choice beat.
  double second = std::numeric_limits<double>::max();
  const NcclCandidate* runnerUp = nullptr;
  for (const NcclCandidate& cand : out.candidates) {
    if (cand.ncclUs >= 0 && cand.ncclUs < second && !(ai(cand.algorithm) == bestA && pi(cand.protocol) == bestP)) {
      second = cand.ncclUs;
      runnerUp = &cand;
    }
  }
  const std::string own = ownA == bestA && ownP == bestP
                              ? fmt::format(", as NCCL's estimate ({:.1f} us) would", best)
                              : fmt::format(" (NCCL's estimate {:.1f} us; its own pick {}/{} at {:.1f} us)", best,
                                            kAlgoNames[ownA], kProtoNames[ownP], candidateAt(out, ownA, ownP).ncclUs);
  const std::string why =
      !out.tuner.empty()
          ? pick.why +
                (pick.pair ? own : fmt::format("; the algorithm and protocol are NCCL's estimate's ({:.1f} us)", best))
          : fmt::format("NCCL's estimate {:.1f} us is the lowest{}", best,
                        runnerUp ? fmt::format(" (next {}/{} {:.1f} us)", toString(runnerUp->algorithm),
                                               toString(runnerUp->protocol), runnerUp->ncclUs)
                                 : std::string(" (the only candidate)"));
  out.reason = fmt::format("{}/{} on {} channel{}: {}{}{}", kAlgoNames[bestA], kProtoNames[bestP], out.channels,
                           out.channels == 1 ? "" : "s", why,
                           userEnv.algo.empty() ? "" : fmt::format("; NCCL_ALGO={}", userEnv.algo),
                           userEnv.proto.empty() ? "" : fmt::format("; NCCL_PROTO={}", userEnv.proto));
  std::string systemSet;
  for (const auto& [name, value] : systemOnlyVars(sys, userEnv)) {
    systemSet += fmt::format("{}{}={}", systemSet.empty() ? "" : " ", name, value);
  }
  if (!systemSet.empty()) out.reason += fmt::format("; the system sets {}", systemSet);
  return out;
}

std::size_t ncclTestsBytes(const CollectiveSpec& spec) { return std::max(spec.inputBytes(), spec.outputBytes()); }

NcclChoice ncclChoose(const NcclSystem& sys, const CollectiveSpec& spec, const NcclEnv& env) {
  return ncclChoose(sys, spec.kind, ncclTestsBytes(spec), spec.nranks, env);
}

std::string ncclChoiceSummary(const NcclChoice& choice) {
  const NcclCandidate* runnerUp = nullptr;
  for (const NcclCandidate& c : choice.candidates) {
    if (c.ncclUs < 0 || (c.algorithm == choice.algorithm && c.protocol == choice.protocol)) continue;
    if (runnerUp == nullptr || c.ncclUs < runnerUp->ncclUs) runnerUp = &c;
  }
  const std::string next =
      runnerUp == nullptr || !(choice.ncclUs > 0)
          ? std::string(choice.candidates.empty() ? "" : " (the only candidate)")
          : fmt::format(" (runner-up {}/{} +{:.0f}%)", toString(runnerUp->algorithm), toString(runnerUp->protocol),
                        (runnerUp->ncclUs / choice.ncclUs - 1) * 100);
  const std::string nccl = fmt::format("NCCL {}.{}", choice.version / 10000, choice.version / 100 % 100);
  if (!choice.tuner.empty()) {
    return fmt::format("{} under the {} tuner: {}/{}, {} channel{}", nccl, choice.tuner, toString(choice.algorithm),
                       toString(choice.protocol), choice.channels, choice.channels == 1 ? "" : "s");
  }
  return fmt::format("{}: {}/{}, {} channel{}{}", nccl, toString(choice.algorithm), toString(choice.protocol),
                     choice.channels, choice.channels == 1 ? "" : "s", next);
}

// ---- Constants for protocol timing elsewhere (the simulator) -------------------------------------------------------

double ncclBaseLatencyUs(NcclAlgorithm algorithm, NcclProtocol protocol) {
  return kBaseLatUs[ai(algorithm)][pi(protocol)];
}

double ncclStepLatencyUs(NcclPath path, NcclAlgorithm algorithm, NcclProtocol protocol) {
  const int hw = path == NcclPath::Nvl ? kHwNvlink : path == NcclPath::Net ? kHwNet : kHwPci;
  return kHwLatUs[hw][ai(algorithm)][pi(protocol)];
}

double ncclProtocolEfficiency(NcclProtocol protocol) { return kProtoPayload[pi(protocol)]; }

}  // namespace collbench
