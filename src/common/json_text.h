// JSON text out of tandem's programs: every document tandemd sends (replies, errors, status,
// trace) and tandemctl prints is written by json_text. Strings that come from a client or from a
// cgroup path are not trusted to be UTF-8 (a cgroup directory may be named with any bytes but
// '/' and NUL), and nlohmann's default dump throws on a byte that is not (type_error 316): one
// process in such a cgroup broke `tandemctl status` for every user. Here each invalid byte
// becomes U+FFFD, the replacement character, in one place instead of at each field.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tandem {

inline std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tandem
