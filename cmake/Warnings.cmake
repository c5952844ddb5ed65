# Warning flags for the project's own targets: collbench_warnings(target).
function(collbench_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
  if(COLLBENCH_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
