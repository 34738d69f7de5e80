#include "apps/ferry/bench/bench_process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "io/errors.hpp"

extern char** environ;

namespace ferry::bench {

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Kills the child if it is still running after timeout_s; stopped early by the destructor once reaped.
class Watchdog {
 public:
  Watchdog(pid_t pid, double timeout_s) {
    if (timeout_s <= 0) return;
    thread_ = std::thread([this, pid, timeout_s] {
      std::unique_lock lk(m_);
      if (!cv_.wait_for(lk, std::chrono::duration<double>(timeout_s), [this] { return done_; })) {
        fired_ = true;
        ::kill(pid, SIGKILL);
      }
    });
  }
  ~Watchdog() { stop(); }
  void stop() {
    {
      std::lock_guard lk(m_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  bool fired() const { return fired_; }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false, fired_ = false;
  std::thread thread_;
};

}  // namespace

std::string ProcessResult::describe() const {
  std::ostringstream s;
  if (timed_out)
    s << "timed out after " << wall_s << " s";
  else if (signal)
    s << "killed by signal " << signal << " (" << ::strsignal(signal) << ")";
  else
    s << "exit " << exit_code;
  return s.str();
}

ProcessResult run_process(const fs::path& exe, const std::vector<std::string>& args, const fs::path& out_file,
                          const fs::path& err_file, double timeout_s) {
  std::vector<std::string> storage;
  storage.push_back(exe.string());
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw Error("cannot start " + exe.string() + ": " + std::strerror(rc));

  ProcessResult r;
  int status = 0;
  {
    Watchdog dog(pid, timeout_s);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    dog.stop();
    r.timed_out = dog.fired();
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = slurp(out_file);
  r.err = slurp(err_file);
  return r;
}

fs::path self_exe() { return fs::read_symlink("/proc/self/exe"); }

std::string command_line(const fs::path& exe, const std::vector<std::string>& args) {
  auto quote = [](const std::string& s) {
    if (!s.empty() && s.find_first_of(" \t\n'\"\\$`*?;&|<>(){}") == std::string::npos) return s;
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string line = quote(exe.string());
  for (const auto& a : args) {
    line += ' ';
    line += quote(a);
  }
  return line;
}

}  // namespace ferry::bench
