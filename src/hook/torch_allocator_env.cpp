// PyTorch's allocator on tandem's pool (TANDEM_MEM_TORCH_BACKEND, docs/memory.md). PyTorch's
// caching allocator keeps every segment it reserved, so its memory never becomes idle in the
// pool and tandemd cannot move it. Its stream-ordered backend frees each tensor with
// cuMemFreeAsync, which the pool serves: memory no live tensor uses is idle there, and goes
// back when tandemd asks (mempool_hooks.cpp keeps PyTorch's figures and empty_cache right).
// PyTorch chooses its backend when its library loads, before any driver call, so this runs as
// libtandem loads (settings are read later, at the first driver call: the variables are
// looked at directly here, with the same meaning). A user's own allocator setting stands.
#include <sys/auxv.h>

#include <cstdlib>
#include <cstring>

namespace tandem::hook {

namespace {

bool is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

bool set(const char* name) {
  const char* v = std::getenv(name);
  return v && v[0];
}

__attribute__((constructor)) void choose_torch_allocator() {
  if (getauxval(AT_SECURE)) return;  // settings are ignored there (process.cpp)
  if (is("TANDEM_DISABLE", "1") || !is("TANDEM_MEM_POOL", "1")) return;
  if (!is("TANDEM_MEM_TORCH_BACKEND", "async")) return;  // opt-in: vLLM's sleep mode needs its own
  if (set("PYTORCH_CUDA_ALLOC_CONF") || set("PYTORCH_ALLOC_CONF")) return;
  setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 0);
}

}  // namespace

}  // namespace tandem::hook
