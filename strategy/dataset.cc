#include "collbench/strategy/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "collbench/error.h"
#include "dataset_node.h"

namespace collbench::strategy {

using detail::DatasetNode;
using detail::NodeKind;
using NodePtr = std::shared_ptr<const DatasetNode>;

namespace {

[[noreturn]] void fail(const std::string& message) { throw Error(Errc::InvalidArgument, message); }

std::string describeSpec(const ElementSpec& spec) {
  std::string out = "(";
  for (std::size_t i = 0; i < spec.size(); ++i) out += (i ? ", " : "") + spec[i].describe();
  return out + ")";
}

ElementSpec specOf(const Element& e) {
  ElementSpec spec;
  for (const Tensor& t : e) spec.push_back({t.dtype(), t.shape()});
  return spec;
}

/// Throws naming `what` unless `e` conforms to `spec`.
void checkConforms(const ElementSpec& spec, const Element& e, const std::string& what) {
  if (e.size() != spec.size()) {
    fail(fmt::format("{} has {} components but the element_spec has {}: {}", what, e.size(), spec.size(),
                     describeSpec(spec)));
  }
  for (std::size_t c = 0; c < e.size(); ++c) {
    if (!spec[c].isCompatible(e[c])) {
      fail(fmt::format("{} component {} is {} but the element_spec says {}", what, c, e[c].describe(),
                       spec[c].describe()));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Iterators, one per node kind.

class SlicesIterator final : public DatasetIterator {
 public:
  explicit SlicesIterator(NodePtr n) : n_(std::move(n)) {}
  std::optional<Element> next() override {
    if (n_->components.empty() || k_ >= n_->components.front().dim(0)) return std::nullopt;
    Element e;
    for (const Tensor& c : n_->components)
      e.push_back(c.slice(k_, k_ + 1).reshaped(Shape(c.shape().begin() + 1, c.shape().end())));
    ++k_;
    return e;
  }

 private:
  NodePtr n_;
  std::int64_t k_ = 0;
};

class ElementsIterator final : public DatasetIterator {
 public:
  explicit ElementsIterator(NodePtr n) : n_(std::move(n)) {}
  std::optional<Element> next() override {
    if (k_ >= n_->elements.size()) return std::nullopt;
    return n_->elements[k_++];
  }

 private:
  NodePtr n_;
  std::size_t k_ = 0;
};

class FilesIterator final : public DatasetIterator {
 public:
  explicit FilesIterator(NodePtr n) : n_(std::move(n)) {}
  std::optional<Element> next() override {
    while (k_ >= buffer_.size()) {
      if (file_ >= n_->files.size()) return std::nullopt;
      const std::string& path = n_->files[file_++];
      buffer_ = n_->reader(path);
      k_ = 0;
      for (std::size_t i = 0; i < buffer_.size(); ++i) {
        checkConforms(n_->spec, buffer_[i], fmt::format("file '{}' element {}", path, i));
      }
    }
    return std::move(buffer_[k_++]);
  }

 private:
  NodePtr n_;
  std::size_t file_ = 0;
  std::vector<Element> buffer_;
  std::size_t k_ = 0;
};

class BatchIterator final : public DatasetIterator {
 public:
  explicit BatchIterator(NodePtr n) : n_(std::move(n)), in_(n_->input->makeIterator()) {}
  std::optional<Element> next() override {
    std::vector<Element> rows;
    while (static_cast<std::int64_t>(rows.size()) < n_->a) {
      std::optional<Element> e = in_->next();
      if (!e) break;
      if (!rows.empty()) {
        for (std::size_t c = 0; c < e->size() && c < rows.front().size(); ++c) {
          if ((*e)[c].shape() != rows.front()[c].shape() || (*e)[c].dtype() != rows.front()[c].dtype()) {
            fail(
                fmt::format("batch({}): element {} (input element {}) component {} is {} but the batch's first "
                            "element has {}; elements of a batch must have equal shapes",
                            n_->a, rows.size(), seen_, c, (*e)[c].describe(), rows.front()[c].describe()));
          }
        }
      }
      rows.push_back(std::move(*e));
      ++seen_;
    }
    if (rows.empty() || (n_->flag && static_cast<std::int64_t>(rows.size()) < n_->a)) return std::nullopt;
    Element out;
    for (std::size_t c = 0; c < rows.front().size(); ++c) {
      std::vector<Tensor> column;
      column.reserve(rows.size());
      for (Element& r : rows) column.push_back(std::move(r[c]));
      out.push_back(Tensor::stack(column));
    }
    return out;
  }

 private:
  NodePtr n_;
  std::unique_ptr<DatasetIterator> in_;
  std::int64_t seen_ = 0;
};

class ShardIterator final : public DatasetIterator {
 public:
  explicit ShardIterator(NodePtr n) : n_(std::move(n)), in_(n_->input->makeIterator()) {}
  std::optional<Element> next() override {
    for (;;) {
      std::optional<Element> e = in_->next();
      if (!e) return std::nullopt;
      if (k_++ % n_->a == n_->b) return e;
    }
  }

 private:
  NodePtr n_;
  std::unique_ptr<DatasetIterator> in_;
  std::int64_t k_ = 0;
};

class RepeatIterator final : public DatasetIterator {
 public:
  explicit RepeatIterator(NodePtr n) : n_(std::move(n)) {
    if (n_->a != 0) in_ = n_->input->makeIterator();
  }
  std::optional<Element> next() override {
    while (in_) {
      if (std::optional<Element> e = in_->next()) {
        ++inEpoch_;
        return e;
      }
      ++epoch_;
      // An epoch with no elements would repeat forever: an empty dataset repeats to an empty one (as TF).
      if (inEpoch_ == 0 || (n_->a >= 0 && epoch_ >= n_->a)) {
        in_.reset();
        break;
      }
      inEpoch_ = 0;
      in_ = n_->input->makeIterator();
    }
    return std::nullopt;
  }

 private:
  NodePtr n_;
  std::unique_ptr<DatasetIterator> in_;
  std::int64_t epoch_ = 0;
  std::int64_t inEpoch_ = 0;
};

class TakeIterator final : public DatasetIterator {
 public:
  explicit TakeIterator(NodePtr n) : n_(std::move(n)), in_(n_->input->makeIterator()) {}
  std::optional<Element> next() override {
    if (n_->a >= 0 && k_ >= n_->a) return std::nullopt;
    std::optional<Element> e = in_->next();
    if (e) ++k_;
    return e;
  }

 private:
  NodePtr n_;
  std::unique_ptr<DatasetIterator> in_;
  std::int64_t k_ = 0;
};

class FailingIterator final : public DatasetIterator {
 public:
  explicit FailingIterator(std::string message) : message_(std::move(message)) {}
  std::optional<Element> next() override { fail(message_); }

 private:
  std::string message_;
};

std::shared_ptr<DatasetNode> transform(NodeKind kind, const NodePtr& input, ElementSpec spec) {
  auto n = std::make_shared<DatasetNode>();
  n->kind = kind;
  n->input = input;
  n->spec = std::move(spec);
  n->sourceName = input->sourceName;
  return n;
}

/// Parses one number of a text file.
double parseNumber(const std::string& token, const std::string& path, std::size_t line) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(token.c_str(), &end);
  if (end == token.c_str() || *end != '\0' || errno == ERANGE) {
    fail(fmt::format("file '{}' line {}: \"{}\" is not a number", path, line, token));
  }
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------

std::unique_ptr<DatasetIterator> DatasetNode::makeIterator() const {
  NodePtr self = shared_from_this();
  switch (kind) {
    case NodeKind::Slices:
      return std::make_unique<SlicesIterator>(self);
    case NodeKind::Elements:
      return std::make_unique<ElementsIterator>(self);
    case NodeKind::Files:
      return std::make_unique<FilesIterator>(self);
    case NodeKind::Batch:
      return std::make_unique<BatchIterator>(self);
    case NodeKind::Shard:
      return std::make_unique<ShardIterator>(self);
    case NodeKind::Repeat:
      return std::make_unique<RepeatIterator>(self);
    case NodeKind::Take:
      return std::make_unique<TakeIterator>(self);
    case NodeKind::Failing:
      return std::make_unique<FailingIterator>(error);
  }
  COLLBENCH_CHECK(false, "unknown dataset node kind");
}

std::string TensorSpec::describe() const {
  return fmt::format("TensorSpec(shape={}, dtype={})", toString(shape), collbench::toString(dtype));
}

bool TensorSpec::isCompatible(const Tensor& t) const {
  if (t.dtype() != dtype || t.rank() != static_cast<int>(shape.size())) return false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != kUnknownDim && shape[i] != t.shape()[i]) return false;
  }
  return true;
}

std::string_view toString(AutoShardPolicy p) {
  switch (p) {
    case AutoShardPolicy::Auto:
      return "AUTO";
    case AutoShardPolicy::File:
      return "FILE";
    case AutoShardPolicy::Data:
      return "DATA";
    case AutoShardPolicy::Off:
      return "OFF";
  }
  return "?";
}

AutoShardPolicy parseAutoShardPolicy(std::string_view text) {
  std::string key(text);
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::toupper(c); });
  for (AutoShardPolicy p :
       {AutoShardPolicy::Auto, AutoShardPolicy::File, AutoShardPolicy::Data, AutoShardPolicy::Off}) {
    if (key == toString(p)) return p;
  }
  fail(fmt::format("AutoShardPolicy \"{}\" is not one of AUTO, FILE, DATA, OFF", text));
}

Dataset::Dataset(std::shared_ptr<const DatasetNode> node, DatasetOptions options)
    : node_(std::move(node)), options_(options) {}

Dataset Dataset::fromTensorSlices(std::vector<Tensor> components) {
  if (components.empty()) fail("from_tensor_slices: no components");
  for (std::size_t c = 0; c < components.size(); ++c) {
    if (components[c].rank() < 1) {
      fail(fmt::format("from_tensor_slices: component {} is the scalar {}; components need a dimension 0 to slice", c,
                       components[c].describe()));
    }
    if (components[c].dim(0) != components[0].dim(0)) {
      fail(fmt::format("from_tensor_slices: component {} has {} rows but component 0 has {} ({} vs {})", c,
                       components[c].dim(0), components[0].dim(0), components[c].describe(), components[0].describe()));
    }
  }
  auto n = std::make_shared<DatasetNode>();
  n->kind = NodeKind::Slices;
  n->sourceName = "from_tensor_slices";
  for (const Tensor& c : components) n->spec.push_back({c.dtype(), Shape(c.shape().begin() + 1, c.shape().end())});
  n->components = std::move(components);
  return Dataset(std::move(n));
}

Dataset Dataset::fromElements(std::vector<Element> elements) {
  auto n = std::make_shared<DatasetNode>();
  n->kind = NodeKind::Elements;
  n->sourceName = "from_elements";
  if (!elements.empty()) {
    n->spec = specOf(elements.front());
    for (std::size_t i = 1; i < elements.size(); ++i) {
      checkConforms(n->spec, elements[i], fmt::format("from_elements: element {}", i));
    }
  }
  n->elements = std::move(elements);
  return Dataset(std::move(n));
}

Dataset Dataset::fromFiles(std::vector<std::string> files, FileReader reader, ElementSpec spec) {
  if (files.empty()) fail("from_files: the file list is empty");
  if (!reader) fail("from_files: no reader");
  auto n = std::make_shared<DatasetNode>();
  n->kind = NodeKind::Files;
  n->sourceName = "files";
  n->files = std::move(files);
  n->reader = std::move(reader);
  n->spec = std::move(spec);
  return Dataset(std::move(n));
}

void forEachTextRow(const std::string& path,
                    const std::function<void(std::size_t line, const std::vector<double>& values)>& row) {
  // An ifstream opens a directory and then reads nothing: say what it is rather than report an empty file.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(fmt::format("file '{}' is a directory", path));
  std::ifstream in(path);
  if (!in) fail(fmt::format("cannot open file '{}'", path));
  std::string line;
  std::vector<double> values;
  for (std::size_t lineNo = 1; std::getline(in, line); ++lineNo) {
    std::replace(line.begin(), line.end(), ',', ' ');
    std::replace(line.begin(), line.end(), '\t', ' ');
    const std::size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos || line[first] == '#') continue;
    values.clear();
    std::size_t pos = first;
    while (pos < line.size()) {
      const std::size_t end = std::min(line.find(' ', pos), line.size());
      values.push_back(parseNumber(line.substr(pos, end - pos), path, lineNo));
      pos = line.find_first_not_of(' ', end);
      if (pos == std::string::npos) break;
    }
    row(lineNo, values);
  }
}

