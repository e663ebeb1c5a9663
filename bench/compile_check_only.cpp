// Linked into the benchmarks a test build compiles (bench/CMakeLists.txt): it makes the program
// refuse to measure before main runs, since its fakes were built at the test code's -O1 and a
// figure from it would not compare with those in docs/.
#include <cstdio>
#include <cstdlib>

namespace {

[[maybe_unused]] const bool kRefused = [] {
  std::fputs(
      "this benchmark was built by a test build (test and fake code at KVGPU_TEST_OPTIMIZATION) to "
      "check that it compiles; configure with -DKVGPU_BUILD_BENCH=ON to measure\n",
      stderr);
  std::_Exit(2);
  return true;
}();

}  // namespace
