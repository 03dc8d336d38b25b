// The daemon's server driven in-process through its test entry points (as the fuzz harness
// does): socketpair clients, one loop turn at a time, the invariants checked after each.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "protocol.h"
#include "server.h"
#include "settings_env.h"

using namespace tandem;

namespace {

constexpr uint64_t kChunk = 2 * 1024 * 1024;
const std::string kGpu = "0123456789abcdef0123456789abcdef";

struct PairClient {
  int ours = -1, server = -1;
};

PairClient adopt(scheduler::Server& s) {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
  REQUIRE(s.adopt_client_for_test(sv[1]));
  return {sv[0], sv[1]};
}

// Reads every reply queued for the client; their types, in order (descriptors closed).
std::vector<uint32_t> drain(const PairClient& c) {
  std::vector<uint32_t> types;
  for (;;) {
    MessageHeader h{};
    std::string payload;
    int fd = -1;
    if (recv_message_with_fd(c.ours, h, payload, fd, 0) != RecvStatus::ok) return types;
    if (fd >= 0) close(fd);
    types.push_back(h.type);
  }
}

// A descriptor's message arrives in two reads (the kernel ends a read at the bytes that carry
// descriptors), as two turns of the loop.
bool serve_twice(scheduler::Server& s, const PairClient& c) {
  return s.serve_client_for_test(c.server) && s.serve_client_for_test(c.server);
}

void send_chunk(const PairClient& c) {
  int chunk = memfd_create("unit-chunk", MFD_CLOEXEC);
  REQUIRE(chunk >= 0);
  REQUIRE(send_message_with_fd(c.ours, MessageType::pool_register, nlohmann::json{{"bytes", kChunk}}.dump(), chunk));
  close(chunk);
}

std::string hello(const char* role) {
  return nlohmann::json{{"pid", getpid()}, {"role", role}, {"gpu", kGpu}}.dump();
}

}  // namespace

TEST_CASE("daemon in-process: adopted clients register, hang up, and leave the invariants holding") {
  scheduler::Server s(scheduler::ServerOptions{"", "fill", {}});
  PairClient a = adopt(s);
  REQUIRE(send_message(a.ours, MessageType::hello, hello("training")));
  CHECK(s.serve_client_for_test(a.server));
  CHECK(drain(a) == std::vector<uint32_t>{static_cast<uint32_t>(MessageType::hello_ok)});
  CHECK(s.invariant_violation_for_test().empty());
  send_chunk(a);
  CHECK(serve_twice(s, a));
  CHECK(drain(a) == std::vector<uint32_t>{static_cast<uint32_t>(MessageType::pool_registered)});
  CHECK(s.invariant_violation_for_test().empty());
  close(a.ours);
  CHECK_FALSE(s.serve_client_for_test(a.server));  // the end of the stream: disconnected
  CHECK(s.invariant_violation_for_test().empty());
}

