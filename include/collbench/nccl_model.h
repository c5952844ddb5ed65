#pragma once
/// NCCL 2.28's choice for a collective call (algorithm x protocol x channels x threads), emulated from its source
/// (src/graph/search.cc, src/graph/tuning.cc, src/enqueue.cc, src/init.cc of NVIDIA/nccl v2.28.9-1), NCCL's own time
/// estimate of every candidate, and a time model of what the call really takes on the machine (ncclPredictUs).
///
/// Typical use:
///   NcclSystem sys = ncclSystemOf(loadTopology("dgx-h100-8x1"), 8);
///   NcclEnv env = ncclEnvFromProcess();                 // or parseNcclEnv({{"NCCL_ALGO", "^nvls"}})
///   NcclChoice c = ncclChoose(sys, Collective::AllReduce, 1 << 20, 8, env);
///   use(c.algorithm, c.protocol, c.channels, c.predictedUs, c.reason);
#include <array>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/topology.h"
#include "collbench/types.h"

namespace collbench {

/// GPU generations NCCL tunes for (its compCapIndex): sm70, sm80, sm90, sm100.
enum class GpuArch { Volta, Ampere, Hopper, Blackwell };
/// NCCL's algorithms, in NCCL's order (NCCL_ALGO_TREE = 0 ... NCCL_ALGO_PAT = 6).
enum class NcclAlgorithm { Tree, Ring, CollNetDirect, CollNetChain, Nvls, NvlsTree, Pat };
/// NCCL's protocols, in NCCL's order (NCCL_PROTO_LL = 0, LL128, SIMPLE).
enum class NcclProtocol { LL, LL128, Simple };
/// NCCL's path types between a GPU and a peer (src/graph/topo.h), best first: NVLink, NVLink through a GPU, C2C,
/// one PCIe switch, several PCIe switches, C2C + PCIe, through another GPU (PXN), through the host bridge, across
/// CPU sockets, network.
enum class NcclPath { Nvl = 1, Nvb, C2c, Pix, Pxb, P2c, Pxn, Phb, Sys, Net };
/// Network kinds the time model tells apart (their per-hop latency and achievable fraction of line rate differ):
/// InfiniBand, RoCE, AWS EFA (v1: p4d/p4de; v2: p5), GCP GPUDirect-TCPXO (A3 Mega).
enum class NicKind { InfiniBand, Roce, Efa, Efa2, Tcpxo };
inline constexpr NicKind kNicKinds[] = {NicKind::InfiniBand, NicKind::Roce, NicKind::Efa, NicKind::Efa2,
                                        NicKind::Tcpxo};
/// The host CPU's maker as NCCL's tuning reads it (comm->cpuVendor): AMD's hosts get a lower LL bandwidth cap and a
/// larger per-step network overhead across nodes (tuning.cc llMaxBws, getNetOverhead).
enum class CpuVendor { Intel, Amd };

inline constexpr NcclAlgorithm kNcclAlgorithms[] = {
    NcclAlgorithm::Tree,         NcclAlgorithm::Ring, NcclAlgorithm::CollNetDirect,
    NcclAlgorithm::CollNetChain, NcclAlgorithm::Nvls, NcclAlgorithm::NvlsTree,
    NcclAlgorithm::Pat};
inline constexpr NcclProtocol kNcclProtocols[] = {NcclProtocol::LL, NcclProtocol::LL128, NcclProtocol::Simple};

/// NCCL's spellings (NCCL_ALGO / NCCL_PROTO): "Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree",
/// "PAT"; "LL", "LL128", "Simple". Parsing is case-insensitive and throws Error{InvalidArgument} naming the value.
std::string_view toString(NcclAlgorithm a);
std::string_view toString(NcclProtocol p);
std::string_view toString(GpuArch a);
std::string_view toString(NicKind k);
NcclAlgorithm parseNcclAlgorithm(std::string_view s);
NcclProtocol parseNcclProtocol(std::string_view s);
/// "volta", "ampere", "hopper", "blackwell" (also "v100", "a100", "h100", "h200", "b200", "sm80" ...).
GpuArch parseGpuArch(std::string_view s);

/// The largest message EFA sends without waiting for the receiver: aws-ofi-nccl's RDMA protocol sends up to
/// OFI_NCCL_EAGER_MAX_SIZE (8192, nccl_ofi_param.h) eagerly, before the receiver's control message; under its SENDRECV
/// protocol libfabric's EFA provider sends a message of GPU memory that fits one packet (the MTU, about 8 KiB: fi_efa)
/// eagerly and reads longer ones once the receiver has matched them. IB's isend waits for the receiver's posted
/// buffer whatever the size (NCCL transport/net_ib.cc).
inline constexpr double kEfaEagerBytes = 8192;

/// The time model's open parameters: what NCCL's sources and the datasheets leave open (achievable fractions of line
/// rate, latency floors), fitted on the nccl-tests tables of tests/data/realdata/ (the defaults below) or for one
/// system by `collbench calibrate --model nccl` (nccl_calibration.h). Entries differ per GPU generation (indexed by
/// GpuArch) or per network (indexed by NicKind). Only ncclPredictUs and NcclChoice::predictedUs read them (and the wire
/// rule, collbench/wire_rule.h, the defaults' netHopExtraUs for collbench's schedules): NCCL's own estimate, hence its
/// choice, does not depend on them.
struct NcclModelParams {
  /// Fraction of the datasheet NVLink rate a ring/tree reaches in busbw. NVLink3: 8xA100 235 GB/s of 300 (0.78; Volta
  /// assumed alike). NVLink4: 2x8 H100 IB ring 392.7 GB/s of 450 needs at least 0.87 (the one-node ring, 368.8 GB/s,
  /// is held lower by the search's 24 x 15 GB/s channels; Blackwell assumed alike).
  std::array<double, 4> nvlinkFraction = {0.78, 0.78, 0.87, 0.87};
  /// Fraction of the NVLink rate NVLS reaches (per-GPU traffic S(1 + 1/n) each way): 8xH100 480 GB/s busbw
  /// = 450 x f x 2(n-1)/(n+1) -> f = 0.686.
  double nvlsFraction = 0.686;
  /// NVLSTree's intra-node stage runs below NVLS alone (network proxy traffic shares the GPUs' memory and SMs): 2x8
  /// H100 IB 469 GB/s and EFA 487 GB/s busbw against 514 from nvlsFraction.
  double nvlsTreeFraction = 0.93;
  /// Per NIC kind: achievable fraction of the line rate (IB ring 392.7 of 400 GB/s on 2x8 H100; EFA tree 78.3 busbw
  /// on 2x8 A100 p4de = 50 GB/s x f x 1.875; EFA2: p5 at 4-16 nodes reaches 355-357 busbw at 8 GiB of 400 GB/s per
  /// node, 0.89 as a ring and 0.92 as NVLSTree (crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv,
  /// ml.p5.48xlarge; 2-node p5 runs are NVLink-bound); TCPXO: 2x8 A3 Mega tree Simple at 256 MiB .. 8 GiB; RoCE an
  /// estimate).
  std::array<double, 5> netFraction = {0.98, 0.95, 0.835, 0.905, 0.91};
  /// Per NIC kind: extra latency of one network hop beyond NCCL's NET hwLatency, from the median of the 8 B .. 1 KiB
  /// rows on 2 nodes (2 network hops on top of NCCL's estimate without the plugin's latency, the arch's launch extra
  /// and the proxy's two messages, netMessageUs): IB 0 (2x8 H100 IB: tree LL 25 us), EFA2 20.9 (p5: tree LL 72 us), EFA
  /// 31.0 (p4de: tree Simple, the only protocol aws-ofi-nccl leaves there, 161.7 us), TCPXO 15.1 (2x8 A3 Mega: tree
  /// Simple under Google's profile, 123.4 us), RoCE 2.8 (2x8 A100 40 GB on OCI's RoCE, SR-IOV functions in Kubernetes
  /// pods: tree LL 39.1 us).
  std::array<double, 5> netHopExtraUs = {0.0, 2.8, 31.0, 20.9, 15.1};
  /// Per NIC kind: what a network message of GPU memory longer than one packet waits for the receiver to read it.
  /// Under aws-ofi-nccl's SENDRECV protocol (EFA on p4d and p4de) libfabric's EFA provider sends such a message of CUDA
  /// memory by a read-based protocol (efa_hmem.c: eager only up to the MTU less the header, no medium protocol for
  /// CUDA; runting or long read above): the sender's request, then the receiver's RDMA read of the rest, an extra
  /// round trip per hop. EFA 20 us: the three 2-node p4d/p4de tables (awsome, DLAMI 2025, ParallelCluster workshop)
  /// all step up 45-60 us from 8 KiB to 32 KiB, where tree Simple's per-channel message outgrows the packet, and stay
  /// there to 256 KiB (64 KiB-16 MiB medians 10.8/25.9/10.0 -> 6.4/11.9/5.8%; 12 and 24 us read worse overall). Others
  /// write into the receiver's posted buffer (IB, RoCE; EFA2: aws-ofi-nccl's RDMA protocol on p5) or send a stream
  /// (TCPXO): 0.
  std::array<double, 5> netReadUs = {0.0, 0.0, 20.0, 0.0, 0.0};
  /// Per NIC kind: the network proxy's serial cost per LL channel of a call. LL's send buffer sits in host memory
  /// (transport/net.cc) and a proxy thread checks every flag of a channel's step, then sends it, one channel after
  /// another (proxy.cc progressOps); the queue is paid once per call (later hops forward earlier channels while it
  /// drains). Slope of the 2-node tree LL rows where NCCL doubles the channels (4 KiB .. 64 KiB): 2x8 H100 p5
  /// 79 -> 135 us from 1 to 16 channels (EFA2 3.8; EFA, where aws-ofi-nccl turns LL off unless NCCL_PROTO asks for
  /// it, assumed alike), 2x8 H100 IB 30 -> 34 us from 1 to 16, within the rows' noise (IB 0; RoCE and TCPXO, whose
  /// profile turns LL off, assumed alike).
  std::array<double, 5> netChannelUs = {0.0, 0.0, 3.8, 3.8, 0.0};
  /// The rate at which an LL step is staged in host memory before a network hop sends it: the GPU writes its lines
  /// over PCIe, the proxy checks each line's flags (transport/net.cc sendProxyProgress), then sends the whole step, so
  /// each network hop a call crosses stores and forwards a step at this rate. Fitted, 6 GB/s: the 2-node and 4-node
  /// tree LL rows of 512 B .. 64 KiB (1 to 16 channels of at most 4 KiB each) run 3-18 us above the model without it
  /// on 2 x 8 H100 IB (nccl-tests issue 309), 4 x 8 H100 IB (issue 309, Voltage Park) and 2 x 8 A100 RoCE (OKE); on
  /// the p5 tables it reads as well as without. It also lifts the 128 KiB rows (8 KiB per channel), which the model
  /// met before (2 x 8 IB +0.9 -> +11.6%, the 4-node ones +6..+12 -> +20..+27%): 5 GB/s lifts them further, 10 helps
  /// the small rows half as much.
  double llStagingGBps = 6.0;
  /// Per NIC kind: what a GPU's network proxy (one thread for all the GPU's connections, proxy.cc) spends on each
  /// message: netMessageUs to post and complete it, and netMessageWireShare of its time on the GPU's NICs, testing it
  /// on every pass while it is in flight (transport/net.cc). EFA2 2.47 us: 8 x p5 all-reducing 4 GiB by NVLSTree in
  /// 64 KiB chunks took 81 ms (NVIDIA/nccl #1112, NCCL 2.19.3; 30 ms in 512 KiB chunks), 32768 messages per GPU; no
  /// share known. EFA (p4d, p4de: aws-ofi-nccl's SENDRECV protocol, not p5's RDMA one) 0: their three 2-node tables
  /// read best without. IB 0.44 us and 0.27, the one line through two regimes on 50 GB/s per GPU: the forced
  /// 24-channel ring over 2 x 8 H100 runs a flat 157-178 us at 1-8 MiB (Ring/LL128 in 3-20 KB pieces, 180 messages
  /// per GPU: 0.5 us each), and four IB clusters of 4-10 x 8 H100 reach 316-335 GB/s busbw by NVLSTree in 64 KiB
  /// chunks (0.8 us each; nccl-tests issue 309, Voltage Park, a 10-node cluster). No source gives the share; as a share
  /// of wire time it scales with the NICs' rate. RoCE and TCPXO assumed like IB.
  std::array<double, 5> netMessageUs = {0.44, 0.44, 0.0, 2.47, 0.44};
  std::array<double, 5> netMessageWireShare = {0.27, 0.27, 0.0, 0.0, 0.27};
  /// Per arch: the per-call floor above NCCL's base latency, one process per GPU: 8xA100 SXM4 80 GB (-g 1, an HGX
  /// A100 host's published nccl-tests notes) 23.0 us median at 8 B .. 1 KiB against NCCL's 15.7 us ring LL estimate
  /// (Volta assumed alike); Hopper tables match NCCL's estimate without it (8xH100 DGX, 8xH100 p5).
  std::array<double, 4> launchExtraUs = {7.3, 7.3, 0.0, 0.0};
  /// What the host needs to issue one call, which paces back-to-back calls when the GPUs finish sooner: nccl-tests
  /// times `iters` calls issued without waiting (src/common.cu), and with -g N one thread issues each as
  /// ncclGroupStart, one ncclAllReduce per GPU, ncclGroupEnd, whose launch prepares and launches the GPUs' kernels one
  /// after another (group.cc doLaunches). A call on one channel takes at least hostGroupUs (-g N > 1 only) + N x
  /// hostLaunchUs (hostChannelUs adds the further channels' share). Fitted on the published single-node tables'
  /// 8 B .. 16 KiB rows, which stay flat where NCCL's estimate rises: -g 8 33.2 us (8xH100, NCCL 2.24.3), 35.0
  /// (8xH100, 2.26.2, two runs), 35-36.5 (8xA100, 2.19.3), 39.5 (8xA100), 32.0 (8xA100, Oracle's); -g 4 23.3 (4 of 8
  /// H100, 2.29.2); -g 2 12.2-15.8 (2 of 8 H100) -> 9 + 3.25 N (35 at -g 8, 22 at -g 4).
  /// One process per GPU issues a call in hostLaunchUs, below every GPU's time.
  double hostGroupUs = 9.0;
  double hostLaunchUs = 3.25;
  /// What each channel of a call beyond the first adds to the host's issue of it, per GPU, from NCCL 2.22 on. From
  /// 2.22 the host builds one work item for a call and a batch entry per channel, which its launch passes on
  /// (enqueue.cc addWorkBatchToPlan, ncclDevWorkColl). Fitted on the -g N tables of 2.22 and later, whose host-paced
  /// rows rise as NCCL adds channels (1 to 24, 8 KiB .. 1 MiB) while the GPUs' own time stays below the pace:
  /// 8 x H100 -g 8, 0.03 us (NCCL 2.24.3, Voltage Park; 2.26.2, NVLS on) and 0.05 (2.26.2, ring forced); 4 of 8 H100
  /// -g 4, 0.05 (2.29.2) -> 0.04. Before 2.22 NCCL built and uploaded a 512-byte work item per channel (enqueue.cc
  /// appendWorkElemColl, uploadWork), but the two older tables disagree on its cost (8 x A100 -g 8 on NCCL 2.19.3:
  /// 0.17 us; 8 x H200 -g 8 on 2.20.5 runs 16 channels at 30.5 us, below the one-channel floor), so none there.
  double hostChannelUs = 0.04;
  /// Per arch: what each GPU of a launching thread after the first adds to the call (nccl-tests -g N), beyond the
  /// host's pace. Ampere: one host's -g 8 runs 1.07-1.27x its -g 1 times from 2 MiB to 512 MiB (the HGX A100 host's
  /// notes), and three -g 8 tables agree; no mechanism found, so the model's stand-in is a per-GPU stagger, 1.5 us
  /// from Oracle's -g 8 table and that host (Volta assumed alike). Hopper: -g 8 runs as -g 1 from 2 MiB up (8xH100
  /// Voltage Park -g 8 against DGX Cloud and p5 -g 1: within 2% at 2 MiB .. 256 MiB), so none (Blackwell alike).
  std::array<double, 4> launchStaggerUs = {1.5, 1.5, 0.0, 0.0};
  /// NVLS streams each channel's data in chunks (calcCollChunking's 16..128 KiB) through a pipeline whose fill and
  /// drain cost `depth` chunk times: 8xH100 runs ~100 us above bytes/peak from 128 MiB to 1 GiB (128 KiB chunks at 17
  /// GB/s per channel -> 13 stages). NVLSTree shares it (2x8 H100 IB: the same ~100-160 us above bytes/peak), and over
  /// more than 2 nodes adds a stage per level of its inter-node tree beyond the first, each way (its network hops store
  /// and forward a chunk, as Tree's: no fit; 4-10 node IB tables' NVLSTree rows 1-3 points closer).
  double nvlsPipelineDepth = 13;
  /// Per arch: the pipeline fill, in slices, of a ring Simple call whose NVLink hops use P2P read. NCCL reads over
  /// NVLink only between Ampere GPUs (paths.cc ncclTopoCheckP2p; transport/p2p.cc keeps the Simple buffer on the
  /// sender, and the receiver pulls each slice once the sender has posted all of it). The 8xA100 `-g 1` tables run
  /// ring Simple 50-170 us above the model's bytes/peak from 64 MiB to 4 GiB, growing with the slice (up to 1 MiB) as
  /// 1.5 slice times at a channel's share of the NVLink rate (an HGX A100 host's notes, NCCL from pip; Azure ND A100
  /// v4: >16 MiB medians 5.3 -> 1.0% and 2.4 -> 0.5%). Hopper and Blackwell write (their ring tables fit without it);
  /// Volta writes.
  std::array<double, 4> p2pReadFillSlices = {0.0, 1.5, 0.0, 0.0};
  /// Per arch: scale of one ring LL channel's rate over NCCL's figure for it (its search channel's speed x LL's 0.5,
  /// shared by the communicator's duplicated channels). Below a few MiB NCCL runs fewer channels than the
  /// communicator has (enqueue.cc: channels follow the bytes per thread), and their LL stores do not fill the links;
  /// the call's total stays within the links' LL payload and NCCL's LL cap. The single-node tables' ring LL rows at
  /// 32 KiB-1 MiB, 1-16 channels, read best at 1.5 on both generations: 8xH100 DGX (64 KiB-16 MiB median 9.6 -> 2.9%),
  /// p5 one node (7.0 -> 3.8%), 8xA100 `-g 1` (8.6 -> 8.3%) and Oracle's `-g 8` (24.9 -> 24.6%, p90 30.0 -> 26.6%);
  /// 1.25 and 1.75 read worse on the H100 or the A100 tables (Volta and Blackwell assumed alike).
  std::array<double, 4> ringLLChannelRate = {1.5, 1.5, 1.5, 1.5};
  /// Per arch and protocol (indexed by GpuArch, then NcclProtocol): scale of the bandwidth a call reaches, for what the
  /// model's protocol terms (payload, NCCL's per-channel LL/LL128 rates) leave to the hardware. Simple stays 1 (its
  /// rate is the link fractions above); LL 1, the model as sourced. LL128, where the tables run it into its bandwidth
  /// regime, on NVLink and across a network alike:
  /// - Ampere 0.82: 8xA100 80 GB `-g 1` ring LL128 at 8-16 MiB (-12/-15% at 1, -1% at 0.82) and 2x8 A100 40 GB OCI
  ///   RoCE tree LL128 at 4-256 MiB (-12..-19% at 1, -8..+4% at 0.82) (Volta assumed alike).
  /// - Hopper 0.92: p5's ring LL128 at 64 MiB-2 GiB on 4-16 nodes under aws-ofi-nccl's tuner (NCCL 2.27.7, 280 GB/s
  ///   busbw at 1 GiB on 4 nodes: +3..+15% at 0.82, -5..+8% at 0.92), and one H100 node's ring LL128 with NVLS off at
  ///   4-32 MiB (`-g 8`, NCCL 2.26.2: +17..+27% at 0.82, +8..+22% at 0.92; `-g 4`, 2.29.2: +6%) (Blackwell assumed
  ///   alike).
  std::array<std::array<double, 3>, 4> protocolRate = {
      {{1.0, 0.82, 1.0}, {1.0, 0.82, 1.0}, {1.0, 0.92, 1.0}, {1.0, 0.92, 1.0}}};
};

/// What NCCL's model needs of the machine. Bandwidths are GB/s (1e9 bytes/s) per direction, datasheet values.
struct NcclSystem {
  GpuArch arch = GpuArch::Hopper;
  int nodes = 1;
  int gpusPerNode = 8;
  /// GPUs of a node reach each other over NVLink (else PCIe); nvlinkGBps is one GPU's total over all its links.
  bool nvlink = true;
  double nvlinkGBps = 450;
  /// NVLink through NVSwitches (all-to-all inside the node); NVLS = the switches reduce and multicast (NVLink SHARP).
  bool nvswitch = true;
  bool nvls = false;
  /// The network's switches reduce (IB SHARP): NCCL's CollNet algorithms (still gated by NCCL_COLLNET_ENABLE=1).
  bool collnet = false;
  int nicsPerNode = 0;
  double nicGBps = 0;  ///< one NIC's line rate
  NicKind nicKind = NicKind::InfiniBand;
  NcclPath gpuNicPath = NcclPath::Pix;  ///< path from a GPU to its nearest NIC
  /// The latency the network plugin reports to NCCL (ncclNetProperties_t.latency), which NCCL's estimate adds to
  /// every network step, twice for Simple (search.cc graph latencyInter, tuning.cc: "also add the flush extra
  /// latency"). aws-ofi-nccl reports 75 us on p4d, p4de and p5 (platform-aws); NCCL's own IB and socket transports 0.
  /// Only NCCL's estimate, hence its choice, reads it: the time model has its own per-hop latency.
  double netPluginLatencyUs = 0;
  /// NCCL variables the system's own software sets where the user does not (the topology's "nccl_env": a network
  /// plugin's setenv, a vendor's recommended profile). ncclComm and ncclChoose apply them under the caller's NcclEnv.
  std::map<std::string, std::string> ncclEnv;
  CpuVendor cpuVendor = CpuVendor::Intel;
  /// GPUs one host thread launches each call on (nccl-tests -g N; 1: a process or thread per GPU). Not the
  /// system's: the caller's (a log's nGpus), for the time model's host pace and launch stagger (NcclModelParams).
  int gpusPerThread = 1;
  /// The time model's open parameters (applyNcclCalibration sets this system's entries from a calibration).
  NcclModelParams model;

