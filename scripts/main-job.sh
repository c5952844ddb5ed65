#!/usr/bin/env bash
# The README's main job: set up, build, and simulate all-reduce on a shipped topology (the embedded default).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target collbench
exec build/release/tools/collbench perf all_reduce --backend sim --topology dgx-h100-8x1 -g 8 -b 1K -e 1G -f 4 "$@"
