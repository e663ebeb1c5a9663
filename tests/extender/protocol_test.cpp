// The extender's wire format against kube-scheduler's Go types (fixtures/SOURCES.md): arguments
// in both shapes read, names matched as Go's decoder does, and answers carrying exactly the
// field names of types.go. Also the pod's vGPU demand per container, as kubelet admits it.
#include "extender/protocol.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "tests/extender/fixture_file.h"
#include "tests/extender/pod_text.h"

namespace kvgpu::extender {
namespace {

using nlohmann::json;

std::set<std::string> Keys(const json& object) {
  std::set<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.insert(key);
  return keys;
}

TEST(ExtenderProtocolTest, ArgsWithWholeNodesGiveEachNodesNameAndStateAnnotation) {
  Result<ExtenderArgs> args = ParseExtenderArgs(Fixture("args_with_nodes.json"));
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_FALSE(args->names_only);
  EXPECT_EQ(args->pod.Key(), "ml/train-0");
  EXPECT_EQ(args->pod.uid, "3f1c2b9e-8d1a-4e55-9a57-0c6f3d2a1b10");
  ASSERT_EQ(args->nodes.size(), 2u);
  EXPECT_EQ(args->nodes[0].name, "gpu-node-1");
  EXPECT_EQ(args->nodes[0].state_annotation, "STATE-1");
  EXPECT_EQ(args->nodes[1].name, "gpu-node-2");
  EXPECT_FALSE(args->nodes[1].state_annotation.has_value());
}

TEST(ExtenderProtocolTest, ArgsWithNodeNamesAreNamesOnly) {
  Result<ExtenderArgs> args = ParseExtenderArgs(Fixture("args_with_node_names.json"));
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_TRUE(args->names_only);
  ASSERT_EQ(args->nodes.size(), 3u);
  EXPECT_EQ(args->nodes[2].name, "gpu-node-3");
  EXPECT_TRUE(args->nodes[2].object.is_null());
}

TEST(ExtenderProtocolTest, NamesAreMatchedIgnoringCaseAsGosDecoderDoes) {
  json body = Fixture("args_with_node_names.json");
  json lower = {{"pod", body["Pod"]}, {"nodenames", body["NodeNames"]}, {"nodes", nullptr}};
  Result<ExtenderArgs> args = ParseExtenderArgs(lower);
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_EQ(args->nodes.size(), 3u);
}

TEST(ExtenderProtocolTest, MalformedArgsAreRefusedWithWhatIsWrong) {
  const json pod = Fixture("args_with_node_names.json")["Pod"];
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array(), "not a JSON object"},
      {{{"NodeNames", json::array()}}, "Pod"},
      {{{"Pod", pod}}, "neither Nodes nor NodeNames"},
      {{{"Pod", pod}, {"NodeNames", {1, 2}}}, "NodeNames"},
      {{{"Pod", pod}, {"Nodes", {{"items", {{{"metadata", json::object()}}}}}}}, "metadata.name"},
      {{{"Pod", {{"metadata", {{"name", "x"}}}}}, {"NodeNames", json::array()}}, "Pod"},
  };
  for (const auto& [body, says] : cases) {
    Result<ExtenderArgs> args = ParseExtenderArgs(body);
    ASSERT_FALSE(args.ok()) << body.dump();
    EXPECT_NE(args.status().message().find(says), std::string::npos) << args.status().message();
  }
}

