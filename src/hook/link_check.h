// What the hook checks before it uses anything tandemd sends at registration: the reply's
// type and JSON, and each shared-memory descriptor (a sealed memfd of exactly the layout's
// size: a segment that could shrink would fault the process on its next read). Separate from
// the socket code so that unit tests feed it hostile input directly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tandem/shm_abi.h"

namespace tandem::hook {

// The slot index in a hello_ok payload (msg::HelloOk); -1 (and `why`) when it is not a valid
// one with a slot in [0, TANDEM_MAX_SLOTS).
int hello_slot(const std::string& payload, std::string& role, const char** why) noexcept;

// True when `fd` is a memfd of exactly `bytes`, sealed at least against shrinking and growing.
bool sealed_memfd_of_size(int fd, size_t bytes, const char** why) noexcept;

// True when a mapped segment has this build's layout (magic, version, size, slot count).
bool segment_layout_ok(const tandem_shm_header* shm, const char** why) noexcept;

}  // namespace tandem::hook
