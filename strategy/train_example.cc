#include "collbench/strategy/train_example.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "collbench/error.h"
#include "collbench/json_document.h"
#include "collbench/json_fields.h"

namespace collbench::strategy {

namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using ConstMatrixMap = Eigen::Map<const Matrix>;
using RowVector = Eigen::Matrix<float, 1, Eigen::Dynamic>;

/// SplitMix64 (Steele, Lea, Flood 2014): a fixed, portable sequence (std::uniform_real_distribution is not
/// specified bit-for-bit across standard libraries).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi) from the top 24 bits (exact in float).
  float uniform(float lo, float hi) {
    constexpr float kInv24 = 1.0f / 16777216.0f;
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * kInv24;
  }

 private:
  std::uint64_t state_;
};

/// Streams derived from the seed: data, teacher, and each worker's initial weights.
constexpr std::uint64_t kDataStream = 0x1000;
constexpr std::uint64_t kTeacherStream = 0x2000;
constexpr std::uint64_t kInitStream = 0x3000;

Tensor uniformTensor(Shape shape, float limit, std::uint64_t seed) {
  Tensor t(DType::F32, std::move(shape));
  SplitMix64 rng(seed);
  float* p = t.data<float>();
  for (std::size_t i = 0; i < t.numElements(); ++i) p[i] = rng.uniform(-limit, limit);
  return t;
}

MatrixMap asMatrix(Tensor& t, std::int64_t rows, std::int64_t cols) { return MatrixMap(t.data<float>(), rows, cols); }
ConstMatrixMap asMatrix(const Tensor& t, std::int64_t rows, std::int64_t cols) {
  return ConstMatrixMap(t.data<float>(), rows, cols);
}

Tensor fromMatrix(const Matrix& m, Shape shape) {
  Tensor t(DType::F32, std::move(shape));
  MatrixMap(t.data<float>(), m.rows(), m.cols()) = m;
  return t;
}

/// A batch of --data-files rows ([b, features + 1]: the features, then the label) split into features and labels.
void splitRows(const Tensor& rows, std::int64_t features, std::int64_t classes, Matrix& x,
               std::vector<std::int32_t>& y) {
  const std::int64_t b = rows.rank() == 0 ? 0 : rows.dim(0);
  if (b == 0) return;  // an empty batch (a replica out of data)
  if (rows.rank() != 2 || rows.dim(1) != features + 1) {
    throw Error(Errc::InvalidArgument,
                fmt::format("train: data file rows hold {} numbers, but {} features and a label need {}",
                            rows.rank() == 2 ? rows.dim(1) : 1, features, features + 1));
  }
  const ConstMatrixMap all = asMatrix(rows, b, features + 1);
  x = all.leftCols(features);
  for (std::int64_t i = 0; i < b; ++i) {
    const float label = all(i, features);
    if (!(label >= 0 && label < static_cast<float>(classes)) || label != std::floor(label)) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("train: data file label {} is not a class in 0..{}", label, classes - 1));
    }
    y[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(label);
  }
}

/// Glorot-uniform limit sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010), Keras' default initializer.
float glorotLimit(std::int64_t fanIn, std::int64_t fanOut) {
  return std::sqrt(6.0f / static_cast<float>(fanIn + fanOut));
}

}  // namespace

void TrainConfig::validate() const {
  auto positive = [](const char* field, std::int64_t v) {
    if (v < 1) throw Error(Errc::InvalidArgument, fmt::format("train: {} must be >= 1, got {}", field, v));
  };
  positive("examples", examples);
  positive("features", features);
  positive("classes", classes);
  positive("global_batch", globalBatch);
  if (hidden < 0) throw Error(Errc::InvalidArgument, fmt::format("train: hidden must be >= 0, got {}", hidden));
  if (steps < 0) throw Error(Errc::InvalidArgument, fmt::format("train: steps must be >= 0, got {}", steps));
  if (!(learningRate > 0) || !std::isfinite(learningRate)) {
    throw Error(Errc::InvalidArgument, fmt::format("train: learning_rate must be > 0, got {}", learningRate));
  }
}

