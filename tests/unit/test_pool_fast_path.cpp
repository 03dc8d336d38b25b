// The pool's fast path and what it tells the application: an allocation or free inside a held
// chunk makes no driver call and no tandemd call and never waits for trimming (the progress
// thread's chunk-level work); the process's own idle chunks count as free memory.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "chunk_pool.h"
#include "memory_quota.h"

using namespace tandem::memory;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kChunk = 2 * kMiB;

// Counts every call; markers are done at once.
struct CountingDriver : PoolDriver {
  std::atomic<int> calls{0};
  uint64_t next = 1;
  bool reserve(uint64_t, uint64_t& base) override { return ++calls, base = 1ull << 40, true; }
  bool create(uint64_t, uint64_t& h) override { return ++calls, h = next++, true; }
  int export_fd(uint64_t) override { return ++calls, open("/dev/null", O_RDONLY | O_CLOEXEC); }
  bool import_fd(int, uint64_t& h) override { return ++calls, h = next++, true; }
  bool map(uint64_t, uint64_t, uint64_t) override { return ++calls, true; }
  bool set_access(uint64_t, uint64_t) override { return ++calls, true; }
  void unmap(uint64_t, uint64_t) override { ++calls; }
  void release(uint64_t) override { ++calls; }
  bool zero_async(uint64_t, uint64_t) override { return ++calls, true; }
  bool zero_wait() override { return ++calls, true; }
  void* record(void*, bool) override { return ++calls, this; }
  bool done(void*) override { return ++calls, true; }
  void recycle(void*) override {}
  bool synchronize() override {
    ++calls;
    return true;
  }
};

// tandemd, whose answer to a release can be held back (a slow socket, a busy daemon).
struct SlowDaemon : PoolBroker {
  std::atomic<int> calls{0};
  std::mutex m;
  std::condition_variable cv;
  bool hold_release = false, in_release = false;
  uint64_t next_id = 1;
  bool linked() override { return true; }
  std::vector<GrantedChunk> acquire(uint64_t, uint64_t) override { return ++calls, std::vector<GrantedChunk>{}; }
  uint64_t register_chunk(int, uint64_t) override { return ++calls, next_id++; }
  void release(const std::vector<uint64_t>&) override {
    ++calls;
    std::unique_lock<std::mutex> lock(m);
    in_release = true;
    cv.notify_all();
    cv.wait(lock, [&] { return !hold_release; });
    in_release = false;
  }
};

}  // namespace

TEST_CASE("pool fast path: blocks placed in held chunks make no driver or tandemd call", "[memory]") {
  CountingDriver driver;
  SlowDaemon daemon;
  ChunkPool pool(driver, daemon, kChunk, 64 * kChunk);
  const char* why = "";
  REQUIRE(pool.init(&why));
  uint64_t keep = pool.allocate(4096);  // the first block maps and registers a chunk
  REQUIRE(keep);
  int driver_before = driver.calls, daemon_before = daemon.calls;
  uint64_t slow_before = pool.slow_calls();
  for (int i = 0; i < 200; ++i) {  // 200 x 4 KiB pending plain frees fit in the chunk: no synchronization
    uint64_t p = pool.allocate(1000 + 16 * i);
    REQUIRE(p);
    REQUIRE(pool.free(p, false, nullptr, false, nullptr));
  }
  CHECK(driver.calls == driver_before);
  CHECK(daemon.calls == daemon_before);
  CHECK(pool.slow_calls() == slow_before);
  CHECK(pool.stats().held_bytes == kChunk);
  // A stream-ordered free records its marker: that one driver call, nothing else.
  uint64_t p = pool.allocate(4096);
  REQUIRE(pool.free(p, true, nullptr, false, nullptr));
  CHECK(driver.calls == driver_before + 1);
  CHECK(pool.check(&why));
}

