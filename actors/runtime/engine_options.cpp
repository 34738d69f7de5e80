// The checks behind validate_engine_options: values first (cheap), then the files the options name,
// so a typo costs a second, not a model load.
#include "actors/runtime/engine_options.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "actors/drafter/drafter_bridge.hpp"
#include "actors/runtime/prepared_model.hpp"
#include "actors/streaming/expert_catalog.hpp"
#include "actors/drafter/sidecar/drafter_core.hpp"
#include "io/errors.hpp"
#include "io/formats/model_config.hpp"
#include "io/store/expert_store.hpp"
#include "io/store/sizing.hpp"

namespace fs = std::filesystem;

namespace ferry {
namespace {

[[noreturn]] void refuse(const std::string& msg) { throw UsageError(msg); }

void check_counts(const EngineOptions& o) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const ModelOptions& m = o.model;
  if (m.threads < 0 || unsigned(m.threads) > cores)
    refuse("-t/--threads " + std::to_string(m.threads) + " is outside 0.." + std::to_string(cores) +
           " (0 = all " + std::to_string(cores) + " cores)");
  if (o.ctx < 2) refuse("-c/--ctx-size " + std::to_string(o.ctx) + ": the context needs at least 2 tokens");
  check_prefill_chunk(o.prefill_chunk);
  const StreamingOptions& s = m.streaming;
  if (s.engine_cfg.max_inflight < 1) refuse("--io-depth " + std::to_string(s.engine_cfg.max_inflight) + " must be at least 1");
  if (s.min_rows < 1) refuse("--min-rows must be at least 1");
  if (s.upload_streams < 1 || s.upload_streams > 64)
    refuse("--upload-streams " + std::to_string(s.upload_streams) + " is outside 1..64");
  if (m.backend != "cpu" && m.backend != "cuda" && m.backend != "auto")
    refuse("--backend '" + m.backend + "' is not one of cpu, cuda, auto");
  if (m.prompt_x_bits != 0 && m.prompt_x_bits != 11 && m.prompt_x_bits != 22)
    refuse("--prompt-x-bits " + std::to_string(m.prompt_x_bits) + " is not 11 or 22");
  if (m.spine_type != "f32" && m.spine_type != "q8_0" && m.spine_type != "bf16")
    refuse("--spine-type '" + m.spine_type + "' is not one of f32, q8_0, bf16");
  if (s.engine_cfg.max_inflight > 4096)
    refuse("--io-depth " + std::to_string(s.engine_cfg.max_inflight) + " is above the limit of 4096");
  if (o.streaming == 0 && (o.cache_set || o.host_pool_set))
    refuse("--no-ssd-streaming keeps every expert in memory: --cache-experts and --host-pool size the streaming caches");
}

ModelConfig model_config(const fs::path& dir) {
  if (!fs::is_directory(dir)) refuse("-m/--model: model directory " + dir.string() + " does not exist");
  if (is_prepared_model(dir)) return load_prepared_config(dir);
  if (!fs::exists(dir / "config.json"))
    refuse("-m/--model: " + dir.string() + " is neither a prepared model (spine.gguf + manifest.json) nor a Hugging "
           "Face checkpoint (config.json)");
  return load_model_config(dir);
}

// Every expert needs one copy on disk of the manifest's size; other missing copies only cost failover.
void check_expert_files(const fs::path& dir, const std::vector<std::string>& dirs) {
  const Manifest m = read_manifest(dir / "manifest.json");
  const ExpertCatalog cat = make_catalog(m, dirs);
  std::string bad;
  int64_t n_bad = 0;
  for (const auto& e : m.experts) {
    const expert_key k{uint32_t(e.layer), uint32_t(e.expert)};
    std::string why;
    bool ok = false;
    for (uint32_t d : cat.copies_of(k)) {
      struct stat st {};
      const std::string p = cat.path_of(k, d);
      if (::stat(p.c_str(), &st) != 0) why = p + " is missing";
      else if (int64_t(st.st_size) != m.file_bytes)
        why = p + " has " + std::to_string(st.st_size) + " bytes, manifest.json says " + std::to_string(m.file_bytes);
      else ok = true;
    }
    if (!ok && n_bad++ == 0) bad = why;
  }
  if (n_bad)
    refuse(std::to_string(n_bad) + " expert(s) have no usable copy on disk (first: " + bad +
           "): check --expert-dir and the drives, or run `ferry verify`");
}

// Ids the model cannot take (raw ids from another vocabulary) would be rejected one by one: "accepted 0 of 0".
void check_draft_vocab(const DraftOptions& d, const fs::path& model_dir, const ModelConfig& target) {
  const std::string kind = d.spec.substr(0, d.spec.find(':'));
  const std::string arg = d.spec.find(':') == std::string::npos ? "" : d.spec.substr(d.spec.find(':') + 1);
  if (kind == "ngram") return;
  if (kind == "replay") {
    const ReplayOptions r = parse_replay_spec(arg);
    if (!fs::is_regular_file(r.file)) refuse("--draft replay: the replay file '" + r.file + "' does not exist");
    for (int32_t id : read_token_file(r.file))
      if (id < 0 || id >= target.vocab)
        refuse("--draft replay: " + r.file + " holds token id " + std::to_string(id) + ", outside the model's vocabulary of " +
               std::to_string(target.vocab));
    return;
  }
  if (kind != "qwen3") refuse("--draft '" + d.spec + "': unknown drafter kind '" + kind + "' (ngram[:N], replay:FILE, qwen3:DIR)");
  if (!fs::is_regular_file(fs::path(arg) / "config.json"))
    refuse("--draft qwen3: '" + arg + "' is not a checkpoint directory (no config.json)");
  const bool own_tok = has_tokenizer(arg), target_tok = has_tokenizer(model_dir);
  const int64_t vocab = load_model_config(fs::path(arg) / "config.json").vocab;
  if (own_tok && !target_tok)
    refuse("--draft qwen3:" + arg + " has its own tokenizer but the model has none to map its text to: use a drafter "
           "without tokenizer files of the model's vocabulary, or the ngram drafter");
  if (!own_tok && vocab != target.vocab)
    refuse("--draft qwen3:" + arg + " proposes raw ids of a " + std::to_string(vocab) + "-token vocabulary and has no "
           "tokenizer to map them; the model's vocabulary has " + std::to_string(target.vocab) + " tokens");
}

void check_draft(const DraftOptions& d, const fs::path& model_dir, const ModelConfig& target) {
  if (d.spec.empty()) return;
  if (d.deadline_ms < 1) refuse("--draft-deadline-ms must be at least 1");
  if (d.threads < 1) refuse("--draft-threads must be at least 1");
  (void)draft_spec_params(d);  // --draft-max, --draft-gate
  check_draft_vocab(d, model_dir, target);
  const std::string exe = d.exe.empty() ? default_drafter_exe() : d.exe;
  if (::access(exe.c_str(), X_OK) != 0)
    refuse("--draft: the drafter binary " + exe + " is not an executable (set --drafter-exe or $FERRY_DRAFTER)");
}

}  // namespace

