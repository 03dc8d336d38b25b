// libFuzzer harness for tandemd's socket protocol: a real Server, in-process, serves up to
// three clients, each a socketpair whose far end the server adopts as accept would. The input
// is a script of steps (below); after every step the daemon's invariants are checked, its
// replies must be well-formed frames, and after the last step, with every client gone and
// the server destroyed, no descriptor may be left open. Every framed message also goes to the
// decoder alone (src/common/messages.h), where tandemd reads each request before dispatching
// it: a request it accepts must encode and decode back to the same message (what the clients
// send is what tandemd reads), a refusal must carry an errno and a reason, and the clients'
// decoders of tandemd's replies take the same bytes.
//
// Step: an opcode byte, then its operands.
//   op & 3 == 0  a framed message: type byte (0xFF: 0xFFFF), length (2 bytes LE, clamped to
//                what is left), payload; "$PID" in it becomes this process's pid, so a hello
//                can name its own (the daemon checks it against SO_PEERCRED)
//   op & 3 == 1  raw bytes: length (2 bytes LE), bytes (split headers, bad lengths)
//   op & 3 == 2  a scheduling tick: the next byte is milliseconds to advance the clock
//   op & 3 == 3  the client hangs up (its next message connects again)
//   ((op >> 2) & 3) % 3 is the client; op >> 4 picks descriptors sent with a message (SCM_RIGHTS):
//   1 a memfd, 2 /dev/null, 3 a pipe, 4 three memfds, 5 the client's own socket, 6 twenty
//   memfds (more than the daemon's control buffer holds), otherwise none.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "log.h"
#include "messages.h"
#include "protocol.h"
#include "server.h"
#include "settings.h"

using namespace tandem;

namespace {

constexpr int kClients = 3;

// TANDEM_FUZZ_TRACE=1 prints every reply (to see what an input from build-fuzz/ does).
bool trace_replies() {
  static const bool on = std::getenv("TANDEM_FUZZ_TRACE") != nullptr;
  return on;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_daemon: %s\n", what.c_str());
  std::abort();
}

int open_fd_count() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) fail("cannot read /proc/self/fd");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // the directory's own descriptor
}

// Reads the input's bytes without ever running past its end.
struct Cursor {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  bool done() const { return at >= size; }
  uint8_t byte() { return at < size ? data[at++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(byte() | byte() << 8); }
  std::string bytes(size_t n) {
    n = std::min(n, size - at);
    std::string s(reinterpret_cast<const char*>(data + at), n);
    at += n;
    return s;
  }
};

// Descriptors the harness sends along with a message; it closes its own copies after sending.
std::vector<int> make_fds(unsigned selector, int own_socket) {
  std::vector<int> fds;
  auto memfd = [&] {
    int fd = memfd_create("fuzz-chunk", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, 4096) == 0) fds.push_back(fd);
    else if (fd >= 0) close(fd);
  };
  switch (selector) {
    case 1: memfd(); break;
    case 2: fds.push_back(open("/dev/null", O_RDWR | O_CLOEXEC)); break;
    case 3: {
      int p[2];
      if (pipe2(p, O_CLOEXEC) == 0) fds.assign({p[0], p[1]});
      break;
    }
    case 4: for (int i = 0; i < 3; ++i) memfd(); break;
    case 5: fds.push_back(fcntl(own_socket, F_DUPFD_CLOEXEC, 0)); break;
    case 6: for (int i = 0; i < 20; ++i) memfd(); break;
    default: break;
  }
  std::erase_if(fds, [](int fd) { return fd < 0; });
  return fds;
}

struct FuzzClient {
  int ours = -1;    // the harness's end
  int server = -1;  // the end the daemon adopted
  std::string replies;  // bytes from the daemon not yet cut into frames
};

