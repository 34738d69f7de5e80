// ferry-server under hostile and concurrent load on loopback: a bounded fuzz loop of malformed
// requests, concurrent clients that must each get their own answer, a full queue, and clients that
// disconnect mid-generation.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <random>

#include "tests/apps/server/server_process.hpp"

namespace ferry::test {
namespace {

using nlohmann::json;

// The answer to a request is well-formed when it has a status line, a length-delimited body and, for
// errors, OpenAI's error object; a 200 is JSON with choices or an SSE stream ending in [DONE].
::testing::AssertionResult well_formed(const HttpResponse& r) {
  if (r.status == 0) return ::testing::AssertionFailure() << "no complete response";
  try {
    if (r.status == 200 && r.header("Content-Type") == "text/event-stream") {
      const auto ev = sse_payloads(r.body);
      if (ev.empty() || ev.back() != "[DONE]") return ::testing::AssertionFailure() << "SSE without [DONE]";
      return ::testing::AssertionSuccess();
    }
    const json j = json::parse(r.body);
    if (r.status == 200) {
      if (!j.contains("choices")) return ::testing::AssertionFailure() << "200 without choices: " << r.body;
      return ::testing::AssertionSuccess();
    }
    const json& e = j.at("error");
    if (!e.at("message").is_string() || !e.at("type").is_string() || !e.contains("param") || !e.contains("code"))
      return ::testing::AssertionFailure() << "bad error object: " << r.body;
  } catch (const std::exception& ex) {
    return ::testing::AssertionFailure() << ex.what() << " in " << r.raw_head << "\n" << r.body.substr(0, 300);
  }
  return ::testing::AssertionSuccess();
}

// Valid-looking bodies the fuzzer mutates; max_tokens 1 keeps the ones that stay valid cheap.
const std::vector<std::string> kSeeds = {
    R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"hello"}],"max_tokens":1,"temperature":0})",
    R"({"prompt":"abc","max_tokens":1,"stop":["x"],"seed":3})",
    R"({"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"max_tokens":1,"stream":true})",
};

std::string mutate(std::mt19937& rng, std::string s) {
  const int kind = static_cast<int>(rng() % 6);
  auto pos = [&] { return s.empty() ? 0 : rng() % s.size(); };
  switch (kind) {
    case 0: for (int i = 0; i < 3; ++i) if (!s.empty()) s[pos()] = static_cast<char>(rng()); break;  // bytes
    case 1: s.resize(pos()); break;                                                                      // truncated
    case 2: s.insert(pos(), std::string(1 + rng() % 4, "{}[]\",:"[rng() % 7])); break;                   // syntax
    case 3: s.insert(s.find("\"", 5) + 1, "\xC3\x28\xFF\xED\xA0\x80"); break;                          // bad UTF-8
    case 4: {  // a field with the wrong type
      const char* vals[] = {"\"str\"", "-1", "1e309", "[]", "{}", "null", "true", "18446744073709551616", "0.5"};
      const char* keys[] = {"max_tokens", "temperature", "top_p", "seed", "stop", "n", "stream", "messages", "prompt"};
      s = s.substr(0, s.size() - 1) + ",\"" + keys[rng() % 9] + "\":" + vals[rng() % 9] + "}";
      break;
    }
    default: s = std::string(rng() % 64, '\0'); for (auto& c : s) c = static_cast<char>(rng()); break;  // noise
  }
  return s;
}

class Robustness : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--max-body-bytes", "65536", "--max-tokens-limit", "16", "--max-queue", "8", "--ctx", "256"});
  }
  static void TearDownTestSuite() { server_.reset(); }
  static std::unique_ptr<ServerProcess> server_;
};
std::unique_ptr<ServerProcess> Robustness::server_;

// One fuzz client: requests over a keep-alive connection, reconnecting whenever the server closes it.
struct FuzzClient {
  int port;
  std::mt19937 rng;
  int fd = -1;
  int sent = 0, answered = 0, closed = 0;
  std::vector<std::string> failures;

