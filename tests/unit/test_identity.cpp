// Who a client is and what it may do (docs/security.md): the container named from a cgroup
// path, the default and configured role rules, slot caps, the configuration file, and trust
// domains in the daemon's memory pool; the daemon's answers over a real socket.
#include <sys/socket.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "access_policy.h"
#include "daemon_config.h"
#include "memory_pool.h"
#include "peer_identity.h"
#include "protocol.h"
#include "running_server.h"
#include "server.h"

using namespace tandem;
using namespace tandem::scheduler;

namespace {

const std::string kId = "4f1c2a9d6e0b7c3a8d5e2f1b0c9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c";
const std::string kGpu = "00112233445566778899aabbccddeeff";

// A process in tandemd's own namespaces (the host's, for a tandemd on the host).
PeerIdentity who(uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
  PeerIdentity p;
  p.uid = uid;
  p.gid = gid;
  p.groups = std::move(groups);
  p.host_namespaces = true;
  return p;
}

// The same user in a container: its own mount (and PID or user) namespace.
PeerIdentity in_container(uid_t uid, gid_t gid, uint64_t mount_ns, std::vector<gid_t> groups = {}) {
  PeerIdentity p = who(uid, gid, std::move(groups));
  p.host_namespaces = false;
  p.place = "pidns:" + std::to_string(mount_ns);
  return p;
}

// A process that connected through grant `name`'s socket.
PeerIdentity of_grant(const std::string& name, uid_t uid = 0) {
  PeerIdentity p = in_container(uid, uid, 4242);
  p.grant = name;
  return p;
}

int connect_to(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

nlohmann::json ask(int fd, MessageType type, const std::string& payload, uint32_t* reply_type) {
  REQUIRE(send_message(fd, type, payload));
  MessageHeader h{};
  std::string reply;
  REQUIRE(recv_message(fd, h, reply, 2000) == RecvStatus::ok);  // a passed fd is discarded
  *reply_type = h.type;
  return nlohmann::json::parse(reply);
}

}  // namespace

TEST_CASE("identity: the container is named from the cgroup path of each runtime", "[identity]") {
  ContainerId c = container_from_cgroup("0::/system.slice/docker-" + kId + ".scope\n");
  CHECK(c.runtime == "docker");
  CHECK(c.id == kId);
  CHECK(c.cgroup == "/system.slice/docker-" + kId + ".scope");

  c = container_from_cgroup("12:memory:/docker/" + kId + "\n11:cpu:/docker/" + kId + "\n0::/\n");
  CHECK(c.runtime == "docker");
  CHECK(c.id == kId);
  CHECK(c.cgroup == "/docker/" + kId);

  c = container_from_cgroup(
      "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/"
      "cri-containerd-" + kId + ".scope\n");
  CHECK(c.runtime == "containerd");
  CHECK(c.id == kId);
  CHECK(c.pod == "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");

  c = container_from_cgroup("0::/kubepods.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/crio-" + kId +
                            ".scope\n");
  CHECK(c.runtime == "cri-o");
  CHECK(c.pod == "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");

  c = container_from_cgroup("0::/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/" + kId + "\n");
  CHECK(c.runtime == "kubepods");
  CHECK(c.id == kId);

  c = container_from_cgroup("0::/machine.slice/libpod-" + kId + ".scope/container\n");
  CHECK(c.runtime == "podman");

  // No container: the plain path, and no id made up from a name that only looks like one.
  c = container_from_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n");
  CHECK(c.runtime.empty());
  CHECK(c.id.empty());
  CHECK(c.cgroup == "/user.slice/user-1000.slice/session-3.scope");
  c = container_from_cgroup("4:memory:/process_api/3638a7ce04ebc254adbb939f307235bd\n1:cpu:/\n0::/\n");
  CHECK(c.runtime.empty());
  CHECK(c.cgroup == "/process_api/3638a7ce04ebc254adbb939f307235bd");
  CHECK(container_from_cgroup("").cgroup.empty());
}

TEST_CASE("identity: by default only the daemon's uid and the socket's group may hold others back", "[identity]") {
  AccessPolicy policy;
  policy.finalize(0, 120);
  CHECK(policy.refusal(who(0, 0), "training").empty());
  CHECK(policy.refusal(who(0, 0), "inference").empty());
  CHECK(policy.refusal(who(1000, 1000), "training").find("not permitted for uid 1000") != std::string::npos);
  CHECK_FALSE(policy.refusal(who(1000, 1000), "inference").empty());
  CHECK(policy.refusal(who(1000, 1000), "batch-inference").empty());
  CHECK(policy.refusal(who(1000, 1000), "none").empty());
  // The socket's group, as primary or supplementary group.
  CHECK(policy.refusal(who(1000, 120), "training").empty());
  CHECK(policy.refusal(who(1000, 1000, {27, 120}), "inference").empty());

  // Slots: the daemon's own uid has no cap, others the default, a configured user its own.
  CHECK(policy.slot_cap(who(0, 0), 0) == 0);
  CHECK(policy.slot_cap(who(1000, 1000), 0) == 16);
  policy.max_slots[1000] = 2;
  CHECK(policy.slot_cap(who(1000, 1000), 0) == 2);

  // Quotas: a process's own uid, root and the daemon's uid; others are refused.
  CHECK(policy.quota_refusal(who(1000, 1000), who(1000, 1000)).empty());
  CHECK(policy.quota_refusal(who(0, 0), who(1000, 1000)).empty());
  CHECK(policy.quota_refusal(who(1000, 120), who(0, 0)).find("quota admins (uid 0 in tandemd's namespaces)") !=
        std::string::npos);

  // Trust domains: one uid each unless joined.
  CHECK(policy.trust_domain(who(1000, 1000)) == "uid:1000");
  AccessPolicy::Domain team{"team", {}};
  team.members.uids = {1000};
  team.members.gids = {300};
  policy.trust_domains.push_back(team);
  CHECK(policy.trust_domain(who(1000, 1000)) == "team");
  CHECK(policy.trust_domain(who(1001, 1001, {300})) == "team");
  CHECK(policy.trust_domain(who(1002, 1002)) == "uid:1002");
}

TEST_CASE("identity: uid 0 in a container is not tandemd's own user", "[identity]") {
  AccessPolicy policy;
  policy.finalize(0, 0);  // tandemd as root, its socket root's group: the defaults of a node
  const PeerIdentity root_pod = in_container(0, 0, 777), other_pod = in_container(0, 0, 778);
  // No protected role, no quota administration, a slot cap, a pool of its own.
  CHECK(policy.refusal(who(0, 0), "training").empty());
  CHECK_FALSE(policy.refusal(root_pod, "training").empty());
  CHECK_FALSE(policy.refusal(root_pod, "inference").empty());
  CHECK(policy.refusal(root_pod, "batch-inference").empty());
  CHECK_FALSE(policy.quota_refusal(root_pod, who(0, 0)).empty());        // the host's root's training
  CHECK_FALSE(policy.quota_refusal(root_pod, other_pod).empty());         // another container's root
  CHECK(policy.quota_refusal(root_pod, in_container(0, 0, 777)).empty());  // its own container's
  CHECK(policy.quota_refusal(who(0, 0), root_pod).empty());                // the host's root administers
  CHECK(policy.slot_cap(root_pod, 0) == 16);
  CHECK(policy.trust_domain(root_pod) == "uid:0@pidns:777");
  CHECK(policy.trust_domain(root_pod) != policy.trust_domain(other_pod));
  CHECK(policy.trust_domain(root_pod) != policy.trust_domain(who(0, 0)));
  // A configured domain joins host processes only: a container cannot claim its uid or group.
  AccessPolicy::Domain team{"team", {}};
  team.members.uids = {0};
  policy.trust_domains.push_back(team);
  CHECK(policy.trust_domain(who(0, 0)) == "team");
  CHECK(policy.trust_domain(root_pod) == "uid:0@pidns:777");
}

TEST_CASE("identity: a grant's process has its grant's rights and nothing else", "[identity]") {
  AccessPolicy policy;
  policy.finalize(0, 120);
  Principals everyone;
  everyone.anyone = true;
  policy.roles["training"] = everyone;  // even a role open to everyone is not a grant's
  const PeerIdentity pod = of_grant("a1b2", 0), same = of_grant("a1b2", 1000), other = of_grant("c3d4", 0);
  CHECK_FALSE(policy.refusal(pod, "training").empty());  // its role is the grant's (handle_hello)
  CHECK_FALSE(everyone.matches(pod));
  CHECK(policy.quota_refusal(pod, same).empty());
  CHECK_FALSE(policy.quota_refusal(pod, other).empty());
  CHECK_FALSE(policy.quota_refusal(pod, who(0, 0)).empty());  // uid 0 like training: no matter
  CHECK_FALSE(policy.quota_refusal(in_container(0, 0, 4242), pod).empty());  // nor from outside the grant
  CHECK(policy.quota_refusal(who(0, 0), pod).empty());  // the host's quota admins still may
  CHECK(policy.trust_domain(pod) == "grant:a1b2");
  CHECK(policy.trust_domain(same) == "grant:a1b2");
  CHECK(policy.slot_cap(pod, 0) == 16);
}

TEST_CASE("identity: the configuration file sets the socket, roles, caps and trust domains", "[identity]") {
  DaemonConfig config;
  std::string error;
  REQUIRE(apply_config(R"({"socket": "/tmp/x.sock", "socket_group": "0", "socket_mode": "0666", "policy": "slo",
      "roles": {"training": ["user:root", "group:12"], "inference": ["*"]},
      "max_slots_per_user": 4, "quota_admins": ["group:12"], "max_slots": {"root": 9}, "trust_domains": {"ml": ["user:1000", "group:300"]}})",
                       config, error));
  CHECK(config.server.socket_path == "/tmp/x.sock");
  CHECK(config.server.socket_group == 0);
  CHECK(config.server.socket_mode == 0666);
  CHECK(config.server.policy == "slo");
  AccessPolicy& a = config.server.access;
  a.finalize(0, 0);
  CHECK(a.refusal(who(1000, 12), "training").empty());
  CHECK_FALSE(a.refusal(who(1000, 1000), "training").empty());
  CHECK(a.refusal(who(1000, 1000), "inference").empty());
  CHECK(a.refusal(who(1000, 1000), "batch-inference").empty());  // not configured: the default
  CHECK(a.slot_cap(who(1000, 1000), 0) == 4);
  CHECK(a.slot_cap(who(0, 0), 0) == 9);
  CHECK(a.trust_domain(who(7, 300)) == "ml");
  CHECK(a.quota_refusal(who(1000, 12), who(0, 0)).empty());    // configured admins replace the default
  CHECK_FALSE(a.quota_refusal(who(0, 0), who(1000, 1000)).empty());

  // Mistakes are errors naming the key, never a silent default.
  for (const char* bad : {R"({"sockt": "/x"})", R"({"roles": {"trainer": ["*"]}})",
                          R"({"roles": {"training": ["alice"]}})", R"({"roles": {"training": ["user:no-such-user-x"]}})",
                          R"({"socket_mode": "0999"})", R"({"socket_mode": 660})", R"({"trust_domains": {"a:b": []}})",
                          R"({"max_slots_per_user": -1})", "[]", "not json"}) {
    DaemonConfig c;
    CHECK_FALSE(apply_config(bad, c, error));
    CHECK_FALSE(error.empty());
  }
}

