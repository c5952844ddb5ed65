// MultiWorkerMirroredStrategy: properties, contexts, run, all-reduce, reduce, variables, deprecated names, and the
// error cases (mismatched or missing collectives, failing replicas, timeouts).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <thread>

#include "collbench/selector.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "collbench/topology.h"
#include "collbench/trace.h"
#include "test_support.h"

namespace collbench::strategy {
namespace {

using testing::expectError;
using testing::expectInvalid;
using testing::LogCapture;
using testing::makeStrategy;
using testing::workerCluster;
using CI = CommunicationImplementation;

Tensor f32(std::vector<float> v) { return Tensor::fromVector(v); }
Tensor f32(std::vector<float> v, Shape s) { return Tensor::fromVector(v, std::move(s)); }

/// Replica `id`'s test value: [id + 1, 10 (id + 1)].
Tensor replicaValue(int id) { return f32({static_cast<float>(id + 1), static_cast<float>(10 * (id + 1))}); }

// -----------------------------------------------------------------------------------------------------------------
// Construction and properties

TEST(Strategy, PropertiesOfAWorkerCluster) {
  auto s = makeStrategy(3, 2, {}, {}, /*rank=*/1);
  EXPECT_EQ(s->name(), "MultiWorkerMirroredStrategy");
  EXPECT_EQ(s->numWorkers(), 3);
  EXPECT_EQ(s->localReplicas(), 2);
  EXPECT_EQ(s->numReplicasInSync(), 6);
  EXPECT_EQ(s->taskType(), "worker");
  EXPECT_EQ(s->taskId(), 1);
  EXPECT_FALSE(s->isChief());
  EXPECT_EQ(s->workerRank(), 1);
  EXPECT_EQ(s->clusterResolver().numWorkers(), 3);
  EXPECT_FALSE(s->hierarchical()) << "threads mode: one flat collective over shared memory";
  EXPECT_EQ(s->hostedReplicaIds(), (std::vector<int>{0, 1, 2, 3, 4, 5})) << "threads mode hosts every worker";
  // timeout_seconds unset: the strategy's default (COLLBENCH_TIMEOUT_SECONDS, else 60 s), never "wait forever".
  EXPECT_EQ(s->communicationOptions(), (CommunicationOptions{0, defaultTimeoutSeconds(), CI::Auto}));
  EXPECT_EQ(s->implementationChoice().effective, CI::Ring);
  EXPECT_EQ(s->inputContext(2).inputPipelineId(), 2);
}

TEST(Strategy, ChiefAndSingleWorker) {
  testing::registerBackendsOnce();
  ClusterSpec spec;
  spec.jobs["chief"] = {"c:1000"};
  spec.jobs["worker"] = {"w0:1000", "w1:1000"};
  MultiWorkerMirroredStrategy chief({}, std::make_shared<SimpleClusterResolver>(spec, "chief", 0));
  EXPECT_TRUE(chief.isChief());
  EXPECT_EQ(chief.workerRank(), 0);
  EXPECT_EQ(chief.numReplicasInSync(), 3);
  EXPECT_FALSE(chief.hierarchical()) << "one replica per worker: flat";
  MultiWorkerMirroredStrategy worker({}, std::make_shared<SimpleClusterResolver>(spec, "worker", 0));
  EXPECT_FALSE(worker.isChief());
  EXPECT_EQ(worker.workerRank(), 1);
  auto single = makeStrategy(1, 4);
  EXPECT_TRUE(single->isChief());
  EXPECT_EQ(single->numReplicasInSync(), 4);
  EXPECT_FALSE(single->hierarchical());
  // TF's default resolver is TF_CONFIG's; an environment without TF_CONFIG is single-worker mode.
  auto fromEnv =
      std::make_shared<TFConfigClusterResolver>(TFConfigClusterResolver::fromEnvironment(environmentFromMap({})));
  MultiWorkerMirroredStrategy local({}, fromEnv);
  EXPECT_EQ(local.numReplicasInSync(), 1);
}

TEST(Strategy, ConstructionErrors) {
  testing::registerBackendsOnce();
  expectInvalid([] { makeStrategy(1, 1, {-5, std::nullopt, CI::Auto}); }, {"bytes_per_pack", "-5"});
  expectInvalid([] { makeStrategy(1, 1, {0, -1.0, CI::Auto}); }, {"timeout_seconds"});
  expectInvalid([] { makeStrategy(1, 0); }, {"local_replicas must be at least 1, got 0"});
  ClusterSpec spec;
  spec.jobs["worker"] = {"w0:1000"};
  spec.jobs["ps"] = {"p0:1000"};
  expectInvalid([&] { MultiWorkerMirroredStrategy({}, std::make_shared<SimpleClusterResolver>(spec, "ps", 0)); },
                {"ps", "has no rank"});
  StrategyOptions unknown;
  unknown.backend = "no_such_backend";
  expectInvalid([&] { makeStrategy(1, 2, {}, unknown); }, {"unknown backend 'no_such_backend'", "host"});
  StrategyOptions procHost;
  procHost.mode = ExecutionMode::Processes;
  procHost.backend = "host";
  expectInvalid([&] { makeStrategy(2, 1, {}, procHost); }, {"processes needs a process backend", "'host'"});
  StrategyOptions simProc;
  simProc.mode = ExecutionMode::Processes;
  simProc.simulate = true;
  simProc.topology = "t";
  expectInvalid([&] { makeStrategy(2, 1, {}, simProc); }, {"simulate", "threads"});
  StrategyOptions simNoTopo;
  simNoTopo.simulate = true;
  expectInvalid([&] { makeStrategy(1, 2, {}, simNoTopo); }, {"simulate needs a topology"});
  StrategyOptions gpuNccl;
  gpuNccl.gpuReplicas = true;
  expectError([&] { makeStrategy(1, 2, {0, std::nullopt, CI::Nccl}, gpuNccl); }, Errc::Unsupported, {"nccl backend"});
  EXPECT_EQ(parseExecutionMode("Processes"), ExecutionMode::Processes);
  expectInvalid([] { parseExecutionMode("mpi"); }, {"\"mpi\"", "threads, processes"});
}

TEST(Strategy, NcclOnCpuRunsRing) {
  auto s = makeStrategy(1, 2, {0, std::nullopt, CI::Nccl});
  EXPECT_EQ(s->implementationChoice().effective, CI::Ring);
  const PerReplica out = s->run([] { return getReplicaContext()->allReduce(ReduceOp::Sum, f32({1, 2})); });
  EXPECT_EQ(out[1].toVector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(s->trace().events.back().algorithm, "ring");
}

// -----------------------------------------------------------------------------------------------------------------
// Contexts and scope

TEST(Contexts, DefaultStrategyOutsideAnyScope) {
  EXPECT_EQ(&getStrategy(), &defaultStrategy());
  EXPECT_FALSE(hasStrategy());
  EXPECT_FALSE(inCrossReplicaContext());
  ReplicaContext* ctx = getReplicaContext();
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->replicaIdInSyncGroup(), 0);
  EXPECT_EQ(ctx->numReplicasInSync(), 1);
  EXPECT_EQ(ctx->allReduce(ReduceOp::Sum, f32({3})).at(0), 3);
  EXPECT_EQ(defaultStrategy().name(), "DefaultStrategy");
  // The default strategy runs fn once, reduces to the value itself, and makes regular variables.
  const PerReplica r = defaultStrategy().run([] { return f32({5}); });
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(defaultStrategy().reduce(ReduceOp::Sum, r).at(0), 5);
  EXPECT_FALSE(createVariable(f32({1})).isMirrored());
  StrategyScope noop = defaultStrategy().scope();
  EXPECT_FALSE(inCrossReplicaContext());
}

TEST(Contexts, ScopeMakesCurrentAndCrossReplica) {
  auto s = makeStrategy(1, 2);
  {
    StrategyScope scope = s->scope();
    EXPECT_EQ(&getStrategy(), s.get());
    EXPECT_TRUE(hasStrategy());
    EXPECT_TRUE(inCrossReplicaContext());
    EXPECT_EQ(getReplicaContext(), nullptr);
    {
      StrategyScope again = s->scope();  // nesting the same strategy is fine
      EXPECT_EQ(&getStrategy(), s.get());
    }
    EXPECT_TRUE(inCrossReplicaContext());
    auto other = makeStrategy(1, 1);
    expectInvalid([&] { StrategyScope mixed = other->scope(); }, {"Mixing different strategies"});
  }
  EXPECT_EQ(&getStrategy(), &defaultStrategy());
  EXPECT_FALSE(inCrossReplicaContext());
}

TEST(Contexts, ReplicaContextInsideRun) {
  auto s = makeStrategy(2, 2);
  std::mutex m;
  std::set<int> ids;
  std::set<std::thread::id> threads;
  s->run([&] {
    ReplicaContext* ctx = getReplicaContext();
    ASSERT_NE(ctx, nullptr);
    EXPECT_EQ(&getStrategy(), s.get());
    EXPECT_FALSE(inCrossReplicaContext());
    EXPECT_EQ(ctx->numReplicasInSync(), 4);
    EXPECT_EQ(&ctx->strategy(), s.get());
    std::lock_guard lock(m);
    ids.insert(ctx->replicaIdInSyncGroup());
    threads.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(threads.size(), 4u) << "each replica runs on its own thread";
  EXPECT_EQ(s->currentStep(), 0);
}

// -----------------------------------------------------------------------------------------------------------------
// run()

TEST(Run, ArgumentsAndResults) {
  auto s = makeStrategy(1, 3);
  const PerReplica in = s->experimentalDistributeValuesFromFunction([](const ValueContext& ctx) {
    EXPECT_EQ(ctx.numReplicasInSync, 3);
    return Tensor::scalar(static_cast<float>(10 * ctx.replicaIdInSyncGroup));
  });
  EXPECT_EQ(in.replicaIds(), (std::vector<int>{0, 1, 2}));
  const float scale = 2;
  const PerReplica out = s->run([](const Tensor& x, float k) { return Tensor::scalar(x.at(0) * k + 1); }, in, scale);
  ASSERT_EQ(out.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(out[r].at(0), 20 * r + 1);
  EXPECT_EQ(out.replicaIds(), (std::vector<int>{0, 1, 2}));
  std::atomic<int> calls{0};
  s->run([&] { ++calls; });  // void fn
  EXPECT_EQ(calls.load(), 3);
  const PerReplica two(std::vector<Tensor>(2), {0, 1});
  expectInvalid([&] { s->run([](const Tensor&) {}, two); }, {"argument 0 holds values for 2 replicas", "runs 3"});
  expectInvalid([&] { s->run([&] { s->run([] {}); }); }, {"run() was called inside a replica function"});
}

TEST(Run, ReplicaExceptionIsRethrownAndPeersStop) {
  auto s = makeStrategy(1, 4);
  std::mutex m;
  std::vector<Errc> peerCodes;
  try {
    s->run([&] {
      ReplicaContext* ctx = getReplicaContext();
      if (ctx->replicaIdInSyncGroup() == 2) throw std::runtime_error("replica 2 ran out of memory");
      try {
        ctx->allReduce(ReduceOp::Sum, f32({1}));
      } catch (const Error& e) {
        std::lock_guard lock(m);
        peerCodes.push_back(e.code());
        throw;
      }
    });
    ADD_FAILURE() << "run() did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "replica 2 ran out of memory") << "run() rethrows the failing replica's own exception";
  }
  EXPECT_EQ(peerCodes, (std::vector<Errc>{Errc::PeerFailure, Errc::PeerFailure, Errc::PeerFailure}));
  // The strategy stays usable.
  const PerReplica ok = s->run([] { return getReplicaContext()->allReduce(ReduceOp::Sum, f32({1})); });
  EXPECT_EQ(ok[3].at(0), 4);
}

TEST(Run, ReplicaSkippingACollectiveIsAnErrorNotAHang) {
  auto s = makeStrategy(1, 4);
  expectInvalid(
      [&] {
        s->run([] {
          ReplicaContext* ctx = getReplicaContext();
          if (ctx->replicaIdInSyncGroup() != 0) ctx->allReduce(ReduceOp::Sum, f32({1}));
        });
      },
      {"replica(s) 0 returned from the replica function after 0 collective(s) while replica(s) 1, 2, 3 wait in "
       "collective #1 (all_reduce(SUM) of 1 value [float[1]]",
       "same order"});
  // A replica issuing one collective more than the others.
  expectInvalid(
      [&] {
        s->run([] {
          ReplicaContext* ctx = getReplicaContext();
          ctx->allReduce(ReduceOp::Sum, f32({1}));
          if (ctx->replicaIdInSyncGroup() == 3) ctx->allReduce(ReduceOp::Sum, f32({1}));
        });
      },
      {"returned from the replica function after 1 collective(s) while replica(s) 3 wait in collective #2"});
}

TEST(Run, MismatchedCollectivesNameTheReplicas) {
  auto s = makeStrategy(1, 3);
  expectInvalid(
      [&] {
        s->run([] {
          ReplicaContext* ctx = getReplicaContext();
          ctx->allReduce(ReduceOp::Sum, ctx->replicaIdInSyncGroup() == 1 ? f32({1, 2, 3}) : f32({1, 2}));
        });
      },
      {"collective #1: replica 1 called all_reduce(SUM) of 1 value [float[3]]",
       "replica 0 called all_reduce(SUM) of 1 value [float[2]]"});
  expectInvalid(
      [&] {
        s->run([] {
          ReplicaContext* ctx = getReplicaContext();
          ctx->allReduce(ctx->replicaIdInSyncGroup() == 2 ? ReduceOp::Mean : ReduceOp::Sum, f32({1}));
        });
      },
      {"replica 2 called all_reduce(MEAN)"});
  expectInvalid(
      [&] {
        s->run([] {
          ReplicaContext* ctx = getReplicaContext();
          const bool odd = ctx->replicaIdInSyncGroup() == 1;
          ctx->allReduce(ReduceOp::Sum, f32({1}), {odd ? 8 : 0, std::nullopt, CI::Auto});
        });
      },
      {"replica 1 called", "bytes_per_pack=8"});
}

TEST(Run, TimeoutWhenAReplicaIsLate) {
  auto s = makeStrategy(1, 2, {0, 0.1, CI::Auto});
  const auto t0 = std::chrono::steady_clock::now();
  expectError(
      [&] {
        s->run([] {
          ReplicaContext* ctx = getReplicaContext();
          if (ctx->replicaIdInSyncGroup() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
          ctx->allReduce(ReduceOp::Sum, f32({1}));
        });
      },
      Errc::Timeout, {"replica 0 waited 0.1 s", "timeout_seconds", "collective #1", "replica(s) 1"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// -----------------------------------------------------------------------------------------------------------------
// all_reduce in replica context

struct Layout {
  int workers, local;
};

class AllReduceLayouts : public ::testing::TestWithParam<std::tuple<Layout, CI, HierarchyMode>> {};

TEST_P(AllReduceLayouts, SumMeanAndLists) {
  const auto [layout, impl, hierarchy] = GetParam();
  StrategyOptions options;
  options.hierarchy = hierarchy;
  auto s = makeStrategy(layout.workers, layout.local, {0, std::nullopt, impl}, options);
  const int n = layout.workers * layout.local;
  const float total = static_cast<float>(n * (n + 1) / 2);
  const PerReplica sum = s->run([] {
    ReplicaContext* ctx = getReplicaContext();
    return ctx->allReduce(ReduceOp::Sum, replicaValue(ctx->replicaIdInSyncGroup()));
  });
  const PerReplica mean = s->run([] {
    ReplicaContext* ctx = getReplicaContext();
    return ctx->allReduce(ReduceOp::Mean, replicaValue(ctx->replicaIdInSyncGroup()));
  });
  const PerReplicaValues<std::vector<Tensor>> lists = s->run([] {
    ReplicaContext* ctx = getReplicaContext();
    const float id = static_cast<float>(ctx->replicaIdInSyncGroup());
    return ctx->allReduce(ReduceOp::Sum,
                          std::vector<Tensor>{f32({id}), Tensor::fromVector(std::vector<double>{id, 1, 2}),
                                              f32({id, id, id, id}, {2, 2})});
  });
  for (int h = 0; h < n; ++h) {
    EXPECT_EQ(sum[h].toVector<float>(), (std::vector<float>{total, 10 * total})) << "replica " << h;
    EXPECT_EQ(mean[h].toVector<float>(),
              (std::vector<float>{total / static_cast<float>(n), 10 * total / static_cast<float>(n)}));
    const float ids = static_cast<float>(n * (n - 1) / 2);
    ASSERT_EQ(lists[h].size(), 3u);
    EXPECT_EQ(lists[h][0].toVector<float>(), (std::vector<float>{ids}));
    EXPECT_EQ(lists[h][1].toVector<double>(), (std::vector<double>{ids, 1.0 * n, 2.0 * n}));
    EXPECT_EQ(lists[h][2].shape(), (Shape{2, 2}));
    EXPECT_EQ(lists[h][2].toVector<float>(), (std::vector<float>(4, ids)));
  }
}

INSTANTIATE_TEST_SUITE_P(Strategy, AllReduceLayouts,
                         ::testing::Combine(::testing::Values(Layout{1, 1}, Layout{1, 3}, Layout{3, 1}, Layout{2, 2},
                                                              Layout{2, 3}),
                                            ::testing::Values(CI::Auto, CI::Ring),
                                            ::testing::Values(HierarchyMode::Auto, HierarchyMode::Hierarchical)),
                         [](const auto& p) {
                           const Layout l = std::get<0>(p.param);
                           return fmt::format("{}x{}_{}{}", l.workers, l.local, toString(std::get<1>(p.param)),
                                              std::get<2>(p.param) == HierarchyMode::Hierarchical ? "_staged" : "");
                         });

TEST(AllReduce, IntegerMeanTruncates) {
  auto s = makeStrategy(1, 3);
  const PerReplica out = s->run([] {
    const int id = getReplicaContext()->replicaIdInSyncGroup();
    return getReplicaContext()->allReduce(ReduceOp::Mean, Tensor::fromVector(std::vector<std::int32_t>{id, 7}));
  });
  EXPECT_EQ(out[0].toVector<std::int32_t>(), (std::vector<std::int32_t>{1, 7}));
}

TEST(AllReduce, HierarchicalOrFlatIsTraced) {
  StrategyOptions staged;
  staged.hierarchy = HierarchyMode::Hierarchical;
  auto hier = makeStrategy(2, 2, {}, staged);
  EXPECT_TRUE(hier->hierarchical());
  hier->run([] { getReplicaContext()->allReduce(ReduceOp::Sum, f32({1, 2, 3})); });
  const Trace t = hier->trace();
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].group, "local");
  EXPECT_EQ(t.events[0].kind, Collective::Reduce);
  EXPECT_EQ(t.events[1].group, "workers");
  EXPECT_EQ(t.events[1].kind, Collective::AllReduce);
  EXPECT_EQ(t.events[1].nranks, 2);
  EXPECT_EQ(t.events[2].group, "local");
  EXPECT_EQ(t.events[2].kind, Collective::Broadcast);
  StrategyOptions flat;
  flat.hierarchy = HierarchyMode::Flat;
  auto f = makeStrategy(2, 2, {}, flat);
  EXPECT_FALSE(f->hierarchical());
  const PerReplica out = f->run([] { return getReplicaContext()->allReduce(ReduceOp::Sum, f32({1})); });
  EXPECT_EQ(out[3].at(0), 4);
  ASSERT_EQ(f->trace().events.size(), 1u);
  EXPECT_EQ(f->trace().events[0].group, "replicas");
  EXPECT_EQ(f->trace().events[0].nranks, 4);
}

// -----------------------------------------------------------------------------------------------------------------
// strategy.reduce()

TEST(Reduce, SumAndMeanAcrossReplicas) {
  auto s = makeStrategy(2, 2);
  const PerReplica v = s->experimentalDistributeValuesFromFunction(
      [](const ValueContext& ctx) { return replicaValue(ctx.replicaIdInSyncGroup); });
  EXPECT_EQ(s->reduce(ReduceOp::Sum, v).toVector<float>(), (std::vector<float>{10, 100}));
  EXPECT_EQ(s->reduce(ReduceOp::Mean, v).toVector<float>(), (std::vector<float>{2.5, 25}));
}

TEST(Reduce, AlongAxisWithPartialBatches) {
  // Per-replica batches of 3, 1, 0 and 2 rows (a partial final global batch): MEAN divides by the 6 real rows.
  auto s = makeStrategy(1, 4);
  const std::vector<std::int64_t> rows = {3, 1, 0, 2};
  const PerReplica v = s->experimentalDistributeValuesFromFunction([&](const ValueContext& ctx) {
    const std::int64_t n = rows[static_cast<std::size_t>(ctx.replicaIdInSyncGroup)];
    std::vector<float> data;
    for (std::int64_t i = 0; i < n; ++i) {
      data.push_back(static_cast<float>(ctx.replicaIdInSyncGroup));
      data.push_back(1.0f);
    }
    return f32(data, {n, 2});
  });
  // Column 0 holds the replica id per row: 0*3 + 1*1 + 3*2 = 7; column 1 counts rows: 6.
  EXPECT_EQ(s->reduce(ReduceOp::Sum, v, 0).toVector<float>(), (std::vector<float>{7, 6}));
  EXPECT_EQ(s->reduce(ReduceOp::Mean, v, 0).toVector<float>(), (std::vector<float>{7.0f / 6, 1}));
  expectInvalid([&] { s->reduce(ReduceOp::Sum, v, -1); }, {"along axis -1", "only the axis may differ"});
  expectInvalid([&] { s->reduce(ReduceOp::Sum, v); }, {"replica 1 has float[1, 2]", "shapes must be equal"});
  expectInvalid([&] { s->reduce(ReduceOp::Sum, v, 2); }, {"axis 2"});
}

TEST(Reduce, MeanAlongAxisCountsExactlyInBf16) {
  // 3 replicas x 1000 rows: 3000 is not a bf16 number (it rounds to 3008), so the element count must not travel in
  // the value's dtype. Each replica's rows sum to 24 (exact in bf16), the total 72: MEAN = bf16(72 / 3000).
  auto s = makeStrategy(1, 3);
  const PerReplica v = s->experimentalDistributeValuesFromFunction([](const ValueContext&) {
    std::vector<double> rows(1000, 0.0);
    rows[0] = 16;
    rows[1] = 8;
    return Tensor::fromDoubles(DType::BF16, rows, Shape{1000});
  });
  const Tensor mean = s->reduce(ReduceOp::Mean, v, 0);
  EXPECT_EQ(mean.dtype(), DType::BF16);
  const double expected = Tensor::fromDoubles(DType::BF16, {72.0 / 3000}, Shape{}).at(0);
  const double countInBf16 = Tensor::fromDoubles(DType::BF16, {3000}, Shape{}).at(0);
  ASSERT_NE(countInBf16, 3000.0) << "the case must be one bf16 cannot count";
  ASSERT_NE(Tensor::fromDoubles(DType::BF16, {72.0 / countInBf16}, Shape{}).at(0), expected)
      << "the case must tell the exact count from the rounded one";
  EXPECT_EQ(mean.at(0), expected);
  EXPECT_EQ(s->reduce(ReduceOp::Sum, v, 0).at(0), 72.0);
}

TEST(Reduce, SumAlongLastAxisAndErrors) {
  auto s = makeStrategy(1, 2);
  const PerReplica v = s->experimentalDistributeValuesFromFunction([](const ValueContext& ctx) {
    return f32({1, 2, static_cast<float>(ctx.replicaIdInSyncGroup)}, {1, 3});
  });
  EXPECT_EQ(s->reduce(ReduceOp::Sum, v, -1).toVector<float>(), (std::vector<float>{7}));
  const PerReplica mixed(std::vector<Tensor>{f32({1, 2}, {1, 2}), f32({1, 2, 3}, {1, 3})}, {0, 1});
  expectInvalid([&] { s->reduce(ReduceOp::Sum, mixed, 0); }, {"along axis 0", "only the axis may differ"});
  const PerReplica types(std::vector<Tensor>{f32({1}), Tensor::fromVector(std::vector<double>{1})}, {0, 1});
  expectInvalid([&] { s->reduce(ReduceOp::Sum, types); }, {"replica 1 has double[1]"});
  const PerReplica one(std::vector<Tensor>{f32({1})}, {0});
  expectInvalid([&] { s->reduce(ReduceOp::Sum, one); }, {"holds 1 replicas' values but this process runs 2"});
  expectInvalid([&] { s->run([&] { s->reduce(ReduceOp::Sum, v); }); }, {"cross-replica context"});
}

TEST(Reduce, NonDistributedValues) {
  auto s = makeStrategy(1, 3);
  EXPECT_EQ(s->reduce(ReduceOp::Mean, f32({4})).at(0), 4);
  expectInvalid([&] { s->reduce(ReduceOp::Sum, f32({4})); }, {"non-distributed value float[1]", "SUM over 3"});
  // With an axis the value counts once per replica (TF runs the reduction on every replica).
  EXPECT_EQ(s->reduce(ReduceOp::Sum, f32({1, 2}), 0).at(0), 9);
  EXPECT_EQ(s->reduce(ReduceOp::Mean, f32({1, 2}), 0).at(0), 1.5);
  auto single = makeStrategy(1, 1);
  EXPECT_EQ(single->reduce(ReduceOp::Sum, f32({4})).at(0), 4);
}

TEST(LocalResults, OnlyThisWorkersReplicas) {
  // Threads mode hosts both workers; seen from worker 1, the local results are replicas 2 and 3.
  auto s = makeStrategy(2, 2, {}, {}, /*rank=*/1);
  const PerReplica v = s->experimentalDistributeValuesFromFunction(
      [](const ValueContext& ctx) { return Tensor::scalar(static_cast<float>(ctx.replicaIdInSyncGroup)); });
  const std::vector<Tensor> local = s->experimentalLocalResults(v);
  ASSERT_EQ(local.size(), 2u);
  EXPECT_EQ(local[0].at(0), 2);
  EXPECT_EQ(local[1].at(0), 3);
  EXPECT_EQ(s->experimentalLocalResults(PerReplicaValues<int>({5, 6, 7, 8}, {0, 1, 2, 3})), (std::vector<int>{7, 8}));
}

// -----------------------------------------------------------------------------------------------------------------
// Variables

TEST(Variables, RegularOutsideScopeMirroredInside) {
  auto s = makeStrategy(1, 3);
  const Variable regular = createVariable(f32({1, 2}), {"r"});
  EXPECT_FALSE(regular.isMirrored());
  EXPECT_EQ(regular.numCopies(), 1);
  EXPECT_EQ(regular.name(), "r");
  StrategyScope scope = s->scope();
  const Variable mirrored = createVariable(f32({1, 2}), {"m"});
  EXPECT_TRUE(mirrored.isMirrored());
  EXPECT_EQ(mirrored.numCopies(), 3);
  EXPECT_EQ(mirrored.dtype(), DType::F32);
  EXPECT_EQ(mirrored.shape(), (Shape{2}));
  for (int h = 0; h < 3; ++h) EXPECT_EQ(mirrored.copy(h), f32({1, 2}));
  EXPECT_EQ(s->experimentalLocalResults(mirrored).size(), 3u);
  EXPECT_EQ(s->experimentalLocalResults(regular).size(), 1u);
  EXPECT_EQ(createVariable(f32({1})).name(), "Variable");
  expectInvalid([&] { mirrored.copy(3); }, {"'m' has 3 copies; there is no copy 3"});
  expectInvalid([&] { mirrored.local(); }, {"local() needs a replica context"});
  expectInvalid([&] { s->run([] { createVariable(f32({1}), {"late"}); }); },
                {"createVariable(\"late\") inside strategy.run()"});
}

TEST(Variables, InitialValuesAreBroadcastFromTheChief) {
  for (const auto& [layout, hierarchy] :
       {std::pair{Layout{3, 1}, HierarchyMode::Auto}, std::pair{Layout{2, 2}, HierarchyMode::Auto},
        std::pair{Layout{2, 2}, HierarchyMode::Hierarchical}}) {
    SCOPED_TRACE(fmt::format("{}x{}{}", layout.workers, layout.local,
                             hierarchy == HierarchyMode::Hierarchical ? " staged" : ""));
    StrategyOptions options;
    options.hierarchy = hierarchy;
    auto s = makeStrategy(layout.workers, layout.local, {}, options, /*rank=*/1);
    StrategyScope scope = s->scope();
    std::vector<int> initializedOn;
    const Variable v = createVariable([&](int worker) {
      initializedOn.push_back(worker);
      return f32({static_cast<float>(100 + worker)});
    });
    EXPECT_EQ(initializedOn.size(), static_cast<std::size_t>(layout.workers)) << "once per worker";
    for (int h = 0; h < v.numCopies(); ++h) EXPECT_EQ(v.copy(h).at(0), 100) << "copy " << h << " is the chief's";
    EXPECT_EQ(v.value().at(0), 100);
    const Trace t = s->trace();
    ASSERT_FALSE(t.events.empty());
    const auto& b =
        *std::find_if(t.events.rbegin(), t.events.rend(), [](const TraceEvent& e) { return e.group != "local"; });
    EXPECT_EQ(b.kind, Collective::Broadcast);
    EXPECT_EQ(b.group, hierarchy == HierarchyMode::Hierarchical ? "workers" : "replicas");
    EXPECT_EQ(b.root, 0);
    EXPECT_EQ(b.step, -1) << "before any run()";
    expectInvalid([&] { createVariable([](int worker) { return Tensor(DType::F32, {worker + 1}); }, {"ragged"}); },
                  {"createVariable(\"ragged\"): worker 1's initial value is float[2] but worker 0's is float[1]"});
  }
}

TEST(Variables, UpdatesInCrossReplicaAndReplicaContext) {
  auto s = makeStrategy(1, 3);
  StrategyScope scope = s->scope();
  const Variable none = createVariable(f32({0}), {"none"});
  const Variable sum = createVariable(f32({0}), {"sum", VariableAggregation::Sum});
  const Variable mean = createVariable(f32({0}), {"mean", VariableAggregation::Mean});
  const Variable first = createVariable(f32({0}), {"first", VariableAggregation::OnlyFirstReplica});
  none.assign(f32({5}));
  for (int h = 0; h < 3; ++h) EXPECT_EQ(none.copy(h).at(0), 5) << "cross-replica assign updates every copy";
  none.assignAdd(f32({1}));
  none.assignSub(f32({3}));
  EXPECT_EQ(none.value().at(0), 3);
  s->run([&] {
    const float id = static_cast<float>(getReplicaContext()->replicaIdInSyncGroup());
    sum.assignAdd(f32({id + 1}));  // 1 + 2 + 3 on every copy
    mean.assign(f32({id}));        // mean of 0, 1, 2
    first.assign(f32({id + 10}));  // replica 0's
    EXPECT_EQ(sum.value().at(0), 6);
  });
  for (int h = 0; h < 3; ++h) {
    EXPECT_EQ(sum.copy(h).at(0), 6);
    EXPECT_EQ(mean.copy(h).at(0), 1);
    EXPECT_EQ(first.copy(h).at(0), 10);
  }
  expectInvalid(
      [&] { s->run([&] { none.assignAdd(f32({1})); }); },
      {"You must specify an aggregation method to update MirroredVariable 'none' in replica context", "assign_add"});
  expectInvalid([&] { none.assign(f32({1, 2})); }, {"Variable 'none': assign of float[2] to a variable of float[1]"});
  expectInvalid([&] { none.assign(Tensor::fromVector(std::vector<double>{1})); }, {"double[1]"});
  // local(): the replica's own copy, for optimizers.
  s->run([&] { none.local().set(0, getReplicaContext()->replicaIdInSyncGroup()); });
  EXPECT_EQ(none.copy(2).at(0), 2);
}

TEST(Variables, MirroredVariableMustNotOutliveItsStrategy) {
  std::optional<Variable> v;
  {
    auto s = makeStrategy(1, 2);
    StrategyScope scope = s->scope();
    v = createVariable(f32({1}), {"orphan"});
  }
  expectInvalid([&] { v->value(); }, {"'orphan' was used after its strategy was destroyed"});
  EXPECT_EQ(&getStrategy(), &defaultStrategy()) << "scopes of a destroyed strategy are gone";
}

// -----------------------------------------------------------------------------------------------------------------
// Trace recording

TEST(StrategyTrace, EventsCarryStepPackAndTimes) {
  auto s = makeStrategy(1, 4, {0, std::nullopt, CI::Ring});
  for (int step = 0; step < 3; ++step) {
    s->run([] { getReplicaContext()->allReduce(ReduceOp::Sum, f32({1, 2})); });
  }
  const PerReplica v = s->run([] { return f32({1}); });
  s->reduce(ReduceOp::Sum, v);
  const Trace t = s->trace();
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.worldSize, 4);
  EXPECT_EQ(t.topology, (TraceTopology{"threads", 1, 4}));
  EXPECT_EQ(t.backend, "host");
  EXPECT_FALSE(t.simulated);
  for (int i = 0; i < 3; ++i) {
    const TraceEvent& e = t.events[static_cast<std::size_t>(i)];
    EXPECT_EQ(e.step, i);
    EXPECT_EQ(e.pack, 0);
    EXPECT_EQ(e.bytes, 8u);
    EXPECT_EQ(e.algorithm, "ring");
    EXPECT_EQ(e.group, "replicas");
    EXPECT_GE(e.endSeconds, e.startSeconds);
    EXPECT_GE(e.computeGapSeconds, 0);
    if (i > 0) {
      EXPECT_GE(e.startSeconds, t.events[static_cast<std::size_t>(i - 1)].endSeconds);
    }
  }
  EXPECT_EQ(t.events[3].step, 3) << "reduce() after the 4th run belongs to step 3";
  // The recorded trace is a valid trace file.
  const auto path = (std::filesystem::temp_directory_path() / "collbench_strategy_trace.json").string();
  s->writeTrace(path, "test command");
  const Trace back = readTrace(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.command, "test command");
  EXPECT_EQ(back.events, t.events);
}

TEST(StrategyTrace, AutoAsksTheSelectorRingIsRing) {
  auto s = makeStrategy(1, 4);
  s->run([] {
    getReplicaContext()->allReduce(ReduceOp::Sum, Tensor(DType::F32, {16}));
    getReplicaContext()->allReduce(ReduceOp::Sum, Tensor(DType::F32, {1 << 16}));
    getReplicaContext()->allReduce(ReduceOp::Sum, Tensor(DType::F32, {16}), {0, std::nullopt, CI::Ring});
  });
  const Trace t = s->trace();
  ASSERT_EQ(t.events.size(), 3u);
  for (std::size_t i = 0; i < 2; ++i) {
    const CollectiveSpec spec{Collective::AllReduce, 4, t.events[i].bytes / 4, DType::F32, collbench::ReduceOp::Sum, 0};
    EXPECT_EQ(t.events[i].algorithm, chooseAlgorithm(spec).algorithm) << "AUTO uses the selector's choice";
  }
  EXPECT_EQ(t.events[2].algorithm, "ring");
}

// AUTO on a backend that moves data: the program's own calls of one spec run the selector's choice and its near-tied
// runner-ups in turn, 7 calls each (kEngineTrialRounds), then every later call runs the fastest; every call sums.
TEST(StrategyTrace, AutoTriesNearTiedAlgorithmsOnTheProgramsOwnCalls) {
  auto s = makeStrategy(1, 4);
  constexpr std::size_t kCount = 4096;
  constexpr std::size_t kRounds = 7;
  const CollectiveSpec spec{Collective::AllReduce, 4, kCount, DType::F32, collbench::ReduceOp::Sum, 0};
  const std::vector<Alternative> tried = trialCandidates(chooseAlgorithm(spec));
  ASSERT_GE(tried.size(), 2u) << "the default model has no near tie at 16 KiB any more: pick another size";
  const std::size_t trialCalls = kRounds * tried.size(), calls = trialCalls + 5;
  std::atomic<int> wrong{0};
  s->run([&] {
    ReplicaContext* ctx = getReplicaContext();
    const auto mine = static_cast<float>(ctx->replicaIdInSyncGroup() + 1);
    for (std::size_t i = 0; i < calls; ++i) {
      const Tensor sum = ctx->allReduce(ReduceOp::Sum, Tensor::fromVector(std::vector<float>(kCount, mine)));
      if (sum.at(0) != 10 || sum.at(kCount - 1) != 10) ++wrong;  // 1 + 2 + 3 + 4
    }
  });
  EXPECT_EQ(wrong.load(), 0);
  const Trace t = s->trace();
  ASSERT_EQ(t.events.size(), calls);
  for (std::size_t i = 0; i < trialCalls; ++i) EXPECT_EQ(t.events[i].algorithm, tried[i % tried.size()].algorithm) << i;
  const std::string settled = t.events.back().algorithm;
  EXPECT_TRUE(std::any_of(tried.begin(), tried.end(), [&](const Alternative& a) { return a.algorithm == settled; }));
  for (std::size_t i = trialCalls; i < calls; ++i) EXPECT_EQ(t.events[i].algorithm, settled) << i;
}

TEST(StrategyTrace, SimulatedRunReducesHereAndTimesOnTheSimulator) {
  StrategyOptions sim;
  sim.simulate = true;
  sim.backend = "fake_sim";
  sim.topology = "dgx-h100-8x1";
  LogCapture log;
  auto s = makeStrategy(2, 2, {}, sim);
  EXPECT_EQ(log.countWarnings("simulate: 4 replicas in sync use ranks 0..3 of topology 'dgx-h100-8x1', which has 8 "
                              "ranks"),
            1)
      << log.text();
  EXPECT_FALSE(s->hierarchical()) << "the simulator times the flat collective";
  const PerReplica out = s->run([] {
    ReplicaContext* ctx = getReplicaContext();
    return ctx->allReduce(ReduceOp::Sum, replicaValue(ctx->replicaIdInSyncGroup()));
  });
  for (int h = 0; h < 4; ++h) EXPECT_EQ(out[h].toVector<float>(), (std::vector<float>{10, 100}));
  const Trace t = s->trace();
  EXPECT_TRUE(t.simulated);
  EXPECT_EQ(t.topology.name, "dgx-h100-8x1");
  ASSERT_EQ(t.events.size(), 1u);
  const double simulated = testing::FakeSimBackend::kSecondsPerCall + 8 * testing::FakeSimBackend::kSecondsPerByte;
  EXPECT_NEAR(t.events[0].endSeconds - t.events[0].startSeconds, simulated, 1e-15);
  StrategyOptions noSim;
  noSim.backend = "fake_sim";
  expectInvalid([&] { makeStrategy(1, 2, {}, noSim); }, {"moves no data", "simulate"});
}

// Hierarchical all-reduce when the topology's cost model says it is faster (simulate knows the topology).

/// A 4 workers x 8 replicas what-if run on h100-4x8-rail (4 hosts of 8 H100s, rail-optimised NICs) whose all-reduces
/// are timed by the fake simulator, with the given hierarchy.
std::unique_ptr<MultiWorkerMirroredStrategy> railStrategy(HierarchyMode hierarchy, int workers = 4, int local = 8) {
  StrategyOptions sim;
  sim.simulate = true;
  sim.backend = "fake_sim";
  sim.topology = "h100-4x8-rail";
  sim.hierarchy = hierarchy;
  return makeStrategy(workers, local, {}, sim);
}

/// All-reduces of these element counts (F32) in one step; returns the algorithm traced for each.
std::vector<std::string> allReduceAlgorithms(MultiWorkerMirroredStrategy& s, const std::vector<std::int64_t>& counts) {
  s.run([&] {
    for (std::int64_t n : counts) getReplicaContext()->allReduce(ReduceOp::Sum, Tensor(DType::F32, {n}));
  });
  std::vector<std::string> out;
  for (const TraceEvent& e : s.trace().events) {
    EXPECT_EQ(e.group, "replicas");
    EXPECT_EQ(e.nranks, s.numReplicasInSync());
    out.push_back(e.algorithm);
  }
  return out;
}

/// From 64 B (latency-bound) to 4 MiB (bandwidth-bound) per replica.
const std::vector<std::int64_t> kPackCounts = {16, 16 * 1024, 1024 * 1024};

TEST(Hierarchy, AutoFollowsTheCostModelOnTheTopology) {
  auto s = railStrategy(HierarchyMode::Auto);
  EXPECT_FALSE(s->hierarchical());
  EXPECT_EQ(s->allReduceForm(), "flat or hierarchical per size (cost model on h100-4x8-rail)");
  const std::vector<std::string> got = allReduceAlgorithms(*s, kPackCounts);
  ASSERT_EQ(got.size(), kPackCounts.size());
  // The model's own answer on the topology, per size: the strategy must not second-guess it.
  const Topology rail = loadTopology("h100-4x8-rail");
  SelectorOptions withTopology;
  withTopology.topology = &rail;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const CollectiveSpec spec{Collective::AllReduce,    32, static_cast<std::size_t>(kPackCounts[i]), DType::F32,
                              collbench::ReduceOp::Sum, 0};
    EXPECT_EQ(got[i], chooseAlgorithm(spec, withTopology).algorithm) << kPackCounts[i] << " elements";
  }
  // Large packs: hierarchically only 1/8 of the bytes cross the NICs (each rail carries its slice), so it wins
  // (2.5x over the best flat algorithm in the model at 4 MiB).
  EXPECT_EQ(got.back(), "hierarchical");
  const std::vector<std::string> summary = summarizeAlgorithms(s->trace());
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_NE(summary[0].find("all_reduce over 32 replicas: 64 B "), std::string::npos) << summary[0];
  EXPECT_NE(summary[0].find("4 MiB hierarchical (x1)"), std::string::npos) << summary[0];
}

TEST(Hierarchy, ForcedFormsUnderSimulation) {
  // hierarchy hierarchical: every all-reduce runs the topology's hierarchical algorithm (used to be ignored).
  auto hier = railStrategy(HierarchyMode::Hierarchical);
  EXPECT_TRUE(hier->hierarchical());
  EXPECT_EQ(allReduceAlgorithms(*hier, kPackCounts), std::vector<std::string>(kPackCounts.size(), "hierarchical"));
  // The values are still reduced (in this process): the sum over 32 replicas.
  const PerReplica out = hier->run([] {
    return getReplicaContext()->allReduce(ReduceOp::Sum,
                                          f32({1, static_cast<float>(getReplicaContext()->replicaIdInSyncGroup())}));
  });
  EXPECT_EQ(out[31].toVector<float>(), (std::vector<float>{32, 31 * 32 / 2}));
  // hierarchy flat: never the hierarchical algorithm.
  auto flat = railStrategy(HierarchyMode::Flat);
  EXPECT_FALSE(flat->hierarchical());
  EXPECT_EQ(flat->allReduceForm(), "flat");
  for (const std::string& a : allReduceAlgorithms(*flat, kPackCounts)) EXPECT_NE(a, "hierarchical");
  // Hosts of unequal size (12 replicas: 8 on the first host, 4 on the second) cannot run it: an error naming the
  // option at construction, not a failure at the first collective.
  expectInvalid([] { railStrategy(HierarchyMode::Hierarchical, /*workers=*/3, /*local=*/4); },
                {"StrategyOptions.hierarchy hierarchical with simulate on topology 'h100-4x8-rail'",
                 "same number of ranks on every host"});
}

// -----------------------------------------------------------------------------------------------------------------
// Processes mode without a process backend: one worker needs none (its local replicas reduce in process).

TEST(ProcessesMode, SingleWorkerReducesLocally) {
  StrategyOptions proc;
  proc.mode = ExecutionMode::Processes;
  auto s = makeStrategy(1, 3, {}, proc);
  EXPECT_TRUE(s->hierarchical());
  const PerReplica out = s->run([] {
    ReplicaContext* ctx = getReplicaContext();
    return ctx->allReduce(ReduceOp::Mean, replicaValue(ctx->replicaIdInSyncGroup()));
  });
  EXPECT_EQ(out[2].toVector<float>(), (std::vector<float>{2, 20}));
  StrategyOptions gloo;
  gloo.mode = ExecutionMode::Processes;
  gloo.backend = "gloo_not_linked_here";
  expectInvalid([&] { makeStrategy(2, 1, {}, gloo, 1); }, {"unknown backend 'gloo_not_linked_here'"});
}

// -----------------------------------------------------------------------------------------------------------------
// Deprecated names

TEST(Deprecated, AliasesWarnOnce) {
  auto s = makeStrategy(1, 2);
  detail::resetWarnOnceForTesting();
  LogCapture log;
  const Dataset ds = Dataset::fromVector(std::vector<float>{1, 2, 3, 4}).batch(2);
  DistributedIterator it = s->makeDatasetIterator(ds);
  auto first = s->experimentalRun([](const Element& e) { return e[0]; }, it);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ((*first)[1].at(0), 2);
  auto second = s->experimentalRun([](const Element& e) { return e[0]; }, it);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ((*second)[0].at(0), 3);
  EXPECT_FALSE(s->experimentalRun([](const Element& e) { return e[0]; }, it).has_value()) << "end of input";
  DistributedIterator it2 = s->makeDatasetIterator(ds);
  EXPECT_TRUE(s->experimentalRun([](const Element&) {}, it2));
  DistributedIterator fnIt = s->makeInputFnIterator([](const InputContext& ctx) {
    return Dataset::fromVector(std::vector<float>{5, 6}).shard(ctx.numInputPipelines(), ctx.inputPipelineId());
  });
  EXPECT_EQ(fnIt.getNext()[1][0].at(0), 6);
  expectInvalid(
      [&] {
        s->makeInputFnIterator([](const InputContext&) { return Dataset::fromVector(std::vector<float>{1}); },
                               InputReplicationMode::EachReplica);
      },
      {"Input replication mode not supported: PER_REPLICA"});
  EXPECT_EQ(log.countWarnings("experimental_run (from MultiWorkerMirroredStrategy) is deprecated"), 1) << log.text();
  EXPECT_EQ(log.countWarnings("make_dataset_iterator (from MultiWorkerMirroredStrategy) is deprecated"), 1);
  EXPECT_EQ(log.countWarnings("make_input_fn_iterator (from MultiWorkerMirroredStrategy) is deprecated"), 1);
  // TF 2.4 renamed experimental_distribute_datasets_from_function to distribute_datasets_from_function.
  auto shard = [](const InputContext& ctx) {
    return Dataset::fromVector(std::vector<float>{7, 8}).shard(ctx.numInputPipelines(), ctx.inputPipelineId());
  };
  EXPECT_EQ(s->experimentalDistributeDatasetsFromFunction(shard).iterator().getNext()[0][0].at(0), 7);
  s->experimentalDistributeDatasetsFromFunction(shard);
  s->distributeDatasetsFromFunction(shard);
  EXPECT_EQ(log.countWarnings("experimental_distribute_datasets_from_function (from MultiWorkerMirroredStrategy) is "
                              "deprecated and will be removed in a future version. Instructions for updating: use "
                              "distribute_datasets_from_function"),
            1)
      << log.text();
  EXPECT_EQ(log.countWarnings("deprecated"), 4) << log.text();
}

TEST(Deprecated, UpdateConfigProto) {
  using nlohmann::json;
  auto single = makeStrategy(1, 1);
  json c = json::parse(single->updateConfigProto(R"({"allow_soft_placement": true})"));
  EXPECT_EQ(c["allow_soft_placement"], true) << "other fields are kept";
  EXPECT_EQ(c["graph_options"]["rewrite_options"]["scoped_allocator_optimization"], "ON");
  EXPECT_EQ(c["graph_options"]["rewrite_options"]["scoped_allocator_opts"]["enable_op"],
            json::array({"CollectiveReduce"}));
  EXPECT_FALSE(c.contains("device_filters")) << "single-worker mode sets no leader or filters";
  EXPECT_FALSE(c["experimental"].is_object() && c["experimental"].contains("collective_group_leader"));

  auto worker = makeStrategy(3, 1, {0, std::nullopt, CI::Nccl}, {}, /*rank=*/2);
  c = json::parse(worker->updateConfigProto(
      R"({"device_filters": ["/job:ps"], "graph_options": {"rewrite_options": {"scoped_allocator_opts": {"enable_op": ["X"]}}}})"));
  EXPECT_EQ(c["experimental"]["collective_group_leader"], "/job:worker/replica:0/task:0");
  EXPECT_EQ(c["experimental"]["collective_nccl"], true);
  EXPECT_EQ(c["device_filters"], json::array({"/job:worker/task:2"}));
  EXPECT_EQ(c["graph_options"]["rewrite_options"]["scoped_allocator_opts"]["enable_op"],
            json::array({"CollectiveReduce"}));

  ClusterSpec spec;
  spec.jobs["chief"] = {"c:1000"};
  spec.jobs["worker"] = {"w0:1000"};
  MultiWorkerMirroredStrategy chief({}, std::make_shared<SimpleClusterResolver>(spec, "worker", 0));
  c = json::parse(chief.updateConfigProto());
  EXPECT_EQ(c["experimental"]["collective_group_leader"], "/job:chief/replica:0/task:0");
  EXPECT_EQ(c["device_filters"], json::array({"/job:worker/task:0"}));
  EXPECT_FALSE(c["experimental"].contains("collective_nccl"));
  expectInvalid([&] { chief.updateConfigProto("{"); }, {"update_config_proto", "malformed JSON"});
  expectInvalid([&] { chief.updateConfigProto("[1]"); }, {"must be a JSON object"});
}

}  // namespace
}  // namespace collbench::strategy
