// Which simulated GPUs a process sees, in what order: CUDA_VISIBLE_DEVICES, read as the real
// driver reads it (indices and `GPU-<uuid>` prefixes, the list ending at the first entry that
// names no GPU, names one twice or is ambiguous), and each physical GPU's identity (UUID, PCI
// location), which follows the GPU, not the ordinal a process sees it under. Contention and
// tandem's per-GPU state are keyed by the physical GPU, so two processes that see one GPU
// under different ordinals share it.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sim.h"

namespace simgpu {

namespace {

// A fixed, random-looking UUID per physical GPU (splitmix64 of its index), version 4 layout.
void make_uuid(int physical, unsigned char out[16]) {
  uint64_t x = 0x73696d6770750000ull + static_cast<uint64_t>(physical);
  for (int half = 0; half < 2; ++half) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(out + 8 * half, &z, 8);
  }
  out[6] = static_cast<unsigned char>((out[6] & 0x0f) | 0x40);
  out[8] = static_cast<unsigned char>((out[8] & 0x3f) | 0x80);
}

// The physical GPU an entry names, or -1. `GPU-` entries match a unique prefix of the UUID's
// text (dashes included, as nvidia-smi prints it), case-insensitively.
int parse_entry(const std::string& entry, int physical_count) {
  if (entry.empty()) return -1;
  if (std::isdigit(static_cast<unsigned char>(entry[0]))) {
    char* end = nullptr;
    long v = std::strtol(entry.c_str(), &end, 10);
    return *end == '\0' && v >= 0 && v < physical_count ? static_cast<int>(v) : -1;
  }
  if (entry.size() <= 4 || strncasecmp(entry.c_str(), "GPU-", 4) != 0) return -1;  // MIG-... : not simulated
  int found = -1;
  for (int p = 0; p < physical_count; ++p) {
    std::string text = uuid_text(p);
    if (strncasecmp(text.c_str(), entry.c_str(), entry.size()) != 0) continue;
    if (found >= 0) return -1;  // ambiguous prefix
    found = p;
  }
  return found;
}

std::vector<int> parse_visible() {
  const int physical_count = settings().devices;
  std::vector<int> visible;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!env) {
    for (int p = 0; p < physical_count; ++p) visible.push_back(p);
    return visible;
  }
  std::string list(env);
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string entry = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int p = parse_entry(entry, physical_count);
    bool repeated = false;
    for (int v : visible) repeated |= v == p;
    if (p < 0 || repeated) {
      if (!entry.empty()) log(2, "CUDA_VISIBLE_DEVICES: '%s' names no further GPU; the list ends there", entry.c_str());
      break;
    }
    visible.push_back(p);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return visible;
}

const std::vector<int>& visible() {
  static const std::vector<int>* v = new std::vector<int>(parse_visible());  // read once, like the driver
  return *v;
}

}  // namespace

int visible_device_count() { return static_cast<int>(visible().size()); }

int physical_device(int ordinal) {
  const auto& v = visible();
  return ordinal >= 0 && ordinal < static_cast<int>(v.size()) ? v[static_cast<size_t>(ordinal)] : -1;
}

int ordinal_of_physical(int physical) {
  const auto& v = visible();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == physical) return static_cast<int>(i);
  return -1;
}

void physical_uuid(int physical, unsigned char out[16]) { make_uuid(physical, out); }

std::string uuid_text(int physical) {
  unsigned char u[16];
  make_uuid(physical, u);
  char s[48];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

}  // namespace simgpu
