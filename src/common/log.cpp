#include "log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>

namespace tandem {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};
constexpr const char* kLevelNames[] = {"error", "warn", "info", "debug"};
}  // namespace

void set_log_level(LogLevel level) noexcept { g_level.store(static_cast<int>(level)); }
LogLevel log_level() noexcept { return static_cast<LogLevel>(g_level.load()); }
bool log_enabled(LogLevel level) noexcept {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void log_write(LogLevel level, const char* message, size_t length) noexcept {
  int saved_errno = errno;  // logging must never change what the application sees
  char line[1200];
  int n = std::snprintf(line, sizeof line, "[tandem %d] %s: %.*s\n", static_cast<int>(getpid()),
                        kLevelNames[static_cast<int>(level)], static_cast<int>(length), message);
  if (n > 0) {
    size_t len = static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1;
    ssize_t ignored = ::write(STDERR_FILENO, line, len);
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace tandem
