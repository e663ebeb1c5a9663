#include "tests/webhook/pod_cases.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace kvgpu::webhook::testing {
namespace {

using nlohmann::json;
using webhook::PodOutcome;

void Kata(json& pod) {
  pod["spec"]["runtimeClassName"] = "kata";
}
void VgpuLimit(json& container, const std::string& resource = "tencent.com/vgpu-492") {
  container["resources"]["limits"][resource] = "1";
}
// Under Kata, `count` copies of the first container, each asking for a vGPU.
void KataWithVgpuContainers(json& pod, size_t count) {
  Kata(pod);
  json base = Web(pod);
  pod["spec"]["containers"] = json::array();
  for (size_t i = 0; i < count; ++i) {
    json container = base;
    container["name"] = "c" + std::to_string(i);
    VgpuLimit(container);
    pod["spec"]["containers"].push_back(container);
  }
}

json Container(const std::string& name) {
  return {{"name", name}, {"image", "registry.example/app:1"}, {"resources", json::object()}};
}

const json* FindNamed(const json& list, const std::string& name) {
  if (!list.is_array()) return nullptr;
  for (const auto& item : list)
    if (item.value("name", "") == name) return &item;
  return nullptr;
}

}  // namespace

json FixtureReview() {
  std::ifstream in(std::string(KVGPU_WEBHOOK_TEST_DATA) + "/pod-create.json");
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

json ApplyPatch(const json& document, const json& patch) {
  return document.patch(patch);
}

namespace {

// How one injected container must look in a mutated pod.
struct InjectedShape {
  std::string name;
  bool init_container;  // at the front of initContainers, else at the end of containers
  bool sidecar;         // restartPolicy: Always
  bool startup_probe;
  bool readiness_probe;
  bool waits_for_hot_plug;  // its command waits for an NVIDIA PCI function to appear
};

struct AttachModeCase {
  std::string description;
  std::string config_yaml;
  const char* runtime_class;  // nullptr: the pod names none
  bool init_container_uses_vgpu;
  std::string pod_restart_policy;
  std::vector<InjectedShape> injected;  // in pod order
  size_t warnings;
};

// Both attach modes under both sidecar modes, the shapes they must produce and why.
void AddAttachModeCases(std::vector<PodCase>& cases) {
  const InjectedShape hot_driver_sidecar{"kvgpu-driver-init", true, true, false, false, true};
  const InjectedShape hot_gridd_sidecar{"nvidia-gridd", true, true, false, true, false};
  const InjectedShape cold_driver_init{"kvgpu-driver-init", true, false, false, false, false};
  const InjectedShape cold_gridd_sidecar{"nvidia-gridd", true, true, true, true, false};
  const InjectedShape hot_driver_container{"kvgpu-driver-init", false, false, false, false, true};
  const InjectedShape gridd_container{"nvidia-gridd", false, false, false, true, false};
  const std::string classic = "sidecarMode: classic\n";
  std::vector<AttachModeCase> table = {
      {"hot-plug (kata), native: driver loader and gridd are sidecars nothing waits for; gridd "
       "readiness reports the licence",
       "",
       "kata",
       false,
       "Always",
       {hot_driver_sidecar, hot_gridd_sidecar},
       0},
      {"hot-plug (kata-vgpu), native, a user init container uses the vGPU: warned it may start "
       "before the driver",
       "",
       "kata-vgpu",
       true,
       "Always",
       {hot_driver_sidecar, hot_gridd_sidecar},
       1},
      {"cold-plug (kata-vgpu-vf), native: the driver init container runs to completion and "
       "gridd's startup probe holds the workload until licensed",
       "",
       "kata-vgpu-vf",
       false,
       "Always",
       {cold_driver_init, cold_gridd_sidecar},
       0},
      {"cold-plug, native, a Job with a vGPU init container: licensed before it, no warning",
       "",
       "kata-vgpu-vf",
       true,
       "Never",
       {cold_driver_init, cold_gridd_sidecar},
       0},
      {"cold-plug, classic: driver init container, gridd an ordinary container with readiness "
       "only",
       classic,
       "kata-vgpu-vf",
       false,
       "Always",
       {cold_driver_init, gridd_container},
       0},
      {"cold-plug, classic, a Job with a vGPU init container: unlicensed init, never completes",
       classic,
       "kata-vgpu-vf",
       true,
       "Never",
       {cold_driver_init, gridd_container},
       2},
      {"hot-plug, classic: driver loader and gridd are both ordinary containers",
       classic,
       "kata",
       false,
       "Always",
       {hot_driver_container, gridd_container},
       0},
      {"hot-plug, classic, a Job with a vGPU init container: no driver for it, never completes",
       classic,
       "kata",
       true,
       "OnFailure",
       {hot_driver_container, gridd_container},
       2},
      {"setRuntimeClass to a cold-plug class: the mode follows the class that was set",
       "nonKataPods: setRuntimeClass\nruntimeClassToSet: kata-vgpu-vf\n",
       nullptr,
       false,
       "Always",
       {cold_driver_init, cold_gridd_sidecar},
       1},
      {"an admin's own cold-plug list makes plain kata cold-plug",
       "coldPlugRuntimeClassNames: [kata]\n",
       "kata",
       false,
       "Always",
       {cold_driver_init, cold_gridd_sidecar},
       0},
  };
  for (const AttachModeCase& row : table) {
    auto edit = [row](json& pod) {
      if (row.runtime_class != nullptr) pod["spec"]["runtimeClassName"] = row.runtime_class;
      pod["spec"]["restartPolicy"] = row.pod_restart_policy;
      VgpuLimit(Web(pod));
      if (row.init_container_uses_vgpu) {
        json setup = Container("setup");
        VgpuLimit(setup);
        pod["spec"]["initContainers"] = json::array({setup});
      }
    };
    auto check = [row](const json& pod, const PodDecision& decision) {
      const json& init = pod["spec"].value("initContainers", json::array());
      const json& containers = pod["spec"]["containers"];
      size_t at_front = 0, at_back = 0;
      for (const auto& expected : row.injected) (expected.init_container ? at_front : at_back)++;
      ASSERT_GE(init.size(), at_front);
      ASSERT_GE(containers.size(), at_back);
      size_t front = 0, back = containers.size() - at_back;
      for (const auto& expected : row.injected) {
        SCOPED_TRACE(expected.name);
        const json& c = expected.init_container ? init[front++] : containers[back++];
        EXPECT_EQ(c["name"], expected.name);
        EXPECT_EQ(c.value("restartPolicy", ""), expected.sidecar ? "Always" : "");
        EXPECT_EQ(c.contains("startupProbe"), expected.startup_probe);
        EXPECT_EQ(c.contains("readinessProbe"), expected.readiness_probe);
        EXPECT_EQ(c.dump().find("0x10de") != std::string::npos, expected.waits_for_hot_plug);
      }
      // User init containers follow the injected ones; the workload stays first.
      if (row.init_container_uses_vgpu) {
        EXPECT_EQ(init[at_front]["name"], "setup");
      }
      EXPECT_EQ(containers[0]["name"], "web");
      EXPECT_EQ(decision.warnings.size(), row.warnings);
    };
    cases.push_back(
        {row.description, edit, PodOutcome::kMutated, row.config_yaml, "default", check});
  }
}

}  // namespace

std::vector<PodCase> PodCases() {
  std::vector<PodCase> cases;
  cases.push_back(
      {"real fixture pod asks for no vGPU: untouched", [](json&) {}, PodOutcome::kNoVgpu});
  cases.push_back({"kata pod with vGPU in limits gets the full setup",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                   },
                   PodOutcome::kMutated, "", "default",
                   [](const json& pod, const PodDecision&) {
                     const json& init = pod["spec"]["initContainers"];
                     ASSERT_EQ(init.size(), 2u);
                     EXPECT_EQ(init[0]["name"], "kvgpu-driver-init");
                     EXPECT_EQ(init[1]["name"], "nvidia-gridd");
                     EXPECT_EQ(init[0]["securityContext"]["privileged"], true);
                     // The user's own volume and mount stay where they were.
                     EXPECT_EQ(pod["spec"]["volumes"][0]["name"], "kube-api-access-7pc2d");
                     EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"][0]["name"],
                               "kube-api-access-7pc2d");
                   }});
  cases.push_back({"a pod that runs as non-root still gets root driver loader and gridd",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                     pod["spec"]["securityContext"] = {
                         {"runAsNonRoot", true}, {"runAsUser", 1000}, {"runAsGroup", 1000}};
                   },
                   PodOutcome::kMutated, "", "default",
                   [](const json& pod, const PodDecision&) {
                     for (const json& injected : pod["spec"]["initContainers"]) {
                       SCOPED_TRACE(injected["name"].get<std::string>());
                       EXPECT_EQ(injected["securityContext"], json({{"privileged", true},
                                                                    {"runAsUser", 0},
                                                                    {"runAsGroup", 0},
                                                                    {"runAsNonRoot", false}}));
                     }
                     EXPECT_EQ(pod["spec"]["securityContext"]["runAsUser"], 1000)
                         << "the pod's own setting stays for its containers";
                   }});
  cases.push_back({"vGPU in requests only counts",
                   [](json& pod) {
                     Kata(pod);
                     Web(pod)["resources"]["requests"]["tencent.com/vgpu-11"] = 1;
                   },
                   PodOutcome::kMutated});
  cases.push_back(
      {"vGPU in a user init container: that init container gets mounts, driver loads first",
       [](json& pod) {
         Kata(pod);
         json setup = Container("setup");
         VgpuLimit(setup);
         pod["spec"]["initContainers"] = json::array({setup});
       },
       PodOutcome::kMutated, "", "default",
       [](const json& pod, const PodDecision&) {
         const json& init = pod["spec"]["initContainers"];
         ASSERT_EQ(init.size(), 3u);
         EXPECT_EQ(init[0]["name"], "kvgpu-driver-init");
         EXPECT_EQ(init[1]["name"], "nvidia-gridd");
         EXPECT_EQ(init[2]["name"], "setup");
         EXPECT_NE(FindNamed(init[2]["volumeMounts"], "kvgpu-driver"), nullptr);
         EXPECT_FALSE(pod["spec"]["containers"][0].contains("env"));
       }});
  cases.push_back(
      {"several containers: only those asking for a vGPU get the driver mount",
       [](json& pod) {
         Kata(pod);
         json a = Container("train"), b = Container("sidecar"), c = Container("eval");
         VgpuLimit(a);
         VgpuLimit(c, "tencent.com/vgpu-493");
         pod["spec"]["containers"].push_back(a);
         pod["spec"]["containers"].push_back(b);
         pod["spec"]["containers"].push_back(c);
       },
       PodOutcome::kMutated, "", "default",
       [](const json& pod, const PodDecision&) {
         const json& containers = pod["spec"]["containers"];
         ASSERT_EQ(containers.size(), 4u);
         EXPECT_EQ(FindNamed(containers[0].value("volumeMounts", json::array()), "kvgpu-driver"),
                   nullptr);
         EXPECT_NE(FindNamed(containers[1]["volumeMounts"], "kvgpu-driver"), nullptr);
         EXPECT_FALSE(containers[2].contains("volumeMounts"));
         EXPECT_NE(FindNamed(containers[3]["volumeMounts"], "kvgpu-driver"), nullptr);
         for (const json& c : containers) EXPECT_FALSE(c.contains("env"));
       }});
  cases.push_back(
      {"existing init containers keep their order after the injected two",
       [](json& pod) {
         Kata(pod);
         VgpuLimit(Web(pod));
         pod["spec"]["initContainers"] = json::array({Container("migrate"), Container("warm")});
       },
       PodOutcome::kMutated, "", "default",
       [](const json& pod, const PodDecision&) {
         const json& init = pod["spec"]["initContainers"];
         ASSERT_EQ(init.size(), 4u);
         EXPECT_EQ(init[2]["name"], "migrate");
         EXPECT_EQ(init[3]["name"], "warm");
       }});
  cases.push_back(
      {"volume name clash: injected volume renamed and mounts follow",
       [](json& pod) {
         Kata(pod);
         VgpuLimit(Web(pod));
         pod["spec"]["volumes"].push_back({{"name", "kvgpu-driver"}, {"emptyDir", json::object()}});
         pod["spec"]["volumes"].push_back(
             {{"name", "kvgpu-driver-2"}, {"emptyDir", json::object()}});
       },
       PodOutcome::kMutated, "", "default",
       [](const json& pod, const PodDecision&) {
         const json* ours = FindNamed(pod["spec"]["volumes"], "kvgpu-driver-3");
         ASSERT_NE(ours, nullptr);
         EXPECT_TRUE(ours->contains("hostPath"));
         EXPECT_TRUE(FindNamed(pod["spec"]["volumes"], "kvgpu-driver")->contains("emptyDir"));
         EXPECT_NE(FindNamed(pod["spec"]["initContainers"][0]["volumeMounts"], "kvgpu-driver-3"),
                   nullptr);
         EXPECT_NE(FindNamed(pod["spec"]["containers"][0]["volumeMounts"], "kvgpu-driver-3"),
                   nullptr);
       }});
  cases.push_back({"container name clash with a user container and an ephemeral container",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                     pod["spec"]["containers"].push_back(Container("nvidia-gridd"));
                     pod["spec"]["ephemeralContainers"] =
                         json::array({{{"name", "kvgpu-driver-init"}, {"image", "debug"}}});
                   },
                   PodOutcome::kMutated, "", "default",
                   [](const json& pod, const PodDecision&) {
                     EXPECT_EQ(pod["spec"]["initContainers"][0]["name"], "kvgpu-driver-init-2");
                     EXPECT_EQ(pod["spec"]["initContainers"][1]["name"], "nvidia-gridd-2");
                   }});
  cases.push_back({"pod without annotations gets the annotations map created",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                     pod["metadata"].erase("annotations");
                   },
                   PodOutcome::kMutated, "", "default",
                   [](const json& pod, const PodDecision&) {
                     EXPECT_EQ(pod["metadata"]["annotations"]["kata-vgpu.io/injected"], "true");
                   }});
  cases.push_back({"null annotations, volumes, initContainers and resources limits are absent",
                   [](json& pod) {
                     Kata(pod);
                     pod["metadata"]["annotations"] = nullptr;
                     pod["spec"]["volumes"] = nullptr;
                     pod["spec"]["initContainers"] = nullptr;
                     Web(pod)["volumeMounts"] = nullptr;
                     Web(pod)["resources"] = {{"limits", nullptr},
                                              {"requests", {{"tencent.com/vgpu-492", "1"}}}};
                   },
                   PodOutcome::kMutated});
  cases.push_back(
      {"minimal pod: no volumes, mounts, env or init containers (arrays created)",
       [](json& pod) {
         json minimal = {
             {"apiVersion", "v1"},
             {"kind", "Pod"},
             {"metadata", {{"generateName", "job-"}}},
             {"spec",
              {{"runtimeClassName", "kata"}, {"containers", json::array({Container("main")})}}}};
         VgpuLimit(minimal["spec"]["containers"][0]);
         pod = minimal;
       },
       PodOutcome::kMutated, "", "default",
       [](const json& pod, const PodDecision& decision) {
         EXPECT_EQ(pod["spec"]["volumes"].size(), 4u);
         EXPECT_FALSE(pod["spec"]["containers"][0].contains("env"))
             << "no environment injected: the image's PATH and LD_LIBRARY_PATH stay";
         // Whole arrays are added, not appended to something absent.
         for (const auto& op : json::parse(decision.patch))
           EXPECT_EQ(op["path"].get<std::string>().find("/-"), std::string::npos) << op["path"];
       }});
  cases.push_back({"pod without metadata gets it (with the marker)",
                   [](json& pod) {
                     pod.erase("metadata");
                     Kata(pod);
                     VgpuLimit(Web(pod));
                   },
                   PodOutcome::kMutated});
  cases.push_back({"the image's environment is never replaced, and a user's own mount path wins",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                     Web(pod)["env"] = json::array({{{"name", "PATH"}, {"value", "/opt/bin"}}});
                     Web(pod)["volumeMounts"].push_back(
                         {{"name", "kube-api-access-7pc2d"}, {"mountPath", "/usr/local/nvidia"}});
                   },
                   PodOutcome::kMutated, "", "default",
                   [](const json& pod, const PodDecision&) {
                     const json& web = pod["spec"]["containers"][0];
                     ASSERT_EQ(web["env"].size(), 1u) << "nothing added to the user's env";
                     EXPECT_EQ(web["env"][0]["value"], "/opt/bin");
                     EXPECT_EQ(web["volumeMounts"].size(), 2u);
                   }});
  cases.push_back({"already injected (marker present): nothing twice",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                     pod["metadata"]["annotations"]["kata-vgpu.io/injected"] = "true";
                   },
                   PodOutcome::kAlreadyInjected});
  cases.push_back({"opted out with the annotation set to \"false\"",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                     pod["metadata"]["annotations"]["kata-vgpu.io/inject"] = "false";
                   },
                   PodOutcome::kOptedOut});
  cases.push_back({"opt-out annotation with any other value still injects",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                     pod["metadata"]["annotations"]["kata-vgpu.io/inject"] = "true";
                   },
                   PodOutcome::kMutated});
  // A mount of a volume the pod does not define is refused by the API server, unless the patch
  // adds that volume: a container would reach the node's /dev or licence files undeclared.
  for (const char* volume :
       {"kvgpu-dev", "kvgpu-gridd-conf", "kvgpu-client-token", "kvgpu-driver"}) {
    cases.push_back(
        {std::string("a container mounting the injected volume ") + volume +
             " without declaring it is denied",
         [volume](json& pod) {
           Kata(pod);
           VgpuLimit(Web(pod));
           pod["spec"]["containers"].push_back(
               {{"name", "sneak"},
                {"image", "busybox"},
                {"volumeMounts", {{{"name", volume}, {"mountPath", "/host"}}}}});
         },
         PodOutcome::kDenied, "", "default",
         [volume](const json&, const PodDecision& decision) {
           EXPECT_NE(decision.message.find("\"sneak\" mounts volume \"" + std::string(volume)),
                     std::string::npos)
               << decision.message;
         }});
  }
  // Issue #26: the pod's own kvgpu-dev makes the injected one kvgpu-dev-2; a container mounting
  // kvgpu-dev-2 undeclared would reach the node's /dev if only configured names were checked.
  for (const char* volume :
       {"kvgpu-dev", "kvgpu-gridd-conf", "kvgpu-client-token", "kvgpu-driver"}) {
    cases.push_back(
        {std::string("a container mounting the renamed injected volume ") + volume +
             "-2 without declaring it is denied",
         [volume](json& pod) {
           Kata(pod);
           VgpuLimit(Web(pod));
           pod["spec"]["volumes"].push_back({{"name", volume}, {"emptyDir", json::object()}});
           pod["spec"]["containers"].push_back(
               {{"name", "sneak"},
                {"image", "busybox"},
                {"volumeMounts",
                 {{{"name", std::string(volume) + "-2"}, {"mountPath", "/host"}}}}});
         },
         PodOutcome::kDenied, "", "default",
         [volume](const json&, const PodDecision& decision) {
           EXPECT_NE(
               decision.message.find("\"sneak\" mounts volume \"" + std::string(volume) + "-2\""),
               std::string::npos)
               << decision.message;
         }});
  }
  cases.push_back({"more vGPU containers than one VM can be given is denied before any patch",
                   [](json& pod) { KataWithVgpuContainers(pod, kMaxVgpuContainersPerPod + 1); },
                   PodOutcome::kDenied, "", "default",
                   [](const json&, const PodDecision& decision) {
                     EXPECT_TRUE(decision.patch.empty());
                     EXPECT_NE(decision.message.find(std::to_string(kMaxVgpuContainersPerPod + 1) +
                                                     " containers ask for a vGPU"),
                               std::string::npos)
                         << decision.message;
                   }});
  cases.push_back({"as many vGPU containers as one VM may have are injected",
                   [](json& pod) { KataWithVgpuContainers(pod, kMaxVgpuContainersPerPod); },
                   PodOutcome::kMutated});
  cases.push_back({"excluded namespace is never touched",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                   },
                   PodOutcome::kExcludedNamespace, "", "kube-system"});
  cases.push_back(
      {"vGPU without runtimeClassName is denied with the fix in the message",
       [](json& pod) { VgpuLimit(Web(pod)); }, PodOutcome::kDenied, "", "default",
       [](const json&, const PodDecision& decision) {
         EXPECT_FALSE(decision.allowed);
         EXPECT_NE(decision.message.find("runtimeClassName: kata-vgpu`"), std::string::npos)
             << decision.message;
         EXPECT_NE(decision.message.find("\"web\""), std::string::npos);
       }});
  cases.push_back({"vGPU under runc is denied, even when opted out",
                   [](json& pod) {
                     pod["spec"]["runtimeClassName"] = "runc";
                     VgpuLimit(Web(pod));
                     pod["metadata"]["annotations"]["kata-vgpu.io/inject"] = "false";
                   },
                   PodOutcome::kDenied, "", "default",
                   [](const json&, const PodDecision& decision) {
                     EXPECT_NE(decision.message.find("\"runc\""), std::string::npos);
                   }});
  cases.push_back(
      {"setRuntimeClass policy: a pod naming no class is moved to kata-vgpu, the "
       "class the VM lab proves a large-BAR vGPU gets its driver in",
       [](json& pod) { VgpuLimit(Web(pod)); }, PodOutcome::kMutated,
       "nonKataPods: setRuntimeClass\n", "default",
       [](const json& pod, const PodDecision& decision) {
         EXPECT_EQ(pod["spec"]["runtimeClassName"], "kata-vgpu");
         EXPECT_EQ(decision.warnings.size(), 1u);
       }});
  cases.push_back({"setRuntimeClass policy still denies an explicit other class",
                   [](json& pod) {
                     pod["spec"]["runtimeClassName"] = "gvisor";
                     VgpuLimit(Web(pod));
                   },
                   PodOutcome::kDenied, "nonKataPods: setRuntimeClass\n"});
  cases.push_back({"non-kata pod without vGPU is none of our business",
                   [](json& pod) { pod["spec"]["runtimeClassName"] = "runc"; },
                   PodOutcome::kNoVgpu});
  cases.push_back({"odd resource names: prefix without type, other vendors, zero quantities",
                   [](json& pod) {
                     Kata(pod);
                     auto& limits = Web(pod)["resources"]["limits"];
                     limits["tencent.com/vgpu"] = "1";
                     limits["nvidia.com/gpu"] = "1";
                     limits["example.com/tencent.com/vgpu-1"] = "1";
                     limits["tencent.com/vgpu-492"] = "0";
                     Web(pod)["resources"]["requests"]["tencent.com/vgpu-493"] = 0;
                   },
                   PodOutcome::kNoVgpu});
  cases.push_back({"non-NVIDIA type name with a dash (vgpu-mtty-2) is a vGPU",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod), "tencent.com/vgpu-mtty-2");
                   },
                   PodOutcome::kMutated});
  // ('~' cannot be in an annotation key, the config refuses it; json_patch_test covers ~0.)
  cases.push_back({"marker annotation key with '/' is escaped as ~1",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                   },
                   PodOutcome::kMutated, "markerAnnotation: example.com/in.jected_by\n", "default",
                   [](const json& pod, const PodDecision& decision) {
                     EXPECT_EQ(pod["metadata"]["annotations"]["example.com/in.jected_by"], "true");
                     EXPECT_EQ(json::parse(decision.patch)[0]["path"],
                               "/metadata/annotations/example.com~1in.jected_by");
                   }});
  cases.push_back({"shell metacharacters in pod fields never reach injected commands",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                     Web(pod)["image"] = "x; rm -rf / #";
                     Web(pod)["command"] = json::array({"$(reboot)", "`id`"});
                     pod["metadata"]["annotations"]["evil"] = "'; curl x | sh; '";
                     pod["metadata"]["name"] = "$(reboot)";
                   },
                   PodOutcome::kMutated, "", "default",
                   [](const json& pod, const PodDecision&) {
                     const auto& injected = webhook::DefaultConfig()->hot_plug;
                     const json& init = pod["spec"]["initContainers"];
                     EXPECT_EQ(init[0], injected.driver.object);
                     EXPECT_EQ(init[1], injected.gridd.object);
                   }});
  cases.push_back({"second configured runtime class and second resource prefix",
                   [](json& pod) {
                     pod["spec"]["runtimeClassName"] = "kata-qemu";
                     VgpuLimit(Web(pod), "example.com/mdev-a");
                   },
                   PodOutcome::kMutated,
                   "runtimeClassNames: [kata, kata-qemu]\ncoldPlugRuntimeClassNames: []\n"
                   "runtimeClassToSet: kata-qemu\n"
                   "resourcePrefixes: [tencent.com/vgpu-, example.com/mdev-]\n"});
  cases.push_back({"namespace taken from metadata when the request names none",
                   [](json& pod) {
                     Kata(pod);
                     VgpuLimit(Web(pod));
                     pod["metadata"]["namespace"] = "kube-system";
                   },
                   PodOutcome::kExcludedNamespace, "", ""});
  AddAttachModeCases(cases);
  return cases;
}

}  // namespace kvgpu::webhook::testing
