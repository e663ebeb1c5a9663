// Licence once per cluster: what the daemon publishes from the mounted ConfigMap and Secret to
// the node directory the injected nvidia-gridd mounts, in kubelet's atomic-writer layout
// (entries are symlinks into ..data, a rotation swaps ..data).
#include "deviceplugin/publish/licensing_publisher.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <map>
#include <sstream>

#include "fakes/common/temp_dir.h"

namespace kvgpu::deviceplugin {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

unsigned Mode(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// A volume as kubelet writes it: a timestamped directory with the files, ..data pointing at it,
// and one symlink per key through ..data. A new generation replaces ..data by rename.
class KubeletVolume {
 public:
  explicit KubeletVolume(fs::path dir) : dir_(std::move(dir)) { fs::create_directories(dir_); }

  void Write(const std::map<std::string, std::string>& files) {
    std::string generation = "..2026_11_25_0" + std::to_string(++generations_);
    fs::create_directories(dir_ / generation);
    for (const auto& [name, content] : files) std::ofstream(dir_ / generation / name) << content;
    fs::create_symlink(generation, dir_ / "..data_tmp");
    fs::rename(dir_ / "..data_tmp", dir_ / "..data");
    for (const auto& entry : fs::directory_iterator(dir_)) {
      std::string name = entry.path().filename().string();
      if (name[0] != '.' && !files.contains(name)) fs::remove(entry.path());
    }
    for (const auto& [name, content] : files) {
      if (!fs::is_symlink(dir_ / name)) fs::create_symlink(fs::path("..data") / name, dir_ / name);
    }
  }

  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  int generations_ = 0;
};

class LicensingPublisherTest : public ::testing::Test {
 protected:
  kvgpu::testing::TempDir tmp_;
  KubeletVolume source_{tmp_.path() / "source"};
  fs::path target_ = tmp_.path() / "node" / "licensing";
  LicensingPublisher publisher_{source_.dir(), target_};

  // Every file under the target with its content and mode: what must not change on a failure.
  std::map<std::string, std::string> Snapshot() {
    std::map<std::string, std::string> files;
    if (!fs::exists(target_)) return files;
    for (const auto& entry : fs::recursive_directory_iterator(target_)) {
      std::string content = entry.is_regular_file() ? Read(entry.path()) : "<dir>";
      files[fs::relative(entry.path(), target_).string()] =
          content + " mode " + std::to_string(Mode(entry.path()));
    }
    return files;
  }
};

TEST_F(LicensingPublisherTest, PublishesConfigAndTokensForRootOnly) {
  source_.Write({{"gridd.conf", "FeatureType=1\n"}, {"client_configuration_token.tok", "tok-A"}});
  auto sync = publisher_.Sync();
  ASSERT_TRUE(sync.ok()) << sync.status().ToString();
  EXPECT_TRUE(sync->config);
  EXPECT_EQ(sync->tokens, 1u);
  EXPECT_EQ(sync->changed, 2u);
  EXPECT_EQ(Read(target_ / "gridd.conf"), "FeatureType=1\n");
  EXPECT_EQ(Read(target_ / "ClientConfigToken" / "client_configuration_token.tok"), "tok-A");
  EXPECT_FALSE(fs::is_symlink(target_ / "gridd.conf")) << "a copy, not a link into the volume";
  EXPECT_EQ(Mode(target_), 0700u);
  EXPECT_EQ(Mode(target_ / "ClientConfigToken"), 0700u);
  EXPECT_EQ(Mode(target_ / "gridd.conf"), 0600u);
  EXPECT_EQ(Mode(target_ / "ClientConfigToken" / "client_configuration_token.tok"), 0600u);
  EXPECT_FALSE(fs::exists(target_ / "..data")) << "kubelet's hidden entries are not published";
}

TEST_F(LicensingPublisherTest, AnUnchangedSourceWritesNothing) {
  source_.Write({{"gridd.conf", "FeatureType=1\n"}, {"a.tok", "tok-A"}});
  ASSERT_TRUE(publisher_.Sync().ok());
  struct stat before {};
  ASSERT_EQ(::stat((target_ / "ClientConfigToken" / "a.tok").c_str(), &before), 0);
  auto again = publisher_.Sync();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->changed, 0u);
  struct stat after {};
  ASSERT_EQ(::stat((target_ / "ClientConfigToken" / "a.tok").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "rewritten although nothing changed";
}

TEST_F(LicensingPublisherTest, ARotatedTokenReplacesTheOldOneAndTheOldOneGoes) {
  source_.Write({{"gridd.conf", "FeatureType=1\n"}, {"token-2025.tok", "old"}});
  ASSERT_TRUE(publisher_.Sync().ok());
  source_.Write({{"gridd.conf", "FeatureType=1\n"}, {"token-2026.tok", "new"}});
  auto sync = publisher_.Sync();
  ASSERT_TRUE(sync.ok()) << sync.status().ToString();
  EXPECT_EQ(sync->changed, 2u) << "one written, one removed";
  EXPECT_EQ(Read(target_ / "ClientConfigToken" / "token-2026.tok"), "new");
  EXPECT_FALSE(fs::exists(target_ / "ClientConfigToken" / "token-2025.tok"));
}

TEST_F(LicensingPublisherTest, ATokenChangedInPlaceIsRewritten) {
  source_.Write({{"a.tok", "v1"}});
  ASSERT_TRUE(publisher_.Sync().ok());
  source_.Write({{"a.tok", "v2"}});
  ASSERT_TRUE(publisher_.Sync().ok());
  EXPECT_EQ(Read(target_ / "ClientConfigToken" / "a.tok"), "v2");
  EXPECT_FALSE(fs::exists(target_ / "gridd.conf")) << "no gridd.conf in the source: none published";
}

TEST_F(LicensingPublisherTest, AModeSomeoneLoosenedIsTightenedAgain) {
  source_.Write({{"a.tok", "tok"}});
  ASSERT_TRUE(publisher_.Sync().ok());
  fs::permissions(target_ / "ClientConfigToken" / "a.tok", fs::perms::all);
  ASSERT_TRUE(publisher_.Sync().ok());
  EXPECT_EQ(Mode(target_ / "ClientConfigToken" / "a.tok"), 0600u);
}

TEST_F(LicensingPublisherTest, BadSourcesAreErrorsThatChangeNothing) {
  source_.Write({{"gridd.conf", "FeatureType=1\n"}, {"a.tok", "tok-A"}});
  ASSERT_TRUE(publisher_.Sync().ok());
  const auto published = Snapshot();

  struct Case {
    std::string description;
    std::function<void(const fs::path&)> spoil;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"a file larger than any licensing file",
       [](const fs::path& dir) {
         std::ofstream(dir / "huge.tok") << std::string(LicensingPublisher::kMaxFileBytes + 1, 'x');
       },
       "at most"},
      {"a directory among the keys", [](const fs::path& dir) { fs::create_directory(dir / "sub"); },
       "not a regular file"},
      {"a name no ConfigMap or Secret key has",
       [](const fs::path& dir) { std::ofstream(dir / "bad name.tok") << "x"; },
       "not a ConfigMap or Secret key name"},
      {"a dangling symlink",
       [](const fs::path& dir) { fs::create_symlink("..data/gone", dir / "gone"); },
       "not a regular file"},
      {"too many files",
       [](const fs::path& dir) {
         for (size_t i = 0; i <= LicensingPublisher::kMaxFiles; ++i) {
           std::ofstream(dir / ("t" + std::to_string(i) + ".tok")) << "x";
         }
       },
       "more than"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    kvgpu::testing::TempDir dir;
    fs::path spoiled = dir.path() / "source";
    fs::copy(source_.dir(), spoiled, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    c.spoil(spoiled);
    LicensingPublisher publisher(spoiled, target_);
    auto sync = publisher.Sync();
    ASSERT_FALSE(sync.ok());
    EXPECT_NE(sync.status().message().find(c.message_part), std::string::npos)
        << sync.status().ToString();
    EXPECT_EQ(Snapshot(), published);
  }

  LicensingPublisher unmounted(tmp_.path() / "not-mounted", target_);
  auto sync = unmounted.Sync();
  ASSERT_FALSE(sync.ok());
  EXPECT_NE(sync.status().message().find("is the licensing volume mounted?"), std::string::npos);
  EXPECT_EQ(Snapshot(), published);
}

TEST_F(LicensingPublisherTest, AFileInTheWayOfTheTargetIsAnError) {
  fs::create_directories(target_.parent_path());
  std::ofstream(target_) << "not a directory";
  source_.Write({{"a.tok", "tok"}});
  auto sync = publisher_.Sync();
  ASSERT_FALSE(sync.ok());
  EXPECT_NE(sync.status().message().find(target_.string()), std::string::npos);
  EXPECT_EQ(Read(target_), "not a directory");
}

TEST_F(LicensingPublisherTest, TheLoopSyncsBeforeItReturnsThenEveryIntervalAndStopsPromptly) {
  source_.Write({{"a.tok", "v1"}});
  std::atomic<int> syncs{0};
  auto started = std::chrono::steady_clock::now();
  {
    LicensingLoop loop(LicensingPublisher(source_.dir(), target_), std::chrono::milliseconds(20),
                       [&](const Result<LicensingSync>& r) {
                         EXPECT_TRUE(r.ok());
                         ++syncs;
                       });
    EXPECT_EQ(syncs, 1) << "the first sync is done when the constructor returns";
    EXPECT_TRUE(fs::exists(target_ / "ClientConfigToken" / "a.tok"));
    while (syncs < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(Read(target_ / "ClientConfigToken" / "a.tok"), "v1");
  }
  int at_stop = syncs;
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(syncs, at_stop) << "synced after the loop was destroyed";
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));

  // A long interval must not hold up destruction.
  auto stopping = std::chrono::steady_clock::now();
  { LicensingLoop loop(LicensingPublisher(source_.dir(), target_), std::chrono::hours(1), {}); }
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::seconds(10));
}

TEST_F(LicensingPublisherTest, TheReporterExportsWhatWasPublishedAndCountsFailures) {
  prometheus::Registry registry;
  auto report = LicensingReporter(registry, publisher_);
  auto render = [&] { return prometheus::TextSerializer().Serialize(registry.Collect()); };
  source_.Write({{"gridd.conf", "x"}, {"a.tok", "1"}, {"b.tok", "2"}});
  report(publisher_.Sync());
  std::string text = render();
  EXPECT_NE(text.find("kvgpu_licensing_published_files{kind=\"token\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("kvgpu_licensing_published_files{kind=\"config\"} 1"), std::string::npos);
  EXPECT_NE(text.find("kvgpu_licensing_sync_failures_total 0"), std::string::npos);
  EXPECT_EQ(text.find("kvgpu_licensing_last_success_timestamp_seconds 0"), std::string::npos);

  report(Status::Error(ErrorCode::kGone, "unmounted"));
  report(Status::Error(ErrorCode::kGone, "unmounted"));
  text = render();
  EXPECT_NE(text.find("kvgpu_licensing_sync_failures_total 2"), std::string::npos) << text;
  EXPECT_NE(text.find("kvgpu_licensing_published_files{kind=\"token\"} 2"), std::string::npos)
      << "a failed sync leaves the files, and the gauge, as they were";
}

}  // namespace
}  // namespace kvgpu::deviceplugin
