#include "actors/drafter/drafter_sidecar.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include "actors/drafter/sidecar/drafter_core.hpp"
#include "actors/drafter/sidecar/drafter_wire.hpp"
#include "io/errors.hpp"
#include "io/tokenizers/tokenizer_text.hpp"

extern char** environ;

namespace ferry {

namespace pb = ferry::drafter;
using clock_type = std::chrono::steady_clock;

const char* to_string(SidecarFailure f) {
  switch (f) {
    case SidecarFailure::start: return "cannot start";
    case SidecarFailure::version: return "version mismatch";
    case SidecarFailure::crash: return "crash";
    case SidecarFailure::timeout: return "timeout";
    case SidecarFailure::garbage: return "garbage";
  }
  return "?";
}

Sidecar::Sidecar(const SidecarOptions& o, const SidecarTarget& t) : target_(t) {
  spawn(o);
  handshake(clock_type::now() + std::chrono::milliseconds(o.start_timeout_ms));
}

Sidecar::~Sidecar() {
  if (fd_ >= 0) ::close(fd_);
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);  // also ends a SIGSTOPped sidecar
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

void Sidecar::spawn(const SidecarOptions& o) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw SidecarError(SidecarFailure::start, std::string("socketpair: ") + std::strerror(errno));
  if (sv[1] == 3) {  // dup2(3, 3) would keep close-on-exec set
    const int moved = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    ::close(sv[1]);
    sv[1] = moved;
  }
  std::vector<std::string> args{o.exe};
  args.insert(args.end(), o.args.begin(), o.args.end());
  args.insert(args.end(), {"--fd", "3"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  const int rc = ::posix_spawn(&pid_, o.exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    pid_ = -1;
    throw SidecarError(SidecarFailure::start, "cannot start drafter sidecar " + o.exe + ": " + std::strerror(rc));
  }
  fd_ = sv[0];
}

std::string Sidecar::exit_status() {
  if (pid_ <= 0) return "not started";
  int st = 0;
  for (int i = 0; i < 50 && !reaped_; ++i) {  // a closed socket usually means the process is exiting
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!reaped_) return "still running";
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("killed by signal ") + ::strsignal(WTERMSIG(st));
  return "ended";
}

void Sidecar::handshake(clock_type::time_point deadline) {
  pb::Envelope hi;
  auto* h = hi.mutable_hello();
  h->set_protocol_version(wire::kProtocolVersion);
  h->set_name("ferry");
  const std::string my_id = tokenizer_identity(target_.tokenizer);
  h->set_tokenizer_id(my_id);
  h->set_vocab_size(static_cast<uint32_t>(target_.vocab));
  std::string detail;
  wire::Io r = wire::write_frame(fd_, hi, deadline, &detail);
  pb::Envelope in;
  if (r == wire::Io::ok) r = wire::read_frame(fd_, in, deadline, &detail);
  const std::string who = "drafter sidecar (pid " + std::to_string(pid_) + ")";
  if (r == wire::Io::timeout) throw SidecarError(SidecarFailure::start, who + " sent no hello in time");
  if (r != wire::Io::ok)
    throw SidecarError(SidecarFailure::start, who + " ended before the handshake: " + wire::to_string(r) + ", " +
                                                  exit_status());
  if (in.has_error())
    throw SidecarError(in.error().code() == pb::VERSION_MISMATCH ? SidecarFailure::version : SidecarFailure::start,
                       who + " refused the handshake: " + in.error().message());
  if (!in.has_hello()) throw SidecarError(SidecarFailure::garbage, who + " answered the hello with something else");
  if (in.hello().protocol_version() != wire::kProtocolVersion)
    throw SidecarError(SidecarFailure::version, who + " speaks protocol version " +
                                                    std::to_string(in.hello().protocol_version()) + ", ferry speaks " +
                                                    std::to_string(wire::kProtocolVersion));
  name_ = in.hello().name();
  const std::string& their_id = in.hello().tokenizer_id();
  text_mode_ = their_id != my_id && their_id != "ids" && target_.tokenizer != nullptr;
}

DraftProposal Sidecar::propose(std::span<const int32_t> history, int max_tokens, float gate,
                               clock_type::time_point deadline) {
  pb::Envelope req;
  auto* rq = req.mutable_propose();
  rq->set_seq(++seq_);
  rq->set_max_tokens(static_cast<uint32_t>(max_tokens));
  rq->set_min_confidence(gate);
  rq->set_text_mode(text_mode_);
  if (text_mode_)
    rq->set_text(target_.tokenizer->display(std::vector<int32_t>(history.begin(), history.end())));
  else
    rq->mutable_history()->Add(history.begin(), history.end());
  std::string detail;
  wire::Io r = wire::write_frame(fd_, req, deadline, &detail);
  pb::Envelope in;
  if (r == wire::Io::ok) r = wire::read_frame(fd_, in, deadline, &detail);
  const std::string who = "drafter sidecar (pid " + std::to_string(pid_) + ")";
  switch (r) {
    case wire::Io::ok: break;
    case wire::Io::timeout: throw SidecarError(SidecarFailure::timeout, who + " missed the call deadline");
    case wire::Io::too_large:
    case wire::Io::bad_message:
      throw SidecarError(SidecarFailure::garbage, who + " sent garbage: " + wire::to_string(r) + " (" + detail + ")");
    default:
      throw SidecarError(SidecarFailure::crash, who + " closed the connection: " + wire::to_string(r) + ", " +
                                                    exit_status());
  }
  auto garbage = [&](const std::string& why) { return SidecarError(SidecarFailure::garbage, who + ": " + why); };
  if (in.has_error()) throw garbage("answered with an error: " + in.error().message());
  if (!in.has_proposal()) throw garbage("answered with something other than a proposal");
  const pb::Proposal& p = in.proposal();
  if (p.seq() != seq_) throw garbage("answered request " + std::to_string(p.seq()) + ", not " + std::to_string(seq_));
  if (p.tokens_size() > max_tokens)
    throw garbage(std::to_string(p.tokens_size()) + " tokens for a request of at most " + std::to_string(max_tokens));
  std::vector<std::string> pieces;
  DraftProposal out;
  for (const pb::Token& t : p.tokens()) {
    if (!(t.confidence() >= 0.0f && t.confidence() <= 1.0f))
      throw garbage("confidence " + std::to_string(t.confidence()) + " outside [0, 1]");
    if (!text_mode_ && (t.id() < 0 || t.id() >= target_.vocab))
      throw garbage("out-of-vocabulary id " + std::to_string(t.id()) + " (vocabulary 0.." +
                    std::to_string(target_.vocab - 1) + ")");
    out.ids.push_back(t.id());
    out.conf.push_back(t.confidence());
    pieces.push_back(t.text());
  }
  if (!text_mode_) return out;
  DraftProposal bridged = from_text(pieces, out.conf);
  if (static_cast<int>(bridged.ids.size()) > max_tokens) {
    bridged.ids.resize(static_cast<size_t>(max_tokens));
    bridged.conf.resize(static_cast<size_t>(max_tokens));
  }
  return bridged;
}


// Text bridge: the drafter's tokens as bytes, re-tokenized with the target tokenizer. A target token's
// confidence is the lowest of the drafter tokens its bytes overlap.
DraftProposal Sidecar::from_text(const std::vector<std::string>& pieces, const std::vector<float>& conf) const {
  std::string text;
  std::vector<size_t> ends;
  for (const auto& p : pieces) ends.push_back((text += p).size());
  if (auto bad = utf8_error_offset(text)) text.resize(*bad);  // keep the valid prefix (a token may end mid-character)
  DraftProposal out;
  std::vector<int32_t> ids;
  try {
    ids = target_.tokenizer->encode(text, false);
  } catch (const Error&) {
    return out;  // not valid UTF-8 inside: no proposal
  }
  size_t at = 0;
  for (int32_t id : ids) {
    const size_t len = target_.tokenizer->display_bytes(id).size();
    float c = 1.0f;
    for (size_t j = 0, begin = 0; j < ends.size(); begin = ends[j], ++j)
      if (begin < at + len && ends[j] > at) c = std::min(c, conf[j]);
    at += len;
    out.ids.push_back(id);
    out.conf.push_back(c);
  }
  return out;
}

}  // namespace ferry
