#pragma once
// The pipeline nodes behind Dataset (private to strategy/).
#include <memory>
#include <string>
#include <vector>

#include "collbench/strategy/dataset.h"

namespace collbench::strategy::detail {

enum class NodeKind { Slices, Elements, Files, Batch, Shard, Repeat, Take, Failing };

struct DatasetNode : std::enable_shared_from_this<DatasetNode> {
  NodeKind kind = NodeKind::Elements;
  std::shared_ptr<const DatasetNode> input;  ///< transformations: their input
  ElementSpec spec;
  std::string sourceName;  ///< the source's name for messages ("from_tensor_slices", "files", ...)

  std::vector<Tensor> components;  ///< Slices
  std::vector<Element> elements;   ///< Elements
  std::vector<std::string> files;  ///< Files
  FileReader reader;               ///< Files
  std::int64_t a = 0;              ///< Batch size, Shard num_shards, Repeat/Take count
  std::int64_t b = 0;              ///< Shard index
  bool flag = false;               ///< Batch drop_remainder
  std::string error;               ///< Failing: what iterating throws

  std::unique_ptr<DatasetIterator> makeIterator() const;
};

}  // namespace collbench::strategy::detail