// Reading the request's text (NodeNames without a document) gives what reading its document
// gives, for the shapes kube-scheduler sends and for odd ones: names in other cases, a repeated
// key (the last counts), NodeNames holding a non-string or a nested list, NodeNames below the top
// level, whole Nodes; text that is not JSON is kDecode. (Whether simdjson's reader or nlohmann's
// took each body, and thousands more bodies: protocol_fast_test.cpp.)
TEST(ExtenderProtocolTest, ArgsReadFromTextEqualArgsReadFromTheDocument) {
  const json names_body = Fixture("args_with_node_names.json");
  const json pod = names_body["Pod"];
  const std::vector<std::string> bodies = {
      names_body.dump(),
      Fixture("args_with_nodes.json").dump(),
      json{{"pod", pod}, {"nodenames", {"a", "b"}}, {"nodes", nullptr}}.dump(),
      R"({"NodeNames":["a","b"],"Pod":)" + pod.dump() + R"(,"NodeNames":["c"]})",
      R"({"nodeNames":["x"],"Pod":)" + pod.dump() + R"(,"NodeNames":["a","b"]})",
      R"({"Pod":)" + pod.dump() + R"(,"NodeNames":["a",1]})",
      R"({"Pod":)" + pod.dump() + R"(,"NodeNames":["a",["b"]]})",
      R"({"Pod":)" + pod.dump() + R"(,"NodeNames":[{"a":1}]})",
      R"({"Pod":)" + pod.dump() + R"(,"NodeNames":null,"Nodes":{"items":[]}})",
      R"({"Pod":)" + pod.dump() + R"(,"Extra":{"NodeNames":[1]},"NodeNames":["éé"]})",
      R"({"Pod":)" + pod.dump() + R"(,"NodeNames":[]})",
      R"([["a"]])",
      R"("NodeNames")",
  };
  for (const std::string& body : bodies) {
    SCOPED_TRACE(body.substr(0, 200));
    Result<ExtenderArgs> from_document = ParseExtenderArgs(json::parse(body));
    Result<ExtenderArgs> from_text = ParseExtenderArgsText(body);
    ASSERT_EQ(from_text.ok(), from_document.ok()) << from_text.status().ToString();
    if (!from_text.ok()) {
      EXPECT_EQ(from_text.status().message(), from_document.status().message());
      continue;
    }
    EXPECT_EQ(from_text->names_only, from_document->names_only);
    EXPECT_EQ(PodText(from_text->pod), PodText(from_document->pod));
    ASSERT_EQ(from_text->nodes.size(), from_document->nodes.size());
    for (size_t i = 0; i < from_text->nodes.size(); ++i) {
      EXPECT_EQ(from_text->nodes[i].name, from_document->nodes[i].name);
      EXPECT_EQ(from_text->nodes[i].object, from_document->nodes[i].object);
      EXPECT_EQ(from_text->nodes[i].state_annotation, from_document->nodes[i].state_annotation);
    }
  }
  for (const char* not_json : {R"({"Pod":{}, "NodeNames":["a")", "", "{]", "[1,]"}) {
    Result<ExtenderArgs> args = ParseExtenderArgsText(not_json);
    ASSERT_FALSE(args.ok()) << not_json;
    EXPECT_EQ(args.status().code(), ErrorCode::kDecode) << not_json;
  }
}

