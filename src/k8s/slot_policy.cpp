#include "slot_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tandem::k8s {

namespace {

// Whole slots of `per` in `x` (a hair of rounding forgiven: 0.3 / 0.1 is 3).
uint32_t whole(double x, double per) {
  if (!(x > 0) || !(per > 0)) return 0;
  return static_cast<uint32_t>(std::min(1e6, std::floor(x / per + 1e-9)));
}

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

std::string fraction(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", x);
  return text;
}

// The memory a slot of `kind` takes on `gpu`; an error when it is more than the GPU has.
uint64_t slot_memory(const GpuReport& gpu, const SlotKind& kind, const char* resource, std::string& error) {
  uint64_t quota = memory_size_bytes(kind.memory, gpu.memory_total_bytes);
  if (quota > gpu.memory_total_bytes)
    error = std::string("a ") + resource + " slot's memory, " + kind.memory_text + " (" + gib(quota) +
            "), is more than GPU " + gpu.uuid + " has (" + gib(gpu.memory_total_bytes) + "): none offered there";
  return quota;
}

// The bounds of a measure `x` that supports whole(x) slots, capped.
SlotBounds bounded(double x, double band, double per, uint32_t cap, uint32_t base = 0) {
  auto at = [&](double y) { return std::min(cap, base + whole(y, per)); };
  return {at(x - band / 2), at(x + band / 2), at(x + 1.5 * band), ""};
}

SlotBounds fixed(uint32_t n) { return {n, n, n, ""}; }

}  // namespace

SlotBounds bubble_bounds(const GpuReport& gpu, const SlotConfig& config, uint32_t slo_reserved) {
  const SlotKind& k = config.bubble;
  SlotBounds none;
  if (k.share > 1 - config.margin)
    none.error = "a tandem.io/bubble slot's share, " + fraction(k.share) + ", is more than a GPU offers (1 - margin = " +
                 fraction(1 - config.margin) + "): none offered";
  if (!k.max || !none.error.empty() || !gpu.memory_total_bytes) return none;  // size not reported yet: none
  uint64_t quota = slot_memory(gpu, k, "tandem.io/bubble", none.error);
  if (!none.error.empty()) return none;
  // Training's peak first, then the slo slots offered beside the fillers, each its quota.
  uint64_t room = gpu.memory_total_bytes - std::min(gpu.memory_total_bytes, gpu.training_peak_bytes);
  std::string ignored;
  uint64_t slo_quota = slot_memory(gpu, config.slo, "tandem.io/slo", ignored);
  room -= std::min(room, static_cast<uint64_t>(slo_reserved) * slo_quota);
  const uint32_t cap = std::min<uint64_t>(k.max, room / quota);
  return bounded(gpu.bubble_share - config.margin, config.hysteresis, k.share, cap);
}

SlotBounds slo_bounds(const GpuReport& gpu, const SlotConfig& config, uint32_t in_use) {
  const SlotKind& k = config.slo;
  SlotBounds none;
  if (!gpu.slo_policy || !k.max) return none;  // latency is protected only under policy slo
  const double online_share = 1 - config.training_keep - config.margin;
  if (k.share > online_share)
    none.error = "a tandem.io/slo slot's share, " + fraction(k.share) +
                 ", is more than online inference may take (1 - training_keep - margin = " + fraction(online_share) +
                 "): none offered";
  if (!none.error.empty() || !gpu.memory_total_bytes) return none;
  uint64_t quota = slot_memory(gpu, k, "tandem.io/slo", none.error);
  if (!none.error.empty()) return none;
  uint64_t room = gpu.memory_total_bytes - std::min(gpu.memory_total_bytes, gpu.training_peak_bytes);
  const uint32_t cap = std::min<uint64_t>({k.max, room / quota, whole(online_share, k.share)});
  const OnlineReport& o = gpu.online;
  // A target short of headroom, or one the policy cannot hold: the servers there keep their
  // slots, no new one is offered.
  if (o.saturated || o.below_floor || (o.headroom && *o.headroom < config.slo_headroom)) return fixed(std::min(in_use, cap));
  if (o.active && o.measured)  // what training has above what it must keep, in slots
    return bounded(o.training_duty - config.training_keep - config.margin, config.hysteresis, k.share, cap, in_use);
  return fixed(cap);
}

void SlotCount::step(double now_s, const SlotBounds& bounds, const SlotConfig& config) {
  const bool settling = grew_ && now_s - last_growth_s_ < config.min_interval_s;
  const uint32_t down = settling ? bounds.down_settling : bounds.down;
  if (down < count_) {
    count_ = down;
    growing_ = false;
    fell_ = true;
    last_fall_s_ = now_s;
    return;
  }
  if (bounds.up <= count_) {
    growing_ = false;
    return;
  }
  if (!growing_) {
    growing_ = true;
    grow_since_s_ = now_s;
    grow_to_ = bounds.up;
  }
  grow_to_ = std::min(grow_to_, bounds.up);
  if (now_s - grow_since_s_ >= config.grow_after_s && (!fell_ || now_s - last_fall_s_ >= config.min_interval_s)) {
    count_ = grow_to_;
    growing_ = false;
    grew_ = true;
    last_growth_s_ = now_s;
  }
}

}  // namespace tandem::k8s
