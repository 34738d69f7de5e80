// Framing of the drafter wire protocol (messages/drafter.proto): a 4-byte little-endian length, then
// one serialized Envelope, over a Unix stream socket. Reads and writes honour a deadline (poll), never
// raise SIGPIPE, and say precisely what went wrong, so both sides can log a clear line.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "messages/drafter.pb.h"

namespace ferry::wire {

using Deadline = std::optional<std::chrono::steady_clock::time_point>;  // nullopt: wait forever

constexpr uint32_t kMaxFrameBytes = 16u << 20;
constexpr uint32_t kProtocolVersion = ferry::drafter::CURRENT;

enum class Io : uint8_t {
  ok,
  closed,            // the peer closed the connection between frames
  closed_mid_frame,  // ... in the middle of a frame (a dropped connection)
  timeout,           // the deadline passed first
  too_large,         // a length prefix over kMaxFrameBytes (garbage)
  bad_message,       // the bytes are not an Envelope (garbage)
  error,             // a socket error (detail: strerror)
};
const char* to_string(Io s);

Io write_frame(int fd, const ferry::drafter::Envelope& e, const Deadline& deadline, std::string* detail = nullptr);
Io read_frame(int fd, ferry::drafter::Envelope& e, const Deadline& deadline, std::string* detail = nullptr);

// Writes raw bytes as they are (fault injection: garbage frames).
Io write_raw(int fd, const std::string& bytes, const Deadline& deadline);

}  // namespace ferry::wire
