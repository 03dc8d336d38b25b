// The terminal for tandemctl top, with plain ANSI escapes (no curses): the alternate screen,
// no cursor, keys read one at a time without echo; and the terminal as it was given back on
// every way out — return, q, SIGINT, SIGTERM, SIGHUP — and around a Ctrl-Z stop.
#pragma once

#include <string>
#include <vector>

namespace tandem::ctl {

class TerminalScreen {
 public:
  // Takes the terminal on out_fd (keys from in_fd when that is a terminal too) and installs the
  // signal handlers. False with the reason when out_fd is not a terminal.
  bool open(int in_fd, int out_fd, std::string& why);
  // Gives the terminal back as it was; idempotent.
  void close();
  ~TerminalScreen() { close(); }

  // Rows and columns now (80x24 when the terminal does not say).
  void size(int& rows, int& columns) const;
  // Replaces the screen with these lines (each already cut to the width).
  void draw(const std::vector<std::string>& lines);
  // Waits up to timeout_ms for a key; returns it, or 0 for none (timeout, signal, resize).
  char wait_key(int timeout_ms);

  // The signal that asked to stop (SIGINT, SIGTERM, SIGHUP), 0 if none.
  int stop_signal() const;
  // After Ctrl-Z: gives the terminal back, stops, and takes it again when continued. True if
  // that happened (the screen must be drawn anew).
  bool handle_suspend();

 private:
  void enter();
  void leave();
  int in_fd_ = -1, out_fd_ = -1;
  bool raw_ = false;   // in_fd is a terminal whose settings we changed (and give back)
  bool keys_ = false;  // keys are read from in_fd (until its end)
  bool open_ = false;
};

}  // namespace tandem::ctl
