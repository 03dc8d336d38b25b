#include "client_io.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace tandem::scheduler {

void FrameReader::append(const char* data, size_t n, uint64_t now_ns) {
  if (!n) return;
  if (buffer_.empty()) since_ns_ = now_ns;
  buffer_.append(data, n);
  last_append_ns_ = now_ns;
}

FrameReader::Next FrameReader::next(MessageHeader& header, std::string& payload) {
  if (buffer_.size() < sizeof header) return Next::need_more;
  std::memcpy(&header, buffer_.data(), sizeof header);
  if (header.length > kMaxPayload) return Next::too_large;  // before waiting for a byte of it
  size_t whole = sizeof header + header.length;
  if (buffer_.size() < whole) return Next::need_more;
  payload.assign(buffer_, sizeof header, header.length);
  buffer_.erase(0, whole);
  if (buffer_.empty() && buffer_.capacity() > 64 * 1024) buffer_.shrink_to_fit();  // idle clients hold little
  since_ns_ = last_append_ns_;  // what is left arrived with the last bytes, at the latest
  return Next::message;
}

bool FrameReader::has_message() const {
  MessageHeader header;
  if (buffer_.size() < sizeof header) return false;
  std::memcpy(&header, buffer_.data(), sizeof header);
  return header.length > kMaxPayload || buffer_.size() >= sizeof header + header.length;
}

ReplyQueue::~ReplyQueue() { forget(queued()); }

void ReplyQueue::forget(size_t n) {
  if (budget_) budget_->queued -= n;
}

bool ReplyQueue::push(MessageType type, const std::string& payload) {
  size_t n = sizeof(MessageHeader) + payload.size();
  if (payload.size() > kMaxReplyPayload) return false;
  if (!empty() && queued() + n > per_client_) return false;
  if (budget_ && budget_->limit && budget_->queued + n > budget_->limit) return false;
  if (sent_ == pending_.size()) {
    pending_.clear();
    if (pending_.capacity() > 64 * 1024) pending_.shrink_to_fit();  // a large reply once sent is not kept
    sent_ = 0;
  }
  MessageHeader h{static_cast<uint32_t>(type), static_cast<uint32_t>(payload.size())};
  pending_.append(reinterpret_cast<const char*>(&h), sizeof h);
  pending_.append(payload);
  if (budget_) budget_->queued += n;
  return true;
}

bool ReplyQueue::flush(int fd) {
  while (sent_ < pending_.size()) {
    ssize_t n = ::send(fd, pending_.data() + sent_, pending_.size() - sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent_ += static_cast<size_t>(n);
      forget(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;  // the rest when the socket has room (POLLOUT)
    } else {
      return false;
    }
  }
  pending_.clear();
  if (pending_.capacity() > 64 * 1024) pending_.shrink_to_fit();
  sent_ = 0;
  return true;
}

}  // namespace tandem::scheduler
