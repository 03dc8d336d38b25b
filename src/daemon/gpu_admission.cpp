#include "gpu_admission.h"

#include <algorithm>
#include <cerrno>

namespace tandem::scheduler {

namespace {

// The GPU whose place a newcomer takes at a cap: one no client refers to, unverified first;
// a verified one only when `verified_too`. "" when none may go.
std::string idle_gpu(const std::map<std::string, GpuTableEntry>& table, bool verified_too) {
  std::string verified_idle;
  for (const auto& [uuid, e] : table) {
    if (!e.users.empty()) continue;
    if (!e.verified) return uuid;
    if (verified_too && verified_idle.empty()) verified_idle = uuid;
  }
  return verified_idle;
}

GpuAdmission refused(int error, std::string why) {
  GpuAdmission a;
  a.error = error;
  a.why = std::move(why);
  return a;
}

}  // namespace

GpuAdmission decide_gpu_admission(const std::map<std::string, GpuTableEntry>& table,
                                  const std::string& uuid, uid_t uid, bool protected_client,
                                  const DaemonLimits& limits) {
  GpuAdmission a;
  auto known = table.find(uuid);
  // A protected client's word makes the GPU verified, whether it is new or was not yet.
  a.verify = protected_client && (known == table.end() || !known->second.verified);
  if (known != table.end() &&
      (protected_client || known->second.verified || known->second.users.count(uid))) {
    a.admit = true;  // no new state, and nothing new counted against this user
    return a;
  }
  if (!protected_client) {
    // The unverified GPUs this user's clients are on: joining another (new, or named by
    // another user only) counts as one more.
    const size_t used =
        static_cast<size_t>(std::count_if(table.begin(), table.end(), [&](const auto& e) {
          return !e.second.verified && e.second.users.count(uid);
        }));
    if (used >= limits.unverified_gpus_per_uid)
      return refused(
          EDQUOT, "uid " + std::to_string(uid) + " already has clients on " + std::to_string(used) +
                      " GPUs that no training or inference process named; GPU " + uuid +
                      " would pass the cap of " + std::to_string(limits.unverified_gpus_per_uid) +
                      " unverified GPUs per user (docs/security.md)");
    if (known != table.end()) {
      a.admit = true;  // an existing state: the table does not grow
      return a;
    }
    const size_t unverified = static_cast<size_t>(std::count_if(
        table.begin(), table.end(), [](const auto& e) { return !e.second.verified; }));
    if (unverified >= limits.gpus / 2 || table.size() >= limits.gpus) {
      a.evict = idle_gpu(table, false);
      if (a.evict.empty())
        return refused(ENOSPC,
                       "tandemd tracks " + std::to_string(table.size()) + " GPUs (" +
                           std::to_string(unverified) +
                           " unverified: named by no training or inference process, at most " +
                           std::to_string(limits.gpus / 2) + " of " + std::to_string(limits.gpus) +
                           "), all in use (docs/security.md)");
    }
    a.admit = true;
    return a;
  }
  // A protected client naming a new GPU: unverified GPUs never take more than half the table,
  // so a full table with no idle GPU is one protected clients filled themselves.
  if (table.size() >= limits.gpus) {
    a.evict = idle_gpu(table, true);
    if (a.evict.empty())
      return refused(ENOSPC, "tandemd tracks " + std::to_string(limits.gpus) + " GPUs, all in use");
  }
  a.admit = true;
  return a;
}

}  // namespace tandem::scheduler
