# Warning flags for the project's own targets: collbench_warnings(target). CI builds add -Werror.
function(collbench_warnings target)
  # -Wconversion: implicit narrowing (size_t -> int, double -> float, ...) must be written as a cast.
  # -Wno-restrict: GCC 12 reports false positives inside libstdc++'s std::string (GCC bug 105329).
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-restrict)
  if(COLLBENCH_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# Sanitizers for the asan/tsan presets, applied to everything built here (the project's own code and tests).
set(COLLBENCH_SANITIZE "" CACHE STRING "Comma-separated -fsanitize= list (address,undefined | thread)")
if(COLLBENCH_SANITIZE)
  add_compile_options(-fsanitize=${COLLBENCH_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${COLLBENCH_SANITIZE})
  if(COLLBENCH_SANITIZE MATCHES "undefined")
    # UBSan's null, alignment and vptr checks instrument every member access and reference binding: with them GCC 12
    # takes 4x as long on the JSON-heavy sources (core/topology/topology.cc: 72 s with, 18 s without, at -O1 -g1 vs -O2 -g),
    # which is what keeps the asan stage inside CI's budget. ASan still reports a null dereference (SEGV with the
    # stack); the remaining UBSan checks (overflow, shifts, bounds, enum/bool loads, float casts...) stay on.
    add_compile_options(-fno-sanitize=null,alignment,vptr)
  endif()
endif()

# clang-format over the project's own sources: `format-check` fails on a diff, `format` rewrites.
find_program(COLLBENCH_CLANG_FORMAT clang-format)
if(COLLBENCH_CLANG_FORMAT)
  # Every C++/CUDA source and header of ours, in every directory that holds code (a glob per directory, so a new
  # file or a new kind of file, e.g. strategy/*.h, cannot be missed).
  set(_format_globs)
  foreach(_dir include core run rendezvous backend simulator strategy tools bench tests examples)
    foreach(_ext h hpp cc cpp cu cuh)
      list(APPEND _format_globs ${PROJECT_SOURCE_DIR}/${_dir}/*.${_ext})
    endforeach()
  endforeach()
  file(GLOB_RECURSE COLLBENCH_FORMAT_SOURCES CONFIGURE_DEPENDS ${_format_globs})
  add_custom_target(format-check COMMAND ${COLLBENCH_CLANG_FORMAT} --dry-run --Werror ${COLLBENCH_FORMAT_SOURCES}
                    COMMENT "clang-format --dry-run on the project's sources" VERBATIM)
  add_custom_target(format COMMAND ${COLLBENCH_CLANG_FORMAT} -i ${COLLBENCH_FORMAT_SOURCES} VERBATIM)
endif()

# clang-tidy with the repo's .clang-tidy over the project's own translation units: `tidy-check` (run-clang-tidy runs
# one clang-tidy per core). The compile database is GCC's: clang must ignore GCC-only flags (-Wno-restrict), and
# compiler warnings stay GCC's job (-Wno-error: clang's -Wconversion family is wider than GCC's), so only the
# .clang-tidy checks can fail this target.
find_program(COLLBENCH_CLANG_TIDY NAMES run-clang-tidy run-clang-tidy-14)
if(COLLBENCH_CLANG_TIDY)
  add_custom_target(tidy-check
                    COMMAND ${COLLBENCH_CLANG_TIDY} -quiet -p ${PROJECT_BINARY_DIR}
                            -extra-arg=-Wno-unknown-warning-option -extra-arg=-Wno-error
                            "^${PROJECT_SOURCE_DIR}/(core|run|rendezvous|backend/host|simulator|strategy|tools)/.*\\.cc$"
                    COMMENT "clang-tidy (.clang-tidy) on the project's sources" VERBATIM)
endif()
