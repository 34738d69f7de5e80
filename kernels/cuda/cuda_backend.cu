// Memory, scratch and the factory of the CUDA back-end.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda_backend.hpp"
#include "io/errors.hpp"

namespace ferry::cuda {

void throw_cuda_error(cudaError_t e, const char* stmt, const char* func, const char* file, int line) {
  throw Error("CUDA error " + std::to_string(static_cast<int>(e)) + " (" + cudaGetErrorString(e) + ") in `" +
              stmt + "` [" + func + " at " + file + ":" + std::to_string(line) + "]");
}

bool env_switch(const char* name, bool unset) {
  const char* v = std::getenv(name);
  if (!v) return unset;
  return unset ? v[0] != '0' : v[0] == '1';
}

int env_level(const char* name, int unset, int hi) {
  const char* v = std::getenv(name);
  return v ? std::clamp(std::atoi(v), 0, hi) : unset;
}

namespace {
std::mutex g_copied_mu;
std::vector<cudaStream_t> g_copied;  // streams with a copy or memset since their last launch_kernel
}  // namespace

void stream_copied(cudaStream_t st) {
  std::lock_guard<std::mutex> lock(g_copied_mu);
  if (std::find(g_copied.begin(), g_copied.end(), st) == g_copied.end()) g_copied.push_back(st);
}

void copy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st) {
  FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, st));
  stream_copied(st);
}

void zero_async(void* p, size_t bytes, cudaStream_t st) {
  FERRY_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, st));
  stream_copied(st);
}

bool take_stream_copied(cudaStream_t st) {
  std::lock_guard<std::mutex> lock(g_copied_mu);
  const auto it = std::find(g_copied.begin(), g_copied.end(), st);
  if (it == g_copied.end()) return false;
  g_copied.erase(it);
  return true;
}

namespace {
int g_pdl = -1;       // launch_pdl_tune
int g_attn_ilp = -1;  // attention_ilp_tune
}  // namespace

void launch_pdl_tune(int on) { g_pdl = on; }
void attention_ilp_tune(int on) { g_attn_ilp = on; }

namespace {
int g_device_select = -1;  // device_select_tune
int g_device_route = -1;   // device_route_tune
}  // namespace

void device_select_tune(int on) { g_device_select = on; }
bool device_select() {
  static const bool env = env_switch("FERRY_DEVICE_SELECT", true);
  return switch_on(g_device_select, env);
}

void device_route_tune(int on) { g_device_route = on; }
int device_route() {
  static const int env = env_level("FERRY_DEVICE_ROUTE", 2, 2);
  return level_on(g_device_route, env, 2);
}
bool device_route_for(int64_t rows) {
  const int m = device_route();
  return m == 1 || (m == 2 && rows >= kDeviceRouteMinRows);
}

bool pdl_small() {
  static const bool env = env_switch("FERRY_PDL", true);
  return switch_on(g_pdl, env);
}

bool pdl_for(const void* kernel) {
  if (!pdl_small()) return false;
  static const std::vector<std::string> only = [] {
    std::vector<std::string> v;
    const char* e = std::getenv("FERRY_PDL_ONLY");
    std::string cur;
    for (const char* c = e ? e : ""; ; ++c) {
      if (*c == ',' || *c == '+' || *c == 0) {
        if (!cur.empty()) v.push_back(cur);
        cur.clear();
        if (*c == 0) break;
      } else {
        cur += *c;
      }
    }
    return v;
  }();
  if (only.empty()) return true;
  static std::mutex mu;
  static std::unordered_map<const void*, bool> memo;
  std::lock_guard<std::mutex> lock(mu);
  const auto it = memo.find(kernel);
  if (it != memo.end()) return it->second;
  const char* name = nullptr;
  if (cudaFuncGetName(&name, kernel) != cudaSuccess || !name) {
    (void)cudaGetLastError();
    name = "";
  }
  // "-name": every kernel but those.
  const bool skip = only[0][0] == '-';
  bool hit = false;
  for (const std::string& o : only) hit = hit || std::strstr(name, o.c_str() + (o[0] == '-')) != nullptr;
  return memo[kernel] = skip ? !hit : hit;
}

bool attention_ilp() {
  static const bool env = env_switch("FERRY_ATTN_ILP", true);
  return switch_on(g_attn_ilp, env);
}

namespace {
int g_attn_multi = -1;  // attention_multi_tune
}  // namespace

