// The real `ferry` binary as a subprocess: kill -9 during prepare then a re-run that completes and
// verifies; verify naming a corrupted expert; inspect on the K3.1 config; spine.gguf parsed by the
// third-party npm package @huggingface/gguf.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/store/expert_store.hpp"
#include "io/formats/gguf.hpp"
#include "tests/io/store/store_test_util.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;
const std::string kFerry = std::string(FERRY_BINARY_DIR) + "/apps/ferry";
const fs::path kFix = FERRY_FIXTURES;

struct Run {
  int rc = -1;
  std::string out;
};

Run run(const std::string& args) {
  Run r;
  std::FILE* p = ::popen((kFerry + " " + args + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

int journal_lines(const fs::path& f) {
  std::ifstream in(f);
  int n = 0;
  std::string l;
  while (std::getline(in, l)) ++n;
  return n;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFerry)) GTEST_FAIL() << kFerry << " not built (cmake --build build --target ferry)";
  }
};

TEST_F(Cli, KillNineMidPrepareThenRerunCompletesAndVerifies) {
  const auto root = test::fresh_dir("kill");
  // ~1,300 expert files with an fsync each: long enough to be killed part-way.
  ASSERT_EQ(run("synth --arch deepseek_v3 --experts 256 --top-k 8 --layers 6 --quiet --out " + (root / "hf").string()).rc, 0);
  const std::string prep = "prepare --quiet --checkpoint " + (root / "hf").string() + " --out " + (root / "m").string() +
                           " --expert-dir " + (root / "d0").string() + " --expert-dir " + (root / "d1").string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + kFerry + " " + prep + " >/dev/null 2>&1").c_str(), nullptr);
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (journal_lines(root / "m/.prepare-journal") < 50 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st)) << "prepare finished before it could be killed";
  EXPECT_FALSE(fs::exists(root / "m/manifest.json"));
  const auto again = run(prep);
  ASSERT_EQ(again.rc, 0) << again.out;
  EXPECT_NE(again.out.find("spine already done"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find(" 0 already done"), std::string::npos) << again.out;
  const auto v = run("verify --quiet --full " + (root / "m").string());
  EXPECT_EQ(v.rc, 0) << v.out;
  EXPECT_NE(v.out.find("OK: 1281 copies checked"), std::string::npos) << v.out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    EXPECT_NE(e.path().extension(), ".tmp") << "no temporary file left behind: " << e.path();
}

TEST_F(Cli, VerifyNamesTheCorruptedExpertAndTheGoodCopy) {
  const auto root = test::fresh_dir("corrupt");
  const auto usage = kFix / "k3-expert-usage-2026-09-03.json";
  const auto p = run("prepare --quiet --checkpoint " + (kFix / "k3-tiny-a/hf").string() + " --out " + (root / "m").string() +
                     " --expert-dir " + (root / "base").string() + " --replicas " + usage.string() +
                     " --replica-budget " + (root / "fast").string() + "=1MiB");
  ASSERT_EQ(p.rc, 0) << p.out;
  const auto m = read_manifest(root / "m/manifest.json");
  const ExpertEntry* rep = nullptr;
  for (const auto& e : m.experts)
    if (e.dirs.size() == 2) rep = &e;
  ASSERT_NE(rep, nullptr);
  const auto bad = fs::path(m.dirs[rep->dirs[1]]) / expert_file_name(rep->layer, rep->expert);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const auto v = run("verify --quiet --full " + (root / "m").string());
  EXPECT_EQ(v.rc, 1);
  const auto good = fs::path(m.dirs[rep->dirs[0]]) / expert_file_name(rep->layer, rep->expert);
  EXPECT_NE(v.out.find("BAD " + bad.string() + ": xxh64"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("good copy: " + good.string()), std::string::npos) << v.out;
}

TEST_F(Cli, InspectPrintsThePublishedK31Figures) {
  const auto r = run("inspect " + (kFix / "configs/kimi-k31-pro-config.json").string() + " --gpu-mem 96GiB --host-mem 256GiB");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("33,792 B per token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.43 GB per sequence"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("82,432 files of 17,547,264 B"), std::string::npos) << r.out;
  const auto j = run("inspect --json " + (kFix / "configs/kimi-k31-pro-config.json").string());
  ASSERT_EQ(j.rc, 0);
  EXPECT_EQ(nlohmann::json::parse(j.out)["kv_bytes_per_token"], 33792);
}

TEST_F(Cli, SpineGgufParsesWithHuggingFaceGgufPackage) {
  const fs::path js = fs::path(FERRY_SOURCE_DIR) / "tests/js";
  if (!fs::exists(js / "node_modules/@huggingface/gguf"))
    GTEST_SKIP() << "run `npm ci` (or npm install) in tests/js to enable the third-party GGUF check";
  const auto root = test::fresh_dir("npm");
  ASSERT_EQ(run("prepare --quiet --checkpoint " + (kFix / "k3-tiny-a/hf").string() + " --out " + (root / "m").string() +
                " --expert-dir " + (root / "e").string()).rc, 0);
  std::string out;
  {
    std::FILE* p = ::popen(("cd " + js.string() + " && node gguf_dump.mjs " + (root / "m/spine.gguf").string()).c_str(), "r");
    std::array<char, 65536> buf{};
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    ASSERT_EQ(::pclose(p), 0) << out;
  }
  const auto j = nlohmann::json::parse(out);
  GgufFile ours(root / "m/spine.gguf");
  EXPECT_EQ(j["metadata"]["general.architecture"], "ferry");
  EXPECT_EQ(j["metadata"]["ferry.spine_type"], "q8_0");
  EXPECT_EQ(j["metadata"]["ferry.config_json"], ours.get_value<std::string>("ferry.config_json"));
  EXPECT_EQ(j["metadata"]["ferry.expert_dirs"].size(), 1u);
  const auto& infos = ours.tensor_infos();
  ASSERT_EQ(j["tensors"].size(), infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    const auto& t = j["tensors"][i];
    EXPECT_EQ(t["name"], infos[i].name);
    std::vector<int64_t> ne(infos[i].shape.rbegin(), infos[i].shape.rend());  // GGUF order
    EXPECT_EQ(t["shape"].get<std::vector<int64_t>>(), ne) << infos[i].name;
    EXPECT_EQ(t["dtype"].get<uint32_t>(), uint32_t(ggml_type_of(infos[i].dtype))) << infos[i].name;
    EXPECT_EQ(t["offset"].get<uint64_t>(), infos[i].offset) << infos[i].name;
  }
}

}  // namespace
}  // namespace ferry