void checkDataFiles(const TrainConfig& config) {
  const std::int64_t width = config.features + 1;
  for (const std::string& path : config.dataFiles) {
    std::size_t rows = 0;
    forEachTextRow(path, [&](std::size_t line, const std::vector<double>& values) {
      ++rows;
      if (static_cast<std::int64_t>(values.size()) != width) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("file '{}' line {}: {} number{}, but {} features and a label need {}", path, line,
                                values.size(), values.size() == 1 ? "" : "s", config.features, width));
      }
      const double label = values.back();
      if (!(label >= 0 && label < static_cast<double>(config.classes)) || label != std::floor(label)) {
        throw Error(Errc::InvalidArgument, fmt::format("file '{}' line {}: label {} is not a class in 0..{}", path,
                                                       line, label, config.classes - 1));
      }
    });
    if (rows == 0) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("file '{}' holds no examples (only blank lines and '#' comments)", path));
    }
  }
}

TrainMemory trainMemory(const TrainConfig& config, int replicas) {
  constexpr double kFloatBytes = 4;
  const auto f = static_cast<double>(config.features), c = static_cast<double>(config.classes),
             h = static_cast<double>(config.hidden);
  const double parameters = h > 0 ? f * h + h + h * c + c : f * c + c;
  TrainMemory m;
  if (config.dataFiles.empty()) m.data = kTrainDataCopies * kFloatBytes * static_cast<double>(config.examples) * f;
  m.model = kTrainModelCopies * kFloatBytes * replicas * parameters;
  m.activations = kTrainActivationCopies * kFloatBytes * static_cast<double>(config.globalBatch) * (f + h + c);
  return m;
}

SyntheticData makeSyntheticData(const TrainConfig& config) {
  config.validate();
  SyntheticData d;
  d.features = uniformTensor({config.examples, config.features}, 1.0f, config.seed ^ kDataStream);
  const Tensor teacher = uniformTensor({config.features, config.classes}, 1.0f, config.seed ^ kTeacherStream);
  const Matrix logits =
      asMatrix(d.features, config.examples, config.features) * asMatrix(teacher, config.features, config.classes);
  d.labels = Tensor(DType::I32, {config.examples});
  std::int32_t* y = d.labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < config.examples; ++i) {
    Eigen::Index best = 0;
    logits.row(i).maxCoeff(&best);
    y[i] = static_cast<std::int32_t>(best);
  }
  return d;
}

