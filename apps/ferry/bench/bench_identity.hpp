// The identity check of `ferry bench`: a run's output against its group's reference run, token id by
// token id AND logit hash by logit hash (the `--trace-hash` files: "position id fnv1a64(logits)"), so
// two runs that pick the same tokens from different numbers are told apart.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ferry::bench {

struct TraceRow {
  int64_t pos = 0;
  int32_t id = 0;
  uint64_t hash = 0;
};

// Reads a --trace-hash file. Throws FormatError naming the file and line.
std::vector<TraceRow> read_trace_hash(const std::filesystem::path& file);

struct Identity {
  bool identical = false;
  int64_t over = 0;        // positions compared and equal (identical) / before the first difference
  int64_t first_diff = -1; // index into the generated tokens of the first difference, -1 if none
  int64_t position = -1;   // its sequence position (prompt tokens + index)
  std::string what;        // "token" or "logits"
  std::string text;        // "identical over 128" / "differs at generated token 3 (position 27): token 5 vs 9"

  nlohmann::json to_json() const;
};

// Compares over the shorter sequence (a shorter run is checked as a prefix of the reference).
Identity compare_traces(const std::vector<TraceRow>& reference, const std::vector<TraceRow>& run);

}  // namespace ferry::bench
