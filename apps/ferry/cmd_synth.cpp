// ferry synth --arch ARCH --out HF_DIR [dimension overrides] [--usage FILE] [--seed S]
// ferry synth --arch ARCH --prepared MODEL_DIR --expert-dir DIR [--expert-dir DIR ...]
//             [--spine-type q8_0|bf16|f32] [--threads N] [dimension overrides] [--usage FILE] [--seed S]
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "apps/ferry/commands.hpp"
#include "io/errors.hpp"
#include "io/store/sizing.hpp"
#include "io/synth/synth.hpp"
#include "io/synth/synth_prepared.hpp"

namespace ferry {

namespace {

struct SynthArgs {
  std::string arch = "kimi_k31", preset = "small", out, usage, shard_size, prepared, spine_type;
  std::vector<std::string> expert_dirs;
  int threads = 0;
  SynthOptions opt;
  bool quiet = false;
};

void print_tracking(const std::vector<RouterTracking>& tracking) {
  if (tracking.empty()) return;
  double corr = 0, tv = 0;
  fmt::print("router bias fit (selection on fresh random inputs vs usage shares):\n");
  fmt::print("  layer  usage-layer  pearson-r  TV-distance  top-10% share target/measured\n");
  for (const auto& t : tracking) {
    fmt::print("  {:>5}  {:>11}  {:>9.3f}  {:>11.3f}  {:>6.1f}% / {:.1f}%\n", t.layer, t.usage_layer, t.correlation,
               t.tv_distance, 100 * t.top10_target, 100 * t.top10_measured);
    corr += t.correlation;
    tv += t.tv_distance;
  }
  const double n = double(tracking.size());
  fmt::print("  mean r {:.3f}, mean TV distance {:.3f}\n", corr / n, tv / n);
}

void run_prepared(const SynthArgs& a) {
  if (a.expert_dirs.empty()) throw ConfigError("synth --prepared needs at least one --expert-dir");
  if (!a.shard_size.empty()) throw ConfigError("synth --prepared writes no safetensors shards; drop --shard-size");
  SynthPreparedOptions o;
  o.synth = a.opt;
  o.out = a.prepared;
  for (const auto& d : a.expert_dirs) o.expert_dirs.emplace_back(d);
  o.spine = parse_spine_type(a.spine_type.empty() ? "q8_0" : a.spine_type);
  o.threads = a.threads;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = synth_prepared(o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t bytes = r.expert_bytes_written + r.spine_bytes;
  fmt::print("prepared {}: {} experts ({}{}), spine {} tensors ({}); {} threads, {:.1f} s, {:.0f} MB/s; manifest {}\n",
             a.prepared, r.experts, format_bytes(r.expert_bytes_written), r.direct_io ? ", O_DIRECT" : "",
             r.spine_tensors, format_bytes(r.spine_bytes), r.threads, s, double(bytes) / 1e6 / std::max(s, 1e-9),
             r.manifest.string());
  print_tracking(r.tracking);
}

void run(SynthArgs& a) {
  a.opt.arch = parse_synth_arch(a.arch);
  a.opt.full_width = a.preset == "full";
  a.opt.usage = a.usage;
  a.opt.progress = !a.quiet;
  if (a.out.empty() == a.prepared.empty()) throw ConfigError("synth: give exactly one of --out HF_DIR and --prepared MODEL_DIR");
  if (!a.prepared.empty()) return run_prepared(a);
  if (!a.expert_dirs.empty() || a.threads != 0 || !a.spine_type.empty())
    throw ConfigError("synth: --expert-dir, --spine-type and --threads go with --prepared (for --out, run ferry prepare afterwards)");
  if (!a.shard_size.empty()) a.opt.shard_bytes = int64_t(parse_size(a.shard_size, "--shard-size"));
  const auto r = synth_checkpoint(a.out, a.opt);
  fmt::print("wrote {} tensors, {} in {} files to {}\n", r.tensors, format_bytes(r.bytes), r.files.size(), a.out);
  print_tracking(r.tracking);
}

}  // namespace

void add_synth_command(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  auto* c = app.add_subcommand("synth", "write a random checkpoint in the real Hugging Face layout");
  c->add_option("--arch", a->arch, "kimi_k31 | kimi_k3 | kimi_linear | deepseek_v3 | deepseek_v32")->capture_default_str();
  c->add_option("--out", a->out, "output directory (HF layout)");
  c->add_option("--prepared", a->prepared,
                "write the prepared layout (spine.gguf, manifest, expert files) into this MODEL_DIR directly, "
                "the bytes synth --out + prepare would write");
  c->add_option("--expert-dir", a->expert_dirs, "with --prepared: directory for expert files; several split one copy");
  c->add_option("--spine-type", a->spine_type, "with --prepared: q8_0 (default) | bf16 | f32 for spine matrices");
  c->add_option("--threads", a->threads, "with --prepared: expert generator/writer threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--preset", a->preset, "small (CPU-sized, default) | full (K3.1 width: hidden 7168, 896 experts)")
      ->check(CLI::IsMember({"small", "full"}));
  auto& d = a->opt.dims;
  c->add_option("--layers", d.layers, "decoder layers (layer 0 is dense)");
  c->add_option("--experts", d.experts, "routed experts per MoE layer");
  c->add_option("--hidden", d.hidden, "hidden size");
  c->add_option("--top-k", d.top_k, "experts per token");
  c->add_option("--shared", d.shared, "shared experts");
  c->add_option("--moe-inter", d.moe_inter, "routed expert intermediate size");
  c->add_option("--latent", d.latent, "latent MoE width (K3 routed_expert_hidden_size; 0 = none)");
  c->add_option("--dense-inter", d.dense_inter, "dense FFN width (layer 0)");
  c->add_option("--heads", d.heads, "attention heads (MLA/DSA; KDA too unless --kda-heads)");
  c->add_option("--kda-heads", d.kda_heads, "KDA heads");
  c->add_option("--kda-head-dim", d.kda_head_dim, "KDA head dim");
  c->add_option("--q-lora", d.q_lora, "q_lora_rank (0 = plain q_proj)");
  c->add_option("--kv-lora", d.kv_lora, "kv_lora_rank");
  c->add_option("--index-heads", d.index_heads, "DSA indexer heads");
  c->add_option("--index-head-dim", d.index_head_dim, "DSA indexer head dim");
  c->add_option("--index-topk", d.index_topk, "DSA indexer top-k");
  c->add_option("--vocab", d.vocab, "vocabulary size (Kimi: at least the 1024-token test tokenizer)");
  c->add_option("--usage", a->usage, "expert usage counts JSON; fits router biases to follow them")->check(CLI::ExistingFile);
  c->add_option("--seed", a->opt.seed, "random seed")->capture_default_str();
  c->add_option("--shard-size", a->shard_size, "max safetensors shard size (default 5GB, at least 3 shards)");
  c->add_flag("--quiet", a->quiet, "no progress bar");
  c->callback([a] { run(*a); });
}

}  // namespace ferry
