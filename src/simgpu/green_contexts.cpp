// Green contexts (CUDA 12.4+): a process partitions its GPU's SMs and launches into streams
// that run on one partition. The four steps of cuda.h: the device's SM resource
// (cuDeviceGetDevResource), split into groups (cuDevSmResourceSplitByCount), a descriptor of
// the chosen groups (cuDevResourceGenerateDesc), a green context holding them
// (cuGreenCtxCreate); then streams in it (cuGreenCtxStreamCreate) or its converted context
// (cuCtxFromGreenCtx) made current. A kernel on such a stream occupies at most the green
// context's SMs and lasts longer in proportion (sm_limit.cpp), with or without MPS; inside an
// MPS client limited by CUDA_MPS_ACTIVE_THREAD_PERCENTAGE below 100 the client's SMs apply
// instead. Memory is the process's: a green context shares the primary context's address space.
// Granularity of a Hopper GPU (compute capability 9.0): groups of at least 8 SMs in steps of 8
// (2 and 2 with CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING). The errors are those cuda.h
// lists for each call. Green contexts and descriptors are never freed: a destroyed green
// context stays marked so that calls on its streams fail as cuda.h says
// (CUDA_ERROR_CONTEXT_IS_DESTROYED) instead of touching freed memory.
#include <cstring>

#include "sim.h"

namespace simgpu {
namespace {

constexpr unsigned kMinPartition = 8, kAlignment = 8;          // compute capability 9.0
constexpr unsigned kLooseMinPartition = 2, kLooseAlignment = 2;  // ..._IGNORE_SM_COSCHEDULING
constexpr uint32_t kTagMagic = 0x52534d53;                      // "SMSR"
constexpr uint32_t kDescMagic = 0x44534d53;

// What the simulator keeps in a CUdevResource's internal padding: where it came from.
struct ResourceTag {
  uint32_t magic;
  int32_t device;
  uint32_t split_output;  // 0: a whole resource (may be split), 1: a split's group or remainder
  uint32_t unused;
  uint64_t split;         // the split call that made it (descriptors join groups of one split only)
};
static_assert(sizeof(ResourceTag) <= sizeof(CUdevResource{}._internal_padding), "tag fits the padding");

struct ResourceDesc {
  uint32_t magic = kDescMagic;
  int device = 0;
  unsigned sms = 0;
};

std::atomic<uint64_t> g_splits{0};
std::atomic<unsigned long long> g_green_ids{0};

void make_resource(CUdevResource* r, int device, unsigned sms, bool split_output, uint64_t split, bool loose = false) {
  std::memset(r, 0, sizeof *r);
  r->type = CU_DEV_RESOURCE_TYPE_SM;
  r->sm.smCount = sms;
  r->sm.minSmPartitionSize = loose ? kLooseMinPartition : kMinPartition;
  r->sm.smCoscheduledAlignment = loose ? kLooseAlignment : kAlignment;
  ResourceTag tag{kTagMagic, device, split_output ? 1u : 0u, 0, split};
  std::memcpy(r->_internal_padding, &tag, sizeof tag);
}

// The tag of a resource made here; false for memory the simulator did not fill.
bool tag_of(const CUdevResource* r, ResourceTag* tag) {
  std::memcpy(tag, r->_internal_padding, sizeof *tag);
  return tag->magic == kTagMagic;
}

CUresult resource_query(CUdevResource* r, CUdevResourceType type, int device, unsigned sms) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!r) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  make_resource(r, device, sms, false, 0);
  return CUDA_SUCCESS;
}

GreenContext* as_green(CUgreenCtx g) {
  auto* green = reinterpret_cast<GreenContext*>(g);
  return green && green->magic == 0x47524e43 && !green->destroyed ? green : nullptr;
}

}  // namespace
}  // namespace simgpu

using namespace simgpu;