  int nranks() const { return nodes * gpusPerNode; }
};

/// The system of the first `nranks` ranks of `t`: nodes = distinct hosts, gpusPerNode = most ranks on one host;
/// arch from the gpu nodes' `arch` (else from the per-GPU NVLink bandwidth: >= 800 blackwell, >= 400 hopper, >= 250
/// ampere, > 0 volta; no NVLink: hopper); NVLink from links of class "nvlink" at the rank's GPU (their bandwidth
/// summed), NVSwitch / NVLS from an in-host switch on those links (NVLS when its reduce_GBps > 0 and the arch is hopper
/// or later), CollNet from a fabric switch (no host) with reduce_GBps > 0; NICs = nic nodes of the first host, NIC
/// speed = the widest "nic"/"fabric" link of a NIC, EFA when a NIC id or the topology's name or description says "efa"
/// (Efa2 on hopper and later; the network plugin's latency aws-ofi-nccl's 75 us; several NICs per GPU grouped into one
/// device per GPU, as the plugin shows them to NCCL), TCPXO when one says "tcpx", RoCE when one says "roce"; GPU-NIC
/// path PIX when a NIC is one link from the GPU or its PCIe switch, else PHB; ncclEnv the topology's "nccl_env" (a bad
/// value is Error{InvalidTopology} "<name>: nccl_env: ..."); cpuVendor from the topology's "cpu_vendor" (Intel when
/// it names none).
/// Throws Error{InvalidArgument} when the topology has fewer than `nranks` ranks.
NcclSystem ncclSystemOf(const Topology& t, int nranks);

/// The NCCL release whose choice ncclChoose emulates by default (NCCL_VERSION_CODE of 2.28.9).
inline constexpr int kNcclVersionEmulated = 22809;
/// NCCL_VERSION_CODE of "2.26.2" (major * 10000 + minor * 100 + patch); 0 for text that is not MAJOR.MINOR.PATCH.
int ncclVersionCode(std::string_view version);

/// One line of NCCL's example tuner plugin's configuration (NCCL_TUNER_CONFIG_FILE; format and parser in tuning.h).
struct NcclTunerRule {
  Collective collective = Collective::AllReduce;
  std::size_t minBytes = 0, maxBytes = 0;
  std::string algorithm;  ///< as the plugin spells it (tree, ring, ...)
  std::string protocol;   ///< ll, ll128, simple
  int channels = -1;
  int nnodes = -1;
  int nranks = -1;
  int numPipeOps = -1;
  int regBuff = -1;
};

/// The NCCL environment variables the model honours, parsed as NCCL parses them.
struct NcclEnv {
  /// Functions in NCCL's ncclFuncStr order: Broadcast, Reduce, AllGather, ReduceScatter, AllReduce.
  static constexpr int kFunctions = 5;
  /// algoEnabled[function][algorithm]; protoEnabled[function][protocol]: 0 off, 1 on, 2 = NCCL's default for LL128
  /// (on only where the architecture and paths allow it).
  std::array<std::array<int, 7>, kFunctions> algoEnabled{};
  std::array<std::array<int, 3>, kFunctions> protoEnabled{};
  int minChannels = 0;    ///< NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS (0: unset)
  int maxChannels = 64;   ///< NCCL_MAX_NCHANNELS / NCCL_MAX_CTAS (MAXCHANNELS when unset)
  int minCtas = 0;        ///< NCCL_MIN_CTAS alone, which with maxCtas bounds the NVLS channels (transport/nvls.cc)
  int maxCtas = 64;       ///< NCCL_MAX_CTAS alone
  int nvlsChannels = 0;   ///< NCCL_NVLS_NCHANNELS (0: unset, NCCL's 16 on sm90, 24 or 32 on sm100)
  int nvlsEnable = 2;     ///< NCCL_NVLS_ENABLE: 0 off, 1 forced on, 2 where the hardware supports it
  int collnetEnable = 0;  ///< NCCL_COLLNET_ENABLE (NCCL's default is off)
  std::size_t buffSize = std::size_t{1} << 22;  ///< NCCL_BUFFSIZE: Simple protocol buffer per channel and peer
  int nThreads = -2;                            ///< NCCL_NTHREADS (-2: unset)
  /// NCCL_NVLS_CHUNKSIZE: NVLS and NVLSTree chunk per channel (transport/nvls.cc default 128 KiB).
  std::size_t nvlsChunkSize = std::size_t{128} << 10;
  /// NCCL_NVLSTREE_MAX_CHUNKSIZE: NVLSTree's chunk cap (enqueue.cc; 0: NCCL's rule, 64 KiB from 4 nodes).
  std::size_t nvlsTreeMaxChunkSize = 0;
  /// NCCL_TUNER_PLUGIN: the tuner library NCCL loads ("" unset: the network plugin's own, if it has one). A name with
  /// the word "ofi" (libnccl-ofi-tuner.so) is aws-ofi-nccl's, which chooses on p5 (EFA on Hopper) from 3 nodes up; one
  /// with the word "example" is NCCL's example tuner, which applies the rules of tunerConfigFile; "none" turns tuners
  /// off; the model knows no other tuner, and leaves NCCL's own choice under one.
  std::string tunerPlugin;
  /// NCCL's example tuner (a NCCL_TUNER_PLUGIN name with "example" in it, as its libnccl-tuner-example.so) reads its
  /// rules from NCCL_TUNER_CONFIG_FILE (default nccl_tuner.conf in the working directory; none there: no rules). The
  /// file is read when the variable is parsed; a named file that cannot be read, or a bad line, is
  /// Error{InvalidArgument} naming it.
  std::string tunerConfigFile;
  std::vector<NcclTunerRule> tunerRules;
  std::string algo, proto;                  ///< the raw NCCL_ALGO / NCCL_PROTO text ("" when unset)
  std::map<std::string, std::string> vars;  ///< the NCCL variables this environment was parsed from
  /// The NCCL whose choice is emulated, as NCCL_VERSION_CODE (22809 = 2.28.9; ncclVersionCode). Older releases
  /// estimated trees and rings with their own constants (tuning.cc: 2.9 .. 2.17, 2.18, 2.19 .. 2.20, 2.21 .. 2.22,
  /// from 2.23) and, before 2.28, NVLS and NVLSTree by an older formula and latency; the choice follows the
  /// release's, and so does the time model's NVLSTree network step (the rest of the time model is 2.28's).
  int version = kNcclVersionEmulated;

