// Streaming on the GPU: the device tier (device-cache manager, upload streams, event ordering) gives
// logits bit-identical to all experts resident on the GPU, at every device cache size and with 1 or 8
// upload streams (k3-tiny-a prepared into a temporary directory), also with every same-bits switch on.
#include <unistd.h>

#include <filesystem>

#include "actors/runtime/model_loader.hpp"
#include "actors/runtime/runtime.hpp"
#include "io/store/expert_store_prepare.hpp"
#include "kernels/decoding/generate.hpp"
#include "tests/gpu/gpu_util.hpp"

namespace ferry::test {
namespace {

namespace fs = std::filesystem;

const std::vector<int32_t> kPrompt = {768, 84, 257, 653, 384, 526, 659, 648, 259, 650, 414, 44,
                                      277, 258, 525, 351, 286, 105, 99,  107, 115, 259, 473, 467};

struct GenRun {
  std::vector<int32_t> ids;
  std::vector<uint64_t> hashes;
  StreamingMetrics metrics;
};

GenRun generate_on(const ModelOptions& o) {
  Runtime rt;
  LoadedModel m = load_model(o, &rt);
  auto st = m.model->new_state(128);
  GenerateParams gp;
  gp.n_predict = 12;
  GenerateMetrics gm;
  GenRun r;
  generate(*m.model, *st, kPrompt, gp, gm, [&](const GeneratedToken& t) {
    r.ids.push_back(t.id);
    r.hashes.push_back(t.logits_hash);
    return true;
  });
  if (m.streaming) r.metrics = m.streaming->metrics();
  return r;
}

class GpuStreaming : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_cuda()) return;
    root_ = fs::temp_directory_path() / ("ferry-gpu-streaming-" + std::to_string(::getpid()));
    PrepareOptions p;
    p.checkpoint = gpu_fixture("k3-tiny-a/hf");
    p.out = root_ / "model";
    p.expert_dirs = {root_ / "nvme0"};
    p.spine = SpineType::bf16;
    p.progress = false;
    prepare_model(p);
  }
  static void TearDownTestSuite() {
    if (!root_.empty()) fs::remove_all(root_);
  }
  void SetUp() override { FERRY_SKIP_WITHOUT_CUDA(); }
  static ModelOptions options(bool streaming) {
    ModelOptions o;
    o.dir = (root_ / "model").string();
    o.backend = "cuda";
    o.ssd_streaming = streaming;
    o.streaming.read_timeout = std::chrono::milliseconds(10000);
    o.streaming.layer_timeout = std::chrono::milliseconds(30000);
    return o;
  }
  static inline fs::path root_;
};

TEST_F(GpuStreaming, UploadStreamsAndDeviceCacheAreBitIdenticalToResidentExperts) {
  const GenRun ref = generate_on(options(false));
  ASSERT_EQ(ref.hashes.size(), 12u);
  struct Case { uint64_t device; uint32_t streams; uint32_t scratch; };
  for (auto c : {Case{0, 8, 1}, Case{0, 8, 0}, Case{1, 1, 2}, Case{6, 8, 0}, Case{160, 8, 0}}) {
    SCOPED_TRACE("device cache " + std::to_string(c.device) + ", " + std::to_string(c.streams) + " streams, scratch " +
                 std::to_string(c.scratch));
    ModelOptions o = options(true);
    o.streaming.cache_experts = c.device;
    o.streaming.upload_streams = c.streams;
    o.streaming.device_scratch = c.scratch;
    if (c.device == 160) o.streaming.min_rows = 1;
    const GenRun r = generate_on(o);
    ASSERT_EQ(r.hashes, ref.hashes) << "streamed logits differ from resident ones";
    EXPECT_EQ(r.ids, ref.ids);
    EXPECT_EQ(r.metrics.upload_streams, c.streams);
    EXPECT_EQ(r.metrics.uploads, r.metrics.device.misses);
    EXPECT_EQ(r.metrics.device.hits + r.metrics.device.misses, r.metrics.requested);
    if (c.device == 160) {
      EXPECT_GT(r.metrics.device.hits, 0u);
    }
  }
}

// The same with every same-bits switch on (programmatic launches of the small kernels among them), against the
// resident run with every one off: the upload streams' events still order every read of a slot.
TEST_F(GpuStreaming, SameBitsSwitchesKeepStreamedLogitsBitIdenticalToResidentExperts) {
  GenRun ref;
  {
    AllSameBitsSwitches off(0);
    ref = generate_on(options(false));
  }
  AllSameBitsSwitches on;
  for (auto c : {std::pair<uint64_t, uint32_t>{1, 1}, {6, 8}, {0, 8}}) {
    SCOPED_TRACE("device cache " + std::to_string(c.first) + ", " + std::to_string(c.second) + " streams");
    ModelOptions o = options(true);
    o.streaming.cache_experts = c.first;
    o.streaming.upload_streams = c.second;
    const GenRun r = generate_on(o);
    ASSERT_EQ(r.hashes, ref.hashes) << "streamed logits with programmatic launches differ from resident ones";
    EXPECT_EQ(r.ids, ref.ids);
  }
  EXPECT_EQ(generate_on(options(false)).hashes, ref.hashes) << "resident, same-bits switches on";
}

}  // namespace
}  // namespace ferry::test
