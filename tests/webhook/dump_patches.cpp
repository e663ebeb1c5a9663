// Writes, for every mutated pod case, the original pod and the patch the webhook produced, so an
// independent JSON Patch implementation and the Kubernetes OpenAPI schema can judge them
// (validate_patches.py). Usage: webhook_dump_patches OUT_DIR
#include <filesystem>
#include <fstream>
#include <iostream>

#include "tests/webhook/pod_cases.h"
#include "webhook/config.h"
#include "webhook/pod_mutator.h"

int main(int argc, char** argv) {
  using namespace kvgpu::webhook;
  if (argc != 2) {
    std::cerr << "usage: webhook_dump_patches OUT_DIR\n";
    return 2;
  }
  std::filesystem::create_directories(argv[1]);
  nlohmann::json review = testing::FixtureReview();
  int written = 0;
  // The DRA cases with the lookups' answers they are written for (dra_pod_cases.cpp).
  std::vector<std::pair<testing::PodCase, ClaimResolver>> cases;
  for (const auto& c : testing::PodCases()) cases.emplace_back(c, ClaimResolver());
  for (const auto& c : testing::DraPodCases())
    cases.emplace_back(c.pod, testing::TableResolver(c.claims));
  for (const auto& [c, claims] : cases) {
    auto config = ParseConfig(c.config_yaml);
    if (!config.ok()) {
      std::cerr << c.description << ": " << config.status().message() << "\n";
      return 1;
    }
    nlohmann::json pod = review["request"]["object"];
    c.shape(pod);
    auto decision = DecidePod(pod, c.namespace_name, *config.value(), claims);
    if (!decision.ok()) {
      std::cerr << c.description << ": " << decision.status().message() << "\n";
      return 1;
    }
    if (decision->outcome != PodOutcome::kMutated) continue;
    nlohmann::json out = {
        {"description", c.description},
        {"pod", pod},
        {"patch", nlohmann::json::parse(decision->patch)},
        {"markerAnnotation", config.value()->marker_annotation},
        {"coldPlugRuntimeClassNames", config.value()->cold_plug_runtime_class_names}};
    std::ofstream file(std::filesystem::path(argv[1]) /
                       ("case-" + std::to_string(written++) + ".json"));
    file << out.dump(2) << "\n";
  }
  std::cout << "wrote " << written << " patched pod cases to " << argv[1] << "\n";
  return written > 0 ? 0 : 1;
}
