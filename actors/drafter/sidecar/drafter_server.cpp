#include "actors/drafter/sidecar/drafter_server.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "actors/drafter/sidecar/drafter_wire.hpp"
#include "io/errors.hpp"
#include "io/tokenizers/tokenizer_text.hpp"

namespace ferry {
namespace {

namespace pb = ferry::drafter;

pb::Envelope error_envelope(pb::ErrorCode code, const std::string& msg, uint64_t seq = 0) {
  pb::Envelope e;
  e.mutable_error()->set_code(code);
  e.mutable_error()->set_message(msg);
  e.mutable_error()->set_seq(seq);
  return e;
}

// The handshake: the client's Hello in, ours out. False (after telling the client why) on a mismatch.
bool handshake(int fd, Drafter& d, uint32_t version) {
  pb::Envelope in;
  std::string detail;
  if (wire::Io r = wire::read_frame(fd, in, std::nullopt, &detail); r != wire::Io::ok) {
    spdlog::warn("ferry-drafter: no hello from the client: {} {}", wire::to_string(r), detail);
    return false;
  }
  if (!in.has_hello()) {
    spdlog::warn("ferry-drafter: the client's first frame is not a hello");
    wire::write_frame(fd, error_envelope(pb::BAD_REQUEST, "the first frame must be a hello"), std::nullopt);
    return false;
  }
  if (in.hello().protocol_version() != version) {
    const std::string msg = "protocol version mismatch: ferry-drafter speaks " + std::to_string(version) +
                            ", the client speaks " + std::to_string(in.hello().protocol_version());
    spdlog::error("ferry-drafter: {}; closing", msg);
    wire::write_frame(fd, error_envelope(pb::VERSION_MISMATCH, msg), std::nullopt);
    return false;
  }
  pb::Envelope out;
  auto* h = out.mutable_hello();
  h->set_protocol_version(version);
  h->set_name(d.name());
  h->set_tokenizer_id(tokenizer_identity(d.tokenizer()));
  h->set_vocab_size(static_cast<uint32_t>(std::max(0, d.vocab_size())));
  h->set_max_tokens(15);
  return wire::write_frame(fd, out, std::nullopt) == wire::Io::ok;
}

// Text mode: the target's history may hold bytes that are not UTF-8 (a token can end inside a
// character); each bad byte becomes U+FFFD so the drafter's tokenizer can still read the rest.
std::string valid_utf8(std::string s) {
  std::string out;
  while (auto bad = utf8_error_offset(s)) {
    out.append(s, 0, *bad).append("\xEF\xBF\xBD");
    s.erase(0, *bad + 1);
  }
  return out + s;
}

pb::Envelope answer(Drafter& d, const pb::ProposeRequest& rq) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> hist(rq.history().begin(), rq.history().end());
  const Tokenizer* tok = d.tokenizer();
  if (rq.text_mode()) {
    if (!tok) return error_envelope(pb::BAD_REQUEST, "text mode needs a drafter with a tokenizer", rq.seq());
    try {
      hist = tok->encode(valid_utf8(rq.text()), false);
    } catch (const Error&) {
      hist.clear();  // e.g. the text ends inside a UTF-8 character: nothing to propose this time
    }
  }
  pb::Envelope e;
  auto* p = e.mutable_proposal();
  p->set_seq(rq.seq());
  if (!hist.empty()) {
    const int max = static_cast<int>(std::min<uint32_t>(rq.max_tokens(), 15));
    const DraftProposal dp = d.propose(hist, max, rq.min_confidence());
    for (size_t i = 0; i < dp.ids.size(); ++i) {
      auto* t = p->add_tokens();
      t->set_id(dp.ids[i]);
      t->set_confidence(dp.conf[i]);
      if (tok && dp.ids[i] >= 0 && dp.ids[i] < tok->vocab_size()) t->set_text(tok->token_bytes(dp.ids[i]));
    }
  }
  p->set_compute_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return e;
}

// Fault injection: three kinds of garbage in turn.
void send_garbage(int fd, uint64_t n, const pb::ProposeRequest& rq) {
  if (n % 3 == 0) {
    wire::write_raw(fd, std::string("\x10\x00\x00\x00garbage-garbage!", 20), std::nullopt);
    return;
  }
  pb::Envelope e;
  auto* p = e.mutable_proposal();
  p->set_seq(n % 3 == 1 ? rq.seq() : rq.seq() + 7);
  auto* t = p->add_tokens();
  t->set_id(n % 3 == 1 ? 1 << 30 : 0);  // out of every vocabulary / a reply to another request
  t->set_confidence(1.0f);
  wire::write_frame(fd, e, std::nullopt);
}

}  // namespace

int serve_drafter(int fd, Drafter& d, const ServerFaults& f) {
  const uint32_t version = f.protocol_version ? f.protocol_version : wire::kProtocolVersion;
  if (!handshake(fd, d, version)) return 2;
  for (uint64_t calls = 1;; ++calls) {
    pb::Envelope in;
    std::string detail;
    const wire::Io r = wire::read_frame(fd, in, std::nullopt, &detail);
    if (r == wire::Io::closed) {
      spdlog::info("ferry-drafter: the client closed the connection after {} requests", calls - 1);
      return 0;
    }
    if (r != wire::Io::ok) {
      spdlog::error("ferry-drafter: {} ({}); ending the session", wire::to_string(r), detail);
      return 3;
    }
    if (!in.has_propose()) {
      wire::write_frame(fd, error_envelope(pb::BAD_REQUEST, "expected a propose request"), std::nullopt);
      continue;
    }
    if (f.exit_after > 0 && calls >= static_cast<uint64_t>(f.exit_after)) {
      spdlog::warn("ferry-drafter: fault injection: crashing on request {}", calls);
      std::_Exit(9);
    }
    if (f.hang_after > 0 && calls >= static_cast<uint64_t>(f.hang_after)) {
      spdlog::warn("ferry-drafter: fault injection: hanging on request {}", calls);
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    if (f.garbage_every > 0 && calls % static_cast<uint64_t>(f.garbage_every) == 0) {
      send_garbage(fd, calls / static_cast<uint64_t>(f.garbage_every), in.propose());
      continue;
    }
    pb::Envelope out;
    try {
      out = answer(d, in.propose());
    } catch (const std::exception& e) {
      out = error_envelope(pb::INTERNAL, e.what(), in.propose().seq());
    }
    if (wire::Io w = wire::write_frame(fd, out, std::nullopt, &detail); w != wire::Io::ok) {
      spdlog::error("ferry-drafter: cannot answer: {} ({})", wire::to_string(w), detail);
      return 3;
    }
  }
}

}  // namespace ferry
