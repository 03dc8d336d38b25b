// What one client may make tandemd do or hold, in one place (docs/security.md). tandemd serves
// the processes of several users on a shared node: none of them may stall the GPUs' ticks
// (every gated process would fail open), exhaust the daemon's memory or descriptors, or crash
// it. Past a limit the request is refused with an error reply, or the client is dropped; all
// a client made the daemon hold is freed when it disconnects.
#pragma once
#include <cstddef>
#include <cstdint>

#include "protocol.h"

namespace tandem::scheduler::limits {

// Connections: all clients together, and per uid (root is exempt from the per-uid cap). A
// connection past a cap is answered with an error (EUSERS) and closed at once.
constexpr size_t kMaxConnections = 1024;
constexpr size_t kMaxConnectionsPerUid = 256;

// Work per client per loop turn: at most this many messages handled and bytes read; the rest
// waits for the next turn (the tick comes first), so one pipelining client cannot delay it.
constexpr size_t kMaxMessagesPerTurn = 16;
constexpr size_t kMaxReadBytesPerTurn = 128 * 1024;
// Input not yet handled, per client: beyond it the daemon stops reading the socket, and the
// kernel's socket buffer pushes back on the sender. Two whole messages of the largest size.
constexpr size_t kMaxInputBuffered = 2 * (sizeof(MessageHeader) + kMaxPayload);
// New connections accepted per loop turn.
constexpr size_t kMaxAcceptsPerTurn = 32;

// Replies queued and not yet read: per client (a single larger reply, a trace, may be queued
// alone) and for all clients together. A client that would pass either is dropped.
constexpr size_t kMaxQueuedReplyBytes = 1024 * 1024;
constexpr size_t kMaxQueuedReplyBytesTotal = 256 * 1024 * 1024;

// Descriptors (SCM_RIGHTS) received and not yet taken by a pool_register: past it, dropped.
constexpr size_t kMaxPassedFds = 16;
// Pool chunks (each a descriptor the daemon keeps): registered per connection, and in all.
constexpr size_t kMaxChunksPerClient = 16384;
constexpr size_t kMaxPoolChunks = 65536;

// Per-GPU state (shared memory, scheduler, trace). Created at a hello naming the GPU, freed
// when no client refers to it and no pool chunk is on it. At the cap, a new GPU takes the
// place of one that no client refers to (its pool chunks are given up); if none, ENOSPC.
constexpr size_t kMaxGpus = 64;
// tandemd cannot ask the driver which GPUs exist, so a GPU is whatever a hello names. A GPU
// named only by clients not trusted with a protected role is *unverified* (gpu_admission.h):
// each user may have clients on at most this many (EDQUOT past it), and all unverified GPUs
// together take at most half of the GPU states, so that the other half is always there for
// GPUs a training or inference process names.
constexpr size_t kMaxUnverifiedGpusPerUid = 2;

// A node-local training job (job_hold.h): its name in a hello, and its ranks. A job is held
// only while exactly that many of its user's ranks are registered, so one more cannot hold it.
constexpr size_t kMaxJobName = 256;
constexpr uint64_t kMaxJobRanks = 1024;

// Departed processes whose last figures tandemd keeps for the status (departed.h): the most
// recent, so that the memory they take is fixed however many processes come and go.
constexpr size_t kMaxDeparted = 64;

// A message a client started must be finished within this long, else it is dropped.
constexpr uint64_t kMessageTimeoutNs = 2000000000ull;
// accept() failed for lack of descriptors and the reserve could not shed the connection:
// the listening socket is left out of the poll set for this long (instead of spinning).
constexpr uint64_t kAcceptPauseNs = 100000000ull;

}  // namespace tandem::scheduler::limits

namespace tandem::scheduler {

// The caps a daemon runs with: the constants above, lowered by tests to reach them cheaply.
struct DaemonLimits {
  size_t connections = limits::kMaxConnections;
  size_t connections_per_uid = limits::kMaxConnectionsPerUid;
  size_t queued_reply_bytes = limits::kMaxQueuedReplyBytes;
  size_t queued_reply_bytes_total = limits::kMaxQueuedReplyBytesTotal;
  size_t chunks_per_client = limits::kMaxChunksPerClient;
  size_t pool_chunks = limits::kMaxPoolChunks;
  size_t gpus = limits::kMaxGpus;
  size_t unverified_gpus_per_uid = limits::kMaxUnverifiedGpusPerUid;
  size_t departed = limits::kMaxDeparted;
};

}  // namespace tandem::scheduler
