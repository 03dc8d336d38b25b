// What tandemd keeps of processes whose connection closed. A process killed with SIGKILL never
// writes its statistics file (TANDEM_STATS_FILE is written at exit), and once its slot is
// released its figures are gone from the status and the metrics; so at disconnect the daemon
// takes a last bounded view of its page and keeps it here: the most recent departures, a fixed
// number of them (memory does not grow with churn), and per-role totals of all departures since
// tandemd started, which never decrease (a Prometheus counter summed over the live processes
// and the departed ones stays monotonic when a process leaves).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>

namespace tandem::scheduler {

// One departed process: who it was and its final counters, as the daemon's bounded view of its
// page last said (client_view.h), never the raw page.
struct DepartedProcess {
  pid_t pid = 0;
  uid_t uid = 0;
  std::string role;
  std::string gpu;  // its GPU's UUID (hex)
  std::string job;  // training: its node-local job (job_hold.h); empty: none
  uint64_t connected_ns = 0, departed_ns = 0;  // CLOCK_MONOTONIC
  uint64_t launches = 0, nccl_launches = 0;
  uint64_t issued_ns = 0, completed_ns = 0;     // estimated GPU work issued, and of it completed
  uint64_t tokens_granted_ns = 0, tokens_spent_ns = 0;
  uint64_t gate_waits = 0, gate_wait_ns = 0;
  uint64_t requests = 0;
  uint64_t peak_bytes = 0;
  uint64_t quota_refusals = 0;
  uint64_t page_violations = 0;  // values of its page tandemd had to bound
};

class DepartedLog {
 public:
  // Sums of every departure of a role since tandemd started (not only those still listed).
  struct Totals {
    uint64_t processes = 0, launches = 0, nccl_launches = 0;
    uint64_t completed_ns = 0;
  };

  // Keeps at most `capacity` records (at least one).
  explicit DepartedLog(size_t capacity);
  // Records a departure: listed first, the oldest dropped past the capacity; added to its
  // role's totals.
  void add(DepartedProcess process);
  // Most recent first.
  const std::deque<DepartedProcess>& recent() const { return recent_; }
  // By role; the three roles of a slot are always there (zero until one departs), so a
  // scraper sees each series from tandemd's start.
  const std::map<std::string, Totals>& totals() const { return totals_; }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::deque<DepartedProcess> recent_;
  std::map<std::string, Totals> totals_;
};

}  // namespace tandem::scheduler
