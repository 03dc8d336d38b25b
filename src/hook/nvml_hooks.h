// NVML's memory queries in a process with a quota (nvml_api.def): nvidia-smi, pynvml and
// vLLM then see the quota as the GPU's total, as cuMemGetInfo does. NVML is never loaded by
// tandem: the real functions are the ones the program reached, through the dynamic linker
// (exported wrappers, RTLD_NEXT) or through dlopen + dlsym (the dlsym route).
#pragma once

namespace tandem::hook {

// True for the NVML names tandem hooks (cheap: checks the "nvml" prefix first).
bool is_hooked_nvml_symbol(const char* name) noexcept;

// The dlsym route's answer for `name` looked up in a handle, `real` being what glibc's dlsym
// found there: our hook when `real` is NVML's own function (which is remembered as the real
// one), else nullptr.
void* nvml_hook_for(const char* name, void* real) noexcept;

}  // namespace tandem::hook
