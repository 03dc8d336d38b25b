// nvidia-smi for the simulated GPUs (build/simgpu/nvidia-smi): the two forms programs run to
// learn about the GPU, answered from NVML as NVIDIA's tool answers them.
//   nvidia-smi -L                                      GPU 0: NAME (UUID: GPU-...)
//   nvidia-smi --query-gpu=FIELDS [--format=csv[,noheader][,nounits]] [-i INDEX]
// FIELDS: index, name, uuid, memory.total, memory.used, memory.free (MiB, as nvidia-smi).
// SGLang, for one, sizes its defaults from `--query-gpu=memory.total`. Like NVIDIA's tool it
// opens libnvidia-ml.so.1 at run time and looks its functions up with dlsym, so a process run
// under libtandem (LD_PRELOAD inherited from its parent) sees the memory through the quota,
// exactly as the real tool would on a GPU node. Anything else is refused with exit status 2.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};

struct Nvml {
  int (*init)();
  int (*count)(unsigned*);
  int (*handle)(unsigned, void**);
  int (*name)(void*, char*, unsigned);
  int (*uuid)(void*, char*, unsigned);
  int (*memory)(void*, Memory*);
};

bool load(Nvml& n) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!lib) return false;
  n.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  n.count = reinterpret_cast<int (*)(unsigned*)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  n.handle = reinterpret_cast<int (*)(unsigned, void**)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  n.name = reinterpret_cast<int (*)(void*, char*, unsigned)>(dlsym(lib, "nvmlDeviceGetName"));
  n.uuid = reinterpret_cast<int (*)(void*, char*, unsigned)>(dlsym(lib, "nvmlDeviceGetUUID"));
  n.memory = reinterpret_cast<int (*)(void*, Memory*)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  return n.init && n.count && n.handle && n.name && n.uuid && n.memory && n.init() == 0;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    size_t comma = s.find(',', start);
    parts.push_back(s.substr(start, comma - start));
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
}

bool known_field(const std::string& f) {
  for (const char* k : {"index", "name", "uuid", "memory.total", "memory.used", "memory.free"})
    if (f == k) return true;
  return false;
}

// One field of GPU `index`, with its unit unless `units` is false.
std::string field(const Nvml& n, void* device, unsigned index, const std::string& f, bool units) {
  char text[96] = {};
  if (f == "index") return std::to_string(index);
  if (f == "name") return n.name(device, text, sizeof text) == 0 ? text : "[N/A]";
  if (f == "uuid") return n.uuid(device, text, sizeof text) == 0 ? text : "[N/A]";
  Memory m{};
  if (n.memory(device, &m) != 0) return "[N/A]";
  unsigned long long bytes = f == "memory.total" ? m.total : f == "memory.used" ? m.used : m.free;
  return std::to_string(bytes >> 20) + (units ? " MiB" : "");
}

// A GPU index as -i gives it: digits only; -1 when it is not one.
long parse_index(const char* text) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  return *text >= '0' && *text <= '9' && *end == '\0' ? v : -1;
}

int usage(const char* why) {
  std::fprintf(stderr, "%s\nusage: nvidia-smi -L | --query-gpu=FIELDS [--format=csv[,noheader][,nounits]] [-i INDEX]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool list = false, header = true, units = true;
  std::vector<std::string> fields;
  long only = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-L" || a == "--list-gpus") {
      list = true;
    } else if (a.rfind("--query-gpu=", 0) == 0) {
      fields = split(a.substr(12));
      for (const std::string& f : fields)
        if (!known_field(f)) return usage(("Field \"" + f + "\" is not a valid field to query.").c_str());
    } else if (a.rfind("--format=", 0) == 0) {
      std::vector<std::string> format = split(a.substr(9));
      if (format[0] != "csv") return usage("Only the csv format is supported.");
      for (size_t k = 1; k < format.size(); ++k) {
        if (format[k] == "noheader") header = false;
        else if (format[k] == "nounits") units = false;
        else return usage(("Invalid format option \"" + format[k] + "\".").c_str());
      }
    } else if (a == "-i" || a == "--id" || a.rfind("--id=", 0) == 0) {
      bool joined = a.rfind("--id=", 0) == 0;
      if (!joined && i + 1 >= argc) return usage("-i needs a GPU index.");
      const char* id = joined ? a.c_str() + 5 : argv[++i];
      only = parse_index(id);
      if (only < 0) return usage(("Invalid GPU index \"" + std::string(id) + "\".").c_str());
    } else {
      return usage(("Invalid combination of input arguments: " + a).c_str());
    }
  }
  if (!list && fields.empty()) return usage("Give -L or --query-gpu.");
  Nvml n{};
  if (!load(n)) {
    std::fprintf(stderr, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n");
    return 9;
  }
  unsigned count = 0;
  n.count(&count);
  if (only >= static_cast<long>(count)) return usage("No devices were found with that index.");
  if (!list && header) {
    for (size_t k = 0; k < fields.size(); ++k) {
      bool memory = fields[k].rfind("memory.", 0) == 0;
      std::printf("%s%s%s", k ? ", " : "", fields[k].c_str(), memory && units ? " [MiB]" : "");
    }
    std::printf("\n");
  }
  for (unsigned i = 0; i < count; ++i) {
    if (only >= 0 && i != static_cast<unsigned>(only)) continue;
    void* device = nullptr;
    if (n.handle(i, &device) != 0) continue;
    if (list) {
      std::printf("GPU %u: %s (UUID: %s)\n", i, field(n, device, i, "name", true).c_str(),
                  field(n, device, i, "uuid", true).c_str());
      continue;
    }
    for (size_t k = 0; k < fields.size(); ++k)
      std::printf("%s%s", k ? ", " : "", field(n, device, i, fields[k], units).c_str());
    std::printf("\n");
  }
  return 0;
}
