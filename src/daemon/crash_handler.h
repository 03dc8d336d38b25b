// A fatal signal in tandemd (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes the signal, the
// faulting address and a symbolized backtrace to stderr, then dies of that same signal: the exit
// status and core dump are what they would have been without the handler.
#pragma once

namespace tandem::scheduler {

// Installs the handler on an alternate signal stack (a stack overflow still reports). Call once,
// early in main.
void install_crash_handler();

// A test aid (tandemd --crash-for-test): dies from inside tandemd's own functions, as `how` says:
// segv (a write through a null pointer), abort (std::abort), overflow (unbounded recursion: a
// SIGSEGV on the stack's guard page). Returns false for an unknown name.
bool crash_for_test(const char* how);

}  // namespace tandem::scheduler
