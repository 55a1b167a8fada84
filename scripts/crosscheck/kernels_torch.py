#!/usr/bin/python3
"""Cross-checks the reference evaluator's float64 kernels (pcg/kernels.c) against PyTorch.

For every regular operator of specs/ops.json, every entry of its "examples" and a set of extra
parameter variants, this builds a one-op graph, evaluates it with
`unity-pcg eval GRAPH --dump --domain f64`, recomputes the op in PyTorch float64 from the dumped
inputs with torch's own functions and compares (|ours - torch| <= RTOL * |torch| + ATOL).

Conventions of ours that differ from PyTorch's API (adapted on the torch side, not bugs):
  linear                W is [in, out] (y = x W); torch.nn.functional.linear takes W^T.
  multihead_attention   Q = q Wq, K = k Wk, V = v Wv, out = concat_h(...) Wo, all weights [e, e]
                        applied on the right; torch's in_proj_weight = cat(Wq^T, Wk^T, Wv^T) and
                        out_proj_weight = Wo^T; no biases; batch first.
  dropout               inverted dropout with a hashed (seed, flat index) mask; rate is a percent.
                        Checked structurally: every output is 0 or x * 100 / (100 - rate), the kept
                        fraction is plausible, and rate 0 is the identity bit for bit.
  scalar_mul            y = x * num / den.
  embedding             one bag per row of indices [b, bag] (torch embedding_bag with 2-D input).
  cross_entropy         per-sample loss (reduction='none').

Needs PyTorch (Debian: apt-get install python3-torch; run with /usr/bin/python3). Run from the
repository root after `make`:

    /usr/bin/python3 scripts/crosscheck/kernels_torch.py [--bin PATH] [--seeds N] [-v]

Prints one line per case and `N cases, M mismatches`; exits 1 on any mismatch.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("kernels_torch.py: PyTorch is not importable; install python3-torch and run with "
             "/usr/bin/python3")

RTOL = 1e-9
ATOL = 1e-12
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

torch.set_default_dtype(torch.float64)

# ---- cases ---------------------------------------------------------------------------------------
# A case is (op, params, inputs[, pre]). An input is a dims list (float) or
# {"dims": [...], "dtype": "int", "range": N}. Float inputs are uniform in [-1, 1); `pre` makes
# input 0 by a small graph in front of the op (see build_pre): an integer scales it (large
# magnitudes), a string like "f3,inf1,nan1" mixes in non-finite values along the last dim.


def I(dims, rng):
    return {"dims": dims, "dtype": "int", "range": rng}


ACTS = ["none", "relu", "sigmoid", "tanh", "gelu"]

EXTRA = []
# linear: every activation, with and without bias, rank 2 and 3 inputs
for act in ACTS:
    EXTRA.append(("linear", {"activation": act}, [[5, 7], [7, 3]]))
    EXTRA.append(("linear", {"activation": act, "use_bias": True}, [[2, 3, 7], [7, 4], [4]]))
EXTRA += [
    ("linear", {"activation": "gelu", "use_bias": True}, [[4, 6], [6, 5], [5]], 4),
    ("batch_matmul", {}, [[2, 3, 4, 5], [2, 3, 5, 2]]),
    ("batch_matmul", {}, [[1, 7], [7, 1]]),
    ("ew_add", {}, [[7], [7]]),
    ("ew_sub", {}, [[2, 3, 2, 2], [2, 3, 2, 2]]),
    ("ew_mul", {}, [[9], [9]]),
    ("scalar_mul", {"num": 0}, [[3, 4]]),
    ("scalar_mul", {"num": 7, "den": 3}, [[2, 5]]),
    ("scalar_mul", {"num": -1000000, "den": 999999}, [[6]]),
    ("relu", {}, [[17]]),
    ("gelu", {}, [[2, 2, 2, 3]]),
    ("gelu", {}, [[40]], 8),
    ("sigmoid", {}, [[40]], 1000),
    ("tanh", {}, [[40]], 50),
    ("identity", {}, [[2, 1, 3]]),
    ("softmax", {"dim": 0}, [[5, 3]]),
    ("softmax", {"dim": -2}, [[2, 5, 3]]),
    ("softmax", {"dim": 2}, [[2, 3, 4, 2]]),
    ("softmax", {}, [[9]]),
    ("softmax", {}, [[3, 8]], 1000),
    ("layer_norm", {}, [[5, 6], [6], [6]]),
    ("layer_norm", {}, [[7], [7], [7]]),
    ("layer_norm", {}, [[2, 2, 3, 5], [5], [5]], 100),
    ("batch_norm", {}, [[4, 3, 5, 2], [3], [3]]),
    ("batch_norm", {}, [[3, 2, 1, 1], [2], [2]]),
    ("batch_norm", {}, [[2, 5, 4, 4], [5], [5]], 100),
    ("dropout", {"rate_pct": 0}, [[4, 6, 8]]),
    ("dropout", {"rate_pct": 0, "seed": 3}, [[5, 7]]),
    ("dropout", {"rate_pct": 10}, [[64, 64]]),
    ("dropout", {"rate_pct": 50, "seed": 12345}, [[32, 8, 16]]),
    ("dropout", {"rate_pct": 99, "seed": 1}, [[100, 100]]),
    ("dropout", {"rate_pct": 1, "seed": 9}, [[100, 100]]),
    ("conv2d", {"stride_h": 2, "stride_w": 1}, [[2, 3, 7, 6], [4, 3, 3, 2]]),
    ("conv2d", {"pad_h": 0, "pad_w": 2}, [[1, 2, 4, 4], [3, 2, 2, 3]]),
    ("conv2d", {"groups": 4}, [[2, 4, 5, 5], [8, 1, 3, 3]]),
    ("conv2d", {"groups": 3, "use_bias": True, "pad_h": 1, "pad_w": 1}, [[1, 6, 4, 4], [6, 2, 3, 3], [6]]),
    ("conv2d", {"use_bias": True}, [[2, 3, 4, 4], [5, 3, 1, 1], [5]]),
    ("conv2d", {"activation": "relu"}, [[2, 3, 5, 5], [4, 3, 2, 2]]),
    ("conv2d", {"stride_h": 3, "stride_w": 2, "pad_h": 2, "pad_w": 1, "activation": "relu",
                "use_bias": True}, [[2, 2, 8, 7], [3, 2, 3, 4], [3]]),
    ("pool2d", {"type": "max", "kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2,
                "pad_h": 1, "pad_w": 1}, [[2, 3, 7, 6]]),
    ("pool2d", {"type": "max", "kernel_h": 2, "kernel_w": 2, "stride_h": 1, "stride_w": 1,
                "pad_h": 1, "pad_w": 1}, [[1, 2, 4, 4]]),
    ("pool2d", {"type": "max", "kernel_h": 1, "kernel_w": 1, "stride_h": 1, "stride_w": 1},
     [[2, 2, 3, 3]]),
    ("pool2d", {"type": "avg"}, [[2, 3, 6, 6]]),
    ("pool2d", {"type": "avg", "kernel_h": 3, "kernel_w": 2, "stride_h": 2, "stride_w": 3},
     [[1, 2, 8, 9]]),
    ("pool2d", {"type": "avg", "kernel_h": 2, "kernel_w": 3, "stride_h": 2, "stride_w": 2,
                "pad_h": 1, "pad_w": 1}, [[2, 2, 5, 6]]),
    ("pool2d", {"type": "avg", "kernel_h": 4, "kernel_w": 4, "stride_h": 3, "stride_w": 3,
                "pad_h": 2, "pad_w": 2}, [[1, 1, 7, 7]]),
    ("concat", {"axis": 2}, [[2, 3, 4], [2, 3, 1]]),
    ("concat", {"axis": 0}, [[1, 2, 3], [4, 2, 3]]),
    ("split", {"axis": 0, "sizes": [5]}, [[5, 2]]),
    ("split", {"axis": 2, "sizes": [1, 1, 2, 2]}, [[2, 3, 6]]),
    ("transpose", {"dim0": 0, "dim1": 3}, [[2, 3, 4, 5]]),
    ("transpose", {"dim0": 3, "dim1": 1}, [[2, 3, 4, 5]]),
    ("transpose", {"dim0": 1, "dim1": 1}, [[2, 3]]),
    ("reshape", {"shape": [48]}, [[4, 3, 4]]),
    ("reshape", {"shape": [2, 2, 2, 3]}, [[4, 6]]),
    ("flat", {}, [[3, 4, 5]]),
    ("flat", {}, [[2, 1, 3, 2, 2]]),
    ("embedding", {"aggr": "sum"}, [I([5, 1], 7), [7, 3]]),
    ("embedding", {"aggr": "mean"}, [I([3, 5], 4), [4, 6]]),
    ("embedding", {"aggr": "sum"}, [I([6, 4], 100), [100, 5]]),
    ("multihead_attention", {"heads": 1}, [[2, 3, 4], [2, 5, 4], [2, 5, 4]] + [[4, 4]] * 4),
    ("multihead_attention", {"heads": 2}, [[3, 4, 6], [3, 2, 6], [3, 2, 6]] + [[6, 6]] * 4),
    ("multihead_attention", {"heads": 3}, [[1, 5, 6], [1, 5, 6], [1, 5, 6]] + [[6, 6]] * 4),
    ("multihead_attention", {"heads": 8}, [[2, 3, 8], [2, 4, 8], [2, 4, 8]] + [[8, 8]] * 4),
    ("multihead_attention", {"heads": 3, "causal": True}, [[2, 5, 6]] * 3 + [[6, 6]] * 4),
    ("multihead_attention", {"heads": 4}, [[2, 3, 8], [2, 4, 8], [2, 4, 8]] + [[8, 8]] * 4, 10),
    ("reduce_sum", {"dim": -1, "keep": True}, [[3, 5]]),
    ("reduce_sum", {"dim": 0, "keep": True}, [[3, 5, 2]]),
    ("reduce_sum", {"dim": 2}, [[2, 3, 4]]),
    ("reduce_sum", {"dim": -3}, [[2, 3, 4]]),
    ("reduce_mean", {"dim": -1, "keep": True}, [[3, 5]]),
    ("reduce_mean", {"dim": 0, "keep": True}, [[3, 5, 2]]),
    ("reduce_mean", {"dim": 2}, [[2, 3, 4]]),
    ("reduce_mean", {"dim": -2}, [[2, 3, 4]]),
    ("cross_entropy", {}, [[8, 10], I([8], 10)]),
    ("cross_entropy", {}, [[3, 1], I([3], 1)]),
    ("cross_entropy", {}, [[5, 4], I([5], 4)], 1000),
    # edge cases: rank-0 results, size-1 dims, zero variance, global windows, one key
    ("reduce_sum", {"dim": 0}, [[5]]),
    ("reduce_mean", {"dim": -1}, [[5]]),
    ("reduce_mean", {"dim": 0, "keep": True}, [[5]]),
    ("softmax", {"dim": 1}, [[4, 1, 3]]),
    ("layer_norm", {}, [[3, 1], [1], [1]]),
    ("conv2d", {}, [[2, 3, 3, 4], [2, 3, 3, 4]]),
    ("pool2d", {"type": "max", "kernel_h": 4, "kernel_w": 3, "stride_h": 1, "stride_w": 1},
     [[2, 2, 4, 3]]),
    ("pool2d", {"type": "avg", "kernel_h": 4, "kernel_w": 3, "stride_h": 4, "stride_w": 3},
     [[2, 2, 4, 3]]),
    ("multihead_attention", {"heads": 2}, [[2, 3, 4], [2, 1, 4], [2, 1, 4]] + [[4, 4]] * 4),
    ("embedding", {"aggr": "mean"}, [I([2, 3], 1), [1, 4]]),
]

# Non-finite inputs: standard kernels propagate inf and NaN (what overflow checks such as dynamic
# loss scaling rely on) and never turn them into finite values.
NONFINITE = [
    ("relu", {}, [[3, 5]], "f3,inf1,nan1"),
    ("linear", {"activation": "relu"}, [[3, 5], [5, 2]], "f4,nan1"),
    ("linear", {"activation": "relu", "use_bias": True}, [[4, 3], [3, 2], [2]], "f2,inf1"),
    ("conv2d", {"activation": "relu"}, [[1, 2, 4, 5], [2, 2, 2, 2]], "f4,nan1"),
    ("sigmoid", {}, [[3, 6]], "f3,inf2,nan1"),
    ("tanh", {}, [[3, 6]], "f3,inf2,nan1"),
    ("gelu", {}, [[3, 6]], "f3,inf2,nan1"),
    ("softmax", {}, [[3, 6]], "f4,inf2"),
    ("softmax", {}, [[3, 5]], "f4,nan1"),
    ("softmax", {"dim": 0}, [[4, 6]], "f5,inf1"),
    ("pool2d", {"type": "max"}, [[1, 2, 4, 6]], "f4,inf2"),
    ("pool2d", {"type": "max"}, [[1, 2, 4, 6]], "f3,nan1,f2"),
    ("pool2d", {"type": "max", "kernel_h": 3, "kernel_w": 3, "stride_h": 1, "stride_w": 1,
                "pad_h": 1, "pad_w": 1}, [[1, 1, 3, 5]], "f2,inf1,f2"),
    ("pool2d", {"type": "avg"}, [[1, 2, 4, 6]], "f2,inf2,nan2"),
    ("layer_norm", {}, [[3, 5], [5], [5]], "f4,inf1"),
    ("batch_norm", {}, [[2, 2, 3, 4], [2], [2]], "f3,nan1"),
    ("reduce_sum", {}, [[3, 5]], "f3,inf2"),
    ("reduce_mean", {"dim": 0}, [[3, 5]], "f3,inf1,nan1"),
    ("cross_entropy", {}, [[6, 5], I([6], 5)], "f4,inf1"),
    ("cross_entropy", {}, [[4, 5], I([4], 5)], "f4,nan1"),
    ("dropout", {"rate_pct": 50, "seed": 5}, [[8, 16]], "f8,inf4,nan4"),
    ("dropout", {"rate_pct": 0}, [[4, 6]], "f2,inf2,nan2"),
    ("multihead_attention", {"heads": 2}, [[2, 3, 4], [2, 3, 4], [2, 3, 4]] + [[4, 4]] * 4, "f3,nan1"),
]

# ---- reference implementations -------------------------------------------------------------------


def act(name, y):
    return {
        "none": lambda t: t,
        "relu": F.relu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "gelu": lambda t: F.gelu(t, approximate="none"),
    }[name](y)


def ref_linear(p, x, w, b=None):
    return [act(p["activation"], F.linear(x, w.t(), b if p["use_bias"] else None))]


def ref_mha(p, q, k, v, wq, wk, wv, wo):
    e, h = q.shape[2], p["heads"]
    # causal: query i sees keys j <= i; torch's attn_mask adds -inf above the diagonal.
    mask = None
    if p.get("causal"):
        mask = torch.triu(torch.full((q.shape[1], k.shape[1]), float("-inf")), diagonal=1)
    out, _ = F.multi_head_attention_forward(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), e, h,
        in_proj_weight=torch.cat([wq.t(), wk.t(), wv.t()]), in_proj_bias=None,
        bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
        out_proj_weight=wo.t(), out_proj_bias=None, training=False, need_weights=False,
        attn_mask=mask)
    out = out.transpose(0, 1)
    # Independent explicit form: softmax(Q_h K_h^T / sqrt(dh)) V_h per head.
    dh = e // h
    Q, K, V = (t.matmul(w).unflatten(-1, (h, dh)).transpose(1, 2)
               for t, w in ((q, wq), (k, wk), (v, wv)))
    scores = Q.matmul(K.transpose(-1, -2)) / math.sqrt(dh)
    if mask is not None:
        scores = scores + mask
    att = torch.softmax(scores, dim=-1).matmul(V)
    explicit = att.transpose(1, 2).flatten(2).matmul(wo)
    assert torch.allclose(out, explicit, rtol=1e-12, atol=1e-14, equal_nan=True), "torch MHA forms disagree"
    return [out]


def ref_pool(p, x):
    k = (p["kernel_h"], p["kernel_w"])
    s = (p["stride_h"], p["stride_w"])
    pad = (p["pad_h"], p["pad_w"])
    if p["type"] == "max":
        return [F.max_pool2d(x, k, s, pad)]
    return [F.avg_pool2d(x, k, s, pad, count_include_pad=True)]


REF = {
    "linear": ref_linear,
    "batch_matmul": lambda p, a, b: [torch.matmul(a, b)],
    "ew_add": lambda p, a, b: [torch.add(a, b)],
    "ew_sub": lambda p, a, b: [torch.sub(a, b)],
    "ew_mul": lambda p, a, b: [torch.mul(a, b)],
    "scalar_mul": lambda p, x: [x * p["num"] / p["den"]],
    "relu": lambda p, x: [F.relu(x)],
    "gelu": lambda p, x: [F.gelu(x, approximate="none")],
    "sigmoid": lambda p, x: [torch.sigmoid(x)],
    "tanh": lambda p, x: [torch.tanh(x)],
    "identity": lambda p, x: [x.clone()],
    "softmax": lambda p, x: [F.softmax(x, dim=p["dim"])],
    "layer_norm": lambda p, x, g, b: [F.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5)],
    "batch_norm": lambda p, x, g, b: [F.batch_norm(x, None, None, g, b, training=True,
                                                   momentum=0.0, eps=1e-5)],
    "conv2d": lambda p, x, w, b=None: [act(p["activation"], F.conv2d(
        x, w, b if p["use_bias"] else None, (p["stride_h"], p["stride_w"]),
        (p["pad_h"], p["pad_w"]), 1, p["groups"]))],
    "pool2d": ref_pool,
    "concat": lambda p, x, y: [torch.cat([x, y], dim=p["axis"])],
    "split": lambda p, x: list(torch.split(x, p["sizes"], dim=p["axis"])),
    "transpose": lambda p, x: [torch.transpose(x, p["dim0"], p["dim1"])],
    "reshape": lambda p, x: [torch.reshape(x, p["shape"])],
    "flat": lambda p, x: [torch.flatten(x, 1)],
    "embedding": lambda p, ix, t: [F.embedding_bag(ix, t, mode=p["aggr"])],
    "multihead_attention": ref_mha,
    "reduce_sum": lambda p, x: [torch.sum(x, dim=p["dim"], keepdim=p["keep"])],
    "reduce_mean": lambda p, x: [torch.mean(x, dim=p["dim"], keepdim=p["keep"])],
    "cross_entropy": lambda p, x, lab: [F.cross_entropy(x, lab, reduction="none")],
}

# ---- running our evaluator -----------------------------------------------------------------------


def full_params(spec_op, given):
    """The op's parameters with defaults filled in (enum values stay names)."""
    p = {}
    for name, dom in (spec_op.get("params") or {}).items():
        if name in given:
            p[name] = given[name]
        elif "default" in dom:
            p[name] = dom["default"]
    for name in given:
        if name not in p:
            raise SystemExit(f"unknown parameter {name} of {spec_op['name']}")
    return p


