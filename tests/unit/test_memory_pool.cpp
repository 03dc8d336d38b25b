// The pool's process side with a fake driver and a fake tandemd: sub-allocation invariants,
// runs of chunks, reuse only after completion markers (SIRIUS's data-pollution rule, here in
// one process), zero-fill of chunks that change owner, and what trimming gives back.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <utility>
#include <random>
#include <set>
#include <thread>

#include "chunk_pool.h"
#include "range_allocator.h"

using namespace tandem::memory;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kChunk = 2 * kMiB;

struct FakeMarker {
  bool done = false;
};

struct FakeDriver : PoolDriver {
  uint64_t next_handle = 1;
  bool can_create = true;
  size_t capacity = SIZE_MAX;  // chunks the "GPU" can hold at once
  int syncs = 0;
  bool refuse_sync = false;  // as the hook's driver while a stream capture is open
  std::set<uint64_t> live_handles;
  std::vector<std::pair<uint64_t, uint64_t>> zeroed;  // zero-filled: address, bytes
  std::vector<std::pair<uint64_t, uint64_t>> opened;  // made read-write: address, bytes
  int maps = 0, zero_waits = 0;
  std::chrono::milliseconds zero_takes{0};  // how long the zero-fill's wait takes
  std::vector<FakeMarker*> markers;

  bool reserve(uint64_t, uint64_t& base) override { return base = 1ull << 40, true; }
  bool create(uint64_t, uint64_t& handle) override {
    if (!can_create || live_handles.size() >= capacity) return false;
    live_handles.insert(handle = next_handle++);
    return true;
  }
  int export_fd(uint64_t) override { return open("/dev/null", O_RDONLY | O_CLOEXEC); }
  bool import_fd(int, uint64_t& handle) override {
    live_handles.insert(handle = next_handle++);
    return true;
  }
  bool map(uint64_t, uint64_t, uint64_t) override { return ++maps, true; }
  bool set_access(uint64_t va, uint64_t bytes) override { return opened.emplace_back(va, bytes), true; }
  void unmap(uint64_t, uint64_t) override {}
  void release(uint64_t handle) override { live_handles.erase(handle); }
  bool zero_async(uint64_t va, uint64_t bytes) override { return zeroed.emplace_back(va, bytes), true; }
  bool zero_wait() override {
    std::this_thread::sleep_for(zero_takes);
    return ++zero_waits, true;
  }
  void* record(void*, bool) override { return markers.emplace_back(new FakeMarker()); }
  std::function<void()> at_next_done;  // run once, inside the next marker's query (before its answer)
  bool done(void* m) override {
    bool was = static_cast<FakeMarker*>(m)->done;
    if (auto f = std::exchange(at_next_done, nullptr)) f();
    return was;
  }
  void recycle(void* m) override {
    markers.erase(std::find(markers.begin(), markers.end(), m));
    delete static_cast<FakeMarker*>(m);
  }
  bool synchronize() override {
    if (refuse_sync) return false;
    ++syncs;
    for (FakeMarker* m : markers) m->done = true;
    return true;
  }
  void finish_all_work() {
    for (FakeMarker* m : markers) m->done = true;
  }
};

struct FakeDaemon : PoolBroker {
  bool is_linked = true;
  uint64_t next_id = 100;
  std::vector<uint64_t> free_ids;  // chunks released by "other processes"
  std::vector<uint64_t> registered, released;

  bool linked() override { return is_linked; }
  std::vector<GrantedChunk> acquire(uint64_t bytes, uint64_t chunk) override {
    std::vector<GrantedChunk> out;
    while (!free_ids.empty() && out.size() * chunk < bytes) {
      out.push_back({open("/dev/null", O_RDONLY | O_CLOEXEC), free_ids.back()});
      free_ids.pop_back();
    }
    return out;
  }
  uint64_t register_chunk(int fd, uint64_t) override {
    REQUIRE(fd >= 0);
    registered.push_back(next_id);
    return next_id++;
  }
  void release(const std::vector<uint64_t>& ids) override { released.insert(released.end(), ids.begin(), ids.end()); }
};

// A pool of `slots` chunks' worth of addresses on the fakes, set up.
struct PoolRig {
  FakeDriver driver;
  FakeDaemon daemon;
  ChunkPool pool;
  explicit PoolRig(uint64_t slots) : pool(driver, daemon, kChunk, slots * kChunk) {
    const char* why = "";
    REQUIRE(pool.init(&why));
  }
};

void require_consistent(const ChunkPool& pool) {
  const char* why = "";
  INFO(why);
  REQUIRE(pool.check(&why));
}

}  // namespace