TEST_CASE("identity: configuration integers out of range are refused, naming the key, never wrapped", "[identity]") {
  // 4294967296 as a uint32_t is 0: no slot cap, and uid 0, root (both were taken silently).
  const std::pair<const char*, const char*> bad[] = {
      {R"({"max_slots_per_user": 4294967296})", "max_slots_per_user: "},
      {R"({"max_slots_per_user": 65})", "max_slots_per_user: "},
      {R"({"max_slots_per_user": 1.5})", "max_slots_per_user: "},
      {R"({"max_slots": {"root": 4294967296}})", "max_slots: root: "},
      {R"({"max_slots": {"4294967296": 2}})", "max_slots: user id 4294967296 is out of range"},
      {R"({"roles": {"training": ["user:4294967296"]}})", "roles: training: user id 4294967296 is out of range"},
      {R"({"roles": {"inference": ["group:99999999999999999999"]}})", "roles: inference: group id"},
      {R"({"quota_admins": ["user:4294967295"]})", "quota_admins: user id 4294967295 is out of range"},
      {R"({"trust_domains": {"ml": ["group:4294967296"]}})", "trust_domains: ml: group id"},
      {R"({"socket_owner": "4294967296"})", "socket_owner: user id"},
      {R"({"socket_group": "18446744073709551617"})", "socket_group: group id"},
      {R"({"socket_mode": "7777"})", "socket_mode: "},
  };
  for (const auto& [text, why] : bad) {
    DaemonConfig c;
    std::string error;
    INFO(text);
    CHECK_FALSE(apply_config(text, c, error));
    CHECK(error.rfind(why, 0) == 0);
    INFO(error);
  }
  // The largest values in range are taken as given.
  DaemonConfig c;
  std::string error;
  REQUIRE(apply_config(R"({"max_slots_per_user": 64, "max_slots": {"4294967294": 0}, "roles": {"training": ["user:4294967294"]}})",
                       c, error));
  CHECK(c.server.access.max_slots_per_user == 64);
  CHECK(c.server.access.max_slots.at(4294967294u) == 0);
  CHECK(c.server.access.roles.at("training").uids == std::vector<uid_t>{4294967294u});
}

