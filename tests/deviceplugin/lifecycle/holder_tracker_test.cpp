// Who holds each vGPU of ours (Judge): kubelet's word first, the API server's never alone, a young
// vGPU protected until its pod is known, and nothing judged free until a restarted kubelet lists
// the node's pods again (Resynced). Pure: facts in, verdict out. Each test names the invariant it
// defends (ARCHITECTURE.md: 1 never destroy a vGPU a live pod uses, 4 IDs keep their meaning).
#include "deviceplugin/lifecycle/holder_tracker.h"

#include <gtest/gtest.h>

#include <functional>

#include "tests/deviceplugin/lifecycle/holder_builders.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;
using kvgpu::deviceplugin::testing::kResource;
using kvgpu::deviceplugin::testing::Pod;
using kvgpu::deviceplugin::testing::PodHolding;
using kvgpu::deviceplugin::testing::Record;

TEST(JudgeTest, DecidesFromKubeletFirstAndNeverOnTheApisWordAlone) {
  const int64_t now = 10'000'000;
  struct Case {
    std::string description;
    std::function<void(HolderFacts&)> facts;
    int64_t created;
    Holding want;
  };
  auto kubelet_up = [](HolderFacts& f) {
    f.kubelet_known = true;
    f.kubelet_up_unix_ms = 1;
  };
  const std::vector<Case> cases = {
      {"kubelet lists a pod with the device: held (invariant 1)",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.kubelet_holders[{kResource, "d0"}] = "default/a";
       },
       1'000'000, Holding::kHeld},
      {"kubelet lists it though the API says the pod is deleted: held (API's word alone)",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.kubelet_holders[{kResource, "d0"}] = "default/a";
         f.api_following = true;
       },
       1'000'000, Holding::kHeld},
      {"kubelet not answering: unknown, nothing removed",
       [&](HolderFacts& f) { f.kubelet_problem = "connection refused"; }, 1'000'000,
       Holding::kUnknown},
      {"kubelet answering again only since a moment: unknown",
       [&](HolderFacts& f) {
         f.kubelet_known = true;
         f.kubelet_up_unix_ms = now - 1;
       },
       1'000'000, Holding::kUnknown},
      {"allocated a moment ago, kubelet not yet recording the pod: held",
       [&](HolderFacts& f) { kubelet_up(f); }, now - 1, Holding::kHeld},
      {"kubelet lists nobody, the API shows the checkpoint's pod alive: held",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.api_following = true;
         f.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
         f.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
       },
       1'000'000, Holding::kHeld},
      {"the checkpoint's pod has Succeeded: free",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.api_following = true;
         f.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
         f.api_pods["uid-a"] = Pod("uid-a", "a", "Succeeded");
       },
       1'000'000, Holding::kFree},
      {"the checkpoint's pod is being deleted and kubelet let go: free",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.api_following = true;
         f.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
         f.api_pods["uid-a"] = Pod("uid-a", "a", "Running", true);
       },
       1'000'000, Holding::kFree},
      {"API unreachable: kubelet's word decides (free)",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.api_following = false;
         f.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
         f.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
       },
       1'000'000, Holding::kFree},
      {"another resource's device of the same ID does not hold this one",
       [&](HolderFacts& f) {
         kubelet_up(f);
         f.kubelet_holders[{"tencent.com/vgpu-other", "d0"}] = "default/a";
       },
       1'000'000, Holding::kFree},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    HolderFacts facts;
    c.facts(facts);
    Verdict verdict = Judge(Record("d0", c.created), facts, now, 5s);
    EXPECT_EQ(verdict.holding, c.want) << verdict.why;
  }
}

TEST(JudgeTest, ForAllocateKubeletsBooksAreFinalSoAnEndedPodsVgpuIsNeverHandedOn) {
  const int64_t now = 10'000'000;
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = now - 1;  // just back: only guards removals
  facts.api_following = true;
  facts.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
  facts.api_pods["uid-a"] = Pod("uid-a", "a", "Running");  // its Succeeded not yet seen
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kRemoval).holding, Holding::kUnknown);
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kAllocation).holding, Holding::kFree)
      << "kubelet hands the ID to a new pod: the old vGPU is made anew, not passed on";
  facts.kubelet_holders[{kResource, "d0"}] = "default/a";
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kAllocation).holding, Holding::kUnknown)
      << "kubelet hands out a device it lists a pod holding (its in-use set lost it): refused, "
         "never the same vGPU for a second pod";
  facts.kubelet_holders.clear();
  facts.kubelet_pods.insert("default/a");
  facts.checkpoint_known = true;
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kAllocation).holding, Holding::kHeld)
      << "the checkpoint gives it to a pod kubelet and the API both show alive: its app "
         "container asks for its init container's device";
}

