// One GPU's shared memory (include/tandem/shm_abi.h): the segment with the header and the
// daemon's part of every slot, sealed so that clients can only read it, and for each claimed
// slot the client's own page, the only memory that client writes. The daemon owns both
// (memfds, passed to the client at registration), reads every page once per period into a
// bounded view (client_view.h), and reclaims the slot of a client whose socket closed; nothing
// in them is a lock a dying process could leave held.
#pragma once
#include <array>
#include <string>

#include "client_view.h"
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

  // A free slot, now owned by `pid` with `role`, with a fresh page; -1 when all are taken
  // (or no page could be made).
  int claim(int pid, uint32_t role);
  // Zeroes the slot (its tokens vanish with it), wakes anything still waiting on it and
  // drops its page.
  void release(int slot);

  // The client's page of an active slot: its descriptor (passed to that client only) and the
  // daemon's mapping of it (tests write through it as a client would).
  int page_fd(int slot) const { return pages_[slot].fd; }
  tandem_client_page* page(int slot) const { return pages_[slot].page; }
  // Reads every active slot's page into its bounded view (once per period, before deciding).
  void sample(uint64_t now_ns);
  const ClientView& view(int slot) const { return pages_[slot].view; }
  // Reads one active slot's page into its bounded view now, as sample() does: the last
  // reading of a client whose connection closed, taken before its slot is released, so that
  // what it did since the last period is counted too.
  const ClientView& sample_one(int slot, uint64_t now_ns);

 private:
  struct Page {
    int fd = -1;
    tandem_client_page* page = nullptr;
    ClientView view;
    bool warned = false;  // bounded values logged for this client
  };
  void drop_page(Page& p);
  void sample_page(uint32_t slot, uint64_t now_ns, uint32_t control_seq);

  std::string uuid_;
  int fd_ = -1;
  tandem_shm_header* shm_ = nullptr;
  std::array<Page, TANDEM_MAX_SLOTS> pages_;
};

// A memfd of exactly `bytes`, mapped read-write here, then sealed with `seals` (F_SEAL_*):
// its size can never change under a mapping (no SIGBUS). -1 (and nothing mapped) on failure.
int make_sealed_memfd(const char* name, size_t bytes, unsigned seals, void** mapping);

}  // namespace tandem::scheduler
