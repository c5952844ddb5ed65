# Sourced by the bench scripts: sets `collbench` to the binary they run, COLLBENCH if set, else the one on PATH, else
# build/release/tools/collbench, else build/ci/tools/collbench; exits 2 naming the caller when there is none.
# Needs `here` (the repository root).
collbench="${COLLBENCH:-}"
if [[ -z "$collbench" ]]; then
  collbench="$(command -v collbench || true)"
  for c in "$here/build/release/tools/collbench" "$here/build/ci/tools/collbench"; do
    [[ -z "$collbench" && -x "$c" ]] && collbench="$c"
  done
fi
[[ -x "$collbench" ]] || { echo "$(basename "$0"): no collbench binary (set COLLBENCH)" >&2; exit 2; }
