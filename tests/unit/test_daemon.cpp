// The daemon's server in-process, over a real UNIX socket.
#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "protocol.h"
#include "running_server.h"
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

scheduler::ServerOptions options_with(const std::string& path, const scheduler::DaemonLimits& limits = {}) {
  scheduler::ServerOptions o{path, "fill"};
  o.limits = limits;
  return o;
}

}  // namespace

TEST_CASE("daemon: hello identifies by SO_PEERCRED, errors keep the connection, status lists clients") {
  std::string path = "/tmp/tandem-unit-" + std::to_string(getpid()) + ".sock";
  test::RunningServer rs(options_with(path));
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
  test::RunningServer rs(options_with(path));
  scheduler::Server second(scheduler::ServerOptions{path, "fill"});
  std::string error;
  CHECK_FALSE(second.open(error));
  CHECK(error.find("already serving") != std::string::npos);
}

TEST_CASE("daemon: a slow client is waited for without stalling the others, then dropped") {
  std::string path = "/tmp/tandem-unit3-" + std::to_string(getpid()) + ".sock";
  test::RunningServer rs(options_with(path));
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
  test::RunningServer rs(options_with(path));
  int deaf = connect_to(path), a = connect_to(path);
  // Status requests whose replies (a few hundred bytes each) far exceed what the socket
  // buffers; the daemon queues them instead of waiting for the socket, up to its cap (1 MiB a
  // client), past which it drops the client: 20000 replies are several times the cap. How many
  // sends go through before the drop depends on how far the daemon gets ahead of this loop: a
  // failed send is that drop.
  int sent = 0;
  while (sent < 20000 && send_message(deaf, MessageType::status_request, "{}")) ++sent;
  CHECK(sent > 0);
  for (int i = 0; i < 5; ++i) {
    uint32_t type = 0;
    ask(a, MessageType::status_request, "{}", &type);
    CHECK(type == static_cast<uint32_t>(MessageType::status_reply));
  }
  // Past the cap the deaf client was dropped: what reached its socket ends in end of file (or
  // a reset, where the daemon closed with requests of it still unread), not in a wait.
  MessageHeader h{};
  std::string reply;
  RecvStatus last = RecvStatus::ok;
  for (int i = 0; i <= sent && last == RecvStatus::ok; ++i) last = recv_message(deaf, h, reply, 2000);
  CHECK((last == RecvStatus::closed || last == RecvStatus::io_error));
  close(deaf);
  close(a);
}

TEST_CASE("daemon: a refused hello can be corrected on the same connection") {
  std::string path = "/tmp/tandem-unit5-" + std::to_string(getpid()) + ".sock";
  test::RunningServer rs(options_with(path));
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

namespace {

// The daemon's answer to a connection: the status (accepted) or an error's errno (refused).
int answer_errno(int fd) {
  if (!send_message(fd, MessageType::status_request, "{}")) return -1;
  MessageHeader h{};
  std::string reply;
  if (recv_message(fd, h, reply, 2000) != RecvStatus::ok) return -1;
  return h.type == static_cast<uint32_t>(MessageType::error) ? nlohmann::json::parse(reply)["errno"].get<int>() : 0;
}

// The errno of the error a refused connection is sent before it is closed (-1: none).
int refusal_errno(int fd) {
  MessageHeader h{};
  std::string reply;
  if (recv_message(fd, h, reply, 2000) != RecvStatus::ok || h.type != static_cast<uint32_t>(MessageType::error)) return -1;
  return nlohmann::json::parse(reply)["errno"].get<int>();
}

nlohmann::json holds(const std::string& path) {
  int fd = connect_to(path);
  auto status = ask(fd, MessageType::status_request, "{}");
  close(fd);
  return status["daemon"]["holds"];
}

std::string gpu_hex(int n) {
  std::string hex = std::to_string(n);
  return std::string(32 - hex.size(), '0') + hex;
}

int open_count() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) n += fcntl(fd, F_GETFD) != -1;
  return n;
}

}  // namespace

