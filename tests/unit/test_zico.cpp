// Zico: learning a training job's memory curve from sampled bytes in use, the time shift that
// keeps two jobs under a budget, and the policy's permits (docs/zico.md).
#include <catch2/catch.hpp>
#include <optional>

#include "memory_curve.h"
#include "zico_policy.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;
constexpr uint64_t kMiB = 1ull << 20;

// A training job's use `t` ms into a 40 ms iteration: 64 MiB of weights, a forward pass of
// 10 ms rising by 32 MiB per 2.5 ms to 192 MiB, a backward pass of 10 ms falling back, then
// 20 ms at the trough (communication, data loading).
uint64_t triangle(uint64_t t_ms) {
  uint64_t weights = 64 * kMiB;
  if (t_ms < 10) return weights + (t_ms * 2 / 5 + 1) * 32 * kMiB;
  if (t_ms < 20) return weights + (4 - (t_ms - 10) * 2 / 5) * 32 * kMiB;
  return weights;
}

// Feeds `iterations` iterations of `triangle` starting at `t0`, one sample per ms; the time after.
uint64_t feed(MemoryCurve& c, uint64_t t0, int iterations) {
  uint64_t t = t0;
  for (int i = 0; i < iterations; ++i)
    for (uint64_t ms = 0; ms < 40; ++ms, t += kMs) c.add(t, triangle(ms));
  return t;
}
}  // namespace

TEST_CASE("MemoryCurve: learns the trough, the peak, the period and the iteration's shape", "[zico]") {
  MemoryCurve c(kMs);
  c.add(0, 0);  // registered, nothing allocated yet: no trough to learn
  feed(c, kMs, 1);
  CHECK_FALSE(c.learned());
  uint64_t t = feed(c, 41 * kMs, 3);
  REQUIRE(c.learned());
  CHECK(c.trough_bytes() == 64 * kMiB);
  CHECK(c.peak_bytes() == 192 * kMiB);
  CHECK(c.period_ns() == 40 * kMs);
  // Between iterations the use is at most the threshold; one layer's activations pass it.
  CHECK(c.threshold_bytes() >= 64 * kMiB);
  CHECK(c.threshold_bytes() < 96 * kMiB);
  // The curve: the forward pass rising to the peak, the backward pass falling, then the trough.
  CHECK(c.active_ns() >= 19 * kMs);
  CHECK(c.active_ns() <= 21 * kMs);
  CHECK(c.at(0) == 96 * kMiB);
  CHECK(c.at(9 * kMs) == 192 * kMiB);
  CHECK(c.at(17 * kMs) < c.at(9 * kMs));
  CHECK(c.at(30 * kMs) == 64 * kMiB);
  CHECK_FALSE(c.in_iteration());
  c.add(t, triangle(0));
  CHECK(c.in_iteration());
  CHECK(c.started_ns() == t);
}

TEST_CASE("MemoryCurve: a start tandemd allowed aligns the iteration, the delay before the rise included",
          "[zico]") {
  MemoryCurve c(kMs);
  uint64_t t = feed(c, 0, 3);
  c.mark_start(t);
  c.add(t, 64 * kMiB);           // allowed, not allocated yet
  c.add(t + kMs, 64 * kMiB);     // still at the trough
  c.add(t + 2 * kMs, 96 * kMiB); // the first activation
  CHECK(c.in_iteration());
  CHECK(c.started_ns() == t);
}

TEST_CASE("MemoryCurve: weights allocated late do not make an iteration", "[zico]") {
  MemoryCurve c(kMs);
  // A small first allocation, then the weights two seconds later: the trough moves.
  for (uint64_t ms = 0; ms < 100; ++ms) c.add(ms * kMs, 1 * kMiB);
  for (uint64_t ms = 100; ms < 3200; ++ms) c.add(ms * kMs, 64 * kMiB);
  CHECK(c.iterations() == 0);
  feed(c, 3200 * kMs, 3);
  CHECK(c.learned());
  CHECK(c.at(9 * kMs) == 192 * kMiB);
}