int attention_multi_queries() {
  static const int env = [] {
    const char* v = std::getenv("FERRY_ATTN_MULTI");
    if (!v) return 8;
    const int q = std::atoi(v);
    return q == 0 ? 0 : q >= 16 ? 16 : 8;  // "1" and other values: on, 8 queries per block
  }();
  if (g_attn_multi < 0) return env;
  return g_attn_multi == 0 ? 0 : g_attn_multi >= 16 ? 16 : 8;
}
void attention_multi_tune(int on) { g_attn_multi = on; }

namespace {
int g_attn_split = -1;  // attention_split_tune
}  // namespace

bool attention_split() {
  static const bool env = env_switch("FERRY_ATTN_SPLIT", false);
  return switch_on(g_attn_split, env);
}
void attention_split_tune(int on) { g_attn_split = on; }

namespace {
int g_attn_reg = -1;  // attention_reg_tune
}  // namespace

int attention_reg() {
  static const int env = env_level("FERRY_ATTN_REG", 2, 3);
  return level_on(g_attn_reg, env, 3);
}
void attention_reg_tune(int on) { g_attn_reg = on; }

namespace {
int g_fused = -1;  // fused_ops_tune
}  // namespace

bool fused_ops() {
  static const bool env = env_switch("FERRY_FUSE", true);
  return switch_on(g_fused, env);
}
void fused_ops_tune(int on) { g_fused = on; }
int g_fused_gate = -1;  // fused_gate_tune
bool fused_gate() {
  static const bool env = env_switch("FERRY_FUSE_GATE", false);
  return switch_on(g_fused_gate, env) && fused_ops();
}
void fused_gate_tune(int on) { g_fused_gate = on; }

bool is_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // clear: an unknown pointer is host memory
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Kernels load when the CUDA context starts, not at their first launch. The runtime's default since CUDA
// 12.2 is lazy loading: each kernel's first launch loads it, and a prompt pass's first launches are inside
// the user's first prompt (~19 ms of a 16-token prompt, ~20 ms of a 1,024-token one on the H100:
// docs/BENCHMARKS.md). The driver reads CUDA_MODULE_LOADING once, at its initialisation (the process's
// first CUDA call: cuda_available() or this constructor), so it is set before either; a value the user set
// is kept (CUDA_MODULE_LOADING=LAZY restores the runtime's default). Test:
// tests/kernels/model/cuda_loading_test.cpp.
void eager_module_loading() { setenv("CUDA_MODULE_LOADING", "EAGER", 0); }  // 0: keep the user's value

namespace {
// The same at program start, while the process has one thread: setenv may reallocate the environment
// under a concurrent getenv, and by the time a back-end is made the actor threads run. The calls above
// then find the variable set and change nothing.
const bool g_eager_at_start = (eager_module_loading(), true);
}  // namespace

CudaBackend::CudaBackend(int device) : device_(device) {
  eager_module_loading();
  int count = 0;
  FERRY_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw LimitError("cuda back-end: device " + std::to_string(device) + " requested, " + std::to_string(count) +
                     " present");
  bind();
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
  FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FERRY_CUDA_CHECK(cudaMallocHost(&ring_, kRingBytes));
  // Keep freed blocks in the stream-ordered pool: the model allocates and frees temporaries every op.
  cudaMemPool_t pool;
  FERRY_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t keep = UINT64_MAX;
  FERRY_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
}

CudaBackend::~CudaBackend() {
  // No throwing from a destructor: errors here only mean the device is already gone.
  cudaSetDevice(device_);
  for (cudaStream_t s : uploads_) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  for (void* p : scratch_)
    if (p) cudaFreeAsync(p, stream_);
  for (auto& [size, v] : free_)
    for (void* p : v) cudaFreeAsync(p, stream_);
  cudaStreamSynchronize(stream_);
  if (ring_) cudaFreeHost(ring_);
  if (dl_stage_) cudaFreeHost(dl_stage_);
  if (dl_done_) cudaEventDestroy(dl_done_);
  cudaStreamDestroy(stream_);
}

void CudaBackend::bind() const { FERRY_CUDA_CHECK(cudaSetDevice(device_)); }

std::string CudaBackend::name() const {
  cudaDeviceProp p{};
  FERRY_CUDA_CHECK(cudaGetDeviceProperties(&p, device_));
  return "cuda(" + std::to_string(device_) + ": " + p.name + ", " + std::to_string(sm_count_) + " SMs)";
}

