// Maps exact driver symbol names to tandem's hooks, for cuGetProcAddress and dlsym.
#pragma once
#include "real_driver.h"

namespace tandem::hook {

struct HookedSymbol {
  const char* name;
  void* hook;  // our exported wrapper for exactly this ABI symbol
  Entry entry;
};

// The hook for `name`, or nullptr when tandem does not hook that symbol.
const HookedSymbol* find_hooked_symbol(const char* name) noexcept;

// Given a pointer the real driver handed out, returns our hook for the same exact symbol
// (learned with dladdr), or `real` itself when that symbol is not hooked.
void* substitute_hook(void* real) noexcept;

}  // namespace tandem::hook
