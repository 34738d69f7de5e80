#include "io/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "io/errors.hpp"

namespace ferry {

int open_regular_file(const char* path, int flags) {
  const int fd = ::open(path, flags | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = kNotRegularFile;
    return -1;
  }
  if (!(flags & O_NONBLOCK)) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string open_error_text(int err) {
  if (err == kNotRegularFile) return "not a regular file (a FIFO, directory or device)";
  return std::strerror(err);
}

void require_regular_file(const std::filesystem::path& path, const char* what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return;  // the caller's open reports a missing file its own way
  if (!std::filesystem::is_regular_file(st))
    throw FormatError(fmt::format("{}: {} is not a regular file (a FIFO, directory or device)", path.string(), what));
}

}  // namespace ferry
