// `ferry demo`: the README's main job. Makes a small Kimi K3-architecture model on the spot (random
// weights: KDA layers, gated MLA layers, latent MoE, SiTU, attention residuals) in the real Hugging
// Face layout, then generates from it and prints the tokens, the text and the metrics.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "actors/runtime/model_loader.hpp"
#include "apps/ferry/commands.hpp"
#include "io/synth/synth.hpp"
#include "kernels/decoding/generate.hpp"

namespace ferry::cli {
namespace {

struct DemoOptions {
  std::string dir = "demo-model";
  std::string prompt = "The three main financial statements are";
  int64_t n_predict = 32;
  int threads = 0;
  bool keep = false;
};

void demo_main(const DemoOptions& o) {
  namespace fs = std::filesystem;
  const fs::path hf = fs::path(o.dir) / "hf";
  if (!fs::exists(hf / "config.json")) {
    SynthOptions so;
    so.arch = Arch::kimi_k3;
    so.progress = false;
    std::fprintf(stderr, "ferry demo: writing a random Kimi K3-architecture checkpoint to %s\n", hf.c_str());
    synth_checkpoint(hf, so);
  }
  ModelOptions mo;
  mo.dir = hf.string();
  mo.threads = o.threads;
  LoadedModel m = load_model(mo, nullptr);  // a checkpoint: no actors
  const ModelConfig& c = m.cfg;
  std::fprintf(stderr,
               "ferry demo: %s, %lld layers (%lld KDA, %lld gated MLA), hidden %lld, %lld experts top-%lld "
               "(latent %lld), %lld shared, SiTU, AttnRes block %lld; back-end %s\n",
               to_string(c.arch), static_cast<long long>(c.n_layers), static_cast<long long>(c.count(Mixer::kda)),
               static_cast<long long>(c.count(Mixer::mla)), static_cast<long long>(c.hidden),
               static_cast<long long>(c.moe.n_experts), static_cast<long long>(c.moe.top_k),
               static_cast<long long>(c.moe.latent_dim), static_cast<long long>(c.moe.n_shared),
               static_cast<long long>(c.attn_res_block), m.backend->name().c_str());
  std::vector<int32_t> prompt;
  if (m.tokenizer->bos_id() >= 0) prompt.push_back(m.tokenizer->bos_id());
  for (int32_t id : m.tokenizer->encode(o.prompt, false)) prompt.push_back(id);
  auto state = m.model->new_state(static_cast<int64_t>(prompt.size()) + o.n_predict);
  GenerateParams gp;
  gp.n_predict = o.n_predict;
  GenerateMetrics g;
  std::printf("%s", o.prompt.c_str());
  auto toks = generate(*m.model, *state, prompt, gp, g, [&](const GeneratedToken& t) {
    std::printf("%s", m.tokenizer->display_bytes(t.id).c_str());
    std::fflush(stdout);
    return true;
  });
  std::printf("\n\nprompt ids:");
  for (int32_t id : prompt) std::printf(" %d", id);
  std::printf("\ngenerated ids:");
  for (const auto& t : toks) std::printf(" %d", t.id);
  std::printf("\n\nmetrics: prompt %lld tokens in %.3f s | generated %lld | steady decode %.2f tok/s | "
              "generation %.2f tok/s | load %.2f s\n",
              static_cast<long long>(g.prompt_tokens), g.prompt_s, static_cast<long long>(g.generated),
              g.steady_tok_s(), g.generation_tok_s(), m.load_s);
  std::printf("(random weights: the text is noise; the point is the architecture and the pipeline)\n");
  if (!o.keep) fs::remove_all(o.dir);
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* c = app.add_subcommand("demo", "Make a small random Kimi K3-architecture model and generate from it");
  c->add_option("--dir", o->dir, "Where to write the demo model")->capture_default_str();
  c->add_option("-p,--prompt", o->prompt, "Prompt text")->capture_default_str();
  c->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
  c->add_option("-t,--threads", o->threads, "CPU threads (0 = all cores)")->capture_default_str();
  c->add_flag("--keep", o->keep, "Keep the demo model directory afterwards");
  c->callback([o] { demo_main(*o); });
}

}  // namespace ferry::cli
