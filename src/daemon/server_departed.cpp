// Departed processes on the server's side (departed.h): the last reading of a client's page at
// disconnect, its INFO line in tandemd's log, and the status document's "departed" list.
#include <nlohmann/json.hpp>

#include "log.h"
#include "server.h"

namespace tandem::scheduler {

void Server::record_departure(const Client& c, uint64_t now_ns) {
  // Only a process with a slot has a page; a connection that only asked (tandemctl) is no
  // process's work.
  if (c.slot < 0 || c.gpu.empty()) return;
  GpuScheduler* g = gpu(c.gpu);
  if (!g) return;
  GpuSegment& segment = g->segment();
  const tandem_slot& s = segment.shm()->slots[c.slot];
  if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE) return;
  // The page is still mapped: read it once more through the same bounds as every period, so
  // the work since the last tick counts and nothing of the page is taken unbounded.
  const ClientView& view = segment.sample_one(c.slot, now_ns);
  const tandem_client_page& v = view.v;
  DepartedProcess d;
  d.pid = c.pid;
  d.uid = c.uid;
  d.role = c.role;
  d.gpu = c.gpu;
  d.job = c.job;
  d.connected_ns = c.connected_ns;
  d.departed_ns = now_ns;
  d.launches = v.launches;
  d.nccl_launches = v.nccl_launches;
  d.issued_ns = v.issued_ns;
  d.completed_ns = v.completed_ns;
  d.tokens_granted_ns = __atomic_load_n(&s.granted_ns, __ATOMIC_RELAXED);  // the daemon's own word
  d.tokens_spent_ns = v.tokens_taken_ns;
  d.gate_waits = v.gate_waits;
  d.gate_wait_ns = v.gate_wait_ns;
  d.requests = v.requests;
  d.peak_bytes = v.peak_bytes;
  d.quota_refusals = v.quota_refusals;
  d.page_violations = view.violations;
  // One line per process with a slot, so that a killed process's work is in tandemd's log.
  TANDEM_LOG_INFO("client pid {} ({}) departed after {:.1f} s: {} launches, {} nccl, {:.3f} s of GPU work completed",
                  d.pid, d.role, static_cast<double>(now_ns - d.connected_ns) / 1e9, d.launches, d.nccl_launches,
                  static_cast<double>(d.completed_ns) / 1e9);
  departed_.add(std::move(d));
}

nlohmann::json Server::departed_json(uint64_t now_ns) const {
  nlohmann::json out = nlohmann::json::array();
  for (const DepartedProcess& d : departed_.recent())
    out.push_back({{"pid", d.pid}, {"uid", d.uid}, {"role", d.role}, {"gpu", d.gpu}, {"job", d.job},
                   {"connected_s", static_cast<double>(d.departed_ns - d.connected_ns) / 1e9},
                   {"departed_s_ago", static_cast<double>(now_ns - d.departed_ns) / 1e9},
                   {"launches", d.launches}, {"nccl_launches", d.nccl_launches}, {"issued_ns", d.issued_ns},
                   {"completed_ns", d.completed_ns}, {"granted_ns", d.tokens_granted_ns},
                   {"tokens_spent_ns", d.tokens_spent_ns}, {"gate_waits", d.gate_waits},
                   {"gate_wait_ms", static_cast<double>(d.gate_wait_ns) / 1e6}, {"requests", d.requests},
                   {"peak_bytes", d.peak_bytes}, {"quota_refusals", d.quota_refusals},
                   {"page_violations", d.page_violations}});
  return out;
}

}  // namespace tandem::scheduler
