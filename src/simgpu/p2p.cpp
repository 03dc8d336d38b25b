// NCCL point-to-point transfers on the simulated GPUs: a send meets its receive in the peer
// process, in order per connection, and its bytes land in the receiver's buffer.
//  * Which send meets which receive: the n-th send from rank A to rank B of a communicator
//    meets the n-th receive from A on B, the communicator numbered as collectives.cpp numbers
//    it (the how-manieth of its size the process ran a kernel on). Two jobs in one
//    SIMGPU_SHM namespace would meet each other's transfers, as they would their
//    collectives: give each job its own namespace.
//  * How the bytes move: a send copies its bytes into a shared-memory object of its own
//    (SIMGPU_SHM + "-p2p-<key>"), the receive copies them out and removes it. Device memory
//    from cuMemAlloc is private anonymous memory, so the receiver cannot map the sender's
//    buffer; process_vm_readv needs ptrace rights over the sender (refused between sibling
//    ranks under Yama and in many containers) and the sender's buffer may be reused once an
//    eager send has completed. Staging costs one extra copy, done by the engine threads.
//  * Timing: a receive ends `ns` (bytes over the link) after both it and its send have
//    started. A send of at most kEagerBytes (NCCL's default NCCL_BUFFSIZE, 4 MiB: the
//    receiver's buffers take it whole) completes without its receive; a larger one waits for
//    the receive to start, as NCCL's sender waits for buffer credits. A peer that never comes
//    is waited for 60 s, then the kernel completes alone with an error in the log (the
//    collectives' rule).
// Meetings go through a table in shared memory (SIMGPU_SHM + "-p2p"). See docs/simgpu.md.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>

#include "sim.h"

namespace simgpu {
namespace {

constexpr uint32_t kMagic = 0x50325030;  // "P2P0"
constexpr int kSlots = 1024;             // transfers posted and not yet received, per namespace
constexpr uint64_t kWaitLimitNs = 60ull * 1000000000ull;
constexpr uint64_t kEagerBytes = 4ull << 20;

enum : uint32_t { kSent = 1, kPosted = 2 };  // a slot's state: the send staged, the receive posted
struct Slot {
  std::atomic<uint64_t> key;  // the connection and the transfer's number on it; 0: free
  std::atomic<uint32_t> state;
  std::atomic<int32_t> sender;  // process id (process_identity.cpp)
  std::atomic<uint64_t> bytes;  // staged by the sender
};
struct Table {
  std::atomic<uint32_t> magic;
  std::atomic<int32_t> lock;  // the process id claiming a slot; 0: none
  Slot slots[kSlots];
};

Table* table() {
  static Table* t = [] {
    std::string name = settings().shm_prefix + "-p2p";
    auto* table = static_cast<Table*>(map_shared_segment(name, sizeof(Table), kMagic));
    if (!table) log(1, "shared memory %s unavailable: NCCL sends and receives do not meet", name.c_str());
    return table;
  }();
  return t;
}

void pause_briefly() {
  timespec ts{0, 20000};
  nanosleep(&ts, nullptr);
}

// A name for the connection from one rank to another, the same in both processes: the
// communicator as collectives.cpp numbers it (the how-manieth of its size this process ran a
// kernel on) and the two ranks.
uint64_t connection_of(const P2pWork& w, bool send) {
  uint64_t index = communicator_index(w.comm, w.n_ranks);
  uint64_t from = static_cast<uint64_t>(send ? w.rank : w.recv_rank), to = static_cast<uint64_t>(send ? w.send_rank : w.rank);
  uint64_t id = (index << 24 | static_cast<uint64_t>(w.n_ranks) << 16 | from << 8 | to) + 1;
  return id * 0x9e3779b97f4a7c15ull;
}

// The transfers this process has started on each connection, in stream order (the engine
// thread of the communicator's stream runs its kernels in order).
ProcessMutex g_sequences_mutex;
auto* g_sequences = new std::map<uint64_t, uint64_t>();  // never destroyed

uint64_t next_key(uint64_t connection) {
  std::lock_guard<std::mutex> lock(g_sequences_mutex);
  uint64_t n = ++(*g_sequences)[connection];
  uint64_t key = (connection ^ (n * 0xff51afd7ed558ccdull)) * 0xc4ceb9fe1a85ec53ull;
  return key ? key : 1;
}

// The slot of transfer `key`: the one its peer has claimed, or a free one. Claims are made
// under the table's lock, so that the two sides of a transfer never take two slots; a lock
// held by a dead process is taken over.
Slot* claim(Table* t, uint64_t key) {
  int32_t me = process_id();
  for (;;) {
    int32_t holder = 0;
    if (t->lock.compare_exchange_strong(holder, me)) break;
    if (!process_alive(holder)) t->lock.compare_exchange_strong(holder, me);
    if (holder == me) break;
    pause_briefly();
  }
  Slot* found = nullptr;
  for (Slot& s : t->slots)
    if (s.key.load(std::memory_order_acquire) == key) found = &s;
  for (int i = 0; !found && i < kSlots; ++i) {
    Slot& s = t->slots[(key + i) % kSlots];
    if (s.key.load(std::memory_order_acquire) == 0) {
      s.state.store(0, std::memory_order_relaxed);
      s.key.store(key, std::memory_order_release);
      found = &s;
    }
  }
  t->lock.store(0, std::memory_order_release);
  if (!found) log(0, "p2p: all %d transfer slots of %s-p2p are taken", kSlots, settings().shm_prefix.c_str());
  return found;
}

std::string staging_name(uint64_t key) {
  char hex[24];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, key);
  return settings().shm_prefix + "-p2p-" + hex;
}

// Copies the send buffer into the transfer's staging object; false when it cannot.
bool stage(uint64_t key, uint64_t addr, uint64_t bytes) {
  if (bytes == 0) return true;
  if (!valid_device_range(addr, bytes)) return false;
  std::string name = staging_name(key);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  const auto* from = reinterpret_cast<const char*>(addr);
  uint64_t done = 0;
  while (done < bytes) {
    ssize_t n = pwrite(fd, from + done, bytes - done, static_cast<off_t>(done));
    if (n <= 0 && errno != EINTR) break;
    if (n > 0) done += static_cast<uint64_t>(n);
  }
  close(fd);
  return done == bytes;
}

// Copies a staged transfer into the receive buffer (at most `room` bytes) and removes it.
void unstage(uint64_t key, uint64_t bytes, uint64_t addr, uint64_t room) {
  if (bytes == 0) return;
  std::string name = staging_name(key);
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) {
    log(0, "p2p: staged transfer %s missing: the receive buffer keeps its bytes", name.c_str());
    return;
  }
  if (bytes > room) bytes = room;
  if (valid_device_range(addr, bytes)) {
    auto* to = reinterpret_cast<char*>(addr);
    uint64_t done = 0;
    while (done < bytes) {
      ssize_t n = pread(fd, to + done, bytes - done, static_cast<off_t>(done));
      if (n <= 0 && errno != EINTR) break;
      if (n > 0) done += static_cast<uint64_t>(n);
    }
  }
  close(fd);
  shm_unlink(name.c_str());
}

