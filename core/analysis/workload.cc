// Model architectures as shapes, and the trace of data-parallel training steps over them (collbench/workload.h).
#include "collbench/workload.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>

#include "collbench/error.h"

namespace collbench {
namespace {

/// One multiply-accumulate is two floating-point operations; every FLOP count here counts both.
constexpr double kFlopsPerMac = 2.0;
/// Fraction of positions BERT's masked-LM head predicts (Devlin et al. 2019, sec. 3.1: "we mask 15% of all
/// WordPiece tokens"); the decoder's vocab projection runs only there (google-research/bert gathers them).
constexpr double kBertMaskedFraction = 0.15;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

ModelTensor tensor(std::string name, std::vector<std::size_t> shape) {
  return ModelTensor{std::move(name), std::move(shape)};
}

// ---------------------------------------------------------------------------------------------------------------
// ResNet-50 v1.5 (torchvision's resnet50: the stride sits on the 3x3 convolution of the first block of a stage).

/// ImageNet input edge and classes (He et al. 2016, sec. 3.4).
constexpr std::size_t kImageEdge = 224;
constexpr std::size_t kImageChannels = 3;
constexpr std::size_t kImageNetClasses = 1000;
/// Bottleneck blocks per stage (He et al. 2016, Table 1, 50-layer column) and their widths; a block's output has
/// kBottleneckExpansion times its width.
constexpr int kResNet50Blocks[] = {3, 4, 6, 3};
constexpr std::size_t kResNetWidths[] = {64, 128, 256, 512};
constexpr std::size_t kBottleneckExpansion = 4;
constexpr std::size_t kStemChannels = 64;

class ResNetBuilder {
 public:
  explicit ResNetBuilder(Model& m) : m_(m) {}

  /// A convolution (no bias) followed by batch norm (gamma, beta): one layer. `edge` is the output's height = width.
  void convBn(const std::string& conv, const std::string& bn, std::size_t k, std::size_t cin, std::size_t cout,
              std::size_t edge) {
    ModelLayer l;
    l.name = conv;
    l.forwardFlops = kFlopsPerMac * static_cast<double>(k * k * cin * cout) * static_cast<double>(edge * edge);
    l.tensors.push_back(tensor(conv + ".weight", {cout, cin, k, k}));
    l.tensors.push_back(tensor(bn + ".weight", {cout}));
    l.tensors.push_back(tensor(bn + ".bias", {cout}));
    m_.layers.push_back(std::move(l));
  }

  void build() {
    std::size_t edge = kImageEdge / 2;  // 7x7 stride-2 stem
    convBn("conv1", "bn1", 7, kImageChannels, kStemChannels, edge);
    edge /= 2;  // 3x3 stride-2 max pool
    std::size_t in = kStemChannels;
    for (std::size_t stage = 0; stage < std::size(kResNet50Blocks); ++stage) {
      const std::size_t w = kResNetWidths[stage];
      const std::size_t out = w * kBottleneckExpansion;
      for (int b = 0; b < kResNet50Blocks[stage]; ++b) {
        const std::string p = fmt::format("layer{}.{}.", stage + 1, b);
        const std::size_t stride = (b == 0 && stage > 0) ? 2 : 1;
        const std::size_t outEdge = edge / stride;
        convBn(p + "conv1", p + "bn1", 1, in, w, edge);
        convBn(p + "conv2", p + "bn2", 3, w, w, outEdge);
        convBn(p + "conv3", p + "bn3", 1, w, out, outEdge);
        if (b == 0) convBn(p + "downsample.0", p + "downsample.1", 1, in, out, outEdge);
        in = out;
        edge = outEdge;
      }
    }
    ModelLayer fc;
    fc.name = "fc";
    fc.forwardFlops = kFlopsPerMac * static_cast<double>(in * kImageNetClasses);
    fc.tensors.push_back(tensor("fc.weight", {kImageNetClasses, in}));
    fc.tensors.push_back(tensor("fc.bias", {kImageNetClasses}));
    m_.layers.push_back(std::move(fc));
  }

