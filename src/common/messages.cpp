#include "messages.h"

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "json_text.h"
#include "tandem/shm_abi.h"

namespace tandem::msg {

namespace {

using nlohmann::json;

// The payload as JSON; anything that is not JSON is discarded (never throws).
json parse(std::string_view payload) { return json::parse(payload.begin(), payload.end(), nullptr, false); }

// `build()`'s JSON as text; "" when that fails (out of memory).
template <class Build>
std::string encoded(Build&& build) noexcept {
  try {
    return json_text(build());
  } catch (...) {
    return {};
  }
}

bool refuse(Refusal& why, int error_number, std::string message) {
  why = Refusal{error_number, std::move(message)};
  return false;
}

// An unsigned integer field: `fallback` when absent (or `j` is no object), nullopt when it is
// anything but a non-negative integer. nlohmann's get<uint64_t>() converts a float with a
// plain cast, undefined behaviour when it is out of range (1e30), so a float is refused.
std::optional<uint64_t> uint_field(const json& j, const char* key, uint64_t fallback = 0) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

// A string field: `fallback` when absent, nullopt when it is not a string.
std::optional<std::string> string_field(const json& j, const char* key, std::string fallback = {}) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

bool is_gpu_uuid(const std::string& s) {
  return s.size() == 32 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// An array of unsigned integers; false when it is not one.
bool uint_array(const json& j, std::vector<uint64_t>& out) {
  if (!j.is_array() || !std::all_of(j.begin(), j.end(), [](const json& v) { return v.is_number_unsigned(); }))
    return false;
  out = j.get<std::vector<uint64_t>>();
  return true;
}

template <class T>
bool decode_as(std::string_view payload, Request& out, Refusal& why) {
  T m;
  if (!decode(payload, m, why)) return false;
  out = std::move(m);
  return true;
}

}  // namespace

bool is_known_role(std::string_view role) noexcept {
  return role == "none" || role == "training" || role == "inference" || role == "batch-inference";
}

uint32_t role_code(std::string_view role) noexcept {
  if (role == "training") return TANDEM_ROLE_TRAINING;
  if (role == "inference") return TANDEM_ROLE_INFERENCE;
  if (role == "batch-inference") return TANDEM_ROLE_BATCH_INFERENCE;
  return TANDEM_ROLE_NONE;
}

const char* role_name(uint32_t code) noexcept {
  switch (code) {
    case TANDEM_ROLE_TRAINING: return "training";
    case TANDEM_ROLE_INFERENCE: return "inference";
    case TANDEM_ROLE_BATCH_INFERENCE: return "batch-inference";
    default: return "none";
  }
}

// --- encoding ---

std::string encode(const Hello& m) noexcept {
  return encoded([&] {
    json j = {{"pid", m.pid}, {"role", m.role}, {"gpu", m.gpu}, {"gpu_total_bytes", m.gpu_total_bytes}};
    if (!m.job.empty()) {
      j["job"] = m.job;
      j["job_ranks"] = m.job_ranks;
    }
    return j;
  });
}

std::string encode(const StatusRequest&) noexcept {
  return encoded([] { return json::object(); });
}

std::string encode(const TraceRequest& m) noexcept {
  return encoded([&] { return json{{"since_ns", m.since_ns}}; });
}

std::string encode(const QuotaRequest& m) noexcept {
  return encoded([&] { return json{{"pid", m.pid}, {"size", m.size}}; });
}

std::string encode(const GrantRequest& m) noexcept {
  return encoded([&] {
    return json{{"name", m.name}, {"role", m.role}, {"gpus", m.gpus}, {"memory_limit", m.memory_limit}};
  });
}

std::string encode(const GrantReply& m) noexcept {
  return encoded([&] { return json{{"name", m.name}, {"socket", m.socket}}; });
}

std::string encode(const PoolRegister& m) noexcept {
  return encoded([&] { return json{{"bytes", m.bytes}, {"seq", m.seq}}; });
}

std::string encode(const PoolAcquire& m) noexcept {
  return encoded([&] {
    return json{{"bytes", m.bytes}, {"chunk_bytes", m.chunk_bytes}, {"seq", m.seq}, {"wait_ms", m.wait_ms},
                {"batch", m.batch}};
  });
}

std::string encode(const PoolRelease& m) noexcept {
  return encoded([&] { return json{{"ids", m.ids}, {"seq", m.seq}}; });
}

std::string encode(const HelloOk& m) noexcept {
  return encoded([&] {
    json j = m.slot < 0 ? json{{"slot", -1}} : json{{"slot", m.slot}, {"sample_us", m.sample_us}};
    if (!m.role.empty()) j["role"] = m.role;
    return j;
  });
}

std::string encode(const QuotaReply& m) noexcept {
  return encoded([&] { return json{{"pid", m.pid}, {"bytes", m.bytes}, {"gpu", m.gpu}}; });
}

std::string encode(const PoolChunk& m) noexcept {
  return encoded([&] {
    if (m.batch) return json{{"ids", m.ids}, {"seq", m.seq}};
    return json{{"id", m.ids.empty() ? 0 : m.ids.front()}, {"seq", m.seq}};
  });
}

std::string encode(const PoolGranted& m) noexcept {
  return encoded([&] {
    json j = {{"chunks", m.chunks}, {"short_bytes", m.short_bytes}, {"reason", m.reason}, {"seq", m.seq}};
    if (m.waited_ms) j["waited_ms"] = *m.waited_ms;
    return j;
  });
}

std::string encode(const PoolRegistered& m) noexcept {
  return encoded([&] { return json{{"id", m.id}, {"seq", m.seq}}; });
}

std::string encode(const PoolReleased& m) noexcept {
  return encoded([&] { return json{{"released", m.released}, {"seq", m.seq}}; });
}

std::string encode(const Error& m) noexcept {
  return encoded([&] { return json{{"errno", m.error_number}, {"message", m.message}}; });
}

// --- requests ---

bool decode(std::string_view payload, Hello& out, Refusal& why) {
  json j = parse(payload);
  if (!j.is_object()) return refuse(why, EINVAL, "hello needs a JSON object");
  Hello m;
  // Informational (tandemd takes the peer's pid from the kernel): any other type is ignored.
  if (auto pid = j.find("pid"); pid != j.end() && pid->is_number_integer()) m.pid = pid->get<int64_t>();
  std::optional<std::string> role = string_field(j, "role", "none");
  if (!role) return refuse(why, EINVAL, "role must be a string");
  if (!is_known_role(*role)) return refuse(why, EINVAL, "unknown role '" + *role + "'");
  m.role = std::move(*role);
  constexpr const char* kGpuText = "gpu must be a 32-digit lowercase hex UUID";
  std::optional<std::string> gpu = string_field(j, "gpu");
  if (!gpu) return refuse(why, EINVAL, kGpuText);
  m.gpu = std::move(*gpu);
  std::optional<uint64_t> total = uint_field(j, "gpu_total_bytes");
  if (!total) return refuse(why, EINVAL, "gpu_total_bytes must be an unsigned integer");
  m.gpu_total_bytes = *total;
  // A training rank of a node-local job (job_hold.h): the job's name and its number of ranks.
  std::optional<uint64_t> job_ranks = uint_field(j, "job_ranks");
  auto job = j.find("job");
  const bool has_job = job != j.end();
  if (has_job && (m.role != "training" || !job->is_string() || job->get_ref<const std::string&>().empty() ||
                  job->get_ref<const std::string&>().size() > kMaxJobName))
    return refuse(why, EINVAL, "job must be a training process's non-empty string of at most " +
                                   std::to_string(kMaxJobName) + " bytes");
  if (!job_ranks || (has_job && (*job_ranks < 2 || *job_ranks > kMaxJobRanks)))
    return refuse(why, EINVAL, "job_ranks must be an integer from 2 to " + std::to_string(kMaxJobRanks));
  if (has_job) {
    m.job = job->get<std::string>();
    m.job_ranks = *job_ranks;
  }
  // Without a GPU (role none, or none named) the client only talks to tandemd.
  if (m.role != "none" && !m.gpu.empty() && !is_gpu_uuid(m.gpu)) return refuse(why, EINVAL, kGpuText);
  out = std::move(m);
  return true;
}

bool decode(std::string_view, StatusRequest& out, Refusal&) {
  out = StatusRequest{};
  return true;
}

bool decode(std::string_view payload, TraceRequest& out, Refusal& why) {
  std::optional<uint64_t> since = uint_field(parse(payload), "since_ns");
  if (!since) return refuse(why, EINVAL, "since_ns must be an unsigned integer");
  out = TraceRequest{*since};
  return true;
}

bool decode(std::string_view payload, QuotaRequest& out, Refusal& why) {
  json j = parse(payload);
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer() || !j.contains("size") ||
      !j["size"].is_string())
    return refuse(why, EINVAL, "a quota request needs {\"pid\": int, \"size\": str}");
  QuotaRequest m;
  m.pid = j["pid"].get<int64_t>();
  m.size = j["size"].get<std::string>();
  if (!parse_memory_size(m.size.c_str(), m.parsed))
    return refuse(why, EINVAL, "size '" + m.size + "': give bytes with a K/M/G/T suffix, or N% of the GPU");
  out = std::move(m);
  return true;
}

bool decode(std::string_view payload, GrantRequest& out, Refusal& why) {
  json j = parse(payload);
  if (!j.is_object()) return refuse(why, EINVAL, "a grant request needs a JSON object");
  GrantRequest m;
  std::optional<std::string> name = string_field(j, "name"), role = string_field(j, "role"),
                             limit = string_field(j, "memory_limit", "");
  if (!name || name->empty() || name->size() > kMaxGrantName ||
      name->find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
    return refuse(why, EINVAL, "a grant's name is 1 to " + std::to_string(kMaxGrantName) + " of [a-z0-9-]");
  if (!role || (*role != "inference" && *role != "batch-inference"))
    return refuse(why, EINVAL, "a grant's role is inference or batch-inference");
  auto gpus = j.find("gpus");
  constexpr const char* kGpus = "a grant's gpus are 1 to 16 32-digit lowercase hex UUIDs";
  if (gpus == j.end() || !gpus->is_array() || gpus->empty() || gpus->size() > 16) return refuse(why, EINVAL, kGpus);
  for (const json& g : *gpus) {
    if (!g.is_string() || !is_gpu_uuid(g.get_ref<const std::string&>())) return refuse(why, EINVAL, kGpus);
    m.gpus.push_back(g.get<std::string>());
  }
  if (!limit || (!limit->empty() && !parse_memory_size(limit->c_str(), m.parsed_limit)))
    return refuse(why, EINVAL, "a grant's memory_limit is bytes with a K/M/G/T suffix, N% of the GPU, or \"\"");
  m.name = std::move(*name);
  m.role = std::move(*role);
  m.memory_limit = std::move(*limit);
  out = std::move(m);
  return true;
}

bool decode(std::string_view payload, PoolRegister& out, Refusal& why) {
  json j = parse(payload);
  std::optional<uint64_t> bytes = uint_field(j, "bytes"), seq = uint_field(j, "seq");
  if (!bytes || !*bytes || !seq)
    return refuse(why, EINVAL, "pool_register needs {\"bytes\": int} and the chunk's descriptor");
  out = PoolRegister{*bytes, *seq};
  return true;
}

bool decode(std::string_view payload, PoolAcquire& out, Refusal& why) {
  json j = parse(payload);
  std::optional<uint64_t> bytes = uint_field(j, "bytes"), chunk = uint_field(j, "chunk_bytes"),
                          seq = uint_field(j, "seq"), wait = uint_field(j, "wait_ms", 1000);
  if (!bytes || !*bytes || !chunk || !*chunk || !seq || !wait)
    return refuse(why, EINVAL, "pool_acquire needs {\"bytes\": int, \"chunk_bytes\": int}");
  const bool batch = j.is_object() && j.contains("batch") && j["batch"].is_boolean() && j["batch"].get<bool>();
  out = PoolAcquire{*bytes, *chunk, *seq, *wait, batch};
  return true;
}

bool decode(std::string_view payload, PoolRelease& out, Refusal& why) {
  json j = parse(payload);
  std::optional<uint64_t> seq = uint_field(j, "seq");
  PoolRelease m;
  if (!j.is_object() || !j.contains("ids") || !uint_array(j["ids"], m.ids) || !seq)
    return refuse(why, EINVAL, "pool_release needs {\"ids\": [int]}");
  m.seq = *seq;
  out = std::move(m);
  return true;
}

bool decode_request(uint32_t type, std::string_view payload, Request& out, Refusal& why) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::hello: return decode_as<Hello>(payload, out, why);
    case MessageType::status_request: return decode_as<StatusRequest>(payload, out, why);
    case MessageType::trace_request: return decode_as<TraceRequest>(payload, out, why);
    case MessageType::quota_request: return decode_as<QuotaRequest>(payload, out, why);
    case MessageType::pool_register: return decode_as<PoolRegister>(payload, out, why);
    case MessageType::pool_acquire: return decode_as<PoolAcquire>(payload, out, why);
    case MessageType::pool_release: return decode_as<PoolRelease>(payload, out, why);
    case MessageType::grant_request: return decode_as<GrantRequest>(payload, out, why);
    default: return refuse(why, EBADMSG, "unknown message type " + std::to_string(type));
  }
}

