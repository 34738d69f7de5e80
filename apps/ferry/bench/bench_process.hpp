// One child process for `ferry bench`: spawned fresh (no state carries from one run to the next), its
// stdout and stderr captured to files, its wall time measured around it by the parent.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ferry::bench {

struct ProcessResult {
  int exit_code = -1;   // valid when signal == 0
  int signal = 0;       // the signal that ended it, 0 if it exited
  bool timed_out = false;
  double wall_s = 0;    // spawn to reap, measured by the parent
  std::string out, err; // what it wrote (also left in the files)

  bool ok() const { return signal == 0 && exit_code == 0 && !timed_out; }
  std::string describe() const;  // "exit 1", "killed by signal 9", "timed out after 30 s"
};

// Runs `exe args...` with stdout -> out_file and stderr -> err_file; kills it after timeout_s (0 = no
// limit). Throws ferry::Error when the process cannot be started.
ProcessResult run_process(const std::filesystem::path& exe, const std::vector<std::string>& args,
                          const std::filesystem::path& out_file, const std::filesystem::path& err_file,
                          double timeout_s = 0);

// This process's own executable (/proc/self/exe), so `ferry bench` runs the very binary it is.
std::filesystem::path self_exe();

// The shell-quoted command line, for logs and the results file.
std::string command_line(const std::filesystem::path& exe, const std::vector<std::string>& args);

}  // namespace ferry::bench