 private:
  Model& m_;
};

Model resnet50() {
  Model m;
  m.name = "resnet50";
  m.description = "ResNet-50 v1.5 (He et al. 2016; torchvision), bottleneck [3,4,6,3], 224x224 images";
  m.sampleUnit = "image";
  ResNetBuilder(m).build();
  return m;
}

// ---------------------------------------------------------------------------------------------------------------
// Transformers. FLOPs per sequence of S tokens: 2 per weight per token for every matmul, plus attention's
// QK^T and (softmax)V, each S x S x d multiply-accumulates per layer (Kaplan et al. 2020, Table 1: 2 n_layer n_ctx
// d_attn per token forward).

struct TransformerShape {
  std::size_t layers, d, heads, ffn, vocab;
  int context;  ///< default sequence length and, for learned positions, the table size
};

/// BERT-large (Devlin et al. 2019, sec. 3: L=24, H=1024, A=16, FFN 4H; vocab and positions from the released
/// bert_config.json of uncased_L-24_H-1024_A-16).
constexpr TransformerShape kBertLarge{24, 1024, 16, 4096, 30522, 512};
constexpr std::size_t kBertTypeVocab = 2;
constexpr std::size_t kBertNspClasses = 2;
/// GPT-2 XL (Radford et al. 2019, Table 2: 48 layers, d_model 1600; n_ctx 1024, vocab 50257 from its config).
constexpr TransformerShape kGpt2Xl{48, 1600, 25, 6400, 50257, 1024};
/// LLaMA-7B (Touvron et al. 2023, Table 2: dim 4096, 32 heads, 32 layers; SwiGLU hidden 11008 = 2/3 x 4d rounded
/// to 256 as in its params.json; vocab 32000; context 2048).
constexpr TransformerShape kLlama7b{32, 4096, 32, 11008, 32000, 2048};

double attentionScoreFlops(std::size_t S, std::size_t d) {
  return 2.0 * kFlopsPerMac * static_cast<double>(S) * static_cast<double>(S) * static_cast<double>(d);
}
double matmulFlops(std::size_t tokens, std::size_t in, std::size_t out) {
  return kFlopsPerMac * static_cast<double>(tokens) * static_cast<double>(in) * static_cast<double>(out);
}

Model bertLarge(int seq) {
  const TransformerShape& t = kBertLarge;
  const std::size_t S = static_cast<std::size_t>(seq), d = t.d;
  Model m;
  m.name = "bert-large";
  m.description =
      "BERT-large (Devlin et al. 2019): 24 layers, hidden 1024, 16 heads, FFN 4096, with pre-training heads";
  m.sampleUnit = "sequence";
  m.sequenceLength = seq;
  ModelLayer emb{"embeddings", 0, {}};  // lookups: no matmul FLOPs
  emb.tensors = {tensor("embeddings.word_embeddings.weight", {t.vocab, d}),
                 tensor("embeddings.position_embeddings.weight", {static_cast<std::size_t>(t.context), d}),
                 tensor("embeddings.token_type_embeddings.weight", {kBertTypeVocab, d}),
                 tensor("embeddings.LayerNorm.weight", {d}), tensor("embeddings.LayerNorm.bias", {d})};
  m.layers.push_back(std::move(emb));
  for (std::size_t i = 0; i < t.layers; ++i) {
    const std::string p = fmt::format("encoder.layer.{}.", i);
    ModelLayer att{p + "attention", 4 * matmulFlops(S, d, d) + attentionScoreFlops(S, d), {}};
    for (const char* w : {"query", "key", "value"}) {
      att.tensors.push_back(tensor(p + "attention.self." + w + ".weight", {d, d}));
      att.tensors.push_back(tensor(p + "attention.self." + w + ".bias", {d}));
    }
    att.tensors.push_back(tensor(p + "attention.output.dense.weight", {d, d}));
    att.tensors.push_back(tensor(p + "attention.output.dense.bias", {d}));
    att.tensors.push_back(tensor(p + "attention.output.LayerNorm.weight", {d}));
    att.tensors.push_back(tensor(p + "attention.output.LayerNorm.bias", {d}));
    m.layers.push_back(std::move(att));
    ModelLayer ffn{p + "ffn", matmulFlops(S, d, t.ffn) + matmulFlops(S, t.ffn, d), {}};
    ffn.tensors = {tensor(p + "intermediate.dense.weight", {t.ffn, d}), tensor(p + "intermediate.dense.bias", {t.ffn}),
                   tensor(p + "output.dense.weight", {d, t.ffn}),       tensor(p + "output.dense.bias", {d}),
                   tensor(p + "output.LayerNorm.weight", {d}),          tensor(p + "output.LayerNorm.bias", {d})};
    m.layers.push_back(std::move(ffn));
  }
  // The pooler and the next-sentence head see only the [CLS] token.
  m.layers.push_back(ModelLayer{
      "pooler", matmulFlops(1, d, d), {tensor("pooler.dense.weight", {d, d}), tensor("pooler.dense.bias", {d})}});
  const auto masked = static_cast<std::size_t>(std::lround(static_cast<double>(S) * kBertMaskedFraction));
  // MLM head: transform (dense + LayerNorm) and the decoder, whose weight is the word embedding (tied: its gradient
  // accumulates into embeddings.word_embeddings.weight) and whose bias is its own.
  m.layers.push_back(ModelLayer{
      "cls.predictions",
      matmulFlops(masked, d, d) + matmulFlops(masked, d, t.vocab),
      {tensor("cls.predictions.transform.dense.weight", {d, d}), tensor("cls.predictions.transform.dense.bias", {d}),
       tensor("cls.predictions.transform.LayerNorm.weight", {d}),
       tensor("cls.predictions.transform.LayerNorm.bias", {d}), tensor("cls.predictions.bias", {t.vocab})}});
  m.layers.push_back(ModelLayer{"cls.seq_relationship",
                                matmulFlops(1, d, kBertNspClasses),
                                {tensor("cls.seq_relationship.weight", {kBertNspClasses, d}),
                                 tensor("cls.seq_relationship.bias", {kBertNspClasses})}});
  return m;
}

Model gpt2Xl(int seq) {
  const TransformerShape& t = kGpt2Xl;
  const std::size_t S = static_cast<std::size_t>(seq), d = t.d;
  Model m;
  m.name = "gpt2-xl";
  m.description = "GPT-2 XL (Radford et al. 2019): 48 layers, d 1600, vocab 50257, context 1024, tied embeddings";
  m.sampleUnit = "sequence";
  m.sequenceLength = seq;
  m.layers.push_back(
      ModelLayer{"embeddings",
                 0,
                 {tensor("wte.weight", {t.vocab, d}), tensor("wpe.weight", {static_cast<std::size_t>(t.context), d})}});
  for (std::size_t i = 0; i < t.layers; ++i) {
    const std::string p = fmt::format("h.{}.", i);
    // GPT-2's Conv1D stores weights [in, out].
    m.layers.push_back(
        ModelLayer{p + "attn",
                   matmulFlops(S, d, 3 * d) + matmulFlops(S, d, d) + attentionScoreFlops(S, d),
                   {tensor(p + "ln_1.weight", {d}), tensor(p + "ln_1.bias", {d}),
                    tensor(p + "attn.c_attn.weight", {d, 3 * d}), tensor(p + "attn.c_attn.bias", {3 * d}),
                    tensor(p + "attn.c_proj.weight", {d, d}), tensor(p + "attn.c_proj.bias", {d})}});
    m.layers.push_back(ModelLayer{p + "mlp",
                                  matmulFlops(S, d, t.ffn) + matmulFlops(S, t.ffn, d),
                                  {tensor(p + "ln_2.weight", {d}), tensor(p + "ln_2.bias", {d}),
                                   tensor(p + "mlp.c_fc.weight", {d, t.ffn}), tensor(p + "mlp.c_fc.bias", {t.ffn}),
                                   tensor(p + "mlp.c_proj.weight", {t.ffn, d}), tensor(p + "mlp.c_proj.bias", {d})}});
  }
  m.layers.push_back(ModelLayer{"ln_f", 0, {tensor("ln_f.weight", {d}), tensor("ln_f.bias", {d})}});
  // Output projection with the transposed token embedding: FLOPs, no variable of its own.
  m.layers.push_back(ModelLayer{"lm_head", matmulFlops(S, d, t.vocab), {}});
  return m;
}

Model llama7b(int seq) {
  const TransformerShape& t = kLlama7b;
  const std::size_t S = static_cast<std::size_t>(seq), d = t.d;
  Model m;
  m.name = "llama-7b";
  m.description = "LLaMA-7B (Touvron et al. 2023): 32 layers, d 4096, SwiGLU 11008, vocab 32000, RMSNorm, untied head";
  m.sampleUnit = "sequence";
  m.sequenceLength = seq;
  m.layers.push_back(ModelLayer{"embed_tokens", 0, {tensor("model.embed_tokens.weight", {t.vocab, d})}});
  for (std::size_t i = 0; i < t.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    ModelLayer att{p + "self_attn", 4 * matmulFlops(S, d, d) + attentionScoreFlops(S, d), {}};
    att.tensors.push_back(tensor(p + "input_layernorm.weight", {d}));
    for (const char* w : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      att.tensors.push_back(tensor(p + "self_attn." + w + ".weight", {d, d}));
    }
    m.layers.push_back(std::move(att));
    ModelLayer mlp{p + "mlp", 2 * matmulFlops(S, d, t.ffn) + matmulFlops(S, t.ffn, d), {}};
    mlp.tensors = {tensor(p + "post_attention_layernorm.weight", {d}), tensor(p + "mlp.gate_proj.weight", {t.ffn, d}),
                   tensor(p + "mlp.up_proj.weight", {t.ffn, d}), tensor(p + "mlp.down_proj.weight", {d, t.ffn})};
    m.layers.push_back(std::move(mlp));
  }
  m.layers.push_back(ModelLayer{"norm", 0, {tensor("model.norm.weight", {d})}});
  m.layers.push_back(ModelLayer{"lm_head", matmulFlops(S, d, t.vocab), {tensor("lm_head.weight", {t.vocab, d})}});
  return m;
}

struct ModelEntry {
  const char* name;
  int context;            ///< default sequence length (0: not a sequence model)
  bool learnedPositions;  ///< the context is a hard limit (a position table)
  Model (*build)(int seq);
};

const ModelEntry kModels[] = {
    {"resnet50", 0, false, [](int) { return resnet50(); }},
    {"bert-large", kBertLarge.context, true, bertLarge},
    {"gpt2-xl", kGpt2Xl.context, true, gpt2Xl},
    {"llama-7b", kLlama7b.context, false, llama7b},
};

}  // namespace

std::size_t ModelTensor::elements() const {
  return std::accumulate(shape.begin(), shape.end(), std::size_t{1}, std::multiplies<>());
}

std::size_t Model::parameters() const {
  std::size_t n = 0;
  for (const ModelLayer& l : layers) {
    for (const ModelTensor& t : l.tensors) n += t.elements();
  }
  return n;
}

double Model::forwardFlopsPerSample() const {
  double f = 0;
  for (const ModelLayer& l : layers) f += l.forwardFlops;
  return f;
}

double Model::trainingFlopsPerSample() const { return (1 + kBackwardFlopsFactor) * forwardFlopsPerSample(); }

std::vector<const ModelTensor*> Model::tensors() const {
  std::vector<const ModelTensor*> out;
  for (const ModelLayer& l : layers) {
    for (const ModelTensor& t : l.tensors) out.push_back(&t);
  }
  return out;
}

std::vector<std::string> modelNames() {
  std::vector<std::string> names;
  for (const ModelEntry& e : kModels) names.emplace_back(e.name);
  return names;
}

Model buildModel(std::string_view name, int sequenceLength) {
  const std::string want = lower(name);
  for (const ModelEntry& e : kModels) {
    if (want != e.name) continue;
    if (sequenceLength < 0) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--seq-len must be >= 1 (or 0 for the model's context), got {}", sequenceLength));
    }
    if (e.context == 0) {
      if (sequenceLength > 0) {
        throw Error(Errc::InvalidArgument, fmt::format("{} takes images, not sequences: remove --seq-len", e.name));
      }
      return e.build(0);
    }
    if (e.learnedPositions && sequenceLength > e.context) {
      throw Error(Errc::InvalidArgument, fmt::format("{} has {} learned positions; --seq-len {} is longer", e.name,
                                                     e.context, sequenceLength));
    }
    return e.build(sequenceLength > 0 ? sequenceLength : e.context);
  }
  std::string known;
  for (const ModelEntry& e : kModels) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw Error(Errc::InvalidArgument, fmt::format("unknown model '{}' (known: {})", printable(name), known));
}

bool isGradientDType(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::F16 || d == DType::BF16; }

int defaultBatch(const Model& m) {
  if (m.name == "resnet50") return 32;
  if (m.name == "llama-7b") return 4;
  return 8;
}

std::vector<std::vector<std::size_t>> onePack(const std::vector<std::size_t>& bytes) {
  std::vector<std::size_t> all(bytes.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = all.size() - 1 - i;
  if (all.empty()) return {};
  return {all};
}

WorkloadStepTimes stepTimes(const Model& m, int batch, double tflops) {
  const double flopsPerSecond = tflops * 1e12;
  const double samples = batch;
  WorkloadStepTimes st;
  for (const ModelLayer& l : m.layers) st.forwardSeconds += l.forwardFlops * samples / flopsPerSecond;
  // Backward walks the layers in reverse; a layer's gradients are ready when its backward ends.
  std::vector<double> layerReady(m.layers.size());
  double t = st.forwardSeconds;
  for (std::size_t k = m.layers.size(); k-- > 0;) {
    t += kBackwardFlopsFactor * m.layers[k].forwardFlops * samples / flopsPerSecond;
    layerReady[k] = t;
  }
  st.backwardSeconds = t - st.forwardSeconds;
  for (std::size_t k = 0; k < m.layers.size(); ++k) {
    for (std::size_t j = 0; j < m.layers[k].tensors.size(); ++j) st.gradientReadySeconds.push_back(layerReady[k]);
  }
  return st;
}

Trace workloadTrace(const Model& m, const WorkloadOptions& o, const PackFunction& pack) {
  // Messages name the `collbench workload` flag of each option: that is where users set them.
  if (o.worldSize < 1) {
    throw Error(Errc::InvalidArgument, fmt::format("--world-size must be >= 1, got {}", o.worldSize));
  }
  const int local = o.localReplicas == 0 ? o.worldSize : o.localReplicas;
  if (local < 1 || o.worldSize % local != 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--local-replicas {} must divide --world-size {}", o.localReplicas, o.worldSize));
  }
  if (o.steps < 1) throw Error(Errc::InvalidArgument, fmt::format("--steps must be >= 1, got {}", o.steps));
  if (!(o.tflops > 0) || !std::isfinite(o.tflops)) {
    throw Error(Errc::InvalidArgument, fmt::format("--tflops must be a number > 0 (TFLOP/s), got {}", o.tflops));
  }
  if (o.batchPerReplica < 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--batch must be >= 1 (or 0 for the default), got {}", o.batchPerReplica));
  }
  if (!isGradientDType(o.dtype)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--dtype {}: gradients are floating point ({})", toString(o.dtype), kGradientDTypes));
  }
  const int batch = o.batchPerReplica == 0 ? defaultBatch(m) : o.batchPerReplica;

  const std::vector<const ModelTensor*> tensors = m.tensors();
  const std::size_t es = dtypeSize(o.dtype);
  std::vector<std::size_t> bytes;
  for (const ModelTensor* t : tensors) bytes.push_back(t->elements() * es);
  const std::vector<std::vector<std::size_t>> packs = pack(bytes);
  std::vector<int> seen(tensors.size(), 0);
  for (const auto& p : packs) {
    for (std::size_t i : p) {
      if (i >= tensors.size() || seen[i]++) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("packing lost or repeated gradient {} of {} (a pack function bug)", i, tensors.size()));
      }
    }
  }
  if (std::count(seen.begin(), seen.end(), 0) != 0) {
    throw Error(Errc::InvalidArgument, "packing left gradients out (a pack function bug)");
  }