SIM_API CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource* resource, CUdevResourceType type) {
  SIM_FAIL_POINT();
  if (initialized() && !valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  return resource_query(resource, type, device, static_cast<unsigned>(settings().sms));
}

SIM_API CUresult cuCtxGetDevResource(CUcontext ctx, CUdevResource* resource, CUdevResourceType type) {
  auto* c = reinterpret_cast<Context*>(ctx);
  if (!c || c->magic != 0x43545854) return CUDA_ERROR_INVALID_CONTEXT;
  unsigned sms = c->green ? c->green->sms : static_cast<unsigned>(sm_limit(c));
  return resource_query(resource, type, c->device, sms);
}

SIM_API CUresult cuGreenCtxGetDevResource(CUgreenCtx g, CUdevResource* resource, CUdevResourceType type) {
  GreenContext* green = as_green(g);
  if (!green) return CUDA_ERROR_INVALID_CONTEXT;
  return resource_query(resource, type, green->device, green->sms);
}

SIM_API CUresult cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* nbGroups, const CUdevResource* input,
                                             CUdevResource* remaining, unsigned int useFlags, unsigned int minCount) {
  SIM_FAIL_POINT();
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!nbGroups || !input) return CUDA_ERROR_INVALID_VALUE;
  if (input->type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  ResourceTag tag{};
  if (!tag_of(input, &tag)) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(tag.device)) return CUDA_ERROR_INVALID_DEVICE;
  // cuda.h: a split's output cannot be split again without a green context made of it first.
  if (tag.split_output) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  const unsigned known = CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING | CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE;
  if (useFlags & ~known) return CUDA_ERROR_INVALID_VALUE;
  const unsigned total = input->sm.smCount;
  if (minCount > total) return CUDA_ERROR_INVALID_VALUE;
  if (result && *nbGroups == 0) return CUDA_ERROR_INVALID_VALUE;
  const bool loose = useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING;
  const unsigned minimum = loose ? kLooseMinPartition : kMinPartition;
  const unsigned alignment = loose ? kLooseAlignment : kAlignment;
  // The count is rounded up to the minimum and the alignment (cuda.h: "often rounding up and
  // aligning the minCount"); groups are equal, the rest is the remainder.
  unsigned count = minCount < minimum ? minimum : minCount;
  count = (count + alignment - 1) / alignment * alignment;
  if (count > total) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  unsigned possible = total / count;
  if (!result) {
    *nbGroups = possible;
    return CUDA_SUCCESS;
  }
  unsigned groups = *nbGroups < possible ? *nbGroups : possible;
  uint64_t split = ++g_splits;
  for (unsigned i = 0; i < groups; ++i) make_resource(&result[i], tag.device, count, true, split, loose);
  *nbGroups = groups;
  if (remaining) make_resource(remaining, tag.device, total - groups * count, true, split, loose);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevResourceGenerateDesc(CUdevResourceDesc* phDesc, CUdevResource* resources, unsigned int nbResources) {
  SIM_FAIL_POINT();
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!phDesc || !resources || nbResources == 0) return CUDA_ERROR_INVALID_VALUE;
  ResourceTag first{};
  unsigned sms = 0;
  for (unsigned i = 0; i < nbResources; ++i) {
    ResourceTag tag{};
    if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    if (!tag_of(&resources[i], &tag)) return CUDA_ERROR_INVALID_VALUE;
    if (i == 0) first = tag;
    // cuda.h: several resources must come from one device and, for SMs, from one split.
    if (tag.device != first.device) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    if (nbResources > 1 && (!tag.split_output || tag.split != first.split)) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    sms += resources[i].sm.smCount;
  }
  if (sms == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;  // an empty remainder holds nothing to run on
  auto* desc = new ResourceDesc();
  desc->device = first.device;
  desc->sms = sms;
  *phDesc = reinterpret_cast<CUdevResourceDesc>(desc);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGreenCtxCreate(CUgreenCtx* phCtx, CUdevResourceDesc d, CUdevice dev, unsigned int flags) {
  SIM_FAIL_POINT();
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  auto* desc = reinterpret_cast<ResourceDesc*>(d);
  if (!phCtx || !desc || desc->magic != kDescMagic) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (desc->device != dev) return CUDA_ERROR_INVALID_VALUE;  // resources of another device
  if (!(flags & CU_GREEN_CTX_DEFAULT_STREAM) || (flags & ~static_cast<unsigned>(CU_GREEN_CTX_DEFAULT_STREAM)))
    return CUDA_ERROR_INVALID_VALUE;  // CU_GREEN_CTX_DEFAULT_STREAM is required, nothing else exists
  CUcontext primary = nullptr;
  if (CUresult r = cuDevicePrimaryCtxRetain(&primary, dev); r != CUDA_SUCCESS) return r;  // cuda.h: it retains it
  auto* green = new GreenContext();
  green->device = dev;
  green->sms = desc->sms;
  green->id = ++g_green_ids;
  green->converted = *reinterpret_cast<Context*>(primary);  // the primary context, with these SMs
  green->converted.green = green;
  *phCtx = reinterpret_cast<CUgreenCtx>(green);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGreenCtxDestroy(CUgreenCtx g) {
  auto* green = reinterpret_cast<GreenContext*>(g);
  if (!green || green->magic != 0x47524e43) return CUDA_ERROR_INVALID_CONTEXT;
  if (green->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  green->destroyed = true;
  if (current_context() == &green->converted) cuCtxSetCurrent(nullptr);
  return cuDevicePrimaryCtxRelease_v2(green->device);
}

SIM_API CUresult cuCtxFromGreenCtx(CUcontext* pContext, CUgreenCtx g) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pContext) return CUDA_ERROR_INVALID_VALUE;
  GreenContext* green = as_green(g);
  if (!green) return CUDA_ERROR_INVALID_CONTEXT;
  *pContext = reinterpret_cast<CUcontext>(&green->converted);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGreenCtxGetId(CUgreenCtx g, unsigned long long* id) {
  GreenContext* green = as_green(g);
  if (!green) return CUDA_ERROR_INVALID_CONTEXT;
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  *id = green->id;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGreenCtxStreamCreate(CUstream* phStream, CUgreenCtx g, unsigned int flags, int priority) {
  SIM_FAIL_POINT();
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!phStream) return CUDA_ERROR_INVALID_VALUE;
  GreenContext* green = as_green(g);
  if (!green) return CUDA_ERROR_INVALID_CONTEXT;
  if (!(flags & CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;  // must be specified
  int least = 0, greatest = 0;
  cuCtxGetStreamPriorityRange(&least, &greatest);  // out of range: clamped
  priority = priority > least ? least : priority < greatest ? greatest : priority;
  Stream* s = create_stream(flags, priority);
  s->green = green;  // whatever context is current (cuda.h: it is ignored)
  *phStream = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetGreenCtx(CUstream s, CUgreenCtx* phCtx) {
  if (!phCtx) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = resolve_stream(s, false);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (stream_context_destroyed(st)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  // A special stream (NULL, legacy, per-thread) answers for the context current to the thread.
  const Context* c = current_context();
  GreenContext* green = st->green ? st->green : (st->default_stream && c ? c->green : nullptr);
  *phCtx = reinterpret_cast<CUgreenCtx>(green);
  return CUDA_SUCCESS;
}
