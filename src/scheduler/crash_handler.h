// A fatal signal in tandemd (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes the signal, the
// faulting address and a symbolized backtrace to stderr, then dies of that same signal: the exit
// status and core dump are what they would have been without the handler.
#pragma once

namespace tandem::scheduler {

// Installs the handler on an alternate signal stack (a stack overflow still reports). Call once,
// early in main.
void install_crash_handler();

// A test aid (tandemd --crash-for-test): dies of `signal_name` (segv: a write through a null
// pointer; abort: std::abort) from inside tandemd's own functions. Returns false for an unknown name.
bool crash_for_test(const char* signal_name);

}  // namespace tandem::scheduler
