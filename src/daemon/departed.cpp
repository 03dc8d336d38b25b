#include "departed.h"

#include <algorithm>
#include <utility>

namespace tandem::scheduler {

namespace {

// Adds without wrapping: a total that stopped would be wrong, one that wrapped would go
// backwards, which a Prometheus counter must never do (it would read as a restart).
uint64_t saturating_add(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

}  // namespace

DepartedLog::DepartedLog(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 1)),
      totals_{{"training", {}}, {"inference", {}}, {"batch-inference", {}}} {}

void DepartedLog::add(DepartedProcess process) {
  Totals& t = totals_[process.role];
  t.processes = saturating_add(t.processes, 1);
  t.launches = saturating_add(t.launches, process.launches);
  t.nccl_launches = saturating_add(t.nccl_launches, process.nccl_launches);
  t.completed_ns = saturating_add(t.completed_ns, process.completed_ns);
  recent_.push_front(std::move(process));
  while (recent_.size() > capacity_) recent_.pop_back();
}

}  // namespace tandem::scheduler