TrainResult trainExample(Strategy& strategy, const TrainConfig& config,
                         const std::function<void(const TrainStepLog&)>& onStep) {
  config.validate();
  const std::int64_t f = config.features, c = config.classes, h = config.hidden, B = config.globalBatch;
  const bool mlp = h > 0;
  const bool fromFiles = !config.dataFiles.empty();
  const Dataset source = fromFiles ? Dataset::fromTextFiles(config.dataFiles, DType::F32) : [&] {
    const SyntheticData data = makeSyntheticData(config);
    return Dataset::fromTensorSlices({data.features, data.labels});
  }();
  const Dataset dataset =
      source.repeat().batch(B, /*dropRemainder=*/true).withOptions(DatasetOptions{config.shardPolicy});
  const DistributedDataset dist = strategy.experimentalDistributeDataset(dataset);

  TrainResult result;
  {
    StrategyScope scope = strategy.scope();
    // Each worker draws its own initial weights; a mirrored variable takes the chief's (broadcast).
    auto init = [&](const Shape& shape, float limit, std::uint64_t stream) {
      return [=, seed = config.seed](int worker) {
        return limit == 0 ? Tensor(DType::F32, shape)
                          : uniformTensor(shape, limit,
                                          seed ^ (kInitStream + stream) ^ (static_cast<std::uint64_t>(worker) << 32));
      };
    };
    if (mlp) {
      result.names = {"W1", "b1", "W2", "b2"};
      result.variables.push_back(createVariable(init({f, h}, glorotLimit(f, h), 1), {"W1"}));
      result.variables.push_back(createVariable(init({h}, 0, 2), {"b1"}));
      result.variables.push_back(createVariable(init({h, c}, glorotLimit(h, c), 3), {"W2"}));
      result.variables.push_back(createVariable(init({c}, 0, 4), {"b2"}));
    } else {
      result.names = {"W", "b"};
      result.variables.push_back(createVariable(init({f, c}, glorotLimit(f, c), 1), {"W"}));
      result.variables.push_back(createVariable(init({c}, 0, 2), {"b"}));
    }
  }
  const std::vector<Variable>& vars = result.variables;
  const float lr = static_cast<float>(config.learningRate);
  const float invGlobal = 1.0f / static_cast<float>(B);

  // One replica's step: forward and backward on its piece of the global batch, gradients all-reduced (SUM: each
  // replica's loss is already divided by the global batch, TF's compute_average_loss), SGD on its own copy.
  auto stepFn = [&](const Element& batch) {
    const std::int64_t b = batch.at(0).dim(0);
    Matrix x(b, f);
    std::vector<std::int32_t> labels;
    if (fromFiles) {
      labels.resize(static_cast<std::size_t>(b));
      splitRows(batch.at(0), f, c, x, labels);
    } else {
      x = asMatrix(batch.at(0), b, f);
      const std::int32_t* given = batch.at(1).data<std::int32_t>();
      labels.assign(given, given + b);
    }
    const std::int32_t* y = labels.data();
    Matrix hidden;
    Matrix logits;
    if (mlp) {
      hidden =
          ((x * asMatrix(vars[0].local(), f, h)).rowwise() + asMatrix(vars[1].local(), 1, h).row(0)).cwiseMax(0.0f);
      logits = (hidden * asMatrix(vars[2].local(), h, c)).rowwise() + asMatrix(vars[3].local(), 1, c).row(0);
    } else {
      logits = (x * asMatrix(vars[0].local(), f, c)).rowwise() + asMatrix(vars[1].local(), 1, c).row(0);
    }
    // Softmax cross-entropy, numerically stable; dlogits = (p - onehot) / B.
    Matrix dlogits(b, c);
    double lossSum = 0;
    double correct = 0;
    for (std::int64_t i = 0; i < b; ++i) {
      Eigen::Index argmax = 0;
      const float m = logits.row(i).maxCoeff(&argmax);
      const RowVector e = (logits.row(i).array() - m).exp().matrix();
      const float z = e.sum();
      lossSum += std::log(z) - (logits(i, y[i]) - m);
      correct += argmax == y[i] ? 1.0 : 0.0;
      dlogits.row(i) = e / z;
      dlogits(i, y[i]) -= 1.0f;
    }
    dlogits *= invGlobal;
    std::vector<Tensor> grads;
    if (mlp) {
      const Matrix dHidden = (dlogits * asMatrix(vars[2].local(), h, c).transpose())
                                 .cwiseProduct((hidden.array() > 0.0f).cast<float>().matrix());
      grads.push_back(fromMatrix(x.transpose() * dHidden, {f, h}));
      grads.push_back(fromMatrix(dHidden.colwise().sum(), {h}));
      grads.push_back(fromMatrix(hidden.transpose() * dlogits, {h, c}));
      grads.push_back(fromMatrix(dlogits.colwise().sum(), {c}));
    } else {
      grads.push_back(fromMatrix(x.transpose() * dlogits, {f, c}));
      grads.push_back(fromMatrix(dlogits.colwise().sum(), {c}));
    }
    grads = getReplicaContext()->allReduce(ReduceOp::Sum, grads);
    for (std::size_t k = 0; k < vars.size(); ++k) {
      Tensor& w = vars[k].local();
      Eigen::Map<Eigen::ArrayXf>(w.data<float>(), static_cast<Eigen::Index>(w.numElements())) -=
          lr *
          Eigen::Map<const Eigen::ArrayXf>(grads[k].data<float>(), static_cast<Eigen::Index>(grads[k].numElements()));
    }
    return Tensor::fromVector(std::vector<double>{lossSum / static_cast<double>(B), correct});
  };

  DistributedIterator it = dist.iterator();
  for (int step = 0; step < config.steps; ++step) {
    std::optional<PerReplicaValues<Element>> batch = it.next();
    if (!batch) throw Error(Errc::InvalidArgument, fmt::format("train: input ended at step {}", step));
    const PerReplica stats = strategy.run(stepFn, *batch);
    const Tensor total = strategy.reduce(ReduceOp::Sum, stats);
    TrainStepLog log{step, total.at(0), total.at(1) / static_cast<double>(B)};
    result.log.push_back(log);
    if (onStep) onStep(log);
  }
  for (const Variable& v : vars) result.weights.push_back(v.value());
  return result;
}

