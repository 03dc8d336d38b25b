// The device-plugin service of one resource (tandem.io/bubble or tandem.io/slo), as the
// kubelet calls it (proto/deviceplugin_v1beta1.proto): ListAndWatch streams the device list
// from the SlotBoard whenever it changes; Allocate answers what a container needs to join
// (allocate.h) or refuses unknown devices; GetPreferredAllocation keeps a container's slots
// on one GPU. Every handler is bounded: a stream ends when the kubelet cancels it, stops
// reading (its write fails) or the server is closed.
#pragma once
#include <atomic>

#include "deviceplugin_v1beta1.grpc.pb.h"
#include "slot_board.h"

namespace tandem::k8s {

class DevicePluginService final : public v1beta1::DevicePlugin::Service {
 public:
  DevicePluginService(SlotResource resource, SlotBoard& board) : resource_(resource), board_(board) {}
  // Ends the streams in progress (before the server shuts down).
  void close() { closing_ = true; }
  // Device streams open now, and those the kubelet ended (cancelled, or stopped reading).
  int open_streams() const { return open_streams_; }
  uint64_t lost_streams() const { return lost_streams_; }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*, v1beta1::DevicePluginOptions*) override;
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override;
  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override;
  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override;

 private:
  SlotResource resource_;
  SlotBoard& board_;
  std::atomic<bool> closing_{false};
  std::atomic<int> open_streams_{0};
  std::atomic<uint64_t> lost_streams_{0};
};

}  // namespace tandem::k8s
