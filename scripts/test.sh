#!/usr/bin/env bash
# The README's test command: set up, build (release, warnings as errors), run the whole ctest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset ci >/dev/null
cmake --build --preset ci -j"$(nproc)"
ctest --preset ci -j"$(nproc)"
