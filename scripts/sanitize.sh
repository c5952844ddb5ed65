#!/usr/bin/env bash
# Issue #10's sanitizer stages: the core, host-backend, transport and parser suites (ctest label "sanitize")
# under AddressSanitizer+UBSan and under ThreadSanitizer, with reduced sweeps (COLLBENCH_QUICK_SWEEP).
# Prints the wall time of each stage. Not yet part of .ci/run: see the note on issue #10.
set -euo pipefail
cd "$(dirname "$0")/.."
for preset in asan tsan; do
  t0=$SECONDS
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j"$(nproc)" --target test_unit test_host test_strategy
  ctest --preset "$preset" -j"$(nproc)"
  echo "::stage $preset done in $((SECONDS - t0)) s"
done
