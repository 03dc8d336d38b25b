// Launch-overhead benchmark: nanoseconds tandem adds to an ungated cuLaunchKernel.
// Hook and no-hook run in the same process against the same driver, interleaved in rounds
// (ABAB...), each round a batch of launches timed as a whole; we report p50/p99 of the
// per-launch time of each side and of the per-round difference. Budget: <= 20 ns at p50.
#include <cuda.h>
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**);

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

[[noreturn]] void usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: launch_overhead --driver LIBCUDA --tandem LIBTANDEM [--rounds N] [--batch B]\n"
               "         [--module FATBIN --kernel NAME]   (needed for a driver that runs kernels)\n"
               "         [--settle-ms N]  wait after warm-up (a process with TANDEM_ROLE registers meanwhile)\n"
               "Prints JSON: per-launch ns without and with the hook, and the difference (p50, p99).\n");
  std::exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  std::string driver, tandem, module, kernel;
  long rounds = 2000, batch = 1000, settle_ms = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "--driver") driver = next();
    else if (a == "--tandem") tandem = next();
    else if (a == "--module") module = next();
    else if (a == "--kernel") kernel = next();
    else if (a == "--rounds") rounds = std::atol(next());
    else if (a == "--batch") batch = std::atol(next());
    else if (a == "--settle-ms") settle_ms = std::atol(next());
    else if (a == "--help" || a == "-h") usage(0);
    else usage(2);
  }
  if (driver.empty() || tandem.empty() || rounds < 10 || batch < 1) usage(2);

  // tandem forwards to the same driver file we call directly.
  setenv("TANDEM_REAL_LIBCUDA", driver.c_str(), 1);
  void* real_lib = dlopen(driver.c_str(), RTLD_NOW | RTLD_LOCAL);
  void* hook_lib = dlopen(tandem.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!real_lib || !hook_lib) {
    std::fprintf(stderr, "dlopen failed: %s\n", dlerror());
    return 1;
  }
  auto real_launch = reinterpret_cast<LaunchFn>(dlsym(real_lib, "cuLaunchKernel"));
  auto hook_launch = reinterpret_cast<LaunchFn>(dlsym(hook_lib, "cuLaunchKernel"));
  if (!real_launch || !hook_launch) {
    std::fprintf(stderr, "cuLaunchKernel not found\n");
    return 1;
  }

  CUfunction f = reinterpret_cast<CUfunction>(0x1000);  // the null driver ignores it
  unsigned long long ns_arg = 0;
  void* params[] = {&ns_arg};
  if (!module.empty()) {
    auto sym = [&](const char* n) { return dlsym(real_lib, n); };
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    reinterpret_cast<CUresult (*)(unsigned)>(sym("cuInit"))(0);
    reinterpret_cast<CUresult (*)(CUdevice*, int)>(sym("cuDeviceGet"))(&dev, 0);
    reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(sym("cuDevicePrimaryCtxRetain"))(&ctx, dev);
    reinterpret_cast<CUresult (*)(CUcontext)>(sym("cuCtxSetCurrent"))(ctx);
    if (reinterpret_cast<CUresult (*)(CUmodule*, const char*)>(sym("cuModuleLoad"))(&mod, module.c_str()) ||
        reinterpret_cast<CUresult (*)(CUfunction*, CUmodule, const char*)>(sym("cuModuleGetFunction"))(
            &f, mod, kernel.c_str())) {
      std::fprintf(stderr, "cannot load kernel %s from %s\n", kernel.c_str(), module.c_str());
      return 1;
    }
  }
  auto run = [&](LaunchFn fn) {
    double t0 = now_ns();
    for (long i = 0; i < batch; ++i)
      if (fn(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) != CUDA_SUCCESS) std::abort();
    return (now_ns() - t0) / batch;
  };
  run(real_launch);  // warm-up: bootstrap, caches
  run(hook_launch);
  if (settle_ms > 0) {
    timespec ts{settle_ms / 1000, (settle_ms % 1000) * 1000000};
    nanosleep(&ts, nullptr);
  }

  std::vector<double> without_hook, with_hook, added;
  for (long r = 0; r < rounds; ++r) {
    double a, b;
    if (r % 2 == 0) {
      a = run(real_launch);
      b = run(hook_launch);
    } else {
      b = run(hook_launch);
      a = run(real_launch);
    }
    without_hook.push_back(a);
    with_hook.push_back(b);
    added.push_back(b - a);
  }
  std::printf(
      "{\"benchmark\":\"launch_overhead\",\"driver\":\"%s\",\"rounds\":%ld,\"batch\":%ld,"
      "\"no_hook_ns\":{\"p50\":%.1f,\"p99\":%.1f},\"hook_ns\":{\"p50\":%.1f,\"p99\":%.1f},"
      "\"added_ns\":{\"p50\":%.1f,\"p99\":%.1f},\"role\":\"%s\"}\n",
      driver.c_str(), rounds, batch, percentile(without_hook, 50), percentile(without_hook, 99),
      percentile(with_hook, 50), percentile(with_hook, 99), percentile(added, 50),
      percentile(added, 99), getenv("TANDEM_ROLE") ? getenv("TANDEM_ROLE") : "none");
  return 0;
}
