// The web page in headless Chromium (Debian's chromium driven by playwright-core): a message streams a
// reply in and the dashboard numbers move; at 420 px a reply stopped mid-stream frees the engine. The screenshot lands in the build directory.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/apps/engine_cli/engine_cli_support.hpp"
#include "tests/apps/server/server_process.hpp"

namespace ferry::test {
namespace {

TEST(WebPage, ChatStreamsAReplyAndTheDashboardUpdatesInHeadlessChromium) {
  if (!fs::exists("/usr/bin/chromium")) GTEST_FAIL() << "/usr/bin/chromium is missing: run scripts/install-deps.sh";
  // A long reply (a template without stop strings, 160 tokens) from experts streamed through a 2-expert
  // cache, so the reply's events arrive over seconds. With everything in memory and 48 tokens the tiny
  // model finished before a starved browser's first read on a loaded 2-core CI machine, and the page
  // saw the whole reply in one chunk. The page counts the deltas it renders (data-deltas); the check is
  // on those, since a starved browser can still read a fast reply's events in one network read.
  const fs::path tmpl = fs::path(FERRY_BINARY_DIR) / "test-data/nostop-template-page.json";
  fs::create_directories(tmpl.parent_path());
  std::ofstream(tmpl) << R"({"name": "nostop", "roles": {"system": {"prefix": "", "suffix": "\n"},
    "user": {"prefix": "Q: ", "suffix": "\n"}, "assistant": {"prefix": "A: ", "suffix": "\n"}}, "generation_prompt": "A:"})";
  ServerProcess server({"--events-interval-ms", "200", "--ssd-streaming", "--cache-experts", "2", "--chat-template",
                        tmpl.string()},
                       prepared_tiny());
  const fs::path shot = fs::path(FERRY_BINARY_DIR) / "ferry-server-page.png";
  fs::remove(shot);
  std::string out;
  const int rc = run_node("web_page.mjs http://127.0.0.1:" + std::to_string(server.port()) + "/ '" + shot.string() +
                              "' 160",
                          out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(fs::exists(shot)) << out;
  EXPECT_GT(fs::exists(shot) ? fs::file_size(shot) : 0, 10000u);
  EXPECT_TRUE(server.alive()) << server.log();
}

TEST(WebPage, StopCancelsTheReplyServerSideNewChatClearsAndThePageFits420Pixels) {
  if (!fs::exists("/usr/bin/chromium")) GTEST_FAIL() << "/usr/bin/chromium is missing: run scripts/install-deps.sh";
  // A template without stop strings, so the random fixture model writes long replies (the kimi one ends
  // them at <|end_of_msg|> within a few dozen tokens); experts stream, which also slows it down.
  const fs::path tmpl = fs::path(FERRY_BINARY_DIR) / "test-data/nostop-template.json";
  fs::create_directories(tmpl.parent_path());
  std::ofstream(tmpl) << R"({"name": "nostop", "roles": {"system": {"prefix": "", "suffix": "\n"},
    "user": {"prefix": "Q: ", "suffix": "\n"}, "assistant": {"prefix": "A: ", "suffix": "\n"}}, "generation_prompt": "A:"})";
  ServerProcess server({"--events-interval-ms", "200", "--max-tokens-limit", "4000", "--chat-template", tmpl.string(),
                        "--ssd-streaming", "--cache-experts", "2"},
                       prepared_tiny());
  const fs::path shot = fs::path(FERRY_BINARY_DIR) / "ferry-server-page-420.png";
  std::string out;
  const int rc = run_node("web_stop.mjs http://127.0.0.1:" + std::to_string(server.port()) + "/ '" + shot.string() + "'", out);
  EXPECT_EQ(rc, 0) << out << "\n" << server.log();
  EXPECT_TRUE(server.alive()) << server.log();
}

}  // namespace
}  // namespace ferry::test