// A client's decoder of one reply type on hostile bytes: what it accepts, re-encoded, is a
// message it accepts again.
template <class Reply>
void check_reply_decoder(const std::string& payload) {
  Reply reply;
  msg::Refusal why;
  if (!msg::decode(payload, reply, why)) return;
  std::string again = msg::encode(reply);
  if (!msg::decode(again, reply, why)) fail("a reply decoder refuses its own encoding: " + why.message + ": " + again);
}

void check_decoder(uint32_t type, const std::string& payload) {
  msg::Request request;
  msg::Refusal why;
  if (!msg::decode_request(type, payload, request, why)) {
    if (why.error_number <= 0 || why.message.empty()) fail("a refusal without an errno or a reason");
  } else {
    std::string again = std::visit([](const auto& m) { return msg::encode(m); }, request);
    msg::Request back;
    if (!msg::decode_request(type, again, back, why))
      fail("the decoder refuses its own encoding: " + why.message + ": " + again);
    if (!(back == request))
      fail("a request changes through encode and decode: " + payload.substr(0, 200) + " -> " + again);
  }
  check_reply_decoder<msg::HelloOk>(payload);
  check_reply_decoder<msg::QuotaReply>(payload);
  check_reply_decoder<msg::PoolChunk>(payload);
  check_reply_decoder<msg::PoolGranted>(payload);
  check_reply_decoder<msg::PoolRegistered>(payload);
  check_reply_decoder<msg::PoolReleased>(payload);
  check_reply_decoder<msg::GrantReply>(payload);
  check_reply_decoder<msg::Error>(payload);
}

class Session {
 public:
  Session() : server_(scheduler::ServerOptions{"", "fill", {}}) {}

  void run(Cursor& in) {
    while (!in.done()) {
      uint8_t op = in.byte();
      FuzzClient& c = clients_[((op >> 2) & 3) % kClients];
      switch (op & 3) {
        case 0: {
          uint8_t type_byte = in.byte();
          uint32_t type = type_byte == 0xFF ? 0xFFFF : type_byte;
          std::string payload = with_pid(in.bytes(in.u16()));
          check_decoder(type, payload);
          MessageHeader h{type, static_cast<uint32_t>(payload.size())};
          send(c, std::string(reinterpret_cast<const char*>(&h), sizeof h) + payload, op >> 4);
          break;
        }
        case 1: send(c, in.bytes(in.u16()), op >> 4); break;
        case 2:
          clock_ns_ += static_cast<uint64_t>(in.byte()) * 1000000ull;
          server_.tick_for_test(scheduler::monotonic_ns() + clock_ns_);
          break;
        case 3: hang_up(c); break;
      }
      check();
    }
    for (FuzzClient& c : clients_) hang_up(c);
    server_.tick_for_test(scheduler::monotonic_ns() + clock_ns_);
    check();
  }

 private:
  static std::string with_pid(std::string payload) {
    static const std::string pid = std::to_string(getpid());
    for (size_t at = payload.find("$PID"); at != std::string::npos; at = payload.find("$PID", at + pid.size()))
      payload.replace(at, 4, pid);
    return payload;
  }

