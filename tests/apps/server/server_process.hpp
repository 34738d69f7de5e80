// Test support for ferry-server: start the real binary on 127.0.0.1 with a free port, talk raw HTTP/1.1
// over loopback sockets, run the Node clients in tests/js.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ferry::test {

namespace fs = std::filesystem;
inline const fs::path kServerBinary = fs::path(FERRY_BINARY_DIR) / "apps/ferry-server/ferry-server";
inline const fs::path kTinyModel = fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf";
inline const fs::path kJsDir = fs::path(FERRY_SOURCE_DIR) / "tests/js";

// A port the kernel just handed out and released (a small race with other processes, retried by start()).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Connected loopback socket or -1.
inline int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

inline bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

struct HttpResponse {
  int status = 0;        // 0: no (complete) response
  std::string raw_head;  // status line + headers
  std::string body;      // de-chunked
  std::string header(const std::string& name) const;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

inline std::string HttpResponse::header(const std::string& name) const {
  std::string lower_head = raw_head, key = name + ":";
  for (auto& ch : lower_head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  size_t p = lower_head.find("\r\n" + key);
  if (p == std::string::npos) return "";
  p += 2 + key.size();
  size_t e = raw_head.find("\r\n", p);
  std::string v = raw_head.substr(p, e - p);
  while (!v.empty() && v.front() == ' ') v.erase(0, 1);
  return v;
}

// Reads until `done(buf)` or close or timeout; false on timeout.
template <class Done>
bool read_until(int fd, std::string& buf, int ms, Done done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  char tmp[16384];
  while (!done(buf)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) return true;  // closed
    buf.append(tmp, static_cast<size_t>(n));
  }
  return true;
}

// Decodes a chunked body; false while incomplete.
inline bool dechunk(const std::string& in, std::string& out) {
  out.clear();
  size_t p = 0;
  for (;;) {
    size_t e = in.find("\r\n", p);
    if (e == std::string::npos) return false;
    const size_t n = std::stoul(in.substr(p, e - p), nullptr, 16);
    if (n == 0) return in.find("\r\n", e + 2) != std::string::npos;
    if (in.size() < e + 2 + n + 2) return false;
    out.append(in, e + 2, n);
    p = e + 2 + n + 2;
  }
}

// Reads one response from fd (Content-Length or chunked body, or until close). Times out after `ms`.
// status stays 0 when no complete, well-formed response arrived.
inline HttpResponse read_response(int fd, int ms = 10000) {
  HttpResponse r;
  std::string buf;
  read_until(fd, buf, ms, [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; });
  const size_t head_end = buf.find("\r\n\r\n");
  if (head_end == std::string::npos || buf.rfind("HTTP/1.1 ", 0) != 0) return r;
  r.raw_head = buf.substr(0, head_end);
  std::string rest = buf.substr(head_end + 4);
  const std::string cl = r.header("Content-Length");
  bool complete = false;
  if (!cl.empty()) {
    const size_t n = std::stoul(cl);
    complete = read_until(fd, rest, ms, [n](const std::string& b) { return b.size() >= n; }) && rest.size() >= n;
    r.body = rest.substr(0, n);
  } else if (r.header("Transfer-Encoding") == "chunked") {
    complete = read_until(fd, rest, ms, [&](const std::string& b) { return dechunk(b, r.body); }) &&
               dechunk(rest, r.body);
  }
  if (complete) r.status = std::stoi(r.raw_head.substr(9, 3));
  return r;
}

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body,
                                const std::string& extra_headers = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers;
  if (method == "POST") r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

// One request on a fresh connection.
inline HttpResponse http(int port, const std::string& method, const std::string& path, const std::string& body = "",
                         const std::string& extra_headers = "", int ms = 30000) {
  int fd = connect_to(port);
  if (fd < 0) return {};
  HttpResponse r;
  if (send_all(fd, request_text(method, path, body, extra_headers))) r = read_response(fd, ms);
  ::close(fd);
  return r;
}

// The "data:" payloads of an SSE body, [DONE] included.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t p = 0;
  while ((p = body.find("data: ", p)) != std::string::npos) {
    const size_t e = body.find("\n\n", p);
    if (e == std::string::npos) break;
    out.push_back(body.substr(p + 6, e - p - 6));
    p = e + 2;
  }
  return out;
}

class ServerProcess {
 public:
  // Starts ferry-server on `model` (the tiny fixture by default) with `args` added; waits until /health
  // answers.
  explicit ServerProcess(std::vector<std::string> args, const fs::path& model = kTinyModel);
  // The server's log is kept only when the test failed (its path is in the failure message via log()).
  ~ServerProcess() {
    stop();
    if (!::testing::Test::HasFailure() && !log_.empty()) {
      std::error_code ec;
      fs::remove(log_, ec);
    }
  }
  int port() const { return port_; }
  bool alive();
  int stop();  // SIGTERM, then SIGKILL after 10 s; returns the exit status (-1 if killed or not running)
  std::string log() const;
  double metric(const std::string& name);  // a value from /metrics (unlabelled series)

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  fs::path log_;
};

// Runs `node SCRIPT ARGS` in tests/js; returns the exit status, output (stdout + stderr) in `out`.
inline int run_node(const std::string& script_and_args, std::string& out) {
  if (!fs::exists(kJsDir / "node_modules")) {
    out = (kJsDir / "node_modules").string() + " is missing: run scripts/install-deps.sh (npm install in tests/js)";
    return -1;
  }
  const std::string cmd = "cd '" + kJsDir.string() + "' && node " + script_and_args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = ::pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

inline ServerProcess::ServerProcess(std::vector<std::string> args, const fs::path& model) {
  for (int attempt = 0; attempt < 3 && pid_ < 0; ++attempt) {
    port_ = free_port();
    log_ = fs::path(FERRY_BINARY_DIR) / ("ferry-server-test-" + std::to_string(port_) + ".log");
    std::vector<std::string> argv_s = {kServerBinary.string(), "-m", model.string(), "--port",
                                       std::to_string(port_), "-t", "1"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    pid_ = pid;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (pid_ > 0 && std::chrono::steady_clock::now() < end) {
      if (!alive()) break;  // e.g. the port was taken meanwhile: try another
      if (http(port_, "GET", "/health").status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop();
  }
  ADD_FAILURE() << "ferry-server did not start: " << log();
}

inline bool ServerProcess::alive() {
  if (pid_ <= 0) return false;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

inline int ServerProcess::stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int st = 0;
  for (int i = 0; i < 1000; ++i) {
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
  return -1;
}

inline std::string ServerProcess::log() const {
  FILE* f = std::fopen(log_.c_str(), "r");
  if (!f) return "(no log)";
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

inline double ServerProcess::metric(const std::string& name) {
  const HttpResponse r = http(port_, "GET", "/metrics");
  const size_t p = r.body.find("\n" + name + " ");
  return p == std::string::npos ? -1.0 : std::stod(r.body.substr(p + name.size() + 2));
}

}  // namespace ferry::test
