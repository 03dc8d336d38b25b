#include "slot_board.h"

namespace tandem::k8s {

std::vector<std::string> SlotBoard::update(double now_s, const std::optional<NodeReport>& report,
                                           const std::set<std::string> (&in_use)[2]) {
  std::lock_guard lock(mutex_);
  const uint64_t before[2] = {slots_.version(SlotResource::bubble), slots_.version(SlotResource::slo)};
  slots_.update(now_s, report, in_use);
  if (slots_.version(SlotResource::bubble) != before[0] || slots_.version(SlotResource::slo) != before[1])
    changed_.notify_all();
  return slots_.take_messages();
}

std::optional<std::vector<Device>> SlotBoard::wait_for_change(SlotResource r, uint64_t& seen,
                                                              std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!changed_.wait_for(lock, timeout, [&] { return stopping_ || slots_.version(r) != seen; }) || stopping_)
    return std::nullopt;
  seen = slots_.version(r);
  return slots_.devices(r);
}

std::vector<Device> SlotBoard::devices(SlotResource r) {
  std::lock_guard lock(mutex_);
  return slots_.devices(r);
}

std::optional<ContainerGrant> SlotBoard::grant(const std::vector<std::string>& ids, SlotResource r, std::string& error) {
  std::lock_guard lock(mutex_);
  return grant_for(ids, r, slots_, options_, error);
}

void SlotBoard::stop() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  changed_.notify_all();
}

bool SlotBoard::stopping() {
  std::lock_guard lock(mutex_);
  return stopping_;
}

}  // namespace tandem::k8s