def build_pre(nodes, dims, pre):
    """Nodes that make the op's float input 0 (named "pre") from graph inputs: an int `pre`
    scales a uniform input by that factor; a string such as "f3,inf1,nan1" concatenates along
    the last dim segments of finite values (f), +-inf (inf: x * (10^6)^60) and NaN (nan: inf -
    inf) of those widths."""
    if isinstance(pre, int):
        nodes.append({"name": "in0", "op": "input", "params": {"shape": dims}})
        nodes.append({"name": "pre", "op": "scalar_mul", "params": {"num": pre}, "in": ["in0"]})
        return
    parts = []
    for si, seg in enumerate(pre.split(",")):
        kind, width = re.fullmatch(r"(f|inf|nan)(\d+)", seg).groups()
        name = f"seg{si}"
        nodes.append({"name": name, "op": "input",
                      "params": {"shape": dims[:-1] + [int(width)]}})
        if kind != "f":
            for r in range(60):
                nodes.append({"name": f"{name}_{r}", "op": "scalar_mul",
                              "params": {"num": 1000000}, "in": [name]})
                name = f"{name}_{r}"
        if kind == "nan":
            nodes.append({"name": f"{name}_nan", "op": "ew_sub", "in": [name, name]})
            name = f"{name}_nan"
        parts.append(name)
    acc = parts[0]
    for pi, part in enumerate(parts[1:]):
        nodes.append({"name": f"cat{pi}", "op": "concat", "params": {"axis": len(dims) - 1},
                      "in": [acc, part]})
        acc = f"cat{pi}"
    nodes.append({"name": "pre", "op": "identity", "in": [acc]})


