#include "collbench/strategy/packing.h"

#include <fmt/format.h>

#include "collbench/error.h"

namespace collbench::strategy {

std::vector<Pack> packValues(const std::vector<PackInput>& values, std::int64_t bytesPerPack) {
  if (bytesPerPack < 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("CommunicationOptions.bytes_per_pack must be >= 0 (0 = automatic), got {}", bytesPerPack));
  }
  std::vector<Pack> packs;
  for (std::size_t k = values.size(); k-- > 0;) {
    const PackInput& v = values[k];
    const bool full = bytesPerPack > 0 && !packs.empty() && packs.back().bytes > static_cast<std::size_t>(bytesPerPack);
    if (packs.empty() || full || packs.back().dtype != v.dtype) packs.push_back(Pack{{}, 0, v.dtype});
    packs.back().indices.push_back(k);
    packs.back().bytes += v.bytes;
  }
  return packs;
}

}  // namespace collbench::strategy
