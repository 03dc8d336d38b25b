// Graph memory nodes: cuGraphAddMemAllocNode / cuGraphAddMemFreeNode, and what cuMemAllocAsync
// and cuMemFreeAsync record inside a stream capture. As on a GPU (CUDA Programming Guide, "Graph
// Memory Nodes"), an alloc node gets its virtual address when it is made and physical memory
// only when the graph runs: a capture's cuMemAllocAsync does not use the GPU's memory and does
// not fail for want of it (PyTorch, which synchronizes to retry an allocation that failed,
// invalidated its capture when the simulator counted the memory at capture, beside another
// process at its peak). The simulator keeps the address's pages for as long as a graph or an
// executable graph holds the node, so every launch finds the memory its copies and memsets
// name, and counts the memory from the executable graph's first launch (or cuGraphUpload) until
// it is destroyed; a launch that does not fit fails with CUDA_ERROR_OUT_OF_MEMORY. A free node,
// and a cuMemFree[Async] of the address after a launch (allowed by CUDA: the allocation then
// outlives the graph's run), release nothing. Simplified: a GPU may let allocations whose
// lifetimes do not overlap share physical memory, within a graph and across graphs; the
// simulator counts each executable graph's allocations in full, and gives them back when it
// is destroyed rather than at cuDeviceGraphMemTrim.
#include <algorithm>
#include <set>

#include "sim.h"

namespace simgpu {

struct GraphAllocation {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  int device = 0;
  ~GraphAllocation();
};

namespace {
ProcessMutex g_mutex;
auto* g_live = new std::set<CUdeviceptr>();  // bases of live graph allocations; never destroyed
// What executable graphs mapped, per device (cuDeviceGetGraphMemAttribute), and its high mark.
uint64_t g_mapped_on[16], g_mapped_high[16];
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
  CUresult r = reserve_graph_address(&a->ptr, params.bytesize);  // an address; memory at launch
  if (r != CUDA_SUCCESS) {
    a->ptr = 0;  // nothing to release
    return r;
  }
  a->bytes = params.bytesize;
  a->device = params.poolProps.location.id;
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

CUresult map_graph_memory(GraphExec& e) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!e.mapped.empty() || e.allocations.empty()) return CUDA_SUCCESS;
  std::vector<std::pair<int, uint64_t>> need;
  for (const auto& a : e.allocations) {
    auto it = std::find_if(need.begin(), need.end(), [&](const auto& d) { return d.first == a->device; });
    if (it == need.end()) need.emplace_back(a->device, a->bytes);
    else it->second += a->bytes;
  }
  for (size_t i = 0; i < need.size(); ++i) {
    if (charge_device_memory(need[i].first, need[i].second)) continue;
    for (size_t k = 0; k < i; ++k) uncharge_device_memory(need[k].first, need[k].second);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (const auto& [device, bytes] : need) {
    g_mapped_on[device] += bytes;
    g_mapped_high[device] = std::max(g_mapped_high[device], g_mapped_on[device]);
  }
  e.mapped = std::move(need);
  return CUDA_SUCCESS;
}

void unmap_graph_memory(GraphExec& e) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [device, bytes] : e.mapped) {
    uncharge_device_memory(device, bytes);
    g_mapped_on[device] -= bytes;
  }
  e.mapped.clear();
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

// The memory executable graphs mapped, as cudaDeviceGetGraphMemAttribute reports it: the
// simulator keeps what a graph mapped until it is destroyed, so "reserved" and "used" are the
// same figure.
SIM_API CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  if (!valid_device(dev) || dev >= 16) return CUDA_ERROR_INVALID_DEVICE;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = g_mapped_on[dev]; return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *static_cast<cuuint64_t*>(value) = g_mapped_high[dev]; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}
SIM_API CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  if (!valid_device(dev) || dev >= 16) return CUDA_ERROR_INVALID_DEVICE;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  // Only the high watermarks can be set, and only to zero (cuda.h).
  if (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) return CUDA_ERROR_INVALID_VALUE;
  if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_mapped_high[dev] = g_mapped_on[dev];  // the mark starts again from what is mapped now
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDeviceGraphMemTrim(CUdevice dev) { return valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
