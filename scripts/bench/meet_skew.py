#!/usr/bin/env python3
"""Which rank a meet waits for, and what each rank ran before it (issue 13).

  UN_MEET_TRACE=/tmp/t unity-train --model mlp --tiny --strategy data --devices 2 --threads 2 ...
  scripts/bench/meet_skew.py /tmp/t [RANKS]

Reads PREFIX.0 .. PREFIX.(RANKS-1) (runtime/train.c write_trace: "SECONDS WHAT" a line; the
ranks of a local group share one clock) and prints, per meet of a step (the k-th meet of every
rank is the same call on every rank: the data strategy's meets are all of the group), the median
and mean of the skew (the last arrival minus the first), which rank arrives last how often, and
how long after the last arrival each rank is released (the wake-up); then per rank the mean time
per step in each phase (the label train.c marked last), its meets apart."""
import statistics
import sys


def load(path):
    ev = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                sys.exit(f"{path}: {line.strip()[2:]}: rerun with fewer steps")
            t, what = line.split()
            ev.append((float(t), what))
    return ev


def steps_of(ev):
    """[(meets: [(arrive, release, phase)], phase seconds {label: s})] per step ("batch" opens one)"""
    out = []
    phase, t_prev, arrive, cur = None, None, None, None
    for t, what in ev:
        if t_prev is not None and cur is not None:
            key = "in meets" if arrive is not None else phase
            cur[1][key] = cur[1].get(key, 0.0) + t - t_prev
        t_prev = t
        if what == "arrive":
            arrive = t
        elif what == "release":
            cur[0].append((arrive, t, phase))
            arrive = None
        elif what == "batch":
            cur = ([], {})
            out.append(cur)
            phase = what
        elif what != "end":
            phase = what
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: meet_skew.py PREFIX [RANKS]")
    prefix, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    ranks = [steps_of(load(f"{prefix}.{r}")) for r in range(n)]
    n_steps = min(len(s) for s in ranks)
    n_meets = min(len(ranks[r][i][0]) for r in range(n) for i in range(n_steps))
    print(f"{n} ranks, {n_steps} steps, {n_meets} meets a step (times in us)")
    print("meet  phase         skew_med  skew_mean  " +
          "  ".join(f"last_r{r}" for r in range(n)) + "  " +
          "  ".join(f"wake_r{r}" for r in range(n)) + "  " +
          "  ".join(f"wmean_r{r}" for r in range(n)))
    for k in range(n_meets):
        skew, wake, last = [], [[] for _ in range(n)], [0] * n
        for i in range(n_steps):
            a = [ranks[r][i][0][k][0] for r in range(n)]
            rel = [ranks[r][i][0][k][1] for r in range(n)]
            skew.append(1e6 * (max(a) - min(a)))
            last[a.index(max(a))] += 1
            for r in range(n):
                wake[r].append(1e6 * (rel[r] - max(a)))
        phase = ranks[0][0][0][k][2]
        print(f"{k:4d}  {phase:12s} {statistics.median(skew):9.1f} {statistics.mean(skew):10.1f}  " +
              "  ".join(f"{100 * last[r] / n_steps:6.0f}%" for r in range(n)) + "  " +
              "  ".join(f"{statistics.median(wake[r]):7.1f}" for r in range(n)) + "  " +
              "  ".join(f"{statistics.mean(wake[r]):8.1f}" for r in range(n)))
    labels = []
    for r in range(n):
        for i in range(n_steps):
            for key in ranks[r][i][1]:
                if key not in labels:
                    labels.append(key)
    print("rank  " + "  ".join(f"{x:>9s}" for x in labels) + "  step_mean  step_med  meets_med")
    for r in range(n):
        tot = {x: sum(s[1].get(x, 0.0) for s in ranks[r][:n_steps]) / n_steps for x in labels}
        med = statistics.median(sum(s[1].values()) for s in ranks[r][:n_steps])
        mmed = statistics.median(s[1].get("in meets", 0.0) for s in ranks[r][:n_steps])
        print(f"{r:4d}  " + "  ".join(f"{1e6 * tot[x]:9.1f}" for x in labels) +
              f"  {1e6 * sum(tot.values()):9.1f}  {1e6 * med:8.1f}  {1e6 * mmed:9.1f}")


if __name__ == "__main__":
    main()
