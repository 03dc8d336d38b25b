/* tandem public client API. A process running under libtandem.so may call these; a process
 * without tandem can resolve them with dlsym(RTLD_DEFAULT, ...) and skip them when absent.
 * Stable C ABI; every function is safe to call from any thread. */
#ifndef TANDEM_CLIENT_H
#define TANDEM_CLIENT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the loaded libtandem, e.g. "0.1.0". */
const char* tandem_version(void);

/* Writes the statistics file (TANDEM_STATS_FILE) now, as at exit. Returns 0 on success,
 * -1 when no file is configured, tandem is disabled, or the write failed. */
int tandem_write_stats(void);

/* Memory pressure: called when this process holds more device memory than its quota (tandemd
 * lowered it, `tandemctl mem --set`), with the quota and the bytes in use. Release what you can
 * (a caching allocator's unused blocks: torch.cuda.empty_cache()); further allocations fail
 * with CUDA_ERROR_OUT_OF_MEMORY until the use is under the quota. Called on tandem's progress
 * thread, at most every 100 ms while the process stays over quota (at once when the
 * quota is lowered again); it must return promptly.
 * One callback per process: a new registration replaces the old one, NULL removes it.
 * Returns 0, or -1 when tandem is disabled. */
typedef void (*tandem_memory_pressure_fn)(unsigned long long quota_bytes, unsigned long long in_use_bytes,
                                          void* user);
int tandem_on_memory_pressure(tandem_memory_pressure_fn fn, void* user);

/* Tells tandem that the process released `bytes` of cached memory at its request (counted in
 * the stats file as memory.reported_release_bytes, and logged at info level). */
void tandem_report_release(unsigned long long bytes);

/* Online inference requests (TANDEM_ROLE=inference; in a process with another role both calls
 * do nothing but return the start), for servers that want exact latencies:
 * call begin when a request arrives and end, with what begin returned, when its answer is
 * ready. arrival_ns is the arrival time on CLOCK_MONOTONIC (std::chrono::steady_clock on
 * Linux, time.monotonic_ns() in Python), or 0 for now; begin returns the request's start,
 * 0 when tandem is disabled (end then does nothing). Any number of requests may be open at
 * once, from any threads. The first call turns off the transparent measurement (a request =
 * the launches between two host synchronizations) for the rest of the process. Under policy
 * `slo` tandemd holds the TANDEM_SLO_PCTL-th percentile of these latencies at TANDEM_SLO_MS;
 * under policy `fill` begin may wait, at most TANDEM_SLO_MS, for a bubble that can hold the
 * request. */
unsigned long long tandem_request_begin(unsigned long long arrival_ns);
void tandem_request_end(unsigned long long begin_ns);

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_CLIENT_H */
