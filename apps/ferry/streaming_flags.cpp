#include "apps/ferry/streaming_flags.hpp"

#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "actors/runtime/model_loader.hpp"
#include "io/errors.hpp"

namespace ferry::cli {

uint64_t parse_bytes(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB") mult = 1e3;
  else if (unit == "M" || unit == "MB") mult = 1e6;
  else if (unit == "G" || unit == "GB") mult = 1e9;
  else if (unit == "T" || unit == "TB") mult = 1e12;
  else if (unit == "KIB") mult = 1024.0;
  else if (unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  if (used == 0 || mult == 0 || v < 0 || !std::isfinite(v))
    throw ConfigError(flag + ": '" + text + "' is not a size (e.g. 512MB, 2GB, 1.5GiB)");
  return static_cast<uint64_t>(v * mult);
}

void parse_capacity(const std::string& flag, const std::string& text, uint64_t& experts, uint64_t& bytes) {
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (digits) {
    experts = std::stoull(text);
    bytes = 0;
  } else {
    experts = 0;
    bytes = parse_bytes(flag, text);
  }
}

void add_streaming_flags(CLI::App* c, ModelOptions& o) {
  StreamingOptions& s = o.streaming;
  c->add_flag("--ssd-streaming", o.ssd_streaming,
              "Prepared models: stream routed experts from the expert files (else all are read into memory)");
  c->add_option_function<std::string>(
      "--cache-experts", [&s](const std::string& v) { parse_capacity("--cache-experts", v, s.cache_experts, s.cache_bytes); },
      "Compute-tier expert cache: N experts or a size (NGB); on the CPU back-end this is the host pool");
  c->add_option_function<std::string>(
      "--host-pool", [&s](const std::string& v) { s.host_pool_bytes = parse_bytes("--host-pool", v); },
      "Pinned host pool size (NGB)");
  c->add_option("--expert-dir", s.expert_dirs,
                "Expert directory, repeated: replaces manifest.json's directories in order (same count)");
  c->add_option_function<std::string>(
      "--io-engine",
      [&s](const std::string& v) {
        s.engine = v == "uring" ? io::EngineKind::uring : v == "pread" ? io::EngineKind::pread_pool : io::EngineKind::automatic;
      },
      "Expert reads: auto (io_uring when the kernel allows, else a pread pool), uring, pread")
      ->check(CLI::IsMember({"auto", "uring", "pread"}));
  c->add_flag("--verify-reads", s.verify_reads, "Check every expert read against manifest.json's xxh64");
  c->add_option("--trace", s.trace_path, "Record every scheduling event to FILE (read it with `ferry trace FILE`)");
  c->add_option("--prefetch", s.prefetch, "Next-layer prefetch: up to N likely experts per layer into the cache (0 = off; see the prefetch hit rate)")->capture_default_str();
  c->add_option("--min-rows", s.min_rows, "Block-aware admission: rows of a block that must use an expert")
      ->capture_default_str();
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
  c->add_option("--usage-prior", s.prior_mass, "Row-uses per MoE layer the usage counts weigh against live counts")
      ->capture_default_str();
  c->add_option("--stream-slots", s.stream_slots, "Scratch slots for experts that stream through (0 = 2 x top-k)");
  c->add_option("--io-depth", s.engine_cfg.max_inflight, "Reads in flight per drive")->capture_default_str();
  c->add_option("--upload-streams", s.upload_streams,
                "CUDA: upload streams copying expert bytes from the host pool to device slots")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
}

void report_streaming(const LoadedModel& m, nlohmann::json* j) {
  if (!m.streaming) return;
  const StreamingMetrics sm = m.streaming->metrics();
  if (j)
    (*j)["streaming"] = to_json(sm);
  else
    std::fputs(format_metrics(sm).c_str(), stderr);
}

}  // namespace ferry::cli
