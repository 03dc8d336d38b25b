#include "registry.h"

namespace tandem::scheduler {

Registry::Registry(size_t reply_cap, size_t reply_total) : budget_{0, reply_total}, reply_cap_(reply_cap) {}

Client& Registry::add(int fd, pid_t pid, uid_t uid, uint64_t now_ns) {
  ClientId id = next_id_++;
  Client& c = clients_.try_emplace(id, reply_cap_, &budget_).first->second;
  c.id = id;
  c.fd = fd;
  c.pid = pid;
  c.uid = uid;
  c.connected_ns = now_ns;
  ++per_uid_[uid];
  return c;
}

void Registry::remove(ClientId id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  auto u = per_uid_.find(it->second.uid);
  if (u != per_uid_.end() && --u->second == 0) per_uid_.erase(u);
  clients_.erase(it);
}

Client* Registry::find(ClientId id) {
  auto it = clients_.find(id);
  return it == clients_.end() ? nullptr : &it->second;
}

const Client* Registry::find(ClientId id) const {
  auto it = clients_.find(id);
  return it == clients_.end() ? nullptr : &it->second;
}

size_t Registry::connections_of(uid_t uid) const {
  auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
}

size_t Registry::clients_on(const std::string& uuid) const {
  size_t n = 0;
  for (const auto& [id, c] : clients_) n += c.gpu == uuid;
  return n;
}

size_t Registry::clients_of_grant(const std::string& grant) const {
  size_t n = 0;
  for (const auto& [id, c] : clients_) n += c.peer.grant == grant;
  return n;
}

}  // namespace tandem::scheduler
