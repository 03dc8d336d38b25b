#include "link_check.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "messages.h"

namespace tandem::hook {

int hello_slot(const std::string& payload, std::string& role, const char** why) noexcept {
  try {
    msg::HelloOk ok;
    msg::Refusal refused;
    if (!msg::decode(payload, ok, refused)) {
      // The decoder's own text, as the static string it came from (outlives this call).
      *why = "the reply is not a valid hello_ok";
      for (const char* text :
           {msg::kHelloOkNotObject, msg::kHelloOkNoSlot, msg::kHelloOkSlotRange, msg::kHelloOkSampleUs})
        if (refused.message == text) *why = text;
      return -1;
    }
    // This library registers with a GPU: "no slot" (-1) is no answer to its hello.
    if (ok.slot < 0) return *why = msg::kHelloOkSlotRange, -1;
    role = ok.role;
    return ok.slot;
  } catch (...) {
    return *why = "the reply could not be read", -1;
  }
}

bool sealed_memfd_of_size(int fd, size_t bytes, const char** why) noexcept {
  struct stat st{};
  if (fd < 0) return *why = "no shared-memory descriptor came with the reply", false;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return *why = "a descriptor is not a memory file", false;
  if (st.st_size != static_cast<off_t>(bytes)) return *why = "a shared-memory segment has the wrong size", false;
  int seals = fcntl(fd, F_GET_SEALS);
  constexpr int kNeeded = F_SEAL_SHRINK | F_SEAL_GROW;
  if (seals < 0 || (seals & kNeeded) != kNeeded) return *why = "a shared-memory segment is not sealed against resizing", false;
  return true;
}

bool segment_layout_ok(const tandem_shm_header* shm, const char** why) noexcept {
  if (shm->magic != TANDEM_SHM_MAGIC) return *why = "the segment's magic is wrong", false;
  if (shm->version != TANDEM_SHM_VERSION) return *why = "the segment's layout version is not this library's", false;
  if (shm->size != sizeof(tandem_shm_header) || shm->slot_count != TANDEM_MAX_SLOTS)
    return *why = "the segment's size or slot count is not this layout's", false;
  return true;
}

}  // namespace tandem::hook
