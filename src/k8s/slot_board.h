// The device plugin's shared state: the node's slots (node_slots.h) behind one lock, updated
// by the main loop once a poll and read by the gRPC handlers (ListAndWatch waits here for a
// change; Allocate and GetPreferredAllocation read the lists). Nothing here waits on tandemd
// or the kubelet with the lock held.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "allocate.h"
#include "node_slots.h"

namespace tandem::k8s {

class SlotBoard {
 public:
  explicit SlotBoard(AllocateOptions options) : options_(std::move(options)) {}
  // One poll's reading; returns the messages for the log.
  std::vector<std::string> update(double now_s, const std::optional<NodeReport>& report,
                                  const std::set<std::string> (&in_use)[2]);
  // The list of `r` once its version differs from `seen` (at once if it does), or nullopt after
  // `timeout` or once stop() was called. `seen` becomes the version returned.
  std::optional<std::vector<Device>> wait_for_change(SlotResource r, uint64_t& seen, std::chrono::milliseconds timeout);
  std::vector<Device> devices(SlotResource r);
  std::optional<ContainerGrant> grant(const std::vector<std::string>& ids, SlotResource r, std::string& error);
  const AllocateOptions& options() const { return options_; }  // fixed at start
  // Wakes every waiter for good (the plugin is stopping).
  void stop();
  bool stopping();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  NodeSlots slots_;
  AllocateOptions options_;
  bool stopping_ = false;
};

}  // namespace tandem::k8s