// --- replies ---

bool decode(std::string_view payload, HelloOk& out, Refusal& why) {
  json j = parse(payload);
  if (!j.is_object()) return refuse(why, EINVAL, kHelloOkNotObject);
  auto slot = j.find("slot");
  if (slot == j.end() || !slot->is_number_integer()) return refuse(why, EINVAL, kHelloOkNoSlot);
  // Non-negative integers parse as unsigned; of the signed ones only -1 (no GPU) is one.
  if (slot->is_number_unsigned() ? slot->get<uint64_t>() >= TANDEM_MAX_SLOTS : slot->get<int64_t>() != -1)
    return refuse(why, EINVAL, kHelloOkSlotRange);
  std::optional<uint64_t> sample_us = uint_field(j, "sample_us");
  if (!sample_us) return refuse(why, EINVAL, kHelloOkSampleUs);
  std::optional<std::string> role = string_field(j, "role", "");
  if (!role || (!role->empty() && !is_known_role(*role))) return refuse(why, EINVAL, "the reply's role is not a role");
  out = HelloOk{static_cast<int32_t>(slot->get<int64_t>()), *sample_us, std::move(*role)};
  return true;
}

bool decode(std::string_view payload, GrantReply& out, Refusal& why) {
  json j = parse(payload);
  std::optional<std::string> name = string_field(j, "name"), socket = string_field(j, "socket");
  if (!name || !socket) return refuse(why, EINVAL, "a grant reply has {\"name\": str, \"socket\": str}");
  out = GrantReply{std::move(*name), std::move(*socket)};
  return true;
}

