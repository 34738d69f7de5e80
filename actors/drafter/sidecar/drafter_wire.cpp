#include "actors/drafter/sidecar/drafter_wire.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace ferry::wire {
namespace {

using clock = std::chrono::steady_clock;

// Milliseconds poll() may wait: -1 without a deadline, 0 once it passed.
int wait_ms(const Deadline& d) {
  if (!d) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*d - clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left + 1, 1 << 30));
}

// Waits until fd is ready for `events`; ok, timeout or error.
Io wait_fd(int fd, short events, const Deadline& d, std::string* detail) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, wait_ms(d));
    if (r > 0) return Io::ok;  // readable, writable, or hung up: the read/write says which
    if (r == 0) {
      if (d && clock::now() >= *d) return Io::timeout;
      continue;
    }
    if (errno == EINTR) continue;
    if (detail) *detail = std::strerror(errno);
    return Io::error;
  }
}

// Reads exactly n bytes. `started`: part of a frame was read before (EOF then means a dropped frame).
Io read_exact(int fd, char* buf, size_t n, bool started, const Deadline& d, std::string* detail) {
  size_t got = 0;
  while (got < n) {
    if (Io w = wait_fd(fd, POLLIN, d, detail); w != Io::ok) return w;
    const ssize_t r = ::recv(fd, buf + got, n - got, 0);
    if (r == 0) {
      if (detail) *detail = "got " + std::to_string(got) + " of " + std::to_string(n) + " bytes";
      return started || got > 0 ? Io::closed_mid_frame : Io::closed;
    }
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (detail) *detail = std::strerror(errno);
      return errno == ECONNRESET ? (started || got > 0 ? Io::closed_mid_frame : Io::closed) : Io::error;
    }
    got += static_cast<size_t>(r);
  }
  return Io::ok;
}

}  // namespace

const char* to_string(Io s) {
  switch (s) {
    case Io::ok: return "ok";
    case Io::closed: return "connection closed";
    case Io::closed_mid_frame: return "connection dropped in the middle of a frame";
    case Io::timeout: return "deadline passed";
    case Io::too_large: return "frame length over the 16 MiB limit";
    case Io::bad_message: return "frame is not a drafter Envelope";
    case Io::error: return "socket error";
  }
  return "?";
}

Io write_raw(int fd, const std::string& bytes, const Deadline& d) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    if (Io w = wait_fd(fd, POLLOUT, d, nullptr); w != Io::ok) return w;
    const ssize_t r = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno == EPIPE || errno == ECONNRESET ? Io::closed : Io::error;
    }
    sent += static_cast<size_t>(r);
  }
  return Io::ok;
}

Io write_frame(int fd, const ferry::drafter::Envelope& e, const Deadline& d, std::string* detail) {
  std::string body;
  if (!e.SerializeToString(&body)) {
    if (detail) *detail = "cannot serialize";
    return Io::error;
  }
  std::string frame(4, '\0');
  const uint32_t n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) frame[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  frame += body;
  const Io r = write_raw(fd, frame, d);
  if (r != Io::ok && detail && detail->empty()) *detail = to_string(r);
  return r;
}

Io read_frame(int fd, ferry::drafter::Envelope& e, const Deadline& d, std::string* detail) {
  unsigned char len[4];
  if (Io r = read_exact(fd, reinterpret_cast<char*>(len), 4, false, d, detail); r != Io::ok) return r;
  const uint32_t n = uint32_t{len[0]} | uint32_t{len[1]} << 8 | uint32_t{len[2]} << 16 | uint32_t{len[3]} << 24;
  if (n > kMaxFrameBytes) {
    if (detail) *detail = "length prefix " + std::to_string(n);
    return Io::too_large;
  }
  std::string body(n, '\0');
  if (Io r = read_exact(fd, body.data(), n, true, d, detail); r != Io::ok) return r;
  if (!e.ParseFromString(body)) {
    if (detail) *detail = std::to_string(n) + "-byte frame";
    return Io::bad_message;
  }
  return Io::ok;
}

}  // namespace ferry::wire
