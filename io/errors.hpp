// Errors that cross module boundaries. Bad input (a malformed file, a config that names an unknown
// model, a prompt over the context) is reported by throwing one of these with a message that names
// the file, tensor, field or limit; the apps print e.what() and exit non-zero. Between actors the
// same conditions travel as caf::error values (messages/errors.hpp).
#pragma once

#include <stdexcept>
#include <string>

namespace ferry {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A file whose bytes do not follow its format (truncated, bad header, offsets out of range...).
struct FormatError : Error {
  using Error::Error;
};
// A config.json that is unknown, incomplete or self-contradictory.
struct ConfigError : Error {
  using Error::Error;
};
// Bad flags or a request that cannot fit, found before anything loads (an unknown drafter, a missing
// file, a size without a unit, a context too long for the memory). The apps exit with status 2.
struct UsageError : ConfigError {
  using ConfigError::ConfigError;
};
// A tensor that is missing or has the wrong dtype/shape for the model being built.
struct TensorError : Error {
  using Error::Error;
};
// A request outside what the engine was set up for (prompt longer than the context, ...).
struct LimitError : Error {
  using Error::Error;
};

}  // namespace ferry
