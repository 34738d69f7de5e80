#include "io/progress.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "io/store/sizing.hpp"

namespace ferry {

Progress::Progress(std::string label, int64_t total_files, int64_t total_bytes)
    : Progress(std::move(label), total_files, total_bytes, Options{}) {}

Progress::Progress(std::string label, int64_t total_files, int64_t total_bytes, Options opt)
    : label_(std::move(label)), total_files_(total_files), total_bytes_(total_bytes), opt_(opt) {
  tty_ = opt_.tty >= 0 ? opt_.tty == 1 : ::isatty(::fileno(opt_.out)) == 1;
  start_ = last_print_ = clock::now();
}

Progress::~Progress() { finish(); }

void Progress::add(int64_t files, int64_t bytes) {
  std::lock_guard lock(mu_);
  files_ += files;
  bytes_ += bytes;
  maybe_print(false);
}

void Progress::skip(int64_t files, int64_t bytes) {
  std::lock_guard lock(mu_);
  files_ += files;
  bytes_ += bytes;
  skipped_bytes_ += bytes;
  maybe_print(false);
}

namespace {

std::string hms(double s) {
  if (!(s >= 0) || s > 360000) return "--:--";
  const int64_t t = int64_t(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{:02}:{:02}", t / 60, t % 60);
}

}  // namespace

std::string Progress::line() const {
  const double el = std::chrono::duration<double>(clock::now() - start_).count();
  const double done = double(bytes_ - skipped_bytes_);
  const double rate = el > 0 ? done / el : 0;
  const double left = double(total_bytes_ - bytes_);
  const double frac = total_bytes_ > 0 ? double(bytes_) / double(total_bytes_) : total_files_ > 0 ? double(files_) / double(total_files_) : 1;
  constexpr int kWidth = 24;
  const int fill = std::clamp(int(frac * kWidth + 0.5), 0, kWidth);
  return fmt::format("{} [{}{}] {:3.0f}% {}/{} files {}/{} {}/s ETA {}", label_, std::string(size_t(fill), '#'),
                     std::string(size_t(kWidth - fill), '.'), frac * 100, files_, total_files_, format_bytes(bytes_),
                     format_bytes(total_bytes_), format_bytes(int64_t(rate)), rate > 0 ? hms(left / rate) : "--:--");
}

void Progress::maybe_print(bool force) {
  if (!opt_.enabled) return;
  const auto now = clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (!force && since < (tty_ ? 0.1 : opt_.line_interval_s)) return;
  last_print_ = now;
  if (tty_) fmt::print(opt_.out, "\r\033[K{}", line());
  else fmt::print(opt_.out, "{}\n", line());
  std::fflush(opt_.out);
}

void Progress::finish() {
  std::lock_guard lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (!opt_.enabled) return;
  const double el = std::chrono::duration<double>(clock::now() - start_).count();
  // Quiet for short non-TTY jobs: nothing was printed and the caller reports the result itself.
  if (!tty_ && el < opt_.line_interval_s) return;
  maybe_print(true);
  if (tty_) std::fputc('\n', opt_.out);
  std::fflush(opt_.out);
}

}  // namespace ferry
