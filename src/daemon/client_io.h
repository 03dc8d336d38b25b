// A client connection's buffered, non-blocking I/O in the daemon: the poll loop must never
// wait on one client (a slow or malicious one would stall the GPUs' ticks, the daemon's
// heartbeat would go stale, and every gated process would fail open).
//   input:  bytes are appended as they arrive and cut into whole messages; a message's length
//           is checked as soon as its header is complete, before its payload is awaited;
//   output: replies are queued and written as the socket accepts them (POLLOUT), within a
//           per-client and a daemon-wide budget (daemon_limits.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "protocol.h"

namespace tandem::scheduler {

class FrameReader {
 public:
  enum class Next { need_more, message, too_large };

  void append(const char* data, size_t n, uint64_t now_ns);
  // Takes the next whole message out of the buffer, if there is one.
  Next next(MessageHeader& header, std::string& payload);
  // Since when a message has been incomplete (0: none is).
  uint64_t partial_since_ns() const { return buffer_.empty() ? 0 : since_ns_; }
  size_t buffered() const { return buffer_.size(); }
  // True when a whole message (or a header announcing too large a one) waits to be taken.
  bool has_message() const;

 private:
  std::string buffer_;
  uint64_t since_ns_ = 0;  // when the bytes at the front of the buffer began to arrive
  uint64_t last_append_ns_ = 0;
};

// The bytes queued for all clients together, and their cap.
struct ReplyBudget {
  size_t queued = 0;
  size_t limit = 0;
};

class ReplyQueue {
 public:
  // `per_client`: most bytes queued for this client, except that one reply of any size up to
  // kMaxReplyPayload may be queued alone; `budget`: shared by all queues (may be null).
  ReplyQueue(size_t per_client, ReplyBudget* budget) : per_client_(per_client), budget_(budget) {}
  ~ReplyQueue();
  ReplyQueue(const ReplyQueue&) = delete;
  ReplyQueue& operator=(const ReplyQueue&) = delete;

  // False when the queue would grow past its cap or the budget (a client that does not read
  // its replies is dropped, not buffered without bound).
  bool push(MessageType type, const std::string& payload);
  // Writes what the socket takes now. False on a socket error (the peer is gone).
  bool flush(int fd);
  bool empty() const { return pending_.size() == sent_; }
  size_t queued() const { return pending_.size() - sent_; }

 private:
  void forget(size_t n);  // n bytes left the queue

  std::string pending_;
  size_t sent_ = 0;  // bytes of pending_ already written
  size_t per_client_;
  ReplyBudget* budget_;
};

}  // namespace tandem::scheduler
