#!/usr/bin/env python3
"""Per-op profile of one training step, ours against PyTorch's (issue 16), on 1 thread:
where the time of a step goes, by kind of work, so that a gap can be attributed.

Ours: `perf record` (1000 Hz, CPU time) of unity-train for N1 and for N2 steps; the difference
of each symbol's samples over N2 - N1 steps is its ms per step (start-up cancels out).
PyTorch: torch.autograd.profiler over N2 - N1 steps after N1 warm-up steps; each aten op's self
time per step, the optimizer as the whole Optimizer.step, 'framework' its step time not inside
any op; the profiler's wall-clock times scaled by the process's CPU time / wall time over those
steps (1 on an idle machine; under load a fair share). Profiler overhead is included, so
PyTorch's column is an upper bound.
Both sides are grouped into the same kinds (GEMM incl. OpenBLAS packing and beta passes, gelu,
layer_norm, softmax/attention glue, element-wise, loss, optimizer, zeroing/memset, copies, ...).

  runtime_prof.py BUILD_DIR GRAPH_DIR [MODEL...]   (MODEL: transformer_mid charlm mlp_mid;
                                                    env N1 (2), N2 (8))"""
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

here = os.path.dirname(os.path.abspath(__file__))

# (kind, regex on our symbol names); first match wins
OURS = [
    ("gemm", r"gemm|GEMM"),
    ("gelu", r"gelu|act_body|act_grad_body|^mul_f32"),
    ("layer_norm", r"row_sum|ln_|layer_norm|moments"),
    ("softmax/attention", r"softmax|mha_"),
    ("element-wise", r"ew_|add_scaled"),
    ("loss", r"ce_loss|ce_grad|exp_row|loss"),
    ("optimizer", r"adam|optim"),
    ("zeroing/memset", r"memset"),
    ("copies", r"memmove|memcpy|copy_region|region_copy"),
    ("stash fingerprint", r"fingerprint|call_sig"),
    ("embedding", r"embedding"),
]
TORCH = [
    ("gemm", r"^aten::(mm|bmm|addmm|baddbmm|matmul|linear)$"),
    ("gelu", r"gelu"),
    ("layer_norm", r"layer_norm"),
    ("loss", r"cross_entropy|nll_loss|log_softmax|mse_loss"),
    ("softmax/attention", r"softmax|attention|_mha|masked_fill"),
    ("element-wise", r"^aten::(add|add_|mul|mul_|sub|div|div_|where)$"),
    ("zeroing/memset", r"zero_|fill_|zeros"),
    ("copies", r"copy_|contiguous|clone|cat|transpose|permute|t$|view|reshape|expand|as_strided"),
    ("embedding", r"embedding"),
]
KINDS = [k for k, _ in OURS] + ["kernel (OS)", "other", "framework"]


def kind_of(table, name):
    for k, rx in table:
        if re.search(rx, name):
            return k
    return "other"


