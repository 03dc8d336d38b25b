#include "allocate.h"

#include <algorithm>
#include <set>

namespace tandem::k8s {

namespace {

// A quota of `slots` slots of `kind`, as TANDEM_MEM_LIMIT reads it.
std::string memory_limit(const SlotKind& kind, uint32_t slots) {
  if (kind.memory.is_percent) {
    char text[32];
    std::snprintf(text, sizeof text, "%g%%", std::min(100.0, kind.memory.percent * slots));
    return text;
  }
  return std::to_string(kind.memory.bytes * slots);
}

}  // namespace

std::string grant_name(std::vector<std::string> device_ids) {
  std::sort(device_ids.begin(), device_ids.end());
  device_ids.erase(std::unique(device_ids.begin(), device_ids.end()), device_ids.end());
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the sorted ids, each ended by a 0 byte
  for (const std::string& id : device_ids) {
    for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0) * 1099511628211ull;
  }
  char name[24];
  std::snprintf(name, sizeof name, "a%016llx", static_cast<unsigned long long>(h));
  return name;
}

std::optional<ContainerGrant> grant_for(const std::vector<std::string>& device_ids, SlotResource r,
                                        const NodeSlots& slots, const AllocateOptions& options, std::string& error) {
  const SlotKind& kind = r == SlotResource::bubble ? slots.config().bubble : slots.config().slo;
  std::vector<std::string> gpus;  // in the order first named
  std::map<std::string, uint32_t> per_gpu;
  std::set<std::string> seen;
  for (const std::string& id : device_ids) {
    std::optional<SlotDevice> d = parse_device_id(id, r);
    if (!d || !slots.knows_gpu(d->gpu) || d->index >= kind.max) {
      error = "unknown device '" + id + "': " + resource_name(r) + " devices are <GPU UUID>-" +
              (r == SlotResource::bubble ? "b" : "s") + "<k>, k < " + std::to_string(kind.max) +
              ", of a GPU tandemd reported";
      return std::nullopt;
    }
    if (!seen.insert(id).second) continue;
    if (!per_gpu[d->gpu]++) gpus.push_back(d->gpu);
  }
  if (gpus.empty()) {
    error = "no device to allocate";
    return std::nullopt;
  }
  ContainerGrant g;
  std::string visible;
  uint32_t most = 0;
  for (const std::string& gpu : gpus) {
    visible += (visible.empty() ? "" : ",") + nvidia_uuid(gpu);
    if (options.cdi) g.cdi_devices.push_back("nvidia.com/gpu=" + nvidia_uuid(gpu));
    most = std::max(most, per_gpu[gpu]);
  }
  if (!options.cdi) g.envs["NVIDIA_VISIBLE_DEVICES"] = visible;
  const std::string library = options.container_library_dir + "/libtandem.so";
  g.envs["LD_PRELOAD"] = library;
  g.envs["TANDEM_ROLE"] = role_of(r);
  g.envs["TANDEM_MEM_LIMIT"] = memory_limit(kind, most);
  g.tandemd_grant.name = grant_name(device_ids);
  g.tandemd_grant.role = role_of(r);
  g.tandemd_grant.gpus = gpus;
  g.tandemd_grant.memory_limit = g.envs["TANDEM_MEM_LIMIT"];
  // The grant's directory only, never tandemd's own socket: a process of the container reaches
  // tandemd through its grant, which gives it the slot's rights and no more. Read-only:
  // connecting to a socket needs no write access to its file system.
  g.envs["TANDEM_SOCKET"] = options.container_socket_dir + "/tandemd.sock";
  g.mounts.push_back({options.container_socket_dir, options.host_socket_dir + "/grants/" + g.tandemd_grant.name, true});
  g.mounts.push_back({options.container_library_dir, options.host_library_dir, true});
  return g;
}

}  // namespace tandem::k8s
