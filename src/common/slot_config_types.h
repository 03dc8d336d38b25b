// The slots a node offers Kubernetes (docs/kubernetes.md), configured by tandemd's key "slots"
// (`tandemd --config`): the configuration's fields, which the scheduler's capacity reads
// without JSON (slot_config.h reads and writes them as JSON, for tandemd and the plugin alike).
//
// A slot is a unit of a GPU a pod asks for: a share of the GPU's time and a memory quota.
// `tandem.io/bubble` slots are best-effort fillers of training's bubbles, `tandem.io/slo`
// slots latency-bound online inference (policy slo). How many a GPU offers follows what
// tandemd measures; the rest of the keys say how fast and how carefully it follows.
#pragma once
#include <cstdint>
#include <string>

#include "settings.h"

namespace tandem {

struct SlotKind {
  double share = 0;           // the GPU time one slot stands for, (0, 1]
  std::string memory_text;    // its memory quota as given: "4G", "10%"
  MemorySize memory;          // the same, parsed
  uint32_t max = 0;           // devices listed per GPU (healthy or not), 0..64
};

struct SlotConfig {
  SlotKind bubble;
  SlotKind slo;
  double margin = 0.05;         // GPU time never offered, a safety margin
  double hysteresis = 0.05;     // the band (of GPU time) a measure must cross to change a count
  double training_keep = 0.5;   // policy slo: the share of the GPU training keeps
  double slo_headroom = 0.2;    // no new slo slot while an online target has less headroom
  double window_s = 60;         // the long window: pressure (capacity that stays gone)
  double fast_window_s = 2;     // the short window the slot counts follow
  double grow_after_s = 3;      // a larger count must hold this long before it is offered
  double min_interval_s = 60;   // and no growth sooner than this after a fall
  double stale_after_s = 30;    // tandemd silent (or not measuring) this long: no free slot offered
  SlotConfig();
};

}  // namespace tandem