TEST_CASE("range allocator: random use keeps its invariants and coalesces back to one range", "[memory]") {
  RangeAllocator r(kChunk);
  std::mt19937 rng(7);
  std::vector<uint64_t> live;
  const char* why = "";
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || rng() % 3) {
      uint64_t offset = r.allocate(1 + rng() % 40000);
      if (offset != RangeAllocator::kNone) {
        REQUIRE(offset % RangeAllocator::kAlignment == 0);
        live.push_back(offset);
      }
    } else {
      size_t i = rng() % live.size();
      REQUIRE(r.free(live[i]));
      live.erase(live.begin() + static_cast<long>(i));
    }
    INFO(why);
    REQUIRE(r.check(&why));
  }
  for (uint64_t offset : live) REQUIRE(r.free(offset));
  REQUIRE(r.empty());
  REQUIRE(r.free_bytes() == kChunk);
  REQUIRE(r.largest_free() == kChunk);
  REQUIRE_FALSE(r.free(0));  // not a block any more
}

TEST_CASE("range allocator: exact fit, refusal, and a freed hole reused", "[memory]") {
  RangeAllocator r(4096);
  uint64_t a = r.allocate(1024), b = r.allocate(1024), c = r.allocate(2048);
  REQUIRE((a == 0 && b == 1024 && c == 2048));
  REQUIRE(r.allocate(1) == RangeAllocator::kNone);
  REQUIRE(r.free(b));
  REQUIRE(r.allocate(1000) == 1024);  // rounded to 1024, fits the hole exactly
}

TEST_CASE("pool: small blocks share a chunk; large ones get contiguous runs of chunks", "[memory]") {
  PoolRig rig(64);
  auto& [driver, daemon, pool] = rig;
  uint64_t a = pool.allocate(1000), b = pool.allocate(300000);
  REQUIRE((a && b));
  REQUIRE(b == a + 1024);
  REQUIRE(pool.stats().held_bytes == kChunk);
  uint64_t big = pool.allocate(5 * kMiB);  // three chunks
  REQUIRE(big);
  REQUIRE(pool.stats().held_bytes == 4 * kChunk);
  REQUIRE(daemon.registered.size() == 4);  // every chunk made here is registered with tandemd
  REQUIRE(pool.owns(big + 5 * kMiB - 1));
  require_consistent(pool);
  uint64_t bytes = 0;
  REQUIRE(pool.free(big, false, nullptr, false, &bytes));
  REQUIRE(bytes == 5 * kMiB);
  REQUIRE_FALSE(pool.free(big, false, nullptr, false, &bytes));  // a double free is refused
  require_consistent(pool);
}

TEST_CASE("pool: on a full GPU, idle chunks that cannot take a run go back and come again as the run", "[memory]") {
  PoolRig rig(8);
  rig.daemon.is_linked = false;  // given-back chunks return to the driver
  rig.driver.capacity = 4;
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(rig.pool.allocate(kChunk * 3 / 4));  // a chunk each
  for (uint64_t b : blocks) REQUIRE(b);
  // Every other chunk idle: no two of them consecutive.
  REQUIRE(rig.pool.free(blocks[0], true, nullptr, false, nullptr));
  REQUIRE(rig.pool.free(blocks[2], true, nullptr, false, nullptr));
  rig.driver.finish_all_work();
  REQUIRE(rig.pool.stats().held_bytes == 4 * kChunk);
  uint64_t run = rig.pool.allocate(2 * kChunk - kMiB);
  REQUIRE(run);
  REQUIRE(rig.pool.stats().held_bytes == 4 * kChunk);
  REQUIRE(rig.driver.live_handles.size() == 4);
  require_consistent(rig.pool);
  for (uint64_t b : {blocks[1], blocks[3], run}) REQUIRE(rig.pool.free(b, true, nullptr, false, nullptr));
}

