# mpiexec -n 2 python -m mpi4py examples/train_data_parallel.py
"""Data-parallel training with pyar's gradient buckets: a numpy MLP, each rank on
its shard of every batch, gradients averaged bucket by bucket while backward goes on.

For each compression (none, fp16, bf16, int8, top-k 1% with and without error
feedback) the same model is trained from the same start on the same batches;
rank 0 prints the final loss against uncompressed training's and the bytes
each rank sent per step, and plots loss against step (``--plot``, default
training-loss.png; needs matplotlib). Uncompressed, the parameters after K
steps equal one process's training on the whole batches within float32's
rounding (``tests/mpi/test_buckets.py`` checks it with :func:`train`).

``--timing`` instead times a step of a wider model with ``--compute`` ms of
GIL-free work per layer (``time.sleep``: the CPU's stand-in for a GPU's
backward kernels), with overlap (each bucket launched as its layer's
gradients are ready, inside ``pyar.Progress()``) and without (every bucket
averaged after backward).
"""

import argparse
import time

import numpy as np
from mpi4py import MPI

import pyar

VARIANTS = [("none", None), ("fp16", "fp16"), ("bf16", "bf16"), ("int8", "int8"),
            ("topk 1% + EF", "topk:0.01"),
            ("topk 1%, no EF", pyar.compression.topk.TopK(0.01, error_feedback=False))]


def init(widths, seed=0):
    """[W1, b1, W2, b2, ...] float32 for layers of ``widths`` (inputs first, classes last)."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        params += [(rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32),
                   np.zeros(fan_out, np.float32)]
    return params


def forward(params, x):
    """Activations of every layer (tanh hidden layers, logits last)."""
    acts = [x]
    for layer in range(len(params) // 2):
        z = acts[-1] @ params[2 * layer] + params[2 * layer + 1]
        acts.append(np.tanh(z) if 2 * layer + 2 < len(params) else z)
    return acts


def loss_of(logits, labels):
    """Mean softmax cross-entropy, and its gradient by the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(labels.size), labels] + 1e-12).mean()
    p[np.arange(labels.size), labels] -= 1
    return float(loss), p / labels.size


def backward(params, acts, dlogits, grads, ready=None, compute=0.0):
    """Write the gradients into ``grads``, last layer first, calling ``ready(i)`` for each as
    soon as it is final (after ``compute`` seconds of GIL-free work per layer)."""
    delta = dlogits
    for layer in reversed(range(len(params) // 2)):
        if compute:
            time.sleep(compute)
        w, b = 2 * layer, 2 * layer + 1
        np.matmul(acts[layer].T, delta, out=grads[w])
        np.sum(delta, axis=0, out=grads[b])
        if layer:
            delta = (delta @ params[w].T) * (1 - acts[layer] ** 2)
        if ready is not None:
            ready(b)
            ready(w)


def data(step, widths, rows, seed=1):
    """The global batch of ``step``: inputs and a teacher network's labels (same on every rank)."""
    rng = np.random.default_rng([seed, step])
    x = rng.standard_normal((rows, widths[0])).astype(np.float32)
    teacher = init(widths, seed=seed + 1)
    return x, forward(teacher, x)[-1].argmax(axis=1)


def train(comm=None, compression=None, steps=200, widths=(16, 64, 64, 8), batch=32,
          lr=0.2, bucket_cap_mb=0.01, eval_every=10):
    """Train on ``comm``, each rank on its ``batch // size`` rows of every global batch of
    ``batch``; (parameters, [(step, loss on a held-out batch)], the buckets)."""
    c = pyar.Comm.of(comm)
    if batch % c.size:
        raise ValueError(f"batch {batch} must be a multiple of the {c.size} ranks")
    rows = batch // c.size
    params = init(widths)
    buckets = pyar.GradientBuckets([np.zeros_like(p) for p in params], bucket_cap_mb,
                                   comm=c, compression=compression, views=True)
    grads = buckets.grads
    held_x, held_y = data(10 ** 6, widths, 512)
    curve = []
    for step in range(steps):
        x, y = data(step, widths, batch)
        mine = slice(c.rank * rows, (c.rank + 1) * rows)
        acts = forward(params, x[mine])
        _, dlogits = loss_of(acts[-1], y[mine])
        backward(params, acts, dlogits, grads, buckets.ready)
        buckets.wait()
        for p, g in zip(params, grads):
            p -= np.float32(lr) * g
        if step % eval_every == eval_every - 1 or step == steps - 1:
            curve.append((step + 1, loss_of(forward(params, held_x)[-1], held_y)[0]))
    return params, curve, buckets


def compare(comm, steps, plot):
    rank = comm.rank
    results = {}
    for name, spec in VARIANTS:
        _, curve, buckets = train(comm, spec, steps)
        sent = np.array([buckets.bytes_per_step])
        comm.Allreduce(MPI.IN_PLACE, sent, MPI.MAX)
        results[name] = (curve, int(sent[0]))
    if rank:
        return
    base_loss, base_bytes = results["none"][0][-1][1], results["none"][1]
    print(f"# {comm.size} ranks, {steps} steps; loss on a held-out batch; bytes each rank sent "
          f"per step (the most of any rank)")
    print(f"# {'compression':<16}{'final loss':>11}{'vs none':>9}{'bytes/step':>12}{'cut':>8}")
    for name, (curve, sent) in results.items():
        loss = curve[-1][1]
        print(f"  {name:<16}{loss:>11.4f}{loss / base_loss:>8.2f}x{sent:>12}"
              f"{base_bytes / sent if sent else float('nan'):>7.1f}x")
    if plot:
        try:
            import matplotlib
        except ImportError:
            print("# no plot: matplotlib is not installed (pip install 'pyar[plot]')")
            return
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.2))
        for name, (curve, sent) in results.items():
            ax.plot(*zip(*curve), label=f"{name} ({base_bytes / sent:.1f}x fewer bytes)"
                    if name != "none" else f"none ({sent} B/step)")
        ax.set(xlabel="step", ylabel="held-out loss", yscale="log",
               title=f"pyar.GradientBuckets, {comm.size} ranks: loss per compression")
        ax.legend()
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
        print(f"# plot: {plot}")