  const WorkloadStepTimes st = stepTimes(m, batch, o.tflops);
  const double stepSeconds = st.forwardSeconds + st.backwardSeconds;
  Trace t;
  t.worldSize = o.worldSize;
  t.topology = TraceTopology{o.topology, o.worldSize / local, local};
  t.backend = "workload";
  t.simulated = true;
  t.model = m.name;
  t.dtype = o.dtype;
  t.tool = o.tool;
  t.command = o.command;
  double previous = 0;  // when the last collective ended (the trace's origin at first)
  for (int s = 0; s < o.steps; ++s) {
    const double stepStart = s * stepSeconds;
    double lastReady = 0;
    for (std::size_t k = 0; k < packs.size(); ++k) {
      double ready = 0;
      std::size_t packBytes = 0;
      for (std::size_t i : packs[k]) {
        ready = std::max(ready, st.gradientReadySeconds[i]);
        packBytes += bytes[i];
      }
      // A pack cannot start before the previous one (collectives run in program order).
      ready = std::max(ready, lastReady);
      lastReady = ready;
      TraceEvent e;
      e.kind = Collective::AllReduce;
      e.bytes = packBytes;
      e.dtype = o.dtype;
      e.op = ReduceOp::Sum;
      e.group = std::string(kTraceGroupReplicas);
      e.nranks = o.worldSize;
      e.startSeconds = e.endSeconds = stepStart + ready;
      e.issueSeconds = e.startSeconds;
      // Within a step, backward goes on while earlier packs are reduced; the first pack's compute (the forward
      // pass) starts only when the previous step's last pack is reduced: the optimizer needs every gradient.
      e.after = k == 0 ? TraceAfter::PreviousEnd : TraceAfter::PreviousIssue;
      e.computeGapSeconds = e.startSeconds - previous;
      e.step = s;
      e.pack = static_cast<int>(k);
      previous = e.endSeconds;  // = its issue: the generator gives collectives no duration
      t.events.push_back(std::move(e));
    }
  }
  return t;
}

}  // namespace collbench
