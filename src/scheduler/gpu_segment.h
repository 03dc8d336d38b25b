// One GPU's shared memory: the header and the client slots (include/tandem/shm_abi.h).
// The daemon owns it (a memfd, passed to each client at registration) and reclaims the slot
// of a client whose socket closed; nothing in it is a lock a dying process could leave held.
#pragma once
#include <string>

#include "tandem/shm_abi.h"

namespace tandem::scheduler {

class GpuSegment {
 public:
  explicit GpuSegment(const std::string& uuid_hex);
  ~GpuSegment();
  GpuSegment(const GpuSegment&) = delete;
  GpuSegment& operator=(const GpuSegment&) = delete;

  bool ok() const { return shm_ != nullptr; }
  int fd() const { return fd_; }
  tandem_shm_header* shm() const { return shm_; }
  const std::string& uuid() const { return uuid_; }

  // A free slot, now owned by `pid` with `role`; -1 when all are taken.
  int claim(int pid, uint32_t role);
  // Zeroes the slot (its tokens vanish with it) and wakes anything still waiting on it.
  void release(int slot);

 private:
  std::string uuid_;
  int fd_ = -1;
  tandem_shm_header* shm_ = nullptr;
};

}  // namespace tandem::scheduler