def perf_samples(cmd, env):
    """{(dso, symbol): samples} of one perf record of cmd, or None if perf cannot run."""
    with tempfile.NamedTemporaryFile(suffix=".data") as f:
        r = subprocess.run(["perf", "record", "-F", "1000", "-o", f.name, "--"] + cmd, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.stderr.write(f"runtime_prof.py: perf record failed: {r.stderr.strip()[-300:]}\n")
            return None
        rep = subprocess.run(["perf", "report", "-i", f.name, "--no-children", "--sort",
                              "dso,symbol", "-g", "none", "-F", "sample,dso,symbol", "--stdio"],
                             capture_output=True, text=True)
    out = {}
    for line in rep.stdout.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split()
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        out[(parts[1], " ".join(parts[3:]))] = int(parts[0]) + out.get((parts[1], " ".join(parts[3:])), 0)
    return out


def ours_profile(train, args, n1, n2, env):
    runs = []
    for n in (n1, n2):
        s = perf_samples([train] + args + ["--steps", str(n), "--threads", "1", "--optimizer",
                                           "adam", "--quiet"], env)
        if s is None:
            return None
        runs.append(s)
    per = defaultdict(float)
    for key in set(runs[0]) | set(runs[1]):
        d = (runs[1].get(key, 0) - runs[0].get(key, 0)) / (n2 - n1)  # ms per step at 1000 Hz
        dso, sym = key
        per["kernel (OS)" if dso.startswith("[kernel") else kind_of(OURS, sym)] += d
    return per


def torch_profile(model, n1, n2, env):
    code = f"""
import sys, torch
sys.path.insert(0, {here!r})
import torch_models as tm
torch.manual_seed(0); torch.set_num_threads(1)
m, loss = tm.build({model!r}); opt = torch.optim.Adam(m.parameters(), lr=1e-3)
def step():
    opt.zero_grad(); l = loss(); l.backward(); opt.step()
for _ in range({n1}): step()
import time
with torch.autograd.profiler.profile() as prof:
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range({n2 - n1}): step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
def under_opt(e):
    while e is not None:
        if e.name.startswith("Optimizer.step"): return True
        e = e.cpu_parent
    return False
for e in prof.function_events:
    if e.name.startswith("Optimizer.step"):
        print("OPT", e.cpu_time_total)
    elif not under_opt(e):
        print("OP", e.self_cpu_time_total, e.name)
print("WALL", wall * 1e6)
print("CPU", cpu * 1e6)
"""
    r = subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(f"runtime_prof.py: PyTorch profile failed: {r.stderr.strip()[-300:]}\n")
        return None
    per, n, inside, wall, cpu = defaultdict(float), n2 - n1, 0.0, 0.0, 0.0
    for line in r.stdout.splitlines():
        f = line.split(None, 2)
        if f[0] == "OPT":
            per["optimizer"] += float(f[1]) / 1e3 / n
            inside += float(f[1])
        elif f[0] == "OP":
            per[kind_of(TORCH, f[2])] += float(f[1]) / 1e3 / n
            inside += float(f[1])
        elif f[0] == "WALL":
            wall = float(f[1])
            per["framework"] += max(wall - inside, 0) / 1e3 / n
        elif f[0] == "CPU":
            cpu = float(f[1])
    # the profiler's times are wall clock: on a loaded machine they include the time the process
    # waited for a core, so scale them to the process's CPU time (x1 when it had a core)
    f = min(cpu / wall, 1.0) if wall > 0 else 1.0
    return {k: v * f for k, v in per.items()}


def main():
    build, graphs = sys.argv[1], sys.argv[2]
    models = sys.argv[3:] or ["transformer_mid", "charlm"]
    n1, n2 = int(os.environ.get("N1", "2")), int(os.environ.get("N2", "8"))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    train = os.path.join(build, "bin", "unity-train")
    args = {"transformer_mid": ["--model", os.path.join(graphs, "transformer_mid.json"),
                                "--loss", "mse"],
            "mlp_mid": ["--model", os.path.join(graphs, "mlp_mid.json"), "--loss", "ce"],
            "charlm": ["--model", "charlm"]}
    for model in models:
        if model not in args:
            sys.exit(f"runtime_prof.py: unknown model '{model}' (transformer_mid, charlm, mlp_mid)")
        o = ours_profile(train, args[model], n1, n2, env)
        t = torch_profile(model, n1, n2, env)
        print(f"\n{model}: ms per step on 1 thread (ours: perf samples, steps {n1 + 1}-{n2}; "
              f"PyTorch: autograd profiler, self time scaled to its CPU time)")
        print(f"{'kind':<20} {'ours':>9} {'PyTorch':>9}")
        for k in KINDS:
            a = f"{o.get(k, 0):9.1f}" if o is not None else f"{'-':>9}"
            b = f"{t.get(k, 0):9.1f}" if t is not None else f"{'-':>9}"
            if (o and abs(o.get(k, 0)) >= 0.05) or (t and abs(t.get(k, 0)) >= 0.05):
                print(f"{k:<20} {a} {b}")
        print(f"{'total':<20} {sum(o.values()) if o else 0:9.1f} "
              f"{sum(t.values()) if t else 0:9.1f}", flush=True)


if __name__ == "__main__":
    main()
