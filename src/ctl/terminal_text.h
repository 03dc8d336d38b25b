// What tandemctl writes to a terminal. Job names and cgroup paths are chosen by whoever started
// the process (any user who can reach the socket), so the text commands (status, mem, trace,
// top) pass every line through terminal_text: a newline cannot forge a line, and no escape
// sequence can clear the screen, retitle the terminal or move the cursor. `--json` output is
// JSON, whose strings escape control characters already.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::ctl {

// `text` with every control character (C0, DEL, C1) shown as an escape (\n, \x1b, \u009b),
// bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069: they reorder what
// follows on screen) as \u202e, and a byte that is not part of valid UTF-8 as \xff. Printable
// ASCII and other valid UTF-8 are kept.
std::string terminal_text(std::string_view text);

// The longest prefix of `text` that is at most `bytes` long and does not split a UTF-8
// sequence (a line cut to the terminal's width).
std::string_view cut_to(std::string_view text, size_t bytes);

// printf to stdout, then terminal_text over the result, then a newline: the one way tandemctl's
// text commands print a line.
void print_line(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace tandem::ctl
