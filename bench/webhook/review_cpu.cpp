// CPU per AdmissionReview: HandleReview on the benchmark's request (the real kube-apiserver
// review made a Kata pod asking for one vGPU), in a loop on one core. Separates the handler's
// cost from TLS, sockets and wrk on a shared machine, where wrk's numbers move with the load.
//   kvgpu-bench-webhook-review REVIEW.json [SECONDS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "webhook/admission.h"
#include "webhook/config.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kvgpu-bench-webhook-review REVIEW.json [SECONDS]\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const std::string body = text.str();
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  auto config = kvgpu::webhook::DefaultConfig();

  auto first = kvgpu::webhook::HandleReview(body, "application/json", *config);
  if (first.outcome != kvgpu::webhook::ReviewOutcome::kMutated) {
    std::fprintf(stderr, "the review did not mutate: %s\n", first.body.c_str());
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  long reviews = 0;
  size_t sink = 0;
  while (Clock::now() < end) {
    for (int i = 0; i < 100; ++i, ++reviews)
      sink += kvgpu::webhook::HandleReview(body, "application/json", *config).body.size();
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%ld reviews in %.2f s: %.1f us each, %.0f reviews/s on one core (%zu)\n", reviews,
              elapsed, elapsed * 1e6 / static_cast<double>(reviews),
              static_cast<double>(reviews) / elapsed, sink % 10);
  return 0;
}
