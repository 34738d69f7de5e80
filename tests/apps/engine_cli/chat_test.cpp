// `ferry chat` (apps/ferry/cmd_chat.cpp) on the prepared tiny model with streamed experts: a turn's
// reply is `ferry run --chat`'s logit for logit; the next turn reuses the prompt pass (the prompt
// cache); after /reset the same first message, now started from the cache, gives the same logits again.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "tests/apps/engine_cli/engine_cli_support.hpp"

namespace ferry::test {
namespace {

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(f, l);) v.push_back(l);
  return v;
}

TEST(Chat, ATurnIsFerryRunChatLogitForLogitAndTheNextTurnsReuseThePromptPass) {
  const fs::path model = prepared_tiny();
  const std::string tag = std::to_string(::getpid());
  const fs::path dir = fs::temp_directory_path() / ("ferry-chat-" + tag);
  fs::create_directories(dir);
  const std::string flags = " -t 1 -c 512 --ssd-streaming --cache-experts 4 --stream-slots 8 -n 8 --quiet";
  std::string first;
  for (int i = 0; i < 6; ++i) first += "Tell me about the ferry that crosses the strait at dawn. ";
  {
    std::ofstream in(dir / "in.txt");
    in << first << "\nAnd then?\n/reset\n" << first << "\n/exit\n";
  }
  const Proc chat = sh(kFerry + " chat -m " + model.string() + flags + " --trace-hash " + (dir / "chat.hash").string() +
                       " < " + (dir / "in.txt").string());
  ASSERT_EQ(chat.rc, 0) << chat.out;
  const Proc run = sh(kFerry + " run -m " + model.string() + flags + " --chat -p '" + first + "' --trace-hash " +
                      (dir / "run.hash").string());
  ASSERT_EQ(run.rc, 0) << run.out;
  const auto c = lines_of(dir / "chat.hash"), r = lines_of(dir / "run.hash");
  ASSERT_EQ(r.size(), 8u) << run.out;
  ASSERT_EQ(c.size(), 24u) << chat.out << "\nthree turns of 8 tokens";
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(c[i], r[i]) << "turn 1, token " << i << ": ferry run --chat's logits";
    EXPECT_EQ(c[16 + i], r[i]) << "the first message again after /reset, from the prompt cache, token " << i;
  }
  // The status lines: the second turn and the repeated first message start from cached tokens.
  std::istringstream err(chat.out);
  std::vector<std::string> status;
  for (std::string l; std::getline(err, l);)
    if (l.find("[prompt ") != std::string::npos) status.push_back(l.substr(l.find("[prompt ")));
  ASSERT_EQ(status.size(), 3u) << chat.out;
  EXPECT_NE(status[0].find("(0 cached)"), std::string::npos) << status[0];
  EXPECT_EQ(status[1].find("(0 cached)"), std::string::npos) << status[1];
  EXPECT_EQ(status[2].find("(0 cached)"), std::string::npos) << status[2];
  fs::remove_all(dir);
}

// --draft in the chat as in ferry run and the server: one drafter for the session, its blocks verified
// on the prompt cache's state, and every turn's logits those of the plain chat.
TEST(Chat, WithADrafterEveryTurnHasThePlainChatsLogits) {
  const fs::path model = prepared_tiny();
  const fs::path dir = fs::temp_directory_path() / ("ferry-chat-draft-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string first;
  for (int i = 0; i < 6; ++i) first += "The ferry crosses the strait and the ferry crosses back. ";
  std::ofstream(dir / "in.txt") << first << "\nAnd then?\n";
  const std::string flags = " -t 1 -c 512 -n 8 --quiet < " + (dir / "in.txt").string();
  const Proc plain = sh(kFerry + " chat -m " + model.string() + " --trace-hash " + (dir / "plain.hash").string() + flags);
  ASSERT_EQ(plain.rc, 0) << plain.out;
  const Proc drafted = sh(kFerry + " chat -m " + model.string() + " --draft ngram:1 --draft-gate 0 --draft-cost-gate off" +
                          " --trace-hash " + (dir / "drafted.hash").string() + flags);
  ASSERT_EQ(drafted.rc, 0) << drafted.out;
  const auto p = lines_of(dir / "plain.hash"), d = lines_of(dir / "drafted.hash");
  ASSERT_EQ(p.size(), 16u) << plain.out;
  EXPECT_EQ(d, p) << drafted.out;
  int64_t blocks = 0;
  for (size_t at = 0; (at = drafted.out.find("| blocks ", at)) != std::string::npos; ++at)
    blocks += std::stoll(drafted.out.substr(at + 9));
  EXPECT_GT(blocks, 0) << "the drafter's blocks ran\n" << drafted.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ferry::test
