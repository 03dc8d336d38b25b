#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <thread>

#include "protocol.h"

using namespace tandem;

namespace {
struct Pair {
  int fd[2];
  Pair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0); }
  ~Pair() {
    close(fd[0]);
    if (fd[1] >= 0) close(fd[1]);
  }
};
}  // namespace

TEST_CASE("framing round trip, empty payload too") {
  Pair p;
  REQUIRE(send_message(p.fd[0], MessageType::hello, R"({"pid":1})"));
  REQUIRE(send_message(p.fd[0], MessageType::status_request, ""));
  MessageHeader h{};
  std::string payload;
  REQUIRE(recv_message(p.fd[1], h, payload, 1000) == RecvStatus::ok);
  CHECK(h.type == static_cast<uint32_t>(MessageType::hello));
  CHECK(payload == R"({"pid":1})");
  REQUIRE(recv_message(p.fd[1], h, payload, 1000) == RecvStatus::ok);
  CHECK(h.type == static_cast<uint32_t>(MessageType::status_request));
  CHECK(payload.empty());
}

TEST_CASE("an oversized length is refused before the payload is read") {
  Pair p;
  MessageHeader h{1, kMaxPayload + 1};
  REQUIRE(write(p.fd[0], &h, sizeof h) == sizeof h);
  MessageHeader got{};
  std::string payload;
  CHECK(recv_message(p.fd[1], got, payload, 1000) == RecvStatus::too_large);
  CHECK(payload.empty());
}

TEST_CASE("replies may be larger than requests (traces), up to their own bound") {
  Pair p;
  std::string big(kMaxPayload + 1, 'x');
  std::thread writer([&] { CHECK(send_message(p.fd[0], MessageType::trace_reply, big)); });
  MessageHeader got{};
  std::string payload;
  CHECK(recv_message(p.fd[1], got, payload, 1000, kMaxReplyPayload) == RecvStatus::ok);
  writer.join();
  CHECK(payload == big);
}

TEST_CASE("a peer closing mid-message gives truncated; a quiet peer a timeout; EOF closed") {
  Pair p;
  MessageHeader h{1, 10};
  REQUIRE(write(p.fd[0], &h, sizeof h) == sizeof h);
  REQUIRE(write(p.fd[0], "abc", 3) == 3);
  close(p.fd[0]);
  p.fd[0] = dup(p.fd[1]);  // keep the destructor simple
  MessageHeader got{};
  std::string payload;
  CHECK(recv_message(p.fd[1], got, payload, 200) == RecvStatus::truncated);

  Pair q;
  CHECK(recv_message(q.fd[1], got, payload, 50) == RecvStatus::timeout);
  close(q.fd[0]);
  q.fd[0] = dup(q.fd[1]);
  Pair r;
  close(r.fd[0]);
  r.fd[0] = dup(r.fd[1]);
  CHECK(recv_message(r.fd[1], got, payload, 200) == RecvStatus::closed);
}
