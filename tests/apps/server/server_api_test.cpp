// ferry-server's HTTP API against the real binary on loopback: the official `openai` npm client,
// OpenAI-shaped errors naming the field or limit, SSE shape, stop strings, /metrics and /events.
#include <gtest/gtest.h>

#include <memory>

#include "tests/apps/server/server_process.hpp"

namespace ferry::test {
namespace {

using nlohmann::json;
const std::string kAuth = "Authorization: Bearer test-key\r\n";

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--api-key", "test-key", "--max-body-bytes", "65536", "--ctx", "256", "--max-tokens-limit", "512",
        "--events-interval-ms", "100"});
  }
  static void TearDownTestSuite() { server_.reset(); }
  static HttpResponse post(const std::string& path, const std::string& body, const std::string& auth = kAuth) {
    return http(server_->port(), "POST", path, body, auth);
  }
  // Asserts OpenAI's error shape and returns the error object.
  static json error_of(const HttpResponse& r, int status) {
    EXPECT_EQ(r.status, status) << r.raw_head << "\n" << r.body;
    EXPECT_EQ(r.header("Content-Type"), "application/json");
    const json j = json::parse(r.body);
    const json& e = j.at("error");
    EXPECT_TRUE(e.at("message").is_string());
    EXPECT_TRUE(e.at("type").is_string());
    EXPECT_TRUE(e.contains("param") && e.contains("code"));
    return e;
  }
  static std::unique_ptr<ServerProcess> server_;
};
std::unique_ptr<ServerProcess> ServerApi::server_;

TEST_F(ServerApi, OfficialOpenAiNpmClientParsesEveryEndpoint) {
  std::string out;
  const int rc = run_node("openai_client.mjs http://127.0.0.1:" + std::to_string(server_->port()) + "/v1 test-key", out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"chat\""), std::string::npos) << out;
}

TEST_F(ServerApi, MissingOrWrongApiKeyGets401) {
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})";
  EXPECT_EQ(error_of(post("/v1/chat/completions", body, ""), 401)["type"], "authentication_error");
  EXPECT_EQ(error_of(post("/v1/chat/completions", body, "Authorization: Bearer nope\r\n"), 401)["code"],
            "invalid_api_key");
  EXPECT_EQ(http(server_->port(), "GET", "/health").status, 200);  // open endpoints stay open
}

TEST_F(ServerApi, InvalidJsonGets400) {
  for (const std::string& body : std::vector<std::string>{"{", "[1,2]", "nul", "{\"messages\": [}", "{\"a\":\"\xff\"}"}) {
    const json e = error_of(post("/v1/chat/completions", body), 400);
    EXPECT_EQ(e["code"], "invalid_json") << body;
  }
  std::string deep(200, '[');
  EXPECT_NE(error_of(post("/v1/completions", deep), 400)["message"].get<std::string>().find("nested"),
            std::string::npos);
}

TEST_F(ServerApi, BadParameterTypesAndValuesNameTheField) {
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{" + msgs + R"(,"max_tokens":"ten"})", "max_tokens"},
      {"{" + msgs + R"(,"max_tokens":0})", "max_tokens"},
      {"{" + msgs + R"(,"temperature":5})", "temperature"},
      {"{" + msgs + R"(,"top_p":"x"})", "top_p"},
      {"{" + msgs + R"(,"seed":1.5})", "seed"},
      {"{" + msgs + R"(,"stop":7})", "stop"},
      {"{" + msgs + R"(,"stop":["a",1]})", "stop"},
      {"{" + msgs + R"(,"n":2})", "n"},
      {"{" + msgs + R"(,"stream":"yes"})", "stream"},
      {R"({"max_tokens":3})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[{"role":"robot","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0].type"},
      {"{" + msgs + R"(,"logprobs":1})", "logprobs"},
      {"{" + msgs + R"(,"top_logprobs":2})", "top_logprobs"},
      {"{" + msgs + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs"},
  };
  for (const auto& [body, param] : cases) {
    const json e = error_of(post("/v1/chat/completions", body), 400);
    EXPECT_EQ(e["param"], param) << body;
    EXPECT_NE(e["message"].get<std::string>().find(param), std::string::npos) << e["message"];
  }
  EXPECT_EQ(error_of(post("/v1/completions", R"({"prompt":5})"), 400)["param"], "prompt");
  EXPECT_EQ(error_of(post("/v1/completions", R"({"prompt":[5000]})"), 400)["param"], "prompt");  // out of vocab
  EXPECT_EQ(error_of(post("/v1/completions", R"({"prompt":"a","logprobs":6})"), 400)["param"], "logprobs");
  EXPECT_EQ(error_of(post("/v1/completions", R"({"prompt":"a","echo":true})"), 400)["code"], "unsupported_value");
}

