// Picks, for one read, the directory (drive) holding a copy that is expected to finish first:
//   expected = (queued bytes + this read's bytes) / measured rate + latency.
// Rates start from configuration and become an exponential moving average of measured reads, so a
// drive that slows down gets fewer reads. A drive whose estimate is stale (nothing issued to it for
// `probe_every` choices and nothing queued on it) gets the next read it holds a copy of: a probe, so
// a drive measured slow once is measured again and wins its share back when it is fast. Without the
// probe, a drive whose rate collapsed might never be chosen, and never re-measured. Deterministic (it
// counts choices, not time). Pure class: the reader supervisor owns one.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ferry {

struct SourceChooserConfig {
  double initial_rate_bps = 2.0e9;  // a PCIe 4 NVMe's sustained read rate, until measured
  double latency_s = 100e-6;        // per-read fixed cost (NVMe ~80-100 us at queue depth 1)
  double ema_alpha = 0.3;           // weight of a new sample; 0.3 forgets a change within ~10 reads
  uint32_t probe_every = 64;        // re-measure an idle drive after this many choices; 0 = never probe
};

class SourceChooser {
 public:
  SourceChooser(size_t n_dirs, SourceChooserConfig cfg = {});

  void set_rate(uint32_t dir, double bps);
  // Unavailable directories (a reader being restarted) are skipped while another copy exists.
  void set_available(uint32_t dir, bool available);
  bool available(uint32_t dir) const;

  // Returns the best of `copies` (indices < n_dirs). Throws ferry::LimitError when copies is empty or
  // names an unknown directory. Ties go to the lower index.
  // Counts as one choice for the probe rule.
  uint32_t choose(std::span<const uint32_t> copies, uint64_t bytes);
  double expected_seconds(uint32_t dir, uint64_t bytes) const;

  void on_issue(uint32_t dir, uint64_t bytes);
  // service_ns: submission to completion at the reader; inflight: reads sharing the drive meanwhile
  // (itself included) — n concurrent reads of b bytes finishing in t mean a drive rate of n*b/t.
  void on_complete(uint32_t dir, uint64_t bytes, uint64_t service_ns, uint32_t inflight);
  void on_fail(uint32_t dir, uint64_t bytes);

  double rate(uint32_t dir) const;
  uint64_t queued_bytes(uint32_t dir) const;
  size_t size() const { return dirs_.size(); }

 private:
  struct Dir {
    double rate_bps = 0;
    uint64_t queued = 0;
    bool available = true;
    uint64_t last_issue = 0;  // the choice count at this drive's last issued read
  };
  const Dir& at(uint32_t dir) const;
  Dir& at(uint32_t dir);

  SourceChooserConfig cfg_;
  std::vector<Dir> dirs_;
  uint64_t choices_ = 0;
};

}  // namespace ferry