void* CudaBackend::take(size_t bytes) {
  bind();
  const size_t n = bytes <= 256 ? 256 : (bytes + 255) & ~size_t{255};
  if (auto it = free_.find(n); it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= n;
    return p;
  }
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, n, stream_);
  if (e == cudaErrorMemoryAllocation && cached_bytes_ > 0) {  // give the cache back and retry once
    (void)cudaGetLastError();
    for (auto& [size, v] : free_)
      for (void* q : v) {
        sizes_.erase(q);
        FERRY_CUDA_CHECK(cudaFreeAsync(q, stream_));
      }
    free_.clear();
    cached_bytes_ = 0;
    e = cudaMallocAsync(&p, n, stream_);
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw LimitError("cuda back-end: out of device memory allocating " + std::to_string(bytes) + " bytes");
  }
  FERRY_CUDA_CHECK(e);
  sizes_[p] = n;
  return p;
}

void* CudaBackend::alloc(size_t bytes) {
  void* p = take(bytes);
  zero_async(p, sizes_[p], stream_);
  return p;
}

void* CudaBackend::alloc_uninit(size_t bytes) { return take(bytes); }

void CudaBackend::release(void* p) {
  if (!p) return;
  bind();
  auto it = sizes_.find(p);
  if (it == sizes_.end()) throw LimitError("cuda back-end: release of a pointer this back-end did not allocate");
  if (cached_bytes_ + it->second <= kCacheBytes) {
    free_[it->second].push_back(p);
    cached_bytes_ += it->second;
    return;
  }
  sizes_.erase(it);
  FERRY_CUDA_CHECK(cudaFreeAsync(p, stream_));
}

void CudaBackend::upload(void* dst, const void* src_host, size_t bytes) {
  if (!bytes) return;
  bind();
  copy_async(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_);
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller may reuse src_host at once
}

void CudaBackend::download(void* dst_host, const void* src, size_t bytes) {
  if (!bytes) return;
  bind();
  copy_async(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_);
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::download_start(void* dst_host, const void* src, size_t bytes) {
  bind();
  if (dl_dst_) {
    // A start whose wait never came (an op between them threw): its destination may be gone, so the
    // bytes are dropped once the copy is done, and this download takes the staging.
    FERRY_CUDA_CHECK(cudaEventSynchronize(dl_done_));
    dl_dst_ = nullptr;
  }
  if (bytes > dl_bytes_) {
    if (dl_stage_) FERRY_CUDA_CHECK(cudaFreeHost(dl_stage_));
    dl_stage_ = nullptr;
    dl_bytes_ = 0;
    FERRY_CUDA_CHECK(cudaMallocHost(&dl_stage_, bytes));
    dl_bytes_ = bytes;
  }
  if (!dl_done_) FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&dl_done_, cudaEventDisableTiming));
  if (bytes) copy_async(dl_stage_, src, bytes, cudaMemcpyDeviceToHost, stream_);  // a kernel may overwrite src
  FERRY_CUDA_CHECK(cudaEventRecord(dl_done_, stream_));
  dl_dst_ = dst_host;
  dl_pending_ = bytes;
}

void CudaBackend::download_wait() {
  if (!dl_dst_) return;
  void* dst = dl_dst_;
  dl_dst_ = nullptr;
  FERRY_CUDA_CHECK(cudaEventSynchronize(dl_done_));
  std::memcpy(dst, dl_stage_, dl_pending_);
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return;
  bind();
  copy_async(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_);
}

void CudaBackend::register_host(void* p, size_t bytes) {
  bind();
  FERRY_CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
}

Backend::MemoryInfo CudaBackend::device_memory() {
  bind();
  size_t free = 0, total = 0;
  FERRY_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {free, total};
}

void CudaBackend::unregister_host(void* p) {
  bind();
  cudaHostUnregister(p);  // best effort at shutdown: nothing to do if it fails
  cudaGetLastError();
}

