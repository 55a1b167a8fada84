#!/usr/bin/python3
"""Cross-checks the runtime's CPU kernels (runtime/kernels.h), forward AND backward, against PyTorch.

For every regular operator, every entry of its "examples" in specs/ops.json and the parameter
variants of kernels_torch.py (its EXTRA list; the non-finite cases are left out: their gradients
are not numbers), this runs un_kern_forward and un_kern_backward through ctypes on random inputs
in float64 and float32, and compares the outputs and the input gradients of L = sum(r * y) (r
random) with torch's forward and autograd on the same values, in float64. The torch forms of the
operators and our conventions (linear's W is [in, out], attention weights on the right, ...) are
those of kernels_torch.py, imported from beside this file.

  dropout   torch cannot reproduce our hashed mask; the gradient is checked structurally: it is
            dy * 100 / (100 - rate) where the forward kept the element and 0 where it dropped it.

The kernels are compiled into a temporary shared library (cc, OpenBLAS and cJSON as for `make`);
no build directory is needed. Run from anywhere with PyTorch's Python:

    /usr/bin/python3 scripts/crosscheck/grads_torch.py [--cc CC] [--seeds N] [-v]

Prints one line per case and `N cases, M mismatches`; exits 1 on any mismatch.
"""

import argparse
import ctypes as C
import glob
import math
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kernels_torch as KT  # noqa: E402  (torch references, cases, spec helpers)

torch = KT.torch
ROOT = KT.ROOT

TOL = {"f64": (1e-8, 1e-10), "f32": (2e-3, 2e-4)}  # (rtol, atol) against torch float64

UN_DT_FLOAT, UN_DT_INT = 0, 1
UN_PREC_F32, UN_PREC_F64 = 0, 1


class Param(C.Structure):
    _fields_ = [("len", C.c_int32), ("v", C.c_int64 * 6)]


class Kt(C.Structure):
    _fields_ = [("dtype", C.c_int), ("rank", C.c_int), ("dim", C.c_int64 * 6), ("data", C.c_void_p)]


class Kexec(C.Structure):
    _fields_ = [("prec", C.c_int), ("pool", C.c_void_p), ("seed", C.c_uint64),
                ("training", C.c_bool), ("off", C.c_void_p), ("full", C.c_void_p)]


