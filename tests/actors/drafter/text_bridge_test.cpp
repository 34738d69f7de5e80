// Different vocabularies are bridged through text: a Qwen3 drafter with its own byte-level BPE
// tokenizer.json drafts for k3-tiny-a (tiktoken); its proposals come back as text and are
// re-tokenized with the target's tokenizer. The output is still plain decoding's, bit for bit.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <sstream>

#include "actors/drafter/drafter_bridge.hpp"
#include "actors/runtime/runtime.hpp"
#include "io/tokenizers/tokenizer.hpp"
#include "io/tokenizers/tokenizer_text.hpp"
#include "tests/actors/drafter/drafter_util.hpp"
#include "tests/actors/drafter/sidecar_util.hpp"

namespace ferry::test {
namespace {

// qwen3-a's weights with a small byte-level BPE vocabulary: 256 bytes + merges of common pairs.
std::filesystem::path qwen3_with_tokenizer() {
  const auto dir = std::filesystem::temp_directory_path() / ("ferry-qwen3-tok-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto src = fixture("qwen3-a");
  std::filesystem::copy_file(src / "config.json", dir / "config.json", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(dir / "model.safetensors");
  std::filesystem::create_symlink(src / "model.safetensors", dir / "model.safetensors");
  nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array();
  const auto& ch = byte_level_chars();
  for (int b = 0; b < 256; ++b) vocab[ch[static_cast<size_t>(b)]] = b;
  int next = 256;
  for (const char* pair : {"th", "he", "in", "er", "an", " t", " a", "on", "re", "at"}) {
    const std::string a = ch[static_cast<unsigned char>(pair[0])], b = ch[static_cast<unsigned char>(pair[1])];
    vocab[a + b] = next++;
    merges.push_back(a + " " + b);
  }
  nlohmann::json tok = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
                        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}};
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  return dir;
}

TEST(TextBridge, DifferentTokenizersAreBridgedThroughTextAndOutputIsExact) {
  K3& k = K3::get();
  const auto kdir = fixture("k3-tiny-a/hf");
  const auto target_tok = load_tokenizer(kdir);
  const auto qdir = qwen3_with_tokenizer();
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  {
    Runtime rt;
    DrafterBridgeOptions o;
    o.sidecar = sidecar_for_spec("qwen3:" + qdir.string(), 1, drafter_exe());
    o.target = {target_tok.get(), static_cast<int32_t>(k.cfg.vocab)};
    o.deadline_ms = 2000;
    DrafterClient client(rt, o);
    ASSERT_TRUE(client.wait_up(std::chrono::seconds(10)));
    int proposals = 0;
    ProposeFn propose = [&](std::span<const int32_t> h, int n, float g) {
      auto p = client.propose(h, n, g);
      if (p && !p->ids.empty()) ++proposals;
      if (p) {
        for (int32_t id : p->ids) EXPECT_LT(id, k.cfg.vocab);
      }
      return p;
    };
    SpecStats st;
    EXPECT_EQ(0, mismatches(k.ref(64), k.spec(64, propose, st, {}, SpecParams{6, {false, 0.0f}})));
    const drafter_status ds = client.status();
    EXPECT_EQ(ds.fallbacks, 0u);
    EXPECT_GT(proposals, 0) << "re-tokenized proposals reached the verifier";
    EXPECT_GT(st.blocks, 0);
  }
  spdlog::default_logger()->sinks().pop_back();
  EXPECT_NE(log.str().find("text mode"), std::string::npos) << log.str();
  std::filesystem::remove_all(qdir);
}

}  // namespace
}  // namespace ferry::test
