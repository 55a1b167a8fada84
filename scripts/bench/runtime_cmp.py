#!/usr/bin/env python3
"""Driver of scripts/bench/runtime.sh: per model and thread count, ROUNDS alternating runs of
unity-train and of torch_models.py (each STEPS steps, step 1 untimed on both sides); prints the
ms/step of each side (min and median over the rounds), the ratio ours/PyTorch (of the mins and
of the medians), each process's peak resident memory (max over the rounds, from wait4) and the
OpenBLAS kernel each side ran (ours: unity-train's `blas:` line; PyTorch: openblas_get_corename),
and the CPU time per step (user + system, all threads; median over the rounds) of steps 2..STEPS
with its ratio: ours from wait4 of a STEPS-step run minus a 1-step run, PyTorch's from
time.process_time() around its timed steps. On a loaded machine the CPU time is the steadier
measure (wall time includes the time a process waited for a core). The data are outside the
timed step on both sides: torch_models.py makes its batch once before its loop, unity-train
makes each step's batch (and writes it to the backend) before it starts the step's clock; the
CPU time of ours still includes making the batches (about 1.5 ms a step for the mid transformer).

  runtime_cmp.py BUILD_DIR GRAPH_DIR THREADS... (env ROUNDS, STEPS)"""
import os
import re
import statistics
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))


def run_rss(cmd, env):
    """(stdout, peak resident memory in MiB, CPU seconds) of one run of cmd; exits on failure."""
    rfd, wfd = os.pipe()
    err_file = tempfile.TemporaryFile(mode="w+")
    pid = os.fork()
    if pid == 0:
        os.dup2(wfd, 1)
        os.dup2(err_file.fileno(), 2)
        os.close(rfd)
        try:
            os.execvpe(cmd[0], cmd, env)
        finally:
            os._exit(127)
    os.close(wfd)
    with os.fdopen(rfd) as f:
        out = f.read()
    _, status, ru = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    err_file.seek(0)
    err = err_file.read()
    if code != 0:
        sys.exit(f"runtime_cmp.py: {' '.join(cmd)} failed ({code}): {err.strip()[-400:]}")
    return out, ru.ru_maxrss / 1024.0, ru.ru_utime + ru.ru_stime


def main():
    build, graphs, threads = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3:]]
    rounds, steps = int(os.environ.get("ROUNDS", "3")), int(os.environ.get("STEPS", "6"))
    train = os.path.join(build, "bin", "unity-train")
    models = [  # (label, unity-train model args, torch_models.py name)
        ("mlp mid (29M params, batch 64)",
         ["--model", os.path.join(graphs, "mlp_mid.json"), "--loss", "ce"], "mlp_mid"),
        ("transformer mid (4x256, seq 128, b 8)",
         ["--model", os.path.join(graphs, "transformer_mid.json"), "--loss", "mse"],
         "transformer_mid"),
        ("charlm full (T 64, D 128, b 32)", ["--model", "charlm"], "charlm"),
    ]
    print(f"{'model':<38} {'thr':>3} {'ours ms min/med':>17} {'torch ms min/med':>17} "
          f"{'ratio min/med':>14}  {'CPU ms med o/t':>15} {'ratio':>5}  "
          f"{'RSS MiB ours/torch':>19}  kernel ours/torch")
    for th in threads:
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(th), OMP_NUM_THREADS=str(th))
        for label, args, tname in models:
            ours, torch, rss_o, rss_t, k_o, k_t = [], [], 0.0, 0.0, set(), set()
            cpu_o, cpu_t = [], []
            for _ in range(rounds):
                base = [train] + args + ["--threads", str(th), "--optimizer", "adam"]
                _, _, cpu1 = run_rss(base + ["--steps", "1"], env)  # start-up and step 1
                out, rss, cpu = run_rss(base + ["--steps", str(steps)], env)
                cpu_o.append(1e3 * (cpu - cpu1) / max(steps - 1, 1))
                m = re.search(r"([0-9.]+) ms/step", out)
                if not m:
                    sys.exit(f"runtime_cmp.py: no ms/step in unity-train's output:\n{out}")
                ours.append(float(m.group(1)))
                rss_o = max(rss_o, rss)
                k = re.search(r"^blas: OpenBLAS \S+ kernel (\S+)", out, re.M)
                k_o.add(k.group(1) if k else "?")
                out, rss, _ = run_rss(["/usr/bin/python3", os.path.join(here, "torch_models.py"),
                                       tname, str(th), str(steps)], env)
                torch.append(float(out.split()[0]))
                k_t.add(out.split()[2] if len(out.split()) > 2 else "?")
                cpu_t.append(float(out.split()[3]))
                rss_t = max(rss_t, rss)
            mo, mt = min(ours), min(torch)
            do, dt = statistics.median(ours), statistics.median(torch)
            co, ct = statistics.median(cpu_o), statistics.median(cpu_t)
            print(f"{label:<38} {th:>3} {mo:8.1f}/{do:<8.1f} {mt:8.1f}/{dt:<8.1f} "
                  f"{mo / mt:6.2f}/{do / dt:<6.2f}  {co:7.1f}/{ct:<7.1f} {co / ct:5.2f}  "
                  f"{rss_o:8.0f}/{rss_t:<8.0f}  "
                  f"{','.join(sorted(k_o))}/{','.join(sorted(k_t))}", flush=True)


if __name__ == "__main__":
    main()