TEST_F(ServerApi, LimitsAnswerWithTheLimitNamed) {
  const json over = error_of(
      post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":513})"), 400);
  EXPECT_NE(over["message"].get<std::string>().find("512"), std::string::npos) << over;
  std::string words;
  for (int i = 0; i < 300; ++i) words += "word ";
  const json ctx = error_of(post("/v1/completions", json{{"prompt", words}}.dump()), 413);
  EXPECT_EQ(ctx["code"], "context_length_exceeded");
  EXPECT_NE(ctx["message"].get<std::string>().find("--ctx 256"), std::string::npos) << ctx;
  const json big = error_of(post("/v1/completions", json{{"prompt", std::string(70000, 'a')}}.dump()), 413);
  EXPECT_NE(big["message"].get<std::string>().find("65536"), std::string::npos) << big;
}

TEST_F(ServerApi, UnknownPathIs404AndWrongMethodIs405) {
  EXPECT_EQ(error_of(http(server_->port(), "GET", "/v2/nothing", "", kAuth), 404)["type"], "not_found_error");
  EXPECT_EQ(http(server_->port(), "GET", "/v2/nothing").status, 401);  // the key covers unknown paths too
  EXPECT_EQ(error_of(http(server_->port(), "GET", "/v1/chat/completions", "", kAuth), 405)["code"],
            "method_not_allowed");
}

TEST_F(ServerApi, StreamingIsSseChunksEndingInDoneWithUsage) {
  const HttpResponse r = post("/v1/chat/completions",
                              R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":6,"stream":true,"seed":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("Content-Type"), "text/event-stream");
  const auto events = sse_payloads(r.body);
  ASSERT_GE(events.size(), 3u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events.front())["choices"][0]["delta"]["role"], "assistant");
  const json last = json::parse(events[events.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["usage"]["completion_tokens"], 6);
}

TEST_F(ServerApi, StopStringCutsTheReplyAndFinishesWithStop) {
  const std::string base = R"({"prompt":"The ferry","max_tokens":40,"temperature":0)";
  const HttpResponse full = post("/v1/completions", base + "}");
  ASSERT_EQ(full.status, 200) << full.body;
  const std::string text = full.json()["choices"][0]["text"];
  // A stop string taken from the middle of the greedy reply (ASCII, so it is valid UTF-8).
  size_t at = text.size() / 2;
  while (at + 2 < text.size() && !(isalpha(text[at]) && isalpha(text[at + 1]))) ++at;
  ASSERT_LT(at + 2, text.size()) << text;
  const std::string stop = text.substr(at, 2);
  const HttpResponse cut = post("/v1/completions", base + R"(,"stop":[")" + stop + "\"]}");
  ASSERT_EQ(cut.status, 200) << cut.body;
  EXPECT_EQ(cut.json()["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut.json()["choices"][0]["finish_reason"], "stop");
}

// OpenAI `logprobs`: chat (logprobs + top_logprobs) and completions (logprobs N), buffered and streamed.
// One entry per generated token (end tokens excluded), greedy: the token is its own most likely
// alternative; streamed chunks carry the same entries as the buffered reply, in order.
TEST_F(ServerApi, LogprobsGiveEachTokenItsLogProbabilityAndTheMostLikelyOthers) {
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":6,"temperature":0,"logprobs":true,"top_logprobs":3)";
  const HttpResponse r = post("/v1/chat/completions", chat + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = r.json()["choices"][0];
  const json content = c["logprobs"]["content"];
  ASSERT_EQ(content.size(), r.json()["usage"]["completion_tokens"].get<size_t>()) << r.body;
  for (const json& e : content) {
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_EQ(e["top_logprobs"].size(), 3u) << e;
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]) << "greedy: the most likely token";
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["logprob"]);
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][2]["logprob"].get<double>());
    std::string bytes;
    for (const auto& b : e["bytes"]) bytes += char(b.get<int>());
    // `bytes` are exact; `token` is the same text, or (part of a UTF-8 sequence) U+FFFD for the rest.
    if (e["token"].get<std::string>().find("\xEF\xBF\xBD") == std::string::npos) EXPECT_EQ(bytes, e["token"].get<std::string>());
    EXPECT_FALSE(bytes.empty());
  }
  const HttpResponse s = post("/v1/chat/completions", chat + R"(,"stream":true})");
  ASSERT_EQ(s.status, 200) << s.body;
  json streamed = json::array();
  for (const auto& ev : sse_payloads(s.body)) {
    if (ev == "[DONE]") continue;
    const json j = json::parse(ev);
    if (j["choices"].empty() || j["choices"][0]["logprobs"].is_null()) continue;
    for (const auto& e : j["choices"][0]["logprobs"]["content"]) streamed.push_back(e);
  }
  EXPECT_EQ(streamed, content) << "the streamed chunks carry the buffered reply's entries";
  const HttpResponse plain = post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})");
  EXPECT_TRUE(plain.json()["choices"][0]["logprobs"].is_null()) << "not asked for: null";
  const HttpResponse t = post("/v1/completions", R"({"prompt":"The ferry","max_tokens":5,"temperature":0,"logprobs":2})");
  ASSERT_EQ(t.status, 200) << t.body;
  const json lp = t.json()["choices"][0]["logprobs"];
  const size_t n = t.json()["usage"]["completion_tokens"];
  ASSERT_EQ(lp["tokens"].size(), n) << t.body;
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u) << lp;
}

