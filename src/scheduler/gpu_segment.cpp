#include "gpu_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "futex.h"
#include "log.h"

namespace tandem::scheduler {

int make_sealed_memfd(const char* name, size_t bytes, unsigned seals, void** mapping) {
  *mapping = nullptr;
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0)
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  // F_SEAL_FUTURE_WRITE keeps this mapping writable and refuses every later one (and write(2)).
  if (p == MAP_FAILED || fcntl(fd, F_ADD_SEALS, static_cast<int>(seals)) != 0) {
    int saved = errno;
    if (p != MAP_FAILED) munmap(p, bytes);
    close(fd);
    errno = saved;
    return -1;
  }
  *mapping = p;
  return fd;
}

GpuSegment::GpuSegment(const std::string& uuid_hex) : uuid_(uuid_hex) {
  void* p = nullptr;
  fd_ = make_sealed_memfd(("tandem-gpu-" + uuid_hex).c_str(), sizeof(tandem_shm_header),
                          F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL, &p);
  if (fd_ < 0) {
    TANDEM_LOG_ERROR("cannot create shared memory for GPU {}: {}", uuid_hex, std::strerror(errno));
    return;
  }
  shm_ = static_cast<tandem_shm_header*>(p);
  shm_->magic = TANDEM_SHM_MAGIC;
  shm_->version = TANDEM_SHM_VERSION;
  shm_->size = sizeof(tandem_shm_header);
  shm_->slot_count = TANDEM_MAX_SLOTS;
  for (size_t i = 0; i < 16 && 2 * i + 1 < uuid_hex.size(); ++i)
    shm_->gpu_uuid[i] = static_cast<uint8_t>(std::stoi(uuid_hex.substr(2 * i, 2), nullptr, 16));
}

GpuSegment::~GpuSegment() {
  for (Page& p : pages_) drop_page(p);
  if (shm_) munmap(shm_, sizeof(tandem_shm_header));
  if (fd_ >= 0) close(fd_);
}

void GpuSegment::drop_page(Page& p) {
  if (p.page) munmap(p.page, sizeof(tandem_client_page));
  if (p.fd >= 0) close(p.fd);
  p = Page{};
}

int GpuSegment::claim(int pid, uint32_t role) {
  for (uint32_t i = 0; i < TANDEM_MAX_SLOTS; ++i) {
    tandem_slot& s = shm_->slots[i];
    if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_FREE) continue;
    Page& page = pages_[i];
    drop_page(page);
    void* mapping = nullptr;
    page.fd = make_sealed_memfd("tandem-client", sizeof(tandem_client_page), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL,
                                &mapping);
    if (page.fd < 0) {
      TANDEM_LOG_ERROR("cannot create a client page on GPU {}: {}", uuid_, std::strerror(errno));
      return -1;
    }
    page.page = static_cast<tandem_client_page*>(mapping);  // zeroed, as the fresh view is
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
  __atomic_store_n(&s.token_limit_ns, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&s.requests_open, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&s.state, TANDEM_SLOT_FREE, __ATOMIC_RELEASE);
  futex_bump_and_wake(&s.wake);
  drop_page(pages_[slot]);
}

void GpuSegment::sample(uint64_t now_ns) {
  uint32_t control_seq = __atomic_load_n(&shm_->control_seq, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < TANDEM_MAX_SLOTS; ++i) sample_page(i, now_ns, control_seq);
}

const ClientView& GpuSegment::sample_one(int slot, uint64_t now_ns) {
  sample_page(static_cast<uint32_t>(slot), now_ns, __atomic_load_n(&shm_->control_seq, __ATOMIC_ACQUIRE));
  return pages_[slot].view;
}

void GpuSegment::sample_page(uint32_t slot, uint64_t now_ns, uint32_t control_seq) {
  Page& p = pages_[slot];
  if (!p.page || __atomic_load_n(&shm_->slots[slot].state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE) return;
  uint64_t before = p.view.violations;
  bound_client_view(p.view, snapshot_page(p.page), now_ns, control_seq);
  if (p.view.violations != before && !p.warned) {  // once per client: a hostile one must not flood the log
    p.warned = true;
    TANDEM_LOG_WARN("client pid {} (slot {}) wrote implausible values to its page ({} first); they are bounded",
                    shm_->slots[slot].pid, slot, p.view.last_violation);
  }
}

}  // namespace tandem::scheduler
