// The fatal-signal backtrace. Everything the handler calls is async-signal-safe: write(2) to
// stderr, formatting into a buffer on the (alternate) stack, libunwind's local unwinder; no
// malloc, no fmt, no locks (the crash may have happened inside any of them). Names are written
// mangled: demangling allocates.
#define UNW_LOCAL_ONLY
#include "crash_handler.h"

#include <libunwind.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace tandem::scheduler {
namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kMaxFrames = 64;
constexpr unsigned kReportSeconds = 5;

// Static, not malloc'ed: the handler may run when the heap is what broke. libunwind's
// unw_get_proc_name reads ELF symbol tables on this stack, hence its size.
alignas(16) char g_alt_stack[128 * 1024];

// Appends to a fixed buffer; truncates rather than overflows.
struct Line {
  char text[512];
  size_t n = 0;
  void add(const char* s) {
    while (*s && n < sizeof text) text[n++] = *s++;
  }
  void add_hex(uintptr_t v) {
    char digits[2 + 2 * sizeof v];
    size_t i = sizeof digits;
    do {
      digits[--i] = "0123456789abcdef"[v & 0xf];
      v >>= 4;
    } while (v && i > 2);
    digits[--i] = 'x';
    digits[--i] = '0';
    for (; i < sizeof digits && n < sizeof text; ++i) text[n++] = digits[i];
  }
  void add_dec(long v) {
    char digits[24];
    size_t i = sizeof digits;
    bool negative = v < 0;
    unsigned long u = negative ? 0ul - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
    do {
      digits[--i] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u);
    if (negative) digits[--i] = '-';
    for (; i < sizeof digits && n < sizeof text; ++i) text[n++] = digits[i];
  }
  void flush() {
    if (n == sizeof text) text[n - 1] = '\n';
    size_t done = 0;
    while (done < n) {
      ssize_t w = write(STDERR_FILENO, text + done, n - done);
      if (w <= 0) break;  // stderr closed or full: nothing better to do in a handler
      done += static_cast<size_t>(w);
    }
    n = 0;
  }
};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
  }
}

void write_backtrace() {
  unw_context_t context;
  unw_cursor_t cursor;
  if (unw_getcontext(&context) != 0 || unw_init_local(&cursor, &context) != 0) {
    Line l;
    l.add("tandemd: no backtrace (libunwind could not start)\n");
    l.flush();
    return;
  }
  int frame = 0;
  for (; frame < kMaxFrames && unw_step(&cursor) > 0; ++frame) {
    unw_word_t pc = 0, offset = 0;
    unw_get_reg(&cursor, UNW_REG_IP, &pc);
    char name[256];
    Line l;
    l.add("tandemd:   #");
    l.add_dec(frame);
    l.add(" ");
    if (unw_get_proc_name(&cursor, name, sizeof name, &offset) == 0) {
      l.add(name);
      l.add("+");
      l.add_hex(offset);
    } else {
      l.add("??");
    }
    l.add(" pc ");
    l.add_hex(pc);
    l.add("\n");
    l.flush();
  }
  if (frame == kMaxFrames) {  // a deep recursion, typically: its innermost frames tell the story
    Line l;
    l.add("tandemd:   (outer frames not shown)\n");
    l.flush();
  }
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  // Bound the report: should the unwinder block (a lock the crash left held inside the dynamic
  // loader, say), SIGALRM's default action ends the process instead of leaving it hung.
  alarm(kReportSeconds);
  Line l;
  l.add("tandemd: fatal signal ");
  l.add(signal_name(sig));
  l.add(" (");
  l.add_dec(sig);
  l.add(")");
  if (sig != SIGABRT) {  // for the others si_addr is the faulting address or instruction
    l.add(" at address ");
    l.add_hex(reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr));
  }
  l.add(", pid ");
  l.add_dec(getpid());
  l.add("; backtrace:\n");
  l.flush();
  write_backtrace();
  l.add("tandemd: the socket stays behind; the next tandemd replaces it\n");
  l.flush();
  // Die of the same signal, with its default action (exit status, core dump). It is blocked
  // while this handler runs: unblock it so raise() delivers it now.
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  _exit(128 + sig);  // not reached; in case the signal was somehow ignored
}

// noinline: the test looks for these names in the backtrace.
[[gnu::noinline]] void write_through_null() {
  volatile int* volatile null = nullptr;
  *null = 1;
}

[[gnu::noinline]] void abort_for_test() { std::abort(); }

// Unbounded recursion until the stack's guard page: the handler can only run on the alternate
// stack. The array defeats tail-call elimination and makes each frame large.
volatile int g_recursion_limit = 1 << 30;  // far beyond any stack; volatile: the compiler cannot know
[[gnu::noinline]] int recurse_for_test(int depth) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(depth);
  if (depth >= g_recursion_limit) return frame[0];
  return recurse_for_test(depth + 1) + frame[0];
}

}  // namespace

void install_crash_handler() {
  stack_t stack{};
  stack.ss_sp = g_alt_stack;
  stack.ss_size = sizeof g_alt_stack;
  sigaltstack(&stack, nullptr);
  // Load libunwind's lazily bound pieces now, outside any handler.
  unw_context_t context;
  unw_cursor_t cursor;
  if (unw_getcontext(&context) == 0 && unw_init_local(&cursor, &context) == 0) unw_step(&cursor);
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  // All of them blocked while the handler runs: a fault inside it (an unwinder reading a
  // smashed stack) then kills the process at once instead of re-entering the handler.
  sigemptyset(&sa.sa_mask);
  for (int sig : kFatalSignals) sigaddset(&sa.sa_mask, sig);
  for (int sig : kFatalSignals) sigaction(sig, &sa, nullptr);
}

bool crash_for_test(const char* how) {
  if (std::strcmp(how, "segv") == 0) write_through_null();
  else if (std::strcmp(how, "abort") == 0) abort_for_test();
  else if (std::strcmp(how, "overflow") == 0) recurse_for_test(0);
  else return false;
  return true;  // not reached
}

}  // namespace tandem::scheduler
