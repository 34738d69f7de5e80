// The one size syntax of every ferry flag and report (docs/USAGE.md "Sizes"): a number followed by a
// unit, decimal or binary, spelled out so nobody has to guess:
//   B; KB MB GB TB = 10^3, 10^6, 10^9, 10^12 bytes; KiB MiB GiB TiB = 2^10, 2^20, 2^30, 2^40 bytes.
// Units are case-insensitive ("gb", "GiB"), a space may separate them from the number ("1.5 GB").
// A bare number is refused where a size is meant (is 96 bytes or 96 GB meant?), and so are the
// one-letter forms "96G"/"96M" (GB or GiB?). Counts (--cache-experts N) are not sizes.
// Sizes print in decimal units with the same spelling ("17.55 MB"), so a printed size reads back.
#pragma once

#include <cstdint>
#include <string>

namespace ferry {

// Bytes of `text`. Throws UsageError (a ConfigError) naming `flag` (e.g. "--host-pool"; "" for none), the text and
// the accepted forms.
uint64_t parse_size(const std::string& text, const std::string& flag = "");

// "512 B", "4.10 KB", "17.55 MB", "1.45 TB": decimal units, three significant digits.
std::string format_bytes(int64_t bytes);

// A size as a flag value that parses back to at most `bytes`: whole MB ("118430MB"), or bytes when
// under 1 MB ("4096B").
std::string size_flag_value(uint64_t bytes);

}  // namespace ferry