Dataset Dataset::fromTextFiles(std::vector<std::string> files, DType dtype) {
  FileReader reader = [dtype](const std::string& path) {
    std::vector<Element> out;
    forEachTextRow(path, [&](std::size_t, const std::vector<double>& values) {
      out.push_back({Tensor::fromDoubles(dtype, values, Shape{static_cast<std::int64_t>(values.size())})});
    });
    return out;
  };
  return fromFiles(std::move(files), std::move(reader), ElementSpec{{dtype, Shape{kUnknownDim}}});
}

Dataset Dataset::batch(std::int64_t batchSize, bool dropRemainder) const {
  if (batchSize < 1) fail(fmt::format("batch: batch_size must be >= 1, got {}", batchSize));
  ElementSpec spec = elementSpec();
  for (TensorSpec& s : spec) s.shape.insert(s.shape.begin(), dropRemainder ? batchSize : kUnknownDim);
  auto n = transform(NodeKind::Batch, node_, std::move(spec));
  n->a = batchSize;
  n->flag = dropRemainder;
  return Dataset(std::move(n), options_);
}

Dataset Dataset::shard(std::int64_t numShards, std::int64_t index) const {
  if (numShards < 1) fail(fmt::format("shard: num_shards must be >= 1, got {}", numShards));
  if (index < 0 || index >= numShards) {
    fail(fmt::format("shard: index {} is out of range for num_shards {} (need 0 <= index < num_shards)", index,
                     numShards));
  }
  auto n = transform(NodeKind::Shard, node_, elementSpec());
  n->a = numShards;
  n->b = index;
  return Dataset(std::move(n), options_);
}

