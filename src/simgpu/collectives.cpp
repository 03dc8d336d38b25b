// NCCL collectives on the simulated GPUs. Kernels do not run, so the simulator gives an NCCL
// kernel the two properties that matter to a scheduler:
//  * rendezvous: a collective finishes on a rank only once every rank of its communicator
//    has started it. One late rank holds all the others (why tandem never holds an NCCL
//    kernel back);
//  * duration: once all have arrived it lasts the bytes each rank moves over its link
//    divided by the link bandwidth (SIMGPU_LINK_GBPS), at least SIMGPU_MIN_KERNEL_NS, and
//    ends when the slowest rank's transfer ends (a GPU shared with another process slows
//    the whole collective).
// Ranks are recognised from the kernel's argument (NCCL 2.19+: ncclDevKernelArgs, whose first
// field points at the communicator's device-side ncclKernelComm: rank and nRanks first):
// the n-th collective a process runs on its k-th communicator of N ranks meets the n-th
// collective of the other ranks' k-th communicator of N ranks, in a POSIX shared-memory table
// per namespace (SIMGPU_SHM + "-collectives"). The message size comes from the work descriptors
// (ncclDevWorkColl / ncclDevWorkP2p, in the arguments or NCCL's work FIFO) and the element
// type in the kernel's name. Layouts are NCCL 2.28's (older versions since 2.19 are read the
// same way) or 2.30's, chosen by the ncclGetVersion of the libnccl loaded in the process;
// anything unrecognised falls back to the ordinary kernel cost. Send/receive kernels meet per
// (sender, receiver) pair and move their bytes instead (p2p.cpp).
// See docs/simgpu.md.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <set>

#include "sim.h"

namespace simgpu {
namespace {

constexpr uint32_t kMagic = 0x4e43434c;  // "NCCL"
constexpr int kMaxRanks = 16;            // at most 16 simulated GPUs
constexpr int kWindow = 64;              // collectives in flight per communicator size
constexpr uint64_t kWaitLimitNs = 60ull * 1000000000ull;

// One rank's arrival at a collective: `key` names the communicator (the how-manieth of its
// size this process made) and the collective's number on it; `pid` tells a live arrival from
// one left by an earlier run in the same namespace.
struct Arrival {
  std::atomic<uint64_t> key;  // communicator index << 40 | (sequence + 1); 0 = never used
  std::atomic<int32_t> pid;
  std::atomic<int32_t> unused;
};
struct Table {
  std::atomic<uint32_t> magic;
  Arrival arrivals[kMaxRanks][kWindow][kMaxRanks];  // [nRanks - 1][sequence % window][rank]: started
  Arrival finished[kMaxRanks][kWindow][kMaxRanks];  // the same: done with its transfer
};

Table* table() {
  static Table* t = [] {
    std::string name = settings().shm_prefix + "-collectives";
    auto* table = static_cast<Table*>(map_shared_segment(name, sizeof(Table), kMagic));
    if (!table) log(1, "shared memory %s unavailable: NCCL collectives do not wait for their peers", name.c_str());
    return table;
  }();
  return t;
}

// ---- NCCL's device-side layouts (src/include/device.h), read-only ----
struct KernelComm {  // ncclKernelComm's head
  int32_t rank;
  int32_t n_ranks;
};
struct KernelArgs {  // ncclDevKernelArgs, followed by ncclDevWorkBatch batches[]
  uint64_t comm;
  uint64_t channel_mask;
  uint8_t storage_type;  // 0 in the arguments, 1 FIFO, 2 persistent
  uint8_t pad[3];
  uint32_t work_mask;
  uint64_t work_buf;
};
static_assert(sizeof(KernelArgs) == 32, "ncclDevKernelArgs");
struct WorkBatch {
  uint32_t flags;  // nextJump:14, nextExtends:1, workType:2, funcId:15
  uint32_t offset_base;
  uint64_t offset_bitset;
};
constexpr unsigned kWorkP2p = 0, kWorkBcast = 3;  // 1 ncclDevWorkColl, 2 ncclDevWorkCollReg
struct WorkP2p {  // ncclDevWorkP2p's head (the same in 2.28 and 2.30)
  uint64_t send_addr, recv_addr, send_bytes, recv_bytes;
  int32_t send_rank, recv_rank;
  uint8_t n_p2p_channels, channel_base, n_send_channels, n_recv_channels;  // 0 channels: no such direction
};

// What moved between versions: 2.30 padded ncclDevWorkColl to 128 bytes (its counts from byte
// 56 to 80) and added the batched-broadcast work (ncclDevWorkBcast, its byte count at 24).
struct Layout {
  size_t work_size[4];  // by work type: P2p, Coll, CollReg, Bcast
  size_t coll_counts;   // countLo, countMid, countHi
};
constexpr Layout kLayout228 = {{64, 96, 96 + 192, 0}, 56};
constexpr Layout kLayout230 = {{64, 128, 128 + 192, 48}, 80};

}  // namespace

// The version of the NCCL loaded in this process (ncclGetVersion of the first libnccl found),
// 0 when none is. Its path is found with dl_iterate_phdr and the library opened after that
// returns: dl_iterate_phdr holds the loader's list lock, and a dlopen inside its callback waits
// for the loader's main lock, which a thread in dlopen holds while it waits for the list lock
// (a PyTorch rank hung so: its engine thread ran the first NCCL kernel while the main thread
// loaded cuDNN). First called where an NCCL kernel's function is resolved (module.cpp), on the
// application's thread, so that an engine thread never waits for the loader.
int loaded_nccl_version() {
  static const int version = [] {
    std::string path;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) {
          if (!info->dlpi_name || !std::strstr(info->dlpi_name, "libnccl.so")) return 0;
          *static_cast<std::string*>(out) = info->dlpi_name;
          return 1;
        },
        &path);
    void* handle = path.empty() ? nullptr : dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    using GetVersion = int (*)(int*);
    auto get = handle ? reinterpret_cast<GetVersion>(dlsym(handle, "ncclGetVersion")) : nullptr;
    int v = 0;
    if (!get || get(&v) != 0) v = 0;
    if (handle) dlclose(handle);  // RTLD_NOLOAD took a reference
    log(2, "NCCL %d in this process: reading its %s work layout", v, v >= 23000 ? "2.30" : "2.28");
    return v;
  }();
  return version;
}

