#include "stream_registry.h"

#include <mutex>
#include <new>

#include "green_streams.h"
#include "hooks.h"
#include "real_driver.h"

namespace tandem::hook {

namespace {
std::mutex g_mutex;
CUstream g_streams[kMaxTrackedStreams];
int g_count = 0;
bool g_overflowed = false;  // a stream went untracked: markers cannot cover the process
uint64_t g_destroyed = 0;   // tracked streams destroyed so far
uint64_t g_synced = 0;      // of which a device synchronization has seen the work through
}  // namespace

void note_stream_created(CUstream s, unsigned int flags) noexcept {
  if (!s || !(flags & CU_STREAM_NON_BLOCKING)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_count < kMaxTrackedStreams) g_streams[g_count++] = s;
  else g_overflowed = true;
}

void note_stream_destroyed(CUstream s) noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (int i = 0; i < g_count; ++i)
    if (g_streams[i] == s) {
      g_streams[i] = g_streams[--g_count];
      ++g_destroyed;
      return;
    }
}

bool nonblocking_streams(CUstream* out, int& count) noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_overflowed || g_destroyed != g_synced) return false;
  for (int i = 0; i < g_count; ++i) out[i] = g_streams[i];
  count = g_count;
  return true;
}

uint64_t stream_destructions() noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_destroyed;
}

void stream_registry_synchronized(uint64_t destructions_before) noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (destructions_before > g_synced) g_synced = destructions_before;
}

void stream_registry_after_fork_child() noexcept {
  new (&g_mutex) std::mutex();  // only this thread exists in the child
  g_count = 0;                  // the parent's streams are not the child's
  g_overflowed = false;
  g_destroyed = g_synced = 0;
}

CUresult hook_cuStreamCreate(CUstream* s, unsigned int flags) noexcept {
  CUresult r = g_real.cuStreamCreate(s, flags);
  if (r == CUDA_SUCCESS && s) note_stream_created(*s, flags);
  return r;
}

CUresult hook_cuStreamCreateWithPriority(CUstream* s, unsigned int flags, int priority) noexcept {
  CUresult r = g_real.cuStreamCreateWithPriority(s, flags, priority);
  if (r == CUDA_SUCCESS && s) note_stream_created(*s, flags);
  return r;
}

// A green context's streams must be non-blocking.
CUresult hook_cuGreenCtxStreamCreate(CUstream* s, CUgreenCtx g, unsigned int flags, int priority) noexcept {
  CUresult r = g_real.cuGreenCtxStreamCreate(s, g, flags, priority);
  if (r == CUDA_SUCCESS && s) note_stream_created(*s, flags | CU_STREAM_NON_BLOCKING);
  return r;
}

// Forgotten first: a stream created later may get the same handle.
CUresult hook_cuStreamDestroy_v2(CUstream s) noexcept {
  note_stream_destroyed(s);
  green_stream_destroyed(s);  // and its green streams
  return g_real.cuStreamDestroy_v2(s);
}

// The unversioned symbol: programs built for CUDA 3.x, and cuGetProcAddress asked for a version
// below 4000. Left unhooked, its stream would stay in the table: markers recorded on a dead
// handle (or on a new stream the driver gave the same handle, missing the dead one's queued
// work), and after kMaxTrackedStreams such streams the table full for good.
CUresult hook_cuStreamDestroy(CUstream s) noexcept {
  note_stream_destroyed(s);
  green_stream_destroyed(s);
  return g_real.cuStreamDestroy(s);
}

}  // namespace tandem::hook
