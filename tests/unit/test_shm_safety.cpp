// The shared memory a client cannot break (sealed segments, a read-only daemon segment, bounded
// client pages) and the hook's checks of what a daemon sends (shm_abi.h, docs/scheduler.md).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>

#include "client_view.h"
#include "gpu_scheduler.h"
#include "gpu_segment.h"
#include "link_check.h"
#include "online_requests.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;
const char* kUuid = "00112233445566778899aabbccddeeff";
}  // namespace

TEST_CASE("shm: the GPU's segment cannot be resized, written or mapped writable by a client") {
  GpuSegment segment(kUuid);
  REQUIRE(segment.ok());
  int slot = segment.claim(4242, TANDEM_ROLE_BATCH_INFERENCE);
  REQUIRE(slot >= 0);
  // What a client receives is the same open file as the daemon's descriptor.
  int fd = segment.fd();
  CHECK(ftruncate(fd, 0) != 0);
  CHECK(errno == EPERM);
  CHECK(ftruncate(fd, 1 << 20) != 0);
  CHECK(errno == EPERM);
  CHECK(write(fd, "x", 1) < 0);
  CHECK(errno == EPERM);
  CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) != 0);
  void* w = mmap(nullptr, sizeof(tandem_shm_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(w == MAP_FAILED);
  CHECK(errno == EPERM);
  // Read-only works, and cannot be made writable afterwards.
  void* r = mmap(nullptr, sizeof(tandem_shm_header), PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(r != MAP_FAILED);
  CHECK(mprotect(r, sizeof(tandem_shm_header), PROT_READ | PROT_WRITE) != 0);
  const auto* seen = static_cast<const tandem_shm_header*>(r);
  CHECK(seen->magic == TANDEM_SHM_MAGIC);
  CHECK(seen->slots[slot].state == TANDEM_SLOT_ACTIVE);
  CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0);  // sealed for good: no seal can be added or removed
  munmap(r, sizeof(tandem_shm_header));
  // The daemon's own mapping stays writable.
  segment.shm()->slots[slot].assigned_quota_bytes = 1 << 20;
  CHECK(segment.shm()->slots[slot].assigned_quota_bytes == 1 << 20);

  // The client's page: writable by its client, never resizable.
  int page_fd = segment.page_fd(slot);
  CHECK(ftruncate(page_fd, 0) != 0);
  CHECK(errno == EPERM);
  void* p = mmap(nullptr, sizeof(tandem_client_page), PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
  REQUIRE(p != MAP_FAILED);
  static_cast<tandem_client_page*>(p)->launches = 7;
  CHECK(segment.page(slot)->launches == 7);  // the daemon sees it
  munmap(p, sizeof(tandem_client_page));
  segment.release(slot);
  CHECK(segment.page(slot) == nullptr);
}

TEST_CASE("shm: what a client writes to its page is bounded before the daemon uses it") {
  ClientView view;
  tandem_client_page raw{};
  raw.launches = 100;
  raw.issued_ns = 5 * kMs;
  raw.completed_ns = 2 * kMs;
  raw.markers_recorded = 10;
  raw.markers_completed = 9;
  bound_client_view(view, raw, 1000 * kMs, 1);
  CHECK(view.violations == 0);
  CHECK(view.v.launches == 100);

  // What a benign client can show in a copy that is not one atomic snapshot (a marker recorded
  // and passed between the reads of the two counts; a clock reading taken just after the
  // daemon's): bounded, not counted.
  tandem_client_page racy = raw;
  racy.markers_completed = raw.markers_recorded + 1;
  racy.completed_ns = raw.issued_ns + 1000;
  racy.heartbeat_ns = 1000 * kMs + 500;
  ClientView copy = view;
  bound_client_view(copy, racy, 1000 * kMs, 1);
  CHECK(copy.violations == 0);
  CHECK(copy.v.markers_completed == raw.markers_recorded);
  CHECK(copy.v.completed_ns == raw.issued_ns);
  CHECK(copy.v.heartbeat_ns == 1000 * kMs);

  // Backwards, an implausible jump, completions beyond what was issued, a future timestamp,
  // out-of-range sizes, a latency for an interval that has not begun.
  raw.launches = 3;
  raw.issued_ns = UINT64_MAX;
  raw.completed_ns = UINT64_MAX;
  raw.markers_completed = 1000;
  raw.heartbeat_ns = UINT64_MAX;
  raw.peak_bytes = UINT64_MAX;
  raw.requests_open = UINT32_MAX;
  raw.slo_us = UINT32_MAX;
  raw.latency_ns = 7;
  raw.latency_seq = 99;
  raw.tokens_taken_ns = 0;
  bound_client_view(view, raw, 1000 * kMs, 1);
  CHECK(view.violations > 0);
  CHECK(view.last_violation != nullptr);
  CHECK(view.v.launches == 100);  // held
  CHECK(view.v.issued_ns == 5 * kMs + ClientBounds::kWorkNsPerPeriod);
  CHECK(view.v.completed_ns <= view.v.issued_ns);
  CHECK(view.v.markers_completed <= view.v.markers_recorded);
  CHECK(view.v.heartbeat_ns == 1000 * kMs);
  CHECK(view.v.peak_bytes == ClientBounds::kMaxBytes);
  CHECK(view.v.requests_open == ClientBounds::kMaxRequestsOpen);
  CHECK(view.v.slo_us == ClientBounds::kMaxSloUs);
  CHECK(view.v.latency_seq == 0);  // the claim for interval 99 is not taken
  CHECK(view.v.latency_ns == 0);
  // Sums over many such clients cannot wrap within any realistic time.
  CHECK(view.v.issued_ns - view.v.completed_ns <= ClientBounds::kWorkNsPerPeriod + 5 * kMs);
}

TEST_CASE("shm: a hostile page does not move the daemon's decisions for the other clients") {
  SchedulerParams params;
  GpuScheduler gpu(kUuid, params);
  REQUIRE(gpu.segment().ok());
  tandem_shm_header* shm = gpu.segment().shm();
  shm->gpu_total_bytes = 80ull << 30;
  int train = gpu.segment().claim(100, TANDEM_ROLE_TRAINING);
  int hostile = gpu.segment().claim(200, TANDEM_ROLE_BATCH_INFERENCE);
  int filler = gpu.segment().claim(300, TANDEM_ROLE_BATCH_INFERENCE);
  shm->slots[filler].assigned_quota_bytes = 1ull << 30;
  uint64_t t = 1000 * kMs;
  gpu.tick(t += kMs);
  // Everything the hostile client can reach is its page: fill it with extremes, every period
  // (its peak memory flipping between none and everything). The log says so a few times, not
  // at every period.
  int log = memfd_create("log", MFD_CLOEXEC);
  int saved_stderr = dup(2);
  REQUIRE((log >= 0 && saved_stderr >= 0 && dup2(log, 2) == 2));
  for (int i = 0; i < 50; ++i) {
    std::memset(gpu.segment().page(hostile), i % 2 ? 0xff : 0x00, sizeof(tandem_client_page));
    gpu.tick(t += kMs);
  }
  dup2(saved_stderr, 2);
  close(saved_stderr);
  std::string logged(static_cast<size_t>(lseek(log, 0, SEEK_END)), '\0');
  CHECK(pread(log, logged.data(), logged.size(), 0) == static_cast<ssize_t>(logged.size()));
  close(log);
  size_t warnings = 0;
  for (size_t at = logged.find("summed peak memory"); at != std::string::npos; at = logged.find("summed peak memory", at + 1))
    ++warnings;
  CHECK(warnings == 1);
  CHECK(logged.find("wrote implausible values") != std::string::npos);
  CHECK(gpu.segment().view(hostile).violations > 0);
  CHECK(shm->slots[filler].assigned_quota_bytes == 1ull << 30);
  CHECK(shm->slots[filler].state == TANDEM_SLOT_ACTIVE);
  CHECK(shm->slots[train].state == TANDEM_SLOT_ACTIVE);
  CHECK(shm->slots[hostile].role == TANDEM_ROLE_BATCH_INFERENCE);
  CHECK(gpu.segment().view(filler).violations == 0);
  // The principle I sum saw at most kMaxBytes from it (no wrap-around hiding the others).
  gpu.segment().page(filler)->peak_bytes = 10ull << 30;
  gpu.tick(t += kMs);
  CHECK(gpu.segment().view(filler).v.peak_bytes == 10ull << 30);
}

TEST_CASE("hook: a daemon's hello reply and descriptors are checked before use") {
  using tandem::hook::hello_slot;
  using tandem::hook::sealed_memfd_of_size;
  using tandem::hook::segment_layout_ok;
  const char* why = nullptr;
  std::string role;
  CHECK(hello_slot(R"({"slot": 3, "sample_us": 1000})", role, &why) == 3);
  CHECK(role.empty());  // an older tandemd: the role asked
  CHECK(hello_slot(R"({"slot": 3, "sample_us": 1000, "role": "batch-inference"})", role, &why) == 3);
  CHECK(role == "batch-inference");
  CHECK(hello_slot(R"({"slot": 3, "sample_us": 1000, "role": "admin"})", role, &why) == -1);
  for (const char* bad : {"", "garbage", "[]", "{}", R"({"slot": "3"})", R"({"slot": -1})", R"({"slot": 64})",
                          R"({"slot": 1e30})", R"({"slot": 18446744073709551615})", R"({"slot": 3.5})"}) {
    why = nullptr;
    CHECK(hello_slot(bad, role, &why) == -1);
    CHECK(why != nullptr);
  }
  // Not sealed: the sender could shrink it under our mapping (SIGBUS at the next read).
  int unsealed = memfd_create("t", MFD_CLOEXEC);
  REQUIRE(ftruncate(unsealed, sizeof(tandem_shm_header)) == 0);
  CHECK_FALSE(sealed_memfd_of_size(unsealed, sizeof(tandem_shm_header), &why));
  close(unsealed);
  void* mapping = nullptr;
  int wrong_size = make_sealed_memfd("t", 64, F_SEAL_SHRINK | F_SEAL_GROW, &mapping);
  REQUIRE(wrong_size >= 0);
  CHECK_FALSE(sealed_memfd_of_size(wrong_size, sizeof(tandem_shm_header), &why));
  munmap(mapping, 64);
  close(wrong_size);
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  CHECK_FALSE(sealed_memfd_of_size(pipe_fds[0], sizeof(tandem_shm_header), &why));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  CHECK_FALSE(sealed_memfd_of_size(-1, sizeof(tandem_shm_header), &why));

  GpuSegment segment(kUuid);
  REQUIRE(segment.ok());
  CHECK(sealed_memfd_of_size(segment.fd(), sizeof(tandem_shm_header), &why));
  CHECK(segment_layout_ok(segment.shm(), &why));
  tandem_shm_header* shm = segment.shm();
  shm->magic ^= 1;
  CHECK_FALSE(segment_layout_ok(shm, &why));
  shm->magic ^= 1;
  shm->version = 2;
  CHECK_FALSE(segment_layout_ok(shm, &why));
  shm->version = TANDEM_SHM_VERSION;
  shm->slot_count = 1u << 30;
  CHECK_FALSE(segment_layout_ok(shm, &why));
  shm->slot_count = TANDEM_MAX_SLOTS;
  CHECK(segment_layout_ok(shm, &why));
}

TEST_CASE("hook: a forked child's request-samples lock is free even if a parent's thread held it") {
  std::mutex& samples = tandem::hook::request_samples_mutex_for_test();
  samples.lock();  // as a parent's thread ending a request at the moment of the fork
  tandem::hook::online_requests_after_fork_child();
  CHECK(samples.try_lock());
  samples.unlock();
}
