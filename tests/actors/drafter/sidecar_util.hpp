// Starting the real ferry-drafter binary from tests, with its stderr captured in a file.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace ferry::test {

inline std::string drafter_exe() { return std::string(FERRY_BINARY_DIR) + "/apps/ferry-drafter"; }

// These tests start the real sidecar: say so plainly when it was not built.
struct DrafterBuilt : ::testing::Environment {
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(drafter_exe()))
        << drafter_exe() << " is missing: build the ferry-drafter target before ferry_test_drafter";
  }
};
inline ::testing::Environment* const kDrafterBuilt = ::testing::AddGlobalTestEnvironment(new DrafterBuilt);

// A ferry-drafter on one end of a socketpair; `fd` is ours.
struct RawSidecar {
  pid_t pid = -1;
  int fd = -1;
  std::string log_path;

  explicit RawSidecar(std::vector<std::string> args) {
    log_path = (std::filesystem::temp_directory_path() / ("ferry-drafter-test-" + std::to_string(::getpid()) + "-" +
                                                          std::to_string(counter()++) + ".log"))
                   .string();
    int sv[2];
    ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
    const int logfd = ::open(log_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    args.insert(args.begin(), drafter_exe());
    args.insert(args.end(), {"--fd", "3"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    posix_spawn_file_actions_adddup2(&fa, logfd, 2);
    ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    ::close(logfd);
    fd = sv[0];
  }
  ~RawSidecar() {
    if (fd >= 0) ::close(fd);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove(log_path);
  }
  void close_socket() {
    ::close(fd);
    fd = -1;
  }
  // Exit status once it ended (-1 if killed by a signal).
  int wait_exit() {
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::string log() const {
    std::ifstream f(log_path);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

}  // namespace ferry::test
