// The expert store: one file per routed expert (`L<layer>-E<expert>.bin`, docs/FORMATS.md), spread
// over one or more directories (drives), and the manifest that says which directory holds which copy
// and what its xxh64 is. Writing (ferry prepare) is io/store/expert_store_prepare.hpp; this header is the
// format: names, geometry, manifest, usage counts, placement and verification.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/formats/model_config.hpp"

namespace ferry {

class Progress;

constexpr int64_t kExpertFileAlign = 4096;  // O_DIRECT alignment of every expert file

// "L<layer>-E<expert>.bin" (0-based decoder layer, 0-based expert id).
std::string expert_file_name(int layer, int expert);
// Parses a name made by expert_file_name; false for anything else.
bool parse_expert_file_name(const std::string& name, int& layer, int& expert);

// Payload bytes of one expert (gate, up, down in ggml MXFP4 blocks) and the padded file size.
int64_t expert_payload_bytes(const ModelConfig& c);
int64_t expert_file_bytes(const ModelConfig& c);

// xxh64 (seed 0) of a file's bytes; sets *size when given. Throws FormatError naming the file. With
// `direct` the file is read with O_DIRECT (as the streaming engine reads it) where the filesystem
// allows; *used_direct says whether it did.
uint64_t xxh64_file(const std::filesystem::path& p, int64_t* size = nullptr, bool direct = false,
                    bool* used_direct = nullptr);
uint64_t xxh64_bytes(const void* data, size_t n);

// Part hashes: the xxh64 (seed 0) of each consecutive kPartHashBytes of an expert file (the last part
// takes the rest). A reader that copies a part can check it while the bytes are still in its cache, in
// parallel over parts, instead of a second pass over the whole file after the last part landed.
inline constexpr uint64_t kPartHashBytes = 2u << 20;
std::vector<uint64_t> xxh64_parts(const void* data, size_t n, uint64_t part_bytes = kPartHashBytes);
std::string hex64(uint64_t v);             // 16 lower-case hex digits
uint64_t parse_hex64(const std::string& s);  // throws FormatError

struct ExpertKey {
  int32_t layer = 0, expert = 0;
  bool operator==(const ExpertKey&) const = default;
};
inline uint64_t key_id(ExpertKey k) { return (uint64_t(uint32_t(k.layer)) << 32) | uint32_t(k.expert); }

struct ExpertEntry {
  int32_t layer = 0, expert = 0;
  uint64_t xxh64 = 0;
  std::vector<uint16_t> dirs;  // indexes into Manifest::dirs; dirs[0] is the primary copy
  std::vector<uint64_t> part_xxh64;  // "parts": per Manifest::part_bytes of the file; empty when unknown
};

struct Manifest {
  std::string format = "ferry-experts/1";
  std::string config_hash;  // hex64 of the config.json bytes
  int64_t n_layers = 0, n_experts = 0;
  int64_t expert_bytes = 0, file_bytes = 0;
  std::vector<std::string> dirs;  // absolute directory paths
  std::string spine_file = "spine.gguf";
  int64_t spine_bytes = 0;
  uint64_t spine_xxh64 = 0;
  int64_t part_bytes = 0;  // the span of each entry's part hashes (kPartHashBytes); 0: no part hashes
  std::vector<ExpertEntry> experts;
};

// The manifest of a prepared model of config `c` (config_text: its config.json bytes) whose spine file
// is spine_bytes long with xxh64 spine_xxh64, over the expert directories `dirs`: everything but the
// expert entries, which the writer adds as it writes (or finds) each file. The one place both `ferry
// prepare` and synth assemble it.
Manifest make_manifest(const ModelConfig& c, const std::string& config_text, std::vector<std::string> dirs,
                       int64_t spine_bytes, uint64_t spine_xxh64);

// Throws FormatError naming the file and field.
Manifest read_manifest(const std::filesystem::path& file);
// Atomic: writes file.tmp, fsyncs, renames.
void write_manifest(const std::filesystem::path& file, const Manifest& m);

// How write_file_atomic writes. direct: through O_DIRECT when the data's address, its size and the
// filesystem allow it (else buffered, silently). sync_dir: fsync the directory after the rename (a
// caller renaming many files into one directory passes false and calls fsync_directory once).
// unique_tmp: the temporary is path.<pid>.tmp instead of path.tmp, for files two processes may save at
// once (usage.json); a resumable writer (prepare) keeps the fixed name so a rerun replaces a leftover.
struct AtomicWrite {
  bool direct = false;
  bool sync_dir = true;
  bool unique_tmp = false;
};
// THE atomic file writer: path.tmp (see unique_tmp) created, written, fdatasync'ed, renamed over path (then the
// directory fsync'ed, per `how`). Returns whether O_DIRECT was used. Throws FormatError naming the file.
bool write_file_atomic(const std::filesystem::path& path, const void* data, size_t n, AtomicWrite how = {});
// fsync of a directory (makes renames in it durable). Throws FormatError naming it.
void fsync_directory(const std::filesystem::path& dir);

// Per-(layer, expert) usage counts, keyed by key_id. File format: a JSON object
// {"L<layer>-E<expert>.bin": count, ...} (../shared/data/k3-expert-usage-*.json). Its layer numbers
// are 0-based decoder indexes like our file names: for K3 (93 layers, layer 0 dense) they run 1..92,
// exactly the MoE layers. Throws FormatError naming the file and key.
using UsageCounts = std::unordered_map<uint64_t, int64_t>;
UsageCounts load_usage(const std::filesystem::path& file);
// Writes counts in that format (keys in layer, expert order), atomically.
void write_usage(const std::filesystem::path& file, const UsageCounts& counts);
// The usage counts a prepared model keeps next to its manifest: written by `ferry prepare --replicas`
// and `ferry synth --prepared --usage`, updated by streaming runs; they seed the expert caches.
inline std::filesystem::path usage_file(const std::filesystem::path& model_dir) { return model_dir / "usage.json"; }

// ---- placement ----
struct PlacementDir {
  std::filesystem::path path;
  bool primary = false;  // holds a share of the one-copy-of-everything set (--expert-dir)
  int64_t budget = -1;   // bytes this directory may hold in all (primaries + replicas); -1 = no cap
};

// Assigns every expert to directories. Primary directories split the experts between them (each
// expert exactly once; with usage counts the hot experts are dealt round-robin so traffic spreads
// evenly; without, round-robin in key order); then every directory with a budget gets replicas of
// the most-used experts it does not already hold, in usage order (count descending, then layer,
// expert), until its budget is spent. Returns, per expert in `experts` order, its directory indexes
// (primary first). Throws LimitError when the primaries cannot hold every expert within budgets.
std::vector<std::vector<uint16_t>> place_experts(const std::vector<ExpertKey>& experts, int64_t file_bytes,
                                                 const std::vector<PlacementDir>& dirs, const UsageCounts* usage);

// ---- verification ----
enum class VerifyMode : uint8_t { sizes, sample, full };

struct VerifyOptions {
  VerifyMode mode = VerifyMode::sizes;
  int64_t sample = 0;     // experts to checksum in sample mode (all their copies)
  uint64_t seed = 0;      // sample selection
};

struct BadCopy {
  std::string file;       // the bad copy's path
  std::string problem;    // "missing", "size 123 != 4096", "xxh64 ... != manifest ..."
  std::string good_copy;  // a verified good copy of the same expert, or "" when none
};

struct VerifyReport {
  int64_t files_checked = 0;  // copies looked at
  int64_t files_hashed = 0;
  int64_t bytes_hashed = 0;
  int64_t hashed_direct = 0;  // of files_hashed, read with O_DIRECT (the rest: the filesystem refused it)
  std::vector<BadCopy> bad;
  bool ok() const { return bad.empty(); }
};

// Checks model_dir/manifest.json against the files: every copy exists with the right size; in
// sample/full mode the chosen experts' copies are hashed, and each bad copy names a good one.
VerifyReport verify_store(const std::filesystem::path& model_dir, const VerifyOptions& opt, Progress* progress);

}  // namespace ferry
