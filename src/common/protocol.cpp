#include "protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace tandem {

namespace {

bool write_all(int fd, const char* data, size_t size) noexcept {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

uint64_t now_ms() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

// What is left of `timeout_ms` when every wait is bounded by `deadline_ms` (0: none).
int remaining_ms(int timeout_ms, uint64_t deadline_ms) noexcept {
  if (!deadline_ms) return timeout_ms;
  uint64_t now = now_ms();
  int left = now >= deadline_ms ? 0 : static_cast<int>(std::min<uint64_t>(deadline_ms - now, INT32_MAX));
  return timeout_ms < 0 || left < timeout_ms ? left : timeout_ms;
}

RecvStatus read_all(int fd, char* data, size_t size, int timeout_ms, bool started, uint64_t deadline_ms = 0) {
  size_t got = 0;
  while (got < size) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, remaining_ms(timeout_ms, deadline_ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return RecvStatus::io_error;
    if (ready == 0) return got || started ? RecvStatus::truncated : RecvStatus::timeout;
    ssize_t n = ::recv(fd, data + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return RecvStatus::io_error;
    if (n == 0) return got || started ? RecvStatus::truncated : RecvStatus::closed;
    got += static_cast<size_t>(n);
  }
  return RecvStatus::ok;
}

// A one-iovec message with room for a few descriptors (SCM_RIGHTS), for sendmsg/recvmsg.
constexpr size_t kMaxFdsPerMessage = 64;  // tandemd passes pool chunks in batches of 64
struct FdMessage {
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)] = {};
  msghdr msg{};
  FdMessage(void* data, size_t size) : iov{data, size} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
};

}  // namespace

const char* recv_status_name(RecvStatus s) noexcept {
  switch (s) {
    case RecvStatus::ok: return "ok";
    case RecvStatus::closed: return "closed";
    case RecvStatus::too_large: return "payload too large";
    case RecvStatus::truncated: return "truncated message";
    case RecvStatus::timeout: return "timeout";
    case RecvStatus::io_error: return "i/o error";
  }
  return "?";
}

bool send_message(int fd, MessageType type, std::string_view payload) noexcept {
  if (payload.size() > kMaxReplyPayload) return false;
  MessageHeader h{static_cast<uint32_t>(type), static_cast<uint32_t>(payload.size())};
  return write_all(fd, reinterpret_cast<const char*>(&h), sizeof h) &&
         write_all(fd, payload.data(), payload.size());
}

RecvStatus recv_message(int fd, MessageHeader& header, std::string& payload, int timeout_ms,
                        uint32_t max_payload) {
  RecvStatus s = read_all(fd, reinterpret_cast<char*>(&header), sizeof header, timeout_ms, false);
  if (s != RecvStatus::ok) return s;
  if (header.length > max_payload) return RecvStatus::too_large;  // before reading a byte of it
  payload.resize(header.length);
  return header.length ? read_all(fd, payload.data(), header.length, timeout_ms, true) : RecvStatus::ok;
}

bool send_message_with_fds(int fd, MessageType type, std::string_view payload, const int* passed, size_t count) noexcept {
  if (payload.size() > kMaxPayload || count == 0 || count > kMaxFdsPerMessage) return false;
  MessageHeader h{static_cast<uint32_t>(type), static_cast<uint32_t>(payload.size())};
  // The descriptors ride on the header's bytes; the payload follows as a normal write.
  FdMessage m(&h, sizeof h);
  msghdr& msg = m.msg;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * count);
  std::memcpy(CMSG_DATA(c), passed, sizeof(int) * count);
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof h)) return false;
  return write_all(fd, payload.data(), payload.size());
}

bool send_message_with_fd(int fd, MessageType type, std::string_view payload, int passed_fd) noexcept {
  return send_message_with_fds(fd, type, payload, &passed_fd, 1);
}

RecvStatus recv_message_with_fds(int fd, MessageHeader& header, std::string& payload, int* passed, size_t max_fds,
                                 size_t& count, int timeout_ms, uint32_t max_payload) {
  count = 0;
  const uint64_t deadline = now_ms() + static_cast<uint64_t>(timeout_ms < 0 ? 0 : timeout_ms);
  // Every descriptor that arrived and is not handed back is closed: a peer cannot make us
  // leak them by sending more than asked for, or with a message that then fails.
  auto fail = [&](RecvStatus s) {
    for (size_t i = 0; i < count; ++i) close(passed[i]);
    count = 0;
    return s;
  };
  pollfd p{fd, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, timeout_ms < 0 ? -1 : remaining_ms(timeout_ms, deadline));
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) return RecvStatus::io_error;
  if (ready == 0) return RecvStatus::timeout;
  FdMessage m(&header, sizeof header);
  msghdr& msg = m.msg;
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return RecvStatus::io_error;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t in_message = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < in_message; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof received);
      if (count < max_fds) passed[count++] = received;
      else close(received);
    }
  }
  if (n == 0) return fail(RecvStatus::closed);
  uint64_t bound = timeout_ms < 0 ? 0 : deadline;
  if (static_cast<size_t>(n) < sizeof header) {
    RecvStatus rest = read_all(fd, reinterpret_cast<char*>(&header) + n, sizeof header - static_cast<size_t>(n),
                               timeout_ms, true, bound);
    if (rest != RecvStatus::ok) return fail(rest);
  }
  if (header.length > max_payload) return fail(RecvStatus::too_large);
  payload.resize(header.length);
  RecvStatus s = header.length ? read_all(fd, payload.data(), header.length, timeout_ms, true, bound) : RecvStatus::ok;
  return s == RecvStatus::ok ? s : fail(s);
}

RecvStatus recv_message_with_fd(int fd, MessageHeader& header, std::string& payload, int& passed_fd,
                                int timeout_ms) {
  size_t count = 0;
  RecvStatus s = recv_message_with_fds(fd, header, payload, &passed_fd, 1, count, timeout_ms, kMaxPayload);
  if (!count) passed_fd = -1;
  return s;
}

}  // namespace tandem
