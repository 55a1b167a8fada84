#!/usr/bin/env python3
"""The models of scripts/bench/runtime.sh in PyTorch, as the zoo builds them (runtime/zoo.c) and
as scripts/bench/mid_graphs.py writes the mid sizes: same layers, widths, biases (none), losses.

  torch_models.py MODEL THREADS STEPS [DEVICE]
      -> one line "ms_per_step LOSS0 KERNEL cpu_ms_per_step"
KERNEL: the OpenBLAS core type PyTorch's matrix products ran (openblas_get_corename of the
libopenblas.so.0 PyTorch loaded); cpu_ms_per_step: the process's CPU time (user + system, all
threads) over the timed steps.
MODEL: mlp_mid | transformer_mid | charlm | mlp_gpu | transformer_gpu. Adam (lr 1e-3), random
data; step 1 is warm-up and not timed (unity-train leaves it out too). DEVICE: cpu (default) or cuda
(eager mode, float32 without TF32, as unity-train's default; the clock stops after a synchronize)."""
import ctypes
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mid_graphs import CHARLM, GPU_MLP, GPU_TF, MID_MLP, MID_TF  # noqa: E402


class Mlp(nn.Module):  # zoo mlp: two towers of linear (relu, last none), no bias, added
    def __init__(s, c):
        super().__init__()
        def tower():
            mods, d = [], c["inp"]
            for i in range(c["layers"]):
                mods.append(nn.Linear(d, c["width"], bias=False))
                if i + 1 < c["layers"]:
                    mods.append(nn.ReLU())
                d = c["width"]
            return nn.Sequential(*mods)
        s.t1, s.t2 = tower(), tower()

    def forward(s, x1, x2):
        return s.t1(x1) + s.t2(x2)


class PostLN(nn.Module):  # zoo transformer layer: x = ln(x + mha(x)); x = ln(x + W2 gelu(W1 x))
    def __init__(s, h, heads, f):
        super().__init__()
        s.att = nn.MultiheadAttention(h, heads, bias=False, batch_first=True)
        s.ln1, s.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        s.f1, s.f2 = nn.Linear(h, f, bias=False), nn.Linear(f, h, bias=False)

    def forward(s, x):
        x = s.ln1(x + s.att(x, x, x, need_weights=False)[0])
        return s.ln2(x + s.f2(F.gelu(s.f1(x))))


class PreLN(nn.Module):  # zoo charlm block: x += mha(ln(x)) causal; x += W2 gelu(W1 ln(x))
    def __init__(s, d, heads, f, seq):
        super().__init__()
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.att = nn.MultiheadAttention(d, heads, bias=False, batch_first=True)
        s.f1, s.f2 = nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)
        s.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(s, x):
        h = s.ln1(x)
        x = x + s.att(h, h, h, attn_mask=s.mask, need_weights=False)[0]
        return x + s.f2(F.gelu(s.f1(s.ln2(x))))


class CharLM(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c = c
        s.emb = nn.Embedding(c["vocab"], c["dim"])
        s.blocks = nn.Sequential(*[PreLN(c["dim"], c["heads"], c["ffn"], c["seq"])
                                   for _ in range(c["blocks"])])
        s.ln_f = nn.LayerNorm(c["dim"])
        s.out = nn.Linear(c["dim"], c["vocab"], bias=False)

    def forward(s, tok):
        x = s.emb(tok).view(s.c["batch"], s.c["seq"], s.c["dim"])
        x = s.ln_f(s.blocks(x)).view(-1, s.c["dim"])
        return s.out(x)


def build(name):
    if name in ("mlp_mid", "mlp_gpu"):
        c = MID_MLP if name == "mlp_mid" else GPU_MLP
        m = Mlp(c)
        x1, x2 = torch.randn(c["batch"], c["inp"]), torch.randn(c["batch"], c["inp"])
        y = torch.randint(0, c["width"], (c["batch"],))
        return m, lambda: F.cross_entropy(m(x1, x2), y)
    if name in ("transformer_mid", "transformer_gpu"):
        c = MID_TF if name == "transformer_mid" else GPU_TF
        m = nn.Sequential(*[PostLN(c["hidden"], c["heads"], c["ffn"]) for _ in range(c["layers"])],
                          nn.Linear(c["hidden"], 1, bias=False))
        x = torch.randn(c["batch"], c["seq"], c["hidden"])
        y = torch.randn(c["batch"], c["seq"], 1)
        return m, lambda: F.mse_loss(m(x), y)
    if name == "charlm":
        c = CHARLM
        m = CharLM(c)
        tok = torch.randint(0, c["vocab"], (c["batch"] * c["seq"],))
        y = torch.randint(0, c["vocab"], (c["batch"] * c["seq"],))
        return m, lambda: F.cross_entropy(m(tok), y)
    sys.exit(f"torch_models.py: unknown model '{name}' (mlp_mid, transformer_mid, charlm, mlp_gpu, "
             "transformer_gpu)")


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit("usage: torch_models.py MODEL THREADS STEPS [cpu|cuda]")
    name, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dev = sys.argv[4] if len(sys.argv) == 5 else "cpu"
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with torch.device(dev):
        m, loss = build(name)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    t0, c0, l0 = 0.0, 0.0, None
    for i in range(steps):
        if i == 1:
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        l = loss()
        l.backward()
        opt.step()
        if l0 is None:
            l0 = l.item()
    sync()
    try:
        blas = ctypes.CDLL("libopenblas.so.0")
        blas.openblas_get_corename.restype = ctypes.c_char_p
        kernel = blas.openblas_get_corename().decode()
    except (OSError, AttributeError):
        kernel = "not-OpenBLAS"
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = max(steps - 1, 1)
    print(f"{1e3 * wall / n:.3f} {l0:.6f} {kernel} {1e3 * cpu / n:.3f}")


if __name__ == "__main__":
    main()
