#include "gpu_segment.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "futex.h"
#include "log.h"

namespace tandem::scheduler {

GpuSegment::GpuSegment(const std::string& uuid_hex) : uuid_(uuid_hex) {
  fd_ = memfd_create(("tandem-gpu-" + uuid_hex).c_str(), MFD_CLOEXEC);
  if (fd_ < 0 || ftruncate(fd_, sizeof(tandem_shm_header)) != 0) {
    TANDEM_LOG_ERROR("cannot create shared memory for GPU {}: {}", uuid_hex, std::strerror(errno));
    return;
  }
  void* p = mmap(nullptr, sizeof(tandem_shm_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return;
  shm_ = static_cast<tandem_shm_header*>(p);
  shm_->magic = TANDEM_SHM_MAGIC;
  shm_->version = TANDEM_SHM_VERSION;
  shm_->size = sizeof(tandem_shm_header);
  shm_->slot_count = TANDEM_MAX_SLOTS;
  for (size_t i = 0; i < 16 && 2 * i + 1 < uuid_hex.size(); ++i)
    shm_->gpu_uuid[i] = static_cast<uint8_t>(std::stoi(uuid_hex.substr(2 * i, 2), nullptr, 16));
}

GpuSegment::~GpuSegment() {
  if (shm_) munmap(shm_, sizeof(tandem_shm_header));
  if (fd_ >= 0) close(fd_);
}

int GpuSegment::claim(int pid, uint32_t role) {
  for (uint32_t i = 0; i < TANDEM_MAX_SLOTS; ++i) {
    tandem_slot& s = shm_->slots[i];
    if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_FREE) continue;
    uint32_t generation = s.generation + 1;
    std::memset(&s, 0, sizeof s);
    s.pid = pid;
    s.role = role;
    s.generation = generation;
    // Batch inference takes tokens kernel by kernel; online inference is admitted request by
    // request (the client waits for a bubble that can hold the request), its kernels ungated.
    s.gate = role == TANDEM_ROLE_BATCH_INFERENCE ? TANDEM_GATE_TOKENS : TANDEM_GATE_OPEN;
    __atomic_store_n(&s.state, TANDEM_SLOT_ACTIVE, __ATOMIC_RELEASE);
    return static_cast<int>(i);
  }
  return -1;
}

void GpuSegment::release(int slot) {
  tandem_slot& s = shm_->slots[slot];
  __atomic_store_n(&s.gate, TANDEM_GATE_OPEN, __ATOMIC_RELEASE);
  __atomic_store_n(&s.tokens, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&s.state, TANDEM_SLOT_FREE, __ATOMIC_RELEASE);
  futex_bump_and_wake(&s.wake);
}

}  // namespace tandem::scheduler
