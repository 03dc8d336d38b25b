// BubbleDetector on synthetic counter sequences, one sample per 1 ms period.
#include <catch2/catch.hpp>

#include "bubble_detector.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;

// Feeds cumulative counters the way the daemon reads them from shared memory.
struct Trainer {
  BubbleDetector d;
  uint64_t t = 0, launches = 0, recorded = 0, completed = 0;
  explicit Trainer(int quiet = 1) : d(quiet) { d.update({t, 0, 0, 0}); }
  GpuPhase period(uint64_t new_launches, uint64_t new_markers, uint64_t markers_done) {
    t += kMs;
    launches += new_launches;
    recorded += new_markers;
    completed += markers_done;
    return d.update({t, launches, recorded, completed});
  }
  GpuPhase busy() { return period(5, 1, 1); }   // launched and finished within the period
  GpuPhase idle() { return period(0, 0, 0); }
};
}  // namespace

TEST_CASE("BubbleDetector: the first sample only initializes") {
  BubbleDetector d;
  CHECK(d.update({5 * kMs, 100, 10, 10}) == GpuPhase::busy);  // counters already advanced: no history
  CHECK(d.phase_started_ns() == 5 * kMs);
  CHECK(d.bubbles() == 0);
  CHECK(d.predicted_bubble_end_ns() == 0);
  CHECK(d.update({6 * kMs, 100, 10, 10}) == GpuPhase::bubble);  // first comparison
}

TEST_CASE("BubbleDetector: CPU ran ahead, no new launches but markers pending, is busy") {
  Trainer tr;
  tr.period(20, 2, 0);  // the CPU queued a lot of work
  CHECK(tr.period(0, 0, 0) == GpuPhase::busy);
  CHECK(tr.period(0, 0, 1) == GpuPhase::busy);  // one of two markers still pending
  CHECK(tr.period(0, 0, 1) == GpuPhase::bubble);  // GPU caught up
  CHECK(tr.d.phase_started_ns() == 4 * kMs);
}

TEST_CASE("BubbleDetector: communication (only uncounted NCCL work) is a bubble") {
  Trainer tr;
  tr.period(8, 1, 0);
  // Compute done, all-reduce running: NCCL kernels are not in the counters.
  CHECK(tr.period(0, 0, 1) == GpuPhase::bubble);
  CHECK(tr.d.phase_started_ns() == 2 * kMs);
  CHECK(tr.idle() == GpuPhase::bubble);
  CHECK(tr.period(3, 1, 0) == GpuPhase::busy);  // backward/forward resumes
  CHECK(tr.d.phase_started_ns() == 4 * kMs);
}

TEST_CASE("BubbleDetector: a host gap (nothing launched, nothing pending) is a bubble") {
  Trainer tr;
  tr.busy();
  CHECK(tr.idle() == GpuPhase::bubble);
  CHECK(tr.idle() == GpuPhase::bubble);
  // A launch whose work finished within the period still ends the bubble.
  CHECK(tr.period(1, 1, 1) == GpuPhase::busy);
  // Pending markers alone (no new launches) keep it busy.
  tr.period(1, 1, 0);
  CHECK(tr.period(0, 0, 0) == GpuPhase::busy);
}

TEST_CASE("BubbleDetector: quiet-sample threshold, dated from the first quiet sample") {
  Trainer tr(3);
  tr.busy();
  CHECK(tr.idle() == GpuPhase::busy);
  CHECK(tr.idle() == GpuPhase::busy);
  CHECK(tr.idle() == GpuPhase::bubble);
  CHECK(tr.d.phase_started_ns() == 2 * kMs);

  // A non-quiet sample resets the run: two quiet, one busy, two quiet is no bubble.
  Trainer u(3);
  u.busy();
  u.idle();
  u.idle();
  CHECK(u.busy() == GpuPhase::busy);
  CHECK(u.idle() == GpuPhase::busy);
  CHECK(u.idle() == GpuPhase::busy);
  CHECK(u.idle() == GpuPhase::bubble);
  CHECK(u.d.phase_started_ns() == 5 * kMs);
  // Ending a bubble needs only one non-quiet sample.
  CHECK(u.busy() == GpuPhase::busy);

  // A threshold below 1 behaves as 1.
  Trainer w(0);
  w.busy();
  CHECK(w.idle() == GpuPhase::bubble);
}