TEST_CASE("time_shift: two jobs whose forward passes meet are shifted by the offset that keeps them under the budget",
          "[zico]") {
  MemoryCurve a(kMs), b(kMs);
  feed(a, 0, 3);
  feed(b, 0, 3);
  REQUIRE(a.learned());
  REQUIRE(b.learned());
  // Both at their peaks together: 2 x 192 MiB. A peak beside a trough: 256 MiB.
  const uint64_t budget = 300 * kMiB;
  RunningJob other{&b, RunningJob::State::running, 0};  // b starts now too
  std::optional<uint64_t> shift = time_shift(a, {other}, budget, 200 * kMs);
  REQUIRE(shift);
  CHECK(*shift > 0);
  // The prediction holds at the shift found, and one bin earlier it does not.
  auto peak_sum = [&](uint64_t s) {
    uint64_t worst = 0;
    for (uint64_t x = 0; x < a.active_ns(); x += kMs) worst = std::max(worst, a.at(x) + predicted_use(other, s + x));
    return worst;
  };
  CHECK(peak_sum(*shift) <= budget);
  CHECK(peak_sum(*shift - kMs) > budget);
  // With room for both peaks, no shift; with room for neither beside the other's trough, none.
  CHECK(time_shift(a, {other}, 400 * kMiB, 200 * kMs) == 0u);
  CHECK_FALSE(time_shift(a, {other}, 200 * kMiB, 200 * kMs));
  // A job in its backward pass already: a's peak meets b's fall, a smaller shift than from b's start.
  RunningJob falling{&b, RunningJob::State::running, 12 * kMs};
  std::optional<uint64_t> later = time_shift(a, {falling}, budget, 200 * kMs);
  REQUIRE(later);
  CHECK(*later < *shift);
  // A job held between iterations stays at its trough: a starts at once.
  RunningJob held{&b, RunningJob::State::held, 0};
  CHECK(time_shift(a, {held}, budget, 200 * kMs) == 0u);
}

TEST_CASE("time_shift: a job later than its curve keeps what it holds", "[zico]") {
  MemoryCurve a(kMs), b(kMs);
  feed(a, 0, 3);
  uint64_t t = feed(b, 0, 3);
  for (uint64_t ms = 0; ms < 10; ++ms) b.add(t + ms * kMs, triangle(ms));  // b's forward pass ...
  for (uint64_t ms = 10; ms < 40; ++ms) b.add(t + ms * kMs, 192 * kMiB);   // ... stalls at its peak
  REQUIRE(b.in_iteration());
  RunningJob late{&b, RunningJob::State::running, 40 * kMs};
  CHECK(predicted_use(late, 100 * kMs) == 192 * kMiB);
  CHECK_FALSE(time_shift(a, {late}, 300 * kMiB, 200 * kMs));
}

namespace {
// Two clients driven through the policy, one sample per ms, as tandemd's tick sees them.
struct TwoJobs {
  ZicoPolicy policy{kMs};
  TwoJobs() = default;
  explicit TwoJobs(uint64_t profile_ns) : policy(kMs, profile_ns) {}
  std::vector<ZicoDecision> decisions;
  uint64_t now = 0;
  std::vector<ZicoDecision> step(std::vector<ZicoSample> samples, uint64_t budget) {
    now += kMs;
    policy.step(now, samples, budget, decisions);
    return decisions;
  }
};
}  // namespace

