// Training's part of the GPU under MPS (policy slo, GPUColo's outer loop / HARLI's SM split):
// a training process asks MPS for a share of the SMs before the driver starts, and reports
// the SMs its context got, so that tandemd knows training and inference run side by side.
#pragma once
#include "tandem/shm_abi.h"

namespace tandem::hook {

// At bootstrap, before the first call reaches the driver: a training process with
// TANDEM_SLO_TRAINING_SMS > 0 sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (unless the operator
// already did), which MPS applies to every context the process creates. Returns the
// percentage set (0: none).
int ask_mps_sm_share() noexcept;

// At bootstrap, likewise: a training or batch-inference process with TANDEM_MPS_PRIORITY=1 sets
// CUDA_MPS_CLIENT_PRIORITY=1 (below normal; unless the operator set it), so that MPS places an
// online request's blocks before theirs (inference first, as SIRIUS and SpecInF order the
// roles). Returns whether it set it.
bool ask_mps_priority() noexcept;

// On the progress thread, the application's context current: the context's SMs (its MPS
// execution affinity) and the device's, into the page. Queried once, published every call.
void publish_sm_share(tandem_client_page* page) noexcept;

}  // namespace tandem::hook
