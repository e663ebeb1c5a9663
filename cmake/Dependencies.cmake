# Every third-party dependency is found here, from Debian's packages (scripts/deps/*.txt).
# Nothing is downloaded at build time.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
# filter's and prioritize's request bodies (extender/protocol_fast.cpp): libsimdjson-dev.
find_package(simdjson 3 REQUIRED)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(OpenSSL REQUIRED)
# Boost.Beast/Asio (header-only) carry the webhook's HTTPS server (libboost-dev).
find_package(Boost 1.74 REQUIRED)
pkg_check_modules(LIBUDEV REQUIRED IMPORTED_TARGET libudev)
# The libvirt backend (mdev/libvirt_backend.h): libvirt's C API and its node-device XML.
pkg_check_modules(LIBVIRT REQUIRED IMPORTED_TARGET libvirt)
find_package(pugixml REQUIRED)

# gRPC + Protobuf: only the components that speak to kubelet need them.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_program(KVGPU_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

find_package(prometheus-cpp CONFIG REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
pkg_check_modules(FUSE3 IMPORTED_TARGET fuse3)

if(KVGPU_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(KVGPU_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# kvgpu_protobuf_grpc(target proto_dir proto...): C++ code for protos + their gRPC services,
# compiled into a static library `target`.
function(kvgpu_protobuf_grpc target proto_dir)
  set(srcs)
  foreach(proto IN LISTS ARGN)
    get_filename_component(name ${proto} NAME_WE)
    get_filename_component(rel_dir ${proto} DIRECTORY)
    set(out ${CMAKE_CURRENT_BINARY_DIR}/gen/${rel_dir})
    set(gen ${out}/${name}.pb.cc ${out}/${name}.pb.h ${out}/${name}.grpc.pb.cc ${out}/${name}.grpc.pb.h)
    add_custom_command(
      OUTPUT ${gen}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/gen
      COMMAND protobuf::protoc --proto_path=${proto_dir} --cpp_out=${CMAKE_CURRENT_BINARY_DIR}/gen
              --grpc_out=${CMAKE_CURRENT_BINARY_DIR}/gen --plugin=protoc-gen-grpc=${KVGPU_GRPC_CPP_PLUGIN}
              ${proto_dir}/${proto}
      DEPENDS ${proto_dir}/${proto}
      COMMENT "protoc ${proto}")
    list(APPEND srcs ${out}/${name}.pb.cc ${out}/${name}.grpc.pb.cc)
  endforeach()
  add_library(${target} STATIC ${srcs})
  # protoc's files each define the same file-scope tables (`schemas`, `file_default_instances`):
  # one translation unit each, also in a unity build.
  set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
  target_include_directories(${target} SYSTEM PUBLIC ${CMAKE_CURRENT_BINARY_DIR}/gen)
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf gRPC::grpc++)
endfunction()

# Tests build many small sysfs-shaped trees; on this disk each mkdir/symlink costs ~0.5 ms, on
# tmpfs microseconds. Tests get TMPDIR pointed at tmpfs when the machine has one.
if(EXISTS /dev/shm AND IS_DIRECTORY /dev/shm)
  set(_default_test_tmpdir /dev/shm)
else()
  set(_default_test_tmpdir /tmp)
endif()
set(KVGPU_TEST_TMPDIR ${_default_test_tmpdir} CACHE PATH "TMPDIR for the tests")

# kvgpu_test(name [ONE_TEST] LABELS l... SOURCES s... LIBS l...): one gtest binary registered
# with CTest, each case a test of its own; with ONE_TEST the binary is a single test of `name`,
# for a suite whose cases share one costly fixture (SetUpTestSuite) that a process per case
# would pay again each time.
# What `ctest -L unit` runs, gathered into the target kvgpu_unit_tests (made at the end of the top
# CMakeLists.txt): CI's sanitizer stage builds that alone, not the integration tests, fakes and
# benchmarks it never runs. A unit test that runs a binary names it here too.
function(kvgpu_unit_tests_need)
  set_property(GLOBAL APPEND PROPERTY KVGPU_UNIT_TEST_TARGETS ${ARGN})
endfunction()

# A test's TIMEOUT is a guard against a hang, not a speed check: it is written for an unsanitized
# build on a quiet machine and multiplied by KVGPU_TEST_TIMEOUT_SCALE. Under a sanitizer the
# CPU-bound property tests run 3-5 times slower, and on a loaded machine (CI's sanitizer stages
# beside its background builds, load 15 on two cores) some took 117-120 s of a 120 s limit, so
# sanitizer builds scale by 4 unless told otherwise.
if(KVGPU_SANITIZE)
  set(_default_timeout_scale 4)
else()
  set(_default_timeout_scale 1)
endif()
set(KVGPU_TEST_TIMEOUT_SCALE ${_default_timeout_scale} CACHE STRING
    "factor on every kvgpu_test TIMEOUT (default 4 in sanitizer builds, else 1)")

function(kvgpu_test name)
  cmake_parse_arguments(T "ONE_TEST" "TIMEOUT" "LABELS;SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  kvgpu_warnings(${name})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  math(EXPR T_TIMEOUT "${T_TIMEOUT} * ${KVGPU_TEST_TIMEOUT_SCALE}")
  if("unit" IN_LIST T_LABELS)
    kvgpu_unit_tests_need(${name})
  endif()
  if(T_ONE_TEST)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
                         ENVIRONMENT "TMPDIR=${KVGPU_TEST_TMPDIR}")
    return()
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
                       ENVIRONMENT "TMPDIR=${KVGPU_TEST_TMPDIR}" DISCOVERY_TIMEOUT 60)
endfunction()
