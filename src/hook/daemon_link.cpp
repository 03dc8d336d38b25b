#include "daemon_link.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

#include "counters.h"
#include "log.h"
#include "protocol.h"
#include "settings.h"

namespace tandem::hook {

std::atomic<tandem_slot*> g_slot{nullptr};
std::atomic<tandem_shm_header*> g_shm{nullptr};

std::atomic<uint32_t> g_link_attempts{0};

namespace {
// tandemd refused this process's role (EACCES): it runs ungated for good, and says so once.
std::atomic<bool> g_role_refused{false};
int g_socket = -1;
size_t g_shm_size = 0;
// Held for a whole exchange on the socket; the progress thread only tries it.
std::mutex g_exchange_mutex;
}  // namespace

uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t role_code(const char* role) noexcept {
  if (!std::strcmp(role, "training")) return TANDEM_ROLE_TRAINING;
  if (!std::strcmp(role, "inference")) return TANDEM_ROLE_INFERENCE;
  if (!std::strcmp(role, "batch-inference")) return TANDEM_ROLE_BATCH_INFERENCE;
  return TANDEM_ROLE_NONE;
}

// Logs a refused hello: a refused role once (and no more attempts), other refusals when their
// text changes, so that a process retrying every second does not fill its log.
void note_refusal(const char* path, const std::string& reply) noexcept {
  static std::mutex mutex;
  static std::string last;
  try {
    nlohmann::json e = nlohmann::json::parse(reply, nullptr, false);
    int error_number = e.is_object() ? e.value("errno", 0) : 0;
    std::string message = e.is_object() ? e.value("message", reply) : reply;
    if (error_number == EACCES) {
      g_role_refused.store(true, std::memory_order_release);
      TANDEM_LOG_WARN("tandemd on {} refused role {}: {}; running ungated", path, setting_text(SettingId::TANDEM_ROLE),
                      message);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (message == last) return;
    last = message;
    TANDEM_LOG_WARN("tandemd on {} refused registration: {}", path, message);
  } catch (...) {
  }
}

bool link_to_daemon(const unsigned char uuid[16], uint64_t gpu_total_bytes) noexcept {
  if (g_role_refused.load(std::memory_order_acquire)) return false;
  const char* path = setting_text(SettingId::TANDEM_SOCKET);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path, std::strlen(path));
  struct CountAttempt {
    ~CountAttempt() { g_link_attempts.fetch_add(1, std::memory_order_release); }
  } count_attempt;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return false;  // no daemon: run unmanaged (fail open), try again later
  }
  try {
    char hex[33];
    for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
    // tandemd takes the pid from the kernel; "pid" stays for older daemons, which compared it.
    nlohmann::json hello = {{"pid", getpid()}, {"role", setting_text(SettingId::TANDEM_ROLE)}, {"gpu", hex},
                            {"gpu_total_bytes", gpu_total_bytes}};
    MessageHeader h{};
    std::string reply;
    int shm_fd = -1;
    if (!send_message(fd, MessageType::hello, hello.dump()) ||
        recv_message_with_fd(fd, h, reply, shm_fd, 1000) != RecvStatus::ok ||
        h.type != static_cast<uint32_t>(MessageType::hello_ok) || shm_fd < 0) {
      if (h.type == static_cast<uint32_t>(MessageType::error)) note_refusal(path, reply);
      else TANDEM_LOG_WARN("tandemd on {} did not register this process", path);
      if (shm_fd >= 0) close(shm_fd);
      close(fd);
      return false;
    }
    nlohmann::json ok = nlohmann::json::parse(reply);
    int slot = ok.at("slot").get<int>();
    off_t size = lseek(shm_fd, 0, SEEK_END);
    void* p = size >= static_cast<off_t>(sizeof(tandem_shm_header))
                  ? mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0)
                  : MAP_FAILED;
    close(shm_fd);
    auto* shm = static_cast<tandem_shm_header*>(p);
    if (p == MAP_FAILED || shm->magic != TANDEM_SHM_MAGIC || shm->version != TANDEM_SHM_VERSION || slot < 0 ||
        slot >= static_cast<int>(shm->slot_count)) {
      TANDEM_LOG_WARN("tandemd's shared memory has an unknown layout; running unmanaged");
      if (p != MAP_FAILED) munmap(p, static_cast<size_t>(size));
      close(fd);
      return false;
    }
    g_socket = fd;
    g_shm_size = static_cast<size_t>(size);
    g_shm.store(shm, std::memory_order_release);
    g_slot.store(&shm->slots[slot], std::memory_order_release);
    count(gate_counters().daemon_links);
    TANDEM_LOG_INFO("registered with tandemd: slot {}, role {}", slot, setting_text(SettingId::TANDEM_ROLE));
    return true;
  } catch (...) {
    close(fd);
    return false;
  }
}

bool daemon_connected() noexcept {
  if (!g_shm.load(std::memory_order_acquire) || g_socket < 0) return false;
  char byte;
  ssize_t n = recv(g_socket, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
  return !(n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK));  // 0 or error: the daemon closed us
}

bool daemon_exchange(uint32_t type, const std::string& payload, int send_fd, int timeout_ms, ReplyFn on_reply,
                     void* user) noexcept {
  std::lock_guard<std::mutex> lock(g_exchange_mutex);
  if (g_socket < 0 || !g_shm.load(std::memory_order_acquire)) return false;
  auto t = static_cast<MessageType>(type);
  if (!(send_fd >= 0 ? send_message_with_fd(g_socket, t, payload, send_fd) : send_message(g_socket, t, payload)))
    return false;
  uint64_t deadline = monotonic_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
  try {
    for (;;) {
      uint64_t now = monotonic_ns();
      if (now >= deadline) return false;
      MessageHeader h{};
      std::string reply;
      int fd = -1;
      if (recv_message_with_fd(g_socket, h, reply, fd, static_cast<int>((deadline - now) / 1000000ull) + 1) !=
          RecvStatus::ok)
        return false;
      if (h.type == static_cast<uint32_t>(MessageType::error)) {
        if (fd >= 0) close(fd);
        TANDEM_LOG_WARN("tandemd answered message {} with an error: {}", type, reply);
        return false;
      }
      if (!on_reply(h.type, reply, fd, user)) return true;
    }
  } catch (...) {
    return false;
  }
}

void unlink_from_daemon() noexcept {
  // Not while another thread is in an exchange: the next tick tries again.
  std::unique_lock<std::mutex> lock(g_exchange_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  g_slot.store(nullptr, std::memory_order_release);
  // The mapping is kept: a launch may still be reading the slot it loaded a moment ago.
  g_shm.store(nullptr, std::memory_order_release);
  if (g_socket >= 0) close(g_socket);
  g_socket = -1;
  TANDEM_LOG_WARN("tandemd is gone; running unmanaged until it returns");
}

void forget_daemon_link_in_child() noexcept {
  g_slot.store(nullptr);
  g_shm.store(nullptr);
  if (g_socket >= 0) close(g_socket);  // the parent's registration is the parent's
  g_socket = -1;
}

}  // namespace tandem::hook
