#!/usr/bin/env bash
# Issue #10's sanitizer stages, run by .ci/run after the plain tests: each preset builds the suites it runs and the
# collbench CLI (the strategy suite's process-mode and CLI cases exec it; without it they would skip), CUDA off, and
# runs the suites with ctest's label filter (no match is an error) and reduced sweeps (COLLBENCH_QUICK_SWEEP).
#   asan  AddressSanitizer + UBSan (-fno-sanitize-recover=all, halt_on_error): test_unit (core, every parser's
#         seeded fuzz), test_host (threads backend, store, Gloo transport), test_strategy (resolvers and their fuzz,
#         MWMS in threads and processes)
#   tsan  ThreadSanitizer (halt_on_error): test_host, test_strategy, the suites with threads
# Any sanitizer report aborts its test binary (or the collbench process a test runs), so ctest and this script fail.
# Usage: scripts/sanitize.sh [asan|tsan]...   (default: both, in that order)
set -euo pipefail
cd "$(dirname "$0")/.."
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(asan tsan)
for preset in "${presets[@]}"; do
  case $preset in
    asan) targets=(test_unit test_host test_strategy collbench) ;;
    tsan) targets=(test_host test_strategy collbench) ;;
    *)
      echo "sanitize: unknown preset '$preset' (asan | tsan)" >&2
      exit 2
      ;;
  esac
  t0=$SECONDS
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j"$(nproc)" --target "${targets[@]}"
  t1=$SECONDS
  ctest --preset "$preset" -j"$(nproc)"
  echo "sanitize: $preset built ${targets[*]} in $((t1 - t0)) s, ran them in $((SECONDS - t1)) s"
done
