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

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_CLIENT_H */
