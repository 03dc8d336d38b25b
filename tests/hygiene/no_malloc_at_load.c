/* What loading libtandem.so costs a program that never uses CUDA, as /etc/ld.so.preload loads
 * it into every process: no allocation (malloc is never initialised before main), no thread
 * (descriptors: e2e_preload_untouched, where the test controls what is inherited). Run with LD_PRELOAD=libtandem.so; exits non-zero, saying why, otherwise.
 * Checked first thing in main: stdio allocates its buffers on first use. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  struct mallinfo2 before_main = mallinfo2();
  if (!dlsym(RTLD_DEFAULT, "tandem_version")) {
    printf("FAIL libtandem.so is not loaded (run with LD_PRELOAD)\n");
    return 1;
  }
  if (before_main.arena != 0 || before_main.hblks != 0) {
    printf("FAIL %zu bytes of heap and %zu mmapped blocks were allocated before main\n", before_main.arena,
           before_main.hblks);
    return 1;
  }
  int threads = 0;
  DIR* d = opendir("/proc/self/task");
  for (struct dirent* e; d && (e = readdir(d));) threads += e->d_name[0] != '.';
  if (d) closedir(d);
  if (threads != 1) {
    printf("FAIL %d threads\n", threads);
    return 1;
  }
  printf("ok   libtandem.so loaded: no allocation before main, 1 thread\n");
  return 0;
}
