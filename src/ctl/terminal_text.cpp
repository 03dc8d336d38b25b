#include "terminal_text.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>

namespace tandem::ctl {

namespace {

// The length of the valid UTF-8 sequence at `s` (its code point in `cp`), 0 when it is not one
// (overlong forms, surrogates and values past U+10FFFF are not).
size_t utf8_sequence(std::string_view s, uint32_t& cp) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char b = byte(0);
  size_t n = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;
  if (n == 0 || b >= 0xf8 || s.size() < n) return 0;
  cp = b & (0x7f >> n);
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (byte(i) & 0x3f);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

void escape(std::string& out, const char* format, unsigned value) {
  char text[12];
  std::snprintf(text, sizeof text, format, value);
  out += text;
}

}  // namespace

std::string terminal_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    auto b = static_cast<unsigned char>(text[i]);
    if (b >= 0x20 && b < 0x7f) {
      out += static_cast<char>(b);
      ++i;
    } else if (b == '\n') {
      out += "\\n", ++i;
    } else if (b < 0x80) {
      escape(out, "\\x%02x", b), ++i;  // C0 controls (ESC among them), DEL
    } else if (uint32_t cp = 0; size_t n = utf8_sequence(text.substr(i), cp)) {
      bool control = cp <= 0x9f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
      if (control) escape(out, "\\u%04x", cp);
      else out.append(text.substr(i, n));
      i += n;
    } else {
      escape(out, "\\x%02x", b), ++i;  // not UTF-8
    }
  }
  return out;
}

std::string_view cut_to(std::string_view text, size_t bytes) {
  if (text.size() <= bytes) return text;
  size_t end = bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;  // a continuation byte
  return text.substr(0, end);
}

void print_line(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string line(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(line.data(), line.size() + 1, format, again);
  va_end(again);
  std::string shown = terminal_text(line);
  shown += '\n';
  std::fwrite(shown.data(), 1, shown.size(), stdout);
}

}  // namespace tandem::ctl
