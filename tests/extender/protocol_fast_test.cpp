// filter's and prioritize's arguments read with simdjson (ReadExtenderArgsFast) against the
// document reader (ParseExtenderArgs over nlohmann's document): the bodies kube-scheduler sends are
// taken by the fast reader and read the same; every other body - odd shapes, keys the document
// takes differently, values it turns into text, text that is not JSON - is either read the same or
// left to the document reader, and ParseExtenderArgsText gives the document's answer and error for
// all of them. Then thousands of bodies made by breaking good ones at random, byte by byte.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <random>
#include <sstream>

#include "extender/protocol.h"
#include "tests/extender/fixture_file.h"
#include "tests/extender/pod_text.h"

namespace kvgpu::extender {
namespace {

using nlohmann::json;

// A pod as the API server and kube-scheduler write it: most of what it holds is read by nobody
// here, and all of it must still be JSON.
json FullPod() {
  return json::parse(R"({
    "kind": "Pod", "apiVersion": "v1",
    "metadata": {
      "name": "train-0", "generateName": "train-", "namespace": "ml",
      "uid": "3f1c2b9e-8d1a-4e55-9a57-0c6f3d2a1b10", "resourceVersion": "48213",
      "creationTimestamp": "2024-05-01T10:00:00Z",
      "labels": {"app": "train", "tier": "gpu", "x/y": "a\u0026b\u003cc\u003e"},
      "annotations": {"note": "quote \" backslash \\ tab \t nl \n caf\u00e9 \ud83d\ude00 \/",
                      "kubectl.kubernetes.io/last-applied-configuration": "{\"a\":[1,2.5e3,-0.0,true,null]}"},
      "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                           "uid": "0e1d", "controller": true, "blockOwnerDeletion": true}],
      "finalizers": []
    },
    "spec": {
      "runtimeClassName": "kata-vgpu", "schedulerName": "kata-vgpu-scheduler", "priority": 0,
      "terminationGracePeriodSeconds": 30, "enableServiceLinks": false, "nodeName": "",
      "initContainers": [{"name": "init", "image": "busybox",
                          "resources": {"limits": {"tencent.com/vgpu-222": "2", "cpu": "100m"}}}],
      "containers": [
        {"name": "main", "image": "pytorch:2", "args": ["--epochs", "10"],
         "ports": [{"containerPort": 8080, "protocol": "TCP"}],
         "resources": {"limits": {"tencent.com/vgpu-222": "1", "memory": "8Gi"},
                       "requests": {"tencent.com/vgpu-222": "1", "cpu": 1.5}},
         "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "capabilities": {"drop": ["ALL"]}}},
        {"name": "side", "image": "proxy", "resources": {}}
      ],
      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule",
                       "tolerationSeconds": 300}],
      "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                   {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["t4", "a100"]}]}]}}}
    },
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
               "lastProbeTime": null, "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient tencent.com/vgpu-222."}],
               "qosClass": "Burstable", "nominatedNodeName": "node-7"}
  })");
}

// The quantity "cpu": 1.5 above is a number, which the document reader writes as text: the fast
// reader leaves such a body to it. Without it, the pod is what kube-scheduler sends.
json FullPodOfStrings() {
  json pod = FullPod();
  pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1500m";
  return pod;
}

std::string NamesBody(const json& pod, const std::vector<std::string>& names) {
  return json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names}}.dump();
}

void ExpectSameArgs(const ExtenderArgs& got, const ExtenderArgs& want) {
  EXPECT_EQ(got.names_only, want.names_only);
  EXPECT_EQ(PodText(got.pod), PodText(want.pod));
  ASSERT_EQ(got.nodes.size(), want.nodes.size());
  for (size_t i = 0; i < got.nodes.size(); ++i) {
    EXPECT_EQ(got.nodes[i].name, want.nodes[i].name);
    EXPECT_EQ(got.nodes[i].object, want.nodes[i].object);
    EXPECT_EQ(got.nodes[i].state_annotation, want.nodes[i].state_annotation);
  }
}

