// GGUF: writer -> reader round trip of every metadata type and tensor type, the byte layout ggml
// expects (checked against a file assembled by hand from the spec), and malformed files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/formats/convert.hpp"
#include "io/errors.hpp"
#include "tests/io/temp_dir.hpp"
#include "io/formats/gguf.hpp"

namespace fs = std::filesystem;
using namespace ferry;

namespace {
using ferry::test::temp_dir;

// A GGUF file assembled by hand from the spec (MODEL_SPEC.md §11), independent of GgufWriter.
struct Bytes {
  std::string b;
  template <class T> Bytes& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b += s;
    return *this;
  }
  Bytes& pad(size_t a) {
    while (b.size() % a) b.push_back('\0');
    return *this;
  }
  fs::path save(const fs::path& p) const {
    std::ofstream(p, std::ios::binary) << b;
    return p;
  }
};

// One f32 tensor "w" of PyTorch shape [2, 3] (ne = {3, 2}) at `offset`, one u32 KV.
Bytes minimal_gguf(uint64_t offset = 0, uint32_t type = 0, uint64_t name_len_override = 0) {
  Bytes g;
  g.b = "GGUF";
  g.put<uint32_t>(3).put<int64_t>(1).put<int64_t>(1);
  g.str("test.answer").put<uint32_t>(4).put<uint32_t>(42);
  if (name_len_override) g.put<uint64_t>(name_len_override).b += "w";
  else g.str("w");
  g.put<uint32_t>(2).put<int64_t>(3).put<int64_t>(2).put<uint32_t>(type).put<uint64_t>(offset);
  g.pad(32);
  for (int i = 0; i < 6; ++i) g.put<float>(static_cast<float>(i));
  g.pad(32);
  return g;
}

