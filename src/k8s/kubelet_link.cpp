#include "kubelet_link.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "deviceplugin_v1beta1.grpc.pb.h"
#include "log.h"
#include "plugin_service.h"
#include "podresources_v1.grpc.pb.h"

namespace tandem::k8s {

namespace {
constexpr auto kRegisterDeadline = std::chrono::seconds(2);
constexpr auto kListDeadline = std::chrono::seconds(1);
constexpr auto kShutdownDeadline = std::chrono::milliseconds(1000);

std::shared_ptr<grpc::Channel> unix_channel(const std::string& path) {
  return grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
}
}  // namespace

SocketIdentity socket_identity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return {};
  return {true, st.st_dev, st.st_ino, st.st_ctim.tv_sec * 1000000000L + st.st_ctim.tv_nsec};
}

ResourceEndpoint::ResourceEndpoint(SlotResource resource, SlotBoard& board, std::string kubelet_dir)
    : resource_(resource), board_(board), kubelet_dir_(std::move(kubelet_dir)),
      socket_path_(kubelet_dir_ + "/" + endpoint_name(resource)) {}

ResourceEndpoint::~ResourceEndpoint() { stop(); }

bool ResourceEndpoint::serve(std::string& why) {
  stop();
  if (unlink(socket_path_.c_str()) != 0 && errno != ENOENT) {
    why = "cannot remove the old socket " + socket_path_ + ": " + std::strerror(errno);
    return false;
  }
  service_ = std::make_unique<DevicePluginService>(resource_, board_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) {
    service_.reset();
    why = "cannot serve on " + socket_path_ + " (is " + kubelet_dir_ + " a writable directory?)";
    return false;
  }
  served_ = socket_identity(socket_path_);
  return true;
}

bool ResourceEndpoint::register_with_kubelet(std::string& why) {
  auto stub = v1beta1::Registration::NewStub(unix_channel(kubelet_dir_ + "/kubelet.sock"));
  v1beta1::RegisterRequest request;
  request.set_version("v1beta1");
  request.set_endpoint(endpoint_name(resource_));
  request.set_resource_name(resource_name(resource_));
  request.mutable_options()->set_get_preferred_allocation_available(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRegisterDeadline);
  v1beta1::Empty reply;
  grpc::Status status = stub->Register(&context, request, &reply);
  if (!status.ok()) {
    why = "the kubelet (" + kubelet_dir_ + "/kubelet.sock) did not register " + resource_name(resource_) + ": " +
          status.error_message();
    return false;
  }
  return true;
}

uint64_t ResourceEndpoint::lost_streams() const { return service_ ? service_->lost_streams() : 0; }
int ResourceEndpoint::open_streams() const { return service_ ? service_->open_streams() : 0; }

void ResourceEndpoint::stop() {
  if (!server_) return;
  service_->close();
  server_->Shutdown(std::chrono::system_clock::now() + kShutdownDeadline);
  server_->Wait();
  server_.reset();
  service_.reset();
  // Only the socket this server made: a new plugin may already own the path.
  if (socket_identity(socket_path_) == served_) unlink(socket_path_.c_str());
  served_ = {};
}

bool pods_holding(const std::string& pod_resources_socket, std::set<std::string> (&in_use)[2], std::string& why) {
  if (!socket_identity(pod_resources_socket).exists) {
    why = "no pod-resources socket at " + pod_resources_socket;
    return false;
  }
  auto stub = v1::PodResourcesLister::NewStub(unix_channel(pod_resources_socket));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kListDeadline);
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse response;
  grpc::Status status = stub->List(&context, request, &response);
  if (!status.ok()) {
    why = "the kubelet's pod-resources List failed: " + status.error_message();
    return false;
  }
  for (auto& set : in_use) set.clear();
  for (const auto& pod : response.pod_resources())
    for (const auto& container : pod.containers())
      for (const auto& devices : container.devices())
        for (SlotResource r : kResources)
          if (devices.resource_name() == resource_name(r))
            for (const std::string& id : devices.device_ids()) in_use[static_cast<int>(r)].insert(id);
  return true;
}

}  // namespace tandem::k8s
