// Policy slo's live SM partition (HARLI's scheduler, docs/slo.md): under MPS, with training
// processes that hold green-context partitions, the part of the SMs training keeps while an
// online request runs. Pure logic, one decision per control period.
//
// The levels are the partitions the training processes prepared (ascending percentages of the
// GPU's SMs) and, above them, every SM (100: no partition). A control period's latency over its
// target, y, says little alone: with 20 to 40 requests its p99 is the slowest one, and Poisson
// arrivals queue behind each other whatever training does (the same bursts lift a period to 2.5
// times the target with training on a quarter of the SMs or not at all). So the decision signal
// is the median of the last kRecent periods at the level in force (the lower of two, or the one,
// right after arriving at it): one period over the target leaves a level just entered from below
// (a probe retreats at once), two of three leave any other. Then (HARLI: the partition whose
// latency is closest under the target):
//   signal > 1            one level down (below the lowest, the duty cycle takes over:
//                         below_lowest()), but see the slowdown below
//   signal <= kClimbBelow  after kRecent periods at the level, one level up, unless that level
//                          failed when last there
//   otherwise             stay
// That signal cannot tell training's doing from inference's own tail, nor see a larger
// partition slow every request by a tenth or two while each period's slowest request stays
// under a target set a few percent above the whole run's p99 (which the rare burst periods
// set). So the controller also keeps, per level, the requests' mean latency there (the lower of
// two periods' or the median of three, from the clients' running mean `request_ns`; not the
// first period at a level, whose running mean still holds the level before), and judges a level by its
// slowdown over the level below: HARLI's co-run model (co-located latency = solo latency x a
// slowdown), measured as the slowdown. A level is left when it slows the requests by more than
// kSlowdown, or when the signal is over the target and the slowdown is unknown or more than
// half that; over the target at the level below's speed is inference's own tail, which fewer
// SMs for training would not shorten, and the level stays. With the mean known a level is tried
// once the one below holds the target (the slowdown guards the step); without it, once it is
// at most kClimbBelow of it.
// A level left for going over the target is tried again only after a back-off: kBackoff periods,
// doubled at each failure in a row up to kBackoffMax, reset once it holds for kRecent periods
// (so a level wrongly blamed for a burst returns soon, one truly too large costs a period or
// two now and then). A fixed level (the operator's choice) never moves. Starts at the smallest
// partition, so that every larger one is judged against the one below.
// What the requests' kernels need (fit()): a kernel of fewer thread blocks than the GPU has SMs
// spreads over that many SMs, one block each, and runs at its full speed only where they are
// free; on fewer its blocks run in more waves and it lasts longer by the ratio of the SMs it
// wanted to those it got, which a target a few percent above Exclusive's latency cannot afford
// (the mean-latency guard above sees it only periods later, after the p99 has paid). So when
// the requests' widest kernel is known and narrower than the GPU, the highest level that leaves
// it its SMs is a ceiling the controller never climbs past and, the first time it is known, its
// start (HARLI's predicted partition at a request's onset: the largest that holds the target;
// the measurements above still take it lower). Kernels as wide as the GPU or wider leave no
// such room: the controller climbs on its measurements alone, as above.
#pragma once
#include <cstdint>

#include "tandem/shm_abi.h"

namespace tandem::scheduler {

// The partitions a training process's flags say it holds (TANDEM_TRAINING_LIVE bits), as
// ascending percentages into `out` (TANDEM_LIVE_PARTITIONS, 0-padded). Returns how many.
unsigned live_levels(uint32_t training_flags, uint8_t out[TANDEM_LIVE_PARTITIONS]);

class PartitionController {
 public:
  static constexpr int kMaxLevels = TANDEM_LIVE_PARTITIONS + 1;
  static constexpr double kClimbBelow = 0.85;  // headroom before trying more SMs, without the requests' mean
  static constexpr int kRecent = 3;
  static constexpr int kBackoff = 5, kBackoffMax = 40;  // periods: 1 s and 8 s at the default period
  static constexpr double kSlowdown = 0.08;  // a larger partition may slow the requests' mean this much

  // The training processes' partitions (ascending, 0-terminated, at most TANDEM_LIVE_PARTITIONS);
  // `fixed`: a level the operator chose (one of them, or 100), 0: the controller chooses.
  // Returns false when they hold no level (nothing to control).
  bool configure(const uint8_t* pcts, unsigned count, uint32_t fixed);
  bool configured() const { return levels_ > 1; }
  // The SMs the requests' widest kernel spreads over, in percent of the GPU's (0: not known,
  // 100: as wide as the GPU). Every period's step, after configure().
  void fit(uint32_t width_pct);
  // The highest level the controller may take (levels() - 1: no ceiling).
  int ceiling() const { return ceiling_; }

  // One control period in which level_pct() was in force, with latency over target `y` and
  // the requests' mean latency `mean_ns` (0: unknown). `may_climb`: false while the duty cycle
  // is below 1 (it comes back first).
  void update(double y, double mean_ns = 0, bool may_climb = true);
  // The filtered latency over target the decisions use (see above).
  double signal() const;
  // A period without a measurement: nothing learned, back-offs run on.
  void skip();

  uint32_t level_pct() const { return configured() ? pct_[level_] : 100; }
  int level() const { return level_; }
  // y > 1 at the lowest level: even the smallest partition misses the target.
  bool below_lowest() const { return below_lowest_; }
  // What the controller measured at a level (its average latency over target; -1: nothing yet).
  double remembered(int level) const { return measured_[level] ? y_[level] : -1.0; }
  int levels() const { return levels_; }
  uint32_t level_pct_at(int level) const { return pct_[level]; }

 private:
  void tick();
  void enter(int level);
  double median_of_recent(const double* v, int at_least = 1) const;
  uint32_t pct_[kMaxLevels] = {};
  double y_[kMaxLevels] = {};
  bool measured_[kMaxLevels] = {};
  int failures_[kMaxLevels] = {};     // times in a row it was left over the target
  int retry_after_[kMaxLevels] = {};  // periods before it may be tried again
  double recent_[kRecent] = {};       // the last periods at the level in force
  double recent_mean_[kRecent] = {};  // their requests' mean latency
  int recent_count_ = 0;
  double mean_[kMaxLevels] = {};      // the requests' mean latency when last at the level (0: unknown)
  bool probing_ = false;              // entered from the level below (a larger partition tried)
  int levels_ = 0;
  int level_ = 0;
  int ceiling_ = 0;
  bool fitted_ = false;  // a known width has set the start
  bool fixed_ = false;
  bool below_lowest_ = false;
};

}  // namespace tandem::scheduler