void validate_engine_options(const EngineOptions& o) {
  check_counts(o);
  const fs::path dir(o.model.dir);
  const ModelConfig cfg = model_config(dir);
  const bool prepared = is_prepared_model(dir);
  if (!prepared && o.streaming == 1)
    refuse("--ssd-streaming needs a prepared model directory (spine.gguf + manifest.json from `ferry prepare`); " +
           o.model.dir + " has none");
  if (!prepared && !o.model.streaming.expert_dirs.empty()) refuse("--expert-dir needs a prepared model directory");
  if (!o.model.streaming.trace_path.empty() && (o.streaming == 0 || !prepared))
    refuse("--trace records the streaming runtime's events: it needs --ssd-streaming (a prepared model)");
  if (o.model.streaming.verify_late && !o.model.streaming.verify_reads)
    refuse("--verify-late changes when reads are verified: it does not go with --no-verify-reads");
  if (prepared && o.model.spine_type != "f32")
    refuse("--spine-type " + o.model.spine_type + " does not apply to a prepared model: its spine keeps the types "
           "`ferry prepare --spine-type` wrote");
  if (prepared) check_expert_files(dir, o.model.streaming.expert_dirs);
  check_draft(o.draft, dir, cfg);
}

std::unique_ptr<DrafterClient> start_drafter(Runtime& rt, const DraftOptions& d, const LoadedModel& m, bool* up) {
  DrafterBridgeOptions bo;
  bo.sidecar = sidecar_for_spec(d.spec, d.threads, d.exe);
  bo.target = {m.tokenizer.get(), static_cast<int32_t>(m.cfg.vocab)};
  bo.deadline_ms = d.deadline_ms;
  auto client = std::make_unique<DrafterClient>(rt, bo);
  const bool came_up = client->wait_up(std::chrono::milliseconds(bo.sidecar.start_timeout_ms));
  if (up) *up = came_up;
  return client;
}

SpecParams draft_spec_params(const DraftOptions& d) {
  SpecParams sp;
  if (d.max < 1 || d.max > 15) refuse("--draft-max " + std::to_string(d.max) + " is outside 1..15");
  sp.draft_max = d.max;
  sp.cost_gate = d.cost_gate;
  sp.gate.adaptive = d.gate == "adaptive";
  if (!sp.gate.adaptive) {
    float g = -1;
    try {
      size_t used = 0;
      g = std::stof(d.gate, &used);
      if (used != d.gate.size()) g = -1;
    } catch (const std::exception&) {
    }
    if (!(g >= 0.0f && g <= 1.0f)) refuse("--draft-gate '" + d.gate + "' is neither 'adaptive' nor a number in [0, 1]");
    sp.gate.fixed = g;
  }
  return sp;
}

void validate_sampling(int64_t n_predict, float temp, float top_p) {
  if (n_predict < 0) refuse("-n/--n-predict " + std::to_string(n_predict) + " is negative");
  if (!(temp >= 0.0f) || !std::isfinite(temp)) refuse("--temp must be a finite number >= 0 (0 = greedy)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) refuse("--top-p must be in (0, 1]");
}

}  // namespace ferry
