#include "io/synth/synth_expert_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/formats/ggml_blocks.hpp"
#include "io/synth/synth_layout.hpp"
#include "io/synth/synth_values.hpp"

namespace ferry {

namespace {

constexpr size_t kDirectAlign = 4096;

[[noreturn]] void fail(const std::filesystem::path& p, const char* what, int err) {
  throw FormatError(fmt::format("{}: {} failed: {}", p.string(), what, std::strerror(err)));
}

// Writes all of data to fd at offset 0; returns 0 or the errno of the failed write.
int write_all(int fd, const uint8_t* data, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::pwrite(fd, data + done, n - done, off_t(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    done += size_t(w);
  }
  return 0;
}

}  // namespace

void AlignedBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

AlignedBuffer::AlignedBuffer(size_t n) : n_(n) {
  void* p = nullptr;
  if (::posix_memalign(&p, kDirectAlign, std::max(n, kDirectAlign)) != 0) throw std::bad_alloc();
  std::memset(p, 0, n);
  p_.reset(static_cast<uint8_t*>(p));
}

void build_synth_expert(const ModelConfig& c, uint64_t seed, int layer, int expert, uint8_t* buf) {
  uint8_t* at = buf;
  for (ExpertMatrix m : {ExpertMatrix::gate, ExpertMatrix::up, ExpertMatrix::down}) {
    const auto [rows, cols] = expert_matrix_shape(c, m);
    synth_expert_blocks(rows, cols, seed, expert_matrix_name(c, layer, expert, m), reinterpret_cast<BlockMxfp4*>(at));
    at += rows * (cols / kQK) * int64_t(sizeof(BlockMxfp4));
  }
}

bool write_file_direct(const std::filesystem::path& path, const uint8_t* data, size_t n) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  const bool aligned = reinterpret_cast<uintptr_t>(data) % kDirectAlign == 0 && n % kDirectAlign == 0;
  bool direct = aligned;
  int fd = direct ? ::open(tmp.c_str(), flags | O_DIRECT, 0644) : -1;
  if (fd < 0) {  // tmpfs and some network filesystems refuse O_DIRECT with EINVAL
    direct = false;
    fd = ::open(tmp.c_str(), flags, 0644);
  }
  if (fd < 0) fail(tmp, "create", errno);
  int err = write_all(fd, data, n);
  if (err == EINVAL && direct) {  // the device's logical block is larger than our alignment
    direct = false;
    ::close(fd);
    fd = ::open(tmp.c_str(), flags, 0644);
    if (fd < 0) fail(tmp, "create", errno);
    err = write_all(fd, data, n);
  }
  if (err == 0 && ::fdatasync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    fail(tmp, "write", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(path, "rename", errno);
  return direct;
}

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(dir, "open", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail(dir, "fsync", err);
}

}  // namespace ferry
