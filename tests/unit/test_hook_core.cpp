#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "collective_waits.h"
#include "handle_map.h"
#include "kernel_kind.h"
#include "mps_share.h"
#include "progress.h"
#include "resolver.h"
#include "settings_env.h"
#include "stats_writer.h"

using namespace tandem::hook;

TEST_CASE("NCCL kernels are recognised by name, mangled too") {
  CHECK(is_nccl_kernel_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
  CHECK(is_nccl_kernel_name("_Z25ncclKernel_AllGather_RING_LLP14ncclDevComm"));
  CHECK(is_nccl_kernel_name("ncclSymkDevKernel_AllReduce"));
  CHECK(is_nccl_kernel_name("_Z29ncclDevKernel_SendRecv_Sum_u8P14ncclDevKernelArgs"));
  CHECK_FALSE(is_nccl_kernel_name("spin_kernel"));
  CHECK_FALSE(is_nccl_kernel_name("volta_sgemm_128x64_nn"));
  CHECK_FALSE(is_nccl_kernel_name(nullptr));
}

TEST_CASE("NCCL point-to-point kernels (SendRecv) are told from collectives by name") {
  CHECK(is_nccl_p2p_kernel_name("ncclDevKernel_SendRecv"));  // NCCL 2.19+
  CHECK(is_nccl_p2p_kernel_name("_Z29ncclDevKernel_SendRecv_Sum_u8P14ncclDevKernelArgs"));
  CHECK(is_nccl_p2p_kernel_name("_Z42ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_tP11ncclDevCommPvP8ncclWork"));
  CHECK_FALSE(is_nccl_p2p_kernel_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
  CHECK_FALSE(is_nccl_p2p_kernel_name("ncclDevKernel_Generic"));  // may run any work: a collective
  CHECK_FALSE(is_nccl_p2p_kernel_name("ncclSymkDevKernel_AllGather"));
  CHECK_FALSE(is_nccl_p2p_kernel_name("my_SendRecv_kernel"));  // not NCCL's
  CHECK_FALSE(is_nccl_p2p_kernel_name(nullptr));
}

TEST_CASE("handle map: find, overwrite, erase, zero key") {
  static HandleMap map;  // large: static storage
  CHECK(map.find(0x1000) == HandleMap::kAbsent);
  REQUIRE(map.put(0x1000, 7));
  CHECK(map.find(0x1000) == 7);
  REQUIRE(map.put(0x1000, 9));
  CHECK(map.find(0x1000) == 9);
  map.erase(0x1000);
  CHECK(map.find(0x1000) == HandleMap::kAbsent);
  CHECK_FALSE(map.put(0, 1));
  CHECK(map.find(0) == HandleMap::kAbsent);
}

TEST_CASE("handle map: concurrent readers see complete inserts") {
  static HandleMap map;
  constexpr uintptr_t kKeys = 2000;
  std::thread writer([] {
    for (uintptr_t k = 1; k <= kKeys; ++k) map.put(k * 64, k);
  });
  bool consistent = true;
  std::thread reader([&] {
    for (int round = 0; round < 200; ++round)
      for (uintptr_t k = 1; k <= kKeys; ++k) {
        uint64_t v = map.find(k * 64);
        if (v != HandleMap::kAbsent && v != k) consistent = false;
      }
  });
  writer.join();
  reader.join();
  CHECK(consistent);
  for (uintptr_t k = 1; k <= kKeys; ++k) REQUIRE(map.find(k * 64) == k);
}

TEST_CASE("resolver knows exactly the hooked ABI symbols") {
  const HookedSymbol* h = find_hooked_symbol("cuLaunchKernel_ptsz");
  REQUIRE(h);
  CHECK(std::string(h->name) == "cuLaunchKernel_ptsz");
  CHECK(h->entry == Entry::cuLaunchKernel_ptsz);
  CHECK(find_hooked_symbol("cuMemAlloc_v2"));
  CHECK(find_hooked_symbol("cuGetProcAddress_v2"));
  CHECK_FALSE(find_hooked_symbol("cuMemAlloc"));  // the 32-bit legacy ABI is passed through
  CHECK_FALSE(find_hooked_symbol("cuGetExportTable"));
  CHECK_FALSE(find_hooked_symbol("cuDeviceGetCount"));
  CHECK(find_hooked_symbol("cuCtxSynchronize"));  // ends an online-inference request
  CHECK_FALSE(find_hooked_symbol("malloc"));
  CHECK_FALSE(find_hooked_symbol(nullptr));
  CHECK(std::string(entry_name(Entry::cuGraphLaunch)) == "cuGraphLaunch");
}

TEST_CASE("stats path expands %p to the pid") {
  CHECK(expand_stats_path("/tmp/stats-%p.json", 42) == "/tmp/stats-42.json");
  CHECK(expand_stats_path("/tmp/%p/%p", 7) == "/tmp/7/7");
  CHECK(expand_stats_path("/tmp/plain.json", 7) == "/tmp/plain.json");
  CHECK(expand_stats_path("/tmp/%q%", 7) == "/tmp/%q%");
}

TEST_CASE("stats JSON carries the documented keys") {
  std::string text = stats_json("training");
  for (const char* key : {"\"pid\"", "\"role\"", "\"launches\"", "\"total\"", "\"by_entry\"",
                          "\"graph_launches\"", "\"nccl\"", "\"memory\"", "\"allocs\"",
                          "\"frees\"", "\"peak_bytes\""})
    CHECK(text.find(key) != std::string::npos);
  CHECK(text.find("\"training\"") != std::string::npos);
}

// Security: a user who can write the stats file's directory (/tmp) must not be able to make a
// privileged process overwrite another file through a planted symlink at a predictable name.
TEST_CASE("stats file is written without following symlinks planted beside it") {
  char dir_template[] = "/tmp/tandem-stats-test-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  std::string dir = dir_template;
  std::string victim = dir + "/victim";
  {
    std::FILE* f = std::fopen(victim.c_str(), "w");
    REQUIRE(f);
    std::fputs("precious\n", f);
    std::fclose(f);
  }
  std::string path = dir + "/stats-" + std::to_string(getpid()) + ".json";
  // The old temporary name, and the final name itself, both point at the victim.
  REQUIRE(::symlink(victim.c_str(), (path + ".tmp").c_str()) == 0);
  std::string final_link = dir + "/final.json";
  REQUIRE(::symlink(victim.c_str(), final_link.c_str()) == 0);

  CHECK(write_stats_file((dir + "/stats-%p.json").c_str(), "training"));
  CHECK(write_stats_file(final_link.c_str(), "training"));

  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CHECK(slurp(victim) == "precious\n");
  CHECK(slurp(path).find("\"training\"") != std::string::npos);
  struct stat st {};
  REQUIRE(::lstat(final_link.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));  // the link itself was replaced by the report
  CHECK((st.st_mode & 0777) == 0644);
  // No temporary file is left behind.
  int entries = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) entries += e->d_name[0] != '.';
    ::closedir(d);
  }
  CHECK(entries == 4);  // victim, the planted .tmp link, the report, final.json
  for (const char* name : {"/victim", "/final.json"}) ::unlink((dir + name).c_str());
  ::unlink(path.c_str());
  ::unlink((path + ".tmp").c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("training and batch fillers ask MPS for below-normal priority; an operator's setting is kept") {
  // Read by the driver at its start: set at bootstrap in the process's environment, so that an
  // online request's blocks are placed before theirs (TANDEM_MPS_PRIORITY).
  uint32_t role = g_role;
  unsetenv("CUDA_MPS_CLIENT_PRIORITY");
  tandem::test::load_env({});
  g_role = TANDEM_ROLE_INFERENCE;
  CHECK_FALSE(ask_mps_priority());
  CHECK(getenv("CUDA_MPS_CLIENT_PRIORITY") == nullptr);  // online inference stays normal
  for (uint32_t r : {TANDEM_ROLE_TRAINING, TANDEM_ROLE_BATCH_INFERENCE}) {
    unsetenv("CUDA_MPS_CLIENT_PRIORITY");
    g_role = r;
    CHECK(ask_mps_priority());
    CHECK(std::string(getenv("CUDA_MPS_CLIENT_PRIORITY")) == "1");
  }
  setenv("CUDA_MPS_CLIENT_PRIORITY", "0", 1);  // the operator's
  CHECK_FALSE(ask_mps_priority());
  CHECK(std::string(getenv("CUDA_MPS_CLIENT_PRIORITY")) == "0");
  unsetenv("CUDA_MPS_CLIENT_PRIORITY");
  tandem::test::load_env({"TANDEM_MPS_PRIORITY=0"});
  CHECK_FALSE(ask_mps_priority());
  CHECK(getenv("CUDA_MPS_CLIENT_PRIORITY") == nullptr);
  tandem::test::load_env({});
  g_role = role;
}

TEST_CASE("collective waits: a stream made to wait for an event behind a collective is behind it until it is over") {
  // DDP's order: the all-reduce on NCCL's stream, an event recorded after it, the compute stream
  // waiting for the event, the optimizer's kernels queued there (their markers then wait).
  collective_waits_after_fork_child();  // a clean slate
  auto stream = [](uintptr_t v) { return reinterpret_cast<CUstream>(v); };
  auto event = [](uintptr_t v) { return reinterpret_cast<CUevent>(v); };
  const CUstream nccl = stream(0x10), compute = stream(0x20), other = stream(0x30);
  CHECK_FALSE(note_event_record(event(1), nccl, false));  // no collective yet
  g_notes.nccl_stream.store(nccl);
  g_notes.nccl_per_thread.store(false);
  note_collective_issued();
  REQUIRE(collectives_issued() == 1);
  CHECK_FALSE(note_event_record(event(2), compute, false));  // not NCCL's stream
  CHECK_FALSE(note_event_record(event(2), nccl, true));      // its per-thread twin is another stream
  REQUIRE(note_event_record(event(3), nccl, false));
  note_stream_wait(compute, event(2), false);  // an event of no collective
  CHECK(collective_ahead_of(compute, false) == 0);
  note_stream_wait(compute, event(3), false);
  CHECK(collective_ahead_of(compute, false) == 1);
  CHECK(collective_ahead_of(other, false) == 0);     // work elsewhere runs beside the collective
  CHECK(collective_ahead_of(compute, true) == 0);
  collectives_over_through(1);  // an NCCL marker behind it passed
  CHECK(collective_ahead_of(compute, false) == 0);
  CHECK(collectives_over() == 1);
  collectives_over_through(0);  // never backwards
  CHECK(collectives_over() == 1);
  // A wait for a collective already over queues nothing behind it.
  note_stream_wait(other, event(3), false);
  CHECK(collective_ahead_of(other, false) == 0);
  // The next collective: the same event recorded again after it.
  note_collective_issued();
  REQUIRE(note_event_record(event(3), nccl, false));
  note_stream_wait(compute, event(3), false);
  CHECK(collective_ahead_of(compute, false) == 2);
  collective_waits_after_fork_child();
  g_notes.nccl_stream.store(nullptr);
}
