// Stream capture and graphs. A capturing stream records its operations as graph nodes
// instead of running them; real capture error codes are returned (900, 901, 906, 907).
// An executable graph runs its nodes in insertion order on the launch stream.
#include <algorithm>
#include <cstring>

#include "sim.h"

namespace simgpu {

namespace {
ProcessMutex g_mutex;
std::vector<Capture*> g_captures;  // open captures
std::atomic<uint64_t> g_capture_ids{1};

GraphExec* as_exec(CUgraphExec e) {
  auto* p = reinterpret_cast<GraphExec*>(e);
  return p && p->magic == 0x47455845 ? p : nullptr;
}

// Deletes a graph with the child graphs and conditional bodies its nodes own.
void free_graph(Graph* g) {
  for (auto& n : g->nodes) {
    if (n->child) free_graph(n->child);
    for (Graph* b : n->bodies) free_graph(b);
  }
  g->magic = 0;
  delete g;
}
}  // namespace

Graph* as_graph(CUgraph g) {
  auto* p = reinterpret_cast<Graph*>(g);
  return p && p->magic == 0x47524150 ? p : nullptr;
}
GraphNode* as_graph_node(CUgraphNode n) {
  auto* p = reinterpret_cast<GraphNode*>(n);
  return p && p->magic == 0x474e4f44 ? p : nullptr;
}

void flatten_graph(const Graph* g, GraphExec& out) {
  for (const auto& n : g->nodes) {
    switch (n->type) {
      case CU_GRAPH_NODE_TYPE_GRAPH:
        if (n->child) flatten_graph(n->child, out);
        break;
      case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
        std::vector<const Graph*> run;
        conditional_bodies(*n, run);  // graph_nodes.cpp
        for (const Graph* b : run) flatten_graph(b, out);
        break;
      }
      // Graph memory is mapped at the first launch (graph_memory.cpp): nothing to run.
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC: out.allocations.push_back(n->allocation); break;
      case CU_GRAPH_NODE_TYPE_MEM_FREE:
      case CU_GRAPH_NODE_TYPE_EMPTY: break;
      default: out.ops.push_back(n->op);
    }
  }
}

Graph* clone_graph(const Graph* g, std::vector<std::pair<const GraphNode*, GraphNode*>>* map) {
  auto* c = new Graph();
  for (const auto& n : g->nodes) {
    auto copy = std::make_unique<GraphNode>(*n);
    if (n->child) copy->child = clone_graph(n->child, map);
    for (Graph*& b : copy->bodies) b = clone_graph(b, map);
    if (map) map->emplace_back(n.get(), copy.get());
    c->nodes.push_back(std::move(copy));
  }
  return c;
}

GraphNode* append_captured_node(Stream* s, std::unique_ptr<GraphNode> node) {
  GraphNode* raw = node.get();
  std::lock_guard<std::mutex> lock(g_mutex);
  s->capture->graph->nodes.push_back(std::move(node));
  return raw;
}

// Whether this thread is prohibited from potentially unsafe calls (cuThreadExchangeStreamCaptureMode):
// a relaxed thread never; any other by a capture of its own that is not relaxed; a thread in
// global mode also by another thread's global-mode capture. (The real driver, seen on an H200
// with driver 580: a global-mode thread's cuEventQuery beside another thread's global capture
// fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates it; a thread-local or relaxed
// thread's does not.)
bool unsafe_calls_prohibited() {
  CUstreamCaptureMode mine = thread_capture_mode();
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Capture* c : g_captures) {
    if (c->invalidated) continue;
    bool own = c->thread == std::this_thread::get_id();
    if (own && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) return true;
    if (!own && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && mine == CU_STREAM_CAPTURE_MODE_GLOBAL) return true;
  }
  return false;
}

CUresult refuse_unsafe_call() {
  return unsafe_calls_prohibited() ? invalidate_capture(nullptr, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) : CUDA_SUCCESS;
}

CUresult refuse_context_sync_during_capture() {
  std::lock_guard<std::mutex> lock(g_mutex);
  bool open = false;
  for (Capture* c : g_captures) {
    open = open || !c->invalidated;
    c->invalidated = true;
  }
  return open ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

void join_capture(Stream* s, Capture* c) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (s->capture || !c) return;
  s->capture = c;
  c->members.push_back(s);
}

