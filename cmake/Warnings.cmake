# Warning flags for the project's own targets: collbench_warnings(target). CI builds add -Werror.
function(collbench_warnings target)
  # -Wno-restrict: GCC 12 reports false positives inside libstdc++'s std::string (GCC bug 105329).
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wno-restrict)
  if(COLLBENCH_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# Sanitizers for the asan/tsan presets, applied to everything built here (the project's own code and tests).
set(COLLBENCH_SANITIZE "" CACHE STRING "Comma-separated -fsanitize= list (address,undefined | thread)")
if(COLLBENCH_SANITIZE)
  add_compile_options(-fsanitize=${COLLBENCH_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${COLLBENCH_SANITIZE})
endif()

# clang-format over the project's own sources: `format-check` fails on a diff, `format` rewrites.
find_program(COLLBENCH_CLANG_FORMAT clang-format)
if(COLLBENCH_CLANG_FORMAT)
  file(GLOB_RECURSE COLLBENCH_FORMAT_SOURCES CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/*.h ${PROJECT_SOURCE_DIR}/core/*.cc ${PROJECT_SOURCE_DIR}/core/*.h
       ${PROJECT_SOURCE_DIR}/backend/*.cc ${PROJECT_SOURCE_DIR}/backend/*.h ${PROJECT_SOURCE_DIR}/backend/*.cu
       ${PROJECT_SOURCE_DIR}/simulator/*.cc ${PROJECT_SOURCE_DIR}/simulator/*.h ${PROJECT_SOURCE_DIR}/strategy/*.cc
       ${PROJECT_SOURCE_DIR}/tools/*.cc ${PROJECT_SOURCE_DIR}/tools/*.h ${PROJECT_SOURCE_DIR}/bench/*.cc
       ${PROJECT_SOURCE_DIR}/tests/*.cc ${PROJECT_SOURCE_DIR}/tests/*.h)
  add_custom_target(format-check COMMAND ${COLLBENCH_CLANG_FORMAT} --dry-run --Werror ${COLLBENCH_FORMAT_SOURCES}
                    COMMENT "clang-format --dry-run on the project's sources" VERBATIM)
  add_custom_target(format COMMAND ${COLLBENCH_CLANG_FORMAT} -i ${COLLBENCH_FORMAT_SOURCES} VERBATIM)
endif()

# clang-tidy with the repo's .clang-tidy over the project's own translation units: `tidy-check`.
find_program(COLLBENCH_CLANG_TIDY NAMES run-clang-tidy run-clang-tidy-14)
if(COLLBENCH_CLANG_TIDY)
  add_custom_target(tidy-check
                    COMMAND ${COLLBENCH_CLANG_TIDY} -quiet -p ${PROJECT_BINARY_DIR}
                            "^${PROJECT_SOURCE_DIR}/(core|backend/host|simulator|strategy|tools)/.*\\.cc$"
                    COMMENT "clang-tidy (.clang-tidy) on the project's sources" VERBATIM)
endif()