Dataset Dataset::repeat(std::int64_t count) const {
  if (count < -1) fail(fmt::format("repeat: count must be >= 0 or -1 (forever), got {}", count));
  auto n = transform(NodeKind::Repeat, node_, elementSpec());
  n->a = count;
  return Dataset(std::move(n), options_);
}

Dataset Dataset::take(std::int64_t count) const {
  if (count < -1) fail(fmt::format("take: count must be >= 0 or -1 (all), got {}", count));
  auto n = transform(NodeKind::Take, node_, elementSpec());
  n->a = count;
  return Dataset(std::move(n), options_);
}

Dataset Dataset::withOptions(DatasetOptions options) const { return Dataset(node_, options); }

const ElementSpec& Dataset::elementSpec() const { return node_->spec; }

std::unique_ptr<DatasetIterator> Dataset::makeIterator() const { return node_->makeIterator(); }

std::vector<Element> Dataset::toVector() const {
  std::vector<Element> out;
  auto it = makeIterator();
  while (std::optional<Element> e = it->next()) {
    if (out.size() >= kMaxMaterializedElements) {
      fail(fmt::format("toVector: more than {} elements (an infinite repeat?)", kMaxMaterializedElements));
    }
    out.push_back(std::move(*e));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------

InputContext::InputContext(int numInputPipelines, int inputPipelineId, int numReplicasInSync)
    : numInputPipelines_(numInputPipelines), inputPipelineId_(inputPipelineId), numReplicasInSync_(numReplicasInSync) {
  if (numInputPipelines < 1)
    fail(fmt::format("InputContext: num_input_pipelines must be >= 1, got {}", numInputPipelines));
  if (inputPipelineId < 0 || inputPipelineId >= numInputPipelines) {
    fail(fmt::format("InputContext: input_pipeline_id {} is out of range for {} input pipelines", inputPipelineId,
                     numInputPipelines));
  }
  if (numReplicasInSync < 1)
    fail(fmt::format("InputContext: num_replicas_in_sync must be >= 1, got {}", numReplicasInSync));
}

std::int64_t InputContext::getPerReplicaBatchSize(std::int64_t globalBatchSize) const {
  if (globalBatchSize < 0)
    fail(fmt::format("get_per_replica_batch_size: global batch size {} is negative", globalBatchSize));
  if (globalBatchSize % numReplicasInSync_ != 0) {
    fail(fmt::format("The global batch size {} is not divisible by num_replicas_in_sync {}", globalBatchSize,
                     numReplicasInSync_));
  }
  return globalBatchSize / numReplicasInSync_;
}

// ---------------------------------------------------------------------------------------------------------------
// Sharding

std::optional<BatchInfo> findBatch(const Dataset& dataset) {
  for (const DatasetNode* n = dataset.node().get(); n != nullptr; n = n->input.get()) {
    if (n->kind == NodeKind::Batch) return BatchInfo{n->a, n->flag};
    if (n->kind != NodeKind::Shard && n->kind != NodeKind::Repeat && n->kind != NodeKind::Take) return std::nullopt;
  }
  return std::nullopt;
}

Dataset autoShard(const Dataset& dataset, int numWorkers, int workerIndex, ShardDecision* decision) {
  ShardDecision local;
  ShardDecision& d = decision ? *decision : local;
  d = ShardDecision{};
  const AutoShardPolicy policy = dataset.options().autoShardPolicy;
  if (numWorkers < 1 || workerIndex < 0 || workerIndex >= numWorkers) {
    fail(fmt::format("auto-shard: worker {} is out of range for {} workers", workerIndex, numWorkers));
  }
  // TF shards only with more than one worker (input_ops.auto_shard_dataset checks num_shards > 1).
  if (policy == AutoShardPolicy::Off || numWorkers == 1) return dataset;
  if (policy == AutoShardPolicy::Data) {
    d.applied = AutoShardPolicy::Data;
    return dataset;
  }
  // FILE or AUTO: walk to the source through transformations that keep file order.
  std::vector<const DatasetNode*> chain;
  const DatasetNode* n = dataset.node().get();
  while (n->kind == NodeKind::Batch || n->kind == NodeKind::Shard || n->kind == NodeKind::Repeat ||
         n->kind == NodeKind::Take) {
    chain.push_back(n);
    n = n->input.get();
  }
  auto failing = [&](std::string message) {
    auto f = std::make_shared<DatasetNode>();
    f->kind = NodeKind::Failing;
    f->spec = dataset.elementSpec();
    f->sourceName = dataset.node()->sourceName;
    f->error = std::move(message);
    return Dataset(std::move(f), dataset.options());
  };
  if (n->kind != NodeKind::Files) {
    const std::string reason = fmt::format("the dataset's source is {}, not a list of files",
                                           n->kind == NodeKind::Failing ? "an error" : n->sourceName);
    if (policy == AutoShardPolicy::File) {
      d.applied = AutoShardPolicy::File;
      return failing(
          fmt::format("AutoShardPolicy FILE cannot shard this dataset: {}. Use AutoShardPolicy DATA to "
                      "shard by element, or OFF",
                      reason));
    }
    d.applied = AutoShardPolicy::Data;
    d.warning = fmt::format(
        "AutoShardPolicy AUTO is applying DATA sharding because FILE sharding failed: {}. Every "
        "worker reads the whole dataset and keeps 1/{} of it; set the dataset's AutoShardPolicy to "
        "DATA to silence this warning, or to OFF to disable sharding",
        reason, numWorkers);
    return dataset;
  }
  d.applied = AutoShardPolicy::File;
  const std::size_t files = n->files.size();
  if (files < static_cast<std::size_t>(numWorkers)) {
    return failing(
        fmt::format("AutoShardPolicy {}: the dataset has {} file{} but there are {} workers, so some "
                    "workers would get no data. Use AutoShardPolicy DATA or OFF, or split the input into "
                    "more, smaller files",
                    toString(policy), files, files == 1 ? "" : "s", numWorkers));
  }
  auto source = std::make_shared<DatasetNode>(*n);
  source->files.clear();
  for (std::size_t i = static_cast<std::size_t>(workerIndex); i < files; i += static_cast<std::size_t>(numWorkers)) {
    source->files.push_back(n->files[i]);
  }
  NodePtr top = source;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    auto copy = std::make_shared<DatasetNode>(**it);
    copy->input = top;
    top = copy;
  }
  return Dataset(top, dataset.options());
}

}  // namespace collbench::strategy
