// What one GPU has room for beyond its training job (docs/kubernetes.md), from the state each
// tick finds: the share of its time fillers may use beside training (training's bubbles,
// outside the collectives the fill policy holds fillers through), over a short window, which
// tandem-device-plugin's slot counts follow, and over a long one, which says whether capacity
// stays gone; and from that the GPU's pressure: how far the fillers on it exceed the room it
// had over the long window (0: they fit, 1: no room at all). Exponentially weighted windows,
// normalized by the weight seen, so a young GPU's shares are those of its life so far.
//
// The short window takes whole cycles (a busy stretch and the bubble after it, as training's
// iterations make them): a share read mid-iteration would swing with the iteration (low at the
// end of its compute, high at the end of its bubble), and a poll once a second could catch it
// at the same point every time. The cycle in progress counts only once it is overdue (longer
// than twice the usual cycle, or than the window): then training's bubbles are late or gone,
// and the share falls as it goes on.
// Pure logic, time passed in; nothing allocated per tick.
#pragma once
#include <cstdint>

#include "gpu_usage.h"
#include "slot_config_types.h"

namespace tandem::scheduler {

class GpuCapacity {
 public:
  explicit GpuCapacity(const SlotConfig& config = SlotConfig()) : config_(config) {}
  // One tick: the GPU's state since the last, whether fillers could run in that time (a
  // bubble outside held collectives), and the fillers (batch-inference processes) on it.
  void update(uint64_t now_ns, GpuState state, bool fillable, uint32_t fillers);

  double measured_s() const { return measured_s_; }
  // Share of the time fillers could run beside training: short window, long window.
  double bubble_share() const;
  double bubble_share_long() const { return ratio(long_fillable_, long_weight_); }
  // The same, counting time without any training job as free (what fillers got).
  double free_share_long() const { return ratio(long_free_, long_weight_); }
  uint32_t fillers() const { return fillers_; }
  // How far the fillers' slots (each config.bubble.share) exceed the room the long window
  // measured (less the margin), in [0, 1]; 0 before the GPU was measured one long window.
  double pressure() const;

 private:
  static double ratio(double part, double whole) { return whole > 0 ? part / whole : 0; }
  void close_cycle();
  SlotConfig config_;
  bool started_ = false;
  uint64_t last_ns_ = 0;
  double measured_s_ = 0;
  bool was_filling_ = false;
  double cycle_s_ = 0, cycle_fillable_s_ = 0;  // the cycle in progress
  double mean_cycle_s_ = 0;
  double fast_weight_ = 0, fast_fillable_ = 0;  // over whole cycles
  double long_weight_ = 0, long_fillable_ = 0, long_free_ = 0;
  uint32_t fillers_ = 0;
};

}  // namespace tandem::scheduler