TEST_CASE("ZicoPolicy: alone, a job is never held; a second job profiles alone, then waits for the offset",
          "[zico]") {
  TwoJobs z;
  const uint64_t budget = 300 * kMiB;
  // Job in slot 0 alone for three iterations: learned, nothing published.
  for (int i = 0; i < 3; ++i)
    for (uint64_t ms = 0; ms < 40; ++ms) {
      auto d = z.step({{0, 1, triangle(ms), 0, false}}, budget);
      REQUIRE(d.size() == 1);
      CHECK(d[0].trough_bytes == 0);
      CHECK_FALSE(d[0].shared);  // alone: its pool keeps its chunks
      CHECK_FALSE(d[0].grant);
    }
  REQUIRE(z.policy.curve(0)->learned());
  // Slot 1 arrives: it must wait at its first allocation (profiling), slot 0 at its trough.
  auto d = z.step({{0, 1, triangle(0), 0, false}, {1, 1, 0, 0, true}}, budget);
  CHECK(d[0].trough_bytes == z.policy.curve(0)->threshold_bytes());
  CHECK(d[1].trough_bytes == UINT64_MAX);
  CHECK((d[0].shared && d[1].shared));
  CHECK_FALSE(d[1].grant);  // slot 0 is in its forward pass
  // Slot 0 reaches its trough and waits: slot 1 may profile; slot 0 gets no permit meanwhile.
  bool granted = false;
  for (uint64_t ms = 1; ms < 40 && !granted; ++ms) {
    bool waits = ms >= 20;
    d = z.step({{0, 1, triangle(ms), 0, waits}, {1, 1, 0, 0, true}}, budget);
    CHECK_FALSE(d[0].grant);
    granted = d[1].grant;
  }
  REQUIRE(granted);
  CHECK(d[1].permits == 1);
  // Slot 1 runs its iterations (the same shape) while slot 0 waits, until its curve is learned;
  // slot 0 starts at the first trough of slot 1's after that.
  bool slot0_started = false;
  for (int i = 0; i < 5 && !slot0_started; ++i)
    for (uint64_t ms = 0; ms < 40 && !slot0_started; ++ms) {
      bool learned_before = z.policy.curve(1)->learned();
      d = z.step({{0, 1, 64 * kMiB, 0, true}, {1, 1, triangle(ms), 1, false}}, budget);
      slot0_started = d[0].grant;
      if (slot0_started) {
        CHECK(ms >= 20);  // slot 1 between iterations
        CHECK((learned_before || z.policy.curve(1)->learned()));
      }
    }
  REQUIRE(slot0_started);
  // Slot 0 runs; slot 1 reaches its next iteration at once and waits: its permit comes when its
  // iteration beside slot 0's fits the budget, after slot 0's peak, not at once.
  uint64_t k = 0;  // ms since slot 0's permit
  bool slot1_started = false;
  while (k < 40 && !slot1_started) {
    d = z.step({{0, 1, triangle(k), 1, false}, {1, 1, 64 * kMiB, 1, true}}, budget);
    ++k;
    slot1_started = d[1].grant;
  }
  REQUIRE(slot1_started);
  CHECK(d[1].permits == 2);
  CHECK(k > 5);   // not while slot 0's forward pass would meet slot 1's
  CHECK(k < 20);  // before slot 0's backward pass is over: the peaks are shifted, not serialized
  // What the policy predicted at that moment fits: slot 1 from now beside slot 0 from k ms in.
  RunningJob slot0{z.policy.curve(0), RunningJob::State::running, k * kMs};
  CHECK(time_shift(*z.policy.curve(1), {slot0}, budget, 0) == 0u);
}

TEST_CASE("ZicoPolicy: a client gone or replaced is forgotten; one left alone is not held", "[zico]") {
  TwoJobs z;
  for (uint64_t ms = 0; ms < 5; ++ms) z.step({{0, 1, triangle(ms), 0, false}, {1, 1, triangle(ms), 0, false}}, 1);
  auto d = z.step({{0, 1, 64 * kMiB, 0, true}}, 1);
  REQUIRE(d.size() == 1);
  CHECK(d[0].trough_bytes == 0);
  CHECK_FALSE(d[0].shared);
  CHECK(d[0].grant);  // a waiting job alone is let go
  CHECK(z.policy.status().size() == 1);
}

TEST_CASE("ZicoPolicy: a job slower than its curve is not predicted to free what it still holds", "[zico]") {
  TwoJobs z;
  const uint64_t budget = 300 * kMiB;
  // Both curves learned as in the test above: slot 0 alone, then slot 1 profiling while slot 0
  // waits at its trough.
  for (int i = 0; i < 3; ++i)
    for (uint64_t ms = 0; ms < 40; ++ms) z.step({{0, 1, triangle(ms), 0, false}}, budget);
  for (uint64_t ms = 0; ms < 40; ++ms) z.step({{0, 1, triangle(ms), 0, ms >= 20}, {1, 1, 0, 0, true}}, budget);
  bool slot0_granted = false;
  for (int i = 0; i < 6 && !slot0_granted; ++i)
    for (uint64_t ms = 0; ms < 40 && !slot0_granted; ++ms)
      slot0_granted = z.step({{0, 1, 64 * kMiB, 0, true}, {1, 1, triangle(ms), 1, ms >= 20}}, budget)[0].grant;
  REQUIRE(slot0_granted);
  REQUIRE(z.policy.curve(1)->learned());
  // Slot 0 now runs at half its learned speed (another job, the host); slot 1 waits at its
  // trough. Followed by time, slot 0 would be predicted in its backward pass 10 ms in while it
  // still rises; slot 1's start beside it would meet its peak (192 + 192 MiB > 300).
  bool slot1_granted = false;
  uint64_t t = 0;
  for (; t < 80 && !slot1_granted; ++t) {
    auto d = z.step({{0, 1, triangle(t / 2), 1, false}, {1, 1, 64 * kMiB, 1, true}}, budget);
    slot1_granted = d[1].grant;
    if (slot1_granted) {
      CHECK(t / 2 >= 10);  // slot 0 seen past its peak (its backward pass started at 20 ms)
      // Slot 1's iteration fits beside slot 0's at the pace slot 0 keeps (half its curve's).
      for (uint64_t x = 0; x < 40; ++x) CHECK(triangle(x) + triangle((t + x) / 2) <= budget);
    }
  }
  CHECK(slot1_granted);  // in slot 0's slow backward pass, not only after it
  CHECK(t / 2 < 20);
}

