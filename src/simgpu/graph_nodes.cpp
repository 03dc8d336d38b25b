// Graph nodes added by hand (cuda-samples' simpleCudaGraphs, conditional nodes, clones):
// memcpy, memset, host and empty nodes, the generic cuGraphAddNode, conditional nodes and
// cuGraphClone. A memcpy or memset node is the same Op a captured copy or memset records, so a
// launch moves or sets real bytes. Dependencies are accepted and not kept: the simulator runs
// a graph's nodes in the order they were added, which is a valid order for a graph built node
// by node (a node's dependencies exist before it).
//
// Conditional nodes (CUDA 12.3+): the node owns its body graphs (`size` of them, returned in
// phGraph_out), to be filled like any graph. On a GPU a kernel sets the handle's value with
// cudaGraphSetConditional; kernels do not run here, so the value is the handle's default
// (CU_GRAPH_COND_ASSIGN_DEFAULT; 0 without it) and is fixed when the graph is instantiated:
// IF runs body 0 when it is non-zero (else body 1, if any), SWITCH body[value] when there is
// one, WHILE its body once when it is non-zero (repeating it would never end, as no kernel can
// clear the value; the log says so).
#include <cstring>

#include "sim.h"

namespace simgpu {

struct ConditionalHandle {
  uint32_t magic = 0x434f4e44;  // "COND"
  unsigned default_value = 0;
  bool assign_default = false;
};

namespace {
ConditionalHandle* as_handle(CUgraphConditionalHandle h) {
  auto* p = reinterpret_cast<ConditionalHandle*>(static_cast<uintptr_t>(h));
  return p && p->magic == 0x434f4e44 ? p : nullptr;
}
}  // namespace

void conditional_bodies(const GraphNode& n, std::vector<const Graph*>& out) {
  unsigned v = n.condition && n.condition->assign_default ? n.condition->default_value : 0;
  switch (n.cond_type) {
    case CU_GRAPH_COND_TYPE_IF:
      if (v && !n.bodies.empty()) out.push_back(n.bodies[0]);
      else if (!v && n.bodies.size() == 2) out.push_back(n.bodies[1]);
      break;
    case CU_GRAPH_COND_TYPE_SWITCH:
      if (v < n.bodies.size()) out.push_back(n.bodies[v]);
      break;
    case CU_GRAPH_COND_TYPE_WHILE:
      if (v && !n.bodies.empty()) {
        log(2, "conditional WHILE node: body run once (kernels, which would clear the condition, do not run)");
        out.push_back(n.bodies[0]);
      }
      break;
    default: break;
  }
}

}  // namespace simgpu

using namespace simgpu;