void expect_format_error(const fs::path& p, std::initializer_list<const char*> needles) {
  try {
    GgufFile f(p);
    FAIL() << "no FormatError for " << p;
  } catch (const FormatError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    for (const char* n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}
}  // namespace

TEST(Gguf, ReadsAHandAssembledFileWithReversedShape) {
  auto p = minimal_gguf().save(temp_dir("hand") / "m.gguf");
  GgufFile f(p);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_value<uint32_t>("test.answer"), 42u);
  auto v = f.get("w");
  EXPECT_EQ(v.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(v.dtype, DType::f32);
  EXPECT_EQ(v.nbytes, 24u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(reinterpret_cast<const float*>(v.data)[5], 5.0f);
}

TEST(Gguf, WriterMatchesTheHandAssembledBytesExactly) {
  auto d = temp_dir("same");
  {
    GgufWriter w(d / "w.gguf");
    w.set_value<uint32_t>("test.answer", 42);
    w.add_tensor("w", DType::f32, {2, 3});
    std::vector<float> x{0, 1, 2, 3, 4, 5};
    w.write("w", x.data(), 24);
    w.finish();
  }
  // The writer adds general.alignment first; build the same by hand.
  Bytes g;
  g.b = "GGUF";
  g.put<uint32_t>(3).put<int64_t>(1).put<int64_t>(2);
  g.str("general.alignment").put<uint32_t>(4).put<uint32_t>(32);
  g.str("test.answer").put<uint32_t>(4).put<uint32_t>(42);
  g.str("w").put<uint32_t>(2).put<int64_t>(3).put<int64_t>(2).put<uint32_t>(0).put<uint64_t>(0);
  g.pad(32);
  for (int i = 0; i < 6; ++i) g.put<float>(static_cast<float>(i));
  g.pad(32);
  std::ifstream in(d / "w.gguf", std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(got, g.b);
}

TEST(Gguf, RoundTripsEveryMetadataTypeAndTensorType) {
  auto d = temp_dir("roundtrip");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> f32(15), src64(2 * 64), src96(3 * 64);
  for (auto& x : f32) x = nd(rng);
  for (auto& x : src64) x = nd(rng);
  for (auto& x : src96) x = nd(rng);
  std::vector<uint16_t> f16{f32_to_f16(1.5f), f32_to_f16(-2.f), 0, 0x7C00};
  std::vector<uint16_t> bf16(8);
  for (size_t i = 0; i < 8; ++i) bf16[i] = f32_to_bf16(f32[i]);
  std::vector<BlockQ8_0> q8(4);
  quantize_q8_0(src64.data(), q8.data(), 128);
  std::vector<BlockMxfp4> mx(6);
  quantize_mxfp4(src96.data(), mx.data(), 192);
  std::vector<float> big4d(2 * 1 * 3 * 4, 0.25f);
  {
    GgufWriter w(d / "m.gguf", 64);
    w.set_value<uint8_t>("k.u8", 200);
    w.set_value<int8_t>("k.i8", -100);
    w.set_value<uint16_t>("k.u16", 60000);
    w.set_value<int16_t>("k.i16", -30000);
    w.set_value<uint32_t>("k.u32", 4000000000u);
    w.set_value<int32_t>("k.i32", -2000000000);
    w.set_value<float>("k.f32", 1.25f);
    w.set_value<bool>("k.bool", true);
    w.set_value<std::string>("k.str", "kimi-k3 \xE2\x9C\x93");
    w.set_value<uint64_t>("k.u64", 1ull << 60);
    w.set_value<int64_t>("k.i64", -(1ll << 60));
    w.set_value<double>("k.f64", 0.1);
    w.set_array<std::string>("k.strs", {"<s>", "", "token with spaces"});
    w.set_array<int32_t>("k.i32s", {1, -2, 3});
    w.set_array<float>("k.f32s", {0.5f, -1.f});
    w.set_array<bool>("k.bools", {true, false, true});
    w.set_array<uint8_t>("k.u8s", {});
    w.set_array<uint64_t>("k.u64s", {7});
    w.set_array<double>("k.f64s", {1e300});
    w.add_tensor("t.f32", DType::f32, {3, 5});
    w.add_tensor("t.f16", DType::f16, {4});
    w.add_tensor("t.bf16", DType::bf16, {2, 2, 2});
    w.add_tensor("t.q8_0", DType::q8_0, {2, 64});
    w.add_tensor("t.mxfp4", DType::mxfp4, {3, 64});
    w.add_tensor("t.4d", DType::f32, {2, 1, 3, 4});
    w.write("t.f32", f32.data(), 28);  // in two pieces
    w.write("t.f32", reinterpret_cast<const uint8_t*>(f32.data()) + 28, 32);
    w.write("t.f16", f16.data(), 8);
    w.write("t.bf16", bf16.data(), 16);
    w.write("t.q8_0", q8.data(), q8.size() * sizeof(BlockQ8_0));
    w.write("t.mxfp4", mx.data(), mx.size() * sizeof(BlockMxfp4));
    w.write("t.4d", big4d.data(), big4d.size() * 4);
    w.finish();
  }
  GgufFile f(d / "m.gguf");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_value<uint8_t>("k.u8"), 200);
  EXPECT_EQ(f.get_value<int8_t>("k.i8"), -100);
  EXPECT_EQ(f.get_value<uint16_t>("k.u16"), 60000);
  EXPECT_EQ(f.get_value<int16_t>("k.i16"), -30000);
  EXPECT_EQ(f.get_value<uint32_t>("k.u32"), 4000000000u);
  EXPECT_EQ(f.get_value<int32_t>("k.i32"), -2000000000);
  EXPECT_EQ(f.get_value<float>("k.f32"), 1.25f);
  EXPECT_EQ(f.get_value<bool>("k.bool"), true);
  EXPECT_EQ(f.get_value<std::string>("k.str"), "kimi-k3 \xE2\x9C\x93");
  EXPECT_EQ(f.get_value<uint64_t>("k.u64"), 1ull << 60);
  EXPECT_EQ(f.get_value<int64_t>("k.i64"), -(1ll << 60));
  EXPECT_EQ(f.get_value<double>("k.f64"), 0.1);
  EXPECT_EQ(f.get_array<std::string>("k.strs"), (std::vector<std::string>{"<s>", "", "token with spaces"}));
  EXPECT_EQ(f.get_array<int32_t>("k.i32s"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(f.get_array<float>("k.f32s"), (std::vector<float>{0.5f, -1.f}));
  EXPECT_EQ(f.get_array<bool>("k.bools"), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(f.get_array<uint8_t>("k.u8s").empty());
  EXPECT_EQ(f.get_array<uint64_t>("k.u64s"), (std::vector<uint64_t>{7}));
  EXPECT_EQ(f.get_array<double>("k.f64s"), (std::vector<double>{1e300}));
  EXPECT_EQ(f.keys().front(), "general.alignment");
  EXPECT_FALSE(f.find_value<int32_t>("k.absent").has_value());

  auto check = [&](const char* name, DType dt, std::vector<int64_t> shape, const void* bytes, size_t n) {
    SCOPED_TRACE(name);
    auto v = f.get(name);
    EXPECT_EQ(v.dtype, dt);
    EXPECT_EQ(v.shape, shape);
    ASSERT_EQ(v.nbytes, n);
    EXPECT_EQ(std::memcmp(v.data, bytes, n), 0);
    EXPECT_EQ(f.tensor_offset(name) % 64, 0u);
    EXPECT_EQ((f.data_offset() + f.tensor_offset(name)) % 64, 0u);
  };
  check("t.f32", DType::f32, {3, 5}, f32.data(), 60);
  check("t.f16", DType::f16, {4}, f16.data(), 8);
  check("t.bf16", DType::bf16, {2, 2, 2}, bf16.data(), 16);
  check("t.q8_0", DType::q8_0, {2, 64}, q8.data(), 4 * 34);  // rows * blocks * 34
  check("t.mxfp4", DType::mxfp4, {3, 64}, mx.data(), 6 * 17);
  check("t.4d", DType::f32, {2, 1, 3, 4}, big4d.data(), 96);
  // ggml's offsets: the running sum of sizes padded to the alignment; the file ends padded.
  EXPECT_EQ(f.tensor_offset("t.f16"), 64u);
  EXPECT_EQ(f.tensor_offset("t.q8_0"), 192u);
  EXPECT_EQ(fs::file_size(d / "m.gguf"), f.data_offset() + 640u);
  std::vector<float> back(128);
  dequant_q8_0(reinterpret_cast<const BlockQ8_0*>(f.get("t.q8_0").data), back.data(), 128);
  EXPECT_NEAR(back[7], src64[7], 0.05f);
}

TEST(Gguf, MetadataGettersNameTheKey) {
  auto p = minimal_gguf().save(temp_dir("getters") / "m.gguf");
  GgufFile f(p);
  try {
    f.get_value<std::string>("test.answer");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'test.answer'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("u32"), std::string::npos) << e.what();
  }
  try {
    f.get_value<uint32_t>("general.architecture");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'general.architecture'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.get_array<uint32_t>("test.answer"), FormatError);
  EXPECT_THROW(f.get("nope"), TensorError);
}

TEST(GgufErrors, EveryTruncationIsAFormatError) {
  auto d = temp_dir("trunc");
  auto full = minimal_gguf().b;
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes g;
    g.b = full.substr(0, n);
    auto p = g.save(d / "t.gguf");
    EXPECT_THROW(GgufFile f(p), FormatError) << "prefix of " << n << " bytes";
  }
}

TEST(GgufErrors, BadMagicVersionAndTypeAreNamed) {
  auto d = temp_dir("magic");
  auto g = minimal_gguf();
  g.b[0] = 'X';
  expect_format_error(g.save(d / "a.gguf"), {"magic"});
  g = minimal_gguf();
  g.b[4] = 2;
  expect_format_error(g.save(d / "b.gguf"), {"version 2"});
  expect_format_error(minimal_gguf(0, 12).save(d / "c.gguf"), {"'w'", "ggml type 12"});
}

TEST(GgufErrors, StringLengthPastEndOfFile) {
  auto d = temp_dir("strlen");
  expect_format_error(minimal_gguf(0, 0, 1ull << 40).save(d / "a.gguf"), {"string length", "past the end"});
}

TEST(GgufErrors, MisalignedAndOutOfRangeOffsets) {
  auto d = temp_dir("offset");
  expect_format_error(minimal_gguf(4).save(d / "a.gguf"), {"'w'", "offset 4", "alignment 32"});
  expect_format_error(minimal_gguf(64).save(d / "b.gguf"), {"'w'", "past its end"});
}

TEST(GgufErrors, ArrayLengthPastEndAndImpossibleCounts) {
  auto d = temp_dir("arrays");
  Bytes g;
  g.b = "GGUF";
  g.put<uint32_t>(3).put<int64_t>(0).put<int64_t>(1);
  g.str("tokenizer.ggml.tokens").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1ull << 50);
  expect_format_error(g.save(d / "a.gguf"), {"tokenizer.ggml.tokens", "array length"});
  Bytes h;
  h.b = "GGUF";
  h.put<uint32_t>(3).put<int64_t>(1ll << 40).put<int64_t>(0);
  expect_format_error(h.save(d / "b.gguf"), {"tensor count"});
}

TEST(GgufWriterErrors, NamesOver63BytesAndBadShapesAreRefused) {
  auto d = temp_dir("werr");
  GgufWriter w(d / "m.gguf");
  w.add_tensor(std::string(63, 'a'), DType::f32, {1});  // ggml's limit: 63 bytes + NUL
  EXPECT_THROW(w.add_tensor(std::string(64, 'a'), DType::f32, {1}), FormatError);
  EXPECT_THROW(w.add_tensor("q", DType::q8_0, {2, 48}), FormatError);  // not whole blocks
  EXPECT_THROW(w.add_tensor("u", DType::u8, {2}), FormatError);
  EXPECT_THROW(w.add_tensor("f", DType::f32, {1, 1, 1, 1, 1}), FormatError);
  EXPECT_THROW(w.write("wrong", "x", 1), FormatError);
}
