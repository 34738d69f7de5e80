// ferry-server on a prepared store with --ssd-streaming and small caches: the official `openai` npm
// client (non-streamed and streamed) gets exactly the tokens `ferry run --chat` produces for the same
// messages, and /metrics shows the engine's expert reads, tiers and drives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>

#include "tests/apps/engine_cli/engine_cli_support.hpp"
#include "tests/apps/server/server_process.hpp"

namespace ferry::test {
namespace {

const std::vector<std::string> kStreaming = {"--ssd-streaming", "--cache-experts", "4", "--stream-slots", "8"};

double labelled(const std::string& metrics, const std::string& series) {
  const size_t p = metrics.find("\n" + series + " ");
  return p == std::string::npos ? -1.0 : std::stod(metrics.substr(p + series.size() + 2));
}

const std::string kSystem = "You are terse.", kUser = "Tell me about ferries.";
constexpr int kReplyTokens = 12;

// `ferry run --chat` with the streaming flags on `model`: the reference reply (its JSON); with
// `trace_hash`, its tokens' logit hashes go there.
nlohmann::json ferry_run_chat(const fs::path& model, const fs::path& trace_hash = {}) {
  std::string flags;
  for (const auto& a : kStreaming) flags += " " + a;
  if (!trace_hash.empty()) flags += " --trace-hash " + trace_hash.string();
  const Proc run = sh(kFerry + " run --json -t 1 -c 512 -m " + model.string() + flags + " --chat --system '" + kSystem +
                          "' -p '" + kUser + "' -n " + std::to_string(kReplyTokens),
                      "/dev/null");
  EXPECT_EQ(run.rc, 0) << run.out;
  return run.rc == 0 ? nlohmann::json::parse(run.out) : nlohmann::json::object();
}

// The same messages through the `openai` npm client, non-streamed and streamed; rc and its output.
int openai_chat(int port, std::string& out) {
  const nlohmann::json messages = {{{"role", "system"}, {"content", kSystem}}, {{"role", "user"}, {"content", kUser}}};
  return run_node("chat_tokens.mjs http://127.0.0.1:" + std::to_string(port) + "/v1 '" + messages.dump() + "' " +
                      std::to_string(kReplyTokens),
                  out);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// ...and logit for logit: the server's --trace-hash holds, for each of the two requests, the lines
// `ferry run --trace-hash` wrote (position, id, hash of the whole logit vector).
TEST(ServerStreaming, OpenAiClientGetsTheTokensOfFerryRunChatAndMetricsShowExpertReads) {
  const fs::path model = prepared_tiny();
  const std::string tag = std::to_string(::getpid());
  const fs::path run_hash = fs::temp_directory_path() / ("ferry-run-chat-" + tag + ".hash");
  const fs::path server_hash = fs::temp_directory_path() / ("ferry-server-chat-" + tag + ".hash");
  fs::remove(server_hash);
  std::vector<std::string> args = kStreaming;
  args.insert(args.end(), {"--ctx", "512", "--trace-hash", server_hash.string()});
  ServerProcess server(args, model);
  const nlohmann::json want = ferry_run_chat(model, run_hash);
  ASSERT_FALSE(want.empty());
  std::string out;
  const int rc = openai_chat(server.port(), out);
  ASSERT_EQ(rc, 0) << out << server.log();
  const nlohmann::json got = nlohmann::json::parse(out.substr(out.find('{')));
  for (const char* mode : {"plain", "stream"}) {
    const auto& g = got[mode];
    EXPECT_EQ(g["usage"]["prompt_tokens"], want["prompt_tokens"]) << mode << ": the same prompt ids\n" << out;
    EXPECT_EQ(g["usage"]["completion_tokens"], want["generated"]) << mode << "\n" << out;
    EXPECT_EQ(g["content"], want["text"]) << mode << ": the same tokens, as text";
  }
  const std::string one = slurp(run_hash);
  EXPECT_EQ(std::count(one.begin(), one.end(), '\n'), want["generated"].get<int>()) << one;
  EXPECT_EQ(slurp(server_hash), one + one) << "plain and streamed requests: the logits of ferry run --chat";
  fs::remove(run_hash);
  fs::remove(server_hash);
  const HttpResponse m = http(server.port(), "GET", "/metrics");
  EXPECT_EQ(labelled(m.body, "ferry_streaming"), 1.0) << m.body;
  EXPECT_GT(labelled(m.body, "ferry_expert_reads_total"), 0.0) << m.body;
  EXPECT_GT(labelled(m.body, "ferry_expert_requests_total"), 0.0) << m.body;
  EXPECT_NE(m.body.find("ferry_drive_read_bytes_total{drive=\""), std::string::npos) << m.body;
  EXPECT_EQ(labelled(m.body, "ferry_cache_experts{tier=\"host\",of=\"capacity\"}"), 4.0) << m.body;
  EXPECT_NE(server.log().find("memory plan"), std::string::npos) << server.log();
}

// --draft on the server: the verifier checks the drafter's proposals in blocks, and the reply is the
// plain run's, token for token. A replay of the plain run's own tokens is a drafter that is always right,
// so blocks must run and accept drafts (a server that ignored --draft would count none).
TEST(ServerStreaming, DrafterOnTheServerGivesThePlainTokensAndCountsItsBlocks) {
  const fs::path model = prepared_tiny();
  const nlohmann::json want = ferry_run_chat(model);
  ASSERT_FALSE(want.empty());
  const fs::path replay = fs::temp_directory_path() / ("ferry-server-replay-" + std::to_string(::getpid()) + ".json");
  std::ofstream(replay) << nlohmann::json{{"prompt_ids", want["prompt_ids"]}, {"generated_ids", want["ids"]}}.dump();
  std::vector<std::string> args = kStreaming;
  args.insert(args.end(), {"--ctx", "512", "--draft", "replay:" + replay.string(), "--draft-gate", "0",
                              "--draft-cost-gate", "off"});
  ServerProcess server(args, model);
  std::string out;
  const int rc = openai_chat(server.port(), out);
  fs::remove(replay);
  ASSERT_EQ(rc, 0) << out << server.log();
  const nlohmann::json got = nlohmann::json::parse(out.substr(out.find('{')));
  for (const char* mode : {"plain", "stream"}) {
    EXPECT_EQ(got[mode]["usage"]["completion_tokens"], want["generated"]) << mode << "\n" << out;
    EXPECT_EQ(got[mode]["content"], want["text"]) << mode << ": the plain run's tokens, as text";
  }
  const HttpResponse m = http(server.port(), "GET", "/metrics");
  EXPECT_GT(labelled(m.body, "ferry_drafter_blocks_total"), 0.0) << m.body << server.log();
  EXPECT_GT(labelled(m.body, "ferry_drafter_accepted_total"), 0.0) << m.body;
  EXPECT_NE(server.log().find("drafter replay:"), std::string::npos) << server.log();
}

// The prompt cache: the second turn of a chat starts with the first turn's prompt, so the server keeps
// that prompt pass (to its last multiple of 64 tokens) and runs only the rest. The reply, logit for
// logit, is the one a server without the cache gives (also with a 1-gram drafter, whose blocks run on
// the restored state); usage and /metrics count the cached tokens. The snapshot costs the first turn no
// second pass: it asks for the experts an uncached server asks for.
TEST(ServerStreaming, TheNextTurnOfAChatReusesThePromptPassAndGivesTheSameLogits) {
  const fs::path model = prepared_tiny();
  const std::string tag = std::to_string(::getpid());
  std::string story;
  for (int i = 0; i < 12; ++i) story += "The ferry leaves the harbour at dawn and crosses the strait. ";
  nlohmann::json messages = {{{"role", "system"}, {"content", kSystem}}, {{"role", "user"}, {"content", story}}};
  auto turn = [](int port, const nlohmann::json& msgs) {
    const nlohmann::json req = {{"messages", msgs}, {"max_tokens", 8}, {"temperature", 0}};
    const HttpResponse r = http(port, "POST", "/v1/chat/completions", req.dump(), "Content-Type: application/json\r\n");
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? nlohmann::json::parse(r.body) : nlohmann::json::object();
  };
  std::map<std::string, std::vector<nlohmann::json>> replies;
  std::map<std::string, std::string> hashes, metrics;
  std::map<std::string, double> first_turn_requests;
  for (const std::string mode : {"cached", "uncached", "cached-ngram"}) {
    const fs::path hash = fs::temp_directory_path() / ("ferry-server-pc-" + mode + "-" + tag + ".hash");
    fs::remove(hash);
    std::vector<std::string> args = kStreaming;
    args.insert(args.end(), {"--ctx", "512", "--trace-hash", hash.string()});
    if (mode == "uncached") args.push_back("--no-prompt-cache");
    if (mode == "cached-ngram") args.insert(args.end(), {"--draft", "ngram:1", "--draft-gate", "0", "--draft-cost-gate", "off"});
    ServerProcess server(args, model);
    nlohmann::json msgs = messages;
    for (const char* next : {"And then?", "Where does it go?"}) {
      const nlohmann::json r = turn(server.port(), msgs);
      ASSERT_TRUE(r.contains("choices")) << server.log();
      replies[mode].push_back(r);
      if (replies[mode].size() == 1)
        first_turn_requests[mode] = labelled(http(server.port(), "GET", "/metrics").body, "ferry_expert_requests_total");
      msgs.push_back({{"role", "assistant"}, {"content", r["choices"][0]["message"]["content"]}});
      msgs.push_back({{"role", "user"}, {"content", next}});
    }
    replies[mode].push_back(turn(server.port(), msgs));
    metrics[mode] = http(server.port(), "GET", "/metrics").body;
    hashes[mode] = slurp(hash);
    fs::remove(hash);
  }
  ASSERT_EQ(replies["cached"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto &c = replies["cached"][i], &u = replies["uncached"][i];
    EXPECT_EQ(c["choices"][0]["message"]["content"], u["choices"][0]["message"]["content"]) << "turn " << i;
    EXPECT_EQ(c["usage"]["prompt_tokens"], u["usage"]["prompt_tokens"]) << "turn " << i;
    EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << "turn " << i;
  }
  EXPECT_EQ(replies["cached"][0]["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << "nothing before the first turn";
  int64_t cached = 0;
  for (size_t i = 1; i < 3; ++i) {
    const int64_t n = replies["cached"][i]["usage"]["prompt_tokens_details"]["cached_tokens"];
    EXPECT_GE(n, 64) << "turn " << i << " starts with the previous turn's prompt\n" << replies["cached"][i].dump();
    EXPECT_EQ(n % 64, 0) << "turn " << i;
    EXPECT_LT(n, replies["cached"][i]["usage"]["prompt_tokens"].get<int64_t>()) << "turn " << i;
    cached += n;
  }
  EXPECT_GT(first_turn_requests["cached"], 0.0);
  EXPECT_EQ(first_turn_requests["cached"], first_turn_requests["uncached"]) << "one prompt pass on the first turn";
  EXPECT_FALSE(hashes["cached"].empty());
  EXPECT_EQ(hashes["cached"], hashes["uncached"]) << "every generated token's logits, bit for bit";
  EXPECT_EQ(hashes["cached-ngram"], hashes["uncached"]) << "drafted on the restored state: the same logits";
  EXPECT_GT(labelled(metrics["cached-ngram"], "ferry_prompt_cached_tokens_total"), 0.0);
  EXPECT_GT(labelled(metrics["cached-ngram"], "ferry_drafter_blocks_total"), 0.0) << "the drafter's blocks ran";
  EXPECT_EQ(labelled(metrics["cached"], "ferry_prompt_cached_tokens_total"), double(cached)) << metrics["cached"];
  EXPECT_EQ(labelled(metrics["uncached"], "ferry_prompt_cached_tokens_total"), 0.0);
}

// One engine behind every entry point: `ferry run --logprobs` and the server's /v1/completions
// `logprobs` give the same log-probabilities for the same prompt ids (streamed experts on both).
TEST(ServerStreaming, FerryRunAndTheServerGiveTheSameLogprobs) {
  const fs::path model = prepared_tiny();
  std::string flags;
  for (const auto& a : kStreaming) flags += " " + a;
  const Proc run = sh(kFerry + " run --json -t 1 -c 256 -m " + model.string() + flags +
                          " --prompt-ids 1,500,77,300,12 -n 6 --ignore-eos --logprobs 3",
                      "/dev/null");
  ASSERT_EQ(run.rc, 0) << run.out;
  const nlohmann::json want = nlohmann::json::parse(run.out)["logprobs"];
  ASSERT_EQ(want.size(), 6u) << run.out;
  std::vector<std::string> args = kStreaming;
  args.insert(args.end(), {"--ctx", "256"});
  ServerProcess server(args, model);
  const nlohmann::json req = {{"prompt", {1, 500, 77, 300, 12}}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 3}};
  const HttpResponse r = http(server.port(), "POST", "/v1/completions", req.dump(), "Content-Type: application/json\r\n");
  ASSERT_EQ(r.status, 200) << r.body << server.log();
  const nlohmann::json got = r.json()["choices"][0]["logprobs"];
  ASSERT_GE(got["token_logprobs"].size(), 1u) << r.body;
  for (size_t i = 0; i < got["token_logprobs"].size(); ++i) {
    EXPECT_EQ(got["token_logprobs"][i], want[i]["logprob"]) << "token " << i;
    ASSERT_EQ(got["top_logprobs"][i].size(), 3u);
    std::vector<double> server_top, run_top;
    for (const auto& [tok, lp] : got["top_logprobs"][i].items()) server_top.push_back(lp.get<double>());
    for (const auto& e : want[i]["top"]) run_top.push_back(e["logprob"].get<double>());
    std::sort(server_top.begin(), server_top.end());
    std::sort(run_top.begin(), run_top.end());
    EXPECT_EQ(server_top, run_top) << "token " << i;
  }
}

TEST(ServerStreaming, APortInUseIsRefusedBeforeTheModelLoadsNamingThePort) {
  const int port = free_port();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  const Proc r = sh(kServerBinary.string() + " -m " + kTinyModel.string() + " --port " + std::to_string(port));
  ::close(fd);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("memory plan"), std::string::npos) << "refused before the plan and the load:\n" << r.out;
  EXPECT_LT(r.seconds, 1.0);
}

TEST(ServerStreaming, ServerFlagsAreTheEngineFlagsAndBadOnesAreRefusedBeforeLoading) {
  const Proc r = sh(kServerBinary.string() + " -m " + prepared_tiny().string() + " --ssd-streaming --host-pool 2G");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--host-pool: '2G' is not a size"), std::string::npos) << r.out;
  const Proc d = sh(kServerBinary.string() + " -m " + prepared_tiny().string() + " --draft nonsense");
  EXPECT_EQ(d.rc, 2) << d.out;
  EXPECT_NE(d.out.find("unknown drafter kind"), std::string::npos) << d.out;
  EXPECT_LT(d.seconds, 1.0);
}

}  // namespace
}  // namespace ferry::test
