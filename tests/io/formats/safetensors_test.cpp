// safetensors: every fixture reads (sharded and not), malformed files fail naming the file, and the
// streaming writer round-trips through the reader.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/formats/checkpoint.hpp"
#include "io/errors.hpp"
#include "tests/io/temp_dir.hpp"
#include "io/formats/safetensors.hpp"

namespace fs = std::filesystem;
using namespace ferry;

namespace {
const fs::path kFix = FERRY_FIXTURES;

using ferry::test::temp_dir;

// A raw safetensors file: u64 header length, header text, data bytes.
fs::path write_raw(const fs::path& p, const std::string& header, size_t data_bytes, int64_t claimed_len = -1) {
  std::ofstream o(p, std::ios::binary);
  uint64_t n = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : header.size();
  o.write(reinterpret_cast<const char*>(&n), 8);
  o << header;
  std::string data(data_bytes, '\x11');
  o << data;
  return p;
}

void expect_format_error(const fs::path& p, std::initializer_list<const char*> needles) {
  try {
    SafetensorsFile f(p);
    FAIL() << "no FormatError for " << p;
  } catch (const FormatError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    for (const char* n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

std::set<std::string> reference_names(const char* fixture) {
  std::ifstream in(kFix / fixture / "reference.json");
  auto j = nlohmann::json::parse(in);
  std::set<std::string> out;
  for (auto& n : j["tensor_names"]) out.insert(n.get<std::string>());
  return out;
}
}  // namespace

TEST(Safetensors, EveryTransformersFixtureReadsWithTheReferenceTensorNames) {
  for (const char* fx : {"kimi_linear-a", "deepseek_v3-a", "deepseek_v32-a", "qwen3-a"}) {
    SCOPED_TRACE(fx);
    auto src = open_safetensors_checkpoint(kFix / fx);
    auto names = src->names();
    std::set<std::string> got(names.begin(), names.end());
    auto want = reference_names(fx);
    // reference.json lists module names; compressed experts are stored as .weight_packed/.weight_scale.
    for (const auto& n : want) {
      bool ok = got.count(n) || (got.count(n.substr(0, n.rfind('.')) + ".weight_packed") && n.ends_with(".weight"));
      EXPECT_TRUE(ok) << n;
    }
    for (const auto& n : names) {
      auto v = src->get(n);
      EXPECT_EQ(v.nbytes, static_cast<size_t>(v.numel()) * dtype_size(v.dtype)) << n;
      EXPECT_NE(v.data, nullptr);
    }
  }
}

TEST(Safetensors, TinyK3ShardedCheckpointReadsEveryIndexedTensor) {
  auto src = open_safetensors_checkpoint(kFix / "k3-tiny-a/hf");
  std::ifstream in(kFix / "k3-tiny-a/hf/model.safetensors.index.json");
  auto idx = nlohmann::json::parse(in);
  EXPECT_EQ(src->names().size(), idx["weight_map"].size());
  uint64_t total = 0;
  for (auto& [name, file] : idx["weight_map"].items()) {
    auto v = src->get(name);
    total += v.nbytes;
    EXPECT_NE(v.file.find(file.get<std::string>()), std::string::npos);
  }
  EXPECT_EQ(total, idx["metadata"]["total_size"].get<uint64_t>());
  auto e = src->get("language_model.model.embed_tokens.weight");
  EXPECT_EQ(e.dtype, DType::bf16);
  EXPECT_EQ(e.shape, (std::vector<int64_t>{1024, 256}));
  auto p = src->get("language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed");
  EXPECT_EQ(p.dtype, DType::u8);
  EXPECT_THROW(src->get("no.such.tensor"), TensorError);
}

TEST(SafetensorsErrors, FileShorterThanTheLengthField) {
  auto d = temp_dir("short");
  std::ofstream(d / "a.safetensors") << "abc";
  expect_format_error(d / "a.safetensors", {"truncated"});
}

TEST(SafetensorsErrors, HeaderLengthPastEndOfFile) {
  auto d = temp_dir("hdrlen");
  write_raw(d / "a.safetensors", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, 5000);
  expect_format_error(d / "a.safetensors", {"header length 5000"});
  write_raw(d / "b.safetensors", "{}", 0, 200'000'000);
  expect_format_error(d / "b.safetensors", {"limit"});
}

TEST(SafetensorsErrors, TruncatedDataBuffer) {
  auto d = temp_dir("trunc");
  write_raw(d / "a.safetensors", R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10);
  expect_format_error(d / "a.safetensors", {"'x'", "data buffer"});
}

TEST(SafetensorsErrors, OverlappingOffsetsNameBothTensors) {
  auto d = temp_dir("overlap");
  write_raw(d / "a.safetensors",
            R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12);
  expect_format_error(d / "a.safetensors", {"overlaps", "'x'", "'y'"});
}

TEST(SafetensorsErrors, HoleInDataBuffer) {
  auto d = temp_dir("hole");
  write_raw(d / "a.safetensors",
            R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            12);
  expect_format_error(d / "a.safetensors", {"hole", "'y'"});
}

TEST(SafetensorsErrors, UnknownDtypeAndWrongNumel) {
  auto d = temp_dir("dtype");
  write_raw(d / "a.safetensors", R"({"x":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", 4);
  expect_format_error(d / "a.safetensors", {"'x'", "F12"});
  write_raw(d / "b.safetensors", R"({"x":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", 4);
  expect_format_error(d / "b.safetensors", {"'x'", "needs 6"});
  write_raw(d / "c.safetensors", R"({"x":{"dtype":"BF16","shape":[-2],"data_offsets":[0,4]}})", 4);
  expect_format_error(d / "c.safetensors", {"'x'", "non-negative"});
  write_raw(d / "e.safetensors", R"([1,2])", 0);
  expect_format_error(d / "e.safetensors", {"'{'"});
  write_raw(d / "f.safetensors", R"({"x":{"dtype":"F32",)", 0);
  expect_format_error(d / "f.safetensors", {"JSON"});
}

TEST(SafetensorsErrors, MissingShardAndMissingTensorNameTheFiles) {
  auto d = temp_dir("shards");
  for (auto& e : fs::directory_iterator(kFix / "k3-tiny-a/hf"))
    if (e.path().extension() == ".safetensors" || e.path().extension() == ".json") fs::copy(e.path(), d / e.path().filename());
  fs::remove(d / "model-00002-of-000003.safetensors");
  try {
    open_safetensors_checkpoint(d);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model-00002-of-000003.safetensors"), std::string::npos) << e.what();
  }
  // Listed in the index, absent from the (valid) shard it names.
  fs::copy(kFix / "k3-tiny-a/hf/model-00002-of-000003.safetensors", d);
  std::ifstream in(d / "model.safetensors.index.json");
  auto idx = nlohmann::json::parse(in);
  idx["weight_map"]["language_model.model.ghost.weight"] = "model-00001-of-000003.safetensors";
  std::ofstream(d / "model.safetensors.index.json") << idx.dump();
  try {
    open_safetensors_checkpoint(d);
    FAIL();
  } catch (const FormatError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("language_model.model.ghost.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("model-00001-of-000003.safetensors"), std::string::npos) << m;
  }
}

TEST(SafetensorsErrors, CorruptShardFailsNamingTheShard) {
  auto d = temp_dir("corrupt");
  for (auto& e : fs::directory_iterator(kFix / "k3-tiny-a/hf"))
    if (e.path().extension() == ".safetensors" || e.path().extension() == ".json") fs::copy(e.path(), d / e.path().filename());
  fs::resize_file(d / "model-00003-of-000003.safetensors", fs::file_size(d / "model-00003-of-000003.safetensors") - 1);
  try {
    open_safetensors_checkpoint(d);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model-00003-of-000003.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_safetensors_checkpoint(d / "nope"), FormatError);
}

TEST(SafetensorsWriter, StreamedFileRoundTripsWithAlignedHeader) {
  auto d = temp_dir("writer");
  std::vector<float> a{1.f, -2.f, 3.5f, 0.f, 7.f, 8.f};
  std::vector<uint16_t> b{0x3f80, 0xc000};
  {
    SafetensorsWriter w(d / "m.safetensors");
    w.set_metadata("format", "pt");
    w.declare("a", DType::f32, {2, 3});
    w.declare("empty", DType::f32, {0, 5});
    w.declare("b", DType::bf16, {2});
    w.append("a", a.data(), 8);  // in pieces
    w.append("a", reinterpret_cast<const uint8_t*>(a.data()) + 8, 16);
    EXPECT_THROW(w.append("a", a.data(), 4), FormatError);  // too many bytes for 'a' (b is due)
    w.append("b", b.data(), 4);
    EXPECT_FALSE(fs::exists(d / "m.safetensors"));  // only the .tmp until finish()
    w.finish();
  }
  EXPECT_FALSE(fs::exists(d / "m.safetensors.tmp"));
  SafetensorsFile f(d / "m.safetensors");
  EXPECT_EQ(f.header_bytes() % 8, 0u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  auto va = f.get("a");
  EXPECT_EQ(va.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(va.data, a.data(), 24), 0);
  EXPECT_EQ(f.get("empty").nbytes, 0u);
  EXPECT_EQ(std::memcmp(f.get("b").data, b.data(), 4), 0);
}

TEST(SafetensorsWriter, AbandonedWriterLeavesNoFile) {
  auto d = temp_dir("abandon");
  {
    SafetensorsWriter w(d / "m.safetensors");
    w.declare("a", DType::f32, {2});
    float x = 1;
    w.append("a", &x, 4);
    EXPECT_THROW(w.finish(), FormatError);  // 4 of 8 bytes
  }
  EXPECT_FALSE(fs::exists(d / "m.safetensors"));
  EXPECT_FALSE(fs::exists(d / "m.safetensors.tmp"));
}

TEST(SafetensorsWriter, ShardedCheckpointReopensThroughTheIndex) {
  auto d = temp_dir("sharded");
  std::vector<TensorToWrite> ts;
  for (int i = 0; i < 5; ++i)
    ts.push_back({"t" + std::to_string(i), DType::u8, {10, 10}, [i](uint8_t* dst, size_t n) {
                    for (size_t k = 0; k < n; ++k) dst[k] = static_cast<uint8_t>(i * 7 + k);
                  }});
  auto files = write_safetensors_checkpoint(d, ts, 250);  // two 100-byte tensors per shard
  ASSERT_EQ(files.size(), 4u);                             // 3 shards + index
  EXPECT_TRUE(fs::exists(d / "model-00003-of-00003.safetensors"));
  auto src = open_safetensors_checkpoint(d);
  ASSERT_EQ(src->names().size(), 5u);
  for (int i = 0; i < 5; ++i) {
    auto v = src->get("t" + std::to_string(i));
    ASSERT_EQ(v.nbytes, 100u);
    for (size_t k = 0; k < 100; ++k) ASSERT_EQ(v.data[k], static_cast<uint8_t>(i * 7 + k));
  }
  auto single = temp_dir("single");
  write_safetensors_checkpoint(single, ts, 1 << 20);
  EXPECT_TRUE(fs::exists(single / "model.safetensors"));
  EXPECT_EQ(open_safetensors_checkpoint(single)->names().size(), 5u);
}
