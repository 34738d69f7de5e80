#include "apps/ferry/bench/bench_identity.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "io/errors.hpp"

namespace ferry::bench {

std::vector<TraceRow> read_trace_hash(const std::filesystem::path& file) {
  std::ifstream f(file);
  if (!f) throw FormatError("cannot read trace-hash file " + file.string());
  std::vector<TraceRow> rows;
  std::string line;
  for (int64_t no = 1; std::getline(f, line); ++no) {
    if (line.empty()) continue;
    std::istringstream ss(line);
    TraceRow r;
    std::string hash;
    if (!(ss >> r.pos >> r.id >> hash))
      throw FormatError(fmt::format("{}:{}: expected 'position id hash', got '{}'", file.string(), no, line));
    try {
      size_t used = 0;
      r.hash = std::stoull(hash, &used, 16);
      if (used != hash.size()) throw std::invalid_argument(hash);
    } catch (const std::logic_error&) {
      throw FormatError(fmt::format("{}:{}: '{}' is not a hexadecimal hash", file.string(), no, hash));
    }
    rows.push_back(r);
  }
  return rows;
}

Identity compare_traces(const std::vector<TraceRow>& ref, const std::vector<TraceRow>& run) {
  Identity d;
  const size_t n = std::min(ref.size(), run.size());
  for (size_t i = 0; i < n; ++i) {
    if (ref[i].id != run[i].id || ref[i].hash != run[i].hash) {
      d.first_diff = static_cast<int64_t>(i);
      d.position = run[i].pos;
      d.over = static_cast<int64_t>(i);
      if (ref[i].id != run[i].id) {
        d.what = "token";
        d.text = fmt::format("differs at generated token {} (position {}): token {} vs reference {}", i, run[i].pos,
                             run[i].id, ref[i].id);
      } else {
        d.what = "logits";
        d.text = fmt::format("differs at generated token {} (position {}): same token {}, logit hash {:016x} vs {:016x}",
                             i, run[i].pos, run[i].id, run[i].hash, ref[i].hash);
      }
      return d;
    }
  }
  // Over the shorter of the two: a run of -n 128 is checked against a -n 512 reference as a prefix.
  // A run that stopped early shows in its "generated" count.
  d.over = static_cast<int64_t>(n);
  d.identical = n > 0;
  if (n == 0) {
    d.text = "nothing to compare (no generated tokens)";
    return d;
  }
  d.text = fmt::format("identical over {}", n);
  return d;
}

nlohmann::json Identity::to_json() const {
  nlohmann::json j;
  j["identical"] = identical;
  j["over"] = over;
  j["text"] = text;
  if (first_diff >= 0) {
    j["first_diff"] = first_diff;
    j["position"] = position;
    j["what"] = what;
  }
  return j;
}

}  // namespace ferry::bench