  HttpResponse exchange(const std::string& req, bool slow) {
    if (fd < 0) fd = connect_to(port);
    bool ok = true;
    if (slow) {  // a slow client: small pieces with pauses
      for (size_t i = 0; ok && i < req.size(); i += 7) {
        ok = send_all(fd, req.substr(i, 7));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    } else {
      ok = send_all(fd, req);
    }
    HttpResponse r = ok ? read_response(fd, 10000) : HttpResponse{};
    if (r.status == 0 || r.header("Connection") == "close") {
      ::close(fd);
      fd = -1;
    }
    return r;
  }

  void one(int i) {
    const bool chat = rng() % 2;
    const char* path = chat ? "/v1/chat/completions" : "/v1/completions";
    std::string body = mutate(rng, kSeeds[rng() % kSeeds.size()]);
    if (i % 997 == 0) body = std::string(70000 + rng() % 100000, 'x');  // over --max-body-bytes: 413
    if (i % 501 == 0) body = std::string(100, '[') + body;              // deep nesting
    ++sent;
    if (i % 89 == 0) {  // broken HTTP: the server may close without answering, but must not answer garbage
      const char* bad[] = {"GARBAGE\r\n\r\n", "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                           "POST /v1/completions HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"};
      const int k = static_cast<int>(rng() % 3);
      if (fd >= 0) ::close(fd);
      fd = connect_to(port);
      send_all(fd, bad[k]);
      if (k == 2) ::shutdown(fd, SHUT_WR);  // truncated body, then the client gives up
      const HttpResponse r = read_response(fd, 3000);
      ::close(fd);
      fd = -1;
      if (r.status != 0 && !well_formed(r)) failures.push_back(well_formed(r).message());
      ++closed;
      return;
    }
    const HttpResponse r = exchange(request_text("POST", path, body), i % 500 == 7);
    if (auto ok = well_formed(r); !ok) failures.push_back(std::string(path) + ": " + ok.message() + " for body " +
                                                          json(body.substr(0, 200)).dump(-1, ' ', false, json::error_handler_t::replace));
    else ++answered;
  }
};

TEST(RobustnessFuzz, TenThousandMalformedRequestsGetWellFormedAnswersAndNoCrash) {
  // Mutated bodies that stay valid reach the engine; one token each and a queue of 2 keep them from
  // dominating the run (the rest of those get a well-formed 429, which is part of what is checked).
  // The plain template keeps their prompts short: this test is about the HTTP and JSON layers.
  ServerProcess server({"--max-body-bytes", "65536", "--max-tokens-limit", "1", "--max-queue", "2", "--ctx", "64",
                        "--chat-template", "plain"});
  ServerProcess* server_ = &server;
  constexpr int kClients = 4, kPerClient = 2600;  // 10,400 requests
  std::vector<FuzzClient> clients;
  for (int c = 0; c < kClients; ++c) clients.push_back({server_->port(), std::mt19937(1234 + c)});
  std::vector<std::thread> threads;
  for (auto& cl : clients)
    threads.emplace_back([&cl] {
      for (int i = 0; i < kPerClient; ++i) cl.one(i);
      if (cl.fd >= 0) ::close(cl.fd);
    });
  for (auto& t : threads) t.join();
  int sent = 0, answered = 0;
  for (auto& cl : clients) {
    sent += cl.sent;
    answered += cl.answered;
    for (size_t k = 0; k < std::min<size_t>(cl.failures.size(), 5); ++k) ADD_FAILURE() << cl.failures[k];
    EXPECT_TRUE(cl.failures.empty()) << cl.failures.size() << " malformed answers";
  }
  EXPECT_GE(sent, 10000);
  EXPECT_GE(answered, 9500);
  std::printf("fuzz: %d requests, %d answered, %.0f generations, %.0f queue-full\n", sent, answered,
              server_->metric("ferry_generations_total"), server_->metric("ferry_rejected_queue_full_total"));
  ASSERT_TRUE(server_->alive()) << server_->log();
  EXPECT_EQ(http(server_->port(), "GET", "/health").status, 200);
}

TEST_F(Robustness, EightConcurrentClientsEachGetTheirOwnAnswer) {
  auto body = [](int i) {
    return json{{"messages", {{{"role", "system"}, {"content", "s"}},
                              {{"role", "user"}, {"content", "client " + std::to_string(i) + " asks"}}}},
                {"max_tokens", 8}, {"temperature", 0.9}, {"seed", 100 + i}, {"stream", i % 2 == 1}}.dump();
  };
  auto content = [](const HttpResponse& r) {
    if (r.header("Content-Type") != "text/event-stream") return r.json()["choices"][0]["message"]["content"].get<std::string>();
    std::string s;
    for (const auto& e : sse_payloads(r.body))
      if (e != "[DONE]") s += json::parse(e)["choices"][0]["delta"].value("content", "");
    return s;
  };
  std::vector<std::string> solo(8);
  for (int i = 0; i < 8; ++i) {
    const HttpResponse r = http(server_->port(), "POST", "/v1/chat/completions", body(i));
    ASSERT_EQ(r.status, 200) << r.body;
    solo[i] = content(r);
  }
  std::atomic<int> mismatches{0}, answers{0};
  std::vector<std::thread> threads;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      for (int round = 0; round < 2 || std::chrono::steady_clock::now() < end; ++round) {
        const HttpResponse r = http(server_->port(), "POST", "/v1/chat/completions", body(i));
        if (r.status != 200 || content(r) != solo[i]) ++mismatches;
        ++answers;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GE(answers.load(), 16);
}

TEST_F(Robustness, FullQueueAnswers429WithRetryAfter) {
  const std::string body = R"({"prompt":"fill the queue","max_tokens":16,"temperature":0})";
  std::vector<HttpResponse> out(24);
  std::vector<std::thread> threads;
  for (int i = 0; i < 24; ++i)
    threads.emplace_back([&, i] { out[i] = http(server_->port(), "POST", "/v1/completions", body); });
  for (auto& t : threads) t.join();
  int ok = 0, busy = 0;
  for (const auto& r : out) {
    EXPECT_TRUE(well_formed(r));
    if (r.status == 200) ++ok;
    if (r.status == 429) {
      ++busy;
      EXPECT_EQ(r.header("Retry-After"), "1");
      EXPECT_EQ(r.json()["error"]["code"], "queue_full");
    }
  }
  EXPECT_EQ(ok + busy, 24);
  EXPECT_GE(busy, 1) << "1 running + 8 queued should leave some of 24 simultaneous requests out";
  EXPECT_GE(ok, 8);  // 8 queued, plus the one the engine had already taken (if it had, when the rest came)
  EXPECT_GE(server_->metric("ferry_rejected_queue_full_total"), 1.0);
}

TEST(RobustnessDisconnect, ClientLeavingMidStreamCancelsItsGenerationAndTheServerGoesOn) {
  ServerProcess server({"--max-tokens-limit", "4000"});
  const std::string body = R"({"prompt":"a long story","max_tokens":4000,"temperature":0,"stream":true})";
  int fd = connect_to(server.port());
  ASSERT_TRUE(send_all(fd, request_text("POST", "/v1/completions", body)));
  std::string buf;
  read_until(fd, buf, 10000, [](const std::string& b) { return b.find("\"text\"") != std::string::npos; });
  ASSERT_NE(buf.find("200 OK"), std::string::npos) << buf;
  ::close(fd);  // gone mid-stream, thousands of tokens before the end
  // A non-streaming client that leaves while its reply is being generated.
  fd = connect_to(server.port());
  ASSERT_TRUE(send_all(fd, request_text("POST", "/v1/completions", R"({"prompt":"x","max_tokens":4000})")));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::close(fd);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server.metric("ferry_generations_cancelled_total") < 2 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(server.metric("ferry_generations_cancelled_total"), 2.0);
  EXPECT_LT(server.metric("ferry_generated_tokens_total"), 2000.0);
  const HttpResponse r = http(server.port(), "POST", "/v1/completions", R"({"prompt":"next","max_tokens":3})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(server.metric("ferry_engine_busy"), 0.0);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace ferry::test
