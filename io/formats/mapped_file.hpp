// MappedFile: a whole file mapped read-only (mmap), unmapped on destruction. The tensor sources hand
// out pointers into it, so it lives as long as the source that owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace ferry {

class MappedFile {
 public:
  // Throws FormatError naming the file when it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;
  const uint8_t* data_ = nullptr;  // nullptr for an empty file (mmap of 0 bytes is invalid)
  size_t size_ = 0;
  std::string path_;
};

}  // namespace ferry
