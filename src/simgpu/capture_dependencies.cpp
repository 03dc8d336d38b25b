// What NCCL asks of stream capture beyond recording work (its strong streams join a capture
// through explicit dependencies and event nodes, and persistent plans hang on user objects).
// The simulator runs a graph's nodes in the order they were added, on the launch stream, so
// dependency edits change nothing that runs: they are checked and accepted; an event-record
// node records its event there, and an event-wait node has nothing left to wait for (what
// it waited on ran before it) and runs as nothing. A user object is reference-counted and its
// destructor runs when the count reaches zero; references a graph takes are never returned
// (an executable graph may still use what they keep alive), so those objects live until
// the process exits.
#include <map>
#include <vector>

#include "sim.h"

using namespace simgpu;

namespace {

struct UserObject {
  uint32_t magic = 0x5553524f;
  void* ptr;
  CUhostFn destroy;
  std::atomic<unsigned> refs;
};

UserObject* as_user_object(CUuserObject h) {
  auto* o = reinterpret_cast<UserObject*>(h);
  return o && o->magic == 0x5553524f ? o : nullptr;
}

CUresult update_dependencies(CUstream s, const void* deps, size_t n, unsigned flags, bool per_thread) {
  Stream* st = resolve_stream(s, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if ((n && !deps) || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES) return CUDA_ERROR_INVALID_VALUE;
  if (!st->capture) return CUDA_ERROR_ILLEGAL_STATE;
  return st->capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

void nothing(void*) {}

CUresult add_event_node(CUgraphNode* out, CUgraph g, CUevent e, CUgraphNodeType type) {
  Graph* graph = as_graph(g);
  auto* ev = reinterpret_cast<Event*>(e);
  if (!out || !graph || !ev || ev->magic != 0x45564e54) return CUDA_ERROR_INVALID_VALUE;
  auto node = std::make_unique<GraphNode>();
  node->type = type;
  if (type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
    node->op.kind = Op::record;
    node->op.event = ev;
  } else {
    node->op.kind = Op::host;
    node->op.host_fn = nothing;
  }
  *out = reinterpret_cast<CUgraphNode>(node.get());
  graph->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

// References held by graphs and executable graphs, by owner.
ProcessMutex g_owned_mutex;
auto* g_owned = new std::map<const void*, std::vector<std::pair<UserObject*, unsigned>>>();  // never destroyed

void release(UserObject* o, unsigned count) {
  if (o->refs.fetch_sub(count) == count) {
    o->magic = 0;
    o->destroy(o->ptr);
    delete o;
  }
}

}  // namespace

void simgpu::copy_user_objects(const void* graph, const void* exec) {
  std::lock_guard<std::mutex> lock(g_owned_mutex);
  auto it = g_owned->find(graph);
  if (it == g_owned->end()) return;
  for (auto& [o, count] : it->second) o->refs.fetch_add(count);
  (*g_owned)[exec] = it->second;
}

void simgpu::release_user_objects(const void* owner) {
  std::vector<std::pair<UserObject*, unsigned>> held;
  {
    std::lock_guard<std::mutex> lock(g_owned_mutex);
    auto it = g_owned->find(owner);
    if (it == g_owned->end()) return;
    held = std::move(it->second);
    g_owned->erase(it);
  }
  for (auto& [o, count] : held) release(o, count);
}

SIM_API CUresult cuGraphAddEventRecordNode(CUgraphNode* node, CUgraph g, const CUgraphNode*, size_t, CUevent e) {
  return add_event_node(node, g, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}
SIM_API CUresult cuGraphAddEventWaitNode(CUgraphNode* node, CUgraph g, const CUgraphNode*, size_t, CUevent e) {
  return add_event_node(node, g, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

SIM_API CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode* d, size_t n, unsigned flags) {
  return update_dependencies(s, d, n, flags, false);
}
SIM_API CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode* d, size_t n, unsigned flags) {
  return update_dependencies(s, d, n, flags, true);
}
SIM_API CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* d, const CUgraphEdgeData*, size_t n,
                                                      unsigned flags) {
  return update_dependencies(s, d, n, flags, false);
}
SIM_API CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode* d, const CUgraphEdgeData*,
                                                           size_t n, unsigned flags) {
  return update_dependencies(s, d, n, flags, true);
}

SIM_API CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  if (!g || (n && (!from || !to))) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                           const CUgraphEdgeData*, size_t n) {
  return cuGraphAddDependencies(g, from, to, n);
}

SIM_API CUresult cuUserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned initial, unsigned flags) {
  if (!out || !destroy || initial == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) return CUDA_ERROR_INVALID_VALUE;
  auto* o = new UserObject();
  o->ptr = ptr;
  o->destroy = destroy;
  o->refs.store(initial);
  *out = reinterpret_cast<CUuserObject>(o);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuUserObjectRetain(CUuserObject h, unsigned count) {
  UserObject* o = as_user_object(h);
  if (!o || count == 0) return CUDA_ERROR_INVALID_VALUE;
  o->refs.fetch_add(count);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuUserObjectRelease(CUuserObject h, unsigned count) {
  UserObject* o = as_user_object(h);
  if (!o || count == 0) return CUDA_ERROR_INVALID_VALUE;
  release(o, count);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphRetainUserObject(CUgraph g, CUuserObject h, unsigned count, unsigned flags) {
  UserObject* o = as_user_object(h);
  if (!as_graph(g) || !o || count == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!(flags & CU_GRAPH_USER_OBJECT_MOVE)) o->refs.fetch_add(count);  // else the caller's become the graph's
  std::lock_guard<std::mutex> lock(g_owned_mutex);
  (*g_owned)[as_graph(g)].emplace_back(o, count);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphReleaseUserObject(CUgraph g, CUuserObject h, unsigned count) {
  UserObject* o = as_user_object(h);
  if (!as_graph(g) || !o || count == 0) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard<std::mutex> lock(g_owned_mutex);
    auto& held = (*g_owned)[as_graph(g)];
    unsigned left = count;
    for (auto it = held.begin(); it != held.end() && left;) {
      if (it->first != o) {
        ++it;
        continue;
      }
      unsigned n = it->second < left ? it->second : left;
      it->second -= n;
      left -= n;
      it = it->second == 0 ? held.erase(it) : it + 1;
    }
    if (left) return CUDA_ERROR_INVALID_VALUE;  // the graph did not hold that many
  }
  release(o, count);
  return CUDA_SUCCESS;
}
