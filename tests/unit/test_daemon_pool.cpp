// tandemd's pool bookkeeping against what a hostile or crashing client does: orphaned chunks
// freed when (and only when) their process exits, watched without a scan per tick; owners
// named by never-reused client ids; a forgotten GPU's descriptors closed.
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "memory_pool.h"

using tandem::scheduler::MemoryPool;

namespace {
int open_count() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) n += fcntl(fd, F_GETFD) != -1;
  return n;
}
int dev_null() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }
}  // namespace

TEST_CASE("pool: an orphan's chunks are freed when its process exits, not before", "[daemon]") {
  int go[2];
  REQUIRE(pipe(go) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    char byte;
    ssize_t ignored = read(go[0], &byte, 1);  // lives until told
    (void)ignored;
    _exit(0);
  }
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, child, 0));
  REQUIRE(pidfd >= 0);
  MemoryPool pool;
  const std::string gpu = "g";
  for (int i = 0; i < 100; ++i) pool.add(dev_null(), 4096, gpu, 7, "uid:0");
  pool.add(dev_null(), 4096, gpu, 8, "uid:0");  // another client's: untouched
  pool.disconnect(7, pidfd);
  CHECK(pool.orphan_processes() == 1);
  CHECK(pool.totals(gpu).orphaned_bytes == 100 * 4096);
  CHECK(pool.reap_orphans().empty());  // alive: nothing moves
  CHECK(pool.free_bytes(gpu, 4096, "uid:0") == 0);
  REQUIRE(write(go[1], "x", 1) == 1);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  std::vector<std::string> freed_on = pool.reap_orphans();
  CHECK(freed_on == std::vector<std::string>{gpu});
  CHECK(pool.free_bytes(gpu, 4096, "uid:0") == 100 * 4096);
  CHECK(pool.orphan_processes() == 0);
  CHECK(pool.held_by(8) == 4096);
  CHECK(pool.reap_orphans().empty());
  close(go[0]);
  close(go[1]);
}

TEST_CASE("pool: chunks follow the client id, not a reused descriptor number", "[daemon]") {
  MemoryPool pool;
  pool.add(dev_null(), 4096, "g", 3, "uid:0");
  pool.disconnect(3, -1);  // unknown process: taken as gone, the chunk is free
  auto taken = pool.take("g", 4096, 1, 4, "uid:0");
  REQUIRE(taken.size() == 1);
  CHECK(pool.release(3, {taken[0]->id}) == 0);  // the old owner's id holds nothing any more
  CHECK(pool.release(0, {taken[0]->id}) == 0);  // nobody (0) releases nothing
  CHECK(pool.held_by(4) == 4096);
  CHECK(pool.held_by(3) == 0);
  CHECK(pool.release(4, {taken[0]->id}) == 1);
  CHECK(pool.held_by(4) == 0);
  // What each owner holds is kept as chunks move (the status asks it per slot).
  pool.add(dev_null(), 4096, "g", 5, "uid:0");
  pool.add(dev_null(), 8192, "g", 5, "uid:0");
  CHECK(pool.held_by(5) == 12288);
  pool.take("g", 4096, 1, 6, "uid:0");
  CHECK(pool.held_by(6) == 4096);
  pool.disconnect(5, -1);
  CHECK(pool.held_by(5) == 0);
  pool.forget_gpu("g");
  CHECK(pool.held_by(6) == 0);
}

TEST_CASE("pool: a forgotten GPU's chunks and orphan pidfds are closed", "[daemon]") {
  int before = open_count();
  {
    MemoryPool pool;
    int self = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
    REQUIRE(self >= 0);
    for (int i = 0; i < 10; ++i) pool.add(dev_null(), 4096, "fake", 1, "uid:0");
    pool.add(dev_null(), 4096, "real", 2, "uid:0");
    pool.disconnect(1, self);  // this process is alive: orphaned
    CHECK(pool.orphan_processes() == 1);
    int held = open_count();
    pool.forget_gpu("fake");
    CHECK(open_count() == held - 11);  // ten chunks and the pidfd
    CHECK(pool.orphan_processes() == 0);
    CHECK_FALSE(pool.has_chunks_on("fake"));
    CHECK(pool.has_chunks_on("real"));
    CHECK(pool.size() == 1);
  }
  CHECK(open_count() == before);  // the rest closed with the pool
}