void record_into_capture(Stream* s, const Op& op) {
  auto node = std::make_unique<GraphNode>();
  node->op = op;
  if (op.kind == Op::copy || op.kind == Op::set) note_device_operands(node->op);  // transfers.cpp
  switch (op.kind) {
    case Op::kernel:
      node->type = CU_GRAPH_NODE_TYPE_KERNEL;
      node->kparams.func = reinterpret_cast<CUfunction>(op.launch.fn);
      node->kparams.gridDimX = op.launch.grid[0];
      node->kparams.gridDimY = op.launch.grid[1];
      node->kparams.gridDimZ = op.launch.grid[2];
      node->kparams.blockDimX = op.launch.block[0];
      node->kparams.blockDimY = op.launch.block[1];
      node->kparams.blockDimZ = op.launch.block[2];
      node->kparams.sharedMemBytes = op.launch.smem;
      break;
    case Op::copy: node->type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
    case Op::set: node->type = CU_GRAPH_NODE_TYPE_MEMSET; break;
    case Op::host: node->type = CU_GRAPH_NODE_TYPE_HOST; break;
    default: node->type = CU_GRAPH_NODE_TYPE_EMPTY; break;
  }
  append_captured_node(s, std::move(node));
}

// Invalidates the capture of `s`, or when `s` is null every global-mode capture and this thread's own.
CUresult invalidate_capture(Stream* s, CUresult why) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Capture* c : g_captures)
    if ((s && s->capture == c) ||
        (!s && (c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
                (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread == std::this_thread::get_id()))))
      c->invalidated = true;
  return why;
}

}  // namespace simgpu

using namespace simgpu;

static CUresult begin_capture(CUstream h, CUgraph into, CUstreamCaptureMode mode, bool per_thread) {
  Stream* s = resolve_stream(h, per_thread);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream cannot capture
  if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  auto* c = new Capture();
  c->graph = into ? as_graph(into) : new Graph();
  c->into_existing = into != nullptr;
  if (!c->graph) {
    delete c;
    return CUDA_ERROR_INVALID_VALUE;
  }
  c->mode = mode;
  c->id = g_capture_ids.fetch_add(1);
  c->thread = std::this_thread::get_id();
  c->members.push_back(s);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_captures.push_back(c);
  }
  s->capture = c;
  return CUDA_SUCCESS;
}

static CUresult end_capture(CUstream h, CUgraph* graph, bool per_thread) {
  Stream* s = resolve_stream(h, per_thread);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  Capture* c = s->capture;
  // A capture into the caller's own graph may end without asking for it back (NVIDIA's
  // graphConditionalNodes sample passes null; the driver accepts it).
  if (!graph && !(c && c->into_existing)) return CUDA_ERROR_INVALID_VALUE;
  if (!c) return CUDA_ERROR_ILLEGAL_STATE;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto it = g_captures.begin(); it != g_captures.end(); ++it)
      if (*it == c) {
        g_captures.erase(it);
        break;
      }
    for (Stream* m : c->members) m->capture = nullptr;  // streams that joined through events leave with it
  }
  bool invalid = c->invalidated;
  if (graph) *graph = invalid ? nullptr : reinterpret_cast<CUgraph>(c->graph);
  delete c;
  return invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

SIM_API CUresult cuStreamBeginCapture(CUstream s) { return begin_capture(s, nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL, false); }
SIM_API CUresult cuStreamBeginCapture_ptsz(CUstream s) { return begin_capture(s, nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL, true); }
SIM_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) { return begin_capture(s, nullptr, m, false); }
SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) { return begin_capture(s, nullptr, m, true); }
SIM_API CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e,
                                             size_t n, CUstreamCaptureMode m) {
  (void)d, (void)e, (void)n;
  return begin_capture(s, g, m, false);
}
SIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode* d,
                                                  const CUgraphEdgeData* e, size_t n, CUstreamCaptureMode m) {
  (void)d, (void)e, (void)n;
  return begin_capture(s, g, m, true);
}
SIM_API CUresult cuStreamEndCapture(CUstream s, CUgraph* g) { return end_capture(s, g, false); }
SIM_API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) { return end_capture(s, g, true); }

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus* status, bool per_thread) {
  Stream* s = resolve_stream(h, per_thread);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  if (s->legacy && unsafe_calls_prohibited()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  *status = !s->capture ? CU_STREAM_CAPTURE_STATUS_NONE
            : s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                      : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* st) { return is_capturing(s, st, false); }
SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* st) { return is_capturing(s, st, true); }

