// ferry-drafter: the drafter sidecar. Serves the drafter wire protocol (messages/drafter.proto) on an
// inherited socket (--fd, how ferry's drafter bridge starts it) or on a Unix socket path (--listen,
// one client at a time). The fault flags exist for tests and `ferry faults`.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>

#include "actors/drafter/sidecar/drafter_core.hpp"
#include "actors/drafter/sidecar/drafter_server.hpp"

namespace {

int listen_on(const std::string& path) {
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) throw std::runtime_error("--listen path is too long: " + path);
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  ::unlink(path.c_str());
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(s, 4) != 0)
    throw std::runtime_error("cannot listen on " + path + ": " + std::strerror(errno));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-drafter: proposes tokens for ferry's speculative decoding"};
  std::string spec, listen_path;
  int fd = -1, threads = 1;
  ferry::ServerFaults faults;
  bool exit_at_start = false;
  app.add_option("--drafter", spec, "ngram[:N] | replay:FILE[,opts] | qwen3:DIR")->required();
  app.add_option("--fd", fd, "Serve the connected socket inherited as this descriptor");
  app.add_option("--listen", listen_path, "Serve on this Unix socket path");
  app.add_option("-t,--threads", threads, "CPU threads of a checkpoint drafter")->capture_default_str();
  app.add_option("--fault-garbage-every", faults.garbage_every, "Answer every Nth request with garbage");
  app.add_option("--fault-exit-after", faults.exit_after, "Crash on the Nth request");
  app.add_option("--fault-hang-after", faults.hang_after, "Stop answering from the Nth request on");
  app.add_option("--protocol-version", faults.protocol_version, "Claim another protocol version (tests)");
  app.add_flag("--fault-exit-at-start", exit_at_start, "Exit before the handshake (an unstartable sidecar)");
  CLI11_PARSE(app, argc, argv);
  // stderr: ferry's stdout (generated text, --json) is ours too when ferry starts us.
  spdlog::set_default_logger(spdlog::stderr_color_mt("ferry-drafter"));
  spdlog::set_pattern("[pid %P] %l: %v");
  if ((fd < 0) == listen_path.empty()) {
    spdlog::error("give exactly one of --fd or --listen");
    return 2;
  }
  if (fd >= 0) ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the ferry that started us
  if (exit_at_start) {
    spdlog::warn("fault injection: exiting before the handshake");
    return 3;
  }
  std::unique_ptr<ferry::Drafter> drafter;
  try {
    drafter = ferry::make_drafter(spec, threads);
  } catch (const std::exception& e) {
    spdlog::error("cannot load drafter {}: {}", spec, e.what());
    return 2;
  }
  if (fd >= 0) return ferry::serve_drafter(fd, *drafter, faults);
  try {
    const int s = listen_on(listen_path);
    spdlog::info("serving {} on {}", drafter->name(), listen_path);
    for (;;) {
      const int c = ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ferry::serve_drafter(c, *drafter, faults);
      ::close(c);
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
}
