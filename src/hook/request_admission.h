// Online inference (TANDEM_ROLE=inference) under the fill policy, SpecInF principle II: a
// request runs in a bubble only if the bubble can hold it. A request is seen transparently as
// the launches between two host synchronizations; its GPU time is learned. At a request's
// first launch the process waits until the GPU is in a bubble whose predicted end leaves room
// for the request, at most TANDEM_SLO_MS, and fails open when the daemon stops ticking.
// Limits: a process that synchronizes inside a request, or interleaves requests from several
// threads, is seen as shorter or merged requests.
#pragma once

namespace tandem::hook {

// Launch path of an inference process: admits a new request (may wait, bounded).
void request_launch() noexcept;
// A host synchronization returned: the open request, if any, has ended.
void request_synchronized() noexcept;

}  // namespace tandem::hook
