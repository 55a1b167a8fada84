#!/usr/bin/python3
"""Round trip of values for the ONNX importer (pcg/onnx.c): exports torchvision's resnet18,
resnext50_32x4d and inception_v3, a torch.nn.TransformerEncoder and an MLP to ONNX (random init,
no download), runs each through `unity-pcg run` (our float64 reference evaluator with the
model's initializers) on the same input, and compares with PyTorch's float32 forward (1e-4
relative to the output's largest magnitude); parameter counts must equal sum(p.numel()).

Models are exported in training mode (BatchNormalization with batch statistics, as unity-train
trains them; every dropout rate 0 so that both sides are deterministic) at opset 17.

With --train, each imported model then trains 9 steps with unity-train (Adam, synthetic data
cycling through 4 batches, so steps 1 and 9 see the same batch), serial and data parallel on 2
devices, and the loss must fall from step 1 to step 9 on both.

usage: /usr/bin/python3 scripts/onnx/export.py [BUILD_DIR] [OUT_DIR] [--models a,b] [--train]
Needs Debian's python3-torch and python3-torchvision; `make test` does not.
"""
import os, re, subprocess, sys, time

import torch
import torchvision

TOL = 1e-4


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
            torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 10))

    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)


def models():
    tv = torchvision.models
    enc = lambda: torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return {
        'mlp': (lambda: MLP(), (16, 32)),
        'resnet18': (lambda: tv.resnet18(num_classes=1000), (2, 3, 64, 64)),
        'resnext50_32x4d': (lambda: tv.resnext50_32x4d(num_classes=1000), (2, 3, 64, 64)),
        'inception_v3': (lambda: tv.inception_v3(aux_logits=False, init_weights=False,
                                                 dropout=0.0), (4, 3, 107, 107)),
        'transformer': (lambda: torch.nn.TransformerEncoder(enc(), 2, enable_nested_tensor=False),
                        (4, 8, 64)),
    }


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    train = '--train' in sys.argv
    build = args[0] if args else 'build/default'
    out = args[1] if len(args) > 1 else '/tmp/unity-onnx'
    only = None
    for i, a in enumerate(sys.argv):
        if a == '--models':
            only = sys.argv[i + 1].split(',')
            args = [x for x in args if x != sys.argv[i + 1]]
    os.makedirs(out, exist_ok=True)
    pcg = os.path.join(build, 'bin', 'unity-pcg')
    failed = 0
    for name, (make, shape) in models().items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        m = make()
        m.train()
        x = torch.randn(*shape)
        with torch.no_grad():
            y64 = m.double()(x.double())
            m.float()
            y = m(x)
        path = os.path.join(out, name + '.onnx')
        torch.onnx.export(m, x, path, opset_version=17, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        x.numpy().astype('float32').tofile(os.path.join(out, name + '.in'))
        n_torch = sum(p.numel() for p in m.parameters())
        t0 = time.time()
        show = subprocess.run([pcg, 'show', path], capture_output=True, text=True)
        if show.returncode != 0:
            print(f'{name}: import FAILED: {show.stderr.strip()}')
            failed += 1
            continue
        n_ours = int(re.search(r'onnx: opset \d+, (\d+) parameters', show.stdout).group(1))
        nodes = len([l for l in show.stdout.splitlines() if l[:1].isdigit()])
        run = subprocess.run([pcg, 'run', path, '--input', os.path.join(out, name + '.in'),
                              '--output', os.path.join(out, name + '.out')],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f'{name}: run FAILED: {run.stderr.strip()}')
            failed += 1
            continue
        ours = torch.from_numpy(__import__('numpy').fromfile(os.path.join(out, name + '.out'),
                                                            dtype='float32')).reshape(y.shape)
        scale = y.abs().max().item()
        err = (ours - y).abs().max().item() / (scale if scale > 0 else 1)
        err64 = (ours.double() - y64).abs().max().item() / (scale if scale > 0 else 1)
        ok = err <= TOL and n_ours == n_torch
        failed += not ok
        print(f'{name}: input {list(shape)} -> output {list(y.shape)}; parameters torch {n_torch}'
              f' ours {n_ours}; max rel diff {err:.2e} ({"ok" if ok else "FAIL"}; {err64:.1e} from '
              f'torch float64); '
              f'{os.path.getsize(path) >> 10} KiB onnx, import + f64 forward '
              f'{time.time() - t0:.1f} s')
        if not train:
            continue
        for dev in (1, 2):
            t0 = time.time()
            cmd = [os.path.join(build, 'bin', 'unity-train'), '--model', path, '--steps', '9',
                   '--devices', str(dev)] + (['--loss', 'ce'] if len(y.shape) == 2 else [])
            tr = subprocess.run(cmd, capture_output=True, text=True)
            m2 = re.search(r'trained .*loss ([0-9.]+) -> ([0-9.]+)', tr.stdout)
            ok = tr.returncode == 0 and m2 and float(m2.group(2)) < float(m2.group(1))
            failed += not ok
            what = f'loss {m2.group(1)} -> {m2.group(2)}' if m2 else tr.stderr.strip()
            mode = 'serial' if dev == 1 else 'data parallel, 2 devices'
            print(f'  train {mode}: {what} in 9 steps ({"ok" if ok else "FAIL"}; '
                  f'{time.time() - t0:.1f} s)')
    print(f'{failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
