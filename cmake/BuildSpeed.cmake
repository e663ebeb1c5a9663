# Build time. The suite compiles the tree three times in CI (ASan, TSan, the README's test
# command) on two cores, and compiling is most of CI's time: these switches take what they can
# off it without changing the code under test. docs/development.md has the measurements.

# The linker: mold where installed (scripts/deps/build.txt installs it), about five times faster
# than GNU ld on the test binaries (a 150 MB test: 9.0 s with ld.bfd, 1.6 s with mold).
set(KVGPU_LINKER "auto" CACHE STRING
    "linker: auto (mold when found), one -fuse-ld= takes, or empty for the compiler's default")
if(KVGPU_LINKER STREQUAL "auto")
  find_program(KVGPU_MOLD mold)
  if(KVGPU_MOLD AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    add_link_options(-fuse-ld=mold)
  endif()
elseif(KVGPU_LINKER)
  add_link_options(-fuse-ld=${KVGPU_LINKER})
endif()

# Debug information: full (-g, for a debugger) or lines (-g1: line tables and inlined frames,
# all that backtraces, sanitizer reports and tests/tsan.supp's function names need; a sixth less
# compile time). The test command and CI use lines.
set(KVGPU_DEBUG_INFO "full" CACHE STRING "debug information: full (-g) or lines (-g1)")
set_property(CACHE KVGPU_DEBUG_INFO PROPERTY STRINGS full lines)
if(KVGPU_DEBUG_INFO STREQUAL "lines")
  foreach(lang C CXX)
    foreach(config DEBUG RELWITHDEBINFO)
      string(REGEX REPLACE "(^| )-g( |$)" "\\1-g1\\2" CMAKE_${lang}_FLAGS_${config}
                           "${CMAKE_${lang}_FLAGS_${config}}")
    endforeach()
  endforeach()
elseif(NOT KVGPU_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "KVGPU_DEBUG_INFO must be full or lines, not '${KVGPU_DEBUG_INFO}'")
endif()

# Unity build: each target's sources compiled a batch at a time (CMake's UNITY_BUILD), so the
# headers every file of a target includes (gtest, nlohmann/json, gRPC, spdlog) are parsed and their
# templates instantiated once per batch instead of once per file. The test command and CI use it;
# off by default, as a change to one file then recompiles its whole batch. It needs each file's
# internal names (anonymous namespace) to differ from those of the other files of its target.
option(KVGPU_UNITY_BUILD "compile each target's sources in batches (CMake's unity build)" OFF)
set(KVGPU_UNITY_BATCH 16 CACHE STRING "source files per batch of a unity build")
if(KVGPU_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE ${KVGPU_UNITY_BATCH})
  # A file's own classes with members of its anonymous-namespace types are fine alone, but GCC
  # warns about them once the file is included into a batch.
  add_compile_options($<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
endif()

# kvgpu_test_code_begin() / kvgpu_test_code_end(): around the top-level lines that add the tests
# and fakes. Their own code (test bodies, fakes of kubelet and the API server) is six tenths of the
# compile time, nearly all of it code generation of gtest's, nlohmann's and gRPC's templates; at
# -O1 it compiles about a third faster. The code under test (every library and daemon) keeps the
# build type's level. Not in sanitizer builds (CI's TSan stage was verified with everything at
# -O2: tests/tsan.supp names gRPC frames as they are inlined there; ASan builds are Debug), and not
# when the benchmarks are built (they drive the fakes).
set(KVGPU_TEST_OPTIMIZATION "-O1" CACHE STRING
    "optimization of test and fake code in RelWithDebInfo and Release builds (empty: as the rest)")
macro(kvgpu_test_code_begin)
  get_directory_property(_kvgpu_product_compile_options COMPILE_OPTIONS)
  if(KVGPU_TEST_OPTIMIZATION AND NOT KVGPU_SANITIZE AND NOT KVGPU_BUILD_BENCH)
    add_compile_options($<$<CONFIG:RelWithDebInfo,Release>:${KVGPU_TEST_OPTIMIZATION}>)
  endif()
endmacro()
macro(kvgpu_test_code_end)
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_kvgpu_product_compile_options}")
endmacro()

# The compiler cache: ccache where installed (scripts/deps/build.txt installs it). Its store lives
# outside the clone (ccache's default, ~/.cache/ccache, or CCACHE_DIR), and is keyed by the
# preprocessed source and the whole command line, so a stale entry can never be used: a changed
# header, flag or compiler is a different key. base_dir makes the paths under the source tree
# relative and hash_dir=false leaves the build directory out of the key, so a second clone of the
# same commit at another path (CI's) compiles nothing that the first already did. A unity build's
# batch files name their sources by absolute path: ccache's direct mode misses them in another
# clone, its preprocessor mode (which rewrites the paths under base_dir) still hits, provided the
# preprocessed text holds no absolute path of the clone: see the prefix map below.
set(KVGPU_CCACHE "auto" CACHE STRING "compiler cache: auto (ccache when found), ON (required) or OFF")
set_property(CACHE KVGPU_CCACHE PROPERTY STRINGS auto ON OFF)
set(KVGPU_CCACHE_SIZE "12G" CACHE STRING "the compiler cache's size limit (ccache's max_size)")
if(NOT KVGPU_CCACHE STREQUAL "OFF")
  find_program(KVGPU_CCACHE_PROGRAM ccache)
  if(KVGPU_CCACHE_PROGRAM)
    # ccache 4.7 takes its settings from the environment only; /usr/bin/env sets them per call.
    # max_size: the three builds of CI (ASan, TSan, the test command) and the fuzz build together
    # take about 6 GB compressed; ccache's default of 5 GB would evict one while another fills.
    set(_kvgpu_ccache_launcher
        env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${KVGPU_CCACHE_SIZE}
        ${KVGPU_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${_kvgpu_ccache_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_kvgpu_ccache_launcher})
  elseif(KVGPU_CCACHE STREQUAL "ON")
    message(FATAL_ERROR "KVGPU_CCACHE=ON but no ccache on PATH (scripts/install-deps.sh installs it)")
  endif()
endif()

# Paths under the source tree written relative to it in what the compiler emits: __FILE__ (every
# gtest assertion, so every test batch; a failure reads "tests/extender/x_test.cpp:38") and the
# debug information (sanitizer reports and backtraces name "extender/x.cpp"; a debugger finds the
# sources with `directory <clone>`). A path ccache already made relative reads from the build
# directory ("../tests/extender/x.h"). Without it a test batch's preprocessed text carries the
# clone's path and misses the cache in every other clone, and an object the cache does hand over
# names the files of the clone that compiled it, which may be gone. On in every build, with or
# without ccache, so that a report reads the same whichever compiled the object. The fixtures'
# paths that tests get as -D definitions (KVGPU_SOURCE_DIR and the like) are not __FILE__ and stay
# absolute: those targets still miss the cache in another clone.
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  add_compile_options(-ffile-prefix-map=${PROJECT_SOURCE_DIR}/=)
endif()
