#include <gtest/gtest.h>

#include <fstream>

#include "io/store/expert_store.hpp"
#include "tests/io/store/store_test_util.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;

// A hand-made store: 2 layers x 4 experts on /a, experts of layer 1 replicated on /b.
struct Store {
  fs::path root, a, b;
  Manifest m;
};

Store make_store(const fs::path& root) {
  Store s{root, root / "a", root / "b", {}};
  fs::create_directories(s.a);
  fs::create_directories(s.b);
  s.m.config_hash = hex64(1);
  s.m.n_layers = 3;
  s.m.n_experts = 4;
  s.m.expert_bytes = 5000;
  s.m.file_bytes = 8192;
  s.m.dirs = {s.a.string(), s.b.string()};
  std::string spine = "GGUF-spine-bytes";
  write_file_atomic(root / "spine.gguf", spine.data(), spine.size());
  s.m.spine_bytes = int64_t(spine.size());
  s.m.spine_xxh64 = xxh64_bytes(spine.data(), spine.size());
  for (int l = 1; l <= 2; ++l)
    for (int e = 0; e < 4; ++e) {
      std::string bytes(8192, '\0');
      for (int i = 0; i < 5000; ++i) bytes[size_t(i)] = char(l * 31 + e * 7 + i);
      ExpertEntry x{l, e, xxh64_bytes(bytes.data(), bytes.size()), {0}};
      write_file_atomic(s.a / expert_file_name(l, e), bytes.data(), bytes.size());
      if (l == 1) {
        write_file_atomic(s.b / expert_file_name(l, e), bytes.data(), bytes.size());
        x.dirs.push_back(1);
      }
      s.m.experts.push_back(x);
    }
  write_manifest(root / "manifest.json", s.m);
  return s;
}

void flip_byte(const fs::path& p, long at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x40);
  f.seekp(at);
  f.write(&c, 1);
}

TEST(Verify, CleanStorePassesFullCheck) {
  const auto s = make_store(test::fresh_dir("s"));
  const auto r = verify_store(s.root, {VerifyMode::full, 0, 0}, nullptr);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.files_hashed, 13);  // 12 expert copies + spine
}

TEST(Verify, CorruptedExpertIsNamedWithItsGoodCopy) {
  const auto s = make_store(test::fresh_dir("s"));
  const auto bad = s.a / "L1-E2.bin";
  flip_byte(bad, 1234);
  const auto sizes_only = verify_store(s.root, {VerifyMode::sizes, 0, 0}, nullptr);
  EXPECT_TRUE(sizes_only.ok()) << "a flipped byte keeps the size";
  const auto r = verify_store(s.root, {VerifyMode::full, 0, 0}, nullptr);
  ASSERT_EQ(r.bad.size(), 1u);
  EXPECT_EQ(r.bad[0].file, bad.string());
  EXPECT_NE(r.bad[0].problem.find("xxh64"), std::string::npos);
  EXPECT_EQ(r.bad[0].good_copy, (s.b / "L1-E2.bin").string());
}

TEST(Verify, TruncatedAndMissingCopiesAreFoundBySizeCheck) {
  const auto s = make_store(test::fresh_dir("s"));
  fs::resize_file(s.a / "L2-E3.bin", 4096);
  fs::remove(s.b / "L1-E0.bin");
  const auto r = verify_store(s.root, {VerifyMode::sizes, 0, 0}, nullptr);
  ASSERT_EQ(r.bad.size(), 2u);
  EXPECT_EQ(r.bad[0].file, (s.b / "L1-E0.bin").string());
  EXPECT_EQ(r.bad[0].problem, "missing");
  EXPECT_EQ(r.bad[0].good_copy, (s.a / "L1-E0.bin").string());
  EXPECT_EQ(r.bad[1].file, (s.a / "L2-E3.bin").string());
  EXPECT_NE(r.bad[1].problem.find("size 4096"), std::string::npos);
  EXPECT_EQ(r.bad[1].good_copy, "") << "layer 2 has no replica";
}

TEST(Verify, SampleHashesExactlyNExperts) {
  const auto s = make_store(test::fresh_dir("s"));
  const auto r = verify_store(s.root, {VerifyMode::sample, 3, 7}, nullptr);
  EXPECT_TRUE(r.ok());
  EXPECT_GE(r.files_hashed, 3);
  EXPECT_LE(r.files_hashed, 6);  // an expert with a replica hashes both copies
}

}  // namespace
}  // namespace ferry
