#include "actors/readers/source_chooser.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "io/errors.hpp"

namespace ferry {

SourceChooser::SourceChooser(size_t n_dirs, SourceChooserConfig cfg) : cfg_(cfg), dirs_(n_dirs) {
  for (auto& d : dirs_) d.rate_bps = cfg_.initial_rate_bps;
}

const SourceChooser::Dir& SourceChooser::at(uint32_t dir) const {
  if (dir >= dirs_.size())
    throw LimitError(fmt::format("source chooser: directory index {} out of range ({} directories)", dir,
                                 dirs_.size()));
  return dirs_[dir];
}
SourceChooser::Dir& SourceChooser::at(uint32_t dir) {
  return const_cast<Dir&>(static_cast<const SourceChooser*>(this)->at(dir));
}

void SourceChooser::set_rate(uint32_t dir, double bps) { at(dir).rate_bps = std::max(bps, 1.0); }
void SourceChooser::set_available(uint32_t dir, bool available) { at(dir).available = available; }
bool SourceChooser::available(uint32_t dir) const { return at(dir).available; }

double SourceChooser::expected_seconds(uint32_t dir, uint64_t bytes) const {
  const Dir& d = at(dir);
  return static_cast<double>(d.queued + bytes) / d.rate_bps + cfg_.latency_s;
}

uint32_t SourceChooser::choose(std::span<const uint32_t> copies, uint64_t bytes) {
  if (copies.empty()) throw LimitError("source chooser: an expert with no copy in any directory");
  bool any_available = std::any_of(copies.begin(), copies.end(), [&](uint32_t d) { return at(d).available; });
  ++choices_;
  if (cfg_.probe_every > 0 && copies.size() > 1) {
    // The stalest idle drive, if it has waited long enough: re-measure it.
    uint32_t probe = UINT32_MAX;
    for (uint32_t d : copies) {
      const Dir& x = at(d);
      if (!x.available || x.queued > 0 || choices_ - x.last_issue < cfg_.probe_every) continue;
      if (probe == UINT32_MAX || x.last_issue < at(probe).last_issue) probe = d;
    }
    if (probe != UINT32_MAX) return probe;
  }
  uint32_t best = copies.front();
  double best_t = std::numeric_limits<double>::infinity();
  for (uint32_t d : copies) {
    if (any_available && !at(d).available) continue;
    double t = expected_seconds(d, bytes);
    if (t < best_t || (t == best_t && d < best)) {
      best = d;
      best_t = t;
    }
  }
  return best;
}

void SourceChooser::on_issue(uint32_t dir, uint64_t bytes) {
  Dir& d = at(dir);
  d.queued += bytes;
  d.last_issue = choices_;
}

void SourceChooser::on_complete(uint32_t dir, uint64_t bytes, uint64_t service_ns, uint32_t inflight) {
  Dir& d = at(dir);
  d.queued -= std::min(d.queued, bytes);
  if (service_ns == 0 || bytes == 0) return;
  double sample = static_cast<double>(bytes) * std::max<uint32_t>(inflight, 1) / (static_cast<double>(service_ns) * 1e-9);
  d.rate_bps = (1 - cfg_.ema_alpha) * d.rate_bps + cfg_.ema_alpha * sample;
}

void SourceChooser::on_fail(uint32_t dir, uint64_t bytes) {
  Dir& d = at(dir);
  d.queued -= std::min(d.queued, bytes);
}

double SourceChooser::rate(uint32_t dir) const { return at(dir).rate_bps; }
uint64_t SourceChooser::queued_bytes(uint32_t dir) const { return at(dir).queued; }

}  // namespace ferry
