// The drafter wire protocol against the real ferry-drafter process: handshake, proposals, a version
// mismatch and a dropped connection, each ending with a clear log line on the side that saw it.
#include <gtest/gtest.h>

#include <thread>

#include "actors/drafter/drafter_sidecar.hpp"
#include "actors/drafter/sidecar/drafter_wire.hpp"
#include "tests/actors/drafter/sidecar_util.hpp"

namespace ferry::test {
namespace {

namespace pb = ferry::drafter;

pb::Envelope hello(uint32_t version) {
  pb::Envelope e;
  e.mutable_hello()->set_protocol_version(version);
  e.mutable_hello()->set_name("test");
  e.mutable_hello()->set_tokenizer_id("ids");
  return e;
}

TEST(SidecarProtocol, HandshakeThenNgramProposalOverTheWire) {
  RawSidecar s({"--drafter", "ngram"});
  ASSERT_EQ(wire::Io::ok, wire::write_frame(s.fd, hello(wire::kProtocolVersion), std::nullopt));
  pb::Envelope in;
  ASSERT_EQ(wire::Io::ok, wire::read_frame(s.fd, in, std::nullopt));
  ASSERT_TRUE(in.has_hello());
  EXPECT_EQ(in.hello().name(), "ngram:4");
  EXPECT_EQ(in.hello().tokenizer_id(), "ids");
  pb::Envelope rq;
  rq.mutable_propose()->set_seq(9);
  rq.mutable_propose()->set_max_tokens(3);
  for (int id : {1, 2, 3, 4, 5, 1, 2, 3}) rq.mutable_propose()->add_history(id);
  ASSERT_EQ(wire::Io::ok, wire::write_frame(s.fd, rq, std::nullopt));
  ASSERT_EQ(wire::Io::ok, wire::read_frame(s.fd, in, std::nullopt));
  ASSERT_TRUE(in.has_proposal());
  EXPECT_EQ(in.proposal().seq(), 9u);
  ASSERT_EQ(in.proposal().tokens_size(), 3);
  EXPECT_EQ(in.proposal().tokens(0).id(), 4);
  EXPECT_EQ(in.proposal().tokens(1).id(), 5);
  EXPECT_FLOAT_EQ(in.proposal().tokens(0).confidence(), 0.875f);  // a 3-token suffix, seen once: 1 - 2^-3
  s.close_socket();
  EXPECT_EQ(s.wait_exit(), 0);
  EXPECT_NE(s.log().find("closed the connection after 1 requests"), std::string::npos) << s.log();
}

TEST(SidecarProtocol, VersionMismatchIsRefusedWithAClearLogLine) {
  RawSidecar s({"--drafter", "ngram"});
  ASSERT_EQ(wire::Io::ok, wire::write_frame(s.fd, hello(99), std::nullopt));
  pb::Envelope in;
  ASSERT_EQ(wire::Io::ok, wire::read_frame(s.fd, in, std::nullopt));
  ASSERT_TRUE(in.has_error());
  EXPECT_EQ(in.error().code(), pb::VERSION_MISMATCH);
  EXPECT_NE(in.error().message().find("ferry-drafter speaks 1, the client speaks 99"), std::string::npos);
  EXPECT_EQ(s.wait_exit(), 2);
  EXPECT_NE(s.log().find("protocol version mismatch"), std::string::npos) << s.log();
}

TEST(SidecarProtocol, ClientRefusesASidecarOfAnotherVersion) {
  SidecarOptions o{drafter_exe(), {"--drafter", "ngram", "--protocol-version", "7"}, 5000};
  try {
    Sidecar s(o, {nullptr, 1024});
    FAIL() << "handshake should fail";
  } catch (const SidecarError& e) {
    EXPECT_EQ(e.kind, SidecarFailure::version);
    EXPECT_NE(std::string(e.what()).find("protocol version mismatch"), std::string::npos) << e.what();
  }
}

TEST(SidecarProtocol, DroppedConnectionMidFrameIsLoggedBySidecar) {
  RawSidecar s({"--drafter", "ngram"});
  ASSERT_EQ(wire::Io::ok, wire::write_frame(s.fd, hello(wire::kProtocolVersion), std::nullopt));
  pb::Envelope in;
  ASSERT_EQ(wire::Io::ok, wire::read_frame(s.fd, in, std::nullopt));
  ASSERT_EQ(wire::Io::ok, wire::write_raw(s.fd, std::string("\x64\x00\x00\x00partial", 11), std::nullopt));
  s.close_socket();
  EXPECT_EQ(s.wait_exit(), 3);
  EXPECT_NE(s.log().find("connection dropped in the middle of a frame"), std::string::npos) << s.log();
}

TEST(SidecarProtocol, ClientNamesASidecarThatDroppedTheConnection) {
  Sidecar s({drafter_exe(), {"--drafter", "ngram"}, 5000}, {nullptr, 1024});
  const std::vector<int32_t> h{1, 2, 3, 1, 2};
  const auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(2); };
  EXPECT_EQ(s.propose(h, 4, 0.0f, deadline()).ids, (std::vector<int32_t>{3, 1, 2}));
  ::kill(s.pid(), SIGKILL);
  try {
    s.propose(h, 4, 0.0f, deadline());
    FAIL() << "a killed sidecar cannot answer";
  } catch (const SidecarError& e) {
    EXPECT_EQ(e.kind, SidecarFailure::crash);
    EXPECT_NE(std::string(e.what()).find("closed the connection"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("killed by signal"), std::string::npos) << e.what();
  }
}

TEST(SidecarProtocol, GarbageAndOutOfVocabularyAnswersAreRejected) {
  // --fault-garbage-every 1: answers cycle through an out-of-vocabulary id, a reply to another
  // request, and a frame that is not an Envelope.
  Sidecar s({drafter_exe(), {"--drafter", "ngram", "--fault-garbage-every", "1"}, 5000}, {nullptr, 1024});
  std::vector<std::string> why;
  for (int j = 0; j < 3; ++j) {
    try {
      s.propose(std::vector<int32_t>{1, 2, 1}, 4, 0.0f, std::chrono::steady_clock::now() + std::chrono::seconds(2));
    } catch (const SidecarError& e) {
      EXPECT_EQ(e.kind, SidecarFailure::garbage) << e.what();
      why.push_back(e.what());
    }
  }
  ASSERT_EQ(why.size(), 3u);
  EXPECT_NE(why[0].find("out-of-vocabulary id 1073741824"), std::string::npos) << why[0];
  EXPECT_NE(why[1].find("answered request"), std::string::npos) << why[1];
  EXPECT_NE(why[2].find("not a drafter Envelope"), std::string::npos) << why[2];
}

TEST(SidecarProtocol, UnstartableSidecarIsAStartFailure) {
  try {
    Sidecar s({"/nonexistent/ferry-drafter", {}, 2000}, {nullptr, 1024});
    FAIL();
  } catch (const SidecarError& e) {
    EXPECT_EQ(e.kind, SidecarFailure::start);
  }
  try {
    Sidecar s({drafter_exe(), {"--drafter", "ngram", "--fault-exit-at-start"}, 2000}, {nullptr, 1024});
    FAIL();
  } catch (const SidecarError& e) {
    EXPECT_EQ(e.kind, SidecarFailure::start);
    EXPECT_NE(std::string(e.what()).find("exited with status 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry::test
