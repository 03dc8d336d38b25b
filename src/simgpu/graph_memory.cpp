// Graph memory nodes: cuGraphAddMemAllocNode / cuGraphAddMemFreeNode, and what cuMemAllocAsync
// and cuMemFreeAsync record inside a stream capture. On a real GPU an alloc node's virtual
// address is fixed when the node is made and its physical memory is mapped when the graph runs.
// The simulator allocates the memory when the node is made and keeps it, at that address, for
// as long as a graph or an executable graph made from it holds the node: every launch finds
// the memory its copies and memsets name. A free node, and a cuMemFree[Async] of the address
// after a launch (allowed by CUDA: the allocation then outlives the graph's run), release
// nothing; the memory goes when the last graph holding it is destroyed. Simplified: the
// memory is counted as used from the node's creation, not only between launch and free.
#include <set>

#include "sim.h"

namespace simgpu {

struct GraphAllocation {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  ~GraphAllocation();
};

namespace {
ProcessMutex g_mutex;
auto* g_live = new std::set<CUdeviceptr>();  // bases of live graph allocations; never destroyed
}  // namespace

GraphAllocation::~GraphAllocation() {
  // An executable graph may be destroyed while its launches still run (cuda.h allows it):
  // their copies finish before the memory goes, as cuMemFree waits too.
  if (ptr) synchronize_all();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_live->erase(ptr);
  }
  release_device(ptr);
}

bool is_graph_allocation(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_live->count(p) != 0;
}

CUresult graph_allocate(const CUDA_MEM_ALLOC_NODE_PARAMS& params, std::unique_ptr<GraphNode>* node) {
  if (params.bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h: the pool must be a device's and not exportable ("IPC is not supported").
  if (params.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(params.poolProps.location.id) ||
      params.poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE)
    return CUDA_ERROR_INVALID_VALUE;
  if (params.accessDescCount && !params.accessDescs) return CUDA_ERROR_INVALID_VALUE;
  auto a = std::make_shared<GraphAllocation>();
  CUresult r = allocate_device(&a->ptr, params.bytesize, "cuGraphAddMemAllocNode");
  if (r != CUDA_SUCCESS) {
    a->ptr = 0;  // nothing to release
    return r;
  }
  a->bytes = params.bytesize;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_live->insert(a->ptr);
  }
  auto n = std::make_unique<GraphNode>();
  n->type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  n->alloc_params = params;
  n->alloc_params.accessDescs = nullptr;  // the caller's array is not ours to keep
  n->alloc_params.accessDescCount = 0;
  n->alloc_params.dptr = a->ptr;
  n->allocation = std::move(a);
  *node = std::move(n);
  return CUDA_SUCCESS;
}

CUresult graph_free_node(CUdeviceptr p, std::unique_ptr<GraphNode>* node) {
  if (!is_graph_allocation(p)) return CUDA_ERROR_INVALID_VALUE;  // cuda.h: must be a graph allocation
  auto n = std::make_unique<GraphNode>();
  n->type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  n->freed = p;
  *node = std::move(n);
  return CUDA_SUCCESS;
}

}  // namespace simgpu

using namespace simgpu;

namespace {
GraphNode* add(CUgraph g, std::unique_ptr<GraphNode> n) {
  GraphNode* raw = n.get();
  as_graph(g)->nodes.push_back(std::move(n));
  return raw;
}
}  // namespace

SIM_API CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                        CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (!node || !as_graph(g) || !params || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_ptr<GraphNode> gn;
  CUresult r = graph_allocate(*params, &gn);
  if (r != CUDA_SUCCESS) return r;
  params->dptr = gn->alloc_params.dptr;
  *node = reinterpret_cast<CUgraphNode>(add(g, std::move(gn)));
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n, CUdeviceptr p) {
  if (!node || !as_graph(g) || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_ptr<GraphNode> gn;
  CUresult r = graph_free_node(p, &gn);
  if (r != CUDA_SUCCESS) return r;
  *node = reinterpret_cast<CUgraphNode>(add(g, std::move(gn)));
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  GraphNode* n = as_graph_node(node);
  if (!n || !params || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
  *params = n->alloc_params;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* p) {
  GraphNode* n = as_graph_node(node);
  if (!n || !p || n->type != CU_GRAPH_NODE_TYPE_MEM_FREE) return CUDA_ERROR_INVALID_VALUE;
  *p = n->freed;
  return CUDA_SUCCESS;
}

// The memory graphs hold, as cudaDeviceGetGraphMemAttribute reports it: the simulator's graph
// memory stays allocated, so "reserved" and "used" are the same figure.
SIM_API CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  uint64_t total = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (CUdeviceptr p : *g_live) {
      size_t bytes = 0;
      if (allocation_of(p, nullptr, &bytes)) total += bytes;
    }
  }
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *static_cast<cuuint64_t*>(value) = total; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}
SIM_API CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  // Only the high watermarks can be set, and only to zero (cuda.h).
  if (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) return CUDA_ERROR_INVALID_VALUE;
  return *static_cast<cuuint64_t*>(value) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
SIM_API CUresult cuDeviceGraphMemTrim(CUdevice dev) { return valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
