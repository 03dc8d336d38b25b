// A kubelet for tandem-device-plugin's tests (tests/e2e/device_plugin_e2e.py), speaking the
// kubelet's own gRPC APIs (src/k8s/proto): the Registration service on DIR/kubelet.sock, the
// pod-resources service on DIR/../pod-resources/kubelet.sock, and, for each plugin that
// registers, a client that reads its options and its ListAndWatch stream. What happens is
// printed as JSON lines on stdout ({"event": ..., "t": monotonic seconds}); what to do next
// comes as commands on stdin, one a line:
//   allocate RESOURCE ID...          call Allocate for one container, print the answer
//   preferred RESOURCE SIZE ID...    GetPreferredAllocation from the available IDs given
//   hold RESOURCE ID...              pods hold these devices (what pod-resources List says)
//   restart                          as a kubelet restart: stop, remove every socket in DIR, serve anew
//   hang on|off                      Register (and pod-resources) stop answering / answer again
//   stall RESOURCE on|off            stop / resume reading that resource's device stream
//   close RESOURCE                   cancel that resource's device stream
//   quit
// usage: fake-kubelet DIR
#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "deviceplugin_v1beta1.grpc.pb.h"
#include "podresources_v1.grpc.pb.h"

namespace {

using nlohmann::json;

std::mutex g_out;
std::string g_dir;
std::atomic<bool> g_hang{false};

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

void emit(json j) {
  j["t"] = now_s();
  std::lock_guard lock(g_out);
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// While hung, a handler waits (bounded: the test's own deadline ends it sooner).
void wait_while_hung() {
  for (int i = 0; i < 300 && g_hang; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

std::shared_ptr<grpc::Channel> channel_to(const std::string& path) {
  return grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
}

// A registered plugin: its endpoint and the thread reading its device stream.
struct Plugin {
  std::string resource, endpoint;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  grpc::ClientContext stream_context;
  std::atomic<bool> stalled{false}, done{false};
  std::thread reader;
};

std::mutex g_plugins_mutex;
std::map<std::string, std::unique_ptr<Plugin>> g_plugins;  // by resource

void read_stream(Plugin* p) {
  v1beta1::DevicePluginOptions options;
  {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status s = p->stub->GetDevicePluginOptions(&c, v1beta1::Empty(), &options);
    emit({{"event", "options"}, {"resource", p->resource}, {"ok", s.ok()},
          {"preferred_allocation", options.get_preferred_allocation_available()},
          {"pre_start", options.pre_start_required()}});
  }
  auto reader = p->stub->ListAndWatch(&p->stream_context, v1beta1::Empty());
  v1beta1::ListAndWatchResponse response;
  while (true) {
    while (p->stalled && !p->done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!reader->Read(&response)) break;
    json devices = json::array();
    int healthy = 0;
    for (const auto& d : response.devices()) {
      devices.push_back({{"id", d.id()}, {"health", d.health()}});
      healthy += d.health() == "Healthy";
    }
    emit({{"event", "devices"}, {"resource", p->resource}, {"healthy", healthy}, {"devices", devices}});
  }
  grpc::Status s = reader->Finish();
  emit({{"event", "stream_end"}, {"resource", p->resource}, {"code", static_cast<int>(s.error_code())},
        {"message", s.error_message()}});
  p->done = true;
}

void drop_plugin(std::unique_ptr<Plugin>& p) {
  if (!p) return;
  p->done = true;
  p->stream_context.TryCancel();
  if (p->reader.joinable()) p->reader.join();
  p.reset();
}

class Registration final : public v1beta1::Registration::Service {
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* r, v1beta1::Empty*) override {
    wait_while_hung();
    emit({{"event", "register"}, {"resource", r->resource_name()}, {"endpoint", r->endpoint()},
          {"version", r->version()}, {"preferred_allocation", r->options().get_preferred_allocation_available()}});
    if (r->version() != "v1beta1") return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version");
    auto p = std::make_unique<Plugin>();
    p->resource = r->resource_name();
    p->endpoint = r->endpoint();
    p->stub = v1beta1::DevicePlugin::NewStub(channel_to(g_dir + "/" + r->endpoint()));
    std::unique_ptr<Plugin> old;
    {
      std::lock_guard lock(g_plugins_mutex);
      old = std::move(g_plugins[p->resource]);
      Plugin* raw = p.get();
      g_plugins[p->resource] = std::move(p);
      // The real kubelet connects after Register returns; so does this one, on its own thread.
      raw->reader = std::thread(read_stream, raw);
    }
    std::thread([o = std::move(old)]() mutable { drop_plugin(o); }).detach();
    return grpc::Status::OK;
  }
};

std::mutex g_held_mutex;
std::map<std::string, std::vector<std::string>> g_held;  // by resource

class PodResources final : public v1::PodResourcesLister::Service {
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*, v1::ListPodResourcesResponse* out) override {
    wait_while_hung();
    std::lock_guard lock(g_held_mutex);
    int n = 0;
    for (const auto& [resource, ids] : g_held)
      for (const std::string& id : ids) {  // one pod per device
        auto* pod = out->add_pod_resources();
        pod->set_name("pod-" + std::to_string(n++));
        pod->set_namespace_("default");  // protoc renames a C++ keyword
        auto* c = pod->add_containers();
        c->set_name("main");
        auto* d = c->add_devices();
        d->set_resource_name(resource);
        d->add_device_ids(id);
      }
    return grpc::Status::OK;
  }
};

struct Servers {
  Registration registration;
  PodResources pod_resources;
  std::unique_ptr<grpc::Server> kubelet, lister;

  void start() {
    std::string pr_dir = g_dir + "/../pod-resources";
    mkdir(pr_dir.c_str(), 0755);
    unlink((pr_dir + "/kubelet.sock").c_str());
    grpc::ServerBuilder b1;
    b1.AddListeningPort("unix:" + pr_dir + "/kubelet.sock", grpc::InsecureServerCredentials());
    b1.RegisterService(&pod_resources);
    lister = b1.BuildAndStart();
    grpc::ServerBuilder b2;
    b2.AddListeningPort("unix:" + g_dir + "/kubelet.sock", grpc::InsecureServerCredentials());
    b2.RegisterService(&registration);
    kubelet = b2.BuildAndStart();
    emit({{"event", "serving"}, {"ok", kubelet && lister}});
  }
  void stop() {
    for (auto* s : {&kubelet, &lister})
      if (*s) {
        (*s)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
        (*s)->Wait();
        s->reset();
      }
  }
};

// As the kubelet does when it starts: every socket in its directory removed.
void remove_sockets() {
  DIR* d = opendir(g_dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string path = g_dir + "/" + e->d_name;
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
  }
  closedir(d);
}

Plugin* plugin(const std::string& resource) {
  std::lock_guard lock(g_plugins_mutex);
  auto it = g_plugins.find(resource);
  return it == g_plugins.end() ? nullptr : it->second.get();
}

void allocate(std::istringstream& args) {
  std::string resource, id;
  args >> resource;
  Plugin* p = plugin(resource);
  if (!p) return emit({{"event", "allocate"}, {"ok", false}, {"error", "no plugin for " + resource}});
  v1beta1::AllocateRequest request;
  auto* c = request.add_container_requests();
  while (args >> id) c->add_devices_ids(id);
  v1beta1::AllocateResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = p->stub->Allocate(&context, request, &response);
  json out = {{"event", "allocate"}, {"resource", resource}, {"ok", s.ok()}, {"error", s.error_message()},
              {"code", static_cast<int>(s.error_code())}};
  if (s.ok() && response.container_responses_size() == 1) {
    const auto& r = response.container_responses(0);
    json envs = json::object(), mounts = json::array(), cdi = json::array();
    for (const auto& [k, v] : r.envs()) envs[k] = v;
    for (const auto& m : r.mounts())
      mounts.push_back({{"container_path", m.container_path()}, {"host_path", m.host_path()}, {"read_only", m.read_only()}});
    for (const auto& d : r.cdi_devices()) cdi.push_back(d.name());
    out["envs"] = envs;
    out["mounts"] = mounts;
    out["cdi_devices"] = cdi;
  }
  emit(out);
}

void preferred(std::istringstream& args) {
  std::string resource, id;
  int size = 0;
  args >> resource >> size;
  Plugin* p = plugin(resource);
  if (!p) return emit({{"event", "preferred"}, {"ok", false}});
  v1beta1::PreferredAllocationRequest request;
  auto* c = request.add_container_requests();
  c->set_allocation_size(size);
  while (args >> id) c->add_available_deviceids(id);
  v1beta1::PreferredAllocationResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = p->stub->GetPreferredAllocation(&context, request, &response);
  json ids = json::array();
  if (s.ok() && response.container_responses_size() == 1)
    for (const auto& d : response.container_responses(0).deviceids()) ids.push_back(d);
  emit({{"event", "preferred"}, {"ok", s.ok()}, {"ids", ids}});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fake-kubelet DIR\n");
    return 2;
  }
  g_dir = argv[1];
  for (size_t at = g_dir.find('/', 1); at != std::string::npos; at = g_dir.find('/', at + 1))
    mkdir(g_dir.substr(0, at).c_str(), 0755);  // mkdir -p
  mkdir(g_dir.c_str(), 0755);
  Servers servers;
  servers.start();
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream args(line);
    std::string command;
    args >> command;
    if (command == "allocate") {
      allocate(args);
    } else if (command == "preferred") {
      preferred(args);
    } else if (command == "hold") {
      std::string resource, id;
      args >> resource;
      std::vector<std::string> ids;
      while (args >> id) ids.push_back(id);
      std::lock_guard lock(g_held_mutex);
      g_held[resource] = ids;
    } else if (command == "restart") {
      servers.stop();
      {
        std::lock_guard lock(g_plugins_mutex);
        for (auto& [r, p] : g_plugins) drop_plugin(p);
        g_plugins.clear();
      }
      remove_sockets();
      servers.start();
    } else if (command == "hang") {
      std::string how;
      args >> how;
      g_hang = how == "on";
    } else if (command == "stall" || command == "close") {
      std::string resource, how;
      args >> resource >> how;
      if (Plugin* p = plugin(resource)) {
        if (command == "close") p->stream_context.TryCancel();
        else p->stalled = how == "on";
      }
    } else if (command == "quit") {
      break;
    } else if (!command.empty()) {
      emit({{"event", "error"}, {"error", "unknown command " + command}});
      continue;
    }
    emit({{"event", "done"}, {"command", command}});
  }
  g_hang = false;
  servers.stop();
  std::lock_guard lock(g_plugins_mutex);
  for (auto& [r, p] : g_plugins) drop_plugin(p);
  return 0;
}