void CudaBackend::synchronize() {
  bind();
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- upload queues and events ------------------------------------------------------------------

cudaStream_t CudaBackend::queue(int q) const {
  if (q == kComputeQueue) return stream_;
  if (q < 0 || static_cast<size_t>(q) >= uploads_.size())
    throw LimitError("cuda back-end: upload queue " + std::to_string(q) + " of " + std::to_string(uploads_.size()));
  return uploads_[static_cast<size_t>(q)];
}

void CudaBackend::set_upload_queues(uint32_t n) {
  bind();
  for (cudaStream_t s : uploads_) {
    FERRY_CUDA_CHECK(cudaStreamSynchronize(s));
    FERRY_CUDA_CHECK(cudaStreamDestroy(s));
  }
  uploads_.assign(n, nullptr);
  for (cudaStream_t& s : uploads_) FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
}

Backend::Event CudaBackend::create_event() {
  bind();
  cudaEvent_t e = nullptr;
  FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return reinterpret_cast<Event>(e);
}

Backend::Event CudaBackend::create_timing_event() {
  bind();
  cudaEvent_t e = nullptr;
  FERRY_CUDA_CHECK(cudaEventCreate(&e));
  return reinterpret_cast<Event>(e);
}

double CudaBackend::elapsed_ms(Event a, Event b) {
  FERRY_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(b)));
  float ms = 0;
  FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, reinterpret_cast<cudaEvent_t>(a), reinterpret_cast<cudaEvent_t>(b)));
  return ms;
}

void CudaBackend::destroy_event(Event e) {
  if (e) cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e));  // best effort, like release at shutdown
}

void CudaBackend::record_event(Event e, int q) {
  bind();
  FERRY_CUDA_CHECK(cudaEventRecord(reinterpret_cast<cudaEvent_t>(e), queue(q)));
}

void CudaBackend::wait_event(int q, Event e) {
  bind();
  FERRY_CUDA_CHECK(cudaStreamWaitEvent(queue(q), reinterpret_cast<cudaEvent_t>(e), 0));
  stream_copied(queue(q));  // a wait for another stream, too: the next launch there is a plain one
}

bool CudaBackend::event_done(Event e) {
  const cudaError_t r = cudaEventQuery(reinterpret_cast<cudaEvent_t>(e));
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: the event is still ahead in its queue
    return false;
  }
  FERRY_CUDA_CHECK(r);
  return true;
}

void CudaBackend::sync_event(Event e) { FERRY_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(e))); }

void CudaBackend::upload_async(int q, void* dst, const void* src_host, size_t bytes) {
  if (!bytes) return;
  bind();
  copy_async(dst, src_host, bytes, cudaMemcpyHostToDevice, queue(q));
}

void* CudaBackend::scratch(Slot s, size_t bytes) {
  if (bytes > scratch_bytes_[s]) {
    bind();
    if (scratch_[s]) FERRY_CUDA_CHECK(cudaFreeAsync(scratch_[s], stream_));
    scratch_[s] = nullptr;
    scratch_bytes_[s] = 0;
    const size_t n = bytes < 4096 ? 4096 : bytes + bytes / 2;
    FERRY_CUDA_CHECK(cudaMallocAsync(&scratch_[s], n, stream_));
    scratch_bytes_[s] = n;
  }
  return scratch_[s];
}

void* CudaBackend::zeroed_scratch(Slot s, size_t bytes) {
  const bool grows = bytes > scratch_bytes_[s];
  void* p = scratch(s, bytes);
  if (grows) zero_async(p, scratch_bytes_[s], stream_);
  return p;
}

void* CudaBackend::stage(Slot s, const void* host, size_t bytes) {
  void* d = scratch(s, bytes);
  if (!bytes) return d;
  if (bytes > kRingBytes / 4) {
    // Large and rare: a pageable copy, finished before returning so `host` may go away after.
    copy_async(d, host, bytes, cudaMemcpyHostToDevice, stream_);
    FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return d;
  }
  const size_t need = (bytes + 15) & ~size_t{15};
  if (ring_pos_ + need > kRingBytes) {  // wrap: every copy out of the ring so far must have run
    FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    ring_pos_ = 0;
  }
  std::byte* src = ring_ + ring_pos_;
  ring_pos_ += need;
  std::memcpy(src, host, bytes);
  copy_async(d, src, bytes, cudaMemcpyHostToDevice, stream_);
  return d;
}

}  // namespace ferry::cuda

namespace ferry {

bool cuda_available() {
  cuda::eager_module_loading();
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<cuda::CudaBackend>(device); }

void cuda_prompt_x_bits(int bits) {
  if (bits != 11 && bits != 22) throw ConfigError("prompt x bits " + std::to_string(bits) + ": 11 or 22");
  cuda::matmul_mma_levels_tune(bits == 22 ? 2 : 1);
}

}  // namespace ferry
