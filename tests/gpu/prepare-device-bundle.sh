#!/usr/bin/env bash
# Builds, on a build machine (Debian with the project's dev packages, CUDA 13 and NCCL under /usr/local/cuda, no GPU
# needed), what tests/gpu/device-check.sh runs on a GPU machine that has none of those dev packages: the collbench
# CLI, test_gpu and bench_gpu_kernels, with the shared libraries they need that such a machine lacks, in one folder
# (default .device-bundle/ in the repo root, ignored by git) small enough to travel with the working tree.
#
#   tests/gpu/prepare-device-bundle.sh [BUNDLE_DIR]
#
# Build: build/device (COLLBENCH_DEVICE_BUILD_DIR), Release with -Werror like the ci preset (so ccache shares its
# objects), CUDA on, kernels for CUDA_ARCH (default 90: H100/H200), no SimGrid, Gloo or MPI (none of them is needed
# on the device, and each would add its shared libraries), JOBS parallel jobs (default 2). Set ccache through
# CMAKE_*_COMPILER_LAUNCHER as usual.
#
# Bundle layout:
#   bin/      collbench, test_gpu, bench_gpu_kernels (stripped)
#   lib/      every shared library the binaries load that is not part of the base system (fmt, spdlog, benchmark,
#             the CUDA runtime, ...), found with ldd
#   compat/   this machine's libstdc++ and libgcc_s, used by device-check.sh only if the device's are too old
#   MANIFEST  what was built from which commit, with ldd's view of every binary
#   SOURCES.sha256  the hash of every tracked file, so device-check.sh can tell whether the tree it runs in is the
#             one the bundle was built from
# Never bundled: libnccl.so.2 (218 MB; the device has one, e.g. in the PyTorch venv's nvidia/nccl/lib) and the
# driver's libcuda.so.1. The script ends by proving, with an empty environment and only the bundle on
# LD_LIBRARY_PATH, that nothing else outside the base system is still needed. Exit 0 when the bundle is complete and
# within MAX_BUNDLE_MIB (default 48, leaving room for the tree in the device tool's 64 MiB).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:-$repo/.device-bundle}
build=${COLLBENCH_DEVICE_BUILD_DIR:-$repo/build/device}
arch=${CUDA_ARCH:-90}
jobs=${JOBS:-2}
max_mib=${MAX_BUNDLE_MIB:-48}
targets=(collbench test_gpu bench_gpu_kernels)

# Libraries every Linux x86-64 system has (glibc and the compiler runtime; libstdc++/libgcc_s also go to compat/),
# and the two the device must provide itself.
base_system='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libstdc\+\+\.so|libgcc_s\.so)'
from_device='^(libnccl\.so|libcuda\.so)'

say() { echo "[prepare-device-bundle] $*" >&2; }

say "configuring $build (CUDA arch $arch; SimGrid, Gloo, MPI off)"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLLBENCH_WITH_CUDA=ON \
  "-DCOLLBENCH_CUDA_ARCHITECTURES=$arch" -DCOLLBENCH_WITH_SIMGRID=OFF -DCOLLBENCH_WITH_GLOO=OFF \
  -DCOLLBENCH_WITH_MPI=OFF -DCOLLBENCH_WERROR=ON >"$build.configure.log" 2>&1 || {
  cat "$build.configure.log" >&2
  exit 1
}
say "building ${targets[*]} with $jobs jobs"
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

binaries=("$build/tools/collbench" "$build/tests/gpu/test_gpu" "$build/bench/bench_gpu_kernels")
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/compat"
for b in "${binaries[@]}"; do
  cp "$b" "$bundle/bin/"
  strip --strip-unneeded "$bundle/bin/$(basename "$b")"
done

# Copies each library that ldd resolves and that is neither base system nor the device's own, under its soname.
for b in "${binaries[@]}"; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r soname path; do
  if [[ $soname =~ $base_system || $soname =~ $from_device ]]; then continue; fi
  cp -L "$path" "$bundle/lib/$soname"
  strip --strip-unneeded "$bundle/lib/$soname" 2>/dev/null || true
done
for soname in libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$(ldd "$build/tools/collbench" | awk -v s="$soname" '$1 == s { print $3 }')" "$bundle/compat/$soname"
done

# The proof: an empty environment, only the bundle on the library path. Anything that still resolves outside the
# bundle must be base system or the device's own; anything unresolved must be the device's own.
bad=0
for f in "$bundle"/bin/*; do
  while read -r soname arrow path _; do
    [[ $arrow == "=>" ]] || continue
    if [[ $path == "not" ]]; then
      [[ $soname =~ $from_device ]] || { say "$(basename "$f"): $soname not found"; bad=1; }
    elif [[ $path != "$bundle"/* && ! $soname =~ $base_system && ! $soname =~ $from_device ]]; then
      say "$(basename "$f"): $soname still comes from $path"
      bad=1
    fi
  done < <(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$bundle/lib" ldd "$f")
done
((bad == 0)) || { say "bundle incomplete"; exit 1; }

{
  echo "collbench device bundle"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"'))"
  echo "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "cuda_arch: $arch"
  echo "nvcc: $(/usr/local/cuda/bin/nvcc --version | tail -n1)"
  echo "nccl_headers: $(grep -m1 -E '^#define NCCL_VERSION_CODE' /usr/local/cuda/include/nccl.h | awk '{print $3}')"
  for f in "$bundle"/bin/* "$bundle"/lib/* "$bundle"/compat/*; do
    echo "file: ${f#"$bundle"/} $(stat -c %s "$f") $(sha256sum "$f" | cut -c1-16)"
  done
  for f in "$bundle"/bin/*; do
    echo "ldd $(basename "$f") (empty environment, LD_LIBRARY_PATH=<bundle>/lib):"
    env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$bundle/lib" ldd "$f" | sed "s|$bundle|<bundle>|; s/^/  /"
  done
} >"$bundle/MANIFEST"
# Tracked files as they are in the working tree (what travels to the device).
(cd "$repo" && git ls-files -z | xargs -0 sha256sum 2>/dev/null) >"$bundle/SOURCES.sha256" || true

mib=$(du -sm "$bundle" | cut -f1)
say "bundle: $bundle, ${mib} MiB ($(find "$bundle/lib" -type f -printf '%f '))"
if ((mib > max_mib)); then
  say "bundle is ${mib} MiB, over MAX_BUNDLE_MIB=$max_mib"
  exit 1
fi
say "done; device-check.sh uses it when it is at $repo/.device-bundle (or COLLBENCH_DEVICE_BUNDLE)"
