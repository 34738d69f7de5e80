// `ferry verify`: the manifest against the files on disk.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <unordered_set>

#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/progress.hpp"

namespace fs = std::filesystem;

namespace ferry {

namespace {

// Problem with one copy, or "" when it is good. Hashes only when asked to.
std::string check_copy(const fs::path& p, const Manifest& m, uint64_t want, bool hash, VerifyReport& r) {
  ++r.files_checked;
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) return "missing";
  if (int64_t(size) != m.file_bytes) return fmt::format("size {} != manifest file_bytes {}", size, m.file_bytes);
  if (!hash) return "";
  int64_t n = 0;
  bool direct = false;
  const uint64_t h = xxh64_file(p, &n, true, &direct);
  ++r.files_hashed;
  r.hashed_direct += direct;
  r.bytes_hashed += n;
  if (h != want) return fmt::format("xxh64 {} != manifest {}", hex64(h), hex64(want));
  return "";
}

void check_expert(const ExpertEntry& e, const Manifest& m, bool hash, VerifyReport& r) {
  std::vector<std::pair<std::string, std::string>> bad;  // path, problem
  std::string good;
  for (auto d : e.dirs) {
    const fs::path p = fs::path(m.dirs[d]) / expert_file_name(e.layer, e.expert);
    std::string problem = check_copy(p, m, e.xxh64, hash, r);
    if (problem.empty()) {
      if (good.empty()) good = p.string();
    } else {
      bad.emplace_back(p.string(), std::move(problem));
    }
  }
  for (auto& [p, problem] : bad) r.bad.push_back({p, problem, good});
}

std::vector<char> pick_hashed(const Manifest& m, const VerifyOptions& opt) {
  std::vector<char> hashed(m.experts.size(), opt.mode == VerifyMode::full ? 1 : 0);
  if (opt.mode != VerifyMode::sample) return hashed;
  std::vector<size_t> idx(m.experts.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  std::mt19937_64 rng(opt.seed);
  std::shuffle(idx.begin(), idx.end(), rng);
  const size_t n = size_t(std::clamp<int64_t>(opt.sample, 0, int64_t(idx.size())));
  for (size_t i = 0; i < n; ++i) hashed[idx[i]] = 1;
  return hashed;
}

void check_duplicates(const Manifest& m, const fs::path& file) {
  std::unordered_set<uint64_t> seen;
  for (const auto& e : m.experts)
    if (!seen.insert(key_id({e.layer, e.expert})).second)
      throw FormatError(fmt::format("{}: {} is listed twice", file.string(), expert_file_name(e.layer, e.expert)));
}

}  // namespace

VerifyReport verify_store(const fs::path& model_dir, const VerifyOptions& opt, Progress* progress) {
  const fs::path mf = model_dir / "manifest.json";
  const Manifest m = read_manifest(mf);
  check_duplicates(m, mf);
  VerifyReport r;
  const auto hashed = pick_hashed(m, opt);
  const fs::path spine = model_dir / m.spine_file;
  {
    std::error_code ec;
    const auto sz = fs::file_size(spine, ec);
    if (ec) r.bad.push_back({spine.string(), "missing", ""});
    else if (m.spine_bytes > 0 && int64_t(sz) != m.spine_bytes)
      r.bad.push_back({spine.string(), fmt::format("size {} != manifest {}", sz, m.spine_bytes), ""});
    else if (opt.mode == VerifyMode::full && m.spine_bytes > 0) {
      bool direct = false;
      const uint64_t h = xxh64_file(spine, nullptr, true, &direct);
      ++r.files_hashed;
      r.hashed_direct += direct;
      r.bytes_hashed += int64_t(sz);
      if (h != m.spine_xxh64)
        r.bad.push_back({spine.string(), fmt::format("xxh64 {} != manifest {}", hex64(h), hex64(m.spine_xxh64)), ""});
    }
    ++r.files_checked;
  }
  for (size_t i = 0; i < m.experts.size(); ++i) {
    check_expert(m.experts[i], m, hashed[i] != 0, r);
    if (progress) progress->add(1, hashed[i] ? m.file_bytes * int64_t(m.experts[i].dirs.size()) : 0);
  }
  return r;
}

}  // namespace ferry
