/* The simulated driver's entry points, from the one list in entry_points.def.
 * Every ABI symbol of cuda.h is exported: the implemented ones are defined (strongly) in the
 * C++ files; for the rest the weak definition here answers CUDA_ERROR_NOT_SUPPORTED and says
 * so once. A C file without cuda.h, so that one stub signature fits every symbol (the x86-64
 * and aarch64 calling conventions let a caller pass arguments a callee ignores). */
#include "entry_points.h"

int simgpu_not_supported(const char* symbol); /* settings.cpp: logs once, returns 801 */

#define SIM_ENTRY(api, version, per_thread, symbol)
#define SIM_SYMBOL(symbol)                                                        \
  __attribute__((weak, visibility("default"))) int symbol(void) {                \
    return simgpu_not_supported(#symbol);                                         \
  }
#include "entry_points.def"
#undef SIM_SYMBOL
#undef SIM_ENTRY

#define SIM_SYMBOL(symbol)
#define SIM_ENTRY(api, version, per_thread, symbol) {#api, version, per_thread, #symbol, (void*)&symbol},
const struct SimEntryPoint simgpu_entry_points[] = {
#include "entry_points.def"
};
#undef SIM_SYMBOL
#undef SIM_ENTRY
const size_t simgpu_entry_point_count = sizeof simgpu_entry_points / sizeof simgpu_entry_points[0];