// What the fast reader and ParseExtenderArgsText make of `body` is what the document reader makes
// of it. Returns whether the fast reader took it.
bool CheckBody(const std::string& body) {
  SCOPED_TRACE(body.substr(0, 300));
  const json document = json::parse(body, nullptr, false);
  const std::optional<ExtenderArgs> fast = ReadExtenderArgsFast(body);
  const Result<ExtenderArgs> text = ParseExtenderArgsText(body);
  if (document.is_discarded()) {
    EXPECT_FALSE(fast.has_value()) << "the fast reader took a body nlohmann refuses";
    EXPECT_FALSE(text.ok());
    if (!text.ok()) {
      EXPECT_EQ(text.status().code(), ErrorCode::kDecode);
    }
    return fast.has_value();
  }
  const Result<ExtenderArgs> want = ParseExtenderArgs(document);
  EXPECT_EQ(text.ok(), want.ok()) << (text.ok() ? want : text).status().ToString();
  if (!text.ok() && !want.ok()) {
    EXPECT_EQ(text.status().code(), want.status().code());
    EXPECT_EQ(text.status().message(), want.status().message());
  }
  if (text.ok() && want.ok()) ExpectSameArgs(*text, *want);
  if (fast) {
    EXPECT_TRUE(want.ok()) << "the fast reader took arguments the document reader refuses: "
                           << want.status().ToString();
    if (want.ok()) ExpectSameArgs(*fast, *want);
  }
  return fast.has_value();
}

TEST(ExtenderArgsFastTest, TheBodiesKubeSchedulerSendsAreReadFastAndTheSame) {
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) names.push_back("gpu-node-" + std::to_string(i));
  const std::vector<std::string> bodies = {
      Fixture("args_with_node_names.json").dump(),
      Fixture("args_with_node_names.json").dump(2),  // whitespace everywhere
      NamesBody(FullPodOfStrings(), names),
      NamesBody(FullPodOfStrings(), {}),
      // Names that need escapes or are not ASCII; Go writes U+2028 as \u2028.
      NamesBody(FullPodOfStrings(), {"caf\xc3\xa9", "a\"b", "back\\slash", "tab\t", "\xe2\x80\xa8",
                                     "\xf0\x9f\x98\x80", ""}),
      R"({"NodeNames":["n\u00e9","\ud83d\ude00","\/x","a\u2028"],"Pod":)" +
          FullPodOfStrings().dump() + "}",
      // Nodes left out, extra fields, a pod whose spec and status are of other types.
      R"({"Pod":{"metadata":{"uid":"u","namespace":"n","name":"p"},"spec":[],"status":7},)"
      R"("NodeNames":["a"],"Extra":{"deep":[[[{"x":[1,-2.5E-3,true,false,null]}]]]}})",
      // Containers that are not objects, resources that are not objects, an unset deletion time.
      R"({"Pod":{"metadata":{"uid":"u","namespace":"n","name":"p","deletionTimestamp":null},)"
      R"("spec":{"containers":[1,"x",null,{"resources":[]},{"resources":{"limits":7}}],)"
      R"("initContainers":{}}},"NodeNames":["a"]})",
      // A deletion time of any value but null marks the pod ending; a uid past a sane length.
      R"({"Pod":{"metadata":{"uid":")" + std::string(400, 'u') +
          R"(","namespace":"n","name":"p","deletionTimestamp":false}},"NodeNames":[]})",
      // Names and fields that need escaping in logs (PeerName), and a node name too.
      R"({"Pod":{"metadata":{"uid":"u\u0001\"","namespace":"n\n","name":"p\u00e9"},)"
      R"("spec":{"nodeName":"x\ty","containers":[{"name":"c\u0000"}]}},"NodeNames":["a"]})",
      // A resource repeated in one list: the last counts, in both readers.
      R"({"Pod":{"metadata":{"uid":"u","namespace":"n","name":"p"},"spec":{"containers":)"
      R"([{"resources":{"limits":{"tencent.com/vgpu-222":"1","tencent.com/vgpu-222":"3"}}}]}},)"
      R"("NodeNames":["a"]})",
      // The same key in two containers, and keys that only look alike.
      R"({"Pod":{"metadata":{"uid":"u","namespace":"n","name":"p","Name":"q"},"Spec":{},)"
      R"("spec":{"containers":[{"name":"a"},{"name":"a"}]}},"NodeNames":["a"],"Node":1})",
      "\t\r\n " + Fixture("args_with_node_names.json").dump() + " \n",
  };
  for (const std::string& body : bodies) {
    EXPECT_TRUE(CheckBody(body)) << "not read fast: " << body.substr(0, 300);
  }
  const std::optional<ExtenderArgs> args =
      ReadExtenderArgsFast(NamesBody(FullPodOfStrings(), names));
  ASSERT_TRUE(args.has_value());
  EXPECT_EQ(args->pod.Key(), "ml/train-0");
  ASSERT_EQ(args->pod.containers.size(), 3u);
  EXPECT_TRUE(args->pod.containers[0].init) << "init containers first, as ParsePod puts them";
  EXPECT_EQ(args->pod.containers[1].requests.at("cpu"), "1500m");
  EXPECT_EQ(args->nodes.size(), 1000u);
  EXPECT_EQ(args->nodes[999].name, "gpu-node-999");
}

