#include "registry.h"

namespace tandem::scheduler {

Client& Registry::add(int fd, pid_t pid, uid_t uid, uint64_t now_ns) {
  Client& c = clients_[fd];
  c = Client{};
  c.fd = fd;
  c.pid = pid;
  c.uid = uid;
  c.connected_ns = now_ns;
  return c;
}

void Registry::remove(int fd) { clients_.erase(fd); }

Client* Registry::find(int fd) {
  auto it = clients_.find(fd);
  return it == clients_.end() ? nullptr : &it->second;
}

}  // namespace tandem::scheduler
