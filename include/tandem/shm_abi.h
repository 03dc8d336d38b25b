/* tandem shared-memory ABI (DESIGN §1, §7). Two kinds of segment, both memfds passed over the
 * socket at registration (hello_ok carries two descriptors, in this order):
 *  1. the GPU's segment, one per GPU: `struct tandem_shm_header` with one `struct tandem_slot`
 *     per client. Only tandemd writes it. It is sealed against shrink, grow and any new
 *     writable mapping (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL):
 *     clients map it read-only, and a read-only mapping still serves FUTEX_WAIT on its words.
 *  2. the client's page, one per registered client: `struct tandem_client_page`, the only
 *     memory that client writes. Given to that client alone and mapped by tandemd too; sealed
 *     against shrink and grow (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), so a truncation
 *     can never fault the daemon. tandemd treats every value in it as untrusted: counters that
 *     go backwards or jump implausibly are held, values out of range are clamped.
 * The hot path lives here: clients publish progress counters with atomics and take tokens by
 * counting what they spent against the daemon's limit; the daemon samples the pages every
 * period, raises limits and wakes gated clients through futex words in its segment.
 * This layout is an ABI: external monitors may read it. Change TANDEM_SHM_VERSION with it.
 * All multi-byte fields are naturally aligned; slots are 128 bytes, client pages 320. */
#ifndef TANDEM_SHM_ABI_H
#define TANDEM_SHM_ABI_H

#include <stdint.h>

#define TANDEM_SHM_MAGIC 0x4d444e54u /* "TNDM" */
#define TANDEM_SHM_VERSION 4u
#define TANDEM_MAX_SLOTS 64u

/* Slot states. */
#define TANDEM_SLOT_FREE 0u
#define TANDEM_SLOT_ACTIVE 1u

/* Roles (TANDEM_ROLE). */
#define TANDEM_ROLE_NONE 0u
#define TANDEM_ROLE_TRAINING 1u
#define TANDEM_ROLE_INFERENCE 2u
#define TANDEM_ROLE_BATCH_INFERENCE 3u

/* What the daemon sees on the GPU (header.gpu_phase). */
#define TANDEM_GPU_BUSY 0u        /* training computes */
#define TANDEM_GPU_BUBBLE 1u      /* training left the GPU idle */
#define TANDEM_GPU_NO_TRAINING 2u /* nothing to protect */

/* Scheduling policies (header.policy, `tandemd --policy`). */
#define TANDEM_POLICY_FILL 0u /* training protected, fillers use its bubbles */
#define TANDEM_POLICY_SLO 1u  /* online inference protected to its latency target, training best-effort */

