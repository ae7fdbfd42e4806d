"""The main job. Until the models land, it trains a small MLP on planted-teacher data end to end.

Everything a real run uses is on the path: the backend picks the device, the tape computes gradients, and an
optimizer from gpuemb.optim updates the weights. The loss falls towards the teacher's own log-loss, which is
the best any model can reach on these labels.

    python tools/train.py                 # best device, defaults below
    python tools/train.py --steps 500 --lr 0.01 --device cpu
"""
import argparse
import os
import sys
import time

import numpy as np


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400, help="training steps (default 400)")
    p.add_argument("--batch-size", type=int, default=1024, help="samples per step (default 1024)")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (default 3e-3)")
    p.add_argument("--hidden", type=int, default=64, help="width of the two hidden layers (default 64)")
    p.add_argument("--features", type=int, default=16, help="input features (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=50, help="steps between loss lines (default 50)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                   help="overrides GPUEMB_DEVICE (default: GPUEMB_DEVICE, else auto)")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "hidden", "features", "log_every"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if not args.lr > 0:
        p.error(f"--lr must be positive, got {args.lr}")
    return args


def teacher(rng, n_features, hidden):
    """A fixed random two-layer net whose sigmoid output is the true click probability."""
    W1 = rng.standard_normal((hidden, n_features)) / n_features ** 0.5
    w2 = rng.standard_normal(hidden) * 5.0 / hidden ** 0.5  # confident labels: a low best log-loss to fall to
    return lambda x: 1 / (1 + np.exp(-(np.tanh(x @ W1.T) @ w2)))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.device:
        os.environ["GPUEMB_DEVICE"] = args.device  # read once, when the backend is first imported
    try:
        import gpuemb
    except Exception as e:  # DeviceUnavailableError or a bad GPUEMB_DEVICE: a message, not a traceback
        print(f"train.py: {e}", file=sys.stderr)
        return 2
    from tqdm import tqdm

    from gpuemb import autograd as ag
    from gpuemb.autograd import Tensor, backend
    from gpuemb.optim import Adam

    info = backend.device_info()
    print(f"device: {info['device']} ({info['reason']})")
    rng = np.random.default_rng(args.seed)
    prob = teacher(rng, args.features, 32)
    F, H = args.features, args.hidden
    layers = [(F, H), (H, H), (H, 1)]
    params = {}
    for i, (fan_in, fan_out) in enumerate(layers):
        params[f"W{i}"] = Tensor(backend.to_device(rng.standard_normal((fan_out, fan_in)).astype(np.float32)
                                                   * np.float32((2 / fan_in) ** 0.5)), requires_grad=True)
        params[f"b{i}"] = Tensor(backend.xp.zeros(fan_out, dtype=np.float32), requires_grad=True)
    opt = Adam(params, lr=args.lr)

    def forward(x):
        h = x
        for i in range(len(layers)):
            h = ag.linear(h, params[f"W{i}"], params[f"b{i}"])
            h = h.relu() if i < len(layers) - 1 else h
        return h.reshape(-1)

    def batch():
        x = rng.standard_normal((args.batch_size, F))
        y = (rng.random(args.batch_size) < prob(x)).astype(np.float32)
        return backend.to_device(x.astype(np.float32)), backend.to_device(y), prob(x)

    start, window = time.perf_counter(), []
    bar = tqdm(range(1, args.steps + 1), unit="step", dynamic_ncols=True, mininterval=0.5, file=sys.stdout)
    for step in bar:
        x, y, _ = batch()
        loss = ag.bce_with_logits(forward(Tensor(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = float(loss.item())
        if not np.isfinite(value):
            bar.close()
            print(f"train.py: the loss became {value} at step {step}; lower --lr (now {args.lr})", file=sys.stderr)
            return 1
        window.append(value)
        bar.set_postfix(loss=f"{value:.4f}", refresh=False,
                        samples_s=f"{step * args.batch_size / (time.perf_counter() - start):,.0f}")
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            bar.write(f"step {step:5d}  loss {np.mean(window):.4f}")
            window = []
    bar.close()

    x, y, p = batch()
    with ag.no_grad():
        final = float(ag.bce_with_logits(forward(Tensor(x)), y).item())
    y = backend.to_host(y)
    best = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    elapsed = time.perf_counter() - start
    print(f"done: {args.steps} steps in {elapsed:.1f}s ({args.steps * args.batch_size / elapsed:,.0f} samples/s), "
          f"held-out log-loss {final:.4f}, teacher's {best:.4f} (the best reachable)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
