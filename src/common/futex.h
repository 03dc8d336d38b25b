// The futex words shared by tandemd and its clients (in the GPU's shared memory, so never
// FUTEX_PRIVATE): a waiter sleeps while the word still holds what it read, bounded; a waker
// changes the word, then wakes everyone waiting on it.
#pragma once
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <ctime>

namespace tandem {

// Sleeps until `*word` is woken or no longer `expected`, at most `timeout_ns`. A read-only
// mapping of the word serves (clients wait on words only tandemd writes).
inline void futex_wait(const uint32_t* word, uint32_t expected, uint64_t timeout_ns) noexcept {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ull), static_cast<long>(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

// Increments `*word` and wakes all its waiters.
inline void futex_bump_and_wake(uint32_t* word) noexcept {
  __atomic_fetch_add(word, 1, __ATOMIC_RELEASE);
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace tandem