bool decode(std::string_view payload, QuotaReply& out, Refusal& why) {
  json j = parse(payload);
  std::optional<uint64_t> bytes = uint_field(j, "bytes");
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer() || !bytes)
    return refuse(why, EINVAL, "a quota reply has {\"pid\": int, \"bytes\": int, \"gpu\": str}");
  std::optional<std::string> gpu = string_field(j, "gpu");
  if (!gpu) return refuse(why, EINVAL, "a quota reply's gpu is a string");
  out = QuotaReply{j["pid"].get<int64_t>(), *bytes, std::move(*gpu)};
  return true;
}

bool decode(std::string_view payload, PoolChunk& out, Refusal& why) {
  json j = parse(payload);
  std::optional<uint64_t> seq = uint_field(j, "seq");
  PoolChunk m;
  if (!j.is_object() || !seq) return refuse(why, EINVAL, "pool_chunk needs {\"id\": int} or {\"ids\": [int]}");
  m.seq = *seq;
  if (j.contains("ids")) {
    m.batch = true;
    if (!uint_array(j["ids"], m.ids)) return refuse(why, EINVAL, "pool_chunk's ids are unsigned integers");
  } else {
    std::optional<uint64_t> id = uint_field(j, "id");
    if (!id || !j.contains("id")) return refuse(why, EINVAL, "pool_chunk needs {\"id\": int} or {\"ids\": [int]}");
    m.ids = {*id};
  }
  out = std::move(m);
  return true;
}

