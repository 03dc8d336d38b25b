// The daemon's clients, one per connection, identified by the kernel (SO_PEERCRED).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "client_io.h"
#include "peer_identity.h"

namespace tandem::scheduler {

struct Client {
  int fd = -1;
  pid_t pid = 0;  // from SO_PEERCRED, in tandemd's PID namespace; never what the client says
  uid_t uid = 0;
  PeerIdentity peer;         // the kernel's word on who it is (its pidfd is `pidfd` below)
  std::string trust_domain;  // pooled memory moves only between clients of one domain
  std::string role = "none";
  bool registered = false;  // a valid hello was received
  std::string gpu;          // GPU UUID (hex) it runs on, when it has a role
  int slot = -1;            // its slot in that GPU's shared memory
  uint64_t connected_ns = 0;
  FrameReader in;  // bytes received, cut into messages
  ReplyQueue out;  // replies not yet written
  std::deque<int> passed_fds;  // descriptors received (SCM_RIGHTS), taken by pool_register in order
  int pidfd = -1;              // the process, to see it exit after its connection closed (memory pool)
  uint64_t pool_taken_bytes = 0;   // training: quota taken for inference by the memory policy
  uint64_t quota_before_pool = 0;  // training: its assigned quota before the policy lowered it
};

class Registry {
 public:
  Client& add(int fd, pid_t pid, uid_t uid, uint64_t now_ns);
  void remove(int fd);
  Client* find(int fd);
  const std::map<int, Client>& clients() const { return clients_; }

 private:
  std::map<int, Client> clients_;  // by connection fd
};

}  // namespace tandem::scheduler