// A pod's device lost from kubelet's books: kubelet restarted over a checkpoint written before
// the pod's Allocate (its writes can land out of order) or over none. kubelet lists the running
// pod without the device and may hand the ID to another pod. Invariant 1: the vGPU stays, and it
// is not given to whoever asks (invariant: never shared).
TEST(JudgeTest, AVgpuWhosePodKubeletsBooksLostIsKeptAndNotHandedOn) {
  const int64_t now = 10'000'000;
  CreatedVgpu record = Record("d0");
  record.owner_pod = "default/a";
  record.owner_uid = "uid-a";
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = 1;
  facts.checkpoint_known = true;  // and it gives d0 to nobody
  facts.api_following = true;
  facts.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
  facts.kubelet_pods.insert("default/a");  // listed, without d0
  Verdict kept = Judge(record, facts, now, 5s, Purpose::kRemoval);
  EXPECT_EQ(kept.holding, Holding::kHeld) << kept.why;
  EXPECT_EQ(kept.holder, "default/a");
  EXPECT_EQ(Judge(record, facts, now, 5s, Purpose::kAllocation).holding, Holding::kUnknown)
      << "kubelet hands the ID out while the pod runs with its vGPU: refused, not shared";
  facts.kubelet_pods.clear();
  EXPECT_EQ(Judge(record, facts, now, 5s, Purpose::kRemoval).holding, Holding::kHeld)
      << "a restarted kubelet listing no pod yet: the API server's word keeps it";
  EXPECT_EQ(Judge(record, facts, now, 5s, Purpose::kAllocation).holding, Holding::kFree)
      << "kubelet no longer lists the pod (it ended, the API has not shown it yet) and hands "
         "its ID on: the old vGPU is made anew";
  facts.kubelet_pods.insert("default/a");

  struct Case {
    std::string description;
    std::function<void(CreatedVgpu&, HolderFacts&)> change;
  };
  const std::vector<Case> free_cases = {
      {"the pod ended",
       [](CreatedVgpu&, HolderFacts& f) { f.api_pods["uid-a"] = Pod("uid-a", "a", "Succeeded"); }},
      {"the pod is being deleted",
       [](CreatedVgpu&, HolderFacts& f) {
         f.api_pods["uid-a"] = Pod("uid-a", "a", "Running", true);
       }},
      {"a later pod of the same name runs, the owner is gone",
       [](CreatedVgpu&, HolderFacts& f) {
         f.api_pods.erase("uid-a");
         f.api_deleted.insert("uid-a");
         f.api_pods["uid-a2"] = Pod("uid-a2", "a", "Running");
       }},
      {"the owner was learned without the API server: no UID to tell its pod by",
       [](CreatedVgpu& r, HolderFacts&) { r.owner_uid.reset(); }},
  };
  for (const Case& c : free_cases) {
    SCOPED_TRACE(c.description);
    CreatedVgpu r = record;
    HolderFacts f = facts;
    c.change(r, f);
    EXPECT_EQ(Judge(r, f, now, 5s, Purpose::kRemoval).holding, Holding::kFree);
    EXPECT_EQ(Judge(r, f, now, 5s, Purpose::kAllocation).holding, Holding::kFree);
  }
}

TEST(JudgeTest, APodKubeletListsHoldingTheDeviceIsRecordedWithItsUidFromTheApiServer) {
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_holders[{kResource, "d0"}] = "default/a";
  EXPECT_EQ(Judge(Record("d0"), facts, 10'000'000, 5s).holder_uid, "")
      << "no API server followed: no UID";
  facts.api_following = true;
  facts.api_pods["uid-old"] = Pod("uid-old", "a", "Succeeded");
  facts.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
  Verdict verdict = Judge(Record("d0"), facts, 10'000'000, 5s);
  EXPECT_EQ(verdict.holder, "default/a");
  EXPECT_EQ(verdict.holder_uid, "uid-a") << "the live pod of that name, not an ended one";
}

// #14 item 1: age never makes a vGPU held for Allocate. Pod a got d0 a second ago and was
// deleted; kubelet hands d0 to pod b: b must get a vGPU of its own.
TEST(JudgeTest, ForAllocateAYoungVgpuOfAPodThatIsGoneIsNotHandedOn) {
  const int64_t now = 10'000'000;
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = 1;
  facts.checkpoint_known = true;
  facts.api_following = true;
  facts.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
  facts.api_pods["uid-a"] = Pod("uid-a", "a", "Running", true);  // being deleted
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kFree)
      << "allocated 1 s ago, its pod deleted: a fresh vGPU for the next pod";
  facts.api_pods.erase("uid-a");
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kFree)
      << "its pod gone from the API server too";
  facts.api_following = false;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kUnknown)
      << "the checkpoint names a pod and nobody can say whether it lives: nothing handed on";
  EXPECT_EQ(Judge(Record("d0", now - 60000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kUnknown)
      << "however old: age tells nothing about who asks";
  facts.api_configured = false;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kFree)
      << "no API server at all: kubelet's word alone, which no longer lists the old pod";
  facts.checkpoint_uids.clear();
  facts.checkpoint_known = false;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kUnknown)
      << "no checkpoint at all: a young vGPU's next container cannot be told from a new pod";
  EXPECT_EQ(Judge(Record("d0", now - 6000), facts, now, 5s, Purpose::kAllocation).holding,
            Holding::kFree);
}

