#pragma once
#include <vector>
// The algorithms registered in algorithms.cc: each file defines its generator, cost term and traits and returns them
// as one AlgorithmInfo.
#include "collbench/algorithms.h"

namespace collbench::algo {

Schedule ringAllReduce(const CollectiveSpec& spec, const AlgoParams& params);
Schedule treeAllReduce(const CollectiveSpec& spec, const AlgoParams& params);
Schedule recursiveDoublingAllReduce(const CollectiveSpec& spec, const AlgoParams& params);
Schedule rabenseifnerAllReduce(const CollectiveSpec& spec, const AlgoParams& params);
Schedule directAllReduce(const CollectiveSpec& spec, const AlgoParams& params);
Schedule hierarchicalAllReduce(const CollectiveSpec& spec, const AlgoParams& params);
Schedule ringReduceScatter(const CollectiveSpec& spec, const AlgoParams& params);
Schedule ringAllGather(const CollectiveSpec& spec, const AlgoParams& params);
Schedule chainBroadcast(const CollectiveSpec& spec, const AlgoParams& params);
Schedule chainReduce(const CollectiveSpec& spec, const AlgoParams& params);
Schedule disseminationBarrier(const CollectiveSpec& spec, const AlgoParams& params);
Schedule nvlsAllReduce(const CollectiveSpec& spec, const AlgoParams& params);
Schedule nvlsTreeAllReduce(const CollectiveSpec& spec, const AlgoParams& params);

AlgorithmInfo ringAllReduceAlgorithm();
AlgorithmInfo treeAllReduceAlgorithm();
AlgorithmInfo recursiveDoublingAlgorithm();
AlgorithmInfo rabenseifnerAlgorithm();
AlgorithmInfo directAlgorithm();
AlgorithmInfo hierarchicalAlgorithm();
AlgorithmInfo ringReduceScatterAlgorithm();
AlgorithmInfo ringAllGatherAlgorithm();
AlgorithmInfo chainBroadcastAlgorithm();
AlgorithmInfo chainReduceAlgorithm();
AlgorithmInfo disseminationBarrierAlgorithm();
AlgorithmInfo ringBidirAllReduceAlgorithm();
AlgorithmInfo nvlsAlgorithm();
AlgorithmInfo nvlsTreeAlgorithm();
AlgorithmInfo collnetDirectAlgorithm();
AlgorithmInfo collnetChainAlgorithm();

/// Parent of `rank` in NCCL's binary tree over n ranks rooted at 0 (-1 for the root): the lowest set bit b of the
/// rank picks parent (rank ^ b) | (b << 1), or rank ^ b when that is out of range.
int btreeParent(int n, int rank);
/// Parent in tree 0 or tree 1 of NCCL's double binary tree: tree 1 mirrors tree 0 (n even) or shifts it by one
/// rank (n odd), so that most ranks are interior in one tree and a leaf in the other.
int dtreeParent(int n, int rank, int tree);
/// Hops from the deepest rank up to the root of the tree `parent` describes (-1 marks the root).
int treeDepth(const std::vector<int>& parent);

}  // namespace collbench::algo
