// The names tandem-device-plugin gives Kubernetes (docs/kubernetes.md): its two resources and
// one device per slot, `<GPU UUID>-b<k>` (tandem.io/bubble) or `<GPU UUID>-s<k>`
// (tandem.io/slo), the UUID as NVIDIA writes it (`GPU-8-4-4-4-12` hex digits; nvidia-smi -L,
// NVIDIA_VISIBLE_DEVICES), at most 63 characters as the kubelet requires.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace tandem::k8s {

enum class SlotResource { bubble = 0, slo = 1 };
constexpr SlotResource kResources[] = {SlotResource::bubble, SlotResource::slo};

const char* resource_name(SlotResource r);   // "tandem.io/bubble"
const char* endpoint_name(SlotResource r);   // its socket in the kubelet's directory
const char* role_of(SlotResource r);         // TANDEM_ROLE of the containers given one

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from tandem's 32 hex digits.
std::string nvidia_uuid(const std::string& hex);
std::string device_id(const std::string& hex, SlotResource r, uint32_t index);

struct SlotDevice {
  std::string gpu;  // tandem's form, 32 hex digits
  uint32_t index = 0;
};
// The slot a device ID of resource `r` names; nullopt when it is not one.
std::optional<SlotDevice> parse_device_id(const std::string& id, SlotResource r);

}  // namespace tandem::k8s
