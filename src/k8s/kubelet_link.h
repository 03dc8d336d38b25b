// tandem-device-plugin's side of the kubelet (docs/kubernetes.md). Per resource, a gRPC server
// on its own socket in the kubelet's device-plugin directory, registered with the kubelet's
// Registration service (kubelet.sock there); the main loop checks both sockets a few times a
// second and serves and registers again when the kubelet's socket was recreated (a kubelet
// restart removes every plugin's socket, then makes its own) or the plugin's own is gone.
// And the client of the kubelet's pod-resources API, which says which slots pods hold. Every
// call to the kubelet has a deadline: a kubelet that hangs delays a poll, never stops it.
#pragma once
#include <sys/types.h>

#include <memory>
#include <set>
#include <string>

#include "device_ids.h"
#include "slot_board.h"

namespace grpc {
class Server;
}

namespace tandem::k8s {

class DevicePluginService;

// What identifies a socket file, so that a recreated one is told from the old.
struct SocketIdentity {
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  long change_ns = 0;
  bool operator==(const SocketIdentity&) const = default;
};
SocketIdentity socket_identity(const std::string& path);

class ResourceEndpoint {
 public:
  ResourceEndpoint(SlotResource resource, SlotBoard& board, std::string kubelet_dir);
  ~ResourceEndpoint();
  // Serves on a fresh socket (a stale one is removed). False, with `why`, when it cannot.
  bool serve(std::string& why);
  // Registers the socket with the kubelet. False, with `why`, when the kubelet refuses or does
  // not answer within the deadline.
  bool register_with_kubelet(std::string& why);
  // Ends the streams, shuts the server down (bounded) and removes its socket.
  void stop();
  bool serving() const { return server_ != nullptr; }
  // The server's socket still is the one it made.
  bool socket_intact() const { return serving() && socket_identity(socket_path_) == served_; }
  SlotResource resource() const { return resource_; }
  // The device streams the kubelet ended since serve(), and those open now.
  uint64_t lost_streams() const;
  int open_streams() const;

 private:
  SlotResource resource_;
  SlotBoard& board_;
  std::string kubelet_dir_, socket_path_;
  std::unique_ptr<DevicePluginService> service_;
  std::unique_ptr<grpc::Server> server_;
  SocketIdentity served_;
};

// The device IDs pods hold, per resource, from the kubelet's pod-resources socket. False,
// with `why`, when it does not answer (within its deadline).
bool pods_holding(const std::string& pod_resources_socket, std::set<std::string> (&in_use)[2], std::string& why);

}  // namespace tandem::k8s
