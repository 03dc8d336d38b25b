#include "protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

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

RecvStatus read_all(int fd, char* data, size_t size, int timeout_ms, bool started) {
  size_t got = 0;
  while (got < size) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, timeout_ms);
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

// A one-iovec message with room for one descriptor (SCM_RIGHTS), for sendmsg/recvmsg.
struct FdMessage {
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
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

bool send_message_with_fd(int fd, MessageType type, std::string_view payload, int passed_fd) noexcept {
  if (payload.size() > kMaxPayload) return false;
  MessageHeader h{static_cast<uint32_t>(type), static_cast<uint32_t>(payload.size())};
  // The descriptor rides on the header's bytes; the payload follows as a normal write.
  FdMessage m(&h, sizeof h);
  msghdr& msg = m.msg;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &passed_fd, sizeof passed_fd);
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof h)) return false;
  return write_all(fd, payload.data(), payload.size());
}

RecvStatus recv_message_with_fd(int fd, MessageHeader& header, std::string& payload, int& passed_fd,
                                int timeout_ms) {
  passed_fd = -1;
  pollfd p{fd, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, timeout_ms);
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
  if (n == 0) return RecvStatus::closed;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&passed_fd, CMSG_DATA(c), sizeof passed_fd);
  if (static_cast<size_t>(n) < sizeof header) {
    RecvStatus rest = read_all(fd, reinterpret_cast<char*>(&header) + n, sizeof header - static_cast<size_t>(n), timeout_ms, true);
    if (rest != RecvStatus::ok) return rest;
  }
  if (header.length > kMaxPayload) return RecvStatus::too_large;
  payload.resize(header.length);
  return header.length ? read_all(fd, payload.data(), header.length, timeout_ms, true) : RecvStatus::ok;
}

std::string error_payload(int error_number, std::string_view message) {
  return nlohmann::json{{"errno", error_number}, {"message", std::string(message)}}.dump();
}

}  // namespace tandem
