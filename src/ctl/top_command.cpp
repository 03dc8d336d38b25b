// tandemctl top: a live view of GPUs and processes, redrawn every interval like top(1); q
// quits. With --json: one snapshot (two status documents an interval apart, for the rates).
// A daemon that goes away is shown as such, and the view comes back when it answers again.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "ctl_common.h"
#include "terminal.h"
#include "top_view.h"

namespace tandem::ctl {
namespace {

using Clock = std::chrono::steady_clock;

// A status document, or the reason there is none. Short timeout: a stopped daemon must not
// make the view (and q) unresponsive for long.
bool sample(const std::string& socket_path, nlohmann::json& doc, std::string& why) {
  std::string reply;
  if (!try_ask(socket_path, MessageType::status_request, msg::encode(msg::StatusRequest{}),
               MessageType::status_reply, 1000, reply, why))
    return false;
  doc = nlohmann::json::parse(reply, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("daemon") || !doc.contains("gpus") ||
      !doc.contains("clients")) {
    why = "malformed status reply from tandemd on " + socket_path;
    return false;
  }
  return true;
}

// Rates only between two documents of the same daemon: a restarted one counts from zero.
bool same_daemon(const nlohmann::json& before, const nlohmann::json& now) {
  return before.is_object() && before["daemon"].value("pid", -1) == now["daemon"].value("pid", -2) &&
         before["daemon"].value("uptime_s", 0.0) <= now["daemon"].value("uptime_s", 0.0);
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int snapshot(const std::string& socket_path, double interval_s) {
  nlohmann::json first = ask_status(socket_path);
  Clock::time_point t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  nlohmann::json second = ask_status(socket_path);
  double elapsed = seconds_between(t0, Clock::now());
  print_json(top_view(same_daemon(first, second) ? first : nlohmann::json(nullptr), second, elapsed));
  return 0;
}

}  // namespace

int top_command(const std::string& socket_path, double interval_s, bool json) {
  if (json) return snapshot(socket_path, interval_s);
  TerminalScreen screen;
  std::string why;
  if (!screen.open(0, 1, why)) {
    std::fprintf(stderr, "tandemctl top: %s\n", why.c_str());
    return 2;
  }
  nlohmann::json previous = nullptr;
  Clock::time_point previous_at{};
  bool quit = false;
  while (!quit && !screen.stop_signal()) {
    nlohmann::json doc, view = nullptr;
    std::string notice;
    Clock::time_point now = Clock::now();
    if (sample(socket_path, doc, why)) {
      bool rates = same_daemon(previous, doc);
      view = top_view(rates ? previous : nlohmann::json(nullptr), doc, rates ? seconds_between(previous_at, now) : 0);
      previous = std::move(doc);
      previous_at = now;
    } else {
      char again[64];
      std::snprintf(again, sizeof again, "; asking again every %.1f s", interval_s);
      notice = why + again;
      previous = nullptr;
    }
    int rows = 0, columns = 0;
    screen.size(rows, columns);
    screen.draw(top_lines(view, notice, columns, rows));
    Clock::time_point next = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s));
    while (!quit && !screen.stop_signal() && Clock::now() < next) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
      char key = screen.wait_key(static_cast<int>(left) + 1);
      if (key == 'q' || key == 'Q') quit = true;
      int now_rows = 0, now_columns = 0;
      screen.size(now_rows, now_columns);
      bool resumed = screen.handle_suspend();
      if (resumed || now_rows != rows || now_columns != columns) {  // resized or back from Ctrl-Z
        rows = now_rows;
        columns = now_columns;
        screen.draw(top_lines(view, notice, columns, rows));
      }
    }
  }
  int signo = screen.stop_signal();
  screen.close();
  if (signo) {  // the terminal is back; now end as the signal would have ended us
    std::signal(signo, SIG_DFL);
    std::raise(signo);
  }
  return 0;
}

}  // namespace tandem::ctl