TEST_CASE("identity: pooled chunks never leave the trust domain that created or held them", "[identity]") {
  MemoryPool pool;
  const uint64_t chunk = 4 << 20;
  auto fd = [] { return dup(STDERR_FILENO); };
  uint64_t a1 = pool.add(fd(), chunk, kGpu, /*owner*/ 10, "uid:0");
  pool.add(fd(), chunk, kGpu, 10, "uid:0");
  CHECK(pool.release(10, {a1}) == 1);
  CHECK(pool.free_bytes(kGpu, chunk, "uid:0") == chunk);
  CHECK(pool.free_bytes(kGpu, chunk, "uid:1000") == 0);
  CHECK(pool.free_bytes_outside(kGpu, chunk, "uid:1000") == chunk);
  CHECK(pool.free_bytes_outside(kGpu, chunk, "uid:0") == 0);
  CHECK(pool.take(kGpu, chunk, 2, /*owner*/ 20, "uid:1000").empty());
  // The owner's process is gone: its chunks are free, still only to its domain.
  pool.disconnect(10, -1);
  CHECK(pool.take(kGpu, chunk, 2, 20, "uid:1000").empty());
  auto same = pool.take(kGpu, chunk, 2, 30, "uid:0");
  REQUIRE(same.size() == 2);
  CHECK(same[0]->domain == "uid:0");
}

