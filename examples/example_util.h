// Small helpers shared by the examples: flag parsing with clear errors, timing, CUDA checks.
#pragma once
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,          \
                   cudaGetErrorString(err_));                                              \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Parses "--name value" integer/float flags; exits 2 with a message on bad input.
struct Args {
  int argc;
  char** argv;
  const char* usage;
  int i = 1;
  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\n%s", argv[0], why.c_str(), usage);
    std::exit(2);
  }
  const char* value() {
    if (i + 1 >= argc) fail(std::string("missing value for ") + argv[i]);
    return argv[++i];
  }
  double number(double lo, double hi) {
    const char* flag = argv[i];
    const char* v = value();
    char* end = nullptr;
    double d = std::strtod(v, &end);
    if (!end || end == v || *end || !(d >= lo && d <= hi)) {
      char range[96];
      std::snprintf(range, sizeof range, " (want a number in %g..%g)", lo, hi);
      fail(std::string("bad value '") + v + "' for " + flag + range);
    }
    return d;
  }
  // A whole number in lo..hi (rejects "2.5").
  long long integer(long long lo, long long hi) {
    const char* flag = argv[i];
    double d = number(static_cast<double>(lo), static_cast<double>(hi));
    if (d != static_cast<double>(static_cast<long long>(d)))
      fail(std::string("bad value '") + argv[i] + "' for " + flag + " (want a whole number)");
    return static_cast<long long>(d);
  }
};