def timing(comm, widths, compute, steps, compression=None):
    """ms per step with and without overlap (the slowest rank's medians). A step is backward's
    layers, last first, each ``compute`` seconds of GIL-free work (the gradients themselves
    are computed once, before: only the communication and its overlap are timed)."""
    c = pyar.Comm.of(comm)
    params = init(widths)
    buckets = pyar.GradientBuckets([np.zeros_like(p) for p in params], comm=c,
                                   bucket_cap_mb=4, views=True, compression=compression)
    x, y = data(0, widths, 32)
    acts = forward(params, x)
    backward(params, acts, loss_of(acts[-1], y)[1], buckets.grads)
    layers = list(reversed(range(len(params) // 2)))

    def work(ready):
        for layer in layers:
            time.sleep(compute)
            if ready is not None:
                ready(2 * layer + 1)
                ready(2 * layer)

    def communication():
        for i in range(len(params)):
            buckets.ready(i)
        buckets.wait()

    def after():
        work(None)
        communication()

    def overlapped():
        work(buckets.ready)
        buckets.wait()

    def threaded():
        with pyar.Progress():
            overlapped()

    variants = {"compute only": lambda: work(None), "communication": communication,
                "no overlap": after, "overlap, no thread": overlapped,
                "overlap, progress thread": threaded}
    seconds = {name: [] for name in variants}
    for repeat in range(steps + 2):
        for name, step in variants.items():
            comm.Barrier()
            start = time.perf_counter()
            step()
            took = np.array([time.perf_counter() - start])
            comm.Allreduce(MPI.IN_PLACE, took, MPI.MAX)
            if repeat >= 2:                 # two warm-up rounds
                seconds[name].append(took[0])
    if c.rank == 0:
        print(f"# {c.size} ranks; layers {widths}: {len(buckets)} buckets "
              f"({', '.join(str(f.nbytes) for f in buckets.flat)} B of float32); "
              f"{compute * 1e3:g} ms of GIL-free work per layer; compression "
              f"{buckets.transform}, {buckets.bytes_per_step} B sent per step; medians of "
              f"{steps} steps, the slowest rank's")
        median = {name: float(np.median(v)) for name, v in seconds.items()}
        for name, value in median.items():
            hidden = "" if name in ("compute only", "communication") else \
                f"  hides {(median['no overlap'] - value) / median['communication']:.0%}" \
                " of the communication"
            print(f"  {name:<26}{value * 1e3:>9.2f} ms/step{hidden}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--plot", default="training-loss.png", help="PNG path ('' for none)")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--compute", type=float, default=5.0, help="ms per layer (--timing)")
    parser.add_argument("--width", type=int, default=1024, help="hidden width (--timing)")
    parser.add_argument("--compression", default=None, help="for --timing: fp16, int8, ...")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if args.timing:
        timing(comm, (args.width,) * 5 + (8,), args.compute / 1e3, args.steps, args.compression)
    else:
        compare(comm, args.steps, args.plot)


if __name__ == "__main__":
    main()