TEST_CASE("BubbleDetector: counters that jump by many per period") {
  Trainer tr;
  CHECK(tr.period(1000, 40, 39) == GpuPhase::busy);
  CHECK(tr.period(0, 0, 0) == GpuPhase::busy);  // one marker of 40 still pending
  CHECK(tr.period(0, 0, 1) == GpuPhase::bubble);
  CHECK(tr.period(250, 10, 10) == GpuPhase::busy);  // big jump, all complete: still progress
  CHECK(tr.period(0, 0, 0) == GpuPhase::bubble);
  // The completed count read ahead of the recorded count (per-client reads race): nothing pending.
  tr.completed += 1;
  CHECK(tr.idle() == GpuPhase::bubble);
}

TEST_CASE("BubbleDetector: learned profile over several iterations") {
  Trainer tr;
  // Iterations of 3 ms busy then a bubble of 2, 2, 2, 6 ms.
  for (uint64_t bubble_ms : {2, 2, 2, 6}) {
    for (int i = 0; i < 3; ++i) tr.busy();
    for (uint64_t i = 0; i < bubble_ms; ++i) tr.idle();
  }
  CHECK(tr.d.bubbles() == 3);  // the fourth is still running
  CHECK(tr.d.mean_bubble_ns() == 2 * kMs);
  CHECK(tr.d.predicted_bubble_end_ns() == tr.t);  // 5 ms in, longer than any learned: about to end
  tr.busy();
  CHECK(tr.d.bubbles() == 4);
  CHECK(tr.d.longest_bubble_ns() == 6 * kMs);
  CHECK(tr.d.mean_bubble_ns() == 3 * kMs);  // (3 * 2 + 6) / 4
  // Busy phases between bubbles are 3 ms; the partial start-up phase is not learned.
  CHECK(tr.d.mean_busy_ns() == 3 * kMs);
  CHECK(tr.d.predicted_bubble_end_ns() == 0);  // busy now
  // The mean is 3 ms, but three bubbles in four lasted 2 ms: the next is predicted to end then.
  tr.idle();
  CHECK(tr.d.predicted_bubble_end_ns() == tr.d.phase_started_ns() + 2 * kMs);
}

TEST_CASE("BubbleDetector: steady bubbles are predicted to their length, scattered ones to what three in four reached") {
  Trainer steady, scattered;
  for (uint64_t bubble_ms : {4, 4, 4, 4, 4, 4}) {
    steady.busy();
    for (uint64_t i = 0; i < bubble_ms; ++i) steady.idle();
  }
  for (uint64_t bubble_ms : {2, 6, 3, 5, 2, 6, 4, 5}) {
    scattered.busy();
    for (uint64_t i = 0; i < bubble_ms; ++i) scattered.idle();
  }
  steady.busy();
  scattered.busy();
  steady.idle();
  scattered.idle();
  CHECK(steady.d.predicted_bubble_end_ns() == steady.d.phase_started_ns() + 4 * kMs);
  // 2 2 3 4 5 5 6 6: two of the eight ended before 3 ms.
  CHECK(scattered.d.predicted_bubble_end_ns() == scattered.d.phase_started_ns() + 3 * kMs);
}

TEST_CASE("BubbleDetector: a bubble is predicted from those that lasted as long as it has") {
  // A pipeline stage: three short gaps between micro-batches, then the long wait for the
  // gradients, each iteration. The mean (6 ms) predicted every bubble to end within a few
  // milliseconds, the long one too, and the fillers were granted nothing in the rest of it.
  Trainer tr;
  for (int it = 0; it < 8; ++it) {
    for (uint64_t bubble_ms : {1, 1, 2, 20}) {
      for (int i = 0; i < 3; ++i) tr.busy();
      for (uint64_t i = 0; i < bubble_ms; ++i) tr.idle();
    }
  }
  tr.busy();
  REQUIRE(tr.idle() == GpuPhase::bubble);
  const uint64_t start = tr.d.phase_started_ns();
  CHECK(tr.d.predicted_bubble_end_ns() == start + 1 * kMs);  // most bubbles are short
  tr.idle();  // it has lasted 1 ms: a 2 or a 20 ms one, the 2 ms ones half of them
  CHECK(tr.d.predicted_bubble_end_ns() == start + 2 * kMs);
  tr.idle();  // 2 ms: only the long kind lasted longer
  CHECK(tr.d.predicted_bubble_end_ns() == start + 20 * kMs);
  for (int i = 3; i < 20; ++i) tr.idle();
  CHECK(tr.d.predicted_bubble_end_ns() == start + 20 * kMs);
  tr.idle();  // 20 ms: longer than any learned, about to end
  CHECK(tr.d.predicted_bubble_end_ns() == tr.t);
  CHECK(tr.d.mean_bubble_ns() > 2 * kMs);  // the mean shown still averages every bubble
  CHECK(tr.d.mean_bubble_ns() < 20 * kMs);
}

