// Who owns the daemon's socket path. tandemd replaces only a stale socket (one no daemon
// answers on), never another kind of file a mistyped --socket names, and at exit removes the
// path only if it is still the very socket it bound (same device and inode): an old daemon
// exiting after a new one took the path over must not remove the new one's socket.
#pragma once
#include <sys/types.h>

#include <string>

namespace tandem::scheduler {

class SocketPathOwner {
 public:
  // Before bind: true when `path` is free or a stale socket (then removed); false with
  // `error` when it is another kind of file or a live daemon answers on it.
  static bool clear_for_bind(const std::string& path, std::string& error);
  // After bind: remembers which socket is ours.
  void claim(const std::string& path);
  // At exit: removes the path if it is still our socket. True when it did.
  bool release();

 private:
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool claimed_ = false;
};

}  // namespace tandem::scheduler
