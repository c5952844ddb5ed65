# Every dependency is a Debian package (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(PkgConfig REQUIRED)

# SIMD reduction kernels (core/ir/reduce.cc), dispatched at run time to the CPU's best instruction set.
pkg_check_modules(HWY REQUIRED IMPORTED_TARGET libhwy)
pkg_check_modules(SIMGRID IMPORTED_TARGET simgrid>=3.32)
option(COLLBENCH_WITH_SIMGRID "Build the SimGrid simulator backend" ${SIMGRID_FOUND})
if(COLLBENCH_WITH_SIMGRID AND NOT SIMGRID_FOUND)
  message(FATAL_ERROR "COLLBENCH_WITH_SIMGRID=ON but simgrid was not found by pkg-config (apt install libsimgrid-dev)")
endif()

find_package(Gloo CONFIG QUIET)
option(COLLBENCH_WITH_GLOO "Build the Gloo process backend and Gloo baselines" ${Gloo_FOUND})

find_package(MPI QUIET COMPONENTS CXX)
option(COLLBENCH_WITH_MPI "Build the Open MPI baseline driver" ${MPI_CXX_FOUND})

# CUDA + NCCL: on when nvcc and NCCL are both present (they are under /usr/local/cuda on these machines).
set(COLLBENCH_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root")
find_program(COLLBENCH_NVCC nvcc HINTS ${COLLBENCH_CUDA_ROOT}/bin)
find_path(COLLBENCH_NCCL_INCLUDE nccl.h HINTS ${COLLBENCH_CUDA_ROOT}/include)
find_library(COLLBENCH_NCCL_LIBRARY nccl HINTS ${COLLBENCH_CUDA_ROOT}/lib64 ${COLLBENCH_CUDA_ROOT}/lib)
set(_cuda_default OFF)
if(COLLBENCH_NVCC AND COLLBENCH_NCCL_INCLUDE AND COLLBENCH_NCCL_LIBRARY)
  set(_cuda_default ON)
endif()
option(COLLBENCH_WITH_CUDA "Build the NCCL/CUDA backend" ${_cuda_default})

message(STATUS "collbench: simgrid=${COLLBENCH_WITH_SIMGRID} gloo=${COLLBENCH_WITH_GLOO} mpi=${COLLBENCH_WITH_MPI} cuda=${COLLBENCH_WITH_CUDA}")