TEST_F(ServerApi, MetricsArePrometheusTextWithTheRegistryNames) {
  EXPECT_EQ(http(server_->port(), "GET", "/metrics").status, 401);  // --api-key covers /metrics
  const HttpResponse r = http(server_->port(), "GET", "/metrics", "", kAuth);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  for (const char* name : {"ferry_generated_tokens_total ", "ferry_steady_decode_tokens_per_second ",
                           "ferry_queue_depth ", "ferry_expert_hits_total{tier=\"device\"} ",
                           "ferry_expert_bytes_read_total{tier=\"disk\"} ", "# TYPE ferry_drive_read_bytes_total counter",
                           "ferry_layer_wait_seconds_total ", "ferry_drafter_accepted_total "})
    EXPECT_NE(r.body.find(name), std::string::npos) << name;
}

TEST_F(ServerApi, EventsFeedSendsMetricSnapshots) {
  int fd = connect_to(server_->port());
  ASSERT_GE(fd, 0);
  // EventSource cannot send headers: the dashboard passes the key as ?api_key=.
  ASSERT_TRUE(send_all(fd, request_text("GET", "/events?api_key=test-key", "")));
  std::string buf;
  // Two snapshots: the one sent at once and one from the ticker (100 ms).
  read_until(fd, buf, 5000, [](const std::string& b) {
    size_t n = 0, p = 0;
    while ((p = b.find("data: {", p)) != std::string::npos) ++n, ++p;
    return n >= 2;
  });
  ::close(fd);
  ASSERT_NE(buf.find("text/event-stream"), std::string::npos) << buf;
  const size_t p = buf.find("data: ");
  ASSERT_NE(p, std::string::npos);
  const json snap = json::parse(buf.substr(p + 6, buf.find("\n\n", p) - p - 6));
  EXPECT_TRUE(snap["metrics"].contains("ferry_live_decode_tokens_per_second"));
  EXPECT_TRUE(snap["metrics"]["ferry_expert_hits_total"].contains("tier=host"));
}

TEST_F(ServerApi, WebPageIsServedFromTheBinary) {
  const HttpResponse r = http(server_->port(), "GET", "/");  // open even with --api-key; its fetches send it
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(r.body.find("new EventSource(\"/events\""), std::string::npos);
}

}  // namespace
}  // namespace ferry::test
