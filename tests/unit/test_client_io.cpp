// The daemon's per-client buffers: messages cut from arbitrary byte runs, lengths checked at
// the header, replies queued and written as the socket takes them.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "client_io.h"

using namespace tandem;
using namespace tandem::scheduler;

namespace {
std::string frame(MessageType type, const std::string& payload) {
  MessageHeader h{static_cast<uint32_t>(type), static_cast<uint32_t>(payload.size())};
  return std::string(reinterpret_cast<const char*>(&h), sizeof h) + payload;
}
}  // namespace

TEST_CASE("FrameReader: messages split anywhere, or several in one read") {
  std::string bytes = frame(MessageType::hello, R"({"pid":1})") + frame(MessageType::status_request, "{}");
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    INFO("cut at " << cut);
    FrameReader r;
    MessageHeader h{};
    std::string payload;
    r.append(bytes.data(), cut, 10);
    std::vector<std::string> got;
    while (r.next(h, payload) == FrameReader::Next::message) got.push_back(payload);
    r.append(bytes.data() + cut, bytes.size() - cut, 20);
    while (r.next(h, payload) == FrameReader::Next::message) got.push_back(payload);
    CHECK(got == std::vector<std::string>{R"({"pid":1})", "{}"});
    CHECK(h.type == static_cast<uint32_t>(MessageType::status_request));
    CHECK(r.partial_since_ns() == 0);
  }
}

TEST_CASE("FrameReader: an oversized length is refused from the header alone; partial age") {
  FrameReader r;
  MessageHeader big{1, kMaxPayload + 1};
  r.append(reinterpret_cast<const char*>(&big), sizeof big, 5);
  MessageHeader h{};
  std::string payload;
  CHECK(r.next(h, payload) == FrameReader::Next::too_large);

  FrameReader p;
  CHECK(p.partial_since_ns() == 0);
  std::string bytes = frame(MessageType::status_request, "{}");
  p.append(bytes.data(), 3, 100);
  p.append(bytes.data() + 3, 2, 200);
  CHECK(p.next(h, payload) == FrameReader::Next::need_more);
  CHECK(p.partial_since_ns() == 100);  // dated from its first byte
}

TEST_CASE("ReplyQueue: writes what the socket takes, keeps the rest, refuses to grow without bound") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  ReplyBudget budget{0, 0};
  ReplyQueue q(4 * 1024 * 1024, &budget);
  CHECK(q.empty());
  std::string big(32 * 1024, 'x');
  for (int i = 0; i < 64; ++i) REQUIRE(q.push(MessageType::status_reply, big));  // 2 MiB
  CHECK(q.flush(sv[0]));  // non-blocking: returns with most of it still queued
  CHECK_FALSE(q.empty());
  // The reader drains; flushing again eventually empties the queue, in order.
  size_t received = 0;
  char buffer[65536];
  while (!q.empty()) {
    ssize_t n = read(sv[1], buffer, sizeof buffer);
    REQUIRE(n > 0);
    received += static_cast<size_t>(n);
    REQUIRE(q.flush(sv[0]));
  }
  for (ssize_t n; (n = recv(sv[1], buffer, sizeof buffer, MSG_DONTWAIT)) > 0;) received += static_cast<size_t>(n);
  CHECK(received == 64 * (sizeof(MessageHeader) + big.size()));
  CHECK(budget.queued == 0);  // what was written left the shared count
  std::string half(2 * 1024 * 1024, 'y');
  CHECK(q.push(MessageType::trace_reply, half));
  CHECK_FALSE(q.push(MessageType::trace_reply, half));  // with the headers, past the 4 MiB cap
  CHECK(q.push(MessageType::trace_reply, "small"));
  CHECK(budget.queued == q.queued());
  close(sv[1]);
  CHECK_FALSE(q.flush(sv[0]));  // the peer is gone
  close(sv[0]);
}

TEST_CASE("ReplyQueue: one large reply may be queued alone; the shared budget caps all queues") {
  ReplyBudget budget{0, 3 * 1024 * 1024};
  std::string trace(2 * 1024 * 1024, 't');
  {
    ReplyQueue a(1024 * 1024, &budget), b(1024 * 1024, &budget);
    CHECK(a.push(MessageType::trace_reply, trace));  // larger than its cap, but alone
    CHECK_FALSE(a.push(MessageType::status_reply, "{}"));  // nothing more behind it
    CHECK_FALSE(b.push(MessageType::trace_reply, trace));  // 4 MiB in all: past the budget
    CHECK(b.push(MessageType::status_reply, std::string(512 * 1024, 's')));
    CHECK(budget.queued == a.queued() + b.queued());
  }
  CHECK(budget.queued == 0);  // a dropped client's queue is given back
}
