#include "plugin_service.h"

#include <algorithm>
#include <map>

#include "ctl_common.h"
#include "log.h"
#include "messages.h"

namespace tandem::k8s {

namespace {
constexpr auto kStreamPoll = std::chrono::milliseconds(500);  // how soon a stream notices cancel or close
}  // namespace

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                         v1beta1::DevicePluginOptions* options) {
  options->set_pre_start_required(false);
  options->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                                               grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  const char* name = resource_name(resource_);
  TANDEM_LOG_INFO("{}: the kubelet watches the device list", name);
  ++open_streams_;
  struct Closed {  // however the stream ends
    DevicePluginService& s;
    ~Closed() {
      --s.open_streams_;
      if (!s.closing_ && !s.board_.stopping()) ++s.lost_streams_;
    }
  } closed{*this};
  uint64_t seen = UINT64_MAX;  // the first list goes out at once
  while (!context->IsCancelled() && !closing_) {
    std::optional<std::vector<Device>> list = board_.wait_for_change(resource_, seen, kStreamPoll);
    if (!list) {
      if (board_.stopping()) break;
      continue;
    }
    v1beta1::ListAndWatchResponse response;
    size_t healthy = 0;
    for (const Device& d : *list) {
      v1beta1::Device* device = response.add_devices();
      device->set_id(d.id);
      device->set_health(d.healthy ? "Healthy" : "Unhealthy");
      healthy += d.healthy;
    }
    if (!writer->Write(response)) break;
    TANDEM_LOG_INFO("{}: sent {} devices, {} healthy", name, list->size(), healthy);
  }
  if (!closing_ && !board_.stopping()) TANDEM_LOG_INFO("{}: the kubelet ended the device list's stream", name);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::GetPreferredAllocation(grpc::ServerContext*,
                                                         const v1beta1::PreferredAllocationRequest* request,
                                                         v1beta1::PreferredAllocationResponse* response) {
  for (const auto& want : request->container_requests()) {
    const size_t size = static_cast<size_t>(std::max(0, want.allocation_size()));
    std::vector<std::string> chosen(want.must_include_deviceids().begin(), want.must_include_deviceids().end());
    // The rest from one GPU where possible: a required device's GPU first, then the GPU with
    // the most available slots; lowest indices first.
    std::map<std::string, std::vector<std::pair<uint32_t, std::string>>> by_gpu;
    for (const std::string& id : want.available_deviceids())
      if (auto d = parse_device_id(id, resource_); d && std::find(chosen.begin(), chosen.end(), id) == chosen.end())
        by_gpu[d->gpu].emplace_back(d->index, id);
    std::vector<std::string> order;
    for (const std::string& id : chosen)
      if (auto d = parse_device_id(id, resource_); d && std::find(order.begin(), order.end(), d->gpu) == order.end())
        order.push_back(d->gpu);
    std::vector<std::string> rest;
    for (const auto& [gpu, ids] : by_gpu)
      if (std::find(order.begin(), order.end(), gpu) == order.end()) rest.push_back(gpu);
    std::stable_sort(rest.begin(), rest.end(), [&](const auto& a, const auto& b) { return by_gpu[a].size() > by_gpu[b].size(); });
    order.insert(order.end(), rest.begin(), rest.end());
    for (const std::string& gpu : order) {
      auto& ids = by_gpu[gpu];
      std::sort(ids.begin(), ids.end());
      for (const auto& [index, id] : ids)
        if (chosen.size() < size) chosen.push_back(id);
    }
    auto* out = response->add_container_responses();
    for (const std::string& id : chosen) out->add_deviceids(id);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                                           v1beta1::AllocateResponse* response) {
  const char* name = resource_name(resource_);
  for (const auto& container : request->container_requests()) {
    std::vector<std::string> ids(container.devices_ids().begin(), container.devices_ids().end());
    std::string error;
    std::optional<ContainerGrant> grant = board_.grant(ids, resource_, error);
    if (!grant) {
      TANDEM_LOG_WARN("{}: Allocate refused: {}", name, error);
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(name) + ": " + error);
    }
    // tandemd makes the grant's socket before the container can look for it. One request,
    // bounded: the kubelet's deadline is not tandemd's to spend.
    std::string reply;
    if (!tandem::ctl::try_ask(board_.options().grant_socket, MessageType::grant_request, msg::encode(grant->tandemd_grant),
                              MessageType::grant_reply, 2000, reply, error)) {
      TANDEM_LOG_WARN("{}: Allocate failed: tandemd did not grant {}: {}", name, grant->tandemd_grant.name, error);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(name) + ": tandemd did not grant: " + error);
    }
    auto* out = response->add_container_responses();
    for (const auto& [key, value] : grant->envs) (*out->mutable_envs())[key] = value;
    for (const Mount& m : grant->mounts) {
      auto* mount = out->add_mounts();
      mount->set_container_path(m.container_path);
      mount->set_host_path(m.host_path);
      mount->set_read_only(m.read_only);
    }
    for (const std::string& cdi : grant->cdi_devices) out->add_cdi_devices()->set_name(cdi);
    TANDEM_LOG_INFO("{}: allocated {} device(s) starting {}: role {}, memory limit {}", name, ids.size(),
                    ids.empty() ? "-" : ids.front(), grant->envs["TANDEM_ROLE"], grant->envs["TANDEM_MEM_LIMIT"]);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                                    v1beta1::PreStartContainerResponse*) {
  return grpc::Status::OK;  // not asked for (pre_start_required is false)
}

}  // namespace tandem::k8s
