// tandemd's configuration file (`tandemd --config FILE`, docs/security.md): one JSON object,
// each key one option, so that later options are new keys. Unknown keys and values of the
// wrong type are errors (a typo must not silently leave a default in force).
#pragma once
#include <string>

#include "server.h"

namespace tandem::scheduler {

struct DaemonConfig {
  ServerOptions server;
  bool foreground = false;
  std::string log;
};

// Applies the JSON text over `config`. False, with `error` naming the key, when it is not a
// JSON object, a key is unknown or a value is wrong (a user or group that does not exist).
bool apply_config(const std::string& text, DaemonConfig& config, std::string& error);

// "alice" or "1001" -> uid; "tandem" or "120" -> gid. False when unknown or, numeric, out of
// range (above 4294967294: it would wrap, 4294967296 to root), with the reason in `why`.
bool resolve_user(const std::string& name, uid_t& uid, std::string* why = nullptr);
bool resolve_group(const std::string& name, gid_t& gid, std::string* why = nullptr);
// "0660" (octal, at most 0777) -> mode.
bool parse_socket_mode(const std::string& text, mode_t& mode);

}  // namespace tandem::scheduler
