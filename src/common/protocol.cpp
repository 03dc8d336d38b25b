#include "protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
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
  if (payload.size() > kMaxPayload) return false;
  MessageHeader h{static_cast<uint32_t>(type), static_cast<uint32_t>(payload.size())};
  return write_all(fd, reinterpret_cast<const char*>(&h), sizeof h) &&
         write_all(fd, payload.data(), payload.size());
}

RecvStatus recv_message(int fd, MessageHeader& header, std::string& payload, int timeout_ms) {
  RecvStatus s = read_all(fd, reinterpret_cast<char*>(&header), sizeof header, timeout_ms, false);
  if (s != RecvStatus::ok) return s;
  if (header.length > kMaxPayload) return RecvStatus::too_large;  // before reading a byte of it
  payload.resize(header.length);
  return header.length ? read_all(fd, payload.data(), header.length, timeout_ms, true) : RecvStatus::ok;
}

bool send_error(int fd, int error_number, std::string_view message) noexcept {
  try {
    nlohmann::json j = {{"errno", error_number}, {"message", std::string(message)}};
    return send_message(fd, MessageType::error, j.dump());
  } catch (...) {
    return false;
  }
}

}  // namespace tandem
