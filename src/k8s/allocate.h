// What a container given slots needs to join tandem (docs/kubernetes.md), the device plugin's
// Allocate answer: its GPU (NVIDIA_VISIBLE_DEVICES, or CDI device names for a runtime that
// uses CDI), its grant's socket directory (never tandemd's main socket: docs/security.md) and
// the preload library mounted from the node, the preload itself (LD_PRELOAD), the role its
// slots are for (TANDEM_ROLE) and its memory quota (TANDEM_MEM_LIMIT: a slot's quota times the
// slots it holds on the GPU). The grant, which tandemd creates when the plugin asks, holds the
// same role, GPUs and quota whatever the container's processes say.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "device_ids.h"
#include "messages.h"
#include "node_slots.h"

namespace tandem::k8s {

struct AllocateOptions {
  std::string host_socket_dir = "/run/tandem";          // tandemd's socket directory on the node
  std::string grant_socket;  // where tandemd is asked for grants: its admin socket, else its socket
  std::string host_library_dir = "/var/lib/tandem/lib";  // libtandem.so on the node (the DaemonSet puts it there)
  std::string container_socket_dir = "/run/tandem";
  std::string container_library_dir = "/opt/tandem/lib";
  bool cdi = false;  // name the GPU as a CDI device (nvidia.com/gpu=GPU-...) instead of NVIDIA_VISIBLE_DEVICES
};

struct Mount {
  std::string container_path, host_path;
  bool read_only = true;
};

struct ContainerGrant {
  std::map<std::string, std::string> envs;
  std::vector<Mount> mounts;
  std::vector<std::string> cdi_devices;
  msg::GrantRequest tandemd_grant;  // what tandemd is asked to create (its socket is mounted)
};

// The grant's name for a container's devices: the same for the same devices (a kubelet that
// asks again, a plugin restarted), so asking again re-states it.
std::string grant_name(std::vector<std::string> device_ids);

// The grant for one container's devices of resource `r`; nullopt, with `error` naming the
// device, when one is not a slot `slots` lists (a GPU it never reported, an index past max).
std::optional<ContainerGrant> grant_for(const std::vector<std::string>& device_ids, SlotResource r,
                                        const NodeSlots& slots, const AllocateOptions& options, std::string& error);

}  // namespace tandem::k8s