// An inference process waits for memory, then, not reading its replies, gives back a chunk
// of its own: the wait is served at once from it, and the chunk's message cannot be written.
// The daemon drops that client after its handler returned (it had freed the Client under the
// handler: a use-after-free that the sanitizer build of this test reports).
TEST_CASE("daemon in-process: a pool_release whose own wait cannot be sent drops the client safely") {
  scheduler::Server s(scheduler::ServerOptions{"", "fill", {}});
  PairClient training = adopt(s), inference = adopt(s);
  int small = 4096;  // a few replies fill it
  REQUIRE(setsockopt(inference.server, SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
  REQUIRE(send_message(training.ours, MessageType::hello, hello("training")));
  REQUIRE(send_message(inference.ours, MessageType::hello, hello("inference")));
  send_chunk(training);
  send_chunk(inference);
  REQUIRE(serve_twice(s, training));
  REQUIRE(serve_twice(s, inference));
  drain(training);
  drain(inference);
  // Nothing free: training's chunk is reclaimed for it, and the acquisition waits.
  REQUIRE(send_message(inference.ours, MessageType::pool_acquire,
                       nlohmann::json{{"bytes", 3 * kChunk}, {"chunk_bytes", kChunk}}.dump()));
  REQUIRE(s.serve_client_for_test(inference.server));
  CHECK(drain(inference).empty());
  CHECK(s.status_json().find("\"waits\":1") != std::string::npos);

  for (int i = 0; i < 12; ++i) REQUIRE(send_message(inference.ours, MessageType::status_request, "{}"));
  REQUIRE(send_message(inference.ours, MessageType::pool_release, R"({"ids": [2]})"));
  CHECK_FALSE(s.serve_client_for_test(inference.server));
  CHECK(s.invariant_violation_for_test().empty());
  // The daemon serves the others as before.
  REQUIRE(send_message(training.ours, MessageType::status_request, "{}"));
  CHECK(s.serve_client_for_test(training.server));
  CHECK(drain(training) == std::vector<uint32_t>{static_cast<uint32_t>(MessageType::status_reply)});
  close(inference.ours);
  close(training.ours);
  CHECK_FALSE(s.serve_client_for_test(training.server));
}

// Two online inference processes wait for training's memory, one after the other. What
// training holds over the quota cut for the first is the first's: the second's plan counts it
// once, and cuts further (it counted it again, left training's quota where it was, and waited
// TANDEM_MEM_HANDOVER_MS for chunks that all went to the first).
TEST_CASE("daemon in-process: a second waiting request is not planned on memory promised to the first") {
  test::load_env({"TANDEM_MEM_WATERMARK=", "TANDEM_MEM_CHUNK=2M"});
  scheduler::Server s(scheduler::ServerOptions{"", "fill", {}});
  PairClient training = adopt(s), first = adopt(s), second = adopt(s);
  for (auto [c, role] : {std::pair{&training, "training"}, {&first, "inference"}, {&second, "inference"}}) {
    REQUIRE(send_message(c->ours, MessageType::hello, hello(role)));
    REQUIRE(s.serve_client_for_test(c->server));
    drain(*c);
  }
  for (int i = 0; i < 4; ++i) {
    send_chunk(training);
    REQUIRE(serve_twice(s, training));
  }
  drain(training);
  // Training's slot: the one that holds the four chunks (the clients share one pid here).
  auto slots = [&] { return nlohmann::json::parse(s.status_json())["gpus"][0]["slots"]; };
  int64_t training_slot = -1;
  for (const auto& slot : slots())
    if (slot["pool_bytes"] == 4 * kChunk) training_slot = slot["slot"];
  REQUIRE(training_slot >= 0);
  auto training_quota = [&] {
    for (const auto& slot : slots())
      if (slot["slot"] == training_slot) return slot["assigned_quota_bytes"].get<uint64_t>();
    return uint64_t{0};
  };
  auto ask = [&](PairClient& c, int seq) {
    nlohmann::json request = {{"bytes", 2 * kChunk}, {"chunk_bytes", kChunk}, {"seq", seq}, {"wait_ms", 10000}};
    REQUIRE(send_message(c.ours, MessageType::pool_acquire, request.dump()));
    REQUIRE(s.serve_client_for_test(c.server));
    CHECK(drain(c).empty());  // it waits
  };
  ask(first, 1);
  CHECK(training_quota() == 2 * kChunk);  // two of its four chunks asked back
  ask(second, 2);
  CHECK(training_quota() <= 1);  // all four: the first's two and the second's
  CHECK(s.status_json().find("\"waits\":2") != std::string::npos);
  // Training gives back all four: both requests are served in full.
  REQUIRE(send_message(training.ours, MessageType::pool_release, R"({"ids": [1, 2, 3, 4], "seq": 1})"));
  REQUIRE(s.serve_client_for_test(training.server));
  const uint32_t chunk = static_cast<uint32_t>(MessageType::pool_chunk),
                 granted = static_cast<uint32_t>(MessageType::pool_granted);
  for (PairClient* c : {&first, &second}) {
    std::vector<uint32_t> types = drain(*c);
    CHECK(std::count(types.begin(), types.end(), chunk) == 2);
    CHECK(types.back() == granted);
  }
  CHECK(s.invariant_violation_for_test().empty());
  for (PairClient* c : {&training, &first, &second}) close(c->ours);
  test::load_env({});
}

// nlohmann's get<uint64_t>() casts a float to the integer: undefined behaviour out of range
// (UBSan reported 1e300 in the fuzzer). Such fields, and negative ones, are refused.
TEST_CASE("daemon in-process: unsigned fields that are floats or negative get an EINVAL reply") {
  scheduler::Server s(scheduler::ServerOptions{"", "fill", {}});
  PairClient c = adopt(s);
  auto refused = [&](MessageType type, const nlohmann::json& payload) {
    REQUIRE(send_message(c.ours, type, payload.dump()));
    REQUIRE(s.serve_client_for_test(c.server));
    MessageHeader h{};
    std::string reply;
    REQUIRE(recv_message(c.ours, h, reply, 0) == RecvStatus::ok);
    return h.type == static_cast<uint32_t>(MessageType::error) && nlohmann::json::parse(reply)["errno"] == EINVAL;
  };
  nlohmann::json bad_hello = nlohmann::json::parse(hello("training"));
  bad_hello["gpu_total_bytes"] = 1e300;
  CHECK(refused(MessageType::hello, bad_hello));
  CHECK(s.status_json().find("\"clients\":[]") != std::string::npos);  // not registered
  CHECK(refused(MessageType::trace_request, {{"since_ns", 1e30}}));
  CHECK(refused(MessageType::trace_request, {{"since_ns", -5}}));
  REQUIRE(send_message(c.ours, MessageType::hello, hello("inference")));
  REQUIRE(s.serve_client_for_test(c.server));
  drain(c);
  CHECK(refused(MessageType::pool_acquire, {{"bytes", -1}, {"chunk_bytes", kChunk}}));
  CHECK(refused(MessageType::pool_acquire, {{"bytes", kChunk}, {"chunk_bytes", 2.5e19}}));
  CHECK(refused(MessageType::pool_acquire, {{"bytes", kChunk}, {"chunk_bytes", kChunk}, {"wait_ms", 1e40}}));
  CHECK(refused(MessageType::pool_release, {{"ids", nlohmann::json::array({1.5})}}));
  CHECK(refused(MessageType::pool_release, {{"ids", nlohmann::json::array({1})}, {"seq", -1}}));
  CHECK(s.invariant_violation_for_test().empty());
  close(c.ours);
  CHECK_FALSE(s.serve_client_for_test(c.server));
}

// A client that says "batch" gets many pool chunks to a message (a handover of many chunks
// costs a few sendmsg calls, not one per chunk); one that does not, one chunk a message.
TEST_CASE("daemon in-process: pool chunks come many to a message when the client asks for batches") {
  scheduler::Server s(scheduler::ServerOptions{"", "fill", {}});
  PairClient maker = adopt(s), taker = adopt(s);
  REQUIRE(send_message(maker.ours, MessageType::hello, hello("training")));
  REQUIRE(send_message(taker.ours, MessageType::hello, hello("batch-inference")));
  REQUIRE(s.serve_client_for_test(maker.server));
  REQUIRE(s.serve_client_for_test(taker.server));
  drain(maker);
  drain(taker);
  for (int i = 0; i < 3; ++i) {
    send_chunk(maker);
    REQUIRE(serve_twice(s, maker));
  }
  drain(maker);
  REQUIRE(send_message(maker.ours, MessageType::pool_release, R"({"ids": [1, 2, 3], "seq": 1})"));
  REQUIRE(s.serve_client_for_test(maker.server));
  drain(maker);
  // Each reply: its type, its payload's ids and how many descriptors came with it.
  auto replies = [&](bool batch) {
    nlohmann::json ask = {{"bytes", 3 * kChunk}, {"chunk_bytes", kChunk}, {"seq", 5}};
    if (batch) ask["batch"] = true;
    REQUIRE(send_message(taker.ours, MessageType::pool_acquire, ask.dump()));
    REQUIRE(s.serve_client_for_test(taker.server));
    std::vector<std::pair<uint32_t, size_t>> got;
    for (;;) {
      MessageHeader h{};
      std::string payload;
      int fds[8];
      size_t count = 0;
      if (recv_message_with_fds(taker.ours, h, payload, fds, 8, count, 0, kMaxPayload) != RecvStatus::ok) break;
      for (size_t i = 0; i < count; ++i) close(fds[i]);
      auto j = nlohmann::json::parse(payload);
      if (h.type == static_cast<uint32_t>(MessageType::pool_chunk))
        CHECK((batch ? j["ids"].size() : size_t{1}) == count);
      got.emplace_back(h.type, count);
    }
    return got;
  };
  const uint32_t chunk = static_cast<uint32_t>(MessageType::pool_chunk),
                 granted = static_cast<uint32_t>(MessageType::pool_granted);
  using Replies = std::vector<std::pair<uint32_t, size_t>>;
  CHECK(replies(true) == Replies{{chunk, 3}, {granted, 0}});
  REQUIRE(send_message(taker.ours, MessageType::pool_release, R"({"ids": [1, 2, 3], "seq": 6})"));
  REQUIRE(s.serve_client_for_test(taker.server));
  drain(taker);
  CHECK(replies(false) == Replies{{chunk, 1}, {chunk, 1}, {chunk, 1}, {granted, 0}});
  CHECK(s.invariant_violation_for_test().empty());
  close(maker.ours);
  close(taker.ours);
}

// A cgroup directory may be named with any bytes: a client in one that is not UTF-8 made every
// status (tandemctl status, status --json, mem) fail with nlohmann's type_error 316 while it
// stayed registered. The status document replaces such bytes with U+FFFD, and stays valid.
TEST_CASE("daemon in-process: a client whose cgroup name is not UTF-8 does not break the status") {
  scheduler::Server s(scheduler::ServerOptions{"", "fill", {}});
  PairClient c = adopt(s);
  scheduler::Client* client = s.client_by_fd_for_test(c.server);
  REQUIRE(client);
  client->peer.container = scheduler::container_from_cgroup("0::/user.slice/bad-\xff\xfe-\xc3(-name.scope\n");
  REQUIRE(client->peer.container.cgroup == "/user.slice/bad-\xff\xfe-\xc3(-name.scope");
  REQUIRE(send_message(c.ours, MessageType::hello, hello("batch-inference")));
  REQUIRE(s.serve_client_for_test(c.server));
  drain(c);
  REQUIRE(send_message(c.ours, MessageType::status_request, "{}"));
  REQUIRE(s.serve_client_for_test(c.server));
  MessageHeader h{};
  std::string reply;
  REQUIRE(recv_message(c.ours, h, reply, 0) == RecvStatus::ok);
  REQUIRE(h.type == static_cast<uint32_t>(MessageType::status_reply));
  nlohmann::json status = nlohmann::json::parse(reply);  // throws on invalid UTF-8
  REQUIRE(status["clients"].size() == 1);
  CHECK(status["clients"][0]["container"]["cgroup"] == "/user.slice/bad-\xef\xbf\xbd\xef\xbf\xbd-\xef\xbf\xbd(-name.scope");
  CHECK(s.invariant_violation_for_test().empty());
  close(c.ours);
  CHECK_FALSE(s.serve_client_for_test(c.server));
}

namespace {

// A client of another user than this process, as tandemd would see it: uid `uid`, in no
// group the access policy names (the default gives training and inference to tandemd's own
// uid and group, so such a client is filler-only).
struct UserClient {
  PairClient pair;
  int error = -1;  // the hello's errno; 0: registered (a refused client is hung up at once)
};

void hang_up(scheduler::Server& s, const UserClient& u) {
  close(u.pair.ours);
  CHECK_FALSE(s.serve_client_for_test(u.pair.server));
}

UserClient hello_as(scheduler::Server& s, uid_t uid, const char* role, const std::string& gpu) {
  UserClient u{adopt(s)};
  scheduler::Client* c = s.client_by_fd_for_test(u.pair.server);
  REQUIRE(c);
  if (uid != geteuid()) {
    c->uid = c->peer.uid = uid;
    c->peer.gid = 4000000;
    c->peer.groups.clear();
  }
  REQUIRE(send_message(u.pair.ours, MessageType::hello,
                       nlohmann::json{{"role", role}, {"gpu", gpu}}.dump()));
  REQUIRE(s.serve_client_for_test(u.pair.server));
  MessageHeader h{};
  std::string payload;
  int passed[2] = {-1, -1};
  size_t count = 0;
  REQUIRE(recv_message_with_fds(u.pair.ours, h, payload, passed, 2, count, 0, kMaxPayload) == RecvStatus::ok);
  for (size_t i = 0; i < count; ++i) close(passed[i]);
  u.error = h.type == static_cast<uint32_t>(MessageType::hello_ok) ? 0 : nlohmann::json::parse(payload)["errno"].get<int>();
  if (u.error) hang_up(s, u);
  return u;
}

// GPU uuid -> verified, from the status document.
std::map<std::string, bool> gpus_in_status(const scheduler::Server& s) {
  std::map<std::string, bool> out;
  const nlohmann::json status = nlohmann::json::parse(s.status_json());
  for (const auto& g : status["gpus"]) out[g["uuid"]] = g["verified"];
  return out;
}

std::string gpu_named(char c) { return std::string(32, c); }

}  // namespace

// Made-up GPUs of filler-only users must not take the GPU states a training or inference
// process needs: unverified GPUs are capped per user and take at most half the table, and at
// the cap an idle unverified GPU gives its place first (gpu_admission.h).
TEST_CASE("daemon in-process: unverified GPUs take at most half the table; a protected client still gets its GPU") {
  scheduler::ServerOptions options{"", "fill", {}};
  options.limits.gpus = 4;
  scheduler::Server s(options);
  const uid_t kAlice = 1001, kBob = 1002, kRoot = geteuid();
  const std::string m1 = gpu_named('1'), m2 = gpu_named('2'), m3 = gpu_named('3');
  const std::string r1 = gpu_named('a'), r2 = gpu_named('b'), r3 = gpu_named('c'), r4 = gpu_named('d');
  UserClient a1 = hello_as(s, kAlice, "batch-inference", m1);
  UserClient a2 = hello_as(s, kAlice, "batch-inference", m2);
  CHECK(a1.error == 0);
  CHECK(a2.error == 0);
  CHECK(hello_as(s, kAlice, "batch-inference", m3).error == EDQUOT);  // 2 per user
  // Bob has none, but unverified GPUs already hold half of the 4 states; he may join one.
  CHECK(hello_as(s, kBob, "batch-inference", m3).error == ENOSPC);
  UserClient b1 = hello_as(s, kBob, "batch-inference", m1);
  CHECK(b1.error == 0);
  CHECK(s.invariant_violation_for_test().empty());
  // The other half is there for GPUs protected clients name.
  UserClient t1 = hello_as(s, kRoot, "training", r1);
  UserClient t2 = hello_as(s, kRoot, "inference", r2);
  CHECK(t1.error == 0);
  CHECK(t2.error == 0);
  CHECK(gpus_in_status(s) == std::map<std::string, bool>{{m1, false}, {m2, false}, {r1, true}, {r2, true}});
  // A verified GPU does not count against a filler's cap.
  UserClient a3 = hello_as(s, kAlice, "batch-inference", r1);
  CHECK(a3.error == 0);
  // GPUs kept only by a pool chunk: unverified m2 and verified r2. A protected newcomer takes
  // the unverified one's place first, then the verified one's.
  send_chunk(a2.pair);
  CHECK(serve_twice(s, a2.pair));
  send_chunk(t2.pair);
  CHECK(serve_twice(s, t2.pair));
  hang_up(s, a2);
  hang_up(s, t2);
  REQUIRE(s.holdings().gpus == 4);
  UserClient t3 = hello_as(s, kRoot, "training", r3);
  CHECK(t3.error == 0);
  CHECK(gpus_in_status(s) == std::map<std::string, bool>{{m1, false}, {r1, true}, {r2, true}, {r3, true}});
  // A filler never takes a verified GPU's place (its chunks are on a real GPU).
  CHECK(hello_as(s, kBob, "batch-inference", m3).error == ENOSPC);
  UserClient t4 = hello_as(s, kRoot, "training", r4);
  CHECK(t4.error == 0);
  CHECK(gpus_in_status(s) == std::map<std::string, bool>{{m1, false}, {r1, true}, {r3, true}, {r4, true}});
  // A protected client naming an unverified GPU verifies it, for as long as its state lasts.
  UserClient t5 = hello_as(s, kRoot, "training", m1);
  CHECK(t5.error == 0);
  hang_up(s, t5);
  CHECK(gpus_in_status(s)[m1] == true);
  CHECK(s.invariant_violation_for_test().empty());
  // Full of GPUs protected clients named, with a client each: now a protected client is refused.
  CHECK(hello_as(s, kRoot, "training", gpu_named('e')).error == ENOSPC);
  for (const UserClient* u : {&a1, &b1, &t1, &a3, &t3, &t4}) hang_up(s, *u);
  CHECK(s.holdings().gpus == 0);
  CHECK(s.invariant_violation_for_test().empty());
}
