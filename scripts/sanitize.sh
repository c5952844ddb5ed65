#!/usr/bin/env bash
# Issue #10's sanitizer stages, run by .ci/run after the plain tests: each preset builds only the suites it runs (-O1
# -g1, CUDA off; not the collbench CLI, which would double the build), then runs them with ctest's label filter (no
# match is an error), reduced sweeps (COLLBENCH_QUICK_SWEEP) and the preset's GTEST_FILTER, which leaves out the
# cases that exec the CLI (strategy's process mode and `collbench train`; the plain test stage runs them).
#   asan  AddressSanitizer + UBSan (-fno-sanitize-recover=all, halt_on_error): test_unit (core, every parser's
#         seeded fuzz), test_host (threads backend, store, process-world protocol, Gloo transport), test_strategy
#         (resolvers and their fuzz, MWMS on threads)
#   tsan  ThreadSanitizer (halt_on_error): test_host and test_strategy without the Gloo cases: libgloo is Debian's
#         uninstrumented build, so TSan sees only half of its locking and reports its internals (measured: 12 false
#         reports, all inside Gloo's buffers and threads)
# Any sanitizer report aborts its test binary, so ctest and this script fail.
# Usage: scripts/sanitize.sh [asan|tsan]...   (default: both, in that order)
set -euo pipefail
cd "$(dirname "$0")/.."
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(asan tsan)
for preset in "${presets[@]}"; do
  case $preset in
    asan) targets=(test_unit test_host test_strategy) ;;
    tsan) targets=(test_host test_strategy) ;;
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
