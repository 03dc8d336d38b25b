// Holding a node-local job's collectives on all its ranks together (job_hold.h): no limit
// without a request, a hold that lets every rank reach the collective its fastest peer is in
// and none beyond, a rank past the limit releasing the others, and incomplete jobs never held.
#include <catch2/catch.hpp>

#include <random>

#include "job_hold.h"

using namespace tandem::scheduler;

namespace {
// May a rank launch its n-th collective under this limit?
bool may_launch(uint64_t allowed, uint64_t n) { return allowed == 0 || n < allowed; }
}  // namespace

TEST_CASE("JobHold: no limit while no rank's GPU runs a request") {
  JobHold h;
  CHECK(h.step({{5, false}, {4, false}}, 2) == 0);
  CHECK_FALSE(h.holding());
  CHECK(h.holds() == 0);
}

TEST_CASE("JobHold: a request on one rank's GPU holds every rank at the same collective") {
  JobHold h;
  // Rank 0 launched 5 collectives, rank 1 four: rank 1 may still launch the 5th (rank 0 waits
  // in it for rank 1), neither the 6th.
  uint64_t allowed = h.step({{5, true}, {4, false}}, 2);
  CHECK(h.holding());
  CHECK(h.holds() == 1);
  CHECK(may_launch(allowed, 5));
  CHECK_FALSE(may_launch(allowed, 6));
  // Rank 1 catches up: the limit stays.
  CHECK(h.step({{5, false}, {5, true}}, 2) == allowed);
  // The request ends: no limit; the next one holds again, further on.
  CHECK(h.step({{5, false}, {5, false}}, 2) == 0);
  CHECK_FALSE(h.holding());
  uint64_t next = h.step({{9, false}, {8, true}}, 2);
  CHECK(h.holds() == 2);
  CHECK(may_launch(next, 9));
  CHECK_FALSE(may_launch(next, 10));
}

TEST_CASE("JobHold: a rank seen past the limit raises it for all") {
  JobHold h;
  uint64_t allowed = h.step({{3, true}, {3, false}}, 2);
  CHECK_FALSE(may_launch(allowed, 4));
  // Rank 0 launched its 4th anyway (it read the slot before the hold began, or its daemon
  // link failed open): rank 1 must not be held before it, or rank 0 waits inside it.
  allowed = h.step({{4, true}, {3, false}}, 2);
  CHECK(may_launch(allowed, 4));
  CHECK_FALSE(may_launch(allowed, 5));
}

TEST_CASE("JobHold: a job is held only while all its ranks are registered and agree") {
  JobHold h;
  CHECK(h.step({{2, true}}, 2) == 0);                        // one of two ranks registered
  CHECK(h.step({{2, true}, {2, false}, {2, false}}, 2) == 0);  // one more than the job has
  CHECK(h.step({{2, true}, {2, false}}, 0) == 0);            // the ranks' hellos disagreed
  CHECK(h.step({{2, true}}, 1) == 0);                        // one rank: nothing to group
  CHECK(h.step({{2, true}, {2, false}}, 2) != 0);
}

TEST_CASE("JobHold: ranks launching at random never wait for a peer that is held") {
  // Four ranks run collectives in lockstep order (each collective ends once all launched it).
  // Each tick a rank may launch its next collective if the limit it last read allows it; the
  // limit is read before tandemd's step (the race at a hold's start). Invariant: whenever a
  // rank waits inside collective n for a peer, that peer is allowed to launch n within a tick.
  std::mt19937 rng(7);
  JobHold h;
  std::vector<uint64_t> launched(4, 0);
  uint64_t allowed = 0;
  int held_ticks = 0;
  for (int tick = 0; tick < 20000; ++tick) {
    bool request = (tick / 50) % 3 == 1;  // requests come and go
    for (uint64_t& l : launched)
      if (rng() % 2 && may_launch(allowed, l + 1)) ++l;
    std::vector<JobRank> ranks;
    for (size_t i = 0; i < launched.size(); ++i) ranks.push_back({launched[i], request && i == 0});
    allowed = h.step(ranks, 4);
    uint64_t most = *std::max_element(launched.begin(), launched.end());
    for (uint64_t l : launched)
      if (l < most) REQUIRE(may_launch(allowed, most));  // a peer in collective `most` is never stranded
    if (allowed) {
      ++held_ticks;
      REQUIRE(!may_launch(allowed, most + 1));  // and the hold holds: nobody starts the next one
    }
  }
  CHECK(held_ticks > 5000);
  CHECK(h.holds() >= 100);
}
