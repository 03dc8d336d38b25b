#include "grants.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "log.h"
#include "socket_path.h"

namespace tandem::scheduler {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Written whole to a temporary name, then renamed: a tandemd killed meanwhile leaves the old
// record or the new one, never half of one.
bool write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) return false;
  }
  return rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int listen_unix(const std::string& path, unsigned mode, std::string& error) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    error = "socket path '" + path + "' is empty or too long";
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  if (!SocketPathOwner::clear_for_bind(path, error)) return -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  // The mode before listen(): until then no one can connect.
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || chmod(path.c_str(), mode) != 0 ||
      listen(fd, 64) != 0) {
    error = "cannot listen on " + path + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

GrantTable::~GrantTable() {
  // The sockets' files stay: the next tandemd opens them again (restore).
  for (GrantRecord& g : grants_)
    if (g.listen_fd >= 0) close(g.listen_fd);
}

bool GrantTable::open_grant(GrantRecord& g, std::string& error) {
  const std::string home = dir_ + "/" + g.request.name;
  mkdir(dir_.c_str(), 0755);
  if (mkdir(home.c_str(), 0755) != 0 && errno != EEXIST) {
    error = "cannot create " + home + ": " + std::strerror(errno);
    return false;
  }
  g.socket_path = home + "/tandemd.sock";
  // Anyone who can reach this path is the grant's holder: reaching it is the identity, so the
  // socket is open to every uid (a container's processes may run as any).
  g.listen_fd = listen_unix(g.socket_path, 0666, error);
  return g.listen_fd >= 0;
}

size_t GrantTable::restore() {
  if (!enabled()) return 0;
  DIR* d = opendir(dir_.c_str());
  if (!d) return 0;
  size_t restored = 0;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    msg::GrantRequest request;
    msg::Refusal why;
    std::string error;
    if (!msg::decode(read_file(dir_ + "/" + name + "/grant.json"), request, why) || request.name != name) {
      TANDEM_LOG_WARN("grant directory {}/{} has no valid record ({}); left alone", dir_, name, why.message);
      continue;
    }
    if (grants_.size() >= kMaxGrants) break;
    GrantRecord g{request, {}, -1, next_seq_++};
    if (!open_grant(g, error)) {
      TANDEM_LOG_WARN("grant {} cannot be opened again: {}", name, error);
      continue;
    }
    grants_.push_back(std::move(g));
    ++restored;
  }
  closedir(d);
  return restored;
}

const GrantRecord* GrantTable::put(const msg::GrantRequest& request, std::string& error) {
  if (!enabled()) {
    error = "grants are off (tandemd has no grant directory)";
    return nullptr;
  }
  auto it = std::find_if(grants_.begin(), grants_.end(), [&](const GrantRecord& g) { return g.request.name == request.name; });
  if (it == grants_.end()) {
    if (grants_.size() >= kMaxGrants) {
      error = "tandemd holds " + std::to_string(kMaxGrants) + " grants, every one in use";
      return nullptr;
    }
    GrantRecord g{request, {}, -1, next_seq_++};
    if (!open_grant(g, error)) return nullptr;
    grants_.push_back(std::move(g));
    it = grants_.end() - 1;
  }
  it->request = request;
  if (!write_file(dir_ + "/" + request.name + "/grant.json", msg::encode(request))) {
    error = "cannot write the record of grant " + request.name + ": " + std::strerror(errno);
    return nullptr;
  }
  return &*it;
}

void GrantTable::remove(const std::string& name) {
  auto it = std::find_if(grants_.begin(), grants_.end(), [&](const GrantRecord& g) { return g.request.name == name; });
  if (it == grants_.end()) return;
  close(it->listen_fd);
  const std::string home = dir_ + "/" + name;
  unlink((home + "/grant.json").c_str());
  unlink(it->socket_path.c_str());
  rmdir(home.c_str());  // fails while a container still has it mounted: the files are gone
  grants_.erase(it);
}

const GrantRecord* GrantTable::find(const std::string& name) const {
  auto it = std::find_if(grants_.begin(), grants_.end(), [&](const GrantRecord& g) { return g.request.name == name; });
  return it == grants_.end() ? nullptr : &*it;
}

}  // namespace tandem::scheduler
