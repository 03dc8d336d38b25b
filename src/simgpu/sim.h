// Internal header of the simulated CUDA driver (docs/simgpu.md). One object model for all
// files: contexts, modules/functions, streams with an in-order worker each, events, graphs,
// allocations. Handles given to programs are pointers to these objects.
#pragma once
#include "cuda_abi.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define SIM_API extern "C" __attribute__((visibility("default")))

// ABI symbols the simulator defines that cuda.h declares only in its internal or per-thread modes.
extern "C" {
CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned flags, CUdevice dev);
CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data);
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,
                                        const CUgraphNode** d, const CUgraphEdgeData** e, size_t* n);
CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph g, CUgraphNode* err_node, char* log, size_t log_size);
}

namespace simgpu {

// ---- process-wide locks (process_mutex.cpp) ----
// A mutex of the simulator's process-wide state. A fork()ed child has only the forking thread:
// a mutex another thread of the parent held at the fork (a stream worker, the hook's progress
// thread, an allocating thread) would stay locked in the child, and the child's next driver call
// would hang. Each one registers itself; the child gets all of them unlocked (engine.cpp).
class ProcessMutex : public std::mutex {
 public:
  ProcessMutex() noexcept;
};
void unlock_process_mutexes_in_child();

// ---- processes of the simulated GPU (process_identity.cpp) ----
// This process's id in the GPU's shared tables, unique across PID namespaces (containers), and
// whether the process of an id is alive. Not pids: see process_identity.cpp.
int32_t process_id();
bool process_alive(int32_t id);

// ---- settings (settings.cpp) ----
struct Settings {
  int devices = 1;
  int sms = 132;
  uint64_t mem_bytes = 80ull << 30;
  bool mem_shared = false;            // SIMGPU_MEM_SHARED: mem_bytes is the whole GPU's, for all processes
  uint64_t ns_per_block_wave = 2000;  // cost of one wave of blocks of a non-spin kernel
  uint64_t min_kernel_ns = 2000;
  uint64_t link_gbps = 63;            // SIMGPU_LINK_GBPS: each GPU's link to its peers, GB/s per direction
  bool mps = false;                   // SIMGPU_SHARING=mps; default timeslice
  uint64_t timeslice_ns = 2000000;
  uint64_t context_switch_ns = 40000;  // SIMGPU_CONTEXT_SWITCH_US: charged when the GPU passes to another process
  uint64_t launch_latency_ns = 4000;   // SIMGPU_LAUNCH_LATENCY_US: launch to start on an idle stream
  uint64_t device_gbps = 3350;         // SIMGPU_DEVICE_GBPS: memsets, device-to-device copies
  uint64_t pcie_gbps = 54;             // SIMGPU_PCIE_GBPS: host<->device copies
  uint64_t exit_teardown_ns = 0;       // SIMGPU_EXIT_TEARDOWN_US: the driver's teardown at exit (0: none)
  bool deterministic = false;
  int log = 1;                        // 0 error, 1 warn, 2 info, 3 debug
  std::string shm_prefix;             // SIMGPU_SHM
  std::string fail_spec;              // SIMGPU_FAIL
};
const Settings& settings();
void log(int level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t now_ns();

// ---- failure injection (fault_injection.cpp): SIMGPU_FAIL=<api>:<nth>[,...] ----
// True on the nth call of `api`, named by its base name: the entry point's own name with
// _v2/_v3/_ptsz/_ptds suffixes dropped, so that every variant of an API counts as one.
bool should_fail(const char* api);
// The error an injected failure returns: out of memory for allocations, launch failure for
// launches, CUDA_ERROR_UNKNOWN otherwise.
CUresult injected_error(const char* api);

// ---- device / context (device.cpp) ----
struct GreenContext;
struct Context {
  uint32_t magic = 0x43545854;
  int device = 0;
  unsigned flags = 0;
  bool primary = false;
  int sm_limit = 0;  // MPS execution affinity (cuCtxCreate_v3/_v4), 0: none
  GreenContext* green = nullptr;  // a green context's converted context (cuCtxFromGreenCtx)
};
Context* current_context();
Context* primary_context(int device);
bool valid_device(CUdevice d);  // a visible ordinal

// ---- visible devices (visible_devices.cpp): ordinals this process sees -> physical GPUs ----
int visible_device_count();
int physical_device(int ordinal);       // -1 when not visible
int ordinal_of_physical(int physical);  // -1 when not visible
void physical_uuid(int physical, unsigned char out[16]);
std::string uuid_text(int physical);    // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
CUstreamCaptureMode thread_capture_mode();  // cuThreadExchangeStreamCaptureMode's per-thread mode
bool initialized();
bool torn_down();  // the driver's exit teardown has begun (SIMGPU_EXIT_TEARDOWN_US): counts the call

// ---- modules (module.cpp) ----
struct Module;
struct Function {
  uint32_t magic = 0x46554e43;
  Module* module = nullptr;
  std::string name;
  bool nccl = false;
  bool spin = false;
  bool mix = false;  // `*spin_mix*`: a spin kernel that then mixes a value into a word (engine.cpp)
  // Settable attributes (occupancy.cpp): 48 KiB of dynamic shared memory until raised.
  std::atomic<int> max_dynamic_smem{48 << 10};
  std::atomic<int> carveout{-1};
  std::atomic<int> non_portable_cluster{0};
  std::atomic<int> cluster_policy{0};
};
Function* as_function(const void* handle);  // CUfunction or CUkernel, or nullptr
bool is_nccl_name(const std::string& name);

// ---- shared-memory limits and the attributes NCCL reads (limits.cpp) ----
// True when `attr` is one of limits.cpp's (shared memory, multicast, fabric, RDMA, ...).
bool limit_attribute(CUdevice_attribute attr, int* v);

// ---- execution engine (engine.cpp) ----
struct Stream;
struct Event {
  uint32_t magic = 0x45564e54;
  unsigned flags = 0;
  std::mutex m;
  Stream* stream = nullptr;  // where it was last recorded
  uint64_t seq = 0;          // completes when stream->completed >= seq
  std::atomic<int64_t> time_ns{-1};
  bool recorded = false;
  bool captured = false;     // recorded inside a capture: cannot be queried
};

struct KernelLaunch {
  Function* fn = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned smem = 0;
  uint64_t first_arg = 0;  // the first 8 bytes of the first argument (spin duration)
  uint64_t* mix_word = nullptr;  // spin_mix kernels: their second and third arguments
  uint64_t mix_value = 0;
  int device = 0;          // the device of the context current at launch
  unsigned sm_limit = 0;   // SMs its context may use (sm_limit.cpp), 0: all
  const GreenContext* green = nullptr;  // the green context it was launched (or captured) in
  // NCCL kernels: a copy of the argument buffer (collectives.cpp reads its work descriptors).
  std::shared_ptr<const std::vector<unsigned char>> args;
};

struct Op {
  enum Kind { kernel, copy, set, record, wait, host, free_mem } kind = kernel;
  KernelLaunch launch;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0, elem = 1, count = 0;
  uint32_t value = 0;
  Event* event = nullptr;
  Stream* wait_stream = nullptr;
  uint64_t wait_seq = 0;
  CUhostFn host_fn = nullptr;
  void* host_data = nullptr;
  uint64_t queued_ns = 0;  // when it was queued (launch latency); set by the engine
  // Pitched copies and memsets (cuMemcpy2D/3D, arrays, memset nodes): `height` rows of `bytes`
  // (a copy) or `count` elements (a memset) in each of `depth` slices; row y of slice z starts
  // at z * slice + y * pitch from dst (and src). One row: a plain contiguous range.
  size_t height = 1, depth = 1;
  size_t dst_pitch = 0, src_pitch = 0, dst_slice = 0, src_slice = 0;
  // Set when a graph records the op: which operands were device memory then, so that a launch
  // refuses an op whose memory has since been freed instead of touching unmapped pages.
  bool dst_device = false, src_device = false;
};

struct Graph;
struct Capture {
  Graph* graph = nullptr;
  bool into_existing = false;  // cuStreamBeginCaptureToGraph: the caller's graph, which it has already
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  bool invalidated = false;
  uint64_t id = 0;
  std::thread::id thread;          // the thread that began it (thread-local mode)
  std::vector<Stream*> members;    // the origin stream and streams joined through events
};

struct Stream {
  uint32_t magic = 0x5354524d;
  bool blocking = true;   // synchronizes with the legacy stream
  bool legacy = false;
  bool default_stream = false;  // the legacy stream or a per-thread default stream
  int priority = 0;
  unsigned flags = 0;
  std::mutex m;
  std::condition_variable cv;
  std::deque<Op> queue;
  uint64_t enqueued = 0;
  std::atomic<uint64_t> completed{0};
  std::atomic<int> running_kernels{0};
  std::thread worker;
  bool stop = false;
  pid_t owner_pid = 0;
  Capture* capture = nullptr;  // non-null while capturing
  GreenContext* green = nullptr;  // its green context (green_contexts.cpp), if any
};

// Resolves a stream handle as seen by an entry point (`per_thread`: a _ptsz/_ptds entry).
Stream* resolve_stream(CUstream s, bool per_thread);
Stream* legacy_stream();
Stream* create_stream(unsigned flags, int priority);
void destroy_stream(Stream* s);
// Enqueues (or records into the capture). Returns an error for capture violations.
CUresult submit(Stream* s, Op op);
CUresult synchronize_stream(Stream* s);
CUresult query_stream(Stream* s);
CUresult synchronize_all();

// ---- contention between processes (contention.cpp) ----
// Runs one kernel of `duration_ns` occupying `sms` SMs in `waves` waves of blocks, honouring
// the sharing mode (under MPS its blocks are placed in turn with other processes' kernels).
void run_on_gpu(int device, uint64_t duration_ns, unsigned sms, unsigned waves = 1);
// Called when a kernel is queued; run_on_gpu() accounts for it when it has run.
void kernel_queued(int device);
// fork(): resets the process-local accounting in the child.
void contention_after_fork_child();

// ---- SM limits under MPS (sm_limit.cpp) ----
// The SMs kernels of `ctx` may occupy: its execution affinity, else the process's
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, else all (always all without MPS).
int sm_limit(const Context* ctx);
// The process's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as SMs (0: none, or not under MPS).
int process_sm_limit();
// CUDA_MPS_CLIENT_PRIORITY as MPS reads it for a client: 0 normal, 1 below normal (read when
// the process first runs a kernel, so that a forked test child may set its own).
int mps_client_priority();
// The green context whose SMs a kernel launched on `s` with `ctx` current gets: the stream's,
// or on the NULL stream the current context's when it was converted from one; else nullptr.
const GreenContext* kernel_green_context(const Context* ctx, const Stream* s);
// The SMs such a kernel may occupy: its green context's (`captured`: the one of the stream it
// was captured on, which a graph keeps at replay) unless MPS limits the process, whose SMs then
// apply (cuda.h: green contexts' SMs "can be scaled up to the value of SMs used for the MPS
// client"); otherwise sm_limit(ctx).
int kernel_sm_limit(const Context* ctx, const Stream* s, const GreenContext* captured = nullptr);

// ---- green contexts (green_contexts.cpp) ----
struct GreenContext {
  uint32_t magic = 0x47524e43;  // "GRNC"
  bool destroyed = false;       // destroyed: its streams answer CUDA_ERROR_CONTEXT_IS_DESTROYED
  int device = 0;
  unsigned sms = 0;             // its SM budget
  unsigned long long id = 0;
  Context converted;            // what cuCtxFromGreenCtx returns
};
// A stream whose green context was destroyed: every call on it fails.
inline bool stream_context_destroyed(const Stream* s) { return s && s->green && s->green->destroyed; }
// A kernel of `*sms` SMs under a limit of `limit` SMs: at most `limit`, for proportionally longer.
void fit_to_sm_limit(unsigned limit, unsigned* sms, uint64_t* duration_ns);

// ---- each process's device memory, seen by the simulated NVML (process_memory.cpp) ----
void publish_memory_use(int device, uint64_t bytes);
// What the other live processes published for `device` (SIMGPU_MEM_SHARED's budget).
uint64_t others_memory_use(int device);
// VMM physical memory under SIMGPU_MEM_SHARED (memory.cpp): counted while this process holds a
// handle to it. False (nothing counted) when `check` and the GPU's budget has no room.
bool charge_vmm(int device, uint64_t bytes, bool check);
void uncharge_vmm(int device, uint64_t bytes);

// ---- the timing of memsets, copies and launches (transfers.cpp) ----
// A memset: real stores (whole pages of zeros dropped, zero_fill.cpp), lasting at least its
// bytes at device bandwidth, that time spent on the GPU like a kernel of every SM.
void run_memset(const Op& op);
// A copy: real bytes, lasting at least its bytes at PCIe (host<->device) or device bandwidth
// (device<->device, read and written) on the copy engines (no contention with kernels).
void run_copy(const Op& op);
// The bytes a copy or memset spans from its dst (or src), rows and slices included.
size_t dst_extent(const Op& op);
size_t src_extent(const Op& op);
// Records which operands of a copy or memset are device memory (when a graph records it), and
// checks at a graph's launch that they still are: false when one has been freed since.
void note_device_operands(Op& op);
bool device_operands_valid(const Op& op);
// A kernel starts no earlier than the launch latency after it was queued.
void wait_for_launch_latency(const Op& op);
// Sleeps until CLOCK_MONOTONIC reaches deadline_ns.
void sleep_until_ns(uint64_t deadline_ns);
// ---- zeroing (zero_fill.cpp) ----
// Zeroes [dst, dst + bytes): the whole pages inside are dropped from the mapping (their
// memory returns as zeros) instead of written; the ends, and memory that cannot be dropped,
// are written.
void zero_fill(void* dst, size_t bytes);

// ---- kernel cost (engine.cpp) ----
uint64_t kernel_cost_ns(const KernelLaunch& k);
// ---- NCCL collectives (collectives.cpp) ----
// Runs an NCCL kernel on `sms` SMs: a recognised collective meets the other ranks (once all
// have started it), transfers its bytes over the link, and ends when all ranks' transfers
// have; anything else costs what an ordinary kernel does.
void run_nccl_kernel(const KernelLaunch& k, unsigned sms);
// The version of the libnccl loaded in this process (0 when none is), which sets the layout
// of its kernels' arguments; looked up once, on the first call.
int loaded_nccl_version();
// Freed device memory: communicators whose device side lived there are gone.
void forget_communicators(CUdeviceptr base, size_t bytes);
// The communicator whose device side is at `comm` as this process numbers those of its size:
// its first N-rank communicator is 0, ... (ranks meet their communicators in the same order).
uint64_t communicator_index(uint64_t comm, int n_ranks);
// ---- shared segments (shared_segment.cpp) ----
// The named shared-memory segment `name` (SIMGPU_SHM + a suffix), created or grown to `bytes`
// and mapped; its first word, a std::atomic<uint32_t>, holds `magic` (written by the first
// process). nullptr when it cannot be mapped or holds another layout.
void* map_shared_segment(const std::string& name, size_t bytes, uint32_t magic);
// ---- NCCL point-to-point (p2p.cpp) ----
// One send and/or receive of an NCCL kernel (an ncclDevWorkP2p): to `send_rank` and from
// `recv_rank` of the communicator whose device side is at `comm`, -1 for a direction the work
// does not have; `channel` is the channel of its first part.
struct P2pWork {
  uint64_t comm = 0;
  int rank = 0, n_ranks = 0;
  int send_rank = -1, recv_rank = -1, channel = 0;
  uint64_t send_addr = 0, recv_addr = 0, send_bytes = 0, recv_bytes = 0;
};
// Runs a send/receive kernel's works: each send meets its receive in the peer process, which
// gets the bytes; the kernel lasts `ns` once its receives' sends have started. False when the
// works cannot be matched (no shared memory, an unknown connection layout): the caller then
// times the kernel alone.
bool run_p2p(int device, const std::vector<P2pWork>& works, uint64_t ns, unsigned sms);

// ---- graphs and capture (graph.cpp) ----
struct GraphAllocation;  // graph_memory.cpp
struct ConditionalHandle;  // graph_nodes.cpp
struct GraphNode {
  uint32_t magic = 0x474e4f44;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  Op op;  // what it does when the graph runs
  Graph* child = nullptr;
  CUDA_KERNEL_NODE_PARAMS kparams{};
  // Memory nodes (graph_memory.cpp): the allocation an alloc node made (freed when no graph
  // or executable graph holds it), the address an alloc or free node names.
  std::shared_ptr<GraphAllocation> allocation;
  CUDA_MEM_ALLOC_NODE_PARAMS alloc_params{};
  CUdeviceptr freed = 0;
  // Memcpy and memset nodes added by hand (graph_nodes.cpp): their parameters, read back.
  CUDA_MEMCPY3D copy_params{};
  CUDA_MEMSET_NODE_PARAMS memset_params{};
  // Conditional nodes (graph_nodes.cpp): the handle and the body graphs this node owns.
  ConditionalHandle* condition = nullptr;
  CUgraphConditionalNodeType cond_type = CU_GRAPH_COND_TYPE_IF;
  std::vector<Graph*> bodies;
};
struct Graph {
  uint32_t magic = 0x47524150;
  std::vector<std::unique_ptr<GraphNode>> nodes;
};
struct GraphExec {
  uint32_t magic = 0x47455845;
  std::vector<Op> ops;  // flattened, in insertion order (a valid topological order)
  std::vector<std::shared_ptr<GraphAllocation>> allocations;  // graph memory its ops use
  // The physical memory its first launch or upload mapped for `allocations` (graph_memory.cpp),
  // per device; given back when it is destroyed or updated.
  std::vector<std::pair<int, uint64_t>> mapped;
};
// Appends `ops` (and the allocations they use) for graph `g`, child graphs and conditional
// bodies expanded (graph.cpp).
void flatten_graph(const Graph* g, GraphExec& out);
// A deep copy of `g` (cuGraphClone, child graph nodes); `map` receives original -> clone nodes.
Graph* clone_graph(const Graph* g, std::vector<std::pair<const GraphNode*, GraphNode*>>* map = nullptr);
Graph* as_graph(CUgraph g);
GraphNode* as_graph_node(CUgraphNode n);
// Adds `node` to the graph `s` is capturing into (under the capture lock).
GraphNode* append_captured_node(Stream* s, std::unique_ptr<GraphNode> node);
// Graph memory (graph_memory.cpp). An alloc node's address is reserved when the node is made
// (a capture's cuMemAllocAsync included) and stays while a graph or executable graph holds it,
// so every launch finds it there; its physical memory counts from the executable graph's first
// launch or upload until it is destroyed, as a GPU maps it then. Frees of it (free nodes,
// cuMemFree[Async] after a launch) release nothing.
bool is_graph_allocation(CUdeviceptr p);
// Counts `e`'s graph memory if not yet counted: CUDA_ERROR_OUT_OF_MEMORY when it does not fit.
CUresult map_graph_memory(GraphExec& e);
void unmap_graph_memory(GraphExec& e);
CUresult graph_allocate(const CUDA_MEM_ALLOC_NODE_PARAMS& params, std::unique_ptr<GraphNode>* node);
CUresult graph_free_node(CUdeviceptr p, std::unique_ptr<GraphNode>* node);
// Conditional nodes (graph_nodes.cpp): the body graphs a launch runs, chosen by the handle's
// default value (kernels, which would set it, do not run).
void conditional_bodies(const GraphNode& n, std::vector<const Graph*>& out);
// True when an open capture forbids the calling thread's potentially unsafe calls: a global
// capture (unless this thread is in relaxed mode) or this thread's own thread-local capture.
bool unsafe_calls_prohibited();
// A potentially unsafe call (a query or synchronization) where unsafe_calls_prohibited():
// refused, and the captures it would disturb invalidated, as the real driver does. CUDA_SUCCESS
// where the call may go on.
CUresult refuse_unsafe_call();
// A context's synchronization while a stream of the process captures: invalid in every capture
// mode (CUDA's programming guide: not "a device or context handle when any associated stream is
// in capture mode"), refused and every open capture invalidated. CUDA_SUCCESS when none is open.
CUresult refuse_context_sync_during_capture();
// Joins stream `s` to `c` (fork/join capture through events).
void join_capture(Stream* s, Capture* c);
void record_into_capture(Stream* s, const Op& op);
// User objects (capture_dependencies.cpp): an executable graph takes the references its graph
// holds; a destroyed graph or executable graph gives its references back.
void copy_user_objects(const void* graph, const void* exec);
void release_user_objects(const void* owner);
CUresult invalidate_capture(Stream* s, CUresult why);

// ---- memory (memory.cpp) ----
bool valid_device_range(CUdeviceptr p, size_t bytes);
// cuMemAlloc's allocation and release (accounted, validated), for the other families.
CUresult allocate_device(CUdeviceptr* p, size_t bytes, const char* api);
CUresult release_device(CUdeviceptr p);
// A graph allocation's address (graph_memory.cpp): valid for copies and memsets, counted by
// nobody; what its graph's launch maps is counted by charge_device_memory, both budgets
// (this process's and, under SIMGPU_MEM_SHARED, the GPU's). False: no room, nothing counted.
CUresult reserve_graph_address(CUdeviceptr* p, size_t bytes);
bool charge_device_memory(int device, uint64_t bytes);
void uncharge_device_memory(int device, uint64_t bytes);
// Device memory outside the program's accounting (module globals): no failure injection, no
// limit, never freed by the program. 0 when the host has no memory.
CUdeviceptr allocate_untracked(size_t bytes);
// The allocation holding p (base and size), if any: cuMemAlloc'ed or cuMemMap'ed.
bool allocation_of(CUdeviceptr p, CUdeviceptr* base, size_t* bytes);
// ---- memory shared between processes (ipc.cpp) ----
// Makes the cuMemAlloc'ed allocation holding p shareable (a memfd mapped over it, once) and
// gives its base, fd and size; CUDA_ERROR_INVALID_VALUE for memory that is not cuMemAlloc's.
CUresult share_allocation(CUdeviceptr p, CUdeviceptr* base, int* fd, size_t* size);
// Maps another process's shared allocation (its pid and fd); counted, closed by close_shared.
CUresult open_shared(int32_t pid, int32_t fd, size_t size, CUdeviceptr* out);
CUresult close_shared(CUdeviceptr p);
// Whether the allocation at base is a shared mapping (exported or imported): zeroing must punch
// holes in its memfd, not drop private pages. An exported allocation being freed closes its fd.
bool shared_allocation(CUdeviceptr base);
void forget_shared_allocation(CUdeviceptr base);
// The imported mapping holding p, if any (device memory of this process too).
bool imported_range(CUdeviceptr p, CUdeviceptr* base, size_t* bytes);

// ---- pitched and array copies (pitched_copies.cpp, arrays.cpp) ----
// The Op of a cuMemcpy3D (a 2D copy is one of depth 1) with its operands resolved (host,
// device, unified or array memory) and offsets and pitches applied; CUDA_ERROR_INVALID_VALUE
// (or _HANDLE for a bad array) when malformed.
CUresult copy3d_op(const CUDA_MEMCPY3D& p, Op* op);
CUDA_MEMCPY3D copy2d_as_3d(const CUDA_MEMCPY2D& p);
// Submits a copy Op on `h` (synchronously unless `async`), as cuMemcpy* do.
CUresult submit_copy(const Op& op, CUstream h, bool async, bool per_thread);
// A CUDA array's memory: rows of `pitch` bytes, `height` rows per slice; false if not an array.
bool array_memory(CUarray a, unsigned char** base, size_t* pitch, size_t* height, size_t* bytes);
// ---- virtual memory (vmm.cpp) ----
// The cuMemMap'ed range holding p (base and size), if any.
bool mapping_of(CUdeviceptr p, CUdeviceptr* base, size_t* bytes);

}  // namespace simgpu

// At the top of an entry point: fails its nth call when SIMGPU_FAIL says so.
#define SIM_FAIL_POINT()                                                     \
  do {                                                                       \
    if (::simgpu::should_fail(__func__)) return ::simgpu::injected_error(__func__); \
  } while (0)
