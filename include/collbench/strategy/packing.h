#pragma once
/// Gradient packing as MultiWorkerMirroredStrategy does it (TF cross_device_utils.group_by_size, called by
/// CollectiveAllReduce._do_batch_all_reduce_dense on the reversed value list).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "collbench/types.h"

namespace collbench::strategy {

/// The size and type of one value of a batch all-reduce, in the caller's order.
struct PackInput {
  DType dtype = DType::F32;
  std::size_t bytes = 0;
};

/// One all-reduce of a batch: the values it carries, as indices into the caller's list, in pack order (packs and
/// the values inside them follow the reversed list: the last gradient first, as backprop produces them).
struct Pack {
  std::vector<std::size_t> indices;
  std::size_t bytes = 0;
  DType dtype = DType::F32;
};

/// Groups `values` (in the caller's order) into packs, TF's rule: walk the reversed list; a new pack starts only
/// when the current one already holds strictly more than `bytesPerPack` bytes, so every pack but the last exceeds
/// bytesPerPack; bytesPerPack 0 means one pack. collbench also starts a new pack when the dtype changes (TF
/// concatenates a pack into one tensor, which needs a single dtype). Every index appears exactly once; an empty
/// list gives no packs. Throws Error{InvalidArgument} for bytesPerPack < 0.
std::vector<Pack> packValues(const std::vector<PackInput>& values, std::int64_t bytesPerPack);

}  // namespace collbench::strategy
