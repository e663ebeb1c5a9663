// The one table of pod fields: every field the decision may read is kept by the review parser's
// rules, and a pod with every field set parses to itself once what the table does not name is
// stripped.
#include "webhook/pod_fields.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>

#include "webhook/review_parse.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

std::set<std::string> KeysKeptBy(const FieldRule& rule) {
  std::set<std::string> out;
  std::function<void(const FieldRule&)> walk = [&](const FieldRule& r) {
    for (const auto& [key, child] : r.fields) {
      out.insert(std::string(key));
      if (child != nullptr) walk(*child);
    }
    if (r.items != nullptr) walk(*r.items);
  };
  walk(rule);
  return out;
}

TEST(PodFields, EveryFieldTheDecisionMayReadIsKeptByTheParser) {
  const std::set<std::string> kept = KeysKeptBy(PodRule());
  for (const PodField& field : AllPodFields()) {
    EXPECT_TRUE(kept.contains(std::string(field.key))) << field.key;
  }
}

TEST(PodFields, TheParserKeepsTheTablesFieldsOfAPodAndDropsTheRest) {
  const json pod = json::parse(R"({
    "metadata": {"namespace": "ml", "name": "p", "generateName": "p-", "uid": "drop",
                 "annotations": {"kept/key": "1", "other/key": "drop"}},
    "spec": {"runtimeClassName": "kata-vgpu", "restartPolicy": "Never", "nodeName": "drop",
             "containers": [{"name": "c", "image": "drop",
                             "resources": {"limits": {"tencent.com/vgpu-222": "1"}},
                             "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": true}],
                             "env": [{"name": "E", "value": "drop"}]}],
             "volumes": [{"name": "v", "emptyDir": {}}]},
    "status": {"phase": "drop"}})");
  const json review = {{"apiVersion", "admission.k8s.io/v1"},
                       {"kind", "AdmissionReview"},
                       {"request", {{"uid", "u"}, {"object", pod}}}};
  PrunedReview pruned = ParsePrunedReview(review.dump(), {"kept/key"}, 64);
  ASSERT_EQ(pruned.error, PrunedReview::Error::kNone);
  const json& kept = pruned.document["request"]["object"];
  const json expected = json::parse(R"({
    "metadata": {"namespace": "ml", "name": "p", "generateName": "p-",
                 "annotations": {"kept/key": "1"}},
    "spec": {"runtimeClassName": "kata-vgpu", "restartPolicy": "Never",
             "containers": [{"name": "c",
                             "resources": {"limits": {"tencent.com/vgpu-222": "1"}},
                             "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                             "env": [{"name": "E"}]}],
             "volumes": [{"name": "v", "emptyDir": {}}]}})");
  EXPECT_EQ(kept, expected) << kept.dump(2);
}

}  // namespace
}  // namespace kvgpu::webhook