TEST_CASE("pool: a freed block is reused only after the GPU finished the work queued before the free", "[memory]") {
  PoolRig rig(8);
  auto& [driver, daemon, pool] = rig;
  uint64_t a = pool.allocate(kChunk);  // fills one chunk
  REQUIRE(pool.free(a, true, nullptr, false, nullptr));  // stream-ordered: a marker
  uint64_t b = pool.allocate(kChunk);
  REQUIRE(b != a);  // the queued work may still write a: another chunk
  REQUIRE(pool.stats().pending_bytes == kChunk);
  driver.finish_all_work();
  REQUIRE(pool.free(b, true, nullptr, false, nullptr));
  uint64_t c = pool.allocate(kChunk);
  REQUIRE(c == a);  // a's marker completed: reused
  REQUIRE(driver.syncs == 0);

  SECTION("a plain free waits for a synchronization, taken only when the memory is needed") {
    REQUIRE(pool.free(c, false, nullptr, false, nullptr));
    driver.can_create = false;   // the device is full
    daemon.is_linked = false;
    driver.finish_all_work();    // b's marker
    uint64_t d = pool.allocate(kChunk);
    REQUIRE(d);
    REQUIRE(driver.syncs == 0);  // b's chunk was enough
    uint64_t e = pool.allocate(kChunk);
    REQUIRE(e == c);             // only a synchronization could free c
    REQUIRE(driver.syncs == 1);
    REQUIRE(pool.allocate(kChunk) == 0);  // nothing left anywhere: out of memory
  }

  SECTION("a synchronization the driver cannot make (a capture is open) finishes nothing") {
    REQUIRE(pool.free(c, false, nullptr, false, nullptr));
    driver.can_create = false;
    daemon.is_linked = false;
    driver.finish_all_work();
    REQUIRE(pool.allocate(kChunk));       // b's chunk
    driver.refuse_sync = true;
    REQUIRE(pool.allocate(kChunk) == 0);  // c may still be written: out of memory, not c
    REQUIRE(driver.syncs == 0);
    driver.refuse_sync = false;           // the capture ended
    REQUIRE(pool.allocate(kChunk) == c);
    REQUIRE(driver.syncs == 1);
  }
  require_consistent(pool);
}

TEST_CASE("pool: a block freed on a stream serves that stream's next allocation of its size at once", "[memory]") {
  PoolRig rig(16);
  auto& [driver, daemon, pool] = rig;
  int stream_a = 0, stream_b = 0;  // two streams' handles
  const StreamTag a{reinterpret_cast<uintptr_t>(&stream_a), 0, 7}, b{reinterpret_cast<uintptr_t>(&stream_b), 0, 7};
  for (uint64_t bytes : {uint64_t{64 * 1024}, 3 * kChunk}) {  // a block in a chunk, and a run of chunks
    uint64_t x = pool.allocate(bytes, a);
    REQUIRE(pool.free(x, true, &stream_a, false, nullptr, a));
    REQUIRE(driver.markers.empty());  // its marker is left for later
    uint64_t on_b = pool.allocate(bytes, b);
    REQUIRE(driver.markers.size() == 1);  // recorded once an allocation missed; not done: the GPU may still use x
    REQUIRE(on_b != x);  // another stream waits for the marker
    REQUIRE(pool.allocate(bytes, a) == x);  // the same stream runs the free's work first
    REQUIRE(driver.markers.empty());  // x's marker was dropped, never waited for
    uint64_t other_size = pool.allocate(bytes / 2 + 4096, a);
    REQUIRE(other_size != x);
    for (uint64_t p : {x, on_b, other_size}) REQUIRE(pool.free(p, true, &stream_a, false, nullptr, a));
    driver.finish_all_work();
    uint64_t probe = pool.allocate(4096);  // reaps the finished frees
    REQUIRE((probe && pool.free(probe, true, &stream_a, false, nullptr)));
    driver.finish_all_work();  // (a plain free would have the next test synchronize: every marker done)
    require_consistent(pool);
  }
  REQUIRE(pool.stats().stream_reuses == 2);

  const uint64_t before = pool.stats().stream_reuses;
  SECTION("not after a stream was destroyed (its handle may name a new stream), nor for a plain free") {
    uint64_t x = pool.allocate(5 * kChunk, a);  // sizes no pending block has
    REQUIRE(pool.free(x, true, &stream_a, false, nullptr, a));
    StreamTag later = a;
    later.epoch = 8;
    REQUIRE(pool.allocate(5 * kChunk, later) != x);
    uint64_t y = pool.allocate(kChunk / 2, a);
    REQUIRE(pool.free(y, false, nullptr, false, nullptr, a));  // cuMemFree: no stream order
    REQUIRE(pool.allocate(kChunk / 2, a) != y);
    REQUIRE(pool.stats().stream_reuses == before);
  }
  SECTION("not once trimming gave the block's chunk away") {
    uint64_t x = pool.allocate(5 * kChunk, a);
    REQUIRE(pool.free(x, true, &stream_a, false, nullptr, a));
    REQUIRE(pool.trim(0, true) > 0);  // synchronizes, then gives every idle chunk back
    REQUIRE(pool.stats().held_bytes == 0);
    REQUIRE(pool.allocate(5 * kChunk, a) != 0);
    REQUIRE(pool.stats().stream_reuses == before);  // a new run on new chunks, not the stale block
  }
  require_consistent(pool);
}

