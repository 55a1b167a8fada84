#!/usr/bin/env python3
"""Writes the mid-size graphs of scripts/bench/runtime.sh as pcg graph JSON (the format of
un_graph_to_json), with the zoo's structure (runtime/zoo.c) at the sizes of
scripts/bench/torch_models.py, for `unity-train --model FILE.json`.

  mid_graphs.py DIR    -> DIR/mlp_mid.json, DIR/transformer_mid.json, DIR/mlp_gpu.json,
                          DIR/transformer_gpu.json"""
import json
import os
import sys

# The sizes (torch_models.py imports them from here).
MID_MLP = dict(batch=64, inp=1024, width=1344, layers=8)  # 2 towers, 29M parameters
MID_TF = dict(batch=8, seq=128, hidden=256, heads=4, ffn=1024, layers=4)
CHARLM = dict(batch=32, seq=64, dim=128, heads=4, ffn=512, blocks=2, vocab=256)  # zoo charlm
# GPU sizes (scripts/bench/gpu.sh): large enough that one GPU is not waiting on kernel launches.
GPU_MLP = dict(batch=2048, inp=4096, width=4096, layers=8)  # 2 towers, 268M parameters
GPU_TF = dict(batch=16, seq=512, hidden=1024, heads=16, ffn=4096, layers=8)  # BERT-Large layers


def source(op, name, shape):
    return {"name": name, "op": op, "params": {"shape": shape, "dtype": "float", "range": 0,
                                               "shard": [], "sum": 1, "copy": 1}}


def mlp(c):
    nodes, towers = [], []
    for k in (1, 2):
        x = f"x{k}"
        nodes.append(source("input", x, [c["batch"], c["inp"]]))
        d = c["inp"]
        for i in range(1, c["layers"] + 1):
            w = f"t{k}.l{i}.w"
            nodes.append(source("weight", w, [d, c["width"]]))
            n = f"t{k}.l{i}"
            nodes.append({"name": n, "op": "linear", "in": [x, w], "params": {
                "activation": "relu" if i < c["layers"] else "none", "use_bias": False}})
            x, d = n, c["width"]
        towers.append(x)
    nodes.append({"name": "logits", "op": "ew_add", "in": towers})
    return {"nodes": nodes, "outputs": ["logits"]}


def transformer(c):
    h, f = c["hidden"], c["ffn"]
    nodes = [source("input", "x", [c["batch"], c["seq"], h])]
    x = "x"
    for i in range(1, c["layers"] + 1):
        p = f"l{i}."
        ws = [p + "attn." + w for w in ("wq", "wk", "wv", "wo")]
        nodes += [source("weight", w, [h, h]) for w in ws]
        nodes.append({"name": p + "attn", "op": "multihead_attention", "in": [x, x, x] + ws,
                      "params": {"heads": c["heads"], "causal": False}})
        nodes.append({"name": p + "res1", "op": "ew_add", "in": [x, p + "attn"]})
        x = layer_norm(nodes, p + "res1", p + "ln1", h)
        nodes.append(source("weight", p + "ffn1.w", [h, f]))
        nodes.append({"name": p + "ffn1", "op": "linear", "in": [x, p + "ffn1.w"],
                      "params": {"activation": "gelu", "use_bias": False}})
        nodes.append(source("weight", p + "ffn2.w", [f, h]))
        nodes.append({"name": p + "ffn2", "op": "linear", "in": [p + "ffn1", p + "ffn2.w"],
                      "params": {"activation": "none", "use_bias": False}})
        nodes.append({"name": p + "res2", "op": "ew_add", "in": [x, p + "ffn2"]})
        x = layer_norm(nodes, p + "res2", p + "ln2", h)
    nodes.append(source("weight", "head.w", [h, 1]))
    nodes.append({"name": "head", "op": "linear", "in": [x, "head.w"],
                  "params": {"activation": "none", "use_bias": False}})
    return {"nodes": nodes, "outputs": ["head"]}


def layer_norm(nodes, x, name, h):
    nodes.append(source("weight", name + ".gamma", [h]))
    nodes.append(source("weight", name + ".beta", [h]))
    nodes.append({"name": name, "op": "layer_norm", "in": [x, name + ".gamma", name + ".beta"]})
    return name


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: mid_graphs.py DIR")
    for name, g in (("mlp_mid", mlp(MID_MLP)), ("transformer_mid", transformer(MID_TF)),
                    ("mlp_gpu", mlp(GPU_MLP)), ("transformer_gpu", transformer(GPU_TF))):
        with open(os.path.join(sys.argv[1], name + ".json"), "w") as f:
            json.dump(g, f, indent=1)


if __name__ == "__main__":
    main()
