// Parses an AdmissionReview into a JSON document that holds only what the admission decision
// reads: apiVersion, kind, and of the request uid, kind, resource, subResource, operation,
// namespace, name and the Pod's metadata.namespace, name, generateName, the opt-out and marker
// annotations, and from the spec runtimeClassName, restartPolicy, container names, resources,
// mounts' names and paths, env names, and the volumes whole. managedFields, status, the
// last-applied annotation and the rest of the pod are validated but never built, which was the
// largest cost of a review.
//
// Every field that is kept keeps its type, so the decision sees the same types (and reports the
// same errors) as on the whole document; tests compare the two on every pod shape.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvgpu::webhook {

struct PrunedReview {
  enum class Error { kNone, kNotJson, kTooDeep, kTooLarge };
  Error error = Error::kNone;
  nlohmann::json document;
  size_t cost = 0;  // what `document` was charged (kValueCost per value plus string bytes)
};

// What one kept JSON value costs in memory beyond its string bytes, an upper estimate for
// nlohmann::json on 64-bit glibc: the 16-byte value, its std::map node or vector slot, the key's
// std::string and malloc's overhead (tests/webhook/review_parse_test.cpp measures it).
inline constexpr size_t kValueCost = 160;

// `annotation_keys`: the only metadata.annotations entries kept. `max_depth`: nesting beyond
// this is refused (kTooDeep) while parsing. `max_cost`: the document kept may cost at most this
// many bytes (kValueCost per value plus string bytes); past it parsing stops (kTooLarge).
//
// Bodies up to 64 KiB (every ordinary review) are validated whole by simdjson and pruned from its
// DOM, where a dropped subtree costs nothing; larger bodies, and any simdjson refuses, go through
// nlohmann's SAX parser with a pruning handler (ParsePrunedReviewStreaming). Both keep, charge and
// refuse alike; the one difference is "-0", kept as unsigned 0 on the simdjson path (nlohmann:
// signed 0; the two compare equal and print alike).
PrunedReview ParsePrunedReview(std::string_view body,
                               const std::vector<std::string_view>& annotation_keys, int max_depth,
                               size_t max_cost = SIZE_MAX);

// nlohmann's SAX parser only, whatever the size (the tests and the fuzzer compare the two paths).
PrunedReview ParsePrunedReviewStreaming(std::string_view body,
                                        const std::vector<std::string_view>& annotation_keys,
                                        int max_depth, size_t max_cost = SIZE_MAX);

}  // namespace kvgpu::webhook