// #14 item 1, removal side: a young vGPU is protected (kubelet records its pod only after
// Allocate returns) until its pod is gone from kubelet and the API server alike.
TEST(JudgeTest, AYoungVgpusProtectionEndsWithItsPodInKubeletAndTheApiServer) {
  const int64_t now = 10'000'000;
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = 1;
  facts.api_following = true;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s).holding, Holding::kHeld)
      << "no pod recorded yet: protected";
  facts.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
  facts.checkpoint_written_unix_ms = now - 500;  // kubelet's write after the Allocate
  facts.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s).holding, Holding::kHeld);
  facts.api_pods["uid-a"].deleting = true;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s).holding, Holding::kFree)
      << "its pod deleted and kubelet does not list it: no longer protected by its age";
  facts.api_following = false;
  EXPECT_EQ(Judge(Record("d0", now - 1000), facts, now, 5s).holding, Holding::kHeld)
      << "API server not followed: its age still protects it";
}

// A device ID's last pod is deleted, its vGPU removed, and kubelet hands the ID to a new pod.
// Until kubelet writes its checkpoint after that Allocate (or when the facts were gathered
// before it), the file still gives the ID to the deleted pod: that pod's end says nothing of
// the new vGPU, which stays protected by its age (seen in validator_flow_test: a running pod's
// vGPU removed 1 ms after it was made).
TEST(JudgeTest, AYoungVgpuIsNotFreedByTheEndOfTheIdsEarlierPodInAnOlderCheckpoint) {
  const int64_t now = 10'000'000;
  const int64_t created = now - 100;
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = 1;
  facts.api_following = true;
  facts.checkpoint_known = true;
  facts.checkpoint_uids[{kResource, "d0"}] = {"uid-old"};
  facts.api_deleted.insert("uid-old");
  facts.checkpoint_written_unix_ms = created - 1;
  EXPECT_EQ(Judge(Record("d0", created), facts, now, 5s).holding, Holding::kHeld)
      << "written before the vGPU was handed out: names the ID's earlier pod";
  facts.checkpoint_written_unix_ms = 0;
  EXPECT_EQ(Judge(Record("d0", created), facts, now, 5s).holding, Holding::kHeld)
      << "when the file was written is unknown: its age still protects it";
  facts.checkpoint_written_unix_ms = created;
  EXPECT_EQ(Judge(Record("d0", created), facts, now, 5s).holding, Holding::kFree)
      << "written since: the pod it names is the vGPU's, and that pod is gone";
  facts.checkpoint_written_unix_ms = created - 1;
  EXPECT_EQ(Judge(Record("d0", now - 6000), facts, now, 5s).holding, Holding::kFree)
      << "past the settle time the vGPU's age protects it no more";
}

// #14 item 2: a restarted kubelet answers PodResources with nothing for a while.
TEST(JudgeTest, NothingIsRemovedUntilARestartedKubeletListsTheNodesPodsAgain) {
  const int64_t now = 10'000'000;
  HolderFacts facts;
  facts.kubelet_known = true;
  facts.kubelet_up_unix_ms = 1;
  facts.kubelet_resynced = false;
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s).holding, Holding::kUnknown);
  EXPECT_EQ(Judge(Record("d0"), facts, now, 5s, Purpose::kAllocation).holding, Holding::kFree)
      << "Allocate goes by kubelet's books";

  HolderFacts api;
  api.api_following = true;
  api.checkpoint_uids[{kResource, "d0"}] = {"uid-a"};
  api.checkpoint_uids[{kResource, "d1"}] = {"uid-gone"};
  api.api_pods["uid-a"] = Pod("uid-a", "a", "Running");
  EXPECT_FALSE(Resynced({}, api)) << "the API shows a with a device, kubelet lists nothing";
  EXPECT_TRUE(Resynced({PodHolding("a", {})}, api));
  HolderFacts no_api;
  no_api.checkpoint_uids = api.checkpoint_uids;
  EXPECT_FALSE(Resynced({}, no_api)) << "no API: an empty answer is no proof";
  EXPECT_TRUE(Resynced({PodHolding("x", {})}, no_api));
  EXPECT_FALSE(Resynced({}, HolderFacts{})) << "no checkpoint read: an empty answer is no proof";
  HolderFacts empty_checkpoint;
  empty_checkpoint.checkpoint_known = true;
  EXPECT_TRUE(Resynced({}, empty_checkpoint)) << "the checkpoint gives nobody a device";
}

}  // namespace
}  // namespace kvgpu::deviceplugin
