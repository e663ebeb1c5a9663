# Functions that put a test program into the VM lab (docs/vm-lab.md). Any tests/<component>/
# CMakeLists.txt may include this file; the `vm_lab` fixture (tests/vm/CMakeLists.txt) builds
# the lab once before every test made here, whatever the order directories are added in.
include_guard(GLOBAL)

# The lab's scripts, for kvgpu_vm_test commands of any directory.
set(KVGPU_VM_DIR ${CMAKE_CURRENT_LIST_DIR} CACHE INTERNAL "tests/vm")

set(KVGPU_VM_TIMEOUT 300 CACHE STRING "seconds one VM test may take, boot included")

# kvgpu_vm_test(name [TIMEOUT sec] [ENVIRONMENT VAR=value...] COMMAND program args...): runs
# the command inside the lab; passes when it exits 0. TIMEOUT replaces KVGPU_VM_TIMEOUT for a
# program that boots VMs of its own; ENVIRONMENT reaches run-in-vm.sh (KVGPU_VM_MEM, ...).
function(kvgpu_vm_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "COMMAND;ENVIRONMENT" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT ${KVGPU_VM_TIMEOUT})
  endif()
  add_test(NAME ${name} COMMAND ${KVGPU_VM_DIR}/run-in-vm.sh --timeout ${T_TIMEOUT} ${T_COMMAND})
  # run-in-vm.sh's own timeout fires first and takes QEMU down with it; CTest's kill would leave
  # QEMU running. A TCG VM keeps both vCPUs busy: one VM at a time on a small machine.
  math(EXPR ctest_timeout "${T_TIMEOUT} + 30")
  set_tests_properties(${name} PROPERTIES LABELS vm FIXTURES_REQUIRED vm_lab
                       TIMEOUT ${ctest_timeout} PROCESSORS 2)
  if(T_ENVIRONMENT)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${T_ENVIRONMENT}")
  endif()
endfunction()

# kvgpu_vm_gtest(name SOURCES ... LIBS ... [ENVIRONMENT VAR=value...] [WRAPPER program args...]):
# a gtest binary, with tests/vm/lab_support.{h,cpp}, run as a whole inside the lab (one VM boot
# for all its cases); WRAPPER runs it (libvirt-lab.sh run: libvirtd started first).
function(kvgpu_vm_gtest name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;ENVIRONMENT;WRAPPER" ${ARGN})
  add_executable(${name} ${T_SOURCES} ${KVGPU_VM_DIR}/lab_support.cpp)
  kvgpu_warnings(${name})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE KVGPU_VGPUCTL_PATH="$<TARGET_FILE:vgpuctl>")
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  add_dependencies(${name} vgpuctl)
  kvgpu_vm_test(${name} ENVIRONMENT ${T_ENVIRONMENT} COMMAND ${T_WRAPPER} $<TARGET_FILE:${name}>)
endfunction()
