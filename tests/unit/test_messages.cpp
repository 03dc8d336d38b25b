// The protocol's messages (src/common/messages.h): what one side encodes the other decodes to
// the same message, and every payload that is not a valid message is refused with the errno
// and text the client gets as its error reply.
#include <catch2/catch.hpp>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>

#include "messages.h"
#include "tandem/shm_abi.h"

using namespace tandem;

namespace {

template <class T>
T round_trip(const T& m) {
  std::string payload = msg::encode(m);
  REQUIRE_FALSE(payload.empty());
  REQUIRE(nlohmann::json::accept(payload));
  T back;
  msg::Refusal why;
  INFO(payload);
  REQUIRE(msg::decode(payload, back, why));
  return back;
}

// The refusal of `payload` as a message of `type`.
msg::Refusal refusal(MessageType type, const std::string& payload) {
  msg::Request request;
  msg::Refusal why;
  INFO(payload);
  CHECK_FALSE(msg::decode_request(static_cast<uint32_t>(type), payload, request, why));
  return why;
}

bool valid(MessageType type, const std::string& payload) {
  msg::Request request;
  msg::Refusal why;
  return msg::decode_request(static_cast<uint32_t>(type), payload, request, why);
}

}  // namespace

TEST_CASE("messages: every message decodes to what was encoded") {
  msg::Hello hello{4242, "training", std::string(32, 'a'), 80ull << 30, "10.0.0.1:29500", 8};
  CHECK(round_trip(hello) == hello);
  msg::Hello alone{1, "batch-inference", "0123456789abcdef0123456789abcdef", 0, "", 0};
  CHECK(round_trip(alone) == alone);
  CHECK(round_trip(msg::StatusRequest{}) == msg::StatusRequest{});
  CHECK(round_trip(msg::TraceRequest{UINT64_MAX}).since_ns == UINT64_MAX);
  msg::QuotaRequest quota{77, "25%", {}};
  msg::QuotaRequest quota_back = round_trip(quota);
  CHECK(quota_back.pid == 77);
  CHECK(quota_back.size == "25%");
  CHECK((quota_back.parsed.is_percent && quota_back.parsed.percent == 25));
  CHECK(round_trip(quota_back) == quota_back);
  CHECK(round_trip(msg::QuotaRequest{77, "", {}}).parsed.empty);  // "" clears the quota
  CHECK(round_trip(msg::PoolRegister{2 << 20, 9}) == msg::PoolRegister{2 << 20, 9});
  msg::PoolAcquire acquire{64 << 20, 2 << 20, 3, 250, true};
  CHECK(round_trip(acquire) == acquire);
  msg::PoolRelease release{{1, 2, UINT64_MAX}, 4};
  CHECK(round_trip(release) == release);

  CHECK(round_trip(msg::HelloOk{63, 1000}) == msg::HelloOk{63, 1000});
  CHECK(round_trip(msg::HelloOk{}) == msg::HelloOk{});  // registered without a GPU
  msg::QuotaReply quota_reply{77, 1ull << 33, std::string(32, 'f')};
  CHECK(round_trip(quota_reply) == quota_reply);
  msg::PoolChunk one{{17}, 5, false}, batch{{1, 2, 3}, 5, true};
  CHECK(round_trip(one) == one);
  CHECK(round_trip(batch) == batch);
  msg::PoolGranted granted{1, 2 << 20, "training has nothing left to give", 6, std::nullopt};
  CHECK(round_trip(granted) == granted);
  granted.waited_ms = 12.5;
  CHECK(round_trip(granted) == granted);
  CHECK(round_trip(msg::PoolRegistered{8, 9}) == msg::PoolRegistered{8, 9});
  CHECK(round_trip(msg::PoolReleased{3, 9}) == msg::PoolReleased{3, 9});
  CHECK(round_trip(msg::Error{EACCES, "role 'training' is not permitted"}) ==
        msg::Error{EACCES, "role 'training' is not permitted"});
}

TEST_CASE("messages: the encoding is tandemd's wire format") {
  // What older peers sent and read: the same keys, nothing else (object keys come sorted).
  CHECK(msg::encode(msg::StatusRequest{}) == "{}");
  CHECK(msg::encode(msg::HelloOk{}) == R"({"slot":-1})");
  CHECK(msg::encode(msg::HelloOk{3, 1000}) == R"({"sample_us":1000,"slot":3})");
  CHECK(msg::encode(msg::PoolChunk{{17}, 5, false}) == R"({"id":17,"seq":5})");
  CHECK(msg::encode(msg::PoolChunk{{1, 2}, 5, true}) == R"({"ids":[1,2],"seq":5})");
  CHECK(msg::encode(msg::Error{EINVAL, "bad"}) == R"({"errno":22,"message":"bad"})");
  CHECK(msg::encode(msg::Hello{1, "training", "", 0, "", 0}) ==
        R"({"gpu":"","gpu_total_bytes":0,"pid":1,"role":"training"})");
}

