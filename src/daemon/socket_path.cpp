#include "socket_path.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem::scheduler {

namespace {

// True when a daemon answers on `path`.
bool daemon_answers(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool live = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return live;
}

}  // namespace

bool SocketPathOwner::clear_for_bind(const std::string& path, std::string& error) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;
    error = "cannot examine " + path + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISSOCK(st.st_mode)) {
    error = path + " exists and is not a socket; refusing to replace it (remove it, or choose another --socket)";
    return false;
  }
  if (daemon_answers(path)) {
    error = "another tandemd is already serving " + path;
    return false;
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {  // a stale socket of a daemon that died
    error = "cannot remove the stale socket " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

void SocketPathOwner::claim(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  path_ = path;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  claimed_ = true;
}

bool SocketPathOwner::release() {
  if (!claimed_) return false;
  claimed_ = false;
  struct stat st;
  if (lstat(path_.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_dev != dev_ || st.st_ino != ino_)
    return false;  // removed, or another daemon's socket now
  return unlink(path_.c_str()) == 0;
}

}  // namespace tandem::scheduler