// Bodies the fast reader leaves to the document reader, each for its reason, and bodies that are
// not JSON or not arguments: ParseExtenderArgsText answers them all as the document reader does.
TEST(ExtenderArgsFastTest, OddOrBadBodiesGetTheDocumentReadersAnswerAndError) {
  const std::string pod = FullPodOfStrings().dump();
  const std::string small = R"({"metadata":{"uid":"u","namespace":"n","name":"p"}})";
  const std::vector<std::string> left = {
      // Another case: Go's decoder matches it, the document reader too.
      R"({"pod":)" + pod + R"(,"nodenames":["a"],"nodes":null})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"nodeNames":["b"]})",
      // Repeated keys: the last counts in the document.
      R"({"Pod":)" + small + R"(,"NodeNames":["a"],"NodeNames":["b"]})",
      R"({"Pod":{"metadata":{"uid":"u","namespace":"n","name":"p","uid":"v"}},"NodeNames":[]})",
      R"({"Pod":{"metadata":{"uid":"u","namespace":"n","name":"p"},"metadata":{"uid":"w","namespace":"n","name":"p"}},"NodeNames":[]})",
      R"({"Pod":{"metadata":{"uid":"u","namespace":"n","name":"p"},"spec":{"containers":[{"name":"a","name":"b"}]}},"NodeNames":[]})",
      // A quantity written as a number: the document reader writes it out as text.
      NamesBody(FullPod(), {"a"}),
      R"({"Pod":{"metadata":{"uid":"u","namespace":"n","name":"p"},"spec":{"containers":[{"resources":{"limits":{"tencent.com/vgpu-222":1}}}]}},"NodeNames":["a"]})",
      // An integer past 64 bits: nlohmann reads it as a float, simdjson does not read it.
      R"({"Pod":)" + small + R"(,"NodeNames":["a"],"Big":123456789012345678901234567890})",
      // Whole Nodes, or both, or neither.
      Fixture("args_with_nodes.json").dump(),
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"Nodes":{"items":[]}})",
      R"({"Pod":)" + pod + R"(,"NodeNames":null,"Nodes":null})",
      R"({"Pod":)" + pod + "}",
      // Names that are not all strings.
      R"({"Pod":)" + pod + R"(,"NodeNames":["a",1]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a",["b"]]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":{"a":1}})",
      // Pods the document reader refuses, each with its reason.
      R"({"Pod":{"metadata":{"namespace":"n","name":"p"}},"NodeNames":["a"]})",
      R"({"Pod":{"metadata":{"uid":7,"namespace":"n","name":"p"}},"NodeNames":["a"]})",
      R"({"Pod":{"metadata":[]},"NodeNames":["a"]})",
      R"({"Pod":{},"NodeNames":["a"]})",
      R"({"Pod":[],"NodeNames":["a"]})",
      R"({"NodeNames":["a"]})",
      R"([])",
      R"("NodeNames")",
      R"(null)",
      // A UTF-8 byte-order mark: nlohmann skips it.
      "\xef\xbb\xbf" + NamesBody(FullPodOfStrings(), {"a"}),
      // nlohmann takes a NUL byte for the end of the text, and ignores what follows.
      "{\"Pod\":" + pod + ",\"NodeNames\":[\"a\"]}" + std::string(1, '\0'),
      "{\"Pod\":" + pod + ",\"NodeNames\":[\"a\"]}" + std::string(1, '\0') + "]x",
      // Nested past the fast reader's depth.
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"Deep":)" + std::string(300, '[') +
          std::string(300, ']') + "}",
  };
  for (const std::string& body : left) {
    EXPECT_FALSE(CheckBody(body)) << "read fast: " << body.substr(0, 300);
  }
  const std::vector<std::string> not_json = {
      "",
      " ",
      "{",
      "{]",
      "[1,]",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"])",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"]}})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"]} x)",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"]}{})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a",]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a" "b"]})",
      R"({"Pod":)" + pod + R"(,"NodeNames"["a"]})",
      R"({"Pod":)" + pod + R"(,NodeNames:["a"]})",
      R"({"Pod":)" + pod + R"(,'NodeNames':['a']})",
      // Bad values where nothing reads them.
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":tru})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":nul})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":01})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":1.})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":-})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":1e400})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":+1})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":NaN})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":[1 2]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":{"a" 1}})",
      // Strings: bad escapes, surrogates alone or mismatched, control characters, not UTF-8.
      R"({"Pod":)" + pod + R"(,"NodeNames":["a\x"]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["\ud800"]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["\udc00"]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["\ud800\u0041"]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["\ud800x"]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["\u12G4"]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["a"],"x":"\ud83d\ud83d"})",
      "{\"Pod\":" + pod + ",\"NodeNames\":[\"a\x01\"]}",
      "{\"Pod\":" + pod + ",\"NodeNames\":[\"a\tb\"]}",
      "{\"Pod\":" + pod + ",\"NodeNames\":[\"a\xff\"]}",
      "{\"Pod\":" + pod + ",\"NodeNames\":[\"\xed\xa0\x80\"]}",
      "{\"Pod\":" + pod + ",\"NodeNames\":[\"\xc0\xaf\"]}",
      "{\"Pod\":" + pod + ",\"NodeNames\":[\"a\"]\xc3\xa9}",
  };
  for (const std::string& body : not_json) {
    ASSERT_TRUE(json::parse(body, nullptr, false).is_discarded()) << body.substr(0, 300);
    EXPECT_FALSE(CheckBody(body));
  }
}