TEST_CASE("messages: encoding never throws; bytes that are not UTF-8 go out replaced") {
  // A job name from the environment (MASTER_ADDR) may hold any bytes: nlohmann's dump throws
  // on them, and an exception must never cross a hook.
  msg::Hello hello{1, "training", std::string(32, '0'), 0, "j\xff\xfe", 2};
  static_assert(noexcept(msg::encode(hello)));
  msg::Hello back = round_trip(hello);
  CHECK(back.job == "j\xEF\xBF\xBD\xEF\xBF\xBD");  // U+FFFD twice
  CHECK(round_trip(msg::Error{1, "\xc3("}).message == "\xEF\xBF\xBD(");
}

TEST_CASE("messages: a hello is checked field by field") {
  const std::string gpu = "0123456789abcdef0123456789abcdef";
  CHECK(valid(MessageType::hello, R"({"role": "training", "gpu": ")" + gpu + R"("})"));
  CHECK(valid(MessageType::hello, R"({})"));                            // role none, no GPU
  CHECK(valid(MessageType::hello, R"({"pid": "ignored", "role": "none", "gpu": "xyz"})"));  // none: no GPU used
  CHECK(valid(MessageType::hello, R"({"role": "inference", "job_ranks": 3})"));  // ranks without a job: ignored

  msg::Refusal why = refusal(MessageType::hello, "not json");
  CHECK(why.error_number == EINVAL);
  CHECK(why.message == "hello needs a JSON object");
  CHECK(refusal(MessageType::hello, "[1]").message == "hello needs a JSON object");
  CHECK(refusal(MessageType::hello, R"({"role": "admin"})").message == "unknown role 'admin'");
  CHECK(refusal(MessageType::hello, R"({"role": 5})").error_number == EINVAL);
  CHECK(refusal(MessageType::hello, R"({"role": "training", "gpu": 7})").message ==
        "gpu must be a 32-digit lowercase hex UUID");
  CHECK(refusal(MessageType::hello, R"({"role": "training", "gpu": "0123456789ABCDEF0123456789ABCDEF"})").message ==
        "gpu must be a 32-digit lowercase hex UUID");
  for (const char* total : {"1e300", "-1", "1.5", "\"8G\""})
    CHECK(refusal(MessageType::hello, std::string(R"({"role": "training", "gpu_total_bytes": )") + total + "}")
              .message == "gpu_total_bytes must be an unsigned integer");
  const std::string job_text = "job must be a training process's non-empty string of at most 256 bytes";
  const std::string ranks_text = "job_ranks must be an integer from 2 to 1024";
  auto with_job = [&](const std::string& role, const std::string& job, const std::string& ranks) {
    return R"({"role": ")" + role + R"(", "gpu": ")" + gpu + R"(", "job": )" + job + R"(, "job_ranks": )" + ranks + "}";
  };
  CHECK(valid(MessageType::hello, with_job("training", "\"j\"", "2")));
  CHECK(valid(MessageType::hello, with_job("training", '"' + std::string(256, 'x') + '"', "1024")));
  CHECK(refusal(MessageType::hello, with_job("training", '"' + std::string(257, 'x') + '"', "2")).message == job_text);
  CHECK(refusal(MessageType::hello, with_job("training", "\"\"", "2")).message == job_text);
  CHECK(refusal(MessageType::hello, with_job("training", "42", "2")).message == job_text);
  CHECK(refusal(MessageType::hello, with_job("inference", "\"j\"", "2")).message == job_text);
  for (const char* ranks : {"1", "1025", "-2", "2.5"})
    CHECK(refusal(MessageType::hello, with_job("training", "\"j\"", ranks)).message == ranks_text);
}

