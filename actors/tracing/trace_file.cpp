#include "actors/tracing/trace_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/delimited_message_util.h>

#include "io/errors.hpp"

namespace ferry {

TraceFile read_trace_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(fmt::format("trace file {}: cannot open: {}", path, std::strerror(errno)));
  google::protobuf::io::FileInputStream in(fd);
  in.SetCloseOnDelete(true);
  TraceFile tf;
  for (size_t i = 0;; ++i) {
    trace::Record rec;
    bool clean_eof = false;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&rec, &in, &clean_eof)) {
      if (clean_eof) break;
      throw FormatError(fmt::format("trace file {}: record {} is truncated or malformed", path, i));
    }
    if (i == 0) {
      if (!rec.has_header()) throw FormatError(fmt::format("trace file {}: first record is not a Header", path));
      tf.header = rec.header();
    } else if (rec.has_event()) {
      tf.events.push_back(rec.event());
    } else {
      throw FormatError(fmt::format("trace file {}: record {} is not an Event", path, i));
    }
  }
  if (tf.header.format().empty()) throw FormatError(fmt::format("trace file {}: empty (no Header record)", path));
  return tf;
}

}  // namespace ferry
