// `ferry synth --prepared`: a random model written straight in the prepared layout (docs/FORMATS.md:
// MODEL_DIR/spine.gguf + manifest.json + L<l>-E<e>.bin over the expert dirs), byte for byte what
// `ferry synth --out HF` followed by `ferry prepare` writes, without the routed experts ever existing
// in Hugging Face form: a full-width K3.1 layer is 15.7 GB of experts, and synth-then-prepare needs
// them on disk twice. Experts are generated N at a time, each into memory and then into its own
// file (O_DIRECT where possible); the non-routed tensors are generated in memory, in parallel with
// the experts, and written by prepare's own spine writer.
// Not supported here: replicas (--replicas / --replica-budget; run prepare for those) and resuming
// an interrupted run (a re-run rewrites everything; the output is deterministic).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include "io/store/sizing.hpp"
#include "io/synth/synth.hpp"

namespace ferry {

struct SynthPreparedOptions {
  SynthOptions synth;                               // arch, dims, seed, usage, progress (shard_bytes unused)
  std::filesystem::path out;                        // MODEL_DIR
  std::vector<std::filesystem::path> expert_dirs;   // primaries: their union holds every expert once
  SpineType spine = SpineType::q8_0;
  int threads = 0;                                  // expert writers; 0 = hardware threads
  // Free bytes of a path's filesystem (default statvfs), injectable for tests like PrepareOptions'.
  std::function<int64_t(const std::filesystem::path&)> free_bytes;
};

struct SynthPreparedResult {
  int64_t experts = 0;
  int64_t expert_bytes_written = 0;
  int64_t spine_tensors = 0;
  int64_t spine_bytes = 0;
  int threads = 0;
  bool direct_io = false;                // every expert file went through O_DIRECT
  std::vector<RouterTracking> tracking;  // empty without a usage file
  std::filesystem::path manifest;
};

// Throws ConfigError (bad options / dimensions), LimitError (not enough free space, checked before
// anything is written), FormatError (I/O, naming the file).
SynthPreparedResult synth_prepared(const SynthPreparedOptions& opt);

}  // namespace ferry
