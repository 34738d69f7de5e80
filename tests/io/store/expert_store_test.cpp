#include <gtest/gtest.h>

#include <fstream>

#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "tests/io/store/store_test_util.hpp"

namespace ferry {
namespace {

TEST(ExpertFileName, RoundTripsAndRejectsLookalikes) {
  EXPECT_EQ(expert_file_name(92, 895), "L92-E895.bin");
  int l = -1, e = -1;
  EXPECT_TRUE(parse_expert_file_name("L92-E895.bin", l, e));
  EXPECT_EQ(l, 92);
  EXPECT_EQ(e, 895);
  for (const char* bad : {"L01-E2.bin", "L1-E2.bin.tmp", "L1-E2", "l1-e2.bin", "L-1-E2.bin", "L1-E2.binx"})
    EXPECT_FALSE(parse_expert_file_name(bad, l, e)) << bad;
}

TEST(Manifest, WritesAndReadsBackEveryField) {
  const auto dir = test::fresh_dir("m");
  Manifest m;
  m.config_hash = hex64(0x0123456789abcdefULL);
  m.n_layers = 93;
  m.n_experts = 896;
  m.expert_bytes = 17547264;
  m.file_bytes = 17547264;
  m.dirs = {"/nvme0/k31", "/nvme1/k31"};
  m.spine_bytes = 12345;
  m.spine_xxh64 = 42;
  m.experts = {{1, 0, 0xfeedULL, {0, 1}}, {1, 1, 7, {1}}};
  write_manifest(dir / "manifest.json", m);
  for (const auto& e : std::filesystem::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  const Manifest r = read_manifest(dir / "manifest.json");
  EXPECT_EQ(r.config_hash, m.config_hash);
  EXPECT_EQ(r.n_layers, 93);
  EXPECT_EQ(r.expert_bytes, 17547264);
  EXPECT_EQ(r.dirs, m.dirs);
  EXPECT_EQ(r.spine_xxh64, 42u);
  ASSERT_EQ(r.experts.size(), 2u);
  EXPECT_EQ(r.experts[0].xxh64, 0xfeedULL);
  EXPECT_EQ(r.experts[0].dirs, (std::vector<uint16_t>{0, 1}));
  EXPECT_EQ(r.experts[1].dirs, (std::vector<uint16_t>{1}));
}

// Part hashes (xxh64 per 2 MiB, for readers that check parts as they copy them) round-trip; an entry
// may have none (written before them, or resumed by prepare); a wrong count is named.
TEST(Manifest, PartHashesRoundTripAndAWrongCountIsNamed) {
  const auto dir = test::fresh_dir("m-parts");
  Manifest m;
  m.config_hash = hex64(1);
  m.n_layers = 2;
  m.n_experts = 2;
  m.expert_bytes = m.file_bytes = 17547264;
  m.dirs = {"/nvme0/k31"};
  m.part_bytes = int64_t(kPartHashBytes);
  std::vector<uint64_t> parts;
  for (uint64_t i = 0; i < 9; ++i) parts.push_back(0x1111111111111111ULL * (i + 1));  // 17.5 MB / 2 MiB: 9
  m.experts = {{1, 0, 5, {0}, parts}, {1, 1, 7, {0}}};
  write_manifest(dir / "manifest.json", m);
  const Manifest r = read_manifest(dir / "manifest.json");
  EXPECT_EQ(r.part_bytes, int64_t(kPartHashBytes));
  EXPECT_EQ(r.experts[0].part_xxh64, parts);
  EXPECT_TRUE(r.experts[1].part_xxh64.empty());
  m.experts[0].part_xxh64.pop_back();
  write_manifest(dir / "manifest.json", m);
  try {
    read_manifest(dir / "manifest.json");
    FAIL() << "8 part hashes for a 9-part file were accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("experts[0].parts"), std::string::npos) << e.what();
  }
  const std::vector<std::byte> bytes(5000, std::byte{3});
  const auto h = xxh64_parts(bytes.data(), bytes.size(), 4096);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1], xxh64_bytes(bytes.data() + 4096, 904));
}

TEST(Manifest, ADirectoryIndexOutOfRangeIsNamed) {
  const auto dir = test::fresh_dir("m");
  std::ofstream(dir / "manifest.json") << R"({"format":"ferry-experts/1","config_hash":"x","n_layers":2,"n_experts":2,
    "expert_bytes":4096,"file_bytes":4096,"dirs":["/a"],"experts":[{"layer":1,"expert":0,"xxh64":"0000000000000001","dirs":[3]}]})";
  try {
    read_manifest(dir / "manifest.json");
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("experts[0] names directory 3 of 1"), std::string::npos) << e.what();
  }
}

TEST(Usage, K3UsageFileHas92MoeLayersNumberedLikeOurDecoderIndexes) {
  const auto u = load_usage(std::string(FERRY_FIXTURES) + "/k3-expert-usage-2026-09-03.json");
  EXPECT_EQ(u.size(), 72726u);
  int min_layer = 1000, max_layer = -1, max_expert = -1;
  int64_t total = 0;
  for (const auto& [id, count] : u) {
    const int l = int(id >> 32), e = int(id & 0xffffffffu);
    min_layer = std::min(min_layer, l);
    max_layer = std::max(max_layer, l);
    max_expert = std::max(max_expert, e);
    total += count;
  }
  // 93-layer K3: layer 0 is dense (first_k_dense_replace 1), so MoE layers are 1..92 (0-based).
  EXPECT_EQ(min_layer, 1);
  EXPECT_EQ(max_layer, 92);
  EXPECT_EQ(max_expert, 895);
  EXPECT_EQ(total, 1769638);
  EXPECT_EQ(u.at(key_id({57, 81})), 778);
}

TEST(Usage, ABadKeyIsNamed) {
  const auto dir = test::fresh_dir("u");
  std::ofstream(dir / "u.json") << R"({"L1-E2.bin": 3, "layer1": 4})";
  try {
    load_usage(dir / "u.json");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'layer1'"), std::string::npos) << e.what();
  }
}

TEST(Xxh64, FileHashEqualsBufferHash) {
  const auto dir = test::fresh_dir("h");
  std::string data(100000, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 31);
  write_file_atomic(dir / "f", data.data(), data.size());
  int64_t n = 0;
  EXPECT_EQ(xxh64_file(dir / "f", &n), xxh64_bytes(data.data(), data.size()));
  EXPECT_EQ(n, 100000);
  EXPECT_EQ(parse_hex64(hex64(0xabcdef0012345678ULL)), 0xabcdef0012345678ULL);
}

}  // namespace
}  // namespace ferry