TEST_CASE("pool fast path: an allocation never waits for trimming in progress", "[memory]") {
  CountingDriver driver;
  SlowDaemon daemon;
  ChunkPool pool(driver, daemon, kChunk, 64 * kChunk);
  const char* why = "";
  REQUIRE(pool.init(&why));
  uint64_t live = pool.allocate(4096);   // a chunk that stays
  uint64_t run = pool.allocate(3 * kChunk);  // three chunks that will leave
  REQUIRE((live && run));
  REQUIRE(pool.free(run, true, nullptr, false, nullptr));
  // Markers are done at once, but only the allocating side reaps them: the trim synchronizes.
  daemon.hold_release = true;
  std::thread trimmer([&] { pool.trim(kChunk, true); });
  {
    std::unique_lock<std::mutex> lock(daemon.m);
    REQUIRE(daemon.cv.wait_for(lock, std::chrono::seconds(10), [&] { return daemon.in_release; }));
  }
  // tandemd has not answered the release yet: the trimmer holds the chunk lock. Allocations
  // and frees in the held chunk go on regardless.
  auto served = std::async(std::launch::async, [&] {
    for (int i = 0; i < 100; ++i) {
      uint64_t p = pool.allocate(8192);
      if (!p || !pool.free(p, false, nullptr, false, nullptr)) return false;
    }
    return true;
  });
  bool in_time = served.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  {
    std::lock_guard<std::mutex> lock(daemon.m);
    daemon.hold_release = false;
  }
  daemon.cv.notify_all();
  trimmer.join();
  REQUIRE(in_time);
  REQUIRE(served.get());
  CHECK(pool.stats().held_bytes == kChunk);  // the run left, the live block's chunk stayed
  CHECK(pool.check(&why));
}

TEST_CASE("memory view: the process's own idle pooled chunks count as free; under a quota only its own use moves free", "[memory]") {
  using tandem::hook::memory_view;
  constexpr uint64_t G = 1024 * kMiB;
  uint64_t free = 2 * G, total = 80 * G, used = 78 * G;
  // No quota, no idle chunks: the driver's answer stands.
  REQUIRE_FALSE(memory_view(free, total, used, 0, 0, 0));
  // No quota: 4 GiB of idle chunks are free memory for this process, not used memory.
  REQUIRE(memory_view(free, total, used, 0, 10 * G, 4 * G));
  CHECK((free == 6 * G && total == 80 * G && used == 74 * G));
  // A quota of 16 GiB with 10 GiB in use: the quota leaves 6 GiB, the device (with the idle
  // chunks) 6 GiB; without counting them it would say 2 GiB.
  free = 2 * G, total = 80 * G, used = 78 * G;
  REQUIRE(memory_view(free, total, used, 16 * G, 10 * G, 4 * G));
  CHECK((free == 6 * G && total == 16 * G && used == 10 * G));
  // Under a quota free memory is what the quota leaves, whatever the device's free: it moves
  // only with the process's own allocations (vLLM asserts that while it profiles).
  free = 2 * G, total = 80 * G, used = 78 * G;
  REQUIRE(memory_view(free, total, used, 16 * G, 10 * G, 0));
  CHECK((free == 6 * G && total == 16 * G));
  free = 70 * G;  // a neighbour freed 68 GiB: the same answer
  REQUIRE(memory_view(free, total, used, 16 * G, 10 * G, 0));
  CHECK(free == 6 * G);
  // A quota above the device: the device is the limit, its free memory stands.
  free = 2 * G, total = 80 * G, used = 78 * G;
  REQUIRE(memory_view(free, total, used, 100 * G, 10 * G, 0));
  CHECK((free == 2 * G && total == 80 * G && used == 10 * G));
  // Never more idle than the device counts as used.
  free = 79 * G, total = 80 * G, used = 1 * G;
  REQUIRE(memory_view(free, total, used, 0, 0, 4 * G));
  CHECK((free == 80 * G && used == 0));
}

TEST_CASE("memory pressure: told every 100 ms while over the quota, at once when the quota changes", "[memory]") {
  using tandem::hook::pressure_due;
  constexpr uint64_t ms = 1000000;
  CHECK_FALSE(pressure_due(1000 * ms, 0, 64 * kMiB, 0, 0));               // no quota
  CHECK_FALSE(pressure_due(1000 * ms, 64 * kMiB, 64 * kMiB, 0, 0));       // not over it
  CHECK(pressure_due(1000 * ms, 32 * kMiB, 64 * kMiB, 0, 0));             // over it: the first call
  CHECK_FALSE(pressure_due(1050 * ms, 32 * kMiB, 64 * kMiB, 1000 * ms, 32 * kMiB));  // 50 ms later, same quota
  CHECK(pressure_due(1100 * ms, 32 * kMiB, 64 * kMiB, 1000 * ms, 32 * kMiB));        // 100 ms later
  CHECK(pressure_due(1010 * ms, 16 * kMiB, 64 * kMiB, 1000 * ms, 32 * kMiB));        // lowered again: at once
}
