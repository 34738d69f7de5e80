#include "io/formats/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/regular_file.hpp"

namespace ferry {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path.string()) {
  int fd = open_regular_file(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(fmt::format("{}: cannot open: {}", path_, open_error_text(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw FormatError(fmt::format("{}: cannot stat: {}", path_, std::strerror(errno)));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw FormatError(fmt::format("{}: mmap of {} bytes failed: {}", path_, size_, std::strerror(err)));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() noexcept {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

}  // namespace ferry
