# kvgpu_warnings(target): the project's warning set on one target.
function(kvgpu_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
                                           -Wconversion -Wsign-conversion
                                           -Wimplicit-fallthrough -Wformat=2)
  if(KVGPU_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
    # GCC 12 at -O3 (Release) reports -Wrestrict inside <string> for plain std::string
    # concatenation (GCC bug 105329): it stays a warning there instead of failing the build.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-Wno-error=restrict>)
    endif()
  endif()
endfunction()
