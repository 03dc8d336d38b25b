// tandem's socket protocol (DESIGN §7), its framing: a fixed header {type, length} then `length`
// bytes of payload (JSON text; messages.h defines each). The length is validated before any
// payload byte is read. Errors come back as `error` replies carrying {"errno": int, "message": str}.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

enum class MessageType : uint32_t {
  // Each message's payload, and its validation, is defined once in messages.h.
  hello = 1,            // client -> daemon: registration (role, GPU); the pid is the kernel's, not the payload's
  hello_ok = 2,         // daemon -> client: its slot, + two fds: the GPU's segment (read-only) and
                        //   the client's page (include/tandem/shm_abi.h)
  status_request = 3,   // any -> daemon
  status_reply = 4,     // daemon -> client: the status document
  trace_request = 5,    // any -> daemon: the trace since a CLOCK_MONOTONIC time
  trace_reply = 6,      // daemon -> client: {"now_ns": int, "gpus": {uuid: chrome-trace}}
  quota_request = 7,    // any -> daemon: a registered process's memory quota
  quota_reply = 8,      // daemon -> client
  // The memory pool (docs/memory.md), on a registered client's connection:
  pool_acquire = 9,     // client -> daemon: chunks wanted; answered (perhaps after other processes
                        //   released memory) by pool_chunk messages, then pool_granted
  pool_chunk = 10,      // daemon -> client: chunk ids + one fd each (up to 64 to a message)
  pool_granted = 11,    // daemon -> client: how many came, and why not more
  pool_register = 12,   // client -> daemon: the fd of a chunk it created
  pool_registered = 13, // daemon -> client: the chunk's id
  pool_release = 14,    // client -> daemon: chunks it unmapped
  pool_released = 15,   // daemon -> client
  // Grants (docs/security.md): a socket bound to one allocation (role, GPU, memory limit), whose
  // every client has exactly its rights. Only tandemd's node administrators may ask.
  grant_request = 16,   // admin -> daemon: create (or re-state) a grant
  grant_reply = 17,     // daemon -> admin: where its socket is
  error = 0xFFFF,       // daemon -> client: {"errno": int, "message": str}
};

struct MessageHeader {
  uint32_t type;
  uint32_t length;
};

constexpr uint32_t kMaxPayload = 64 * 1024;             // what the daemon accepts
constexpr uint32_t kMaxReplyPayload = 64 * 1024 * 1024;  // what the daemon may answer (traces)

enum class RecvStatus { ok, closed, too_large, truncated, timeout, io_error };
const char* recv_status_name(RecvStatus s) noexcept;

// Sends one whole message (retries on EINTR and partial writes, never raises SIGPIPE).
bool send_message(int fd, MessageType type, std::string_view payload) noexcept;

// Receives one message, waiting at most `timeout_ms` for each part (-1: no limit).
RecvStatus recv_message(int fd, MessageHeader& header, std::string& payload, int timeout_ms,
                        uint32_t max_payload = kMaxPayload);

// The same, passing a file descriptor along (SCM_RIGHTS): the daemon hands out shared memory.
bool send_message_with_fd(int fd, MessageType type, std::string_view payload, int passed_fd) noexcept;
// With `count` descriptors (1 to 4).
bool send_message_with_fds(int fd, MessageType type, std::string_view payload, const int* passed,
                           size_t count) noexcept;
// Receives a message and the descriptor that came with it (-1 when none); waits at most
// `timeout_ms` in all (-1: no limit). Extra descriptors are closed.
RecvStatus recv_message_with_fd(int fd, MessageHeader& header, std::string& payload, int& passed_fd,
                                int timeout_ms);
// Receives a message, at most `max_payload` bytes of it, and up to `max_fds` descriptors into
// `passed` (`count` of them); waits at most `timeout_ms` in all (-1: no limit), however slowly
// the peer sends. Descriptors beyond `max_fds`, and all of them when the status is not ok, are
// closed here.
RecvStatus recv_message_with_fds(int fd, MessageHeader& header, std::string& payload, int* passed, size_t max_fds,
                                 size_t& count, int timeout_ms, uint32_t max_payload);

}  // namespace tandem
