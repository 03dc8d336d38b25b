#include "device_ids.h"

#include <cctype>

namespace tandem::k8s {

namespace {
constexpr size_t kNvidiaUuidLength = 40;  // "GPU-" + 8-4-4-4-12
constexpr size_t kDashes[] = {12, 17, 22, 27};  // where the dashes after "GPU-" stand
}  // namespace

const char* resource_name(SlotResource r) { return r == SlotResource::bubble ? "tandem.io/bubble" : "tandem.io/slo"; }
const char* endpoint_name(SlotResource r) { return r == SlotResource::bubble ? "tandem-bubble.sock" : "tandem-slo.sock"; }
const char* role_of(SlotResource r) { return r == SlotResource::bubble ? "batch-inference" : "inference"; }

std::string nvidia_uuid(const std::string& hex) {
  std::string out = "GPU-";
  for (size_t i = 0; i < hex.size(); ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) out += '-';
    out += hex[i];
  }
  return out;
}

std::string device_id(const std::string& hex, SlotResource r, uint32_t index) {
  return nvidia_uuid(hex) + (r == SlotResource::bubble ? "-b" : "-s") + std::to_string(index);
}

std::optional<SlotDevice> parse_device_id(const std::string& id, SlotResource r) {
  const char letter = r == SlotResource::bubble ? 'b' : 's';
  if (id.size() < kNvidiaUuidLength + 3 || id.size() > kNvidiaUuidLength + 4 || id.compare(0, 4, "GPU-") != 0 ||
      id[kNvidiaUuidLength] != '-' || id[kNvidiaUuidLength + 1] != letter)
    return std::nullopt;
  SlotDevice d;
  for (size_t i = 4; i < kNvidiaUuidLength; ++i) {
    bool dash = false;
    for (size_t at : kDashes) dash = dash || i == at;
    const char c = id[i];
    if (dash) {
      if (c != '-') return std::nullopt;
    } else if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
      d.gpu += c;
    } else {
      return std::nullopt;
    }
  }
  const std::string number = id.substr(kNvidiaUuidLength + 2);
  if (number.empty() || (number.size() > 1 && number[0] == '0')) return std::nullopt;
  for (char c : number)
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  d.index = static_cast<uint32_t>(std::stoul(number));
  return d;
}

}  // namespace tandem::k8s
