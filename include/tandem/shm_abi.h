/* tandem shared-memory ABI (DESIGN §1, §7). tandemd creates one segment per GPU and hands it
 * to each registered client (a file descriptor over the socket). The hot path lives here:
 * clients publish progress counters and take tokens with atomics; the daemon samples the
 * counters every period, grants tokens and wakes gated clients through the futex word.
 * This layout is an ABI: external monitors may read it. Change TANDEM_SHM_VERSION with it.
 * All multi-byte fields are naturally aligned; every slot is 256 bytes. */
#ifndef TANDEM_SHM_ABI_H
#define TANDEM_SHM_ABI_H

#include <stdint.h>

#define TANDEM_SHM_MAGIC 0x4d444e54u /* "TNDM" */
#define TANDEM_SHM_VERSION 2u
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

/* Gate modes, set by the daemon. */
#define TANDEM_GATE_OPEN 0u   /* launches pass: not gated, or failed open */
#define TANDEM_GATE_TOKENS 1u /* launches take tokens; wait on `wake` when there are none */

struct tandem_slot {
  /* --- written by the daemon --- */
  uint32_t state;      /* TANDEM_SLOT_* */
  int32_t pid;         /* the client, from SO_PEERCRED */
  uint32_t role;       /* TANDEM_ROLE_* */
  uint32_t generation; /* bumped each time the slot is given to a new client */
  uint32_t gate;       /* TANDEM_GATE_* */
  uint32_t wake;       /* futex word: the daemon increments it and wakes waiters */
  int64_t tokens;      /* GPU time the client may still launch, in ns of estimated work */
  uint64_t granted_ns; /* total tokens ever granted */
  uint64_t assigned_quota_bytes; /* device-memory quota set through the daemon (0: none); overrides TANDEM_MEM_LIMIT */
  uint64_t inflight_bound_ns; /* policy slo: a gated launch waits while issued_ns - completed_ns >= this (0: no bound) */

  /* --- written by the client --- */
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
  /* online inference (role inference): */
  uint32_t requests_open;     /* requests begun and not yet ended */
  uint32_t slo_us;            /* the latency target (TANDEM_SLO_MS), in us */
  uint64_t request_activity_ns; /* CLOCK_MONOTONIC of the last request begin or end */
  uint64_t latency_ns;        /* TANDEM_SLO_PCTL-th percentile latency of the requests ended in control interval latency_seq */
  uint32_t latency_seq;       /* the header's control_seq that latency_ns belongs to */
  uint32_t latency_samples;   /* requests it was computed from */
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
  uint32_t request_seq;         /* futex word, written by clients: incremented (and woken) when a request ends */
  uint32_t training_duty_ppm;   /* slo policy: training's duty cycle, parts per million */
  uint8_t reserved[32];
  struct tandem_slot slots[TANDEM_MAX_SLOTS];
};

#ifdef __cplusplus
static_assert(sizeof(struct tandem_slot) == 256, "tandem_slot is 256 bytes");
static_assert(sizeof(struct tandem_shm_header) == 128 + 256 * TANDEM_MAX_SLOTS, "header layout");
#endif

#endif /* TANDEM_SHM_ABI_H */
