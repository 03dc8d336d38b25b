// How much GPU time (ns of estimated work) fillers may launch each period: SpecInF's three
// token phases. Pure logic, time passed in.
//
//   communication a bubble in which training's collective (an NCCL kernel other than
//                 point-to-point) is still running, when fill_during_comm is off: like closed.
//                 Without MPS a filler's kernels take time slices from the collective and
//                 lengthen training's iteration. A point-to-point kernel alone (a pipeline
//                 stage's receive waiting for its peer) is no communication: an ordinary bubble.
//   closed        training is busy: no grants, and revoke() is true so the daemon zeroes every
//                 filler's unspent balance (tokens left over would run into training).
//   conservative  bubble age < conservative_ns: still no grants, nothing revoked. Training may
//                 resume at once, and a long training kernel may still be running.
//   incremental   then the k-th incremental period (k = 0, 1, ...; counted per bubble) grants
//                 fraction = min(1, incremental_start + k * incremental_step) of period_ns,
//                 split equally among the fillers that want work. Growing slowly limits the
//                 damage when the bubble turns out short.
//   stable        bubble age >= stable_after_ns: it has proved long and steady (e.g. an
//                 all-reduce), so each filler is topped up to its in-flight share at once; the
//                 in-flight bound, not a rate, limits training's wait. A bubble that has
//                 outlasted every one learned is about to end: its bound (below) is 0.
// In-flight bound (all phases): the bound is max_inflight_ns, or less near the bubble's
// predicted end (BubbleDetector: the length likely for a bubble of its age): at most the time
// left before it, nothing once it has passed, so that filler work does not run into training
// when it resumes on schedule (beside a collective, with fill_during_comm, at least half the
// bound: a collective's end is not predictable from the bubbles). With n fillers wanting work,
// each filler's share is bound / n, and inflight_ns + unspent tokens + grant <= share. Unspent
// tokens count because they become in-flight work without asking again. So when training
// resumes it waits for at most max_inflight_ns of filler work. Fillers not wanting work get
// nothing. Integer division remainders (< n ns) are dropped.
// A filler pays for a launch in full before it starts. A launch that costs more than its
// in-flight share (a long kernel, a graph replay) can never be paid from the share: it is
// granted whole, to one filler at a time, when the bubble's predicted remainder holds it after
// all the fillers' queued work (SpecInF's principle II for a single launch). With no predicted
// end it waits, as it does when no bubble is long enough (status says so).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bubble_detector.h"

namespace tandem::scheduler {

// Defaults match the daemon's settings table (TANDEM_FILL_*_US, TANDEM_MAX_INFLIGHT_US).
struct FillParams {
  uint64_t period_ns = 1000000;        // sample period
  uint64_t conservative_ns = 500000;   // no grants this long after a bubble starts
  double incremental_start = 0.25;     // fraction of a period granted in the first incremental period
  double incremental_step = 0.25;      // growth of that fraction per period
  uint64_t stable_after_ns = 1500000;  // bubble age at which the stable phase starts
  uint64_t max_inflight_ns = 4000000;  // bound on fillers' issued-but-unfinished work (all fillers)
  bool fill_during_comm = false;       // grant while training's NCCL kernels run (right with MPS)
  double online_hold = 0.05;           // of each second, online requests may hold training (0: never)
};

enum class FillPhase { closed, communication, conservative, incremental, stable };

// A gated client (a filler, or training under policy slo) as the daemon sees it.
struct FillerState {
  int id;
  uint64_t inflight_ns;  // launched, not yet completed (estimated)
  int64_t tokens_ns;     // current unspent balance (counts against the in-flight share)
  bool wants_work;       // launched recently or is waiting at the gate
  uint64_t want_ns = 0;  // a launch waiting at the gate: its cost (0: none waits)
};

struct Grant {
  int id;
  int64_t tokens_ns;  // to add this period
};

// Splits `rate_ns` of tokens for this period and `inflight_bound` equally among the clients
// that want work: each gets min(its rate share, room under its in-flight share), or all the
// room when `top_up`. inflight_ns + unspent tokens + grant <= inflight_bound / n, because
// unspent tokens become in-flight work without asking again; a debt gives no extra room.
// `remaining_ns` (0: not known): time left before the bubble's predicted end; one waiting
// launch longer than its client's share is granted whole when it fits there after every
// client's in-flight work: the first such client from `first` on (clients taken in turn), so
// that the whole launch goes round rather than always to the lowest slot.
void grant_shares(const std::vector<FillerState>& clients, int64_t rate_ns, int64_t inflight_bound, bool top_up,
                  int64_t remaining_ns, std::vector<Grant>& grants, size_t first = 0);

class FillPolicy {
 public:
  explicit FillPolicy(FillParams p) : p_(p) {}

  // Once per period. Clears `grants`, then fills it with the tokens to ADD per filler.
  // predicted_end_ns: when the bubble is expected to end (learned profile; 0: not known);
  // communicating: training's collectives (NCCL kernels other than point-to-point) are still running.
  FillPhase step(GpuPhase gpu, bool communicating, uint64_t now_ns, uint64_t bubble_started_ns, uint64_t predicted_end_ns,
                 const std::vector<FillerState>& fillers, std::vector<Grant>& grants);
  FillPhase phase() const { return phase_; }
  // True while closed: the daemon must zero every filler's unspent balance.
  bool revoke() const { return phase_ == FillPhase::closed || phase_ == FillPhase::communication; }
  // Fraction of a period granted in the last step (0 closed/conservative, 1 stable).
  double rate() const { return rate_; }
  static const char* phase_name(FillPhase p);
  // A further bound on the fillers' in-flight work (policy slo: online inference's window).
  void limit_inflight(uint64_t ns) { inflight_limit_ns_ = ns; }

 private:
  FillPhase choose_phase(GpuPhase gpu, uint64_t age_ns) const;

  FillParams p_;
  uint64_t inflight_limit_ns_ = UINT64_MAX;
  FillPhase phase_ = FillPhase::closed;
  uint64_t bubble_started_ns_ = 0;  // the bubble the incremental count belongs to
  int incremental_steps_ = 0;
  double rate_ = 0;
  size_t turn_ = 0;  // whose long launch is looked at first this period (grant_shares)
};

}  // namespace tandem::scheduler
