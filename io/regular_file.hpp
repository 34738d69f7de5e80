// Opening files that must be regular files (shards, expert files, configs, manifests). A FIFO named as
// a shard would block open(2) until a writer appears, hanging the loader; a device or socket is never
// what the user meant. So the open is non-blocking, the type is checked on the open descriptor (no
// race with a rename), and O_NONBLOCK is cleared again (io_uring would otherwise answer EAGAIN).
#pragma once

#include <cerrno>
#include <filesystem>
#include <string>

namespace ferry {

// The errno open_regular_file reports for a path that exists but is not a regular file.
constexpr int kNotRegularFile = ESPIPE;

// open(path, flags | O_NONBLOCK), then fstat: returns the descriptor (O_NONBLOCK cleared) of a regular
// file, else -1 with errno set (kNotRegularFile when the path is a FIFO, directory, device, socket).
int open_regular_file(const char* path, int flags);

// strerror(err), except kNotRegularFile reads "not a regular file (a FIFO, directory or device)".
std::string open_error_text(int err);

// Throws FormatError "<path>: <what> is not a regular file" when path exists and is anything else;
// for readers that open with std::ifstream (config.json, manifest.json, tokenizer files).
void require_regular_file(const std::filesystem::path& path, const char* what);

}  // namespace ferry
