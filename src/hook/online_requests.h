// The requests of an online inference process (TANDEM_ROLE=inference): when one is open (the
// slot's requests_open, which holds best-effort work back under policy `slo`), how long each
// took, and the TANDEM_SLO_PCTL-th percentile of those latencies per control interval of the
// daemon, published in the slot for its controller.
//
// Two ways to see a request:
//   transparent  the launches between two host synchronizations (cuStreamSynchronize,
//                cuCtxSynchronize, cuEventSynchronize): begins at the first launch after a
//                synchronization, ends when the next one returns. Latency is measured from
//                that first launch, so time a request spent queued in the server before its
//                first launch is not seen. A process that synchronizes inside a request, or
//                interleaves requests from several threads, is seen as shorter or merged
//                requests.
//   explicit     tandem_request_begin/end (include/tandem/client.h): exact, from the arrival
//                time the server gives, any number of requests open at once. The first call
//                switches the process to explicit mode for good.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>

namespace tandem::hook {

// The most thread blocks one kernel launched since the last request ended had: published as
// the page's request_blocks when a request ends (tandemd leaves a kernel that narrow the SMs
// it spreads over when it partitions training, slo_policy.h).
extern std::atomic<uint32_t> g_request_blocks;
// Launch path of an inference process, after a kernel launch of `blocks` thread blocks (graph
// replays are not seen: their kernels' grids are not read on the launch path). Hot path: a
// load, and a store only when wider.
inline void note_request_blocks(uint64_t blocks) noexcept {
  uint32_t b = blocks > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(blocks);
  if (b > g_request_blocks.load(std::memory_order_relaxed)) g_request_blocks.store(b, std::memory_order_relaxed);
}

// Launch path of an inference process: a launch after a synchronization begins a request.
void request_launch() noexcept;
// A host synchronization returned: the open transparent request has ended.
void request_synchronized() noexcept;

// The client API. begin returns the request's start (arrival_ns, or now when 0).
uint64_t explicit_request_begin(uint64_t arrival_ns) noexcept;
void explicit_request_end(uint64_t begin_ns) noexcept;

// Progress thread, every tick: publishes the current interval's percentile in the slot.
void publish_request_latency() noexcept;
// Fork, in the child: no request of the parent's is open here, none measured; the samples'
// lock fresh (a parent's thread may have been ending a request at the fork).
void online_requests_after_fork_child() noexcept;
// The samples' lock, for the unit test of the above (held, it must come back free).
std::mutex& request_samples_mutex_for_test() noexcept;

}  // namespace tandem::hook