namespace {

GraphNode* add(Graph* g, std::unique_ptr<GraphNode> n, CUgraphNode* out) {
  GraphNode* raw = n.get();
  g->nodes.push_back(std::move(n));
  *out = reinterpret_cast<CUgraphNode>(raw);
  return raw;
}

CUresult memcpy_node(const CUDA_MEMCPY3D& p, std::unique_ptr<GraphNode>* out) {
  auto n = std::make_unique<GraphNode>();
  CUresult r = copy3d_op(p, &n->op);  // pitched_copies.cpp
  if (r != CUDA_SUCCESS) return r;
  n->type = CU_GRAPH_NODE_TYPE_MEMCPY;
  n->copy_params = p;
  note_device_operands(n->op);
  *out = std::move(n);
  return CUDA_SUCCESS;
}

CUresult memset_op(const CUDA_MEMSET_NODE_PARAMS& p, Op* op) {
  if (!p.dst || (p.elementSize != 1 && p.elementSize != 2 && p.elementSize != 4) || p.width == 0 || p.height == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (p.height > 1 && p.pitch < p.width * p.elementSize) return CUDA_ERROR_INVALID_VALUE;
  *op = Op{};
  op->kind = Op::set;
  op->dst = reinterpret_cast<void*>(p.dst);
  op->value = p.value;
  op->elem = p.elementSize;
  op->count = p.width;
  op->height = p.height;
  op->dst_pitch = p.pitch;
  Context* c = current_context();
  op->launch.device = c ? c->device : 0;
  // cuda.h: the destination is device memory; one the simulator does not know would fault.
  if (!valid_device_range(p.dst, dst_extent(*op))) return CUDA_ERROR_INVALID_VALUE;
  note_device_operands(*op);
  return CUDA_SUCCESS;
}

CUresult memset_node(const CUDA_MEMSET_NODE_PARAMS& p, std::unique_ptr<GraphNode>* out) {
  auto n = std::make_unique<GraphNode>();
  CUresult r = memset_op(p, &n->op);
  if (r != CUDA_SUCCESS) return r;
  n->type = CU_GRAPH_NODE_TYPE_MEMSET;
  n->memset_params = p;
  *out = std::move(n);
  return CUDA_SUCCESS;
}

std::unique_ptr<GraphNode> host_node(CUhostFn fn, void* data) {
  auto n = std::make_unique<GraphNode>();
  n->type = CU_GRAPH_NODE_TYPE_HOST;
  n->op.kind = Op::host;
  n->op.host_fn = fn;
  n->op.host_data = data;
  return n;
}

CUresult conditional_node(Graph* g, CUDA_CONDITIONAL_NODE_PARAMS& p, CUgraphNode* out) {
  ConditionalHandle* h = as_handle(p.handle);
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  bool size_ok = p.type == CU_GRAPH_COND_TYPE_IF ? (p.size == 1 || p.size == 2)
                 : p.type == CU_GRAPH_COND_TYPE_WHILE ? p.size == 1
                 : p.type == CU_GRAPH_COND_TYPE_SWITCH ? p.size > 0
                                                        : false;
  if (!size_ok) return CUDA_ERROR_INVALID_VALUE;
  auto n = std::make_unique<GraphNode>();
  n->type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  n->condition = h;
  n->cond_type = p.type;
  for (unsigned i = 0; i < p.size; ++i) n->bodies.push_back(new Graph());  // freed with its graph (graph.cpp)
  // cuda.h: phGraph_out is a CUDA-owned array, valid for the node's lifetime: the node's own
  // list of bodies (a Graph* is what a CUgraph handle is).
  p.phGraph_out = reinterpret_cast<CUgraph*>(n->bodies.data());
  add(g, std::move(n), out);
  return CUDA_SUCCESS;
}

CUresult add_node(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps, CUgraphNodeParams* p) {
  Graph* g = as_graph(hg);
  if (!out || !g || !p || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_ptr<GraphNode> n;
  CUresult r = CUDA_SUCCESS;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS k{};
      static_assert(sizeof k == sizeof p->kernel, "v2 and v3 kernel node parameters share a layout");
      std::memcpy(&k, &p->kernel, sizeof k);
      return cuGraphAddKernelNode_v2(out, hg, deps, ndeps, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (p->memcpy.flags || p->memcpy.reserved) return CUDA_ERROR_INVALID_VALUE;
      r = memcpy_node(p->memcpy.copyParams, &n);
      break;
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS m{};
      m.dst = p->memset.dst, m.pitch = p->memset.pitch, m.value = p->memset.value;
      m.elementSize = p->memset.elementSize, m.width = p->memset.width, m.height = p->memset.height;
      r = memset_node(m, &n);
      break;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      if (!p->host.fn) return CUDA_ERROR_INVALID_VALUE;
      n = host_node(p->host.fn, p->host.userData);
      break;
    case CU_GRAPH_NODE_TYPE_EMPTY:
      n = std::make_unique<GraphNode>();
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      if (p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) {
        Graph* child = as_graph(p->graph.graph);
        if (!child) return CUDA_ERROR_INVALID_VALUE;
        n = std::make_unique<GraphNode>();
        n->type = CU_GRAPH_NODE_TYPE_GRAPH;
        n->child = child;  // the node owns it now (cuda.h)
        break;
      }
      return cuGraphAddChildGraphNode(out, hg, deps, ndeps, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return cuGraphAddEventRecordNode(out, hg, deps, ndeps, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return cuGraphAddEventWaitNode(out, hg, deps, ndeps, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      CUDA_MEM_ALLOC_NODE_PARAMS a{};
      a.poolProps = p->alloc.poolProps, a.accessDescs = p->alloc.accessDescs;
      a.accessDescCount = p->alloc.accessDescCount, a.bytesize = p->alloc.bytesize;
      r = cuGraphAddMemAllocNode(out, hg, deps, ndeps, &a);
      if (r == CUDA_SUCCESS) p->alloc.dptr = a.dptr;
      return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return cuGraphAddMemFreeNode(out, hg, deps, ndeps, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return conditional_node(g, p->conditional, out);
    default: return CUDA_ERROR_NOT_SUPPORTED;  // external semaphores, batch memory operations
  }
  if (r != CUDA_SUCCESS) return r;
  add(g, std::move(n), out);
  return CUDA_SUCCESS;
}

}  // namespace

SIM_API CUresult cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t n,
                                      const CUDA_MEMCPY3D* p, CUcontext) {
  Graph* g = as_graph(hg);
  if (!out || !g || !p || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_ptr<GraphNode> node;
  CUresult r = memcpy_node(*p, &node);
  if (r == CUDA_SUCCESS) add(g, std::move(node), out);
  return r;
}
SIM_API CUresult cuGraphAddMemsetNode(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t n,
                                      const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  Graph* g = as_graph(hg);
  if (!out || !g || !p || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_ptr<GraphNode> node;
  CUresult r = memset_node(*p, &node);
  if (r == CUDA_SUCCESS) add(g, std::move(node), out);
  return r;
}
SIM_API CUresult cuGraphAddHostNode(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t n,
                                    const CUDA_HOST_NODE_PARAMS* p) {
  Graph* g = as_graph(hg);
  if (!out || !g || !p || !p->fn || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  add(g, host_node(p->fn, p->userData), out);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphAddEmptyNode(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t n) {
  Graph* g = as_graph(hg);
  if (!out || !g || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  add(g, std::make_unique<GraphNode>(), out);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphAddNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData*,
                                   size_t n, CUgraphNodeParams* p) {
  return add_node(out, g, deps, n, p);
}
SIM_API CUresult cuGraphAddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUgraphNodeParams* p) {
  return add_node(out, g, deps, n, p);
}

SIM_API CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* p) {
  GraphNode* n = as_graph_node(node);
  if (!n || !p || n->type != CU_GRAPH_NODE_TYPE_MEMCPY) return CUDA_ERROR_INVALID_VALUE;
  *p = n->copy_params;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* p) {
  GraphNode* n = as_graph_node(node);
  if (!n || !p || n->type != CU_GRAPH_NODE_TYPE_MEMCPY) return CUDA_ERROR_INVALID_VALUE;
  std::unique_ptr<GraphNode> fresh;
  CUresult r = memcpy_node(*p, &fresh);
  if (r != CUDA_SUCCESS) return r;
  n->op = fresh->op;
  n->copy_params = *p;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
  GraphNode* n = as_graph_node(node);
  if (!n || !p || n->type != CU_GRAPH_NODE_TYPE_MEMSET) return CUDA_ERROR_INVALID_VALUE;
  *p = n->memset_params;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  GraphNode* n = as_graph_node(node);
  if (!n || !p || n->type != CU_GRAPH_NODE_TYPE_MEMSET) return CUDA_ERROR_INVALID_VALUE;
  Op op;
  CUresult r = memset_op(*p, &op);
  if (r != CUDA_SUCCESS) return r;
  n->op = op;
  n->memset_params = *p;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* p) {
  GraphNode* n = as_graph_node(node);
  if (!n || !p || n->type != CU_GRAPH_NODE_TYPE_HOST) return CUDA_ERROR_INVALID_VALUE;
  p->fn = n->op.host_fn;
  p->userData = n->op.host_data;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* out, CUgraph g, CUcontext, unsigned value,
                                                unsigned flags) {
  if (!out || !as_graph(g) || (flags & ~static_cast<unsigned>(CU_GRAPH_COND_ASSIGN_DEFAULT))) return CUDA_ERROR_INVALID_VALUE;
  auto* h = new ConditionalHandle();  // lives as long as the process: nodes of clones name it too
  h->default_value = value;
  h->assign_default = flags & CU_GRAPH_COND_ASSIGN_DEFAULT;
  *out = static_cast<CUgraphConditionalHandle>(reinterpret_cast<uintptr_t>(h));
  return CUDA_SUCCESS;
}

// cuGraphClone: a deep copy (child graphs and conditional bodies cloned, graph allocations
// shared: the clone's alloc nodes name the same memory, which lives while either holds it).
// Original -> clone node pairs are kept so that cuGraphNodeFindInClone can answer.
namespace {
ProcessMutex g_clone_mutex;
auto* g_clones = new std::vector<std::pair<const Graph*, std::vector<std::pair<const GraphNode*, GraphNode*>>>>();
}  // namespace
SIM_API CUresult cuGraphClone(CUgraph* out, CUgraph original) {
  Graph* g = as_graph(original);
  if (!out || !g) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::pair<const GraphNode*, GraphNode*>> map;
  Graph* c = clone_graph(g, &map);
  {
    std::lock_guard<std::mutex> lock(g_clone_mutex);
    // A destroyed clone's address may come back: the entry is the newest clone's.
    std::erase_if(*g_clones, [&](const auto& e) { return e.first == c; });
    g_clones->emplace_back(c, std::move(map));
  }
  *out = reinterpret_cast<CUgraph>(c);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphNodeFindInClone(CUgraphNode* out, CUgraphNode original, CUgraph clone) {
  if (!out || !as_graph_node(original) || !as_graph(clone)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_clone_mutex);
  for (auto& [graph, map] : *g_clones) {
    if (graph != as_graph(clone)) continue;
    for (auto& [from, to] : map)
      if (from == as_graph_node(original)) {
        *out = reinterpret_cast<CUgraphNode>(to);
        return CUDA_SUCCESS;
      }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
