#include "apps/engine_cli/engine_cli.hpp"

#include <CLI/CLI.hpp>

#include "io/errors.hpp"
#include "io/units.hpp"

namespace ferry::cli {

namespace {

uint64_t size_of(const std::string& flag, const std::string& text) {
  try {
    return parse_size(text, flag);
  } catch (const ConfigError& e) {
    throw UsageError(e.what());
  }
}

void add_model_flags(CLI::App* c, EngineOptions& o) {
  ModelOptions& m = o.model;
  c->add_option("-m,--model", m.dir, "Model directory: a Hugging Face checkpoint or a `ferry prepare` output")->required();
  c->add_option("--backend", m.backend, "Compute back-end: auto (CUDA when a GPU is present), cuda or cpu")
      ->capture_default_str();
  c->add_option("-t,--threads", m.threads, "CPU threads (0 = all cores)")->capture_default_str();
  c->add_option("--prompt-x-bits", m.prompt_x_bits,
                "CUDA prompt passes: bits of each activation in the tensor-core matmuls, 22 (two fp16, within ~1e-5 "
                "of F32, the default) or 11 (one fp16: half the tensor-core work, may change greedy ids); 0 = the default");
  c->add_option("--spine-type", m.spine_type, "Hugging Face checkpoints: spine weights in memory, f32 (exact) or q8_0")
      ->capture_default_str();
  c->add_option("-c,--ctx-size,--ctx", o.ctx, "Context per sequence in tokens (prompt + reply); sizes the KV cache")
      ->capture_default_str();
  c->add_option("--prefill-chunk", o.prefill_chunk,
                "Tokens per pass of a long prompt, a multiple of 64: bounds the prompt pass's activations (same "
                "logits). Default 0: the memory plan, one pass when the context fits")
      ->capture_default_str();
  c->add_flag("--quiet", o.quiet, "No memory plan or load progress on stderr");
  c->add_option_function<std::string>(
      "--gpu-mem", [&o](const std::string& v) { o.gpu_mem_cap = size_of("--gpu-mem", v); },
      "Plan with at most SIZE of the GPU's free memory (e.g. 24GB; default: all of it)");
  c->add_option_function<std::string>(
      "--host-mem", [&o](const std::string& v) { o.host_mem_cap = size_of("--host-mem", v); },
      "Plan with at most SIZE of the host's available memory (e.g. 64GB; default: all of it)");
}

void add_cache_flags(CLI::App* c, EngineOptions& o) {
  StreamingOptions& s = o.model.streaming;
  c->add_flag_function(
      "--ssd-streaming", [&o](int64_t) { o.streaming = 1; },
      "Prepared models: stream routed experts from the expert files (default: when they do not fit in memory)");
  c->add_flag_function(
      "--no-ssd-streaming", [&o](int64_t) { o.streaming = 0; },
      "Prepared models: read every expert into memory (refused when they do not fit)");
  c->add_option_function<std::string>(
      "--cache-experts",
      [&o, &s](const std::string& v) {
        parse_capacity("--cache-experts", v, s.cache_experts, s.cache_bytes);
        o.cache_set = true;
      },
      "Compute-tier expert cache: N experts or a size (e.g. 40GB); CUDA: the device cache; CPU: the host pool. "
      "Default: the memory plan");
  c->add_option_function<std::string>(
      "--host-pool",
      [&o, &s](const std::string& v) {
        s.host_pool_bytes = size_of("--host-pool", v);
        o.host_pool_set = true;
      },
      "Pinned host pool size (e.g. 100GB). Default: the memory plan");
  c->add_option("--stream-slots", s.stream_slots, "Host scratch slots for experts that stream through (0 = 2 x top-k)");
  c->add_option_function<std::string>(
      "--cache-policy",
      [&s](const std::string& v) {
        s.policy = v == "lru" ? CachePolicy::lru : v == "block" ? CachePolicy::block_aware : CachePolicy::frequency;
      },
      "Cache admission and eviction: freq (frequency with decay, seeded by the store's usage.json; default), "
      "block (block-aware LRFU) or lru")
      ->check(CLI::IsMember({"freq", "block", "lru"}));
  c->add_option("--usage-file", s.usage_path,
                "Usage counts seeding the caches and updated by the run (default: usage.json of the model)");
  c->add_flag("!--no-learn-usage", s.learn_usage, "Do not add this run's expert counts to the usage file");
  c->add_flag("!--no-warm-start", s.warm_start, "Do not read the hottest experts into the host pool at start");
  c->add_option("--usage-prior", s.prior_mass, "Row-uses per MoE layer the usage counts weigh against live counts")
      ->capture_default_str();
  c->add_option("--min-rows", s.min_rows, "Block-aware admission: rows of a block that must use an expert")
      ->capture_default_str();
  c->add_option("--prefetch", s.prefetch, "Next-layer prefetch: up to N likely experts per layer (0 = off)")
      ->capture_default_str();
  c->add_flag("--prefetch-router,!--no-prefetch-router", s.prefetch_router,
              "Router prefetch: predict the next MoE layer's experts with its router on this layer's input and "
              "read those not cached while this layer computes (decode steps and blocks; off by default: 0.93-1.04x "
              "the default on the H200 bench, docs/BENCHMARKS.md)");
  c->add_option("--upload-streams", s.upload_streams, "CUDA: streams copying expert bytes from the host pool to the GPU")
      ->capture_default_str();
}

void add_io_flags(CLI::App* c, EngineOptions& o) {
  StreamingOptions& s = o.model.streaming;
  c->add_option("--expert-dir", s.expert_dirs,
                "Expert directory, repeated: replaces manifest.json's directories in order (same count)");
  c->add_option_function<std::string>(
      "--io-engine",
      [&s](const std::string& v) {
        s.engine = v == "uring" ? io::EngineKind::uring : v == "pread" ? io::EngineKind::pread_pool : io::EngineKind::automatic;
      },
      "Expert reads: auto (per directory: io_uring + O_DIRECT on block storage, a pread pool splitting each read "
      "over several workers on tmpfs or where O_DIRECT is refused), uring, pread")
      ->check(CLI::IsMember({"auto", "uring", "pread"}));
  c->add_option("--io-depth", s.engine_cfg.max_inflight, "Reads in flight per drive (at least 1)")->capture_default_str();
  c->add_option("--io-threads", s.engine_cfg.pool_threads,
                "pread pool workers per directory (0 = auto: twice the cores / the directories on memory-backed storage)")
      ->capture_default_str();
  c->add_option("--read-split", s.engine_cfg.split_bytes,
                "Split expert reads into parts of this many bytes (0 = auto: 2 MiB parts on tmpfs)")
      ->capture_default_str();
  c->add_flag("--verify-reads,!--no-verify-reads", s.verify_reads,
              "Check every expert read against manifest.json's xxh64 (on by default; --no-verify-reads accepts "
              "silent corruption from a failing drive)");
  c->add_flag("--verify-late,!--no-verify-late", s.verify_late,
              "Verified reads off the critical path: compute each expert as its bytes land and hash them meanwhile; "
              "a layer whose expert then fails its check runs again from another copy (same output; off by default: "
              "slower than checking in the readers on the H200 bench, docs/BENCHMARKS.md)");
  c->add_option("--hash-threads", s.hash_threads,
                "Threads hashing verified reads (0 = auto: half the cores, 1..8)")
      ->capture_default_str();
  c->add_option("--trace", s.trace_path, "Record every scheduling event to FILE (read it with `ferry trace FILE`)");
}

void add_draft_flags(CLI::App* c, DraftOptions& f) {
  c->add_option("--draft", f.spec, "Speculative decoding with a drafter: ngram[:N], replay:FILE[,opts], qwen3:DIR");
  c->add_option("--draft-gate", f.gate, "Confidence gate: a threshold in [0,1] or 'adaptive' (starts at 0.9)")
      ->capture_default_str();
  c->add_option("--draft-cost-gate", f.cost_gate,
                "Draft only when blocks are measured to emit tokens faster than plain steps (on|off; off: "
                "verify every proposal)")
      ->capture_default_str();
  c->add_option("--draft-max", f.max, "Drafts per block (1-15; a block is the current token + drafts)")
      ->capture_default_str();
  c->add_option("--draft-deadline-ms", f.deadline_ms, "Per-call drafter deadline; late = a plain step")
      ->capture_default_str();
  c->add_option("--draft-threads", f.threads, "CPU threads of a checkpoint drafter")->capture_default_str();
  c->add_option("--drafter-exe", f.exe, "The ferry-drafter binary (default: next to ferry, or $FERRY_DRAFTER)");
}

}  // namespace

void parse_capacity(const std::string& flag, const std::string& text, uint64_t& experts, uint64_t& bytes) {
  const bool digits = !text.empty() && text.size() < 19 && text.find_first_not_of("0123456789") == std::string::npos;
  experts = digits ? std::stoull(text) : 0;
  bytes = digits ? 0 : size_of(flag, text);
}

void add_engine_flags(CLI::App* c, EngineOptions& o) {
  add_model_flags(c, o);
  add_cache_flags(c, o);
  add_io_flags(c, o);
  add_draft_flags(c, o.draft);
}

int exit_status(const std::exception& e) { return dynamic_cast<const UsageError*>(&e) ? 2 : 1; }

}  // namespace ferry::cli