static CUresult capture_info(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                             const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* n, bool per_thread) {
  CUresult r = is_capturing(h, status, per_thread);
  if (r != CUDA_SUCCESS) return r;
  Stream* s = resolve_stream(h, per_thread);
  if (id) *id = s->capture ? s->capture->id : 0;
  if (graph) *graph = s->capture ? reinterpret_cast<CUgraph>(s->capture->graph) : nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (n) *n = 0;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,
                                           const CUgraphNode** d, const CUgraphEdgeData** e, size_t* n) {
  return capture_info(s, st, id, g, d, e, n, false);
}
SIM_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,
                                                const CUgraphNode** d, const CUgraphEdgeData** e, size_t* n) {
  return capture_info(s, st, id, g, d, e, n, true);
}

// ---- graphs ----
SIM_API CUresult cuGraphCreate(CUgraph* g, unsigned flags) {
  (void)flags;
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  *g = reinterpret_cast<CUgraph>(new Graph());
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphDestroy(CUgraph g) {
  Graph* graph = as_graph(g);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  release_user_objects(graph);  // capture_dependencies.cpp
  free_graph(graph);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                         const CUDA_KERNEL_NODE_PARAMS* p) {
  (void)deps, (void)n;
  Graph* graph = as_graph(g);
  if (!graph || !node || !p) return CUDA_ERROR_INVALID_VALUE;
  Function* fn = as_function(p->func ? static_cast<const void*>(p->func) : static_cast<const void*>(p->kern));
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  auto gn = std::make_unique<GraphNode>();
  gn->type = CU_GRAPH_NODE_TYPE_KERNEL;
  gn->kparams = *p;
  gn->op.kind = Op::kernel;
  gn->op.launch.fn = fn;
  gn->op.launch.grid[0] = p->gridDimX, gn->op.launch.grid[1] = p->gridDimY, gn->op.launch.grid[2] = p->gridDimZ;
  gn->op.launch.block[0] = p->blockDimX, gn->op.launch.block[1] = p->blockDimY, gn->op.launch.block[2] = p->blockDimZ;
  if (p->kernelParams && p->kernelParams[0]) std::memcpy(&gn->op.launch.first_arg, p->kernelParams[0], 8);
  *node = reinterpret_cast<CUgraphNode>(gn.get());
  graph->nodes.push_back(std::move(gn));
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n, CUgraph child) {
  (void)deps, (void)n;
  Graph* graph = as_graph(g);
  Graph* c = as_graph(child);
  if (!graph || !c || !node) return CUDA_ERROR_INVALID_VALUE;
  auto gn = std::make_unique<GraphNode>();
  gn->type = CU_GRAPH_NODE_TYPE_GRAPH;
  gn->child = clone_graph(c);  // cloned, as CUDA does
  *node = reinterpret_cast<CUgraphNode>(gn.get());
  graph->nodes.push_back(std::move(gn));
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* count) {
  Graph* graph = as_graph(g);
  if (!graph || !count) return CUDA_ERROR_INVALID_VALUE;
  if (!nodes) {
    *count = graph->nodes.size();
    return CUDA_SUCCESS;
  }
  size_t n = std::min(*count, graph->nodes.size());
  for (size_t i = 0; i < n; ++i) nodes[i] = reinterpret_cast<CUgraphNode>(graph->nodes[i].get());
  *count = n;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphNodeGetType(CUgraphNode n, CUgraphNodeType* type) {
  GraphNode* node = as_graph_node(n);
  if (!node || !type) return CUDA_ERROR_INVALID_VALUE;
  *type = node->type;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode n, CUgraph* g) {
  GraphNode* node = as_graph_node(n);
  if (!node || !g || node->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  *g = reinterpret_cast<CUgraph>(node->child);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode n, CUDA_KERNEL_NODE_PARAMS* p) {
  GraphNode* node = as_graph_node(n);
  if (!node || !p || node->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  *p = node->kparams;
  return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec* exec, CUgraph g) {
  if (should_fail("cuGraphInstantiate")) return injected_error("cuGraphInstantiate");
  Graph* graph = as_graph(g);
  if (!exec || !graph) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new GraphExec();
  flatten_graph(graph, *e);
  copy_user_objects(graph, e);  // capture_dependencies.cpp
  *exec = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long flags) {
  (void)flags;
  return instantiate(e, g);
}
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec* e, CUgraph g, CUgraphNode* err, char* log_buf, size_t n) {
  (void)err, (void)log_buf, (void)n;
  return instantiate(e, g);
}
static CUresult instantiate_params(CUgraphExec* e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  CUresult r = instantiate(e, g);
  // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: uploaded at once, its graph memory mapped.
  if (r == CUDA_SUCCESS && p && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) {
    r = map_graph_memory(*as_exec(*e));
    if (r != CUDA_SUCCESS) {
      release_user_objects(as_exec(*e));  // capture_dependencies.cpp
      delete as_exec(*e);
      *e = nullptr;
    }
  }
  if (p) p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}
SIM_API CUresult cuGraphInstantiateWithParams(CUgraphExec* e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return instantiate_params(e, g, p);
}
SIM_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return instantiate_params(e, g, p);
}
SIM_API CUresult cuGraphExecDestroy(CUgraphExec e) {
  GraphExec* exec = as_exec(e);
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  release_user_objects(exec);  // capture_dependencies.cpp
  unmap_graph_memory(*exec);
  exec->magic = 0;
  delete exec;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  GraphExec* exec = as_exec(e);
  Graph* graph = as_graph(g);
  if (!exec || !graph) return CUDA_ERROR_INVALID_VALUE;
  GraphExec updated;
  flatten_graph(graph, updated);
  exec->ops = std::move(updated.ops);
  unmap_graph_memory(*exec);  // mapped again, for the new allocations, at the next launch
  exec->allocations = std::move(updated.allocations);
  if (info) info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}
static CUresult graph_launch(CUgraphExec e, CUstream h, bool per_thread) {
  GraphExec* exec = as_exec(e);
  Stream* s = resolve_stream(h, per_thread);
  if (!exec || !s) return CUDA_ERROR_INVALID_VALUE;
  // A kernel node runs in the context it was captured (or added) in, whatever stream the graph
  // is launched on: one captured on a green context's stream keeps that green context's SMs,
  // the others get the launching context's, as a kernel would (a green stream's SMs are not
  // theirs: CUDA_KERNEL_NODE_PARAMS_v2 names the node's context).
  // Memory a copy or memset node names may have been freed since it was recorded (a graph
  // captured around cudaMallocAsync/cudaFreeAsync, a buffer freed by the program): refused
  // here, as a launch that would fault, rather than left to crash the process.
  for (const Op& op : exec->ops)
    if (!device_operands_valid(op)) return CUDA_ERROR_ILLEGAL_ADDRESS;
  // Its graph memory gets physical memory now, unless mapped already (graph_memory.cpp).
  if (!s->capture)
    if (CUresult r = map_graph_memory(*exec); r != CUDA_SUCCESS) return r;
  for (Op op : exec->ops) {
    if (op.kind == Op::kernel)
      op.launch.sm_limit = static_cast<unsigned>(kernel_sm_limit(current_context(), nullptr, op.launch.green));
    CUresult r = submit(s, op);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  SIM_FAIL_POINT();
  return graph_launch(e, s, false);
}
SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) {
  SIM_FAIL_POINT();
  return graph_launch(e, s, true);
}
SIM_API CUresult cuGraphUpload(CUgraphExec e, CUstream s) {
  (void)s;
  GraphExec* exec = as_exec(e);
  return exec ? map_graph_memory(*exec) : CUDA_ERROR_INVALID_VALUE;  // its graph memory mapped now
}