TEST_CASE("identity: tandemd refuses a role its configuration does not grant, and caps slots", "[identity]") {
  std::string path = "/tmp/tandem-unit-identity-" + std::to_string(getpid()) + ".sock";
  ServerOptions options{path, "fill"};
  options.access.roles["training"] = Principals{};  // nobody
  options.access.max_slots[getuid()] = 1;
  options.socket_mode = 0600;
  test::RunningServer rs(options);
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  int a = connect_to(path), b = connect_to(path);
  uint32_t type = 0;
  auto refused = ask(a, MessageType::hello, nlohmann::json{{"role", "training"}, {"gpu", kGpu}}.dump(), &type);
  CHECK(type == static_cast<uint32_t>(MessageType::error));
  CHECK(refused["errno"] == EACCES);
  CHECK(refused["message"].get<std::string>().find("not permitted") != std::string::npos);
  // Refused roles leave the connection usable; a permitted role registers (no pid in the hello).
  ask(a, MessageType::hello, nlohmann::json{{"role", "batch-inference"}, {"gpu", kGpu}}.dump(), &type);
  CHECK(type == static_cast<uint32_t>(MessageType::hello_ok));
  auto capped = ask(b, MessageType::hello, nlohmann::json{{"role", "batch-inference"}, {"gpu", kGpu}}.dump(), &type);
  CHECK(type == static_cast<uint32_t>(MessageType::error));
  CHECK(capped["errno"] == EDQUOT);
  ask(b, MessageType::hello, nlohmann::json{{"role", "none"}}.dump(), &type);
  CHECK(type == static_cast<uint32_t>(MessageType::hello_ok));

  auto status = ask(b, MessageType::status_request, "{}", &type);
  REQUIRE(status["clients"].size() == 2);
  for (const auto& c : status["clients"]) {
    CHECK(c["pid"] == getpid());
    CHECK(c["trust_domain"] == "uid:" + std::to_string(getuid()));
    CHECK(c["container"]["cgroup"].is_string());
  }
  close(a);
  close(b);
}