TEST_CASE("ZicoPolicy: a newcomer slow to start profiles within TANDEM_ZICO_PROFILE_MS", "[zico]") {
  // Slot 1's first allocation comes 7 s before its first iteration (a framework's start-up:
  // its weights, then seconds of host work), as PyTorch's does on a busy host. With the default
  // 5 s its profiling holds slot 0 for 5 s of that only, and its start-up then meets slot 0's
  // iterations; with 10 s it holds slot 0 through its start-up, and slot 0 runs again only once
  // slot 1's curve is learned.
  for (uint64_t profile_s : {5, 10}) {
    TwoJobs z(profile_s * 1000 * kMs);
    const uint64_t budget = 300 * kMiB;
    for (int i = 0; i < 3; ++i)
      for (uint64_t ms = 0; ms < 40; ++ms) z.step({{0, 1, triangle(ms), 0, false}}, budget);
    REQUIRE(z.policy.curve(0)->learned());
    // Slot 0 runs to its trough and waits; slot 1 waits at its first allocation, then is let profile.
    bool granted = false;
    for (uint64_t ms = 0; ms < 40 && !granted; ++ms)
      granted = z.step({{0, 1, triangle(ms), 0, ms >= 20}, {1, 1, 0, 0, true}}, budget)[1].grant;
    REQUIRE(granted);
    // One ms with slot 1 at `slot1_bytes`; slot 0 waits at its trough until its first permit.
    std::optional<uint64_t> slot0_let_go_ms;
    uint64_t elapsed_ms = 0;
    std::vector<ZicoDecision> at_6s;  // in slot 1's start-up, after the 5 s allowance
    auto tick = [&](uint64_t slot1_bytes) {
      auto d = z.step({{0, 1, 64 * kMiB, 0, !slot0_let_go_ms}, {1, 1, slot1_bytes, 1, false}}, budget);
      if (elapsed_ms == 6000) at_6s = d;
      if (d[0].grant && !slot0_let_go_ms) slot0_let_go_ms = elapsed_ms;
      ++elapsed_ms;
    };
    // Its start-up: its weights (64 MiB) held for 7 s. Then its iterations.
    for (uint64_t ms = 0; ms < 7000; ++ms) tick(64 * kMiB);
    for (int i = 0; i < 5; ++i)
      for (uint64_t ms = 0; ms < 40; ++ms) tick(triangle(ms));
    INFO("TANDEM_ZICO_PROFILE_MS " << profile_s << " s; slot 0 let go after " << slot0_let_go_ms.value_or(0) << " ms");
    REQUIRE(slot0_let_go_ms);
    CHECK(z.policy.curve(1)->learned());
    if (profile_s == 5) {
      CHECK(*slot0_let_go_ms >= 4990);  // held for the allowance,
      CHECK(*slot0_let_go_ms < 5100);   // not for the rest of slot 1's start-up
      // Its profiling over, it publishes no trough (it never waits), but it still shares the
      // GPU: its pool gives idle chunks back at once, for slot 0.
      REQUIRE(at_6s.size() == 2);
      CHECK(at_6s[1].trough_bytes == 0);
      CHECK(at_6s[1].shared);
      CHECK(at_6s[0].shared);
    } else {
      CHECK(*slot0_let_go_ms > 7000);  // held through the start-up, until slot 1's curve was known
      CHECK_FALSE(z.policy.status()[1].unshaped);
      CHECK(z.policy.profile_hold_ns() >= 7000 * kMs);
    }
  }
}
