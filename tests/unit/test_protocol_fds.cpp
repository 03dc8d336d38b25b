// Descriptors passed with a message, and receives bounded in all (protocol.h): what the hook
// relies on when the program at TANDEM_SOCKET is not tandemd.
#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>

#include "protocol.h"

using namespace tandem;

namespace {
int open_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d)) ++n;
  closedir(d);
  return n;
}
}  // namespace

TEST_CASE("protocol: several descriptors with one message; extra ones are closed, not leaked") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  int p[2];
  REQUIRE(pipe(p) == 0);
  int three[3] = {p[0], p[1], p[0]};
  int before = open_fds();
  REQUIRE(send_message_with_fds(sv[0], MessageType::hello_ok, R"({"slot": 1})", three, 3));
  MessageHeader h{};
  std::string payload;
  int got[2] = {-1, -1};
  size_t count = 0;
  REQUIRE(recv_message_with_fds(sv[1], h, payload, got, 2, count, 1000, 4096) == RecvStatus::ok);
  CHECK(count == 2);
  CHECK(payload == R"({"slot": 1})");
  CHECK(open_fds() == before + 2);  // the third was closed on arrival
  close(got[0]);
  close(got[1]);

  // A payload over the limit: refused, and the descriptors that came with it closed.
  REQUIRE(send_message_with_fds(sv[0], MessageType::hello_ok, std::string(5000, 'x'), three, 2));
  CHECK(recv_message_with_fds(sv[1], h, payload, got, 2, count, 1000, 4096) == RecvStatus::too_large);
  CHECK(count == 0);
  CHECK(open_fds() == before);
  close(p[0]);
  close(p[1]);
  close(sv[0]);
  close(sv[1]);
}

TEST_CASE("protocol: a peer trickling a message cannot stretch a receive past its deadline") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  const MessageHeader sent{static_cast<uint32_t>(MessageType::hello_ok), 100};
  std::thread trickle([&] {
    const char* bytes = reinterpret_cast<const char*>(&sent);
    for (size_t i = 0; i < sizeof sent; ++i) {  // one byte every 150 ms: each wait alone is short
      if (send(sv[0], bytes + i, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    for (int i = 0; i < 20; ++i) {
      if (send(sv[0], "x", 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
  });
  MessageHeader header{};
  std::string payload;
  int fds[2];
  size_t count = 0;
  auto start = std::chrono::steady_clock::now();
  RecvStatus s = recv_message_with_fds(sv[1], header, payload, fds, 2, count, 500, 4096);
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(s != RecvStatus::ok);
  CHECK(took < std::chrono::milliseconds(900));
  shutdown(sv[1], SHUT_RDWR);
  close(sv[1]);
  trickle.join();
  close(sv[0]);
}
