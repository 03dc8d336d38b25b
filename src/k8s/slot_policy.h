// How many slots of each kind a GPU offers (docs/kubernetes.md), from tandemd's report.
//
// * Bounds. A measure (the bubble share for tandem.io/bubble; for tandem.io/slo, the training
//   share policy slo keeps) is read less half the hysteresis band (`up`: what a larger count
//   must be supported by) and plus half of it (`down`: below this the count must fall), and
//   plus one and a half bands (`down_settling`: the same, in the minute after a growth). All
//   are capped by memory: training's peak leaves the room, each slot takes its quota.
// * Counting (SlotCount). A count falls at once to `down` (`down_settling` in the
//   min_interval_s after a growth): capacity that is gone is gone. It grows to the least `up`
//   seen while a larger count held for grow_after_s without a break, never sooner than
//   min_interval_s after a fall. So a steady load does not flap: between a growth and a fall
//   the measure must cross the whole band, two bands within a minute of the growth, and a fall
//   and the next growth are a minute apart. Growths in a row (bubbles appearing) are not held
//   back: each waits only grow_after_s; nor is a measure that falls far (bubbles vanishing).
// Pure logic, time passed in.
#pragma once
#include <cstdint>
#include <string>

#include "slot_config.h"
#include "tandemd_report.h"

namespace tandem::k8s {

struct SlotBounds {
  uint32_t up = 0;             // what the measure supports less half the band: what a growth needs
  uint32_t down = 0;           // plus half the band (>= up): below it, the count falls
  uint32_t down_settling = 0;  // plus one and a half bands (>= down): the same, just after a growth
  std::string error;           // a slot that can never fit this GPU (then all are 0)
};

// tandem.io/bubble on `gpu`, leaving `slo_reserved` slo slots their memory.
SlotBounds bubble_bounds(const GpuReport& gpu, const SlotConfig& config, uint32_t slo_reserved);
// tandem.io/slo on `gpu` (none unless its policy is slo), `in_use` of them held by pods.
SlotBounds slo_bounds(const GpuReport& gpu, const SlotConfig& config, uint32_t in_use);

class SlotCount {
 public:
  // One current reading of the bounds at `now_s`.
  void step(double now_s, const SlotBounds& bounds, const SlotConfig& config);
  // tandemd silent, or its measure stale, for too long: no slot offered.
  void clear() { count_ = 0, growing_ = false; }
  uint32_t count() const { return count_; }

 private:
  uint32_t count_ = 0;
  bool growing_ = false;
  double grow_since_s_ = 0;
  uint32_t grow_to_ = 0;   // the least `up` seen while growing
  bool fell_ = false, grew_ = false;
  double last_fall_s_ = 0, last_growth_s_ = 0;
};

}  // namespace tandem::k8s
