// tandemd's socket server: a single-threaded poll loop over the listening UNIX socket and
// its clients. Each message is decoded and checked first (messages.h), then dispatched to its
// type's handler, which receives the typed message. Malformed input gets an error reply or a
// disconnect; the daemon keeps serving everyone else. A hostile local client can neither
// stall the loop (bounded work per client per turn, the tick first), nor exhaust it (the
// caps in daemon_limits.h), nor crash it: handlers only mark a client closing, and the loop alone
// destroys clients, after the turn's handlers ran (server_loop.cpp).
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "access_policy.h"
#include "departed.h"
#include "grants.h"
#include "daemon_limits.h"
#include "protocol.h"
#include "gpu_scheduler.h"
#include "job_hold.h"
#include "memory_pool.h"
#include "messages.h"
#include "metrics_exposition.h"
#include "metrics_http.h"
#include "registry.h"
#include "socket_path.h"

namespace tandem::scheduler {

struct ServerOptions {
  std::string socket_path;
  std::string policy = "fill";
  SchedulerParams scheduler;
  DaemonLimits limits;
  // Who can reach the socket (docs/security.md): -1 keeps tandemd's own uid and gid.
  uid_t socket_owner = static_cast<uid_t>(-1);
  gid_t socket_group = static_cast<gid_t>(-1);
  mode_t socket_mode = 0660;
  AccessPolicy access;  // roles, slot caps, trust domains; open() fills in the defaults
  // HOST:PORT of the Prometheus endpoint (docs/metrics.md); empty: none.
  std::string metrics_address;
  // Where grants' sockets live (grants.h); empty: "grants" beside the socket.
  std::string grant_dir;
  // A second socket whose clients are node administrators (they may create grants): in
  // Kubernetes a directory only tandemd's pod shares with its device plugin. Empty: none.
  std::string admin_socket;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Binds the socket. Fails (with `error`) when another live daemon answers on it, or when
  // the path is something other than a socket; a stale socket is replaced. At exit the path
  // is removed only if it is still the socket this daemon created.
  bool open(std::string& error);
  // Serves until stop() (thread- and signal-safe) is called.
  void run();
  void stop();
  // The status document (docs/daemon.md).
  std::string status_json() const;
  // The node's pressure (docs/kubernetes.md): its GPUs' most, in [0, 1].
  double node_pressure() const;
  // The Prometheus page (server_metrics.cpp, docs/metrics.md).
  std::string metrics_text() const;
  // Where the metrics endpoint listens ("" without one), e.g. "127.0.0.1:9433".
  const std::string& metrics_address() const { return metrics_.address(); }
  // Runs one scheduling period now (tests and benchmarks drive the loop by hand).
  void tick_for_test(uint64_t now_ns) { tick_all(now_ns); }
  GpuScheduler* gpu_for_test(const std::string& uuid) { return gpu(uuid); }
  // What the daemon holds now (tests and tandemctl status).
  struct Holdings {
    size_t clients = 0, gpus = 0, pool_chunks = 0, passed_fds = 0, orphan_processes = 0, reply_bytes = 0;
  };
  Holdings holdings() const;
  // In-process drivers for tests and the fuzz harness (server_testing.cpp): a connected
  // socket taken as a client as accept would (identity from SO_PEERCRED); one turn of the loop
  // for it (writes what is queued, reads and handles what arrived; false: it was disconnected);
  // the daemon's invariants ("" when they hold, otherwise the first that does not).
  bool adopt_client_for_test(int fd);
  Client* client_by_fd_for_test(int fd);
  bool serve_client_for_test(int fd);
  std::string invariant_violation_for_test() const;

