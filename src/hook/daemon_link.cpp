#include "daemon_link.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>

#include "counters.h"
#include "job_ranks.h"
#include "link_check.h"
#include "log.h"
#include "messages.h"
#include "progress.h"
#include "protocol.h"
#include "settings.h"

namespace tandem::hook {

std::atomic<const tandem_slot*> g_slot{nullptr};
std::atomic<tandem_client_page*> g_page{nullptr};
std::atomic<const tandem_shm_header*> g_shm{nullptr};

std::atomic<uint32_t> g_link_attempts{0};

namespace {
// tandemd refused this process's role (EACCES): it runs ungated for good, and says so once.
std::atomic<bool> g_role_refused{false};
int g_socket = -1;
// Held for a whole exchange on the socket; the progress thread only tries it.
std::mutex g_exchange_mutex;
// A daemon that answers badly is said once (it is asked again every second).
std::atomic<bool> g_bad_daemon_warned{false};

// Bounds on the registration: the connect, each send, the whole hello reply and its size.
constexpr int kConnectTimeoutMs = 1000;
constexpr int kHelloTimeoutMs = 1000;
constexpr int kSendTimeoutMs = 1000;
constexpr uint32_t kMaxHelloReply = 4096;

void warn_bad_daemon(const char* path, const char* why) {
  if (!g_bad_daemon_warned.exchange(true))
    TANDEM_LOG_WARN("the program at {} is not a tandemd this library can use ({}); running unmanaged", path, why);
  else
    TANDEM_LOG_DEBUG("the program at {} answered badly again: {}", path, why);
}

// A connected socket to `addr`, or -1 within kConnectTimeoutMs: never the unbounded wait of a
// blocking connect to a listener whose backlog is full (that is EAGAIN here: try again at the
// next attempt). Then blocking again, with every send and
// receive bounded by SO_SNDTIMEO / SO_RCVTIMEO besides the receive deadlines.
int connect_bounded(const sockaddr_un& addr) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) {
      close(fd);
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof error;
    if (poll(&p, 1, kConnectTimeoutMs) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error) {
      close(fd);
      return -1;
    }
  }
  timeval send_timeout{kSendTimeoutMs / 1000, (kSendTimeoutMs % 1000) * 1000};
  timeval recv_timeout{kHelloTimeoutMs / 1000, (kHelloTimeoutMs % 1000) * 1000};
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &recv_timeout, sizeof recv_timeout) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Maps what a hello_ok brought, after checking all of it. False (nothing mapped, `why` set)
// when anything is off.
bool map_registration(int shm_fd, int page_fd, int slot, const tandem_shm_header*& shm, tandem_client_page*& page,
                      const char** why) {
  if (!sealed_memfd_of_size(shm_fd, sizeof(tandem_shm_header), why) ||
      !sealed_memfd_of_size(page_fd, sizeof(tandem_client_page), why))
    return false;
  // Read-only: what the daemon writes is never written here (the daemon seals its segment
  // against writable mappings anyway).
  void* s = mmap(nullptr, sizeof(tandem_shm_header), PROT_READ, MAP_SHARED, shm_fd, 0);
  if (s == MAP_FAILED) return *why = "the segment cannot be mapped", false;
  shm = static_cast<const tandem_shm_header*>(s);
  if (!segment_layout_ok(shm, why) || __atomic_load_n(&shm->slots[slot].state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE) {
    if (!*why) *why = "the slot given is not active";
    munmap(s, sizeof(tandem_shm_header));
    return false;
  }
  void* p = mmap(nullptr, sizeof(tandem_client_page), PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
  if (p == MAP_FAILED) {
    munmap(s, sizeof(tandem_shm_header));
    return *why = "the client page cannot be mapped", false;
  }
  page = static_cast<tandem_client_page*>(p);
  return true;
}

}  // namespace

uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t role_code(const char* role) noexcept { return msg::role_code(role); }

// Logs a refused hello: a refused role once (and no more attempts), other refusals when their
// text changes, so that a process retrying every second does not fill its log.
void note_refusal(const char* path, const std::string& reply) noexcept {
  static std::mutex mutex;
  static std::string last;
  try {
    msg::Error e;
    msg::Refusal unreadable;
    if (!msg::decode(reply, e, unreadable)) e = msg::Error{0, reply};
    const int error_number = e.error_number;
    const std::string& message = e.message.empty() ? reply : e.message;
    if (error_number == EACCES) {
      // A protected role refused is registered as a filler, gated, never ungated: a process
      // that asks for more than it may have gets less, not nothing.
      const uint32_t asked = g_role.load(std::memory_order_relaxed);
      if (asked == TANDEM_ROLE_TRAINING || asked == TANDEM_ROLE_INFERENCE) {
        g_role.store(TANDEM_ROLE_BATCH_INFERENCE, std::memory_order_relaxed);
        TANDEM_LOG_WARN("tandemd on {} refused role {}: {}; registering as batch-inference (gated)", path,
                        setting_text(SettingId::TANDEM_ROLE), message);
        return;
      }
      g_role_refused.store(true, std::memory_order_release);
      TANDEM_LOG_WARN("tandemd on {} refused role {}: {}; running ungated", path, msg::role_name(asked), message);
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
  int fd = connect_bounded(addr);
  if (fd < 0) return false;  // no daemon: run unmanaged (fail open), try again later
  int fds[2] = {-1, -1};
  size_t received = 0;
  auto give_up = [&](const char* why) {
    if (why) warn_bad_daemon(path, why);
    for (size_t i = 0; i < received; ++i) close(fds[i]);
    close(fd);
    return false;
  };
  try {
    char hex[33];
    for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
    // tandemd takes the pid from the kernel; "pid" stays for older daemons, which compared it.
    msg::Hello hello;
    hello.pid = getpid();
    hello.role = msg::role_name(g_role.load(std::memory_order_relaxed));
    hello.gpu = hex;
    hello.gpu_total_bytes = gpu_total_bytes;
    if (const JobIdentity& job = job_identity(); job.ranks > 1) {
      hello.job = job.key;
      hello.job_ranks = job.ranks;
    }
    const std::string payload = msg::encode(hello);  // never throws; "" without memory
    MessageHeader h{};
    std::string reply;
    if (payload.empty() || !send_message(fd, MessageType::hello, payload)) return give_up(nullptr);
    RecvStatus status = recv_message_with_fds(fd, h, reply, fds, 2, received, kHelloTimeoutMs, kMaxHelloReply);
    if (status != RecvStatus::ok) return give_up(recv_status_name(status));
    if (h.type == static_cast<uint32_t>(MessageType::error)) {
      note_refusal(path, reply);
      return give_up(nullptr);
    }
    if (h.type != static_cast<uint32_t>(MessageType::hello_ok)) return give_up("the reply to hello is not hello_ok");
    const char* why = nullptr;
    std::string registered_role;
    int slot = hello_slot(reply, registered_role, &why);
    if (slot < 0) return give_up(why);
    if (received != 2) return give_up("hello_ok did not bring the segment and the client page");
    const tandem_shm_header* shm = nullptr;
    tandem_client_page* page = nullptr;
    if (!map_registration(fds[0], fds[1], slot, shm, page, &why)) return give_up(why);
    close(fds[0]);
    close(fds[1]);
    received = 0;
    g_socket = fd;
    // The page before the slot: whoever sees the slot finds the page (a previous link's
    // mappings stay: a launch may still be reading them).
    g_page.store(page, std::memory_order_release);
    g_shm.store(shm, std::memory_order_release);
    g_slot.store(&shm->slots[slot], std::memory_order_release);
    count(gate_counters().daemon_links);
    // The role tandemd registered (a grant's socket gives its own, whatever was asked).
    if (const uint32_t code = role_code(registered_role.c_str());
        !registered_role.empty() && code != TANDEM_ROLE_NONE && code != g_role.load(std::memory_order_relaxed)) {
      TANDEM_LOG_WARN("tandemd on {} registered this process as {}, not {} (the role of its grant)", path,
                      registered_role, msg::role_name(g_role.load(std::memory_order_relaxed)));
      g_role.store(code, std::memory_order_relaxed);
    }
    TANDEM_LOG_INFO("registered with tandemd: slot {}, role {}", slot, msg::role_name(g_role.load(std::memory_order_relaxed)));
    return true;
  } catch (...) {
    return give_up("the reply could not be read");
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
      int fds[kMaxReplyFds];
      size_t count = 0;
      if (recv_message_with_fds(g_socket, h, reply, fds, kMaxReplyFds, count,
                                static_cast<int>((deadline - now) / 1000000ull) + 1, kMaxPayload) != RecvStatus::ok)
        return false;
      if (h.type == static_cast<uint32_t>(MessageType::error)) {
        for (size_t i = 0; i < count; ++i) close(fds[i]);
        TANDEM_LOG_WARN("tandemd answered message {} with an error: {}", type, reply);
        return false;
      }
      if (!on_reply(h.type, reply, fds, count, user)) return true;
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
  // The mappings are kept: a launch may still be reading the slot it loaded a moment ago.
  g_shm.store(nullptr, std::memory_order_release);
  if (g_socket >= 0) close(g_socket);
  g_socket = -1;
  TANDEM_LOG_WARN("tandemd is gone; running unmanaged until it returns");
}

void daemon_link_after_fork_child() noexcept {
  // Only this thread exists: a parent's thread that held the lock is not here to release it.
  new (&g_exchange_mutex) std::mutex();
  g_slot.store(nullptr, std::memory_order_release);
  g_shm.store(nullptr, std::memory_order_release);
  g_page.store(nullptr, std::memory_order_release);  // the parent's page: the child must not write it
  if (g_socket >= 0) close(g_socket);  // the child's copy; the parent's registration stays
  g_socket = -1;
  g_link_attempts.store(0, std::memory_order_release);
}

}  // namespace tandem::hook
