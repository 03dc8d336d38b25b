// The daemon's server in-process, over a real UNIX socket.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "protocol.h"
#include "server.h"

using namespace tandem;

namespace {

int connect_to(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

nlohmann::json ask(int fd, MessageType type, const std::string& payload, uint32_t* reply_type = nullptr) {
  REQUIRE(send_message(fd, type, payload));
  MessageHeader h{};
  std::string reply;
  REQUIRE(recv_message(fd, h, reply, 2000) == RecvStatus::ok);
  if (reply_type) *reply_type = h.type;
  return nlohmann::json::parse(reply);
}

struct RunningServer {
  std::string path;
  scheduler::Server server;
  std::thread thread;
  explicit RunningServer(const std::string& p) : path(p), server(scheduler::ServerOptions{p, "fill"}) {
    std::string error;
    REQUIRE(server.open(error));
    thread = std::thread([this] { server.run(); });
  }
  ~RunningServer() {
    server.stop();
    thread.join();
  }
};

}  // namespace

TEST_CASE("daemon: hello identifies by SO_PEERCRED, errors keep the connection, status lists clients") {
  std::string path = "/tmp/tandem-unit-" + std::to_string(getpid()) + ".sock";
  RunningServer rs(path);
  int a = connect_to(path);
  uint32_t type = 0;
  // The hello's pid is the client's own view (another in a container's PID namespace): it is
  // not the identity, and a different one does not stop the registration.
  auto ok = ask(a, MessageType::hello, nlohmann::json{{"pid", getpid() + 1}, {"role", "training"}}.dump(), &type);
  CHECK(type == static_cast<uint32_t>(MessageType::hello_ok));

  // A second hello is refused, and the connection still works.
  auto refused = ask(a, MessageType::hello, nlohmann::json{{"pid", getpid()}, {"role", "training"}}.dump(), &type);
  CHECK(type == static_cast<uint32_t>(MessageType::error));
  CHECK(refused["errno"] == EALREADY);
  auto unknown = ask(a, static_cast<MessageType>(77), "{}", &type);
  CHECK(type == static_cast<uint32_t>(MessageType::error));
  auto garbage = ask(a, MessageType::hello, "not json", &type);
  CHECK(type == static_cast<uint32_t>(MessageType::error));
  // Valid JSON with a field of the wrong type is an error reply, not a dead daemon.
  for (const char* bad : {R"({"role": 5})", R"({"role": "training", "gpu": 7})"}) {
    nlohmann::json hello = nlohmann::json::parse(bad);
    hello["pid"] = getpid();
    auto wrong = ask(a, MessageType::hello, hello.dump(), &type);
    CHECK(type == static_cast<uint32_t>(MessageType::error));
    CHECK(wrong["errno"] == EINVAL);
  }
  ask(a, MessageType::trace_request, R"({"since_ns": "soon"})", &type);
  CHECK(type == static_cast<uint32_t>(MessageType::error));

  // A client sending an oversized frame is dropped; the others are still served.
  int b = connect_to(path);
  MessageHeader huge{1, kMaxPayload + 100};
  REQUIRE(write(b, &huge, sizeof huge) == sizeof huge);
  MessageHeader h{};
  std::string reply;
  REQUIRE(recv_message(b, h, reply, 2000) == RecvStatus::ok);
  CHECK(h.type == static_cast<uint32_t>(MessageType::error));
  CHECK(recv_message(b, h, reply, 2000) == RecvStatus::closed);
  close(b);

  auto status = ask(a, MessageType::status_request, "{}", &type);
  CHECK(type == static_cast<uint32_t>(MessageType::status_reply));
  REQUIRE(status["clients"].size() == 1);
  CHECK(status["clients"][0]["pid"] == getpid());  // from SO_PEERCRED, not from the hello
  CHECK(status["clients"][0]["uid"] == getuid());
  CHECK(status["clients"][0]["gid"] == getgid());
  CHECK(status["clients"][0]["pidfd"] != "none");
  CHECK(status["clients"][0]["role"] == "training");
  CHECK(status["daemon"]["policy"] == "fill");
  close(a);

  // A closed client disappears from the status.
  int c = connect_to(path);
  for (int i = 0; i < 50; ++i) {
    status = ask(c, MessageType::status_request, "{}");
    if (status["clients"].empty()) break;
    usleep(20000);
  }
  CHECK(status["clients"].empty());
  close(c);
}

TEST_CASE("daemon: a second server on a live socket is refused") {
  std::string path = "/tmp/tandem-unit2-" + std::to_string(getpid()) + ".sock";
  RunningServer rs(path);
  scheduler::Server second(scheduler::ServerOptions{path, "fill"});
  std::string error;
  CHECK_FALSE(second.open(error));
  CHECK(error.find("already serving") != std::string::npos);
}

TEST_CASE("daemon: a slow client is waited for without stalling the others, then dropped") {
  std::string path = "/tmp/tandem-unit3-" + std::to_string(getpid()) + ".sock";
  RunningServer rs(path);
  int a = connect_to(path), slow = connect_to(path);
  // Three bytes of a status request's header, then nothing for a while.
  MessageHeader request{static_cast<uint32_t>(MessageType::status_request), 2};
  REQUIRE(write(slow, &request, 3) == 3);
  for (int i = 0; i < 10; ++i) {
    uint32_t type = 0;
    ask(a, MessageType::status_request, "{}", &type);
    CHECK(type == static_cast<uint32_t>(MessageType::status_reply));
    usleep(30000);
  }
  // 300 ms later the slow client finishes its message and is answered.
  REQUIRE(write(slow, reinterpret_cast<char*>(&request) + 3, sizeof request - 3) == sizeof request - 3);
  REQUIRE(write(slow, "{}", 2) == 2);
  MessageHeader h{};
  std::string reply;
  REQUIRE(recv_message(slow, h, reply, 2000) == RecvStatus::ok);
  CHECK(h.type == static_cast<uint32_t>(MessageType::status_reply));
  // A message left incomplete for more than 2 s gets an error and a closed socket.
  REQUIRE(write(slow, &request, 5) == 5);
  REQUIRE(recv_message(slow, h, reply, 4000) == RecvStatus::ok);
  CHECK(h.type == static_cast<uint32_t>(MessageType::error));
  CHECK(recv_message(slow, h, reply, 2000) == RecvStatus::closed);
  close(slow);
  close(a);
}

TEST_CASE("daemon: a client that never reads its replies does not block the daemon") {
  std::string path = "/tmp/tandem-unit4-" + std::to_string(getpid()) + ".sock";
  RunningServer rs(path);
  int deaf = connect_to(path), a = connect_to(path);
  // Thousands of status requests whose replies (about a kilobyte each) far exceed what the
  // socket buffers; the daemon queues them instead of waiting for the socket.
  for (int i = 0; i < 3000; ++i) REQUIRE(send_message(deaf, MessageType::status_request, "{}"));
  for (int i = 0; i < 5; ++i) {
    uint32_t type = 0;
    ask(a, MessageType::status_request, "{}", &type);
    CHECK(type == static_cast<uint32_t>(MessageType::status_reply));
  }
  close(deaf);
  close(a);
}

TEST_CASE("daemon: a refused hello can be corrected on the same connection") {
  std::string path = "/tmp/tandem-unit5-" + std::to_string(getpid()) + ".sock";
  RunningServer rs(path);
  int a = connect_to(path);
  uint32_t type = 0;
  auto bad = ask(a, MessageType::hello, nlohmann::json{{"pid", getpid()}, {"role", "training"}, {"gpu", "xyz"}}.dump(),
                 &type);
  CHECK(type == static_cast<uint32_t>(MessageType::error));
  CHECK(bad["message"].get<std::string>().find("UUID") != std::string::npos);
  ask(a, MessageType::hello, nlohmann::json{{"pid", getpid()}, {"role", "none"}}.dump(), &type);
  CHECK(type == static_cast<uint32_t>(MessageType::hello_ok));
  close(a);
}
