// Every message of tandem's socket protocol (protocol.h frames them), defined once: a struct per
// message type, its JSON encoding and its validation (types, ranges, sizes, required fields).
// tandemd decodes each request here before a handler sees it (decode_request: a typed, valid
// message, or the errno and text of the error reply the client gets); the clients (libtandem's
// registration and memory pool, tandemctl, tandem-device-plugin) build their requests from the
// same structs and read tandemd's replies here, so the two sides cannot drift apart. The status
// and trace replies are documents (docs/scheduler.md, `tandemctl status --json`), read as JSON.
//
// Encoding never throws (libtandem encodes inside the host process, where no exception may cross
// a hook): a string that is not UTF-8 goes out with U+FFFD for each invalid byte, and "" comes
// back only when memory ran out. Decoding trusts nothing: a field of the wrong type, a float or a
// negative number where an unsigned integer belongs, or a value out of range is refused, never
// converted; fields it does not know are ignored (an older or newer peer).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "protocol.h"
#include "settings.h"

namespace tandem::msg {

// A node-local training job named in a hello (job_hold.h): its name, and its number of ranks.
constexpr size_t kMaxJobName = 256;
constexpr uint64_t kMaxJobRanks = 1024;

// The roles a client may name in its hello, and their codes in the shared memory (shm_abi.h).
bool is_known_role(std::string_view role) noexcept;
uint32_t role_code(std::string_view role) noexcept;  // TANDEM_ROLE_NONE for any other
const char* role_name(uint32_t code) noexcept;      // "none" for any other

// --- client -> tandemd ---

// Registration: the process, its role and its GPU. Answered by hello_ok and two descriptors
// (the GPU's segment, the client's page), or hello_ok with slot -1 without a GPU (role none).
struct Hello {
  static constexpr MessageType type = MessageType::hello;
  int64_t pid = 0;               // the client's own view (another PID namespace's): tandemd ignores
                                 // it and takes the peer's from the kernel
  std::string role = "none";     // none | training | inference | batch-inference
  std::string gpu;               // the GPU's UUID, 32 lowercase hex digits ("": none; any with role none)
  uint64_t gpu_total_bytes = 0;  // the GPU's size as the client's driver says (0: unknown)
  std::string job;               // a training rank's job ("": none): 1 to kMaxJobName bytes
  uint64_t job_ranks = 0;        // with a job: its ranks, 2 to kMaxJobRanks; 0 without
  bool operator==(const Hello&) const = default;
};

// tandemd's status document. Any payload (it carries nothing).
struct StatusRequest {
  static constexpr MessageType type = MessageType::status_request;
  bool operator==(const StatusRequest&) const = default;
};

// The trace since `since_ns` (CLOCK_MONOTONIC; 0: all tandemd kept). A payload that is no JSON
// object asks for all of it.
struct TraceRequest {
  static constexpr MessageType type = MessageType::trace_request;
  uint64_t since_ns = 0;
  bool operator==(const TraceRequest&) const = default;
};

// Sets (or, with "", clears) a registered process's memory quota.
struct QuotaRequest {
  static constexpr MessageType type = MessageType::quota_request;
  int64_t pid = 0;
  std::string size;    // "8G", "512M", "25%"; "" clears
  MemorySize parsed;   // `size`, parsed (decode fills it)
  bool operator==(const QuotaRequest&) const = default;
};

// A grant: a socket of its own for one allocation (a device plugin's Allocate). Every process
// connecting through it registers in `role` on one of `gpus` with `memory_limit` (each slot),
// whatever it asks.
struct GrantRequest {
  static constexpr MessageType type = MessageType::grant_request;
  std::string name;          // 1 to kMaxGrantName of [a-z0-9-]: its directory's name
  std::string role;          // inference | batch-inference
  std::vector<std::string> gpus;  // 1 to 16 GPUs, each 32 lowercase hex digits
  std::string memory_limit;  // as TANDEM_MEM_LIMIT ("" : none)
  MemorySize parsed_limit;   // `memory_limit`, parsed (decode fills it)
  bool operator==(const GrantRequest&) const = default;
};
inline constexpr size_t kMaxGrantName = 64;

// A chunk the client created, with its descriptor (SCM_RIGHTS) for the pool. Every pool
// request carries a number (`seq`) its replies repeat.
struct PoolRegister {
  static constexpr MessageType type = MessageType::pool_register;
  uint64_t bytes = 0;  // > 0
  uint64_t seq = 0;
  bool operator==(const PoolRegister&) const = default;
};

// Chunks of `chunk_bytes` to cover `bytes`, waiting at most `wait_ms` for memory training gives
// back. Answered by pool_chunk messages, then pool_granted.
struct PoolAcquire {
  static constexpr MessageType type = MessageType::pool_acquire;
  uint64_t bytes = 0;        // > 0
  uint64_t chunk_bytes = 0;  // > 0
  uint64_t seq = 0;
  uint64_t wait_ms = 1000;
  bool batch = false;        // many chunks to a pool_chunk message (else one each)
  bool operator==(const PoolAcquire&) const = default;
};

// Chunks the client unmapped and gives back.
struct PoolRelease {
  static constexpr MessageType type = MessageType::pool_release;
  std::vector<uint64_t> ids;
  uint64_t seq = 0;
  bool operator==(const PoolRelease&) const = default;
};

// --- tandemd -> client ---

// The texts a hello_ok is refused with, static so that libtandem can report them as they are.
inline constexpr const char* kHelloOkNotObject = "the reply is not a JSON object";
inline constexpr const char* kHelloOkNoSlot = "the reply has no integer slot";
inline constexpr const char* kHelloOkSlotRange = "the slot is out of range";
inline constexpr const char* kHelloOkSampleUs = "sample_us must be an unsigned integer";

struct HelloOk {
  static constexpr MessageType type = MessageType::hello_ok;
  int32_t slot = -1;       // the client's slot, 0 to TANDEM_MAX_SLOTS - 1; -1: registered without a GPU
  uint64_t sample_us = 0;  // tandemd's period (with a slot)
  std::string role;        // the role it was registered in (a grant's may differ from the one asked;
                           // "": an older tandemd, the one asked)
  bool operator==(const HelloOk&) const = default;
};

struct GrantReply {
  static constexpr MessageType type = MessageType::grant_reply;
  std::string name;
  std::string socket;  // the grant's socket, in tandemd's file system
  bool operator==(const GrantReply&) const = default;
};

struct QuotaReply {
  static constexpr MessageType type = MessageType::quota_reply;
  int64_t pid = 0;
  uint64_t bytes = 0;  // the quota now (0: none)
  std::string gpu;
  bool operator==(const QuotaReply&) const = default;
};

// Chunks handed over, one descriptor per id, in the order of `ids`.
struct PoolChunk {
  static constexpr MessageType type = MessageType::pool_chunk;
  std::vector<uint64_t> ids;  // one, unless `batch` (at most 64)
  uint64_t seq = 0;
  bool batch = false;
  bool operator==(const PoolChunk&) const = default;
};

// The end of an acquisition: how many chunks came, and why not more.
struct PoolGranted {
  static constexpr MessageType type = MessageType::pool_granted;
  uint64_t chunks = 0;
  uint64_t short_bytes = 0;
  std::string reason;
  uint64_t seq = 0;
  std::optional<double> waited_ms;  // when it waited for training to give memory back
  bool operator==(const PoolGranted&) const = default;
};

struct PoolRegistered {
  static constexpr MessageType type = MessageType::pool_registered;
  uint64_t id = 0;
  uint64_t seq = 0;
  bool operator==(const PoolRegistered&) const = default;
};

struct PoolReleased {
  static constexpr MessageType type = MessageType::pool_released;
  uint64_t released = 0;
  uint64_t seq = 0;
  bool operator==(const PoolReleased&) const = default;
};

// A request refused: the errno and the text the client reads.
struct Error {
  static constexpr MessageType type = MessageType::error;
  int error_number = 0;
  std::string message;
  bool operator==(const Error&) const = default;
};

// The JSON payload of a message; "" only when memory ran out.
std::string encode(const Hello& m) noexcept;
std::string encode(const StatusRequest& m) noexcept;
std::string encode(const TraceRequest& m) noexcept;
std::string encode(const QuotaRequest& m) noexcept;
std::string encode(const GrantRequest& m) noexcept;
std::string encode(const PoolRegister& m) noexcept;
std::string encode(const PoolAcquire& m) noexcept;
std::string encode(const PoolRelease& m) noexcept;
std::string encode(const HelloOk& m) noexcept;
std::string encode(const QuotaReply& m) noexcept;
std::string encode(const GrantReply& m) noexcept;
std::string encode(const PoolChunk& m) noexcept;
std::string encode(const PoolGranted& m) noexcept;
std::string encode(const PoolRegistered& m) noexcept;
std::string encode(const PoolReleased& m) noexcept;
std::string encode(const Error& m) noexcept;

// Why a payload was refused: the error reply's errno and message.
struct Refusal {
  int error_number = 0;
  std::string message;
};

// The message a payload holds, checked; false (and `why`) when it is not a valid one. `out` is
// written only on success.
bool decode(std::string_view payload, Hello& out, Refusal& why);
bool decode(std::string_view payload, StatusRequest& out, Refusal& why);
bool decode(std::string_view payload, TraceRequest& out, Refusal& why);
bool decode(std::string_view payload, QuotaRequest& out, Refusal& why);
bool decode(std::string_view payload, GrantRequest& out, Refusal& why);
bool decode(std::string_view payload, PoolRegister& out, Refusal& why);
bool decode(std::string_view payload, PoolAcquire& out, Refusal& why);
bool decode(std::string_view payload, PoolRelease& out, Refusal& why);
bool decode(std::string_view payload, HelloOk& out, Refusal& why);
bool decode(std::string_view payload, QuotaReply& out, Refusal& why);
bool decode(std::string_view payload, GrantReply& out, Refusal& why);
bool decode(std::string_view payload, PoolChunk& out, Refusal& why);
bool decode(std::string_view payload, PoolGranted& out, Refusal& why);
bool decode(std::string_view payload, PoolRegistered& out, Refusal& why);
bool decode(std::string_view payload, PoolReleased& out, Refusal& why);
bool decode(std::string_view payload, Error& out, Refusal& why);

// What a client may send tandemd.
using Request =
    std::variant<Hello, StatusRequest, TraceRequest, QuotaRequest, PoolRegister, PoolAcquire, PoolRelease, GrantRequest>;

// A client's message of `type` decoded: the request, or why it is refused (EBADMSG for a type
// that is no request, EINVAL for a payload that is not a valid one).
bool decode_request(uint32_t type, std::string_view payload, Request& out, Refusal& why);

}  // namespace tandem::msg