TEST(ExtenderProtocolTest, TheFilterResultHasTypesGosFieldsInTheShapeTheArgsCameIn) {
  const std::set<std::string> go_fields = {"Nodes", "NodeNames", "FailedNodes",
                                           "FailedAndUnresolvableNodes", "Error"};
  Result<ExtenderArgs> whole = ParseExtenderArgs(Fixture("args_with_nodes.json"));
  json result = FilterResult(*whole, {"gpu-node-1"}, {}, {{"gpu-node-2", "no state"}});
  EXPECT_EQ(Keys(result), go_fields);
  EXPECT_TRUE(result["NodeNames"].is_null());
  ASSERT_EQ(result["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(result["Nodes"]["items"][0], Fixture("args_with_nodes.json")["Nodes"]["items"][0])
      << "the kept Node is handed back as it came";
  EXPECT_EQ(result["FailedAndUnresolvableNodes"]["gpu-node-2"], "no state");

  Result<ExtenderArgs> names = ParseExtenderArgs(Fixture("args_with_node_names.json"));
  result = FilterResult(*names, {"gpu-node-3"}, {{"gpu-node-1", "full"}}, {});
  EXPECT_EQ(Keys(result), go_fields);
  EXPECT_TRUE(result["Nodes"].is_null());
  EXPECT_EQ(result["NodeNames"], json::array({"gpu-node-3"}));
  EXPECT_EQ(result["FailedNodes"]["gpu-node-1"], "full");

  EXPECT_EQ(Keys(FilterError("bad")), go_fields);
  EXPECT_EQ(FilterError("bad")["Error"], "bad");
}

TEST(ExtenderProtocolTest, PrioritiesAndBindingUseTypesGosFieldNames) {
  json list = PriorityList({{"gpu-node-1", 10}, {"gpu-node-2", 0}});
  ASSERT_TRUE(list.is_array());
  EXPECT_EQ(Keys(list[0]), (std::set<std::string>{"Host", "Score"}));
  EXPECT_EQ(list[0]["Host"], "gpu-node-1");
  EXPECT_EQ(list[0]["Score"], 10);
  EXPECT_EQ(Keys(BindingResult("")), std::set<std::string>{"Error"});

  Result<BindingArgs> binding = ParseBindingArgs(Fixture("binding_args.json"));
  ASSERT_TRUE(binding.ok()) << binding.status().ToString();
  EXPECT_EQ(binding->pod_name, "train-0");
  EXPECT_EQ(binding->pod_namespace, "ml");
  EXPECT_EQ(binding->node, "gpu-node-1");
  EXPECT_FALSE(ParseBindingArgs({{"PodName", "x"}}).ok());
}

// The answers are written as text, not through a JSON document (FilterResultText,
// PriorityListText): they must read back as the document nlohmann would have written, whatever
// a name or reason holds (common/json_string.h writes each string; its own test holds the cases
// of quotes, control characters, UTF-8 and bytes that are not UTF-8).
TEST(ExtenderProtocolTest, AnswersWrittenAsTextReadBackAsTheDocumentForAnyNameOrReason) {
  Result<ExtenderArgs> names = ParseExtenderArgs(Fixture("args_with_node_names.json"));
  ASSERT_TRUE(names.ok());
  const std::map<std::string, std::string> failed = {{"n\"1", "full: 222\n"}, {"n2", "x"}};
  const std::map<std::string, std::string> unresolvable = {{"caf\xc3\xa9", "no \\ state"}};
  const std::vector<std::string_view> kept = {"a", "b\tc\b\f\x01", "d"};
  json document = {{"Nodes", nullptr},
                   {"NodeNames", json::array({"a", "b\tc\b\f\x01", "d"})},
                   {"FailedNodes", failed},
                   {"FailedAndUnresolvableNodes", unresolvable},
                   {"Error", ""}};
  const std::string text = FilterResultText(*names, kept, failed, unresolvable);
  EXPECT_EQ(text, document.dump()) << "the very text nlohmann writes";
  EXPECT_EQ(
      FilterResultText(*names, {}, {}, {}),
      R"({"Error":"","FailedAndUnresolvableNodes":{},"FailedNodes":{},"NodeNames":[],"Nodes":null})");

  const std::vector<std::pair<std::string_view, int64_t>> scores = {
      {"n\"1", 10}, {"n2", 0}, {"n3", -1}};
  json list = json::array();
  for (const auto& [host, score] : scores) list.push_back({{"Host", host}, {"Score", score}});
  EXPECT_EQ(PriorityListText(scores), list.dump());
  EXPECT_EQ(PriorityListText({}), "[]");
}

TEST(PodDemandTest, InitContainersAddOnlyWhatTheAppContainersDoNotCover) {
  Result<ExtenderArgs> args = ParseExtenderArgs(Fixture("args_with_nodes.json"));
  Result<std::vector<scheduling::Demand>> demand = PodDemand(args->pod, "tencent.com/vgpu-");
  ASSERT_TRUE(demand.ok()) << demand.status().ToString();
  // The init container wants 2, the app 1: kubelet hands the init's devices on, so 2 in all.
  ASSERT_EQ(demand->size(), 2u);
  EXPECT_EQ((*demand)[0], (scheduling::Demand{{"tencent.com/vgpu-222", 1}}));
  EXPECT_EQ((*demand)[1], (scheduling::Demand{{"tencent.com/vgpu-222", 1}}));
  EXPECT_TRUE(PodDemand(args->pod, "example.com/gpu-")->empty()) << "other resources: no demand";
}

TEST(PodDemandTest, ACountThatIsNotAWholeNumberIsRefused) {
  kube::PodInfo pod;
  pod.uid = "u";
  pod.containers.push_back({"main", false, {}, {{"tencent.com/vgpu-222", "500m"}}});
  Result<std::vector<scheduling::Demand>> demand = PodDemand(pod, "tencent.com/vgpu-");
  ASSERT_FALSE(demand.ok());
  EXPECT_NE(demand.status().message().find("500m"), std::string::npos);
}

}  // namespace
}  // namespace kvgpu::extender