std::string toJson(const WeightsFile& w) {
  nlohmann::json weights = nlohmann::json::object();
  for (std::size_t k = 0; k < w.weights.size(); ++k) {
    weights[w.names[k]] = {{"shape", w.weights[k].shape()}, {"values", w.weights[k].toDoubles()}};
  }
  const nlohmann::json j = {{"format", WeightsFile::kFormat},
                            {"version", WeightsFile::kVersion},
                            {"tool", w.tool},
                            {"command", w.command},
                            {"replicas_in_sync", w.replicasInSync},
                            {"steps", w.steps},
                            {"final_loss", w.finalLoss},
                            {"names", w.names},
                            {"weights", weights}};
  return j.dump(2) + "\n";
}

WeightsFile parseWeightsFile(std::string_view text, std::string_view source) {
  const nlohmann::json doc = parseJsonDocument(text, source);
  const JsonFields top(source, "", doc);
  top.requireFormat(WeightsFile::kFormat, WeightsFile::kVersion);
  WeightsFile w;
  w.tool = top.string("tool");
  w.command = top.string("command");
  w.replicasInSync = static_cast<int>(top.integer("replicas_in_sync", 1, std::numeric_limits<int>::max()));
  w.steps = static_cast<int>(top.integer("steps", 0, std::numeric_limits<int>::max()));
  w.finalLoss = top.number("final_loss");
  const nlohmann::json& names = top.array("names");
  const JsonFields weights = top.object("weights");
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (!names[k].is_string()) top.fail(fmt::format("names[{}]", k), "expected a string, got " + echoJson(names[k]));
    const std::string name = names[k].get<std::string>();
    const JsonFields entry = weights.object(name.c_str());
    Shape shape;
    const nlohmann::json& dims = entry.array("shape");
    for (std::size_t d = 0; d < dims.size(); ++d)
      shape.push_back(entry.integerValue(dims[d], fmt::format("shape[{}]", d), 0));
    std::vector<double> values;
    const nlohmann::json& numbers = entry.array("values");
    for (std::size_t i = 0; i < numbers.size(); ++i) {
      // Non-finite values are written as null (nlohmann's dump).
      if (numbers[i].is_null()) {
        values.push_back(std::numeric_limits<double>::quiet_NaN());
      } else if (numbers[i].is_number()) {
        values.push_back(numbers[i].get<double>());
      } else {
        entry.fail(fmt::format("values[{}]", i), "expected a number, got " + echoJson(numbers[i]));
      }
    }
    try {
      w.weights.push_back(Tensor::fromDoubles(DType::F32, values, shape));
    } catch (const Error& e) {
      entry.fail("values", e.what());
    }
    w.names.push_back(name);
  }
  return w;
}

}  // namespace collbench::strategy
