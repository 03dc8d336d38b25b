// The registry of ProcessMutex (sim.h): plain storage, constant-initialized, so that mutexes
// constructed during static initialization in any order register safely, and function-local
// ones later from any thread.
#include <new>

#include "sim.h"

namespace simgpu {

namespace {
constexpr int kMaxMutexes = 64;
ProcessMutex* g_mutexes[kMaxMutexes];
std::atomic<int> g_count{0};
}  // namespace

ProcessMutex::ProcessMutex() noexcept {
  int i = g_count.fetch_add(1);
  if (i < kMaxMutexes) __atomic_store_n(&g_mutexes[i], this, __ATOMIC_RELEASE);
  else log(1, "more than %d process-wide mutexes: a forked child may hang on one", kMaxMutexes);
}

// A child that inherits a critical section cut in the middle may see its state half changed;
// the sections are short, where the hang would be certain.
void unlock_process_mutexes_in_child() {
  int n = g_count.load() < kMaxMutexes ? g_count.load() : kMaxMutexes;
  for (int i = 0; i < n; ++i)
    if (ProcessMutex* m = __atomic_load_n(&g_mutexes[i], __ATOMIC_ACQUIRE)) new (m) std::mutex();
}

}  // namespace simgpu
