#include "stats_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "counters.h"
#include "green_streams.h"
#include "kernel_cost.h"
#include "log.h"
#include "memory_quota.h"
#include "pool_backend.h"
#include "real_driver.h"

#ifndef TANDEM_VERSION_STRING
#define TANDEM_VERSION_STRING "0.0.0"
#endif

namespace tandem::hook {

std::string expand_stats_path(const char* pattern, int pid) {
  std::string out;
  for (const char* p = pattern; *p; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      out += std::to_string(pid);
      ++p;
    } else {
      out += *p;
    }
  }
  return out;
}

std::string stats_json(const char* role) {
  const LaunchCounters& c = launch_counters();
  const MemoryCounters& m = memory_counters();
  nlohmann::ordered_json by_entry = nlohmann::ordered_json::object();
  for (size_t i = 0; i < kEntryCount; ++i) {
    uint64_t n = c.by_entry[i].load();
    Entry e = static_cast<Entry>(i);
    bool launch_entry = e <= Entry::cuGraphLaunch_ptsz;  // the launch family heads the table
    if (launch_entry && n) by_entry[entry_name(e)] = n;
  }
  nlohmann::ordered_json j = {
      {"pid", static_cast<int>(getpid())},
      {"role", role},
      {"tandem_version", TANDEM_VERSION_STRING},
      {"launches",
       {{"total", kernels_executed()},
        {"by_entry", by_entry},
        {"graph_launches", c.graph_launches.load()},
        {"graph_kernels", c.graph_kernels.load()},
        {"nccl", c.nccl.load()},
        {"capture_skipped", c.capture_skipped.load()}}},
      {"memory",
       {{"allocs", m.allocs.load()},
        {"frees", m.frees.load()},
        {"bytes_in_use", m.bytes_in_use.load()},
        {"peak_bytes", m.peak_bytes.load()},
        {"quota_bytes", memory_quota()},
        {"quota_refusals", m.quota_refusals.load()},
        {"zico_memory_waits", m.zico_memory_waits.load()},
        {"pressure_calls", m.pressure_calls.load()},
        {"reported_release_bytes", m.reported_release_bytes.load()}}},
      {"gate",
       {{"waits", gate_counters().waits.load()},
        {"wait_ns", gate_counters().wait_ns.load()},
        {"fail_open", gate_counters().fail_open.load()},
        {"inflight_fail_open", gate_counters().inflight_fail_open.load()},
        {"memory_owed_passes", gate_counters().memory_owed_passes.load()},
        {"collective_holds", gate_counters().collective_holds.load()},
        {"collective_hold_ns", gate_counters().collective_hold_ns.load()}}},
      {"daemon", {{"links", gate_counters().daemon_links.load()}}},
  };
  CostFigures costs = cost_figures();
  if (costs.samples)  // a gated process timed some of its launches (kernel_cost.h)
    j["costs"] = {{"timed", costs.samples}, {"timed_shared", costs.shared}, {"shapes", costs.shapes}};
  GreenStats g = green_stats();
  if (g.partitions || g.streams || g.untracked)  // live SM partitions (green_streams.h)
    j["green"] = {{"partitions", g.partitions}, {"redirected", g.redirected}, {"switches", g.switches}, {"switch_ns", g.switch_ns},
                  {"streams", g.streams}, {"live_streams", g.live_streams}, {"untracked", g.untracked}};
  PoolFigures f = pool_figures();
  if (f.on) {
    const memory::PoolStats& p = f.pool;
    j["memory"]["pool"] = {{"held_bytes", p.held_bytes},         {"live_bytes", p.live_bytes},
                           {"pending_bytes", p.pending_bytes},   {"idle_bytes", p.idle_bytes},
                           {"chunks_created", p.chunks_created}, {"chunks_received", p.chunks_received},
                           {"chunks_released", p.chunks_released}, {"syncs", p.syncs},
                           {"driver_calls", p.driver_calls},     {"stream_reuses", p.stream_reuses},
                           {"handovers", p.handovers},
                           {"handover_ns_max", p.handover_ns_max}, {"handover_ns_total", p.handover_ns_total},
                           {"handover_ns_p50", p.handover_ns_p50}, {"handover_ns_p99", p.handover_ns_p99},
                           {"zero_ns_total", p.zero_ns_total}};
  }
  return j.dump(2) + "\n";
}

bool write_stats_file(const char* pattern, const char* role) noexcept {
  int saved_errno = errno;
  bool ok = false;
  try {
    std::string path = expand_stats_path(pattern, static_cast<int>(getpid()));
    std::string text = stats_json(role);
    // The temporary file gets an unpredictable name and is created exclusively (mkostemp:
    // O_CREAT|O_EXCL, which never follows a symlink), so a user who can write the directory
    // (/tmp) cannot plant a link that makes a privileged process overwrite another file. The
    // rename then replaces whatever entry `path` names, a planted symlink included, without
    // following it.
    std::string tmp = path + ".XXXXXX";
    int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd >= 0) {
      ok = ::fchmod(fd, 0644) == 0;  // readable like any report; mkostemp creates 0600
      ok = ok && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      ok = (::close(fd) == 0) && ok;
      ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
      if (!ok) {
        int err = errno;
        ::unlink(tmp.c_str());
        errno = err;
      }
    }
    if (!ok) TANDEM_LOG_WARN("cannot write stats file {}: {}", path, std::strerror(errno));
  } catch (...) {
    TANDEM_LOG_WARN("cannot write stats file (out of memory)");
  }
  errno = saved_errno;
  return ok;
}

}  // namespace tandem::hook
