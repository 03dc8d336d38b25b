// tandemd's socket server: a single-threaded poll loop over the listening UNIX socket and
// its clients, one handler per message type. Malformed input gets an error reply or a
// disconnect; the daemon keeps serving everyone else.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "protocol.h"
#include "gpu_scheduler.h"
#include "memory_pool.h"
#include "registry.h"

namespace tandem::scheduler {

struct ServerOptions {
  std::string socket_path;
  std::string policy = "fill";
  SchedulerParams scheduler;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Binds the socket. Fails (with `error`) when another live daemon answers on it; a stale
  // socket file is replaced.
  bool open(std::string& error);
  // Serves until stop() (thread- and signal-safe) is called.
  void run();
  void stop();
  // The status document (docs/daemon.md).
  std::string status_json() const;
  // Runs one scheduling period now (tests and benchmarks drive the loop by hand).
  void tick_for_test(uint64_t now_ns) { tick_all(now_ns); }
  GpuScheduler* gpu_for_test(const std::string& uuid) { return gpu(uuid); }
  // In-process drivers for tests and the fuzz harness (server_testing.cpp): a connected
  // socket taken as a client as accept would (identity from SO_PEERCRED); one turn of the loop
  // for it (writes what is queued, reads and handles what arrived; false: it was disconnected);
  // the daemon's invariants ("" when they hold, otherwise the first that does not).
  bool adopt_client_for_test(int fd);
  bool serve_client_for_test(int fd);
  std::string invariant_violation_for_test() const;

 private:
  void accept_client();
  // Reads what the client sent and handles each whole message. False: disconnect it.
  bool receive(Client& client);
  bool handle(Client& client, const MessageHeader& header, const std::string& payload);
  // Queue a reply and write what the socket takes now. False: disconnect the client.
  bool reply(Client& client, MessageType type, const std::string& payload);
  bool reply_error(Client& client, int error_number, const std::string& message);
  void drop_stalled_clients(uint64_t now_ns);
  bool handle_hello(Client& client, const std::string& payload);
  bool handle_trace(Client& client, const std::string& payload);
  bool handle_quota(Client& client, const std::string& payload);
  // The memory pool (server_pool.cpp).
  bool handle_pool_register(Client& client, const std::string& payload);
  bool handle_pool_acquire(Client& client, const std::string& payload);
  bool handle_pool_release(Client& client, const std::string& payload);
  bool send_chunks(Client& client, const std::vector<const PoolChunk*>& chunks, uint64_t seq);
  // Serves waiting acquisitions from free chunks; answers those past their deadline. A client
  // whose socket cannot take its chunks is disconnected, except the one whose message is being
  // handled (`handling_fd`): false then, and the loop disconnects it once its handler returned
  // (disconnecting it here would free the Client its handler still uses).
  bool serve_pool_waits(uint64_t now_ns, int handling_fd = -1);
  // SIRIUS's InferRelease on the daemon's side: free memory beyond W goes back to training.
  void give_back_to_training(const std::string& gpu);
  void set_quota(Client& client, uint64_t bytes);
  void pool_tick(uint64_t now_ns);
  nlohmann::json pool_status(const std::string& gpu) const;
  uint64_t pool_bytes_of(const std::string& gpu, uint32_t slot) const;
  GpuScheduler* gpu(const std::string& uuid);
  void tick_all(uint64_t now_ns);
  void disconnect(int fd);

  ServerOptions options_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  Registry registry_;
  std::map<std::string, std::unique_ptr<GpuScheduler>> gpus_;  // by GPU UUID
  MemoryPool pool_;
  struct PoolWait {  // an inference process's acquisition waiting for training to release
    int client;
    uint64_t seq, chunk_bytes;
    uint32_t wanted, given;
    uint64_t started_ns, deadline_ns;
  };
  std::vector<PoolWait> pool_waits_;
  struct PoolFigures {
    uint64_t handovers = 0, short_answers = 0;
    double last_ms = 0, max_ms = 0;
  };
  std::map<std::string, PoolFigures> pool_figures_;  // by GPU
  uint64_t started_ns_ = 0;
};

uint64_t monotonic_ns();

}  // namespace tandem::scheduler