namespace {

enum class Kind { all_reduce, broadcast, reduce, all_gather, reduce_scatter, send_recv, other };

Kind kind_of(const std::string& name) {
  if (name.find("_AllReduce") != std::string::npos) return Kind::all_reduce;
  if (name.find("_ReduceScatter") != std::string::npos) return Kind::reduce_scatter;
  if (name.find("_Reduce") != std::string::npos) return Kind::reduce;
  if (name.find("_Broadcast") != std::string::npos) return Kind::broadcast;
  if (name.find("_AllGather") != std::string::npos) return Kind::all_gather;
  if (name.find("_SendRecv") != std::string::npos) return Kind::send_recv;
  return Kind::other;
}

// Bytes per element, from the type in a specialised kernel's name; AllGather, Broadcast and
// send/receive count bytes. The Generic kernel's type is unknown: its counts are taken as bytes.
size_t element_size(const std::string& name) {
  static const std::pair<const char*, size_t> types[] = {
      {"_f16_", 2}, {"_bf16_", 2}, {"_f32_", 4}, {"_u32_", 4}, {"_i32_", 4},
      {"_f64_", 8}, {"_u64_", 8},  {"_i64_", 8}, {"_u8_", 1},  {"_i8_", 1}};
  for (const auto& [token, size] : types)
    if (name.find(token) != std::string::npos) return size;
  return 1;
}

// The bytes a rank sends over its link for one collective of `bytes` (NCCL's ring algorithms,
// as nccl-tests' bus bandwidth counts them).
double link_bytes(Kind k, double bytes, int n) {
  switch (k) {
    case Kind::all_reduce: return 2.0 * (n - 1) / n * bytes;
    case Kind::all_gather: case Kind::reduce_scatter: return (n - 1) * bytes;  // bytes per rank
    default: return bytes;
  }
}

template <typename T>
bool read_at(const std::vector<unsigned char>& args, size_t off, T* out) {
  if (off + sizeof(T) > args.size()) return false;
  std::memcpy(out, args.data() + off, sizeof(T));
  return true;
}

struct Collective {
  uint64_t comm = 0;
  int rank = 0, n_ranks = 0;
  Kind kind = Kind::other;
  double bytes = 0;  // per rank over its link
  std::vector<P2pWork> p2p;  // a send/receive kernel's works
};

// Parses the launch; false when it is not a recognisable NCCL collective or send/receive.
bool parse(const KernelLaunch& k, Collective* c) {
  if (!k.args || k.args->size() < sizeof(KernelArgs)) return false;
  const std::vector<unsigned char>& args = *k.args;
  KernelArgs head;
  std::memcpy(&head, args.data(), sizeof head);
  if (!head.comm || !valid_device_range(head.comm, sizeof(KernelComm))) return false;
  KernelComm comm;
  std::memcpy(&comm, reinterpret_cast<const void*>(head.comm), sizeof comm);
  if (comm.n_ranks < 1 || comm.n_ranks > kMaxRanks || comm.rank < 0 || comm.rank >= comm.n_ranks) return false;
  c->comm = head.comm;
  c->rank = comm.rank;
  c->n_ranks = comm.n_ranks;
  c->kind = kind_of(k.fn->name);
  size_t elem = element_size(k.fn->name);
  const Layout& layout = loaded_nccl_version() >= 23000 ? kLayout230 : kLayout228;
  // Every work once: channel b's batch chain starts at batches[b] (one block per channel).
  std::set<uint64_t> seen;
  double bytes = 0;
  for (unsigned block = 0; block < k.grid[0] && block < 64; ++block) {
    size_t index = block;
    for (int hops = 0; hops < 64; ++hops) {
      WorkBatch b;
      if (!read_at(args, sizeof(KernelArgs) + index * sizeof(WorkBatch), &b)) break;
      unsigned type = (b.flags >> 15) & 3;
      if (layout.work_size[type] == 0) break;
      for (int bit = 0; bit < 64; ++bit) {
        if (!(b.offset_bitset >> bit & 1)) continue;
        uint64_t offset = b.offset_base + static_cast<uint64_t>(bit) * layout.work_size[type];
        if (!seen.insert(offset).second) continue;
        unsigned char work[128];
        size_t need = type == kWorkP2p ? sizeof(WorkP2p) : type == kWorkBcast ? 32 : layout.coll_counts + 24;
        if (head.storage_type == 0) {
          if (offset + need > args.size()) continue;
          std::memcpy(work, args.data() + offset, need);
        } else {
          uint64_t at = head.work_buf + (offset & head.work_mask);
          if (!head.work_buf || !valid_device_range(at, need)) continue;
          std::memcpy(work, reinterpret_cast<const void*>(at), need);
        }
        if (type == kWorkP2p) {
          WorkP2p w;
          std::memcpy(&w, work, sizeof w);
          bytes += static_cast<double>(w.send_bytes > w.recv_bytes ? w.send_bytes : w.recv_bytes);
          P2pWork p;
          p.comm = c->comm;
          p.rank = c->rank;
          p.n_ranks = c->n_ranks;
          p.send_rank = w.n_send_channels && w.send_rank >= 0 && w.send_rank < c->n_ranks ? w.send_rank : -1;
          p.recv_rank = w.n_recv_channels && w.recv_rank >= 0 && w.recv_rank < c->n_ranks ? w.recv_rank : -1;
          p.channel = w.channel_base;
          p.send_addr = w.send_addr;
          p.recv_addr = w.recv_addr;
          p.send_bytes = w.send_bytes;
          p.recv_bytes = w.recv_bytes;
          c->p2p.push_back(p);
        } else if (type == kWorkBcast) {
          uint64_t n;
          std::memcpy(&n, work + 24, sizeof n);
          bytes += static_cast<double>(n);
        } else {
          uint32_t channels;  // channelLo:8, channelHi:8, ...
          uint64_t counts[3];  // lo, mid, hi
          std::memcpy(&channels, work, sizeof channels);
          std::memcpy(counts, work + layout.coll_counts, sizeof counts);
          int lo = channels & 0xff, hi = (channels >> 8) & 0xff;
          uint64_t count = counts[0] + (hi > lo ? counts[2] + counts[1] * static_cast<uint64_t>(hi - lo - 1) : 0);
          bytes += link_bytes(c->kind, static_cast<double>(count * elem), c->n_ranks);
        }
      }
      unsigned jump = b.flags & 0x3fff;
      if (jump == 0) break;
      index += jump;
    }
  }
  c->bytes = bytes;
  return true;
}

// This process's communicators, by the address of their device-side ncclKernelComm: the
// index of each among the communicators of its size (ranks create communicators in the same
// order, as NCCL's initialisation is itself collective) and the collectives run on it so far
// (in stream order). A freed communicator is forgotten (forget_communicators), so that a new
// one at the same address starts afresh.
struct Communicator {
  uint64_t index;
  uint64_t collectives;
};
ProcessMutex g_comms_mutex;
auto* g_comms = new std::map<uint64_t, Communicator>();  // never destroyed
uint64_t g_comms_made[kMaxRanks];

Communicator& communicator(uint64_t comm, int n_ranks) {  // under g_comms_mutex
  auto it = g_comms->find(comm);
  if (it == g_comms->end()) it = g_comms->emplace(comm, Communicator{g_comms_made[n_ranks - 1]++, 0}).first;
  return it->second;
}

uint64_t next_key(uint64_t comm, int n_ranks) {
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  Communicator& c = communicator(comm, n_ranks);
  return c.index << 40 | (++c.collectives & ((1ull << 40) - 1));
}

bool alive(int32_t pid) { return process_alive(pid); }  // a process id of process_identity.cpp

// Records that this rank reached a point of collective `key` (started it, or finished its
// transfer: `rows`) and waits for the others; returns when the last got there.
void meet(const Collective& c, uint64_t key, Arrival (&rows)[kMaxRanks][kWindow][kMaxRanks]) {
  // A peer can be at most kWindow collectives ahead: it waits for this rank at each of them.
  auto& row = rows[c.n_ranks - 1][key % kWindow];
  row[c.rank].pid.store(process_id(), std::memory_order_relaxed);
  row[c.rank].key.store(key, std::memory_order_release);
  uint64_t deadline = now_ns() + kWaitLimitNs;
  for (;;) {
    int arrived = 0;
    for (int r = 0; r < c.n_ranks; ++r)
      arrived += row[r].key.load(std::memory_order_acquire) == key && alive(row[r].pid.load(std::memory_order_relaxed));
    if (arrived == c.n_ranks) return;
    if (now_ns() > deadline) {
      log(0, "rank %d of a %d-rank collective (#%llu) waited 60 s for its peers: completing alone", c.rank,
          c.n_ranks, static_cast<unsigned long long>(key & ((1ull << 40) - 1)));
      return;
    }
    timespec ts{0, 20000};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace

uint64_t communicator_index(uint64_t comm, int n_ranks) {
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  return communicator(comm, n_ranks).index;
}

void forget_communicators(CUdeviceptr base, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  for (auto it = g_comms->lower_bound(base); it != g_comms->end() && it->first < base + bytes;) it = g_comms->erase(it);
}

// The transfer runs on the simulated GPU like any kernel (4 SMs, contending with other
// processes), and the collective ends when every rank's transfer has: a rank slowed by
// another process on its GPU slows the whole ring, as it would on real GPUs.
void run_nccl_kernel(const KernelLaunch& k, unsigned sms) {
  Collective c;
  if (!parse(k, &c)) {
    run_on_gpu(k.device, kernel_cost_ns(k), sms);
    return;
  }
  double bytes_per_ns = static_cast<double>(settings().link_gbps);  // GB/s = bytes/ns
  auto ns = static_cast<uint64_t>(c.bytes / bytes_per_ns);
  if (ns < settings().min_kernel_ns) ns = settings().min_kernel_ns;
  log(3, "%s: rank %d/%d, %.0f bytes over the link, %llu ns", k.fn->name.c_str(), c.rank, c.n_ranks, c.bytes,
      static_cast<unsigned long long>(ns));
  if (c.kind == Kind::send_recv && c.n_ranks > 1 && run_p2p(k.device, c.p2p, ns, sms)) return;
  Table* t = table();
  bool together = t && c.n_ranks > 1 && c.kind != Kind::send_recv && c.kind != Kind::other;
  uint64_t key = together ? next_key(c.comm, c.n_ranks) : 0;
  if (together) meet(c, key, t->arrivals);
  run_on_gpu(k.device, ns, sms);
  if (together) meet(c, key, t->finished);
}

}  // namespace simgpu