TEST_CASE("pool: a block freed where a pending block of a chunk since trimmed still lies is not lost", "[memory]") {
  // The progress thread trims while an allocation runs: the allocation looked at the pending
  // frees (one not finished yet), the trim then synchronized and gave that free's chunk away,
  // and the allocation grew the pool into the same slot, so its new block has the address of
  // the old pending one. Freed, the new block must still become free, and count once.
  PoolRig rig(4);
  auto& [driver, daemon, pool] = rig;
  int stream = 0;
  const StreamTag a{reinterpret_cast<uintptr_t>(&stream), 0, 1};
  const uint64_t kBlock = 64 * 1024;
  uint64_t x = pool.allocate(kBlock, a);
  REQUIRE(pool.free(x, true, &stream, false, nullptr, a));
  driver.at_next_done = [&] { REQUIRE(pool.trim(0, true) == kChunk); };  // the trim, mid-allocation
  uint64_t y = pool.allocate(kChunk, a);  // fits beside no pending block: reaps (x not done), then grows
  REQUIRE(pool.stats().chunks_released == 1);
  REQUIRE(y == x);  // the same slot, mapped again
  REQUIRE(pool.free(y, true, &stream, false, nullptr, a));
  REQUIRE(pool.stats().pending_bytes == kChunk);  // y's free only: x's record left with its chunk
  uint64_t small = pool.allocate(4096);  // records y's marker (and takes a second chunk)
  REQUIRE((small && pool.free(small, true, &stream, false, nullptr, a)));
  driver.finish_all_work();
  uint64_t again = pool.allocate(kChunk);  // no stream: reaps, and y's range is free again
  REQUIRE(again == x);
  REQUIRE(pool.stats().pending_bytes == 4096);  // the small block's free only, its marker recorded just now
  require_consistent(pool);
}

TEST_CASE("pool: chunks from tandemd are zero-filled; trimming gives back only idle chunks", "[memory]") {
  PoolRig rig(16);
  auto& [driver, daemon, pool] = rig;
  daemon.free_ids = {7, 8};
  uint64_t run = pool.allocate(3 * kChunk);  // two chunks from tandemd, one made here
  REQUIRE(run);
  // Mapped one by one, opened and zero-filled once for the run: one access call for the three
  // chunks, one memset for the two received ones (consecutive), one wait.
  REQUIRE(driver.maps == 3);
  REQUIRE(driver.opened == std::vector<std::pair<uint64_t, uint64_t>>{{run, 3 * kChunk}});
  REQUIRE(driver.zeroed == std::vector<std::pair<uint64_t, uint64_t>>{{run, 2 * kChunk}});
  REQUIRE(driver.zero_waits == 1);
  REQUIRE(pool.stats().chunks_received == 2);
  REQUIRE(pool.stats().chunks_created == 1);
  uint64_t small = pool.allocate(4096);
  REQUIRE(small);
  REQUIRE(pool.stats().held_bytes == 4 * kChunk);

  REQUIRE(pool.free(run, true, nullptr, false, nullptr));
  REQUIRE(pool.trim(0, false) == 0);  // the run is pending, the small chunk live: nothing moves
  REQUIRE(daemon.released.empty());
  REQUIRE(pool.trim(0, true) == 3 * kChunk);  // a synchronization finishes the run's work
  REQUIRE(driver.syncs == 1);
  REQUIRE(daemon.released.size() == 3);
  REQUIRE(pool.stats().held_bytes == kChunk);  // the live block's chunk stays
  REQUIRE(pool.free(small, false, nullptr, false, nullptr));
  REQUIRE(pool.trim(0, true) == kChunk);
  REQUIRE(pool.stats().held_bytes == 0);
  REQUIRE(driver.live_handles.empty());  // every handle released here
  require_consistent(pool);
}

TEST_CASE("pool: handover times, request to usable, with their median and 99th percentile", "[memory]") {
  PoolRig rig(16);
  auto& [driver, daemon, pool] = rig;
  // Ten handovers of one chunk each: the first three wait 50 ms for their zero-fill.
  for (int i = 0; i < 10; ++i) {
    driver.zero_takes = std::chrono::milliseconds(i < 3 ? 50 : 0);
    daemon.free_ids = {uint64_t(200 + i)};
    REQUIRE(pool.allocate(kChunk));
  }
  PoolStats s = pool.stats();
  REQUIRE(s.handovers == 10);
  REQUIRE(s.handover_ns_p50 < 50000000);   // the 5th of 10: a fast one
  REQUIRE(s.handover_ns_p99 >= 50000000);  // the 10th: a slow one
  REQUIRE(s.handover_ns_p99 <= s.handover_ns_max);
  REQUIRE(s.handover_ns_total >= 150000000);
  require_consistent(pool);
}

