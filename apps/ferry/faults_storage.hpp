// Storage scenarios of `ferry faults` on a prepared model: a reader killed mid-read, EIO on one drive,
// a slow drive, corrupted and zeroed experts (with or without a replica, as the store has), a drive
// vanishing. Each row says the faults injected, the recoveries, and the output mismatches against the
// fault-free run (0 expected), or the clear error that ended a run where no good copy existed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "actors/runtime/model_loader.hpp"
#include "kernels/decoding/generate.hpp"

namespace ferry {
class Runtime;
}

namespace ferry::cli {

struct StorageRow {
  std::string name;
  uint64_t faults = 0, recoveries = 0;
  int64_t mismatches = 0;
  std::string error;  // the error that ended the run ("" = it completed)
};

// `mismatches` counts positions that differ from the fault-free reference. Each run's streaming actors
// run in `rt`, the process's runtime.
std::vector<StorageRow> run_storage_faults(Runtime& rt, const ModelOptions& base, int64_t n, uint64_t seed,
                                           std::span<const int32_t> prompt,
                                           const std::function<int64_t(const std::vector<GeneratedToken>&)>& mismatches);

}  // namespace ferry::cli
