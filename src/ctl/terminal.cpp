// tandemctl top's terminal (terminal.h): termios raw-ish mode, ANSI escapes, signal flags.
#include "terminal.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

namespace tandem::ctl {
namespace {

// Set by the handlers, read by the loop: the handlers only store (async-signal-safe); the
// terminal is given back by the loop, which poll()'s EINTR wakes.
volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_suspended = 0;
termios g_saved{};

void on_stop(int signo) { g_stop_signal = signo; }
void on_suspend(int) { g_suspended = 1; }
void on_resize(int) {}

void install(int signo, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll() returns EINTR and the loop sees the flag at once
  sigaction(signo, &sa, nullptr);
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone: nothing to draw on
    done += static_cast<size_t>(n);
  }
}

// Alternate screen and no cursor; given back in the reverse order.
constexpr const char* kEnterScreen = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
constexpr const char* kLeaveScreen = "\x1b[?25h\x1b[?1049l";

}  // namespace

bool TerminalScreen::open(int in_fd, int out_fd, std::string& why) {
  if (!isatty(out_fd)) {
    why = "standard output is not a terminal (top --json prints one snapshot)";
    return false;
  }
  in_fd_ = in_fd;
  out_fd_ = out_fd;
  raw_ = keys_ = isatty(in_fd) && tcgetattr(in_fd, &g_saved) == 0;
  install(SIGINT, on_stop);
  install(SIGTERM, on_stop);
  install(SIGHUP, on_stop);
  install(SIGTSTP, on_suspend);
  install(SIGWINCH, on_resize);
  enter();
  open_ = true;
  return true;
}

void TerminalScreen::enter() {
  if (raw_) {
    termios raw = g_saved;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // ISIG stays: Ctrl-C and Ctrl-Z work
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    tcsetattr(in_fd_, TCSAFLUSH, &raw);
  }
  write_all(out_fd_, kEnterScreen);
}

void TerminalScreen::leave() {
  write_all(out_fd_, kLeaveScreen);
  if (raw_) tcsetattr(in_fd_, TCSAFLUSH, &g_saved);
}

void TerminalScreen::close() {
  if (!open_) return;
  open_ = false;
  leave();
  for (int signo : {SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGWINCH}) signal(signo, SIG_DFL);
}

void TerminalScreen::size(int& rows, int& columns) const {
  winsize w{};
  if (ioctl(out_fd_, TIOCGWINSZ, &w) == 0 && w.ws_row > 0 && w.ws_col > 0) {
    rows = w.ws_row;
    columns = w.ws_col;
  } else {
    rows = 24;
    columns = 80;
  }
}

void TerminalScreen::draw(const std::vector<std::string>& lines) {
  std::string frame = "\x1b[H";
  for (size_t i = 0; i < lines.size(); ++i) {
    frame += lines[i];
    frame += "\x1b[K";  // the rest of the row: what a longer previous frame left there
    if (i + 1 < lines.size()) frame += "\r\n";
  }
  frame += "\x1b[J";  // and the rows below
  write_all(out_fd_, frame);
}

char TerminalScreen::wait_key(int timeout_ms) {
  if (g_stop_signal || g_suspended) return 0;
  pollfd p{keys_ ? in_fd_ : -1, POLLIN, 0};
  if (poll(&p, 1, timeout_ms < 0 ? 0 : timeout_ms) <= 0) return 0;
  char c = 0;
  if (::read(in_fd_, &c, 1) != 1) {
    keys_ = false;  // end of input: no more keys, and no busy loop on a readable EOF
    return 0;
  }
  return c;
}

int TerminalScreen::stop_signal() const { return g_stop_signal; }

bool TerminalScreen::handle_suspend() {
  if (!g_suspended) return false;
  g_suspended = 0;
  leave();
  signal(SIGTSTP, SIG_DFL);
  raise(SIGTSTP);  // stops here; continues on SIGCONT
  install(SIGTSTP, on_suspend);
  if (raw_) tcgetattr(in_fd_, &g_saved);  // the shell may have changed it meanwhile
  enter();
  return true;
}

}  // namespace tandem::ctl