#include "memory_pool.h"

using tandem::scheduler::give_back_bytes;
using tandem::scheduler::plan_reclaim;

TEST_CASE("memory policy: inference's shortfall plus W, in whole chunks, from the biggest training holder", "[memory]") {
  constexpr uint64_t c = 32 * kMiB;
  // 40 MiB short, W = 64 MiB: 104 MiB -> four chunks, all from the holder of 512 MiB.
  auto plan = plan_reclaim(40 * kMiB, 64 * kMiB, c, {{1, 256 * kMiB, 0}, {2, 512 * kMiB, 0}});
  REQUIRE(plan.taken == 4 * c);
  REQUIRE(plan.missing == 0);
  REQUIRE(plan.cuts.size() == 1);
  REQUIRE(plan.cuts[0].client == 2);
  REQUIRE(plan.cuts[0].quota == 512 * kMiB - 4 * c);
  REQUIRE(plan.cuts[0].taken == 4 * c);
  // What it holds over its quota is asked back first, its quota set again as it is.
  plan = plan_reclaim(c, 0, c, {{2, 512 * kMiB, 128 * kMiB}});
  REQUIRE(plan.taken == c);
  REQUIRE(plan.cuts.size() == 1);
  REQUIRE(plan.cuts[0].quota == 128 * kMiB);
  REQUIRE(plan.cuts[0].owed == c);
  REQUIRE(plan.cuts[0].taken == 0);
  // A quota already under what it holds is where the next cut starts: one chunk over it owed,
  // the second a cut.
  plan = plan_reclaim(2 * c, 0, c, {{2, 160 * kMiB, 128 * kMiB}});
  REQUIRE(plan.taken == 2 * c);
  REQUIRE(plan.missing == 0);
  REQUIRE(plan.cuts[0].owed == c);
  REQUIRE(plan.cuts[0].taken == c);
  REQUIRE(plan.cuts[0].quota == 96 * kMiB);
}

TEST_CASE("memory policy: a training job keeps its working set unless it frees on request", "[memory]") {
  constexpr uint64_t c = 32 * kMiB;
  // Holds 640 MiB, its steps use 400: at most 224 MiB (7 chunks) can go, though 320 are asked.
  auto plan = plan_reclaim(320 * kMiB, 0, c, {{1, 640 * kMiB, 0, 400 * kMiB}});
  REQUIRE(plan.taken == 7 * c);
  REQUIRE(plan.cuts[0].quota == 640 * kMiB - 7 * c);
  REQUIRE(plan.cuts[0].quota >= 400 * kMiB);
  REQUIRE(plan.missing == 320 * kMiB - 7 * c);
  // The rest from a second job's spare memory; one whose working set is all it holds gives nothing.
  plan = plan_reclaim(320 * kMiB, 0, c, {{1, 640 * kMiB, 0, 400 * kMiB}, {2, 256 * kMiB, 0, 256 * kMiB},
                                          {3, 128 * kMiB, 0, 0}});
  REQUIRE(plan.taken == 10 * c);
  REQUIRE(plan.missing == 0);
  for (const auto& cut : plan.cuts) REQUIRE(cut.client != 2);
}

TEST_CASE("memory policy: nothing left to give is said, never a quota of none", "[memory]") {
  constexpr uint64_t c = 32 * kMiB;
  auto plan = plan_reclaim(3 * c, 0, c, {{1, 2 * c, 0}});
  REQUIRE(plan.taken == 2 * c);
  REQUIRE(plan.missing == c);
  REQUIRE(plan.cuts[0].quota == 1);  // 0 would mean "no quota" in the shared memory
  REQUIRE(plan.cuts[0].taken == 2 * c);
  REQUIRE(plan_reclaim(c, 0, c, {}).missing == c);
  // InferRelease: only free memory beyond W goes back, in chunks, at most what was taken.
  REQUIRE(give_back_bytes(3 * c + 5, c, c, 10 * c) == 2 * c);
  REQUIRE(give_back_bytes(3 * c, c, c, c) == c);
  REQUIRE(give_back_bytes(c, c, c, 10 * c) == 0);
}
