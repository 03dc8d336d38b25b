// tandemctl top's figures from two status documents, and its screen (src/ctl/top_view.h); what
// tandemctl prints to a terminal (src/ctl/terminal_text.h).
#include <catch2/catch.hpp>
#include <string>

#include "terminal_text.h"
#include "top_view.h"

using nlohmann::json;
using tandem::ctl::cut_to;
using tandem::ctl::terminal_text;
using tandem::ctl::top_lines;
using tandem::ctl::top_view;

namespace {

json slot(int index, int pid, double completed_ns, double gate_wait_ms, unsigned long long launches) {
  return {{"slot", index},         {"pid", pid},           {"launches", launches},         {"completed_ns", completed_ns},
          {"gate_waits", 0},       {"gate_wait_ms", gate_wait_ms}, {"bytes_in_use", 64ull << 20},
          {"quota_bytes", 0},      {"pool_bytes", 0},      {"slo_ms", 0.0},               {"latency_ms", 0.0},
          {"latency_samples", 0}};
}

// A training process (pid 10) and a batch filler (pid 20) on one GPU whose bubbles are a
// quarter of the time (10 ms bubbles, 30 ms busy).
json document(double filler_completed_ns, double training_wait_ms, unsigned long long training_launches,
              int daemon_pid = 1) {
  return {{"daemon", {{"pid", daemon_pid}, {"version", "t"}, {"policy", "fill"}, {"uptime_s", 5.0}}},
          {"clients",
           {{{"pid", 10}, {"uid", 0}, {"role", "training"}},
            {{"pid", 20}, {"uid", 1000}, {"role", "batch-inference"}},
            {{"pid", 30}, {"uid", 1000}, {"role", "batch-inference"}}}},  // registered, no GPU yet
          {"gpus",
           {{{"uuid", "GPU-0123456789abcdef"},
             {"phase", "busy"},
             {"bubbles", 7},
             {"mean_bubble_ms", 10.0},
             {"mean_busy_ms", 30.0},
             {"pool", {{"bytes", 256ull << 20}}},
             {"slots",
              {slot(0, 10, 0, training_wait_ms, training_launches), slot(1, 20, filler_completed_ns, 0, 5)}}}}}};
}

}  // namespace

TEST_CASE("top: rates and estimates come from the difference of two documents", "[top]") {
  json before = document(1e9, 0, 1000), after = document(1e9 + 0.1e9, 50, 3000);
  json view = top_view(before, after, 2.0);
  const json& g = view["gpus"][0];
  // Idle time over 2 s at a quarter in bubbles: 0.5 s; fillers ran 0.1 s of GPU time in it.
  CHECK(g["bubble_use"].get<double>() == Approx(0.2));
  // Training waited 50 ms of 2 s at tandem's gate.
  CHECK(g["training_retained"].get<double>() == Approx(0.975));
  CHECK(g["bytes_in_use"] == (128ull << 20));
  CHECK(g["pooled_bytes"] == (256ull << 20));
  CHECK(g["policy"] == "fill");
  REQUIRE(view["processes"].size() == 3);
  CHECK(view["processes"][0]["role"] == "training");
  CHECK(view["processes"][0]["launches_per_s"].get<double>() == Approx(1000.0));
  CHECK(view["processes"][2]["gpu"].is_null());
  CHECK(view["processes"][2]["launches_per_s"].is_null());
}

TEST_CASE("top: no rates from one document, nor across a restarted daemon's counters", "[top]") {
  json first = top_view(nullptr, document(0, 0, 100), 1.0);
  CHECK(first["interval_s"] == 0.0);
  CHECK(first["gpus"][0]["bubble_use"].is_null());
  CHECK(first["gpus"][0]["training_retained"].is_null());
  CHECK(first["processes"][0]["launches_per_s"].is_null());
  // Counters that went backwards (a reused slot, a new daemon): unknown, not negative.
  json view = top_view(document(5e9, 100, 9000), document(1e9, 0, 10), 1.0);
  CHECK(view["gpus"][0]["bubble_use"].is_null());
  CHECK(view["processes"][0]["launches_per_s"].is_null());
}