bool decode(std::string_view payload, PoolGranted& out, Refusal& why) {
  json j = parse(payload);
  if (!j.is_object()) return refuse(why, EINVAL, "pool_granted is a JSON object");
  std::optional<uint64_t> chunks = uint_field(j, "chunks"), short_bytes = uint_field(j, "short_bytes"),
                          seq = uint_field(j, "seq");
  std::optional<std::string> reason = string_field(j, "reason");
  if (!chunks || !short_bytes || !seq || !reason)
    return refuse(why, EINVAL, "pool_granted has {\"chunks\": int, \"short_bytes\": int, \"reason\": str}");
  PoolGranted m{*chunks, *short_bytes, std::move(*reason), *seq, std::nullopt};
  if (auto waited = j.find("waited_ms"); waited != j.end()) {
    if (!waited->is_number()) return refuse(why, EINVAL, "pool_granted's waited_ms is a number");
    m.waited_ms = waited->get<double>();
  }
  out = std::move(m);
  return true;
}

bool decode(std::string_view payload, PoolRegistered& out, Refusal& why) {
  json j = parse(payload);
  std::optional<uint64_t> id = uint_field(j, "id"), seq = uint_field(j, "seq");
  if (!j.is_object() || !id || !seq) return refuse(why, EINVAL, "pool_registered has {\"id\": int}");
  out = PoolRegistered{*id, *seq};
  return true;
}

bool decode(std::string_view payload, PoolReleased& out, Refusal& why) {
  json j = parse(payload);
  std::optional<uint64_t> released = uint_field(j, "released"), seq = uint_field(j, "seq");
  if (!j.is_object() || !released || !seq) return refuse(why, EINVAL, "pool_released has {\"released\": int}");
  out = PoolReleased{*released, *seq};
  return true;
}

bool decode(std::string_view payload, Error& out, Refusal& why) {
  json j = parse(payload);
  if (!j.is_object()) return refuse(why, EINVAL, "an error reply is a JSON object");
  auto number = j.find("errno");
  std::optional<std::string> message = string_field(j, "message");
  if ((number != j.end() && !number->is_number_integer()) || !message)
    return refuse(why, EINVAL, "an error reply has {\"errno\": int, \"message\": str}");
  int64_t n = number == j.end() ? 0 : number->get<int64_t>();
  out = Error{n < INT32_MIN || n > INT32_MAX ? 0 : static_cast<int>(n), std::move(*message)};
  return true;
}

}  // namespace tandem::msg
