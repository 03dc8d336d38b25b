// Online inference (TANDEM_ROLE=inference) under policy `fill`, SpecInF principle II: a
// request runs in a bubble only if the bubble can hold it. At a request's start the process
// waits until the GPU is in a bubble whose predicted end leaves room for the request's learned
// GPU time, at most TANDEM_SLO_MS, and fails open when the daemon stops ticking. Under policy
// `slo` online inference is the protected job and never waits.
#pragma once
#include <cstdint>

#include "tandem/shm_abi.h"

namespace tandem::hook {

// Waits (bounded) until the request that arrived at `arrival_ns` may run.
void admit_request(tandem_client_page* page, const tandem_shm_header* shm, uint64_t arrival_ns) noexcept;

}  // namespace tandem::hook
