#include "io/units.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>

#include "io/errors.hpp"

namespace ferry {
namespace {

std::string upper(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

// 0 when `unit` (upper case, no space) is not a unit.
double unit_bytes(const std::string& unit) {
  static const char* const dec[] = {"B", "KB", "MB", "GB", "TB"};
  static const char* const bin[] = {"", "KIB", "MIB", "GIB", "TIB"};
  for (int i = 0; i < 5; ++i) {
    if (unit == dec[i]) return std::pow(1000.0, i);
    if (i > 0 && unit == bin[i]) return std::pow(1024.0, i);
  }
  return 0;
}

[[noreturn]] void refuse(const std::string& flag, const std::string& text, const std::string& why) {
  throw UsageError(fmt::format("{}'{}' is not a size: {} (write e.g. 512MB, 96GB = 96x10^9 bytes, 96GiB = 96x2^30 "
                                "bytes; B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)",
                                flag.empty() ? "" : flag + ": ", text, why));
}

}  // namespace

uint64_t parse_size(const std::string& text, const std::string& flag) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    refuse(flag, text, "it does not start with a number");
  }
  if (text.find_first_of("xXpP") < pos || text.find_first_not_of(" 0123456789.eE+-") < pos)
    refuse(flag, text, "write the number in decimal");
  std::string unit = text.substr(pos);
  if (!unit.empty() && unit[0] == ' ') unit.erase(0, 1);
  unit = upper(unit);
  if (unit.empty()) refuse(flag, text, "a bare number has no unit");
  if (unit.size() == 1 && std::string("KMGT").find(unit[0]) != std::string::npos)
    refuse(flag, text, "'" + unit + "' could mean " + unit + "B (decimal) or " + unit + "iB (binary)");
  const double mul = unit_bytes(unit);
  if (mul == 0) refuse(flag, text, "unknown unit '" + text.substr(pos) + "'");
  if (!std::isfinite(v) || v < 0) refuse(flag, text, "it is negative or not finite");
  const double bytes = std::floor(v * mul + 0.5);
  if (bytes >= 9.2e18) refuse(flag, text, "it is too large");
  return static_cast<uint64_t>(bytes);
}

std::string format_bytes(int64_t b) {
  static const char* const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  double v = double(b);
  int u = 0;
  while (std::fabs(v) >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", b);
  return fmt::format("{:.{}f} {}", v, std::fabs(v) < 10 ? 2 : std::fabs(v) < 100 ? 1 : 0, units[u]);
}

std::string size_flag_value(uint64_t bytes) {
  if (bytes < 1'000'000) return fmt::format("{}B", bytes);
  return fmt::format("{}MB", bytes / 1'000'000);
}

}  // namespace ferry