TEST_CASE("identity: the socket's owner is set; a client not trusted with a protected role cannot set the GPU's "
          "size for others", "[identity]") {
  if (getuid() != 0) {
    WARN("skipped: needs root, to connect as another user");
    return;
  }
  std::string path = "/tmp/tandem-unit-identity2-" + std::to_string(getpid()) + ".sock";
  ServerOptions options{path, "fill"};
  options.socket_mode = 0666;
  options.socket_owner = 65534;
  test::RunningServer rs(options);
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(st.st_uid == 65534);
  CHECK((st.st_mode & 0777) == 0666);
  // A filler of uid 65534 reports a GPU of 1 MiB, before and after root's 8 GiB; it sends
  // `extra` (a quota request) after its hello and exits 0 when that is refused with EPERM.
  auto untrusted_hello = [&](const std::string& extra = "") {
    pid_t child = fork();
    if (child == 0) {
      if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, path.c_str(), path.size());
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) _exit(4);
      nlohmann::json hello{{"role", "batch-inference"}, {"gpu", kGpu}, {"gpu_total_bytes", 1 << 20}};
      MessageHeader h{};
      std::string reply;
      bool ok = send_message(fd, MessageType::hello, hello.dump()) && recv_message(fd, h, reply, 2000) == RecvStatus::ok &&
                h.type == static_cast<uint32_t>(MessageType::hello_ok);
      if (ok && !extra.empty())
        ok = send_message(fd, MessageType::quota_request, extra) && recv_message(fd, h, reply, 2000) == RecvStatus::ok &&
             h.type == static_cast<uint32_t>(MessageType::error) && nlohmann::json::parse(reply)["errno"] == EPERM;
      _exit(ok ? 0 : 5);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  REQUIRE(untrusted_hello() == 0);
  int a = connect_to(path);
  uint32_t type = 0;
  ask(a, MessageType::hello, nlohmann::json{{"role", "training"}, {"gpu", kGpu}, {"gpu_total_bytes", 8ull << 30}}.dump(),
      &type);
  REQUIRE(type == static_cast<uint32_t>(MessageType::hello_ok));
  // Nor set root's process's quota.
  REQUIRE(untrusted_hello(nlohmann::json{{"pid", getpid()}, {"size", "1M"}}.dump()) == 0);
  auto quota = ask(a, MessageType::quota_request, nlohmann::json{{"pid", getpid()}, {"size", "50%"}}.dump(), &type);
  REQUIRE(type == static_cast<uint32_t>(MessageType::quota_reply));
  CHECK(quota["bytes"] == 4ull << 30);
  close(a);
}