TEST(ExtenderArgsFastTest, ABodyOverTheBoundIsLeftToTheDocumentReader) {
  std::vector<std::string> names(9, std::string(1 << 20, 'n'));
  const std::string body = NamesBody(FullPodOfStrings(), names);
  ASSERT_GT(body.size(), kFastArgsMaxBody);
  EXPECT_FALSE(CheckBody(body));
  // One that fits the bound but not the reader kept per thread: read on its own.
  names.resize(2);
  EXPECT_TRUE(CheckBody(NamesBody(FullPodOfStrings(), names)));
  EXPECT_TRUE(CheckBody(NamesBody(FullPodOfStrings(), {"a"}))) << "the kept reader again";
}

// Good bodies broken at random: a byte removed, replaced or added (from JSON's own characters,
// escapes, bytes that are not UTF-8), a run repeated, the body cut short, a letter's case changed.
// Whatever the fast reader takes, the document reader reads the same; whatever nlohmann refuses,
// the fast reader refuses too.
TEST(ExtenderArgsFastTest, BodiesBrokenAtRandomGetTheDocumentReadersAnswer) {
  const std::vector<std::string> seeds = {
      NamesBody(FullPodOfStrings(), {"gpu-node-1", "caf\xc3\xa9", "a\"b"}),
      Fixture("args_with_node_names.json").dump(),
      R"({"Pod":{"metadata":{"uid":"u","namespace":"n","name":"p","deletionTimestamp":null},)"
      R"("spec":{"containers":[{"name":"c","resources":{"limits":{"tencent.com/vgpu-222":"1"}}}]},)"
      R"("status":{"phase":"Pending"}},"Nodes":null,"NodeNames":["a","b\u00e9","\ud83d\ude00"],)"
      R"("x":[1,-2.5e3,true,false,null,{"k":"v"}]})",
  };
  // JSON's own characters, control and non-UTF-8 bytes; then escapes, literals and such.
  const std::string chars = "\"\\{}[],: 0-.etn\t\x01\x80\xc3\xff";
  const std::vector<std::string> pieces = {"1e",      "null",    "\\u",          "\\ud800",
                                           "\\udc00", "\\u00e9", "\xed\xa0\x80", "\xef\xbb\xbf",
                                           "\"\":1,", "[[",      "\"Pod\":{},"};
  std::mt19937 random(27);
  int taken = 0;
  int refused_by_nlohmann = 0;
  constexpr int kBodies = 20000;
  for (int i = 0; i < kBodies; ++i) {
    std::string body = seeds[random() % seeds.size()];
    const int changes = 1 + static_cast<int>(random() % 3);
    for (int c = 0; c < changes && !body.empty(); ++c) {
      const size_t at = random() % body.size();
      switch (random() % 6) {
        case 0:
          body.erase(at, 1);
          break;
        case 1:
          body[at] = chars[random() % chars.size()];
          break;
        case 2:
          if (random() % 2 == 0) {
            body.insert(at, 1, chars[random() % chars.size()]);
          } else {
            body.insert(at, pieces[random() % pieces.size()]);
          }
          break;
        case 3: {
          const size_t length = 1 + random() % 24;
          body.insert(at, body.substr(at, length));
          break;
        }
        case 4:
          body.resize(at);
          break;
        default:
          if (std::isalpha(static_cast<unsigned char>(body[at]))) {
            body[at] = static_cast<char>(body[at] ^ 0x20);
          }
      }
    }
    if (json::parse(body, nullptr, false).is_discarded()) ++refused_by_nlohmann;
    taken += CheckBody(body) ? 1 : 0;
    if (HasFailure()) break;
  }
  // Both halves were exercised: bodies still read fast, and bodies nlohmann refuses.
  EXPECT_GT(taken, kBodies / 10);
  EXPECT_GT(refused_by_nlohmann, kBodies / 4);
}

}  // namespace
}  // namespace kvgpu::extender
