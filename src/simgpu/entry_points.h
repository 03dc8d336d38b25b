/* The table of the simulated driver's entry points (built in entry_points.c from
 * entry_points.def, read by cuGetProcAddress in proc_address.cpp): one row per exported ABI
 * symbol, with the API name, the CUDA version and per-thread flavour it answers. C and C++. */
#ifndef SIMGPU_ENTRY_POINTS_H
#define SIMGPU_ENTRY_POINTS_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct SimEntryPoint {
  const char* api;
  int version;
  int per_thread;
  const char* symbol;
  void* fn;
};
extern const struct SimEntryPoint simgpu_entry_points[];
extern const size_t simgpu_entry_point_count;

#ifdef __cplusplus
}
#endif

#endif /* SIMGPU_ENTRY_POINTS_H */
