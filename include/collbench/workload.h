#pragma once
/// Synthetic training workloads: a model's gradient tensors and per-layer FLOPs computed from its architecture
/// (shapes, not copied parameter tables), and the collective trace one data-parallel training step of it issues.
///
/// Typical use (what `collbench workload` does):
///   Model m = buildModel("gpt2-xl");
///   WorkloadOptions o;  o.dtype = DType::BF16;  o.worldSize = 16;
///   Trace t = workloadTrace(m, o, [](const std::vector<std::size_t>& bytes) { return myPacking(bytes); });
///
/// Timing model (docs/trace-format.md "Workload traces"): forward runs every layer in order, backward runs them in
/// reverse at twice each layer's forward FLOPs (gradients with respect to inputs and to weights); a gradient is
/// ready when its layer's backward has finished; a pack is all-reduced once all its gradients are ready, so its
/// compute_gap_s is the backward compute since the previous pack was ready. Times are FLOPs / (tflops x 1e12).
/// The trace gives collectives no duration (start_s = end_s = issue_s): `collbench replay` times them.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/trace.h"
#include "collbench/types.h"

namespace collbench {

/// One trainable variable (TF: a trainable_variables entry), whose gradient is one value of the all-reduce list.
struct ModelTensor {
  std::string name;
  std::vector<std::size_t> shape;
  std::size_t elements() const;
};

/// A unit of forward computation and the variables it owns. Backward costs kBackwardFlopsFactor x forwardFlops.
/// A layer may own no variables (a tied output projection) or have no FLOPs (an embedding lookup).
struct ModelLayer {
  std::string name;
  double forwardFlops = 0;  ///< per sample (per sequence for transformers, per image for CNNs)
  std::vector<ModelTensor> tensors;
};

struct Model {
  std::string name;                ///< "resnet50", ...
  std::string description;         ///< one line: architecture and source
  std::string sampleUnit;          ///< "image" or "sequence"
  int sequenceLength = 0;          ///< tokens per sequence (0 for CNNs)
  std::vector<ModelLayer> layers;  ///< forward order (= variable creation order)

  std::size_t parameters() const;
  double forwardFlopsPerSample() const;
  /// Forward + backward: (1 + kBackwardFlopsFactor) x forward.
  double trainingFlopsPerSample() const;
  /// Every tensor in creation order (TF's trainable_variables order, the order of the gradient list).
  std::vector<const ModelTensor*> tensors() const;
};

/// Backward computes gradients with respect to activations and to weights, each costing about one forward
/// (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", sec. 2.1: C ~ 6N per token = 2N forward + 4N
/// backward).
inline constexpr double kBackwardFlopsFactor = 2.0;

/// Architectures of the models `collbench workload` knows, with their hyperparameters and sources:
///   resnet50   ResNet-50 v1.5 (He et al. 2016 Table 1, bottleneck blocks [3,4,6,3], stride on the 3x3 conv as
///              torchvision), 224x224x3 input, 1000 classes; convolutions without bias, batch norm (gamma, beta).
///   bert-large BERT-large (Devlin et al. 2019): 24 layers, hidden 1024, 16 heads, FFN 4096, vocab 30522, 512
///              positions, 2 token types, pooler and the pre-training heads (MLM transform + decoder bias, tied
///              decoder weights; next-sentence classifier): 336.2 M, the released checkpoint's variables (the paper's
///              "340M" is rounded 1.1% up; docs/trace-format.md "Workload traces").
///   gpt2-xl    GPT-2 XL (Radford et al. 2019): 48 layers, d 1600, vocab 50257, context 1024, tied output embedding.
///   llama-7b   LLaMA-7B (Touvron et al. 2023): 32 layers, d 4096, 32 heads, SwiGLU FFN 11008, vocab 32000, RMSNorm
///              (weight only), no biases, untied output projection, context 2048.
std::vector<std::string> modelNames();
/// The model by name (case-insensitive); `sequenceLength` > 0 overrides a transformer's default context (it must not
/// exceed a learned position table). Throws Error{InvalidArgument} naming the value and the known models.
Model buildModel(std::string_view name, int sequenceLength = 0);

struct WorkloadOptions {
  DType dtype = DType::F32;       ///< gradient dtype
  int worldSize = 8;              ///< replicas in sync
  int localReplicas = 0;          ///< per worker; 0 = worldSize (one worker)
  std::string topology = "none";  ///< recorded as topology.name (the replay's default topology when it is a file)
  int batchPerReplica = 0;        ///< samples per replica per step; 0 = defaultBatch(model)
  int steps = 3;
  /// Achieved (not peak) throughput of one GPU, TFLOP/s (1e12 FLOP/s).
  double tflops = kDefaultTflops;
  std::int64_t bytesPerPack = 0;  ///< recorded in the command line only; the pack function applies it
  std::string tool;
  std::string command;

  /// About 30% of an H100 SXM's 989 dense BF16 TFLOP/s (NVIDIA H100 datasheet), a typical model FLOPs utilisation
  /// of large training runs (Chowdhery et al. 2022, PaLM, Table 3: 46% MFU at best, 20-30% common).
  static constexpr double kDefaultTflops = 300;
};

/// Gradients are floating point: float, double, half, bfloat16 (the --dtype values `collbench workload` takes).
bool isGradientDType(DType d);
inline constexpr const char* kGradientDTypes = "float | half | bfloat16 | double";

/// Samples per replica per step when WorkloadOptions::batchPerReplica is 0: 32 images (ResNet-50 MLPerf-style per-GPU
/// batch), 8 sequences for BERT-large and GPT-2 XL, 4 for LLaMA-7B (memory-bound choices on an 80 GB GPU).
int defaultBatch(const Model& m);

/// Groups gradients into packs: given the byte size of each gradient in creation order, returns the packs in the
/// order they are all-reduced, each as indices into that list (every index exactly once). `collbench workload`
/// passes strategy::packValues with --bytes-per-pack (TF's group_by_size on the reversed list).
using PackFunction = std::function<std::vector<std::vector<std::size_t>>(const std::vector<std::size_t>& bytes)>;
/// TF's bytes_per_pack = 0: one pack holding every gradient, last first.
std::vector<std::vector<std::size_t>> onePack(const std::vector<std::size_t>& bytes);

struct WorkloadStepTimes {
  double forwardSeconds = 0;
  double backwardSeconds = 0;
  /// Per tensor (creation order): seconds after the step's start at which its gradient is ready.
  std::vector<double> gradientReadySeconds;
};
/// The compute timeline of one step at `batch` samples per replica.
WorkloadStepTimes stepTimes(const Model& m, int batch, double tflops);

/// The trace of `options.steps` training steps: per step, one all-reduce (sum) per pack with the gaps of the timing
/// model above; each event's issue_s is when its pack's gradients are ready, and its `after` is previous_issue within
/// a step (backward overlaps the reduction of earlier packs) and previous_end for a step's first pack (the optimizer
/// waited for the previous step's last one). Header: backend "workload", simulated true, model, dtype, topology
/// {options.topology, workers, local_replicas}. Throws Error{InvalidArgument} naming the `collbench workload` flag
/// for bad options (--world-size, --local-replicas, --steps, --tflops, --batch, --dtype), or for a pack function that
/// loses or repeats a gradient.
Trace workloadTrace(const Model& m, const WorkloadOptions& options, const PackFunction& pack = onePack);

}  // namespace collbench
