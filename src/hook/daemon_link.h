// The link from a process to tandemd: registration over the UNIX socket, the GPU's segment
// (mapped read-only: the daemon's part of every slot) and this process's own page (the only
// shared memory it writes). Everything here runs on the progress thread, never on a launch.
// Launch hooks read only `current_slot()` / `current_page()` (one atomic load each) and fail
// open when the slot is null: no daemon, not registered yet, or the daemon went away.
// Nothing a daemon sends is trusted before it is checked (link_check.h): a program that is
// not tandemd listening at TANDEM_SOCKET gets a warning and a process running unmanaged.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "tandem/shm_abi.h"

namespace tandem::hook {

extern std::atomic<const tandem_slot*> g_slot;
extern std::atomic<tandem_client_page*> g_page;
extern std::atomic<const tandem_shm_header*> g_shm;

// The daemon's part of this process's slot (read-only memory: never written here).
inline const tandem_slot* current_slot() noexcept { return g_slot.load(std::memory_order_acquire); }
// This process's page. Set before the slot and kept (still mapped) after an unlink, so it is
// never null while current_slot() is not.
inline tandem_client_page* current_page() noexcept { return g_page.load(std::memory_order_acquire); }

uint32_t role_code(const char* role) noexcept;

// Tries once to register with the daemon for the GPU `uuid`. True when linked.
bool link_to_daemon(const unsigned char uuid[16], uint64_t gpu_total_bytes) noexcept;
// True while the daemon's socket is open. A stale heartbeat alone does not drop the link: a
// daemon that is only descheduled for a moment would cost a re-registration, and the gate
// already fails open, launch by launch, while the heartbeat is stale.
bool daemon_connected() noexcept;
// Drops the link (daemon gone): launches pass from now on. Re-linking happens later.
void unlink_from_daemon() noexcept;
// Fork, in the child: no link (the parent's registration is the parent's; the child registers
// on its own if it uses CUDA), the exchange lock fresh (a parent's thread may have held it).
void daemon_link_after_fork_child() noexcept;

uint64_t monotonic_ns() noexcept;

// Link attempts made so far (the memory pool waits, bounded, for the first one).
extern std::atomic<uint32_t> g_link_attempts;

// One request on the registration socket and its replies, serialized between threads (the
// memory pool asks from application threads and the progress thread). `send_fd` (-1: none)
// travels with the request. Each reply goes to `on_reply(type, payload, fds, fd_count)` until
// it returns false; passed fds (up to kMaxReplyFds a reply) belong to the callee. False when
// not linked, on a socket error, or after `timeout_ms` without a reply.
constexpr size_t kMaxReplyFds = 64;
using ReplyFn = bool (*)(uint32_t type, const std::string& payload, const int* fds, size_t fd_count, void* user);
bool daemon_exchange(uint32_t type, const std::string& payload, int send_fd, int timeout_ms, ReplyFn on_reply,
                     void* user) noexcept;

}  // namespace tandem::hook