struct Leg {
  const P2pWork* work;
  bool send;
  uint64_t key;
  Slot* slot;
};

// Whether the leg's peer has got far enough: a receive needs its send staged, a large send its
// receive posted (or already done with the slot, which it then freed).
bool peer_ready(const Leg& l) {
  if (!l.send) return l.slot->state.load(std::memory_order_acquire) & kSent;
  if (l.work->send_bytes <= kEagerBytes) return true;
  return (l.slot->state.load(std::memory_order_acquire) & kPosted) || l.slot->key.load() != l.key;
}

}  // namespace

bool run_p2p(int device, const std::vector<P2pWork>& works, uint64_t ns, unsigned sms) {
  Table* t = table();
  if (!t || works.empty()) return false;
  // Every connection is named before anything is posted: a kernel meets all its peers or none.
  std::vector<Leg> legs;
  for (const P2pWork& w : works)
    for (bool send : {true, false}) {
      if ((send ? w.send_rank : w.recv_rank) < 0) continue;
      uint64_t connection = connection_of(w, send);
      if (!connection) return false;
      legs.push_back(Leg{&w, send, connection, nullptr});
    }
  for (Leg& l : legs) l.key = next_key(l.key);
  // Sends first, then receives, then the waits: two kernels that each send to and receive
  // from the other both post before either waits.
  for (bool sends : {true, false})
    for (Leg& l : legs) {
      if (l.send != sends) continue;
      l.slot = claim(t, l.key);
      if (!l.slot) continue;
      if (l.send) {
        if (!stage(l.key, l.work->send_addr, l.work->send_bytes))
          log(0, "p2p: could not stage %" PRIu64 " bytes for rank %d", l.work->send_bytes, l.work->send_rank);
        l.slot->bytes.store(l.work->send_bytes, std::memory_order_relaxed);
        l.slot->sender.store(process_id(), std::memory_order_relaxed);
        l.slot->state.fetch_or(kSent, std::memory_order_release);
      } else {
        l.slot->state.fetch_or(kPosted, std::memory_order_release);
      }
    }
  uint64_t deadline = now_ns() + kWaitLimitNs;
  for (Leg& l : legs) {
    while (l.slot && !peer_ready(l)) {
      if (now_ns() > deadline) {
        log(0, "p2p: rank %d waited 60 s for rank %d's %s: completing alone", l.work->rank,
            l.send ? l.work->send_rank : l.work->recv_rank, l.send ? "receive" : "send");
        l.slot = nullptr;  // left for the peer, should it come
        break;
      }
      pause_briefly();
    }
  }
  run_on_gpu(device, ns, sms);
  for (Leg& l : legs) {
    if (l.send || !l.slot) continue;
    unstage(l.key, l.slot->bytes.load(std::memory_order_relaxed), l.work->recv_addr, l.work->recv_bytes);
    l.slot->sender.store(0, std::memory_order_relaxed);
    l.slot->key.store(0, std::memory_order_release);  // free: the transfer is over on both sides
  }
  return true;
}

}  // namespace simgpu