TEST_CASE("daemon: connections past the caps are refused with EUSERS (per uid: not root)") {
  std::string path = "/tmp/tandem-unit6-" + std::to_string(getpid()) + ".sock";
  scheduler::DaemonLimits limits;
  limits.connections = 4;
  limits.connections_per_uid = 2;
  test::RunningServer rs(options_with(path, limits));
  REQUIRE(chmod(path.c_str(), 0666) == 0);
  // Another user: two connections, then refused.
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    int a = connect_to(path), b = connect_to(path), c = connect_to(path);
    int code = answer_errno(a) == 0 && answer_errno(b) == 0 && refusal_errno(c) == EUSERS ? 0 : 11;
    MessageHeader h{};
    std::string reply;
    if (recv_message(c, h, reply, 2000) != RecvStatus::closed) code = 12;
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // Root is exempt from the per-uid cap, not from the total.
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(connect_to(path));
    CHECK(answer_errno(fds.back()) == 0);
  }
  int fifth = connect_to(path);
  CHECK(refusal_errno(fifth) == EUSERS);
  close(fifth);
  // A freed place is taken by the next one.
  close(fds.back());
  fds.pop_back();
  int again = -1, code = -1;
  for (int i = 0; i < 50 && code != 0; ++i) {
    if (again >= 0) close(again);
    usleep(20000);
    again = connect_to(path);
    code = answer_errno(again);
  }
  CHECK(code == 0);
  close(again);
  for (int fd : fds) close(fd);
}

TEST_CASE("daemon: pool chunks past the caps are refused and their descriptors closed") {
  std::string path = "/tmp/tandem-unit7-" + std::to_string(getpid()) + ".sock";
  scheduler::DaemonLimits limits;
  limits.chunks_per_client = 3;
  limits.pool_chunks = 4;
  test::RunningServer rs(options_with(path, limits));
  auto registered = [&](int fd) {
    int chunk = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int before = open_count();
    REQUIRE(send_message_with_fd(fd, MessageType::pool_register, R"({"bytes": 4096})", chunk));
    MessageHeader h{};
    std::string reply;
    REQUIRE(recv_message(fd, h, reply, 2000) == RecvStatus::ok);
    close(chunk);
    bool kept = open_count() == before;  // the daemon's copy is still open
    return std::pair{h.type == static_cast<uint32_t>(MessageType::pool_registered), kept};
  };
  int a = connect_to(path), b = connect_to(path);
  for (int fd : {a, b})
    ask(fd, MessageType::hello, nlohmann::json{{"pid", getpid()}, {"role", "training"}, {"gpu", gpu_hex(1)}}.dump());
  for (int i = 0; i < 3; ++i) CHECK(registered(a) == std::pair{true, true});
  CHECK(registered(a) == std::pair{false, false});  // a fourth from one connection
  CHECK(registered(b) == std::pair{true, true});
  CHECK(registered(b) == std::pair{false, false});  // a fifth in all
  CHECK(holds(path)["pool_chunks"] == 4);
  close(a);
  close(b);
}

