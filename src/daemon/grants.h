// Grants (docs/security.md, docs/kubernetes.md): a socket of its own for one allocation, whose
// every client has exactly the allocation's rights (a role, a GPU, a memory limit), whatever
// its uid, groups or environment say. The device plugin's Allocate asks tandemd for one and
// mounts only that socket's directory into the container, never tandemd's main socket: a pod
// reaches tandemd through its grant alone, and reaching it is its identity.
// Each grant is a directory <dir>/<name>/ holding its socket (tandemd.sock) and its record
// (grant.json): a restarted tandemd opens every recorded grant again, at the same path, which
// the containers still have mounted.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "messages.h"

namespace tandem::scheduler {

struct GrantRecord {
  msg::GrantRequest request;  // name, role, GPU, memory limit
  std::string socket_path;    // <dir>/<name>/tandemd.sock
  int listen_fd = -1;
  uint64_t created_seq = 0;   // order of creation: the oldest idle grant gives way at the cap
};

// A listening UNIX socket at `path` (a stale one replaced), mode `mode`; -1 with `error`.
int listen_unix(const std::string& path, unsigned mode, std::string& error);

class GrantTable {
 public:
  static constexpr size_t kMaxGrants = 256;

  GrantTable() = default;
  // Grants live under `dir` (created 0755); "" turns grants off.
  explicit GrantTable(std::string dir) : dir_(std::move(dir)) {}
  void set_dir(std::string dir) { dir_ = std::move(dir); }
  ~GrantTable();
  GrantTable(const GrantTable&) = delete;
  GrantTable& operator=(const GrantTable&) = delete;

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  // Opens the grants recorded under dir (a restart); returns how many, logging each it skips.
  size_t restore();
  // Creates the grant, or states it again (same name: its record is replaced, its socket
  // kept). Null with `error` when it cannot (grants off, the table full, a file system error).
  const GrantRecord* put(const msg::GrantRequest& request, std::string& error);
  // Removes a grant: its socket and record (clients connected keep their connection).
  void remove(const std::string& name);
  const GrantRecord* find(const std::string& name) const;
  const std::vector<GrantRecord>& all() const { return grants_; }
  size_t size() const { return grants_.size(); }

 private:
  bool open_grant(GrantRecord& g, std::string& error);
  std::string dir_;
  std::vector<GrantRecord> grants_;
  uint64_t next_seq_ = 1;
};

}  // namespace tandem::scheduler
