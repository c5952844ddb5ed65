#pragma once
/// The model behind `collbench train`: softmax regression (hidden == 0) or a one-hidden-layer ReLU MLP on
/// synthetic data, trained with plain SGD through the strategy API exactly as a TF custom training loop does:
///   dataset = from_tensor_slices((x, y)).repeat().batch(global_batch, drop_remainder=True)
///             (or TextLineDataset(files) of "features..., label" rows: TrainConfig::dataFiles)
///   dist = strategy.experimental_distribute_dataset(dataset)
///   with strategy.scope(): variables (mirrored, initial values broadcast from the chief)
///   per step: strategy.run(step_fn, batch): forward/backward on the replica's piece (Eigen), loss scaled by the
///             global batch, all_reduce(SUM) of the gradient list (packed), SGD update of each replica's copy;
///             strategy.reduce(SUM, per-replica [loss, correct]).
/// Synchronous data parallelism makes the weights after any number of steps independent of the replica count up to
/// float summation order (tests/strategy/test_train.cc).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/strategy/dataset.h"
#include "collbench/strategy/strategy.h"
#include "collbench/strategy/tensor.h"

namespace collbench::strategy {

struct TrainConfig {
  std::int64_t examples = 1024;  ///< synthetic examples (one epoch)
  std::int64_t features = 16;
  std::int64_t classes = 4;
  std::int64_t hidden = 0;  ///< 0: softmax regression; > 0: MLP with this many ReLU units
  std::int64_t globalBatch = 64;
  int steps = 50;
  double learningRate = 0.5;
  std::uint64_t seed = 1;
  /// The dataset's AutoShardPolicy (TF tutorials set DATA for in-memory data; AUTO falls back to it with a warning).
  AutoShardPolicy shardPolicy = AutoShardPolicy::Data;
  /// Text files of examples instead of synthetic data (Dataset::fromTextFiles): each line holds `features` numbers
  /// and then the label (an integer class in 0..classes-1). FILE (and AUTO) sharding splits these files across
  /// workers. `examples` is then unused.
  std::vector<std::string> dataFiles;

  /// Throws Error{InvalidArgument} naming the field for non-positive sizes, steps < 0 or learning rate <= 0.
  void validate() const;
};

/// Checks TrainConfig::dataFiles before training starts (the workers read them lazily, each its own shard, so a bad
/// file would otherwise stop them mid-run): every file is readable, holds at least one example, and every example
/// line holds `features` numbers and then a label that is a class in 0..classes-1. Reads each file once and keeps
/// nothing. Throws Error{InvalidArgument} naming the file, and the line for a bad example.
void checkDataFiles(const TrainConfig& config);

/// The memory trainExample needs in one process that hosts `replicas` replicas, in bytes (floats of 4 bytes):
struct TrainMemory {
  double data = 0;         ///< the synthetic examples (0 with dataFiles)
  double model = 0;        ///< every hosted replica's weights and their gradients
  double activations = 0;  ///< a step's inputs, hidden units and logits of the global batch
  double total() const { return data + model + activations; }
};
/// Copies counted by trainMemory, from the peak RSS of `collbench train --steps 2` (GNU time; 40 MB at the
/// defaults): the examples 3 times (--features 100000: 410 MB of examples, 1.24 GB peak), the weights 3 times a
/// replica (the variable, its gradient and the all-reduced sum; --hidden 1000000, 84 MB of weights: 0.95 GB on 1
/// replica, 1.66 GB on 4), the activations 3 times (--hidden 100000 -b 1024, 410 MB of hidden units: 1.26 GB).
inline constexpr double kTrainDataCopies = 3;
inline constexpr double kTrainModelCopies = 3;
inline constexpr double kTrainActivationCopies = 3;
TrainMemory trainMemory(const TrainConfig& config, int replicas);

/// Deterministic synthetic data: features uniform in [-1, 1) (SplitMix64 from `seed`, so identical on every
/// platform), labels the argmax of a fixed random linear teacher. features F32 [examples, features], labels I32
/// [examples].
struct SyntheticData {
  Tensor features;
  Tensor labels;
};
SyntheticData makeSyntheticData(const TrainConfig& config);

struct TrainStepLog {
  int step = 0;
  double loss = 0;      ///< mean cross-entropy over the global batch
  double accuracy = 0;  ///< fraction of the global batch classified correctly (before the update)
};

struct TrainResult {
  std::vector<std::string> names;  ///< variable names: W, b (softmax) or W1, b1, W2, b2 (MLP)
  std::vector<Tensor> weights;     ///< final values (this worker's primary copies)
  std::vector<Variable> variables;
  std::vector<TrainStepLog> log;  ///< one entry per step
};

/// Trains with `strategy` (any Strategy; the default one trains on a single replica). Throws Error from the
/// strategy or the data pipeline. `onStep` is called after each step (from the calling thread).
TrainResult trainExample(Strategy& strategy, const TrainConfig& config,
                         const std::function<void(const TrainStepLog&)>& onStep = {});

/// The weights file `collbench train --weights-out` writes: JSON {"format": "collbench-weights", "version": 1,
/// "tool", "command", "replicas_in_sync", "steps", "final_loss", "names": [...], "weights": {name: {"shape": [...],
/// "values": [...]}}}, indented by 2 spaces, keys sorted.
struct WeightsFile {
  static constexpr const char* kFormat = "collbench-weights";
  static constexpr int kVersion = 1;

  std::string tool;     ///< "collbench <version>"
  std::string command;  ///< the command line that trained them
  int replicasInSync = 0;
  int steps = 0;
  double finalLoss = 0;            ///< the last step's loss; 0 when no step ran
  std::vector<std::string> names;  ///< variable names, as TrainResult::names
  std::vector<Tensor> weights;     ///< one per name, in names order (read back as F32, the variables' dtype)
};
/// The file's text, ending in a newline.
std::string toJson(const WeightsFile& w);
/// Reads a weights file's text. Throws Error{InvalidArgument} "<source>: <field path>: <problem>" for a wrong format
/// or version, a missing field, a name without weights, or values that do not fill their shape.
WeightsFile parseWeightsFile(std::string_view text, std::string_view source);

}  // namespace collbench::strategy