def build_lib(cc, tmp):
    srcs = [s for s in sorted(glob.glob(os.path.join(ROOT, "pcg", "*.c"))) if not s.endswith("_main.c")]
    srcs += [os.path.join(ROOT, "runtime", f) for f in ("kernels_cpu.c", "blas.c", "pool.c")]
    out = os.path.join(tmp, "libunkern.so")
    cmd = [cc, "-shared", "-fPIC", "-O2", "-std=c17", "-D_GNU_SOURCE", "-pthread", "-I", ROOT,
           *srcs, "-lopenblas", "-lcjson", "-lm", "-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"grads_torch.py: building the kernels failed:\n{r.stderr}")
    lib = C.CDLL(out)
    lib.un_ctx_new.restype = C.c_void_p
    lib.un_ctx_new.argtypes = [C.c_void_p]
    lib.un_ctx_free.argtypes = [C.c_void_p]
    lib.un_ctx_errmsg.restype = C.c_char_p
    lib.un_ctx_errmsg.argtypes = [C.c_void_p]
    lib.un_ctx_clear.argtypes = [C.c_void_p]
    lib.un_kern_param_names.restype = C.POINTER(C.c_char_p)
    lib.un_kern_param_names.argtypes = [C.c_int]
    lib.un_kern_forward.argtypes = [C.c_void_p, C.POINTER(Kexec), C.c_int, C.POINTER(Param),
                                    C.POINTER(Kt), C.c_int, C.POINTER(Kt), C.c_int]
    lib.un_kern_backward.argtypes = [C.c_void_p, C.POINTER(Kexec), C.c_int, C.POINTER(Param),
                                     C.POINTER(Kt), C.c_int, C.POINTER(Kt), C.c_int,
                                     C.POINTER(Kt), C.POINTER(Kt)]
    return lib


def op_ids():
    with open(os.path.join(ROOT, "pcg/ops.def")) as f:
        names = re.findall(r'^X\(\w+, "(\w+)", (\w+)\)', f.read(), re.M)
    return {n: i for i, (n, _) in enumerate(names)}, [n for n, k in names if k == "REGULAR"]


def param_vector(lib, spec_op, op_id, p):
    vec = (Param * 8)()
    names = lib.un_kern_param_names(op_id)
    i = 0
    while names[i] is not None:
        name = names[i].decode()
        dom = spec_op["params"][name]
        val = p[name]
        if "enum" in dom:
            val = dom["enum"].index(val)
        if isinstance(val, list):
            vec[i].len = len(val)
            for j, x in enumerate(val):
                vec[i].v[j] = x
        else:
            vec[i].len = -1
            vec[i].v[0] = int(val)
        i += 1
    return vec


def kt_of(t, is_int=False):
    k = Kt()
    k.dtype = UN_DT_INT if is_int else UN_DT_FLOAT
    k.rank = t.dim()
    for i, d in enumerate(t.shape):
        k.dim[i] = d
    k.data = t.data_ptr() if t is not None else None
    return k


def kt_array(ts, ints=()):
    arr = (Kt * max(1, len(ts)))()
    for i, t in enumerate(ts):
        arr[i] = kt_of(t, i in ints)
    return arr


def close(ours, ref, rtol, atol):
    """None if ours matches ref, else a one-line reason."""
    ours = ours.double()
    if list(ours.shape) != list(ref.shape):
        return f"shape {list(ours.shape)} != torch {list(ref.shape)}"
    bad = ~((ours - ref).abs() <= rtol * ref.abs() + atol)
    if bad.any():
        first = int(bad.flatten().nonzero()[0])
        return (f"{int(bad.sum())} of {ours.numel()} off, first [{first}]: ours "
                f"{ours.flatten()[first].item()!r}, torch {ref.flatten()[first].item()!r}")
    return None


def run_case(lib, ctx, spec, ids, op, given, inputs, pre, seed, prec):
    """Returns (checked gradient count, reason or None)."""
    p = KT.full_params(spec[op], given)
    inputs = [inp for inp, ispec in zip(inputs, spec[op]["inputs"])
              if all(p.get(k) == v for k, v in ispec.get("when", {}).items())]
    g = torch.Generator().manual_seed(seed)
    ints, xs = set(), []
    for i, inp in enumerate(inputs):
        if isinstance(inp, dict) and inp.get("dtype") == "int":
            ints.add(i)
            xs.append(torch.randint(0, inp["range"], inp["dims"], generator=g, dtype=torch.long))
        else:
            x = torch.rand(inp if not isinstance(inp, dict) else inp["dims"], generator=g,
                           dtype=torch.float64) * 2 - 1
            if i == 0 and isinstance(pre, int) and pre:
                x = x * pre
            xs.append(x)
    dt = torch.float32 if prec == "f32" else torch.float64
    ours_in = [x if i in ints else x.to(dt).contiguous() for i, x in enumerate(xs)]
    # torch forward on the values our kernel sees (float32 inputs rounded, then float64 math)
    leaves = [x if i in ints else ours_in[i].double().requires_grad_(True)
              for i, x in enumerate(xs)]
    if op == "dropout":
        refs = [leaves[0] * 1.0]  # shape only; checked structurally below
    else:
        refs = KT.REF[op](p, *leaves)
    outs = [torch.zeros(r.shape, dtype=dt) for r in refs]
    rs = [torch.rand(r.shape, generator=g, dtype=torch.float64) * 2 - 1 for r in refs]
    ex = Kexec(prec=UN_PREC_F32 if prec == "f32" else UN_PREC_F64, pool=None, seed=0,
               training=True, off=None, full=None)
    pv = param_vector(lib, spec[op], ids[op], p)
    ins, outa = kt_array(ours_in, ints), kt_array(outs)
    st = lib.un_kern_forward(ctx, C.byref(ex), ids[op], pv, ins, len(xs), outa, len(outs))
    if st != 0:
        return 0, f"forward failed: {lib.un_ctx_errmsg(ctx).decode()}"
    rtol, atol = TOL[prec]
    douts = [r.to(dt).contiguous() for r in rs]
    dins = [None if i in ints else torch.zeros(x.shape, dtype=dt) for i, x in enumerate(xs)]
    dina = (Kt * len(xs))()
    for i, x in enumerate(xs):
        dina[i] = kt_of(x, i in ints)
        dina[i].data = None if i in ints else dins[i].data_ptr()
    st = lib.un_kern_backward(ctx, C.byref(ex), ids[op], pv, ins, len(xs), outa, len(outs),
                              kt_array(douts), dina)
    if st != 0:
        return 0, f"backward failed: {lib.un_ctx_errmsg(ctx).decode()}"
    if op == "dropout":
        scale = 100.0 / (100 - p["rate_pct"])
        kept = outs[0].double() != 0
        want = torch.where(kept, douts[0].double() * scale, torch.zeros_like(rs[0]))
        return 1, close(dins[0], want, rtol, atol)
    for o, r in zip(outs, refs):
        why = close(o, r.detach(), rtol, atol)
        if why:
            return 0, "forward: " + why
    loss = sum((r * d.double()).sum() for r, d in zip(refs, douts))
    wrt = [leaves[i] for i in range(len(xs)) if i not in ints]
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    n = 0
    for k, i in enumerate(i for i in range(len(xs)) if i not in ints):
        gt = grads[k] if grads[k] is not None else torch.zeros_like(leaves[i])
        why = close(dins[i], gt, rtol, atol)
        n += 1
        if why:
            return n, f"d input {i}: {why}"
    return n, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--seeds", type=int, default=1, help="random inputs per case (default 1)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    import json
    with open(os.path.join(ROOT, "specs/ops.json")) as f:
        spec = {o["name"]: o for o in json.load(f)["ops"]}
    ids, regular = op_ids()
    cases = []
    for name in regular:
        for ex in spec[name].get("examples") or []:
            cases.append((name, ex.get("params", {}), ex["inputs"], 0, "ex"))
    cases += [(c[0], c[1], c[2], c[3] if len(c) > 3 else 0, "extra") for c in KT.EXTRA]
    missing = sorted(set(regular) - {c[0] for c in cases})
    if missing:
        sys.exit(f"grads_torch.py: no case for {', '.join(missing)}")
    n_cases = n_bad = n_grads = 0
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_lib(args.cc, tmp)
        ctx = lib.un_ctx_new(None)
        for ci, (op, given, inputs, pre, kind) in enumerate(cases):
            for s in range(args.seeds):
                for prec in ("f64", "f32"):
                    seed = 2000 + 31 * ci + s
                    n_cases += 1
                    try:
                        n, why = run_case(lib, ctx, spec, ids, op, given, inputs, pre, seed, prec)
                    except Exception as e:  # a failure to run is a mismatch too
                        n, why = 0, f"error: {e!r}"
                    lib.un_ctx_clear(ctx)
                    n_grads += n
                    n_bad += why is not None
                    if why or args.verbose:
                        how = f" x*{pre}" if pre else ""
                        print(f"{op:<20} {kind:<5} {prec} {json.dumps(given, separators=(',', ':'))}"
                              f"{how} seed={seed}  {'OK' if why is None else 'MISMATCH ' + why}")
        lib.un_ctx_free(ctx)
    print(f"{n_cases} cases ({n_grads} input gradients compared), {n_bad} mismatches")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
