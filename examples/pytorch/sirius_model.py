#!/usr/bin/env python3
"""SIRIUS's M/G/1 model of inference SLO compliance (its Figure 9, equations (1) and (2)), and the
search for the T_idle and watermark W of its Algorithm 1 that reach a target compliance
(docs/memory.md, "Choosing T_idle and W"). Pure Python, no dependencies.

    python3 sirius_model.py --rate 6 --service-ms 8 --load-ms 40 --model-mb 256 --models 3 \\
        --slo-ms 100 --target 0.99

prints one JSON line: idle_ms (T_idle, for TANDEM_MEM_IDLE_MS or model_server.py --idle-ms),
watermark_mb (W, for TANDEM_MEM_WATERMARK), the predicted compliance and the inputs as the model
used them.

The chain, per model (SIRIUS: models homogeneous and independent, so one model's queue stands for
all; its arrival rate is the total rate over the number of models):
  x^W  x requests in the system, the model loaded (x = 0: loaded and idle);
  x^C  x requests in the system, a cold start in progress (x = 0: the model released).
  0^W -> 0^C at 1/T_idle (the idle model released; exponential, as SIRIUS models it);
  0^W -> 1^W at lambda; 0^C -> 1^C at lambda*alpha (not in the reserved memory: a cold start),
  0^C -> 1^W at lambda*(1 - alpha) (in it); x^W -> (x+1)^W and x^C -> (x+1)^C at lambda;
  x^W -> (x-1)^W at mu (one request served, x >= 1); x^C -> x^W at 1/L (the model ready).
alpha = 1 - W / (sum of model sizes) (the reserved memory holds a uniform share of the released
models), L = load time + training adjustment time * alpha.

Levels x >= 1 form a quasi-birth-death process: pi_{x+1} = pi_x R (the matrix-geometric method),
R the minimal solution of A0 + R A1 + R^2 A2 = 0, here in closed form (rho = lambda/mu,
sigma = lambda L / (1 + lambda L)): R = [[rho, 0], [rho, sigma]]. Levels 0 and 1 come from their
balance equations and the normalisation. A request arriving in state s (Poisson arrivals see the
stationary distribution) is answered after X_s: x + 1 services (Erlang(x + 1, mu)), plus the
rest of a cold start in x^C (Exp(1/L)); arriving at 0^C it starts one with probability alpha
(equation (1)). P_SLO = sum_s pi_s P(X_s <= SLO) (equation (2)), the mixture's distribution
computed by uniformisation. The chain is truncated at the first level beyond which less than
1e-9 of the probability lies; that tail counts as missing the SLO (the result is low by at most
1e-9).
"""
import argparse
import json
import math
import random
import sys

TAIL = 1e-9  # probability left beyond the truncated chain, counted as missing the SLO


