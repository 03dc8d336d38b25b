// Which GPUs tandemd keeps state for (docs/security.md, "GPUs that exist"). tandemd never asks
// the driver (it has no CUDA context), so a GPU is whatever UUID a hello names, and each one
// costs a GPU state (segment, scheduler, trace) out of DaemonLimits::gpus and is reported to
// tandem-device-plugin, which offers slots on it. A user let in only as a filler once named 64
// made-up GPUs: the table was full, a real training process was refused and ran ungated, and
// the plugin offered slots on GPUs that do not exist.
//
// A GPU named by a client the access policy trusts with a protected role (it could register as
// training or inference) is *verified*: that principal may already hold others back, so its
// word that the GPU exists is taken, and the GPU stays verified while its state lasts. A GPU
// named only by other clients (batch-inference) is *unverified*, and bounded:
//   * per user: clients of one uid may be on at most `unverified_gpus_per_uid` unverified GPUs
//     (EDQUOT past it; libtandem retries every second, and a GPU that training then names is
//     verified and no longer counts);
//   * together: at most half the table (ENOSPC past it, after giving the place of an
//     unverified GPU no client refers to). The other half is only ever taken by verified GPUs,
//     so a protected client is refused a GPU state only when protected clients themselves hold
//     half the table (32 GPUs, more than a node has). Evicting unverified GPUs that still have
//     clients was not chosen: it would take the slots of fillers running on a real GPU.
// At the cap, a newcomer takes the place of a GPU no client refers to (only pool chunks keep
// it): an unverified one first; a protected newcomer may also take a verified one's, an
// unverified newcomer never (those chunks are on a real GPU).
// Pure logic: the server describes its table, the decision says what to do.
#pragma once
#include <sys/types.h>

#include <map>
#include <set>
#include <string>

#include "daemon_limits.h"

namespace tandem::scheduler {

// One GPU state the daemon holds, as the decision needs it.
struct GpuTableEntry {
  bool verified = false;
  std::set<uid_t> users;  // uids of the clients registered on it; empty: only pool chunks keep it
};

struct GpuAdmission {
  bool admit = false;   // the hello may have the GPU's state (the existing one, or a new one)
  bool verify = false;  // the GPU becomes verified (new, or until now unverified)
  std::string evict;    // a GPU whose state gives its place to the new one first; "" none
  int error = 0;        // not admitted: the errno to answer with
  std::string why;      // and the message
};

// May a client of `uid` (`protected_client`: trusted with a protected role) have the state of
// GPU `uuid`, given the daemon's table?
GpuAdmission decide_gpu_admission(const std::map<std::string, GpuTableEntry>& table,
                                  const std::string& uuid, uid_t uid, bool protected_client,
                                  const DaemonLimits& limits);

}  // namespace tandem::scheduler