TEST_CASE("BubbleDetector: the prediction follows the last bubbles, not every one since start") {
  Trainer tr;
  for (size_t b = 0; b < BubbleDetector::kHistory; ++b) {
    tr.busy();
    for (int i = 0; i < 2; ++i) tr.idle();
  }
  for (size_t b = 0; b < BubbleDetector::kHistory; ++b) {  // the job changed: 10 ms bubbles now
    tr.busy();
    for (int i = 0; i < 10; ++i) tr.idle();
  }
  tr.busy();
  tr.idle();
  CHECK(tr.d.predicted_bubble_end_ns() == tr.d.phase_started_ns() + 10 * kMs);
}

TEST_CASE("BubbleDetector: the start-up busy phase does not skew the busy mean") {
  Trainer tr;
  for (int i = 0; i < 10; ++i) tr.busy();  // joined mid-iteration: 10 ms observed
  tr.idle();
  tr.busy();
  tr.busy();
  tr.idle();
  CHECK(tr.d.mean_busy_ns() == 2 * kMs);
  CHECK(tr.d.mean_bubble_ns() == 1 * kMs);
}

TEST_CASE("BubbleDetector: a collective's tail and a data-loading pause are predicted each by its kind") {
  // Data parallelism: compute, the all-reduce's tail (the optimizer queued behind it), the
  // optimizer, then data loading. Averaged together (4 and 20 ms), a data-loading bubble was
  // predicted to end after about 7 ms.
  Trainer tr;
  auto iteration = [&](bool check_prediction) {
    for (int i = 0; i < 5; ++i) tr.busy();
    uint64_t t = tr.t;
    tr.t += kMs;
    tr.d.update({tr.t, tr.launches, tr.recorded, tr.completed, true});  // compute done, collective running
    if (check_prediction) {
      CHECK(tr.d.bubble_in_collective());
      CHECK(tr.d.predicted_bubble_end_ns() == t + kMs + 4 * kMs);
    }
    for (int i = 1; i < 4; ++i) {
      tr.t += kMs;
      tr.d.update({tr.t, tr.launches, tr.recorded, tr.completed, true});
    }
    tr.busy();  // the optimizer
    t = tr.t;
    CHECK(tr.idle() == GpuPhase::bubble);  // data loading
    if (check_prediction) {
      CHECK_FALSE(tr.d.bubble_in_collective());
      CHECK(tr.d.predicted_bubble_end_ns() == t + kMs + 20 * kMs);
    }
    for (int i = 1; i < 20; ++i) tr.idle();
  };
  for (int i = 0; i < 3; ++i) iteration(false);
  iteration(true);
  CHECK(tr.d.mean_bubble_ns() > 4 * kMs);  // the profile shown still averages every bubble
  CHECK(tr.d.mean_bubble_ns() < 20 * kMs);
}

TEST_CASE("BubbleDetector: a bubble that goes on once its collective is over is one bubble, its rest predicted from then") {
  // A collective with nothing queued behind it, then data loading: one quiet stretch. The
  // fill policy sees one bubble (its ramp is not started again); the rest is predicted from
  // the collective's end with the length learned for quiet without a collective.
  Trainer tr;
  auto quiet = [&](bool communicating) {
    tr.t += kMs;
    return tr.d.update({tr.t, tr.launches, tr.recorded, tr.completed, communicating});
  };
  for (int it = 0; it < 4; ++it) {
    for (int i = 0; i < 5; ++i) tr.busy();
    REQUIRE(quiet(true) == GpuPhase::bubble);
    const uint64_t started = tr.d.phase_started_ns();
    for (int i = 1; i < 4; ++i) quiet(true);  // 4 ms of the collective
    REQUIRE(quiet(false) == GpuPhase::bubble);  // over: the same bubble goes on
    CHECK(tr.d.phase_started_ns() == started);
    CHECK_FALSE(tr.d.bubble_in_collective());
    if (it == 3) CHECK(tr.d.predicted_bubble_end_ns() == tr.t + 20 * kMs);
    for (int i = 1; i < 20; ++i) quiet(false);  // 20 ms in all after it
  }
  tr.busy();
  CHECK(tr.d.bubbles() == 4);
  CHECK(tr.d.mean_bubble_ns() == 24 * kMs);  // the bubbles as the policy saw them
}