TEST_CASE("top: online inference's GPU time is its requests times the time one takes", "[top]") {
  json before = document(0, 0, 100), after = document(0, 0, 200);
  for (json* d : {&before, &after}) {
    (*d)["clients"][1]["role"] = "inference";
    (*d)["gpus"][0]["slots"][1]["request_ms"] = 10.0;
  }
  before["gpus"][0]["slots"][1]["requests"] = 100;
  after["gpus"][0]["slots"][1]["requests"] = 120;  // 20 requests of 10 ms in 2 s: 0.2 s
  after["gpus"][0]["slots"][1]["launches"] = 85;
  json g = top_view(before, after, 2.0)["gpus"][0];
  CHECK(g["bubble_use"].get<double>() == Approx(0.4));  // of 0.5 s idle
  after["daemon"]["policy"] = "slo";  // not waiting for bubbles: no share of them
  CHECK(top_view(before, after, 2.0)["gpus"][0]["bubble_use"].is_null());
  after["daemon"]["policy"] = "fill";
  after["gpus"][0]["slots"][1]["request_ms"] = 0.0;  // no request time learned yet: unknown, not 0
  CHECK(top_view(before, after, 2.0)["gpus"][0]["bubble_use"].is_null());
}

TEST_CASE("top: the SLO target and latency of online inference", "[top]") {
  json doc = document(0, 0, 0);
  doc["clients"][1]["role"] = "inference";
  auto& s = doc["gpus"][0]["slots"][1];
  s["slo_ms"] = 50.0;
  s["latency_ms"] = 42.5;
  s["latency_samples"] = 12;
  json g = top_view(nullptr, doc, 1.0)["gpus"][0];
  CHECK(g["slo_target_ms"].get<double>() == Approx(50.0));
  CHECK(g["latency_ms"].get<double>() == Approx(42.5));
}

TEST_CASE("top: the screen fits the terminal and shows no one's escape sequences", "[top]") {
  json doc = document(0, 0, 0);
  doc["clients"][0]["container"] = {{"cgroup", std::string("/evil\x1b]0;owned\x07")}};
  json view = top_view(nullptr, doc, 1.0);
  auto wide = top_lines(view, "", 200, 50);
  bool training_row = false;
  for (const auto& l : wide) {
    training_row = training_row || (l.rfind("10 ", 0) == 0 && l.find("training") != std::string::npos);
    for (char c : l) CHECK(static_cast<unsigned char>(c) >= 0x20);
  }
  CHECK(training_row);
  auto narrow = top_lines(view, "", 30, 8);  // one row short of the 9 it needs
  CHECK(narrow.size() == 8);
  for (const auto& l : narrow) CHECK(l.size() <= 30);
  CHECK(narrow.back().find("more processes") != std::string::npos);
  auto gone = top_lines(nullptr, "no tandemd answers on /run/tandem/tandemd.sock", 80, 24);
  REQUIRE(gone.size() == 3);
  CHECK(gone[2].find("no tandemd answers") == 0);
}

TEST_CASE("terminal text: controls, bad bytes and bidirectional overrides are shown as escapes", "[top]") {
  CHECK(terminal_text("plain: ascii 100%") == "plain: ascii 100%");
  CHECK(terminal_text("a\nGPU forged") == "a\\nGPU forged");
  CHECK(terminal_text("\x1b[2J\x1b]0;owned\x07\t\x7f") == "\\x1b[2J\\x1b]0;owned\\x07\\x09\\x7f");
  CHECK(terminal_text("\xc2\x9b" "31m") == "\\u009b31m");             // C1 CSI, as UTF-8
  CHECK(terminal_text("\xe2\x80\xae" "txet") == "\\u202etxet");      // right-to-left override
  CHECK(terminal_text("\xff\xfe\xc3(") == "\\xff\\xfe\\xc3(");        // not UTF-8
  CHECK(terminal_text("\xc0\xaf") == "\\xc0\\xaf");                  // an overlong '/'
  CHECK(terminal_text("caf\xc3\xa9 \xe6\x97\xa5") == "caf\xc3\xa9 \xe6\x97\xa5");  // other UTF-8 kept
  CHECK(cut_to("caf\xc3\xa9", 4) == "caf");  // never half a character
  CHECK(cut_to("caf\xc3\xa9", 5) == "caf\xc3\xa9");
  CHECK(cut_to("abc", 2) == "ab");
}
