// The live partitions a training process prepared (green_partitions.cpp), for the switching in
// green_streams.cpp and the page the progress thread publishes.
#pragma once
#include <cstdint>

#include "cuda_abi.h"

namespace tandem::hook {

struct Partition {
  uint8_t pct = 0;       // percent of the GPU's SMs
  unsigned level = 0;    // its index in TANDEM_LIVE_LEVELS
  unsigned sms = 0;      // what the green context holds
  CUgreenCtx ctx = nullptr;
};

// How many are ready (0 until prepared, or when refused).
int green_partition_count() noexcept;
// The partition to use when tandemd allows `pct` percent of the SMs: the largest not above it,
// -1 when none is.
int green_partition_for(uint32_t pct) noexcept;
const Partition& green_partition(int index) noexcept;
// The page's training_flags of live partitioning: TANDEM_TRAINING_MPS when the context is an
// MPS client, TANDEM_TRAINING_LIVE(i) for each level prepared (known once prepared).
uint32_t green_training_flags() noexcept;
void green_partitions_after_fork_child() noexcept;

}  // namespace tandem::hook