TEST_CASE("daemon: GPU state is freed with its last client; made-up GPUs past the cap are refused") {
  std::string path = "/tmp/tandem-unit8-" + std::to_string(getpid()) + ".sock";
  scheduler::DaemonLimits limits;
  limits.gpus = 2;
  test::RunningServer rs(options_with(path, limits));
  auto hello_on = [&](int fd, int gpu) {
    uint32_t type = 0;
    auto reply = ask(fd, MessageType::hello,
                     nlohmann::json{{"pid", getpid()}, {"role", "batch-inference"}, {"gpu", gpu_hex(gpu)}}.dump(), &type);
    return type == static_cast<uint32_t>(MessageType::hello_ok) ? 0 : reply["errno"].get<int>();
  };
  int a = connect_to(path), b = connect_to(path), c = connect_to(path);
  CHECK(hello_on(a, 1) == 0);
  CHECK(hello_on(b, 2) == 0);
  CHECK(hello_on(c, 3) == ENOSPC);
  CHECK(holds(path)["gpus"] == 2);
  close(a);  // GPU 1 has no client left: its state goes
  nlohmann::json h;
  for (int i = 0; i < 50; ++i) {
    h = holds(path);
    if (h["gpus"] == 1) break;
    usleep(20000);
  }
  CHECK(h["gpus"] == 1);
  CHECK(hello_on(c, 3) == 0);
  // A GPU kept only by a pool chunk gives its place (and the chunk) to a GPU with a client.
  int d = connect_to(path);
  CHECK(hello_on(d, 4) == ENOSPC);
  close(b);
  int e = -1;
  for (int i = 0; i < 50; ++i) {
    if (holds(path)["gpus"] == 1) break;
    usleep(20000);
  }
  e = connect_to(path);
  CHECK(hello_on(e, 5) == 0);
  int chunk = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(send_message_with_fd(e, MessageType::pool_register, R"({"bytes": 4096})", chunk));
  close(chunk);
  MessageHeader header{};
  std::string reply;
  REQUIRE(recv_message(e, header, reply, 2000) == RecvStatus::ok);
  close(e);  // GPU 5 stays: a chunk is on it
  usleep(100000);
  CHECK(holds(path)["gpus"] == 2);
  CHECK(hello_on(d, 4) == 0);  // GPU 5, no client, is forgotten for it
  h = holds(path);
  CHECK(h["gpus"] == 2);
  CHECK(h["pool_chunks"] == 0);
  close(c);
  close(d);
}

TEST_CASE("daemon: a training rank names its job in its hello; a malformed job is refused") {
  std::string path = "/tmp/tandem-unit-job-" + std::to_string(getpid()) + ".sock";
  test::RunningServer rs(options_with(path));
  int a = connect_to(path);
  uint32_t type = 0;
  auto hello = [&](nlohmann::json extra, std::string role = "training") {
    nlohmann::json j{{"role", role}, {"gpu", gpu_hex(7)}, {"gpu_total_bytes", 8ull << 30}};
    j.update(extra);
    return ask(a, MessageType::hello, j.dump(), &type);
  };
  for (const nlohmann::json& bad : {nlohmann::json{{"job", "j"}, {"job_ranks", 1}},
                                    nlohmann::json{{"job", "j"}, {"job_ranks", 5000}},
                                    nlohmann::json{{"job", "j"}, {"job_ranks", -2}},
                                    nlohmann::json{{"job", 42}, {"job_ranks", 2}},
                                    nlohmann::json{{"job", ""}, {"job_ranks", 2}},
                                    nlohmann::json{{"job", std::string(300, 'x')}, {"job_ranks", 2}}}) {
    auto reply = hello(bad);
    CHECK(type == static_cast<uint32_t>(MessageType::error));
    CHECK(reply["errno"] == EINVAL);
  }
  hello({{"job", "127.0.0.1:29500"}, {"job_ranks", 2}}, "inference");  // only training ranks form jobs
  CHECK(type == static_cast<uint32_t>(MessageType::error));
  hello({{"job", "127.0.0.1:29500"}, {"job_ranks", 2}});
  REQUIRE(type == static_cast<uint32_t>(MessageType::hello_ok));
  // After a tick: one of its two ranks, so nothing is held.
  nlohmann::json jobs;
  for (int i = 0; i < 200 && jobs.empty(); ++i) {
    usleep(10000);
    int s = connect_to(path);
    jobs = ask(s, MessageType::status_request, "{}")["jobs"];
    close(s);
  }
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0]["job"] == std::to_string(getuid()) + "/127.0.0.1:29500");
  CHECK(jobs[0]["ranks"] == 1);
  CHECK(jobs[0]["expected_ranks"] == 2);
  CHECK(jobs[0]["holding"] == false);
  close(a);
}