def _solve(a, b):
    """x with a x = b (Gaussian elimination, partial pivoting; a small dense system)."""
    n = len(b)
    m = [list(row) + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c and m[r][c]:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def release_rate(lam, idle_s, timer):
    """The rate of 0^W -> 0^C. SIRIUS's ("exponential"): 1/T_idle. "fixed": the rate at which a
    model is released before the next request as often as under a timer of exactly T_idle
    (theta / (theta + lambda) = exp(-lambda T_idle)); arrivals then find the model released exactly
    as often as under a server's timer, while the time it spends released is approximate."""
    if idle_s <= 0:
        return 1e9  # released at once
    if math.isinf(idle_s):
        return 0.0
    if timer == "exponential":
        return 1.0 / idle_s
    x = lam * idle_s
    return lam / math.expm1(x) if x < 700 else 0.0


def chain(lam, mu, idle_s, alpha, load_s, timer="exponential"):
    """The stationary distribution: (pi0W, pi0C, levels), levels[x-1] = (pi_xW, pi_xC) for
    x = 1..K, K where less than TAIL lies beyond. Rates per second, times in seconds."""
    if not lam < mu:
        raise ValueError(f"unstable: arrival rate {lam}/s is not below the service rate {mu}/s")
    theta = release_rate(lam, idle_s, timer)
    gamma = 1.0 / max(load_s, 1e-9)
    rho, sigma = lam / mu, lam / (lam + gamma)
    # R = [[rho, 0], [rho, sigma]]; N = (I - R)^-1 1 (the sum over all levels >= 1, per phase).
    n_w = 1.0 / (1.0 - rho)
    n_c = (1.0 + rho * n_w) / (1.0 - sigma)
    # Unknowns a = pi(0^W), b = pi(0^C), c = pi(1^W), d = pi(1^C). Balance of 0^C, 1^W, 1^C
    # (0^W's is implied) and the normalisation a + b + c n_w + d n_c = 1.
    a_, b_, c_, d_ = _solve([[theta, -lam, 0.0, 0.0],
                             [lam, lam * (1 - alpha), -mu, gamma + lam],
                             [0.0, lam * alpha, 0.0, -(lam + gamma)],
                             [1.0, 1.0, n_w, n_c]], [0.0, 0.0, 0.0, 1.0])
    levels, (w, c) = [], (max(c_, 0.0), max(d_, 0.0))
    while True:
        levels.append((w, c))
        # Mass beyond this level: (w, c) R N.
        beyond = (w * rho + c * rho) * n_w + c * sigma * n_c
        if beyond < TAIL:
            return max(a_, 0.0), max(b_, 0.0), levels
        w, c = w * rho + c * rho, c * sigma


def _within(start_w, start_c, mu, gamma, t):
    """P(the response time <= t) for a request whose state on arrival is start_w[n] (n services
    left, the model loaded) or start_c[n] (a cold start first), by uniformisation at
    q = max(mu, gamma): Poisson(q t) steps of a chain where a service ends with probability
    mu/q and a cold start with gamma/q."""
    q = max(mu, gamma)
    qt = q * t
    if qt > 2e5:
        raise ValueError("SLO too long against the service and load times for uniformisation")
    pw, pg = mu / q, gamma / q
    w, c = list(start_w) + [0.0], list(start_c) + [0.0]
    done, total, weight_sum = 0.0, 0.0, 0.0
    steps = int(qt + 12 * math.sqrt(qt) + 30)
    for k in range(steps + 1):
        weight = math.exp(k * math.log(qt) - qt - math.lgamma(k + 1)) if qt > 0 else (1.0 if k == 0 else 0.0)
        total += weight * done
        weight_sum += weight
        if weight_sum > 1 - 1e-13 and k > qt:
            break
        # One step: services end (n -> n - 1; n = 1 -> answered), cold starts end (C -> W).
        done += w[1] * pw
        w = [w[0]] + [w[n] * (1 - pw) + w[n + 1] * pw + c[n] * pg for n in range(1, len(w) - 1)] + [0.0]
        c = [c[0]] + [x * (1 - pg) for x in c[1:-1]] + [0.0]
    return total


def alpha_of(watermark_mb, total_mb):
    """SIRIUS's cold-start ratio at 0^C: the share of released models not in the reserved memory."""
    return min(1.0, max(0.0, 1.0 - watermark_mb / total_mb)) if total_mb > 0 else 1.0


def evaluate(rate, service_ms, load_ms, model_mb, models, slo_ms, idle_ms, watermark_mb, adjust_ms=0.0,
             timer="exponential"):
    """The model at one configuration: predicted compliance and what it rests on. `rate` is the
    total arrival rate (requests/s) over `models` models of `model_mb` each; `timer`: how T_idle
    is modelled (release_rate)."""
    total_mb = model_mb * models
    alpha = alpha_of(watermark_mb, total_mb)
    lam, mu = rate / models, 1e3 / service_ms
    load_s = (load_ms + adjust_ms * alpha) / 1e3
    idle_s = math.inf if idle_ms is None or math.isinf(idle_ms) else idle_ms / 1e3
    p0w, p0c, levels = chain(lam, mu, idle_s, alpha, load_s, timer)
    # Requests' states on arrival, by services left: n = x + 1 at level x.
    start_w = [0.0, p0w + p0c * (1 - alpha)] + [w for w, _ in levels]
    start_c = [0.0, p0c * alpha] + [c for _, c in levels]
    compliance = _within(start_w, start_c, mu, 1.0 / max(load_s, 1e-9), slo_ms / 1e3)
    released = p0c  # the model's memory is free (save the reserved share) only at 0^C
    return {"compliance": compliance, "alpha": alpha, "L_ms": load_s * 1e3, "per_model_rate": lam,
            "utilisation": lam / mu, "released_share": released,
            "cold_start_share": p0c * alpha / (p0w + p0c + sum(w + c for w, c in levels)),
            # Expected memory inference holds: its loaded models, and W of the released ones.
            "inference_mem_mb": total_mb * (1 - released) + min(watermark_mb, total_mb * released),
            "levels": len(levels)}


def _bisect_int(ok, lo, hi):
    """Smallest integer in [lo, hi] with ok(n), ok monotone (False ... True); hi must be ok."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def smallest_idle_ms(p, watermark_mb, target, max_idle_ms=86400e3):
    """The smallest T_idle (whole ms) at which the model meets `target` with W = watermark_mb;
    None when even a model never released does not. `p`: evaluate's other arguments."""
    meets = lambda idle: evaluate(**p, idle_ms=idle, watermark_mb=watermark_mb)["compliance"] >= target
    if not meets(math.inf):
        return None
    hi = 1
    while not meets(hi):
        hi *= 2
        if hi > max_idle_ms:
            return None
    return _bisect_int(meets, 0, hi)


def smallest_watermark_mb(p, idle_ms, target):
    """The smallest W (whole MiB) at which the model meets `target` with T_idle = idle_ms; None
    when reserving every model's memory does not."""
    total = int(math.ceil(p["model_mb"] * p["models"]))
    meets = lambda w: evaluate(**p, idle_ms=idle_ms, watermark_mb=w)["compliance"] >= target
    return _bisect_int(meets, 0, total) if meets(total) else None


def search(rate, service_ms, load_ms, model_mb, models, slo_ms, target, adjust_ms=0.0, idle_ms=None,
           watermark_mb=None, w_step_mb=32, max_points=64, timer="exponential"):
    """T_idle and W that reach `target` leaving training the most memory. With one of them given,
    the smallest value of the other. With neither: for W on a grid (multiples of w_step_mb, at
    most max_points of them, and every model's size), the smallest T_idle; of these pairs the one
    whose expected inference memory is least, then the smallest W at that T_idle. Returns a
    dict (feasible False, with the best compliance reachable, when no setting meets the target)."""
    p = dict(rate=rate, service_ms=service_ms, load_ms=load_ms, model_mb=model_mb, models=models,
             slo_ms=slo_ms, adjust_ms=adjust_ms, timer=timer)
    total = model_mb * models
    best = evaluate(**p, idle_ms=math.inf, watermark_mb=total)["compliance"]  # never a cold start
    out = {"target": target, "timer": timer, "max_compliance": round(best, 6)}
    if best < target:
        return dict(out, feasible=False)
    if idle_ms is not None and watermark_mb is not None:
        chosen = (idle_ms, watermark_mb)
    elif watermark_mb is not None:
        chosen = (smallest_idle_ms(p, watermark_mb, target), watermark_mb)
    elif idle_ms is not None:
        chosen = (idle_ms, smallest_watermark_mb(p, idle_ms, target))
    else:
        step = max(w_step_mb, w_step_mb * math.ceil(total / w_step_mb / max_points))
        grid = sorted({min(total, k * step) for k in range(int(total // step) + 2)})
        pairs = [(t, w) for w in grid for t in [smallest_idle_ms(p, w, target)] if t is not None]
        t, w = min(pairs, key=lambda tw: (evaluate(**p, idle_ms=tw[0], watermark_mb=tw[1])["inference_mem_mb"], tw[1]))
        chosen = (t, smallest_watermark_mb(p, t, target))
    if None in chosen:
        return dict(out, feasible=False, idle_ms=chosen[0], watermark_mb=chosen[1])
    t, w = chosen
    e = evaluate(**p, idle_ms=t, watermark_mb=w)
    return dict(out, feasible=e["compliance"] >= target, idle_ms=t, watermark_mb=w,
                compliance=round(e["compliance"], 6), alpha=round(e["alpha"], 4), L_ms=round(e["L_ms"], 3),
                per_model_rate=round(e["per_model_rate"], 4), utilisation=round(e["utilisation"], 4),
                cold_start_share=round(e["cold_start_share"], 4), inference_mem_mb=round(e["inference_mem_mb"], 1))


def simulate(rate, service_ms, load_ms, model_mb, models, slo_ms, idle_ms, watermark_mb, adjust_ms=0.0,
             timer="exponential", requests=200000, seed=1):
    """A discrete-event simulation of the same queue (one model's: Poisson arrivals, FIFO,
    exponential service and cold starts, a cold start with probability alpha after a release):
    the share of requests answered within the SLO. The model is released an exponential time of
    mean T_idle after its queue emptied (SIRIUS's model), or with timer "fixed" exactly T_idle
    after (a server's timer)."""
    rng = random.Random(seed)
    alpha = alpha_of(watermark_mb, model_mb * models)
    lam, mean_s, load_s = rate / models, service_ms / 1e3, (load_ms + adjust_ms * alpha) / 1e3
    idle_s, slo_s = idle_ms / 1e3, slo_ms / 1e3
    t, server_free, loaded, within = 0.0, 0.0, True, 0
    for i in range(requests):
        t += rng.expovariate(lam)
        if t >= server_free and loaded:  # the queue emptied at server_free; was the model released since?
            left = idle_s if timer == "fixed" else rng.expovariate(1 / idle_s) if idle_s > 0 else 0.0
            loaded = t - server_free < left
        start = max(t, server_free)
        if not loaded:  # released: reserved (no load) or a cold start
            if rng.random() < alpha:
                start += rng.expovariate(1 / load_s)
            loaded = True
        server_free = start + rng.expovariate(1 / mean_s)
        within += server_free - t <= slo_s
    return within / requests


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, required=True, help="requests per second, all models together")
    ap.add_argument("--service-ms", type=float, required=True, help="mean time to answer a request of a loaded model")
    ap.add_argument("--load-ms", type=float, required=True,
                    help="a cold start's extra latency (the model's load, less what pipelining overlaps)")
    ap.add_argument("--adjust-ms", type=float, default=0.0,
                    help="training's memory adjustment time, paid by a cold start not covered by W (default 0)")
    ap.add_argument("--model-mb", type=float, required=True, help="one model's size (MiB)")
    ap.add_argument("--models", type=int, default=1, help="number of models, requested uniformly (default 1)")
    ap.add_argument("--slo-ms", type=float, required=True, help="latency target")
    ap.add_argument("--target", type=float, default=0.99, help="share of requests within the SLO (default 0.99)")
    ap.add_argument("--idle-ms", type=float, help="fix T_idle and search only W")
    ap.add_argument("--watermark-mb", type=float, help="fix W and search only T_idle")
    ap.add_argument("--w-step-mb", type=float, default=32, help="W's grid (default 32: tandem's chunk)")
    ap.add_argument("--timer", choices=("exponential", "fixed"), default="exponential",
                    help="T_idle as SIRIUS models it (an exponential time, default) or as a server's timer of exactly "
                         "T_idle (the release rate matched to it)")
    a = ap.parse_args()
    if (a.rate <= 0 or a.service_ms <= 0 or a.load_ms < 0 or a.adjust_ms < 0 or a.model_mb <= 0 or a.models < 1
            or a.slo_ms <= 0 or not 0 < a.target < 1 or a.w_step_mb <= 0):
        ap.error("--rate, --service-ms, --model-mb, --slo-ms, --w-step-mb > 0; --load-ms, --adjust-ms >= 0; "
                 "--models >= 1; 0 < --target < 1")
    if a.rate / a.models >= 1e3 / a.service_ms:
        ap.error("each model's arrival rate must be below its service rate (1000 / --service-ms)")
    whole = lambda v: int(v) if v is not None and float(v).is_integer() else v
    r = search(a.rate, a.service_ms, a.load_ms, a.model_mb, a.models, a.slo_ms, a.target, a.adjust_ms,
               whole(a.idle_ms), whole(a.watermark_mb), a.w_step_mb, timer=a.timer)
    print(json.dumps(r))
    return 0 if r["feasible"] else 2


if __name__ == "__main__":
    sys.exit(main())