  void connect(FuzzClient& c) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) fail("socketpair");
    c = FuzzClient{sv[0], sv[1], {}};
    // A small send buffer on the daemon's end: a client that does not read its replies fills
    // it with a few messages, not hundreds, so short inputs reach those paths.
    int small = 4096;
    setsockopt(c.server, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    if (!server_.adopt_client_for_test(c.server)) fail("the server did not adopt a socketpair");
  }

  // Sends `bytes` (the descriptors with the first part), letting the daemon read whenever the
  // socket is full, as its loop would.
  void send(FuzzClient& c, const std::string& bytes, unsigned fd_selector) {
    if (c.ours < 0) connect(c);
    std::vector<int> fds = make_fds(fd_selector, c.ours);
    size_t sent = 0;
    do {
      iovec io{const_cast<char*>(bytes.data() + sent), bytes.size() - sent};
      msghdr msg{};
      msg.msg_iov = &io;
      msg.msg_iovlen = 1;
      std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
      if (!fds.empty()) {
        msg.msg_control = control.data();
        msg.msg_controllen = control.size();
        cmsghdr* cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
      }
      ssize_t n = sendmsg(c.ours, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        for (int fd : fds) close(fd);
        fds.clear();
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        break;  // the daemon hung up on this client
      }
      if (!serve(c)) break;
    } while (sent < bytes.size());
    for (int fd : fds) close(fd);
  }

  // One turn of the daemon's loop for the client, then its replies read and checked.
  bool serve(FuzzClient& c) {
    bool connected = server_.serve_client_for_test(c.server);
    drain(c);
    if (!connected) {
      close(c.ours);
      c = FuzzClient{};
    }
    return connected;
  }

  void hang_up(FuzzClient& c) {
    if (c.ours < 0) return;
    shutdown(c.ours, SHUT_WR);
    // The daemon handles what is still unread, then sees the end of the stream.
    bool kept = true;
    for (int turn = 0; kept && turn < 4; ++turn) {
      kept = server_.serve_client_for_test(c.server);
      drain(c);
    }
    if (kept) fail("the daemon kept a client that hung up");
    close(c.ours);
    c = FuzzClient{};
  }

  // Reads everything the daemon wrote: whole frames of reply types, JSON payloads.
  void drain(FuzzClient& c) {
    char buffer[65536];
    for (;;) {
      iovec io{buffer, sizeof buffer};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
      msghdr msg{};
      msg.msg_iov = &io;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      ssize_t n = recvmsg(c.ours, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (n <= 0) break;
      for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
          close(fd);
        }
      }
      c.replies.append(buffer, static_cast<size_t>(n));
    }
    while (c.replies.size() >= sizeof(MessageHeader)) {
      MessageHeader h;
      std::memcpy(&h, c.replies.data(), sizeof h);
      switch (static_cast<MessageType>(h.type)) {
        case MessageType::hello_ok: case MessageType::status_reply: case MessageType::trace_reply:
        case MessageType::quota_reply: case MessageType::pool_chunk: case MessageType::pool_granted:
        case MessageType::pool_registered: case MessageType::pool_released: case MessageType::grant_reply:
        case MessageType::error: break;
        default: fail("the daemon sent a frame of type " + std::to_string(h.type));
      }
      if (h.length > kMaxReplyPayload) fail("the daemon sent a frame of " + std::to_string(h.length) + " bytes");
      if (c.replies.size() < sizeof h + h.length) break;
      std::string payload = c.replies.substr(sizeof h, h.length);
      if (!nlohmann::json::accept(payload)) fail("the daemon sent a payload that is not JSON: " + payload.substr(0, 200));
      if (trace_replies())
        std::fprintf(stderr, "client %d <- %u %s\n", static_cast<int>(&c - clients_), h.type, payload.substr(0, 300).c_str());
      c.replies.erase(0, sizeof h + h.length);
    }
  }

  void check() {
    std::string violation = server_.invariant_violation_for_test();
    if (!violation.empty()) fail("invariant: " + violation);
  }

  scheduler::Server server_;
  FuzzClient clients_[kClients];
  uint64_t clock_ns_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Fixed settings, whatever the environment says: small chunks and watermark so that a few
  // registered chunks reach the reclaim and give-back paths; only errors logged.
  static char log[] = "TANDEM_LOG=error", chunk[] = "TANDEM_MEM_CHUNK=2M", watermark[] = "TANDEM_MEM_WATERMARK=2M",
              handover[] = "TANDEM_MEM_HANDOVER_MS=50";
  static char* env[] = {log, chunk, watermark, handover, nullptr};
  load_settings(env, [](const char*) noexcept {});
  set_log_level(LogLevel::error);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fds_before = open_fd_count();
  {
    Cursor in{data, size};
    Session session;
    session.run(in);
  }
  int fds_after = open_fd_count();
  if (fds_after != fds_before)
    fail("the daemon leaked " + std::to_string(fds_after - fds_before) + " descriptors");
  return 0;
}