TEST_CASE("messages: the other requests are checked") {
  CHECK(valid(MessageType::status_request, "anything at all"));
  CHECK(valid(MessageType::trace_request, ""));  // no object: the whole trace
  for (const char* since : {R"({"since_ns": 1e30})", R"({"since_ns": -5})", R"({"since_ns": "soon"})"})
    CHECK(refusal(MessageType::trace_request, since).message == "since_ns must be an unsigned integer");

  const std::string quota_text = R"(a quota request needs {"pid": int, "size": str})";
  for (const char* quota : {"{}", R"({"pid": 1})", R"({"pid": 1.5, "size": "1G"})", R"({"pid": 1, "size": 5})"})
    CHECK(refusal(MessageType::quota_request, quota).message == quota_text);
  CHECK(refusal(MessageType::quota_request, R"({"pid": 1, "size": "lots"})").message ==
        "size 'lots': give bytes with a K/M/G/T suffix, or N% of the GPU");

  const std::string register_text = R"(pool_register needs {"bytes": int} and the chunk's descriptor)";
  for (const char* reg : {"", "{}", R"({"bytes": 0})", R"({"bytes": 1e30})", R"({"bytes": 1, "seq": -1})"})
    CHECK(refusal(MessageType::pool_register, reg).message == register_text);
  const std::string acquire_text = R"(pool_acquire needs {"bytes": int, "chunk_bytes": int})";
  for (const char* acquire : {R"({"bytes": 1})", R"({"bytes": -1, "chunk_bytes": 2})", R"({"bytes": 1, "chunk_bytes": 2.5e19})",
                              R"({"bytes": 1, "chunk_bytes": 2, "wait_ms": 1e40})", R"({"bytes": 1, "chunk_bytes": 0})"})
    CHECK(refusal(MessageType::pool_acquire, acquire).message == acquire_text);
  msg::Request request;
  msg::Refusal why;
  REQUIRE(msg::decode_request(static_cast<uint32_t>(MessageType::pool_acquire), R"({"bytes": 1, "chunk_bytes": 2})",
                              request, why));
  CHECK(std::get<msg::PoolAcquire>(request) == msg::PoolAcquire{1, 2, 0, 1000, false});  // the defaults
  for (const char* release : {"{}", R"({"ids": 1})", R"({"ids": [1.5]})", R"({"ids": [-1]})", R"({"ids": [1], "seq": -1})"})
    CHECK(refusal(MessageType::pool_release, release).message == R"(pool_release needs {"ids": [int]})");

  why = refusal(static_cast<MessageType>(77), "{}");
  CHECK(why.error_number == EBADMSG);
  CHECK(why.message == "unknown message type 77");
  CHECK(refusal(MessageType::hello_ok, R"({"slot": 1})").error_number == EBADMSG);  // a reply is no request
}

TEST_CASE("messages: replies from tandemd are checked before a client uses them") {
  msg::HelloOk ok;
  msg::Refusal why;
  CHECK(msg::decode(R"({"slot": 63})", ok, why));
  for (const char* bad : {R"({"slot": 64})", R"({"slot": -2})", R"({"slot": 18446744073709551615})"}) {
    CHECK_FALSE(msg::decode(bad, ok, why));
    CHECK(why.message == msg::kHelloOkSlotRange);
  }
  CHECK_FALSE(msg::decode(R"({"slot": "3"})", ok, why));
  CHECK(why.message == msg::kHelloOkNoSlot);
  CHECK_FALSE(msg::decode(R"({"slot": 3, "sample_us": -1})", ok, why));
  CHECK_FALSE(msg::decode("[]", ok, why));
  CHECK(why.message == msg::kHelloOkNotObject);

  msg::PoolChunk chunk;
  CHECK_FALSE(msg::decode(R"({"ids": [1, 2.5], "seq": 1})", chunk, why));
  CHECK_FALSE(msg::decode(R"({"seq": 1})", chunk, why));
  msg::Error error;
  CHECK(msg::decode(R"({"errno": 13})", error, why));  // the message may be left out
  CHECK(error == msg::Error{EACCES, ""});
  CHECK_FALSE(msg::decode(R"({"errno": 13, "message": 5})", error, why));
  msg::QuotaReply quota;
  CHECK_FALSE(msg::decode(R"({"pid": 1, "bytes": -1, "gpu": "g"})", quota, why));
}

TEST_CASE("messages: roles and their shared-memory codes") {
  for (const char* role : {"none", "training", "inference", "batch-inference"}) CHECK(msg::is_known_role(role));
  CHECK_FALSE(msg::is_known_role("Training"));
  CHECK(msg::role_code("training") == TANDEM_ROLE_TRAINING);
  CHECK(msg::role_code("inference") == TANDEM_ROLE_INFERENCE);
  CHECK(msg::role_code("batch-inference") == TANDEM_ROLE_BATCH_INFERENCE);
  CHECK(msg::role_code("none") == TANDEM_ROLE_NONE);
  CHECK(msg::role_code("anything") == TANDEM_ROLE_NONE);
}
