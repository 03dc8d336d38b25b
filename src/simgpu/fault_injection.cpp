// SIMGPU_FAIL=<api>:<nth>[,<api>:<nth>...]: the nth call (1-based) of an API fails, so that
// tests can exercise a program's error paths. Counting is per process and covers every ABI
// variant of the API (cuMemAlloc_v2, cuLaunchKernel_ptsz, ...).
#include <cstring>
#include <map>

#include "sim.h"

namespace simgpu {
namespace {

struct Rule {
  long nth = 0;
  long calls = 0;
};

ProcessMutex g_mutex;

std::map<std::string, Rule>* parse(const std::string& spec) {
  auto* rules = new std::map<std::string, Rule>;  // never destroyed: entry points may run at exit
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t colon = item.find(':');
    long nth = colon == std::string::npos ? 0 : std::atol(item.c_str() + colon + 1);
    if (nth > 0) (*rules)[item.substr(0, colon)].nth = nth;
    else if (!item.empty()) log(1, "SIMGPU_FAIL item '%s' ignored (want <api>:<nth>, nth >= 1)", item.c_str());
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return rules;
}

std::string base_name(const char* api) {
  std::string n = api;
  for (const char* suffix : {"_ptsz", "_ptds", "_v2", "_v3", "_v4"}) {
    size_t len = std::strlen(suffix);
    if (n.size() > len && n.compare(n.size() - len, len, suffix) == 0) n.resize(n.size() - len);
  }
  return n;
}

}  // namespace

bool should_fail(const char* api) {
  const std::string& spec = settings().fail_spec;
  if (spec.empty()) return false;  // the common case: no string work, no lock
  static std::map<std::string, Rule>* rules = parse(spec);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = rules->find(base_name(api));
  if (it == rules->end()) return false;
  if (++it->second.calls != it->second.nth) return false;
  log(1, "SIMGPU_FAIL: failing call %ld of %s", it->second.nth, it->first.c_str());
  return true;
}

CUresult injected_error(const char* api) {
  if (std::strstr(api, "Alloc") || std::strstr(api, "MemCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
  if (std::strstr(api, "Launch")) return CUDA_ERROR_LAUNCH_FAILED;
  return CUDA_ERROR_UNKNOWN;
}

}  // namespace simgpu
