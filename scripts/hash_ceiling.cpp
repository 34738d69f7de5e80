// The CPU ceiling of verified reads from memory-backed storage (issue 16): N threads pread 2 MiB parts
// of the expert files into private buffers, with and without xxh64 of each part, as the pread workers
// do, and with XXH3 (vectorised) instead. Prints GB/s per thread count. Built by scripts/gpu-bundle.sh (static), run by the GPU scripts:
//   hash-ceiling DIR... (every regular file under the directories, read once per pass)
#include <fcntl.h>
#include <unistd.h>
#define XXH_INLINE_ALL  // XXH3 with the vector unit the build targets (gpu-bundle.sh: -march=x86-64-v3, AVX2)
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  struct Part { int fd; off_t off; size_t len; };
  constexpr size_t kPart = 2u << 20;
  std::vector<Part> parts;
  size_t total = 0;
  for (int i = 1; i < argc; ++i)
    for (auto& e : std::filesystem::recursive_directory_iterator(argv[i])) {
      if (!e.is_regular_file()) continue;
      const int fd = ::open(e.path().c_str(), O_RDONLY);
      const size_t n = e.file_size();
      for (size_t o = 0; o < n; o += kPart) parts.push_back({fd, off_t(o), std::min(kPart, n - o)});
      total += n;
    }
  std::printf("%zu parts, %.1f GB\n", parts.size(), total / 1e9);
  const char* names[] = {"pread", "pread + xxh64", "pread + xxh3"};
  for (int mode = 0; mode < 3; ++mode)
    for (unsigned t : {4u, 8u, 12u, 16u}) {
      std::atomic<size_t> next{0};
      std::atomic<uint64_t> sink{0};
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> th;
      for (unsigned i = 0; i < t; ++i)
        th.emplace_back([&] {
          char* buf = static_cast<char*>(std::aligned_alloc(4096, kPart));
          uint64_t h = 0;
          for (size_t j; (j = next++) < parts.size();) {
            const Part& p = parts[j];
            if (::pread(p.fd, buf, p.len, p.off) != ssize_t(p.len)) std::abort();
            if (mode == 1) h ^= XXH64(buf, p.len, 0);
            if (mode == 2) h ^= XXH3_64bits(buf, p.len);
          }
          sink ^= h;
          std::free(buf);
        });
      for (auto& x : th) x.join();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%-16s %2u threads: %6.1f GB/s\n", names[mode], t, total / s / 1e9);
    }
}
