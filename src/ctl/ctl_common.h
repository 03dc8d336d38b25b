// What tandemctl's commands share: the usage text, the request/reply exchange with tandemd,
// and printing. One file per command family (status, mem, trace, settings) uses these.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "protocol.h"

namespace tandem::ctl {

extern const char* const kUsage;

// Prints why and the usage to stderr and exits with status 2.
[[noreturn]] void usage_error(const std::string& why);

// One request, one reply; exits with a message (status 1) when no daemon answers or it refuses.
std::string ask(const std::string& socket_path, MessageType request, const std::string& body, MessageType reply_type);

// The daemon's status document, parsed; exits with a message when it is malformed.
nlohmann::json ask_status(const std::string& socket_path);

// `--json` output: one JSON document on one line of stdout.
void print_json(const nlohmann::json& j);

// Bytes as MiB with one decimal, for the tables.
std::string mib(unsigned long long bytes);

int status_command(const std::string& socket_path, bool json);
int mem_show_command(const std::string& socket_path, bool json);
int mem_set_command(const std::string& socket_path, const std::string& pid_text, std::string size, bool json);
int trace_command(const std::string& socket_path, double seconds, const std::string& out, bool json);
int settings_command(bool markdown, bool json);

}  // namespace tandem::ctl