// A user allowed only batch-inference named 64 made-up GPUs: tandemd's 64 GPU states filled,
// a real training process was refused ("tandemd tracks 64 GPUs, all in use") and ran ungated.
// GPUs named only by such users are unverified and capped per user (gpu_admission.h).
TEST_CASE("daemon: a filler-only user's made-up GPUs are capped; a training process still registers on its GPU") {
  std::string path = "/tmp/tandem-unit-madeup-" + std::to_string(getpid()) + ".sock";
  // Training and inference only for kTrainer: this process (root in the tests) is a filler-only user.
  const uid_t kTrainer = getuid() == 4242 ? 4243 : 4242;
  scheduler::ServerOptions options = options_with(path);
  scheduler::Principals trainer;
  trainer.uids = {kTrainer};
  options.access.roles["training"] = trainer;
  options.access.roles["inference"] = trainer;
  options.socket_mode = 0666;  // kTrainer connects too
  test::RunningServer rs(options);
  std::vector<int> fillers;
  int admitted = 0, capped = 0;
  for (int n = 0; n < 64; ++n) {
    fillers.push_back(connect_to(path));
    uint32_t type = 0;
    auto reply = ask(fillers.back(), MessageType::hello,
                     nlohmann::json{{"role", "batch-inference"}, {"gpu", gpu_hex(1000 + n)}}.dump(), &type);
    if (type == static_cast<uint32_t>(MessageType::hello_ok)) {
      ++admitted;
      continue;
    }
    ++capped;
    CHECK(reply["errno"] == EDQUOT);
    CHECK(reply["message"].get<std::string>().find("cap of 2 unverified GPUs per user") != std::string::npos);
  }
  CHECK(admitted == 2);
  CHECK(capped == 62);
  int probe = connect_to(path);
  auto status = ask(probe, MessageType::status_request, "{}");
  REQUIRE(status["gpus"].size() == 2);
  for (const auto& g : status["gpus"]) CHECK(g["verified"] == false);
  // A filler of this user on a GPU someone else named: no new state, so it joins one it is on.
  int again = connect_to(path);
  uint32_t type = 0;
  ask(again, MessageType::hello, nlohmann::json{{"role", "batch-inference"}, {"gpu", gpu_hex(1000)}}.dump(), &type);
  CHECK(type == static_cast<uint32_t>(MessageType::hello_ok));

  if (getuid() != 0) {
    WARN("the training client skipped: needs root, to connect as another user");
  } else {
    // A training process of kTrainer on its real GPU registers, which is then verified; so is
    // a made-up GPU it names (the filler's then no longer counts against the filler's cap).
    pid_t child = fork();
    if (child == 0) {
      if (setgroups(0, nullptr) != 0 || setgid(kTrainer) != 0 || setuid(kTrainer) != 0) _exit(3);
      auto registered = [&](const std::string& gpu) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, path.c_str(), path.size());
        MessageHeader h{};
        std::string reply;
        return connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
               send_message(fd, MessageType::hello, nlohmann::json{{"role", "training"}, {"gpu", gpu}}.dump()) &&
               recv_message(fd, h, reply, 2000) == RecvStatus::ok && h.type == static_cast<uint32_t>(MessageType::hello_ok);
      };
      _exit(registered(gpu_hex(77)) && registered(gpu_hex(1001)) ? 0 : 5);  // connections left open until exit
    }
    int exit_status = 0;
    waitpid(child, &exit_status, 0);
    CHECK((WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 0));
    // GPU 77 had only the training process, and is gone with it; GPU 1001 stays verified.
    nlohmann::json gpus;
    for (int i = 0; i < 50; ++i) {
      gpus = ask(probe, MessageType::status_request, "{}")["gpus"];
      if (gpus.size() == 2) break;
      usleep(20000);
    }
    REQUIRE(gpus.size() == 2);
    for (const auto& g : gpus) CHECK(g["verified"] == (g["uuid"] == gpu_hex(1001)));
    int one_more = connect_to(path);
    ask(one_more, MessageType::hello, nlohmann::json{{"role", "batch-inference"}, {"gpu", gpu_hex(2000)}}.dump(), &type);
    CHECK(type == static_cast<uint32_t>(MessageType::hello_ok));
    close(one_more);
  }
  close(again);
  close(probe);
  for (int fd : fillers) close(fd);
}