TEST_CASE("identity: a grant's socket registers its role on its GPU with its quota, whatever is asked", "[identity]") {
  char tmpl[] = "/tmp/tandem-unit-grants-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl, path = dir + "/tandemd.sock";
  ServerOptions options{path, "fill"};
  const std::string other_gpu = "ffeeddccbbaa99887766554433221100";
  std::string grant_socket;
  {
    test::RunningServer rs(options);
    int admin = connect_to(path);
    uint32_t type = 0;
    // The test runs as root in tandemd's namespaces: a node administrator.
    auto reply = ask(admin, MessageType::grant_request,
                     nlohmann::json{{"name", "a1"}, {"role", "batch-inference"}, {"gpus", {kGpu}}, {"memory_limit", "64M"}}.dump(),
                     &type);
    REQUIRE(type == static_cast<uint32_t>(MessageType::grant_reply));
    grant_socket = reply["socket"].get<std::string>();
    CHECK(grant_socket == dir + "/grants/a1/tandemd.sock");
    // Bad grants are refused by name.
    auto bad = ask(admin, MessageType::grant_request, nlohmann::json{{"name", "A/../x"}, {"role", "batch-inference"}, {"gpus", {kGpu}}}.dump(), &type);
    CHECK(type == static_cast<uint32_t>(MessageType::error));
    bad = ask(admin, MessageType::grant_request, nlohmann::json{{"name", "a2"}, {"role", "training"}, {"gpus", {kGpu}}}.dump(), &type);
    CHECK(type == static_cast<uint32_t>(MessageType::error));  // a grant never holds a protected role

    // Through the grant: asking for training registers as the grant's batch-inference.
    int pod = connect_to(grant_socket), other = connect_to(grant_socket);
    reply = ask(pod, MessageType::hello, nlohmann::json{{"role", "training"}, {"gpu", kGpu}}.dump(), &type);
    REQUIRE(type == static_cast<uint32_t>(MessageType::hello_ok));
    CHECK(reply["role"] == "batch-inference");
    // Another GPU than the grant's is refused.
    auto wrong = ask(other, MessageType::hello, nlohmann::json{{"role", "batch-inference"}, {"gpu", other_gpu}}.dump(), &type);
    CHECK(type == static_cast<uint32_t>(MessageType::error));
    CHECK(wrong["errno"] == EACCES);
    // Nor may a grant's process create grants (its quotas: the policy's test above; every
    // client here is this one process).
    auto no = ask(other, MessageType::grant_request, nlohmann::json{{"name", "a3"}, {"role", "inference"}, {"gpus", {kGpu}}}.dump(), &type);
    CHECK(no["errno"] == EPERM);
    auto status = ask(admin, MessageType::status_request, "{}", &type);

    bool seen = false;
    for (const auto& c : status["clients"])
      if (c["grant"] == "a1") {
        seen = true;
        CHECK(c["role"] == "batch-inference");
        CHECK(c["trust_domain"] == "grant:a1");
      }
    CHECK(seen);
    for (const auto& g : status["gpus"])
      if (g["uuid"] == kGpu)
        for (const auto& s : g["slots"]) CHECK(s["assigned_quota_bytes"] == 64ull << 20);  // the grant's limit
    REQUIRE(status["grants"].size() == 1);
    CHECK(status["grants"][0]["clients"] == 2);
    for (int fd : {admin, pod, other}) close(fd);
  }
  // A restarted tandemd opens the grant again, at the same path (containers keep it mounted).
  {
    test::RunningServer rs(options);
    int pod = connect_to(grant_socket);
    uint32_t type = 0;
    auto reply = ask(pod, MessageType::hello, nlohmann::json{{"role", "inference"}, {"gpu", kGpu}}.dump(), &type);
    REQUIRE(type == static_cast<uint32_t>(MessageType::hello_ok));
    CHECK(reply["role"] == "batch-inference");
    close(pod);
  }
  std::filesystem::remove_all(dir);
}
