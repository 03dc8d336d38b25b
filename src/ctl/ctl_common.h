// What tandemctl's commands share: the usage text, the request/reply exchange with tandemd,
// and printing. One file per command family (status, mem, trace, settings) uses these.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "messages.h"
#include "protocol.h"

namespace tandem::ctl {

extern const char* const kUsage;

// Prints why and the usage to stderr and exits with status 2.
[[noreturn]] void usage_error(const std::string& why);

// One request, one reply within timeout_ms; false with the reason in `why` when no daemon
// answers, it refuses or the reply is not of reply_type (tandemctl top carries on after that).
bool try_ask(const std::string& socket_path, MessageType request, const std::string& body, MessageType reply_type,
             int timeout_ms, std::string& reply, std::string& why);

// One request, one reply; exits with a message (status 1) when no daemon answers or it refuses.
std::string ask(const std::string& socket_path, MessageType request, const std::string& body, MessageType reply_type);

// The daemon's status document, parsed; exits with a message when it is malformed.
nlohmann::json ask_status(const std::string& socket_path);

// `--json` output: one JSON document on one line of stdout.
void print_json(const nlohmann::json& j);

// A client's container as `status` shows it: "docker 4f1c2a9d6e0b" (runtime and short id; the
// pod when Kubernetes names one), else its cgroup path, else "-".
std::string container_text(const nlohmann::json& client);

// Bytes as MiB with one decimal, for the tables.
std::string mib(unsigned long long bytes);

int status_command(const std::string& socket_path, bool json);
int mem_show_command(const std::string& socket_path, bool json);
int mem_set_command(const std::string& socket_path, const std::string& pid_text, std::string size, bool json);
// Records `span_ns` of scheduling (tandemctl trace --seconds) into `out`.
int trace_command(const std::string& socket_path, uint64_t span_ns, const std::string& out, bool json);
int settings_command(bool markdown, bool json);
int top_command(const std::string& socket_path, double interval_s, bool json);

}  // namespace tandem::ctl
