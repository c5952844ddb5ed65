// Workload models: parameter counts from the architectures against the published implementations' counts, FLOPs
// against the 6ND rule and ResNet-50's 4.1 G multiply-adds, and the trace a training step produces.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "collbench/error.h"
#include "collbench/trace.h"
#include "collbench/workload.h"

namespace collbench {
namespace {

struct Expected {
  const char* model;
  std::size_t exact;  ///< the reference implementation's count (torchvision / Hugging Face), from its shapes
  double quoted;      ///< the figure papers and the issue quote
  double quotedTolerance;
};

// Exact counts: torchvision resnet50 (25,557,032), HF BertForPreTraining bert-large (BertModel 335,141,888 plus
// the MLM transform, decoder bias and NSP head), HF gpt2-xl (1,557,611,200), HF LLaMA-7B (6,738,415,616).
// BERT's quoted "340M" (Devlin et al. 2019) is a rounding: the architecture it describes has 336.2 M with the
// pre-training heads, 1.1% below, so its tolerance is 1.5% where the others hold 1%.
const Expected kExpected[] = {
    {"resnet50", 25'557'032, 25.6e6, 0.01},
    {"bert-large", 336'226'108, 340e6, 0.015},
    {"gpt2-xl", 1'557'611'200, 1.56e9, 0.01},
    {"llama-7b", 6'738'415'616, 6.7e9, 0.01},
};

TEST(Workload, ParameterCountsFromArchitecture) {
  for (const Expected& e : kExpected) {
    const Model m = buildModel(e.model);
    EXPECT_EQ(m.parameters(), e.exact) << e.model;
    EXPECT_NEAR(static_cast<double>(m.parameters()) / e.quoted, 1.0, e.quotedTolerance) << e.model;
  }
}

TEST(Workload, ResNet50ForwardIs4Point1GigaMultiplyAdds) {
  const Model m = buildModel("resnet50");
  // The "4.1 GFLOPs" everyone quotes for ResNet-50 v1.5 counts multiply-adds (torchvision: 4.09 GMACs).
  EXPECT_NEAR(m.forwardFlopsPerSample() / 2 / 4.1e9, 1.0, 0.01);
  EXPECT_DOUBLE_EQ(m.trainingFlopsPerSample(), 3 * m.forwardFlopsPerSample());
}

TEST(Workload, TransformerFlopsNearSixNPerToken) {
  for (const char* name : {"bert-large", "gpt2-xl", "llama-7b"}) {
    const Model m = buildModel(name);
    const double perToken = m.trainingFlopsPerSample() / m.sequenceLength;
    const double sixN = 6.0 * static_cast<double>(m.parameters());
    // Attention scores add a few percent and embedding lookups subtract theirs; BERT's MLM decoder runs only on the
    // masked 15% of positions.
    EXPECT_NEAR(perToken / sixN, 1.0, 0.15) << name;
  }
}

TEST(Workload, SequenceLengthOverride) {
  EXPECT_EQ(buildModel("gpt2-xl", 512).sequenceLength, 512);
  EXPECT_LT(buildModel("gpt2-xl", 512).forwardFlopsPerSample(), buildModel("gpt2-xl").forwardFlopsPerSample());
  EXPECT_EQ(buildModel("gpt2-xl", 512).parameters(), buildModel("gpt2-xl").parameters());
  EXPECT_THROW(buildModel("gpt2-xl", 2048), Error);  // longer than the position table
  EXPECT_THROW(buildModel("resnet50", 128), Error);
  EXPECT_EQ(buildModel("LLaMA-7B", 4096).sequenceLength, 4096);  // rotary positions: no table
  try {
    buildModel("gpt5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("resnet50, bert-large, gpt2-xl, llama-7b"), std::string::npos) << e.what();
  }
}

/// Every gradient in its own pack, last first (bytes_per_pack = 1 under TF's rule).
std::vector<std::vector<std::size_t>> perTensor(const std::vector<std::size_t>& bytes) {
  std::vector<std::vector<std::size_t>> packs;
  for (std::size_t i = bytes.size(); i-- > 0;) packs.push_back({i});
  return packs;
}

TEST(Workload, TraceCarriesEveryGradientEachStep) {
  for (const Expected& e : kExpected) {
    const Model m = buildModel(e.model);
    for (DType dt : {DType::F32, DType::BF16}) {
      WorkloadOptions o;
      o.dtype = dt;
      o.worldSize = 4;
      o.steps = 2;
      const Trace t = workloadTrace(m, o);
      ASSERT_EQ(t.events.size(), 2u) << e.model;  // one pack per step
      for (const TraceEvent& ev : t.events) {
        EXPECT_EQ(ev.bytes, m.parameters() * dtypeSize(dt)) << e.model;
        EXPECT_EQ(ev.nranks, 4);
        EXPECT_EQ(ev.kind, Collective::AllReduce);
      }
    }
  }
}

TEST(Workload, GapsFollowBackwardProgress) {
  const Model m = buildModel("resnet50");
  WorkloadOptions o;
  o.worldSize = 8;
  o.steps = 3;
  o.tflops = 100;
  const Trace t = workloadTrace(m, o, perTensor);
  const std::size_t n = m.tensors().size();
  ASSERT_EQ(t.events.size(), 3 * n);
  const WorkloadStepTimes st = stepTimes(m, defaultBatch(m), o.tflops);
  const double step = st.forwardSeconds + st.backwardSeconds;
  EXPECT_NEAR(step, m.trainingFlopsPerSample() * defaultBatch(m) / 100e12, 1e-12);
  std::size_t bytes = 0;
  double gaps = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const TraceEvent& ev = t.events[i];
    bytes += ev.bytes;
    gaps += ev.computeGapSeconds;
    EXPECT_EQ(ev.step, 0);
    EXPECT_EQ(ev.pack, static_cast<int>(i));
    EXPECT_GE(ev.computeGapSeconds, 0);
    if (i > 0) {
      EXPECT_GE(ev.startSeconds, t.events[i - 1].endSeconds);
    }
  }
  EXPECT_EQ(bytes, m.parameters() * 4);
  // fc's gradients are first: the forward pass and fc's backward precede them.
  EXPECT_EQ(t.events[0].bytes, 1000 * 4);  // fc.bias (the last variable) leads the reversed list
  EXPECT_GT(t.events[0].computeGapSeconds, st.forwardSeconds);
  // The step's compute is all in the gaps (conv1's gradients, the first variables, are ready last).
  EXPECT_NEAR(gaps, step, 1e-9);
  // The next step's first gap holds its forward pass and the last layer's backward again.
  EXPECT_NEAR(t.events[n].computeGapSeconds, t.events[0].computeGapSeconds, 1e-9);
  EXPECT_NEAR(t.events.back().endSeconds, 3 * step, 1e-9);
}

TEST(Workload, TraceRoundTripsThroughTheParser) {
  const Model m = buildModel("bert-large", 128);
  WorkloadOptions o;
  o.dtype = DType::F16;
  o.worldSize = 16;
  o.localReplicas = 8;
  o.topology = "h100-4x8-rail";
  o.tool = "collbench test";
  const Trace t = workloadTrace(m, o, perTensor);
  EXPECT_EQ(t.topology.workers, 2);
  EXPECT_EQ(t.topology.localReplicas, 8);
  EXPECT_EQ(parseTrace(toJson(t), "workload"), t);
}

TEST(Workload, BadOptionsAndPackFunctions) {
  const Model m = buildModel("resnet50");
  WorkloadOptions o;
  o.worldSize = 6;
  o.localReplicas = 4;
  EXPECT_THROW(workloadTrace(m, o), Error);
  o.localReplicas = 0;
  o.tflops = 0;
  EXPECT_THROW(workloadTrace(m, o), Error);
  o.tflops = 10;
  EXPECT_THROW(
      workloadTrace(m, o, [](const std::vector<std::size_t>&) { return std::vector<std::vector<std::size_t>>{{0}}; }),
      Error);
  EXPECT_THROW(workloadTrace(m, o,
                             [](const std::vector<std::size_t>& b) {
                               auto p = onePack(b);
                               p[0].push_back(0);
                               return p;
                             }),
               Error);
}

}  // namespace
}  // namespace collbench
