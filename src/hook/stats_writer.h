// The statistics file (schema: docs/stats.md). Written at exit, atomically (an
// exclusively created temporary file with an unpredictable name, then rename).
#pragma once
#include <string>

namespace tandem::hook {

// `%p` in `pattern` becomes the pid.
std::string expand_stats_path(const char* pattern, int pid);

// Snapshot of the process's counters as JSON text.
std::string stats_json(const char* role);

// Writes the file; logs and returns false on failure. Never throws.
bool write_stats_file(const char* pattern, const char* role) noexcept;

}  // namespace tandem::hook
