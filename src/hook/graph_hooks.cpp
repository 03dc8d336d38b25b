// Graph hooks: a graph's kernel nodes are counted once, when it is instantiated, and charged
// at every cuGraphLaunch (launch_hooks.cpp).
#include <vector>

#include "handle_map.h"
#include "hooks.h"
#include "kernel_kind.h"
#include "log.h"
#include "real_driver.h"

namespace tandem::hook {

namespace {

struct NodeCount {
  uint64_t kernels = 0;
  uint64_t nccl = 0;
};

void count_nodes(CUgraph graph, NodeCount& n, int depth) noexcept {
  if (depth > 16) return;  // child graphs nest; a deeper nesting is not real
  size_t count = 0;
  if (g_real.cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS || count == 0) return;
  std::vector<CUgraphNode> nodes(count);
  if (g_real.cuGraphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return;
  for (size_t i = 0; i < count; ++i) {
    CUgraphNodeType type;
    if (g_real.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      ++n.kernels;
      CUDA_KERNEL_NODE_PARAMS params{};
      if (g_real.cuGraphKernelNodeGetParams_v2(nodes[i], &params) == CUDA_SUCCESS) {
        CUfunction f = params.func ? params.func : reinterpret_cast<CUfunction>(params.kern);
        if (f && is_nccl(kernel_kind(f))) ++n.nccl;
      }
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph child = nullptr;
      if (g_real.cuGraphChildGraphNodeGetGraph(nodes[i], &child) == CUDA_SUCCESS && child)
        count_nodes(child, n, depth + 1);
    }
  }
}

CUresult remember(CUresult r, CUgraphExec* exec, CUgraph graph) noexcept {
  if (r != CUDA_SUCCESS || !exec || !*exec) return r;
  NodeCount n;
  try {
    count_nodes(graph, n, 0);
  } catch (...) {  // allocation failure: count nothing rather than crash the host
    TANDEM_LOG_WARN("could not count the nodes of graph {}", static_cast<void*>(graph));
  }
  if (!graph_exec_kernels().put(reinterpret_cast<uintptr_t>(*exec), n.kernels | (n.nccl << 32)))
    TANDEM_LOG_WARN("graph table full: launches of exec {} are not counted", static_cast<void*>(*exec));
  TANDEM_LOG_DEBUG("graph exec {}: {} kernel nodes ({} nccl)", static_cast<void*>(*exec),
                   n.kernels, n.nccl);
  return r;
}

}  // namespace

CUresult hook_cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                          unsigned long long flags) noexcept {
  return remember(g_real.cuGraphInstantiateWithFlags(exec, graph, flags), exec, graph);
}

CUresult hook_cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* p) noexcept {
  return remember(g_real.cuGraphInstantiateWithParams(exec, graph, p), exec, graph);
}

CUresult hook_cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                CUDA_GRAPH_INSTANTIATE_PARAMS* p) noexcept {
  return remember(g_real.cuGraphInstantiateWithParams_ptsz(exec, graph, p), exec, graph);
}

CUresult hook_cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node,
                                    char* log, size_t log_size) noexcept {
  return remember(g_real.cuGraphInstantiate_v2(exec, graph, error_node, log, log_size), exec,
                  graph);
}

CUresult hook_cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph,
                                   CUgraphExecUpdateResultInfo* info) noexcept {
  CUresult r = g_real.cuGraphExecUpdate_v2(exec, graph, info);
  return remember(r, &exec, graph);
}

CUresult hook_cuGraphExecDestroy(CUgraphExec exec) noexcept {
  CUresult r = g_real.cuGraphExecDestroy(exec);
  if (r == CUDA_SUCCESS) graph_exec_kernels().erase(reinterpret_cast<uintptr_t>(exec));
  return r;
}

}  // namespace tandem::hook