/* tandem_client_page.training_flags */
#define TANDEM_TRAINING_COLLECTIVES_HELD 1u /* every rank of its job is on this node (TANDEM_JOB_LOCAL): its
                                               collectives are held (with its peers', by tandemd, when it is one of several processes) */
#define TANDEM_TRAINING_MPS 2u /* its context is an MPS client (CU_DEVICE_ATTRIBUTE_MPS_ENABLED): processes run side by side */
/* Live SM partitions (policy slo under MPS, docs/slo.md): the levels a training process may hold
   as green contexts, in percent of the GPU's SMs (rounded down to the GPU's granularity), and the
   training_flags bit that says it holds level i, ready for tandem_slot.live_partition. */
#define TANDEM_LIVE_PARTITIONS 4u
#define TANDEM_LIVE_LEVELS {25, 50, 70, 85}
#define TANDEM_TRAINING_LIVE(i) (1u << (8u + (i)))
#define TANDEM_TRAINING_LIVE_MASK (0xfu << 8u)

/* Gate modes, set by the daemon. */
#define TANDEM_GATE_OPEN 0u   /* launches pass: not gated, or failed open */
#define TANDEM_GATE_TOKENS 1u /* launches take tokens; wait on `wake` when there are none */

/* One client's part of the GPU's segment. Written by the daemon only. */
struct tandem_slot {
  uint32_t state;      /* TANDEM_SLOT_* */
  int32_t pid;         /* the client, from SO_PEERCRED */
  uint32_t role;       /* TANDEM_ROLE_* */
  uint32_t generation; /* bumped each time the slot is given to a new client */
  uint32_t gate;       /* TANDEM_GATE_* */
  uint32_t wake;       /* futex word: the daemon increments it and wakes waiters */
  uint64_t token_limit_ns; /* the client may launch while its page's tokens_taken_ns is below this
                              (balance = (int64_t)(token_limit_ns - tokens_taken_ns)); grants raise
                              it, a revocation sets it to what the client has taken */
  uint64_t granted_ns; /* total tokens ever granted */
  uint64_t assigned_quota_bytes; /* device-memory quota set through the daemon (0: none); overrides TANDEM_MEM_LIMIT */
  uint64_t inflight_bound_ns; /* policy slo: a gated launch waits while issued_ns - completed_ns >= this (0: no bound) */
  /* What the daemon last read from the client's page (bounded), for the other clients: */
  uint32_t requests_open;       /* online inference: requests begun and not yet ended that hold
                                   best-effort work now (0 when they are stuck, or past the
                                   best-effort job's floor: docs/security.md) */
  uint32_t slo_us;              /* online inference: its latency target */
  uint64_t request_activity_ns; /* CLOCK_MONOTONIC of its last request begin or end */
  uint32_t memory_wake; /* futex word: the daemon increments it (and wakes the client's progress
                           thread) when it changed assigned_quota_bytes, so that a process asked to
                           give memory back answers at once, not at its next tick */
  uint32_t zico_permits; /* Zico: iteration starts allowed so far (the client counts those it used) */
  /* Zico (tandemd with TANDEM_ZICO=1, training only; docs/zico.md): an allocation made while the
     process's bytes in use are at most zico_trough_bytes starts an iteration and waits until
     zico_permits passes the page's zico_starts (0: no such wait). Zero in an older daemon. */
  uint64_t zico_trough_bytes;
  /* A training rank of a job whose ranks are processes of this node (TANDEM_JOB_LOCAL with
     torchrun's WORLD_SIZE = LOCAL_WORLD_SIZE; docs/slo.md): it may launch its n-th NCCL kernel
     (n = 1, 2, ...) only while n < collectives_allowed; 0: no limit. tandemd gives every rank
     of the job the same value, so no rank waits inside a collective for a peer held here. */
  uint64_t collectives_allowed;
  /* Policy slo, live SM partitioning (docs/slo.md): while nonzero, this training process's
     launches go to its green-context streams holding this percentage of the GPU's SMs (one of
     the TANDEM_LIVE_LEVELS its page's training_flags say it holds); 0: to its own streams, on
     every SM. tandemd sets it only while
     an online request runs. Added in the reserved bytes (zero in an older daemon), layout
     version unchanged. */
  uint32_t live_partition;
  /* Whether another client's GPU work ran beside this client's (docs/scheduler.md, "What a
     launch costs"): others_busy_ticks counts the daemon's periods in which another client of the GPU
     had work launched and not yet complete, or launched or completed some during the period;
     others_busy is 1 when the last period was one. A kernel this client timed across such a
     period shared the GPU, and its time is longer than its cost. Added in the reserved bytes
     (zero in an older daemon: every timing taken as made alone), layout version unchanged. */
  uint32_t others_busy_ticks;
  uint32_t others_busy;
  /* Zico (docs/zico.md): 1 while tandemd time-shifts this training process against another
     training job of the GPU, whether or not its curve is learned (a job whose profiling ran out
     of time publishes no trough, but what it frees must still reach the other job). Its pool
     then gives its idle chunks back at every tick. Added in the reserved bytes (zero in an older
     daemon: only a published trough says so), layout version unchanged. */
  uint32_t zico_shared;
  uint8_t reserved[16];
};

/* What one client writes: its own page, separate from the GPU's segment. */
struct tandem_client_page {
  uint64_t launches;          /* compute kernels launched (graph nodes included) */
  uint64_t nccl_launches;     /* NCCL kernels launched */
  uint64_t issued_ns;         /* estimated GPU time of everything launched */
  uint64_t markers_recorded;  /* completion markers put on streams */
  uint64_t markers_completed; /* markers the GPU has passed */
  uint64_t completed_ns;      /* estimated GPU time of the work before the last completed marker */
  uint64_t last_launch_ns;    /* CLOCK_MONOTONIC of the last launch (coarse) */
  uint64_t last_completion_ns; /* CLOCK_MONOTONIC when the last marker was seen complete */
  uint64_t gate_waits;        /* launches that had to wait for tokens */
  uint64_t gate_wait_ns;      /* total time waited */
  uint64_t heartbeat_ns;      /* the client's progress thread, every period */
  uint64_t requests;          /* online inference: requests seen (launches between host syncs) */
  uint64_t request_ns;        /* online inference: learned GPU time of one request */
  uint64_t admission_waits;   /* requests that waited for a bubble */
  uint64_t admission_wait_ns; /* time they waited */
  uint64_t peak_bytes;        /* the process's peak device memory (admission principle I) */
  uint64_t bytes_in_use;      /* device memory the process holds now */
  uint64_t quota_bytes;       /* the quota in force (0: none) */
  uint64_t quota_refusals;    /* allocations refused for exceeding it */
  uint64_t nccl_markers_recorded;  /* markers put behind NCCL kernels (training's collectives) */
  uint64_t nccl_markers_completed; /* those the GPU has passed: recorded > completed = communicating */
  uint64_t tokens_taken_ns;   /* tokens spent so far (see tandem_slot.token_limit_ns) */
  /* online inference (role inference): */
  uint32_t requests_open;     /* requests begun and not yet ended */
  uint32_t slo_us;            /* the latency target (TANDEM_SLO_MS), in us */
  uint64_t request_activity_ns; /* CLOCK_MONOTONIC of the last request begin or end */
  uint64_t latency_ns;        /* TANDEM_SLO_PCTL-th percentile latency of the requests ended in control interval latency_seq */
  uint32_t latency_seq;       /* the header's control_seq that latency_ns belongs to */
  uint32_t latency_samples;   /* requests it was computed from */
  uint32_t progress_wake;     /* futex word of the client's own threads: its progress thread wakes
                                 its gate when completions free room in the in-flight bound */
  uint32_t gate_want_us;      /* a launch waiting at the gate for tokens: its estimated GPU time in us
                                 (0: none waits); tandemd grants a launch too long for the filler's
                                 in-flight share whole, when the bubble can hold it */
  uint32_t sm_count;          /* SMs its context may use (MPS execution affinity); 0: not reported */
  uint32_t device_sms;        /* SMs of its GPU; sm_count < device_sms: spatially limited */
  uint32_t training_flags;    /* TANDEM_TRAINING_* */
  /* Zico (see tandem_slot.zico_trough_bytes): */
  uint32_t zico_starts;  /* iteration starts this process made under a permit (or failing open) */
  uint64_t zico_wait_ns; /* total time waited at iteration boundaries */
  uint32_t zico_waiting; /* 1 while an allocation waits at an iteration boundary for a permit */
  /* A training rank of a node-local job (see tandem_slot.collectives_allowed): */
  uint32_t collective_waiting;   /* n while its n-th NCCL kernel waits for collectives_allowed, else 0 */
  uint64_t collectives_launched; /* NCCL kernels launched directly since the process started */
  /* online inference (role inference), added in layout 4: */
  uint32_t request_blocks; /* the most thread blocks one kernel of its last request had (its width:
                              at one block per SM, the SMs it spreads over); 0: none seen (only
                              graph replays, or no request yet) */
  uint32_t inflight_fail_opens; /* gated launches let through because no completion marker could
                                   cover the work counted in flight (its estimate could not fall) */
  /* the memory pool (added in the reserved bytes: zero in an older client, which tandemd then
     treats as before, cutting its quota down to what it holds): */
  uint64_t working_set_bytes; /* the most bytes of pooled blocks live at once over the last 2-4 s:
                                 what its steps use; tandemd takes no more of its memory than it
                                 holds beyond this, unless memory_elastic */
  uint32_t memory_elastic;    /* 1: it registered a memory-pressure callback (it frees on request),
                                 so its quota may be cut below its working set */
  uint32_t reserved_align;
  /* Of nccl_markers_recorded/completed, those behind point-to-point kernels only (NCCL's
     SendRecv: a pipeline stage's receive waiting for its peer), no collective since the NCCL
     marker before. tandemd treats a bubble in which only these are pending as an ordinary one,
     whatever TANDEM_FILL_COMM says. Added in the reserved bytes (zero in an older client: every
     NCCL marker a collective's, as before), layout version unchanged. */
  uint64_t p2p_markers_recorded;
  uint64_t p2p_markers_completed;
  uint8_t reserved[24];
};

struct tandem_shm_header {
  uint32_t magic;      /* TANDEM_SHM_MAGIC */
  uint32_t version;    /* TANDEM_SHM_VERSION */
  uint32_t size;       /* bytes of the whole segment */
  uint32_t slot_count; /* TANDEM_MAX_SLOTS */
  uint8_t gpu_uuid[16];
  uint64_t daemon_heartbeat_ns; /* CLOCK_MONOTONIC of the daemon's last tick: clients fail open when stale */
  uint64_t sample_us;           /* the daemon's sampling period */
  uint32_t gpu_phase;           /* TANDEM_GPU_* */
  uint32_t bubble_seq;          /* futex word: incremented (and woken) when a bubble starts */
  uint64_t predicted_bubble_end_ns; /* learned end of the current bubble (0: unknown or busy) */
  uint64_t gpu_total_bytes;     /* the GPU's memory, as its first client reported it */
  uint32_t policy;              /* TANDEM_POLICY_* */
  uint32_t control_seq;         /* slo policy: control intervals begun; clients measure latency per interval */
  uint64_t inference_slots;     /* bit i: slot i is an active online-inference client */
  uint32_t request_seq;         /* futex word: incremented (and woken) by the daemon when it sees an
                                   online request end (a slot's requests_open fall) */
  uint32_t training_duty_ppm;   /* slo policy: training's duty cycle, parts per million */
  uint32_t requests_unheld;     /* 1 while gated launches need not wait for open online requests. slo
                                   policy: a busy server, requests back to back (holding would leave
                                   training less than its duty cycle); they are still bounded by their
                                   tokens and in-flight window. fill policy: requests may not hold
                                   training now (TANDEM_FILL_ONLINE_HOLD spent or 0), so a request
                                   waits for a bubble; 0: it runs at once and holds training.
                                   0 (and in an older daemon): they wait. */
  uint8_t reserved[28];
  struct tandem_slot slots[TANDEM_MAX_SLOTS];
};

#ifdef __cplusplus
static_assert(sizeof(struct tandem_slot) == 128, "tandem_slot is 128 bytes");
static_assert(sizeof(struct tandem_client_page) == 320, "tandem_client_page is 320 bytes");
static_assert(sizeof(struct tandem_shm_header) == 128 + 128 * TANDEM_MAX_SLOTS, "header layout");
static_assert(__builtin_offsetof(struct tandem_shm_header, slots) == 128, "slots follow a 128-byte header");
#endif

#endif /* TANDEM_SHM_ABI_H */
