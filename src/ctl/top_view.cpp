// tandemctl top's figures from two status documents, and its screen (top_view.h).
#include "top_view.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "ctl_common.h"
#include "terminal_text.h"

namespace tandem::ctl {
namespace {

using nlohmann::json;

unsigned long long u64(const json& object, const char* key) {
  return object.contains(key) && object[key].is_number() ? object[key].get<unsigned long long>() : 0ull;
}
double number(const json& object, const char* key) {
  return object.contains(key) && object[key].is_number() ? object[key].get<double>() : 0.0;
}

bool is_filler(const std::string& role) { return role == "batch-inference" || role == "inference"; }

// A slot of the previous document is the same process's when GPU, slot and pid agree; a slot
// reused by another process starts its rates afresh.
using SlotKey = std::tuple<std::string, int, int>;

std::map<SlotKey, const json*> slots_by_key(const json& doc) {
  std::map<SlotKey, const json*> out;
  if (!doc.is_object() || !doc.contains("gpus")) return out;
  for (const auto& g : doc["gpus"])
    for (const auto& s : g["slots"])
      out[{g.value("uuid", std::string()), s.value("slot", -1), s.value("pid", -1)}] = &s;
  return out;
}

// The growth of a counter since the previous document; negative (a restarted daemon or a
// reused slot) counts as unknown.
bool grew(const json* before, const json& now, const char* key, double& delta) {
  if (!before) return false;
  double d = number(now, key) - number(*before, key);
  if (d < 0) return false;
  delta = d;
  return true;
}

json gpu_row(const json& g, const std::string& policy, const std::map<int, std::string>& role_of,
             const std::map<SlotKey, const json*>& before, double interval_s) {
  const std::string uuid = g.value("uuid", std::string());
  double filler_ns = 0, training_wait_ms = 0;
  int training = 0;
  bool rates = interval_s > 0, untracked = false;
  unsigned long long in_use = 0, quota = 0;
  json slo_target = nullptr, latency = nullptr;
  for (const auto& s : g["slots"]) {
    int pid = s.value("pid", -1);
    auto role = role_of.find(pid);
    const std::string r = role == role_of.end() ? std::string() : role->second;
    auto prev = before.find({uuid, s.value("slot", -1), pid});
    const json* p = prev == before.end() ? nullptr : prev->second;
    double delta = 0;
    if (r == "training") {
      ++training;
      if (grew(p, s, "gate_wait_ms", delta)) training_wait_ms += delta;
      else rates = false;
    } else if (is_filler(r)) {
      double launched = 0, requests = 0;
      if (!grew(p, s, "completed_ns", delta) || !grew(p, s, "launches", launched) ||
          !grew(p, s, "requests", requests)) {
        rates = false;
      } else if (r == "batch-inference") {
        filler_ns += delta;  // GPU time estimated kernel by kernel, for its tokens
      } else if (launched > 0) {
        // Online inference is admitted request by request: its requests times the GPU time it
        // learned one takes. Under the slo policy it does not wait for bubbles, so its share of
        // them means nothing there; nor without a learned request time.
        if (policy == "fill" && number(s, "request_ms") > 0) filler_ns += requests * number(s, "request_ms") * 1e6;
        else untracked = true;
      }
    }
    if (r == "inference" && number(s, "slo_ms") > 0) {
      double target = number(s, "slo_ms");
      if (slo_target.is_null() || target < slo_target.get<double>()) slo_target = target;
      if (u64(s, "latency_samples") > 0 && (latency.is_null() || number(s, "latency_ms") > latency.get<double>()))
        latency = number(s, "latency_ms");
    }
    in_use += u64(s, "bytes_in_use");
    quota += u64(s, "quota_bytes");
  }
  // Bubble use as the demo defines it: fillers' GPU time over training's idle time. The idle
  // time of the interval is estimated from the detector's mean bubble and busy lengths.
  json bubble_use = nullptr, retained = nullptr;
  double bubble = number(g, "mean_bubble_ms"), busy = number(g, "mean_busy_ms");
  if (rates && !untracked && training > 0 && u64(g, "bubbles") > 0 && bubble + busy > 0) {
    double idle_ns = interval_s * 1e9 * bubble / (bubble + busy);
    bubble_use = std::min(1.0, filler_ns / idle_ns);
  }
  // What tandem can see of training's loss: the share of the interval its processes waited at
  // tandem's gate (the slo policy's duty cycle; never under fill). Fillers' kernels slowing
  // training's on the GPU are not in it.
  if (rates && training > 0)
    retained = std::clamp(1.0 - training_wait_ms / (training * interval_s * 1e3), 0.0, 1.0);
  json pool = g.contains("pool") && g["pool"].is_object() ? g["pool"] : json::object();
  return {{"uuid", uuid},
          {"policy", policy},
          {"phase", g.value("phase", std::string("-"))},
          {"bubble_use", bubble_use},
          {"training_retained", retained},
          {"slo_target_ms", slo_target},
          {"latency_ms", latency},
          {"bytes_in_use", in_use},
          {"quota_bytes", quota},
          {"pooled_bytes", u64(pool, "bytes")}};
}

json process_row(const json& client, const json* gpu, const json* slot, const json* before, double interval_s) {
  json launches_per_s = nullptr;
  double delta = 0;
  if (slot && interval_s > 0 && grew(before, *slot, "launches", delta)) launches_per_s = delta / interval_s;
  auto from_slot = [&](const char* key) -> json { return slot ? (*slot)[key] : json(nullptr); };
  return {{"pid", client.value("pid", -1)},
          {"role", client.value("role", std::string("-"))},
          {"uid", client.value("uid", -1)},
          {"container", container_text(client)},
          {"gpu", gpu ? (*gpu)["uuid"] : json(nullptr)},
          {"launches_per_s", launches_per_s},
          {"gate_waits", from_slot("gate_waits")},
          {"gate_wait_ms", from_slot("gate_wait_ms")},
          {"bytes_in_use", from_slot("bytes_in_use")},
          {"quota_bytes", from_slot("quota_bytes")},
          {"pool_bytes", from_slot("pool_bytes")}};
}

// Fixed-width cells; figures not known show as "-".
std::string cell(const json& value, const char* format, double scale = 1.0) {
  if (!value.is_number()) return "-";
  char text[48];
  std::snprintf(text, sizeof text, format, value.get<double>() * scale);
  return text;
}
std::string mib_cell(const json& value) { return cell(value, "%.0f", 1.0 / 1048576.0); }
std::string short_gpu(const json& uuid) {
  return uuid.is_string() ? uuid.get<std::string>().substr(0, 12) : std::string("-");
}

std::string printed(const char* format, auto... args) {
  char text[512];
  std::snprintf(text, sizeof text, format, args...);
  return text;
}

}  // namespace

json top_view(const json& previous, const json& current, double interval_s) {
  if (!previous.is_object()) interval_s = 0;
  const json& d = current["daemon"];
  std::string policy = d.value("policy", std::string("-"));
  std::map<int, std::string> role_of;
  for (const auto& c : current["clients"]) role_of[c.value("pid", -1)] = c.value("role", std::string());
  auto before = slots_by_key(previous);
  json gpus = json::array(), processes = json::array();
  for (const auto& g : current["gpus"]) gpus.push_back(gpu_row(g, policy, role_of, before, interval_s));
  for (const auto& c : current["clients"]) {
    int pid = c.value("pid", -1);
    bool placed = false;
    for (const auto& g : current["gpus"])
      for (const auto& s : g["slots"])
        if (s.value("pid", -2) == pid) {
          auto it = before.find({g.value("uuid", std::string()), s.value("slot", -1), pid});
          processes.push_back(process_row(c, &g, &s, it == before.end() ? nullptr : it->second, interval_s));
          placed = true;
        }
    if (!placed) processes.push_back(process_row(c, nullptr, nullptr, nullptr, interval_s));
  }
  return {{"daemon",
           {{"pid", d.value("pid", -1)},
            {"version", d.value("version", std::string())},
            {"policy", policy},
            {"uptime_s", number(d, "uptime_s")}}},
          {"interval_s", interval_s},
          {"gpus", gpus},
          {"processes", processes}};
}

std::vector<std::string> top_lines(const json& view, const std::string& notice, int width, int height) {
  std::vector<std::string> lines;
  if (view.is_object() && notice.empty()) {
    const json& d = view["daemon"];
    lines.push_back(printed("tandemd %s  pid %d  policy %s  up %.0f s  (q quits)",
                            d.value("version", std::string()).c_str(), d.value("pid", -1),
                            d.value("policy", std::string()).c_str(), number(d, "uptime_s")));
    lines.push_back("");
    lines.push_back(printed("%-12s %-6s %-6s %6s %6s %7s %7s %9s %9s %9s", "GPU", "POLICY", "PHASE", "BUBBLE", "TRAIN",
                            "SLO ms", "P99 ms", "MEM MiB", "QUOTA", "POOLED"));
    for (const auto& g : view["gpus"])
      lines.push_back(printed("%-12s %-6s %-6s %6s %6s %7s %7s %9s %9s %9s", short_gpu(g["uuid"]).c_str(),
                              g.value("policy", std::string()).c_str(), g.value("phase", std::string()).c_str(),
                              cell(g["bubble_use"], "%.2f").c_str(), cell(g["training_retained"], "%.2f").c_str(),
                              cell(g["slo_target_ms"], "%.1f").c_str(), cell(g["latency_ms"], "%.1f").c_str(),
                              mib_cell(g["bytes_in_use"]).c_str(),
                              g["quota_bytes"].is_number() && g["quota_bytes"].get<double>() > 0
                                  ? mib_cell(g["quota_bytes"]).c_str() : "-",
                              mib_cell(g["pooled_bytes"]).c_str()));
    if (view["gpus"].empty()) lines.push_back("(no GPUs yet)");
    lines.push_back("");
    lines.push_back(printed("%-8s %-15s %-12s %9s %10s %10s %8s %8s  %s", "PID", "ROLE", "GPU", "LAUNCH/s", "GATE WAITS",
                            "WAITED ms", "MEM MiB", "QUOTA", "CONTAINER"));
    size_t first_process = lines.size();
    for (const auto& p : view["processes"])
      lines.push_back(printed("%-8d %-15s %-12s %9s %10s %10s %8s %8s  %s", p.value("pid", -1),
                              p.value("role", std::string()).c_str(), short_gpu(p["gpu"]).c_str(),
                              cell(p["launches_per_s"], "%.0f").c_str(), cell(p["gate_waits"], "%.0f").c_str(),
                              cell(p["gate_wait_ms"], "%.1f").c_str(), mib_cell(p["bytes_in_use"]).c_str(),
                              p["quota_bytes"].is_number() && p["quota_bytes"].get<double>() > 0
                                  ? mib_cell(p["quota_bytes"]).c_str() : "-",
                              p.value("container", std::string("-")).c_str()));
    if (view["processes"].empty()) lines.push_back("(no registered processes)");
    // Too tall: keep the header and GPUs, as many processes as fit, and say how many did not.
    if (height > 0 && static_cast<int>(lines.size()) > height && static_cast<int>(first_process) < height) {
      size_t keep = static_cast<size_t>(height) - 1;
      size_t hidden = lines.size() - keep;
      lines.resize(keep);
      lines.push_back(printed("(%zu more processes)", hidden));
    }
  } else {
    lines.push_back("tandemctl top  (q quits)");
    lines.push_back("");
    lines.push_back(notice.empty() ? "waiting for tandemd" : notice);
  }
  if (height > 0 && static_cast<int>(lines.size()) > height) lines.resize(static_cast<size_t>(height));
  for (auto& l : lines) {
    // A cgroup path is named by whoever made the cgroup: no escape sequence of theirs reaches
    // the operator's terminal (terminal_text.h).
    l = terminal_text(l);
    if (width > 0) l = std::string(cut_to(l, static_cast<size_t>(width)));
  }
  return lines;
}

}  // namespace tandem::ctl
