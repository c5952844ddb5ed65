// aws-ofi-nccl's p5 region tuner (aws_ofi_tuner.h). The polygons' corners are the plugin's figures
// (aws/aws-ofi-nccl src/tuner/nccl_ofi_regions.cpp, region_init_internal_p5_p5e, 8 ranks per node, all-reduce); the
// geometry (a log2 plane, edges inside, corners extended to the plane's far bounds) is its documented behaviour.
#include "aws_ofi_tuner.h"

#include <cmath>
#include <vector>

namespace collbench {

namespace {

/// A point of the tuner's plane: log2 of the message size (bytes) and of the rank count.
struct Point {
  double x = 0, y = 0;
};

/// A corner given in bytes and ranks; 0 stands for a tiny positive value (the plugin takes log2 of 1e-6 there).
Point corner(double bytes, double ranks) {
  constexpr double kZero = 1e-6;
  return {std::log2(bytes > 0 ? bytes : kZero), std::log2(ranks > 0 ? ranks : kZero)};
}

/// The plane's far bounds, TUNER_MAX_SIZE 100 GiB and TUNER_MAX_RANKS 1 Mi (nccl_ofi_tuner_region.h), and its corner.
constexpr double kMaxSizeBytes = 100.0 * (1ULL << 30), kMaxRanks = 1 << 20;
const Point kFar = corner(kMaxSizeBytes, kMaxRanks);

/// The plugin's extend_region: the line through a and b, followed to where it first meets x = far.x or y = far.y
/// (vertical and horizontal lines keep their coordinate).
Point extend(Point a, Point b) {
  if (a.x == b.x) return {a.x, kFar.y};
  if (a.y == b.y) return {kFar.x, a.y};
  const double m = (a.y - b.y) / (a.x - b.x), c = b.y - m * b.x;
  const double yAtFarX = m * kFar.x + c;
  return yAtFarX < kFar.y ? Point{kFar.x, yAtFarX} : Point{(kFar.y - c) / m, kFar.y};
}

struct Region {
  NcclAlgorithm algorithm;
  NcclProtocol protocol;
  std::vector<Point> corners;
};

/// Distance below which a point lies on an edge (the plugin's eps, on the log2 plane).
constexpr double kEdgeEps = 1e-10;

bool onSegment(Point p, Point a, Point b) {
  const double dx = b.x - a.x, dy = b.y - a.y, len2 = dx * dx + dy * dy;
  if (len2 == 0) return std::hypot(p.x - a.x, p.y - a.y) < kEdgeEps;
  const double t = ((p.x - a.x) * dx + (p.y - a.y) * dy) / len2;
  if (t < -kEdgeEps || t > 1 + kEdgeEps) return false;
  return std::hypot(p.x - (a.x + t * dx), p.y - (a.y + t * dy)) < kEdgeEps;
}

/// Inside or on an edge (even-odd rule; a polygon with no area, such as the plugin's 3-corner lines, holds only the
/// points of its edges).
bool holds(const Region& r, Point p) {
  const std::size_t n = r.corners.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (onSegment(p, r.corners[i], r.corners[(i + 1) % n])) return true;
  }
  bool inside = false;
  for (std::size_t i = 0, j = n - 1; i < n; j = i++) {
    const Point a = r.corners[i], b = r.corners[j];
    if ((a.y > p.y) != (b.y > p.y) && p.x < (b.x - a.x) * (p.y - a.y) / (b.y - a.y) + a.x) inside = !inside;
  }
  return inside;
}

/// p5 and p5e, 8 ranks per node, all-reduce, in the plugin's order.
std::vector<Region> p5AllReduceRegions() {
  using A = NcclAlgorithm;
  using P = NcclProtocol;
  const Point treeTop = extend(corner(402653184, 2048), corner(402653184, 4096));
  const Point nvlsTreeFar = extend(corner(8053063680, 160), corner(9663676416, 192));
  return {
      {A::Tree,
       P::LL128,
       {corner(0, 16), corner(31457280, 16), corner(37748736, 32), corner(117440512, 64), corner(301989888, 128),
        corner(301989888, 256), corner(335544320, 512), corner(536870912, 1024), corner(402653184, 2048),
        corner(402653184, 4096), treeTop, Point{corner(0, 1).x, treeTop.y}}},
      // Two nodes above 30 MiB: a line (the tuner is off on 2 nodes, so it never applies; kept for its order).
      {A::NvlsTree, P::Simple, {corner(31457281, 16), corner(kMaxSizeBytes, 16), corner(31457281, 16)}},
      {A::Ring,
       P::LL128,
       {corner(31457280, 17), corner(1073741824, 17), corner(2147483648, 64), corner(2147483648, 128),
        corner(1342177280, 160), corner(2147483648, 256), corner(1074790400, 256), corner(444596224, 160),
        corner(301989888, 128), corner(117440512, 64), corner(37748736, 32)}},
      {A::NvlsTree,
       P::Simple,
       {corner(2147483648, 128), corner(6442450944, 128), corner(8053063680, 160), corner(9663676416, 192), nvlsTreeFar,
        treeTop, corner(402653184, 4096), corner(402653184, 2048), corner(536870912, 1024), corner(335544320, 512),
        corner(301989888, 256), corner(310378496, 160), corner(444596224, 160), corner(1074790400, 256),
        corner(2684354560, 256), corner(2147483648, 224), corner(1342177280, 160)}},
      {A::Ring,
       P::Simple,
       {corner(1073741824, 17), Point{nvlsTreeFar.x, corner(1, 17).y}, nvlsTreeFar, corner(9663676416, 192),
        corner(8053063680, 160), corner(2684354560, 64), corner(1610612736, 32)}},
  };
}

}  // namespace

std::optional<std::pair<NcclAlgorithm, NcclProtocol>> awsOfiP5TunerChoice(
    Collective collective, std::size_t bytes, int nranks, int nodes,
    const std::function<bool(NcclAlgorithm, NcclProtocol)>& available) {
  constexpr int kMaxNodesLeftToNccl = 2, kRanksPerNode = 8;
  if (nodes <= kMaxNodesLeftToNccl || nranks != kRanksPerNode * nodes || collective != Collective::AllReduce) {
    return std::nullopt;
  }
  static const std::vector<Region> regions = p5AllReduceRegions();
  const Point p = corner(static_cast<double>(bytes), nranks);
  for (const Region& r : regions) {
    if (available(r.algorithm, r.protocol) && holds(r, p)) return std::pair{r.algorithm, r.protocol};
  }
  return std::nullopt;
}

}  // namespace collbench