  NcclEnv();
};

/// Parses the variables of `vars` (name -> value; others are ignored). NCCL_ALGO and NCCL_PROTO take NCCL's list
/// syntax: "ring,tree", "^nvls" (all but), "ring;allreduce:tree,nvls" (per function). A bad value throws
/// Error{InvalidArgument} "NCCL_<NAME>=<value>: <problem>".
NcclEnv parseNcclEnv(const std::map<std::string, std::string>& vars);
/// parseNcclEnv over the process environment.
NcclEnv ncclEnvFromProcess();
/// The process environment's NCCL variables overridden by `assignments`: whitespace-separated NAME=VALUE items, as
/// nccl-tests logs print them ("NCCL_ALGO=Ring NCCL_MIN_CTAS=24"; NCCL's values never contain blanks). Throws
/// Error{InvalidArgument} naming `what` (the flag) for an item that is not NCCL_<NAME>=VALUE, and as parseNcclEnv
/// for a bad value.
NcclEnv ncclEnvWith(std::string_view assignments, std::string_view what);
/// `env` with the variables `sys.ncclEnv` sets that `env.vars` does not name (the user's setting wins, as with a
/// plugin's setenv(..., 0)).
NcclEnv ncclEnvOnSystem(const NcclSystem& sys, const NcclEnv& env);

/// The communicator-level results of NCCL's topology search and channel setup for one graph (search.cc, connect.cc).
struct NcclGraph {
  int nChannels = 0;  ///< search channels (0: the algorithm has no graph on this system)
  double bwIntra = 0, bwInter = 0;
  NcclPath typeIntra = NcclPath::Nvl, typeInter = NcclPath::Pix;
};
struct NcclComm {
  NcclSystem sys;
  std::array<NcclGraph, 7> graphs;     ///< by NcclAlgorithm
  int nChannels = 0;                   ///< collective channels of the communicator (after NCCL's duplications)
  int defaultChannels = 0;             ///< nChannels before NCCL_MIN/MAX_NCHANNELS
  int nvlsChannels = 0;                ///< NVLS channels (0: no NVLS)
  int version = kNcclVersionEmulated;  ///< NcclEnv::version
  bool collnet = false;
};
/// The communicator NCCL would build for the first `nranks` ranks of `sys` (nodes = ceil(nranks / gpusPerNode)).
NcclComm ncclComm(const NcclSystem& sys, int nranks, const NcclEnv& env = NcclEnv{});

/// One (algorithm, protocol) of the cost table.
struct NcclCandidate {
  NcclAlgorithm algorithm = NcclAlgorithm::Ring;
  NcclProtocol protocol = NcclProtocol::Simple;
  double ncclUs = -1;       ///< NCCL's estimate (ncclTopoGetAlgoTime); < 0 where NCCL does not offer it
  double predictedUs = -1;  ///< ncclPredictUs with the channels NCCL would use; < 0 where not offered
};

struct NcclChoice {
  NcclAlgorithm algorithm = NcclAlgorithm::Ring;
  NcclProtocol protocol = NcclProtocol::Simple;
  int channels = 1;
  int threads = 0;
  std::size_t chunkBytes = 0;  ///< data bytes a channel moves per pipeline step
  std::size_t sliceBytes = 0;
  double ncclUs = 0;  ///< NCCL's own estimate of the choice, which it minimised (no tuner)
  /// The tuner plugin that made the choice or set its channels ("aws-ofi-nccl", "NCCL example"); "" where NCCL's
  /// estimate chose alone.
  std::string tuner;
  int version = kNcclVersionEmulated;     ///< the NCCL release whose choice this is (NcclEnv::version)
  double predictedUs = 0;                 ///< what the call is expected to take (ncclPredictUs)
  std::string reason;                     ///< one line: why this choice
  std::vector<NcclCandidate> candidates;  ///< every (algorithm, protocol), NCCL's order
};

/// NCCL's choice for `collective` of `bytes` (the nccl-tests size: per-rank buffer for all-reduce, broadcast, reduce;
/// the total for all-gather and reduce-scatter) on the first `nranks` ranks of `sys`. Throws Error{InvalidArgument}
/// for nranks < 1 or Barrier, Error{Unsupported} when the environment leaves no algorithm (NCCL's "no
/// algorithm/protocol available"), naming NCCL_ALGO / NCCL_PROTO.
NcclChoice ncclChoose(const NcclSystem& sys, Collective collective, std::size_t bytes, int nranks,
                      const NcclEnv& env = NcclEnv{});

/// The size NCCL's tuning and nccl-tests tables key a call by: the per-rank buffer of all-reduce, broadcast and
/// reduce, the total of all-gather and reduce-scatter (the larger of the spec's input and output bytes).
std::size_t ncclTestsBytes(const CollectiveSpec& spec);

/// ncclChoose for `spec` on its system and environment.
NcclChoice ncclChoose(const NcclSystem& sys, const CollectiveSpec& spec, const NcclEnv& env);

/// One line for run headers and -J rows: "NCCL 2.28: NVLS/Simple, 16 channels (runner-up Ring/LL128 +12%)", the
/// runner-up being the candidate with the next lowest NCCL estimate and the percentage its estimate's excess.
std::string ncclChoiceSummary(const NcclChoice& choice);

/// Time (us) of one call with a given algorithm, protocol and channel count (at most the communicator's channels of
/// the algorithm's kind, as NCCL runs it; NVLS channels below NCCL's default carry their share of its peak): NCCL's
/// latency model (base latency + per-step protocol latency x steps) plus each network hop's measured extra and the
/// arch's launch floor; bytes
/// (nccl-tests busbw convention) over the lower of channels x NCCL's per-channel bandwidth and the hardware's
/// (datasheet line rates x protocol payload efficiency x the achievable fraction of each link class), or, where it is
/// longer, the pace of a network connection's NCCL_STEPS slots (every message after the first waits 1 / NCCL_STEPS of a
/// round trip of two network steps); NVLS pipeline fill; NCCL's tree correction at medium sizes. Constants and their
/// sources: core/models/nccl_model.cc. Negative where the algorithm does not exist on this system and collective.
double ncclPredictUs(const NcclSystem& sys, Collective collective, std::size_t bytes, int nranks,
                     NcclAlgorithm algorithm, NcclProtocol protocol, int channels);

/// NCCL's latency and payload constants, for timing a schedule's wire protocol on the simulator (Schedule::protocol).
/// tuning.cc baseLatencies[algorithm][protocol]: the per-call floor (kernel launch and setup), us.
double ncclBaseLatencyUs(NcclAlgorithm algorithm, NcclProtocol protocol);
/// tuning.cc hwLatencies[hw][algorithm][protocol]: the latency of one pipeline step, us, where hw is NVLINK for an
/// NVLink path (NcclPath::Nvl), NET for the network (NcclPath::Net) and PCI for every other path (tuning.cc's
/// intraHw: typeIntra == LINK_NVL ? NVLINK : PCI).
double ncclStepLatencyUs(NcclPath path, NcclAlgorithm algorithm, NcclProtocol protocol);
/// device.h: data bytes per byte on the wire: LL 4 of 8 (a flag per data word), LL128 120 of 128, Simple 1.
double ncclProtocolEfficiency(NcclProtocol protocol);
/// enqueue.cc addP2pToPlan: point-to-point sends and receives use LL up to NCCL_P2P_LL_THRESHOLD bytes per channel
/// (default 16 KiB) and Simple above. Each p2p channel's part is at least 64 KiB (p2pChunkSize / 8 on one node, / 2
/// across nodes), so a transfer uses LL exactly when its bytes are at most this.
inline constexpr std::size_t kNcclP2pLLThresholdBytes = 16384;

}  // namespace collbench
