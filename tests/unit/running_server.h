// A tandemd server on its own thread for unit tests that talk to it over its real socket.
#pragma once
#include <catch2/catch.hpp>
#include <string>
#include <thread>

#include "server.h"

namespace tandem::test {

struct RunningServer {
  scheduler::Server server;
  std::thread thread;
  explicit RunningServer(scheduler::ServerOptions options) : server(std::move(options)) {
    std::string error;
    REQUIRE(server.open(error));
    thread = std::thread([this] { server.run(); });
  }
  ~RunningServer() {
    server.stop();
    thread.join();
  }
};

}  // namespace tandem::test
