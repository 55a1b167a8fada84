#!/usr/bin/python3
"""Writes the small ONNX models of tests/test_onnx.c into tests/data/onnx/ (a few KB each), with
each good model's input (NAME.in: float32, or int64 for indices) and PyTorch's float64 output
(NAME.out, float64), and PyTorch's parameter counts (params.txt: NAME sum(p.numel()), for the
inference export the count after torch folds each Conv's BatchNormalization into it), so that
`make test` needs no Python. Random init, seed 0.

usage: /usr/bin/python3 scripts/onnx/make_test_data.py [OUT_DIR]   (default tests/data/onnx)
"""
import os, sys

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else 'tests/data/onnx'
TRAIN = torch.onnx.TrainingMode.TRAINING
EVAL = torch.onnx.TrainingMode.EVAL


class Cnn(torch.nn.Module):
    """Conv, BatchNormalization, Relu, MaxPool, zero Pad + AveragePool, Concat, Split, Add,
    GlobalAveragePool, Flatten, Gemm, Sigmoid."""
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(4, eps=1e-3)
        self.bn2 = torch.nn.BatchNorm2d(4)  # after a pool: not fused into a Conv by the export
        self.c2 = torch.nn.Conv2d(4, 4, 3, padding=1, groups=2)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        y = self.bn2(torch.nn.functional.max_pool2d(y, 2))
        z = torch.nn.functional.avg_pool2d(self.c2(y), 3, stride=1, padding=1)
        a, b = torch.split(z, [1, 3], dim=1)
        y = torch.cat([b, a], dim=1) + y
        y = torch.cat([y, torch.tanh(y)], dim=1)
        y = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)
        return torch.sigmoid(self.fc(y))


class Mlp(torch.nn.Module):
    """Gemm, Gelu (Erf form), MatMul + Add, Sub, Mul, Div by a constant, Softmax."""
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(6, 8)
        self.w = torch.nn.Parameter(torch.randn(8, 8) * 0.3)
        self.b = torch.nn.Parameter(torch.randn(8) * 0.1)
        self.l2 = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.l1(x))
        g = h @ self.w + self.b
        h = (g - h) * h / 4
        return torch.softmax(self.l2(h), dim=-1)


class Emb(torch.nn.Module):
    """Gather on an embedding table, Transpose, Reshape, LayerNormalization (opset 17)."""
    def __init__(self):
        super().__init__()
        self.e = torch.nn.Embedding(10, 4)
        self.ln = torch.nn.LayerNorm(12)

    def forward(self, idx):
        x = self.e(idx)                       # [2, 3, 4]
        x = x.transpose(1, 2).reshape(2, 12)  # [2, 12]
        return self.ln(x)


class Bcast(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        return torch.relu(x) + self.p


class Cum(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=1)


def export(name, m, x, opset=17, training=TRAIN, dynamic=None, keep=True):
    torch.manual_seed(0)
    path = os.path.join(OUT, name + '.onnx')
    m.train(training == TRAIN)
    torch.onnx.export(m, x, path, opset_version=opset, training=training,
                      do_constant_folding=False, input_names=['x'], output_names=['y'],
                      dynamic_axes=dynamic)
    if keep:
        n = sum(p.numel() for p in m.parameters())
        if training == EVAL:  # the export folds a BatchNormalization after a Conv into it
            n -= sum(mod.bias.numel() for mod in m.modules()
                     if isinstance(mod, torch.nn.BatchNorm2d) and mod is getattr(m, 'bn', None))
        with open(os.path.join(OUT, 'params.txt'), 'a') as f:
            f.write(f'{name} {n}\n')
        xin = x.numpy()
        xin.astype('int64' if x.dtype == torch.int64 else 'float32').tofile(
            os.path.join(OUT, name + '.in'))
        with torch.no_grad():
            md = m.double()
            y = md(x if x.dtype == torch.int64 else x.double())
        y.numpy().astype('float64').tofile(os.path.join(OUT, name + '.out'))
    print(f'{path}: {os.path.getsize(path)} bytes')


def main():
    os.makedirs(OUT, exist_ok=True)
    open(os.path.join(OUT, 'params.txt'), 'w').close()
    torch.manual_seed(0)
    export('cnn', Cnn(), torch.randn(2, 3, 8, 8))
    torch.manual_seed(0)
    cnn = Cnn()
    with torch.no_grad():  # running statistics other than 0 and 1 for the inference export
        for bn in (cnn.bn, cnn.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    export('cnn_eval', cnn, torch.randn(2, 3, 8, 8), training=EVAL)
    torch.manual_seed(0)
    export('mlp', Mlp(), torch.randn(5, 6), opset=13)
    torch.manual_seed(0)
    export('emb', Emb(), torch.randint(0, 10, (2, 3)))
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    export('tenc', torch.nn.TransformerEncoder(enc, 1, enable_nested_tensor=False),
           torch.randn(2, 3, 8), opset=13)
    # bad input: a dynamic batch dim, an operator we lack, an opset outside 13-17
    torch.manual_seed(0)
    export('dynamic', Mlp(), torch.randn(5, 6), dynamic={'x': {0: 'batch'}, 'y': {0: 'batch'}},
           keep=False)
    export('cumsum', Cum(), torch.randn(2, 3), keep=False)
    export('bcast', Bcast(), torch.randn(2, 3), keep=False)
    # dropout in training mode (mapped, but random: no values to compare)
    torch.manual_seed(0)
    export('dropout', torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.2)),
           torch.randn(2, 4), keep=False)
    torch.manual_seed(0)
    export('opset11', Mlp(), torch.randn(5, 6), opset=11, keep=False)


if __name__ == '__main__':
    main()