def build_graph(op, params, inputs, n_out, pre):
    nodes, names, outputs = [], [], []
    for i, inp in enumerate(inputs):
        if i == 0 and pre:
            build_pre(nodes, inp, pre)
            names.append("pre")
            outputs.append("pre")
            continue
        if isinstance(inp, dict):
            ip = {"shape": inp["dims"], "dtype": inp.get("dtype", "float")}
            if "range" in inp:
                ip["range"] = inp["range"]
        else:
            ip = {"shape": inp}
        nodes.append({"name": f"in{i}", "op": "input", "params": ip})
        names.append(f"in{i}")
    nodes.append({"name": "y", "op": op, "params": params, "in": names})
    outputs += ["y" if j == 0 else f"y:{j}" for j in range(n_out)]
    return {"nodes": nodes, "outputs": outputs}


def run_ours(binary, graph, seed, tmpdir):
    path = os.path.join(tmpdir, "case.json")
    with open(path, "w") as f:
        json.dump(graph, f)
    r = subprocess.run([binary, "eval", path, "--dump", "--domain", "f64", "--seed", str(seed)],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"unity-pcg failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


JSON_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def tensor(v, is_int):
    # the dump writes infinities and NaN as the strings "inf", "-inf", "nan" (JSON has none)
    vals = [JSON_NONFINITE[x] if isinstance(x, str) else x for x in v["values"]]
    t = torch.tensor(vals, dtype=torch.long if is_int else torch.float64)
    return t.reshape(v["shape"])


def compare(ours, ref):
    """Max abs diff over finite reference values, and why they disagree (None if they agree).
    Non-finite reference values must be matched exactly (the same inf, or NaN)."""
    if list(ours.shape) != list(ref.shape):
        return math.inf, f"shape {list(ours.shape)} != torch {list(ref.shape)}"
    if ours.numel() == 0:
        return 0.0, None
    fin = torch.isfinite(ref)
    diff = torch.where(fin, (ours - ref).abs(), torch.zeros_like(ref))
    md = diff.nan_to_num(nan=math.inf).max().item()
    bad = fin & ~(diff <= RTOL * ref.abs() + ATOL)
    bad |= ~fin & ~((ours == ref) | (ours.isnan() & ref.isnan()))
    if bad.any():
        first = int(bad.flatten().nonzero()[0])
        return md, (f"{int(bad.sum())} of {ours.numel()} elements off, first at flat index "
                    f"{first}: ours {ours.flatten()[first].item()!r}, "
                    f"torch {ref.flatten()[first].item()!r}")
    return md, None


def check_dropout(p, x, y):
    """Standard (torch) inverted dropout y = x * m / (1 - rate), m in {0, 1}: every element is
    x * 0 (0, or NaN for a non-finite x) or x / (1 - rate); the kept fraction is plausible; rate 0
    is the identity bit for bit."""
    rate = p["rate_pct"]
    if list(y.shape) != list(x.shape):
        return math.inf, "shape differs"
    if rate == 0:
        same = (y == x) | (y.isnan() & x.isnan())
        md = torch.where(same, torch.zeros_like(y), (y - x).abs()).max().item()
        return md, None if same.all() else "rate 0 is not the identity"

    def near(a, b):
        return (a - b).abs() <= RTOL * b.abs() + ATOL

    scaled = x / (1.0 - rate / 100.0)
    fin = torch.isfinite(x)
    kept = torch.where(fin, near(y, scaled), (y == scaled) | (y.isnan() & scaled.isnan()))
    dropped = torch.where(fin, y == 0, y.isnan())
    md = torch.where(kept & fin, (y - scaled).abs(), torch.zeros_like(y)).max().item()
    if not (kept | dropped).all():
        first = int((~(kept | dropped)).flatten().nonzero()[0])
        return md, (f"{int((~(kept | dropped)).sum())} elements neither x * 0 nor x/(1-rate), "
                    f"first: x {x.flatten()[first].item()!r} -> {y.flatten()[first].item()!r}")
    n, q = y.numel(), 1.0 - rate / 100.0
    k = int((kept & fin & (y != 0)).sum() + (~fin).sum() * q)
    sd = math.sqrt(n * q * (1 - q))
    if abs(k - n * q) > 5 * sd + 1:
        return md, f"kept {k} of {n}, expected about {n * q:.0f}"
    return md, None


# ---- main ----------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/default/bin/unity-pcg"))
    ap.add_argument("--spec", default=os.path.join(ROOT, "specs/ops.json"))
    ap.add_argument("--seeds", type=int, default=1, help="random inputs per case (default 1)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print details of mismatches")
    args = ap.parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"kernels_torch.py: {args.bin} not found; run `make` first")

    with open(args.spec) as f:
        spec = {o["name"]: o for o in json.load(f)["ops"]}
    # The regular operators are those of pcg/ops.def with kind REGULAR.
    with open(os.path.join(ROOT, "pcg/ops.def")) as f:
        regular = re.findall(r'^X\(\w+, "(\w+)", REGULAR\)', f.read(), re.M)
    missing = [n for n in regular if n not in REF and n != "dropout"]
    if missing:
        sys.exit(f"kernels_torch.py: no torch reference for {', '.join(missing)}")

    cases = []
    for name in regular:
        for ex in spec[name].get("examples") or []:
            cases.append((name, ex.get("params", {}), ex["inputs"], 0, "ex"))
    cases.sort(key=lambda c: list(spec).index(c[0]))
    cases += [(c[0], c[1], c[2], c[3] if len(c) > 3 else 0, "extra") for c in EXTRA]
    cases += [(c[0], c[1], c[2], c[3] if len(c) > 3 else 0, "nonfin") for c in NONFINITE]

    n_cases = n_bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ci, (op, given, inputs, pre, kind) in enumerate(cases):
            p = full_params(spec[op], given)
            n_out = len(p["sizes"]) if op == "split" else 1
            # Inputs absent under these parameters (e.g. bias without use_bias) are dropped.
            inputs = [inp for inp, ispec in zip(inputs, spec[op]["inputs"])
                      if all(p.get(k) == v for k, v in ispec.get("when", {}).items())]
            graph = build_graph(op, given, inputs, n_out, pre)
            for s in range(args.seeds):
                seed = 1000 + 17 * ci + s
                n_cases += 1
                shapes = " ".join(
                    ("int" if isinstance(i, dict) else "") + str(i["dims"] if isinstance(i, dict)
                                                                else i).replace(" ", "")
                    for i in inputs)
                how = (f" x*{pre}" if isinstance(pre, int) else f" x={pre}") if pre else ""
                label = (f"{op:<20} {kind:<6} {json.dumps(given, separators=(',', ':'))}{how} "
                         f"{shapes} seed={seed}")
                try:
                    dump = run_ours(args.bin, graph, seed, tmp)
                    outs = {(o["name"], o["output"]): o["value"] for o in dump["outputs"]}
                    args_t = []
                    for i, inp in enumerate(inputs):
                        is_int = isinstance(inp, dict) and inp.get("dtype") == "int"
                        if i == 0 and pre:
                            args_t.append(tensor(outs[("pre", 0)], False))
                        else:
                            args_t.append(tensor(dump["inputs"][f"in{i}"], is_int))
                    ours = [tensor(outs[("y", j)], False) for j in range(n_out)]
                    if op == "dropout":
                        md, why = check_dropout(p, args_t[0], ours[0])
                    else:
                        refs = REF[op](p, *args_t)
                        if len(refs) != len(ours):
                            md, why = math.inf, f"{len(ours)} outputs, torch {len(refs)}"
                        else:
                            md, why = 0.0, None
                            for o, r in zip(ours, refs):
                                d, w = compare(o, r)
                                md = max(md, d)
                                why = why or w
                except Exception as e:  # a failure to run is a mismatch too
                    md, why = math.inf, f"error: {e}"
                verdict = "OK" if why is None else "MISMATCH"
                n_bad += why is not None
                print(f"{label}  maxdiff={md:.3g}  {verdict}" + (f" ({why})" if why else ""))
                if why and args.verbose and op != "dropout" and md != math.inf:
                    for o, r in zip(ours, refs):
                        print("   ours :", o.flatten()[:8].tolist())
                        print("   torch:", r.flatten()[:8].tolist())
    print(f"{n_cases} cases, {n_bad} mismatches")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
