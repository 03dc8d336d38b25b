// The daemon's clients, one per connection, identified by the kernel (SO_PEERCRED). Each gets
// an id that is never reused (an fd number is, by the next connection): pool waits and chunk
// owners refer to it. Only the server's loop removes a client (after its turn's handlers ran),
// so a handler's `Client&` stays valid for the whole turn.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "client_io.h"
#include "peer_identity.h"

namespace tandem::scheduler {

using ClientId = uint64_t;  // 0: nobody

struct Client {
  Client(size_t reply_cap, ReplyBudget* budget) : out(reply_cap, budget) {}
  ClientId id = 0;
  int fd = -1;
  pid_t pid = 0;  // from SO_PEERCRED, in tandemd's PID namespace; never what the client says
  uid_t uid = 0;
  PeerIdentity peer;         // the kernel's word on who it is (its pidfd is `pidfd` below)
  std::string trust_domain;  // pooled memory moves only between clients of one domain
  std::string role = "none";
  bool registered = false;  // a valid hello was received
  bool closing = false;     // to be disconnected by the loop at the end of this turn
  std::string gpu;          // GPU UUID (hex) it runs on, when it has a role
  int slot = -1;            // its slot in that GPU's shared memory
  std::string job;          // training: uid + the job its hello named (job_hold.h); empty: none
  uint32_t job_ranks = 0;   // the job's ranks, all on this node, as its hello said
  uint64_t connected_ns = 0;
  FrameReader in;  // bytes received, cut into messages
  ReplyQueue out;  // replies not yet written
  std::deque<int> passed_fds;  // descriptors received (SCM_RIGHTS), taken by pool_register in order
  size_t chunks_registered = 0;  // pool chunks this connection registered (DaemonLimits::chunks_per_client)
  int pidfd = -1;              // the process, to see it exit after its connection closed (memory pool)
  uint64_t pool_taken_bytes = 0;   // training: quota taken for inference by the memory policy
  uint64_t quota_before_pool = 0;  // training: its assigned quota before the policy lowered it
};

class Registry {
 public:
  // Replies queued: at most `reply_cap` bytes per client, `reply_total` for all.
  Registry(size_t reply_cap, size_t reply_total);
  Client& add(int fd, pid_t pid, uid_t uid, uint64_t now_ns);
  void remove(ClientId id);
  Client* find(ClientId id);
  const Client* find(ClientId id) const;
  const std::map<ClientId, Client>& clients() const { return clients_; }
  std::map<ClientId, Client>& clients() { return clients_; }
  size_t size() const { return clients_.size(); }
  size_t connections_of(uid_t uid) const;
  // Clients whose GPU is `uuid`.
  size_t clients_on(const std::string& uuid) const;
  // Clients that connected through grant `grant`'s socket.
  size_t clients_of_grant(const std::string& grant) const;
  const ReplyBudget& reply_budget() const { return budget_; }

 private:
  ReplyBudget budget_;  // before clients_: their queues give their bytes back to it
  std::map<ClientId, Client> clients_;  // by id: in connection order
  std::map<uid_t, size_t> per_uid_;
  size_t reply_cap_;
  ClientId next_id_ = 1;
};

}  // namespace tandem::scheduler
