# kvgpu_warnings(target): the project's warning set on one target.
function(kvgpu_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
                                           -Wconversion -Wsign-conversion
                                           -Wimplicit-fallthrough -Wformat=2)
  if(KVGPU_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
