// Logging to stderr, prefixed `[tandem <pid>]`, one write(2) per message so lines from
// several threads and processes never interleave. Level from TANDEM_LOG (default warn).
#pragma once
#include <fmt/format.h>

namespace tandem {

enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3 };

void set_log_level(LogLevel level) noexcept;
LogLevel log_level() noexcept;
bool log_enabled(LogLevel level) noexcept;
// Writes one already formatted line.
void log_write(LogLevel level, const char* message, size_t length) noexcept;

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (!log_enabled(level)) return;
  char buffer[1024];
  auto result = fmt::format_to_n(buffer, sizeof buffer - 1, format, std::forward<Args>(args)...);
  size_t length = result.size < sizeof buffer - 1 ? result.size : sizeof buffer - 1;
  log_write(level, buffer, length);
}

#define TANDEM_LOG_ERROR(...) ::tandem::log(::tandem::LogLevel::error, __VA_ARGS__)
#define TANDEM_LOG_WARN(...) ::tandem::log(::tandem::LogLevel::warn, __VA_ARGS__)
#define TANDEM_LOG_INFO(...) ::tandem::log(::tandem::LogLevel::info, __VA_ARGS__)
#define TANDEM_LOG_DEBUG(...) ::tandem::log(::tandem::LogLevel::debug, __VA_ARGS__)

}  // namespace tandem