 private:
  // The loop (server_loop.cpp).
  // Accepts on `listen_fd`: tandemd's socket, its admin socket (`admin`) or a grant's (`grant`).
  void accept_clients(int listen_fd, const std::string& grant, bool admin);
  // May create grants: a client of the admin socket, or root or tandemd's own uid in tandemd's
  // namespaces on its main socket.
  bool node_admin(const PeerIdentity& peer) const;
  bool handle_grant(Client& client, const msg::GrantRequest& request);
  // Registers a connection whose peer the kernel named (takes `peer`'s pidfd).
  Client& admit(int fd, PeerIdentity&& peer);
  // accept() failed with EMFILE/ENFILE: shed the pending connection with the reserve fd.
  void shed_connection(int listen_fd, uint64_t now_ns);
  // One client's turn: writes queued replies, reads (bounded), handles up to a few messages.
  void serve(Client& client, short revents);
  // Reads what the socket has, within the turn's byte budget. False: the peer is gone.
  bool read_input(Client& client);
  void handle_messages(Client& client);
  // Decodes the message, then dispatches the typed request (or answers why it is refused).
  bool handle(Client& client, const MessageHeader& header, const std::string& payload);
  // Queue a reply and write what the socket takes now. False (and the client marked
  // closing): the client does not read its replies, or is gone.
  bool reply(Client& client, MessageType type, const std::string& payload);
  bool reply_error(Client& client, int error_number, const std::string& message);
  // Handlers call this, never disconnect(): the loop reaps after the turn.
  static bool close_later(Client& client);
  void drop_stalled_clients(uint64_t now_ns);
  void reap_closing();
  bool handle_hello(Client& client, const msg::Hello& hello);
  bool handle_trace(Client& client, const msg::TraceRequest& request);
  bool handle_quota(Client& client, const msg::QuotaRequest& request);
  // The memory pool (server_pool.cpp). A pool_register's descriptor (-1: none came) is the
  // handler's to keep or close.
  bool handle_pool_register(Client& client, const msg::PoolRegister& request, int fd);
  bool handle_pool_acquire(Client& client, const msg::PoolAcquire& request);
  bool handle_pool_release(Client& client, const msg::PoolRelease& request);
  bool send_chunks(Client& client, const std::vector<const PoolChunk*>& chunks, uint64_t seq, bool batch);
  // Serves waiting acquisitions from free chunks; answers those past their deadline.
  void serve_pool_waits(uint64_t now_ns);
  // SIRIUS's InferRelease on the daemon's side: free memory beyond W goes back to training.
  void give_back_to_training(const std::string& gpu);
  void set_quota(Client& client, uint64_t bytes);
  uint64_t assigned_quota(const Client& client);  // what set_quota (or tandemctl) set; 0: none
  void pool_tick(uint64_t now_ns);
  // Node-local training jobs (server_jobs.cpp): each tick, the same collective limit for all
  // ranks of a job (job_hold.h).
  void hold_collectives();
  nlohmann::json jobs_json() const;
  nlohmann::json grants_json() const;
  nlohmann::json pool_status(const std::string& gpu) const;
  // Pooled bytes per (GPU, slot), from one pass over the clients (the status asks per slot).
  std::map<std::pair<std::string, int>, uint64_t> pool_bytes_by_slot() const;
  // The GPU's state; null when there is none.
  GpuScheduler* gpu(const std::string& uuid);
  // The GPU state a hello may have, created if needed, under the GPU cap and the bounds on
  // unverified GPUs (gpu_admission.h); null with the errno and message of the refusal.
  struct GpuGrant {
    GpuScheduler* gpu = nullptr;
    int error = 0;
    std::string why;
  };
  GpuGrant admit_gpu(const Client& client, const std::string& uuid);
  // Gives up a GPU's state and all tandemd keeps for it (its pool chunks included).
  void forget_gpu(const std::string& uuid);
  // Frees a GPU's state once no client refers to it and no pool chunk is on it.
  void release_gpu_if_unused(const std::string& uuid);
  void tick_all(uint64_t now_ns);
  void disconnect(ClientId id);
  // Departed processes (server_departed.cpp, departed.h): at disconnect, before its slot is
  // released, the client's last bounded view is kept and logged; the status lists them.
  void record_departure(const Client& client, uint64_t now_ns);
  nlohmann::json departed_json(uint64_t now_ns) const;

  ServerOptions options_;
  int listen_fd_ = -1;
  int admin_fd_ = -1;
  SocketPathOwner admin_owner_;
  GrantTable grants_;
  SocketPathOwner socket_owner_;
  int reserve_fd_ = -1;          // an fd kept spare, closed to shed a connection at EMFILE
  uint64_t accept_paused_until_ = 0;
  uint64_t tick_due_ns_ = 0;     // this turn's dispatch stops when the tick is due
  bool fd_exhaustion_logged_ = false;
  bool cap_refusal_logged_ = false;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  Registry registry_;
  DepartedLog departed_;  // the most recent departed processes, and totals by role
  std::map<std::string, std::unique_ptr<GpuScheduler>> gpus_;  // by GPU UUID
  std::set<std::string> verified_gpus_;  // of gpus_, those a protected client named (gpu_admission.h)
  MemoryPool pool_;
  struct PoolWait {  // an inference process's acquisition waiting for training to release
    ClientId client;
    uint64_t seq, chunk_bytes;
    uint32_t wanted, given;
    uint64_t started_ns, deadline_ns;
    bool batch = false;  // the client takes many chunks to a pool_chunk message
    std::vector<ClientId> asked;  // the training processes asked to give memory back
  };
  std::vector<PoolWait> pool_waits_;
  // A short answer's reason: who of those asked still holds more than its quota.
  std::string pool_wait_shortfall(const PoolWait& wait, uint64_t now_ns);
  struct PoolFigures {
    uint64_t handovers = 0, short_answers = 0;
    double last_ms = 0, max_ms = 0;
    std::string last_short;  // the last short answer to online inference: who asked, and why
    const std::string& short_answer(int pid, const std::string& reason) {
      ++short_answers;
      return last_short = "inference pid " + std::to_string(pid) + ": " + reason;
    }
    // From an inference process's request to the last chunk sent (handovers and short answers).
    DurationHistogram durations{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
  };
  std::map<std::string, PoolFigures> pool_figures_;  // by GPU
  uint64_t started_ns_ = 0;
  uid_t daemon_uid_ = 0;
  MetricsHttp metrics_;
  // How long one tick of every GPU (and the pool) took.
  DurationHistogram tick_seconds_{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.1};
  uint64_t ticks_late_ = 0;  // ticks that began a whole period or more after they were due
  std::map<std::string, bool> gpu_total_trusted_;  // by GPU: its size came from a trusted client
  std::map<std::string, JobHold> jobs_;  // node-local training jobs, by Client::job
  std::vector<JobRank> job_ranks_;       // hold_collectives()'s scratch
};

uint64_t monotonic_ns();

}  // namespace tandem::scheduler
