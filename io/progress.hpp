// A progress bar on stderr for long file jobs (prepare, verify, synth): files, bytes, rate and ETA.
// On a terminal it redraws one line at most ten times a second; when stderr is not a terminal (CI
// logs, pipes) it prints a plain line every few seconds instead, and nothing at all for jobs that end
// before the first interval.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace ferry {

class Progress {
 public:
  struct Options {
    bool enabled = true;
    int tty = -1;               // -1: detect with isatty(fileno(out)); 0/1 force
    double line_interval_s = 5; // non-TTY: seconds between lines
    std::FILE* out = stderr;
  };

  Progress(std::string label, int64_t total_files, int64_t total_bytes);
  Progress(std::string label, int64_t total_files, int64_t total_bytes, Options opt);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Thread-safe; call after each file (or chunk) completes.
  void add(int64_t files, int64_t bytes);
  // Files that were already done (a resumed run): counted, but not in the rate.
  void skip(int64_t files, int64_t bytes);
  // Prints the final line (once). Called by the destructor if not called before.
  void finish();

  int64_t files() const { return files_; }
  int64_t bytes() const { return bytes_; }
  // The status line as it would be printed now (for tests).
  std::string line() const;

 private:
  using clock = std::chrono::steady_clock;
  void maybe_print(bool force);

  std::string label_;
  int64_t total_files_, total_bytes_;
  Options opt_;
  bool tty_ = false;
  int64_t files_ = 0, bytes_ = 0, skipped_bytes_ = 0;
  clock::time_point start_, last_print_;
  bool finished_ = false;
  mutable std::mutex mu_;
};

}  // namespace ferry
