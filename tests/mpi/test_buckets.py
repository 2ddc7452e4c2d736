"""GradientBuckets and the compressions on real ranks: averages right for mixed shapes and
dtypes, in any ready order, with a progress thread; DDP-style training equals large-batch
training; compressed averages within their bounds, identical on every rank; mismatches raise."""

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from mpi4py import MPI

import pyar
from pyar.integrations.compression.topk import TopK

from checks import agree

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_data_parallel.py"
DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]
HALF_EPS = {np.dtype(np.float16): 2.0 ** -11, np.dtype(ml_dtypes.bfloat16): 2.0 ** -8}


def example():
    spec = importlib.util.spec_from_file_location("train_data_parallel", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gradients(layout, rank, seed=0):
    """Per-rank data that exposes a lost or doubled contribution: depends on rank and index."""
    out = []
    for j, (shape, dtype) in enumerate(layout):
        n = int(np.prod(shape))
        values = (rank + 1) * 16.0 + np.arange(n) % 7 + j / 8 + seed
        out.append(np.array(values.reshape(shape), dtype))
    return out


def same_everywhere(comm, arrays, what):
    mine = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
    root = comm.bcast(mine if comm.rank == 0 else None)  # (bytes: a test helper, not pyar)
    agree(comm, mine == root, f"{what}: differs bitwise from rank 0's")


layouts = st.lists(st.tuples(st.lists(st.integers(1, 6), max_size=3).map(tuple),
                             st.sampled_from(DTYPES)), min_size=1, max_size=8)


@settings(max_examples=12)
@given(layouts, st.sampled_from([1e-5, 2e-4, 25]), st.booleans(), st.integers(0, 2 ** 16))
def test_averages_of_mixed_shapes_and_dtypes_in_any_ready_order(comm, layout, cap, views,
                                                                  seed):
    grads = gradients(layout, comm.rank)
    b = pyar.GradientBuckets(grads, bucket_cap_mb=cap, comm=comm, views=views, timeout=60)
    order = np.random.default_rng([seed, comm.rank]).permutation(len(grads))  # differs by rank
    for i in order:
        b.ready(int(i))
    b.wait()
    every = [gradients(layout, r) for r in range(comm.size)]
    for j, (out, (shape, dtype)) in enumerate(zip(b.grads, layout)):
        expect = np.mean([np.asarray(e[j], np.float64) for e in every], axis=0)
        # half types round after each of the N - 1 folds (pyar folds them in float32)
        tol = HALF_EPS[np.dtype(dtype)] * comm.size if np.dtype(dtype) in HALF_EPS else 1e-6
        agree(comm, out.shape == tuple(shape) and out.dtype == dtype and
              np.allclose(np.asarray(out, np.float64), expect, rtol=tol), f"gradient {j}")
    same_everywhere(comm, b.grads, "bucketed averages")


def test_overlap_with_a_progress_thread(comm):
    grads = gradients([((1000,), np.float32)] * 6, comm.rank)
    b = pyar.GradientBuckets(grads, bucket_cap_mb=4000 * 2 / 2 ** 20, comm=comm, timeout=60)
    assert len(b) == 3
    with pyar.Progress():
        for step in range(3):
            for i in reversed(range(6)):
                b.ready(i)
            b.wait()
    expect = np.mean([gradients([((1000,), np.float32)] * 6, r) for r in range(comm.size)],
                     axis=0)
    agree(comm, all(np.allclose(g, e, rtol=1e-6) for g, e in zip(grads, expect)), "threaded")


def test_ddp_style_training_equals_large_batch_training(comm):
    """Uncompressed, the parameters after K steps equal one process's on the whole batches."""
    ex = example()
    batch = 8 * comm.size
    params, curve, _ = ex.train(comm, None, steps=15, batch=batch, eval_every=5)
    alone, alone_curve, _ = ex.train(MPI.COMM_SELF, None, steps=15, batch=batch, eval_every=5)
    close = all(np.allclose(p, q, rtol=1e-4, atol=1e-5) for p, q in zip(params, alone))
    agree(comm, close, f"largest difference "
                       f"{max(float(np.abs(p - q).max()) for p, q in zip(params, alone))}")
    agree(comm, np.allclose([l for _, l in curve], [l for _, l in alone_curve], rtol=1e-4))
    same_everywhere(comm, params, "trained parameters")


def contributions(spec, n, comm, seed):
    """Every rank's gradient and the transform's average of them, on this rank."""
    rng = np.random.default_rng(seed)
    every = [(rng.standard_normal(n) * (r + 1)).astype(np.float32) for r in range(comm.size)]
    b = pyar.GradientBuckets([every[comm.rank].copy()], comm=comm, compression=spec,
                             timeout=60)
    b.ready(0)
    b.wait()
    return every, b


@pytest.mark.sweep
@pytest.mark.parametrize("n", [1, 300, 5000])
@pytest.mark.parametrize("spec", ["fp16", "bf16", "int8", "topk:0.1"])
def test_compressed_average_within_its_bound_and_identical_everywhere(comm, spec, n):
    every, b = contributions(spec, n, comm, seed=n)
    got = b.grads[0]
    exact = np.mean(every, axis=0)
    size = comm.size
    if spec in ("fp16", "bf16"):
        eps = 2.0 ** -11 if spec == "fp16" else 2.0 ** -8
        # one rounding per contribution and one per fold of the sum (size - 1 of them)
        bound = eps * (2 * size) * np.max(np.abs(every), axis=0) + 1e-6
        ok = np.all(np.abs(got - exact) <= bound)
    elif spec == "int8":
        # quantizing each contribution: half a step of its chunk; requantizing the average: the
        # same of the average's chunk (chunks of the padded blocks; bounded by the whole max)
        step = sum(np.abs(e).max() for e in every) / size / 254
        ok = np.all(np.abs(got - exact) <= 2.01 * step)
    else:
        t = TopK(0.1)
        k = t.k(n)
        expect = np.zeros(n, np.float64)
        for e in every:
            keep = np.argsort(-np.abs(e), kind="stable")[:k]
            expect[keep] += e[keep]
        ok = np.allclose(got, expect / size, rtol=1e-6, atol=1e-7)
    agree(comm, ok, f"{spec}, n={n}: largest error {float(np.abs(got - exact).max())}")
    same_everywhere(comm, [got], spec)


@pytest.mark.parametrize("spec,tol", [("int8", 0.05), ("topk:0.05", 1e-5),
                                      (TopK(0.05, error_feedback=False), None)])
def test_error_feedback_delays_nothing_forever(comm, spec, tol):
    """With error feedback, the sum over steps of what came out plus the ranks' average final
    residual is the sum of the average gradients (EF telescopes: d_t = g + e_(t-1) - e_t);
    top-k exactly up to float32 rounding, int8 up to its second quantization (of the average,
    not fed back). Without error feedback top-k loses what it leaves out."""
    n, steps = 2000, 20
    g = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
    b = pyar.GradientBuckets([g.copy()], comm=comm, compression=spec, timeout=60)
    sent = np.zeros(n, np.float64)
    for step in range(steps):
        b.grads[0][...] = g
        b.ready(0)
        b.wait()
        sent += b.grads[0]
    avg_g = np.asarray(pyar.allreduce(g, op="avg", comm=comm), np.float64)
    scale = steps * np.abs(avg_g).max()
    if tol is None:
        assert b.states[0].residual is None
        agree(comm, np.abs(sent - steps * avg_g).max() > 0.1 * scale, "top-k without EF")
        return
    residuals = np.asarray(pyar.allreduce(b.states[0].residual, op="avg", comm=comm),
                           np.float64)
    off = float(np.abs(sent + residuals - steps * avg_g).max())
    agree(comm, off <= tol * scale, f"{spec}: {off} off, scale {scale}")


def test_mismatched_registration_raises_everywhere(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks to disagree")
    shapes = [(4,), (3, 2)] if comm.rank else [(4,), (3, 3)]
    with pytest.raises(pyar.MismatchError, match="registered different gradients"):
        pyar.GradientBuckets([np.ones(s, np.float32) for s in shapes], comm=comm, timeout=60)
    with pytest.raises(pyar.MismatchError):
        pyar.GradientBuckets([np.ones(4, np.float32)], comm=comm, timeout=60,
                             compression="fp16" if comm.rank else None)


def test_arguments_refused_on_one_rank_raise_on_every_rank(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks to disagree")
    spec = "zip" if comm.rank == comm.size - 1 else None
    with pytest.raises(ValueError, match="unknown compression" if spec else
                       f"rank {comm.size - 1}'s GradientBuckets arguments were refused"):
        pyar.GradientBuckets([np.ones(4, np.float32)], comm=comm, compression=spec, timeout=60)


def test_an_unused_gradient_raises_there_and_hangs_no_one(comm):
    grads = [np.ones(10, np.float32) * (comm.rank + 1), np.ones(20, np.float32)]
    b = pyar.GradientBuckets(grads, bucket_cap_mb=1e-5, comm=comm, timeout=60)
    error = None
    b.ready(1)
    if comm.rank != 0:
        b.ready(0)
    try:
        b.wait()
    except ValueError as e:
        error = str(e)
    agree(comm, (error is not None) == (comm.rank == 0), f"error: {error}")
    if comm.rank == 0:
        assert "gradient 0 not marked ready" in error
    for i in (0, 1):        # the next step runs normally everywhere
        b.ready(i)
    b.wait()
    agree(comm, np.allclose(grads[1], 1.0))


def test_compressed_training_stays_within_the_stated_margins(comm):
    """The training guide's claims, on fewer steps: fp16, bf16 and int8 end within 1% of uncompressed
    training's held-out loss, top-k 1% with error feedback within 10%, and top-k without it
    visibly worse (over 10% above the one with it). At 2 and 3 ranks only: 360 steps of
    training take ~15 s on 2 ranks here, 46 s on 8."""
    if comm.size not in (2, 3):
        pytest.skip("runs at 2 and 3 ranks")
    ex = example()
    final = {name: ex.train(comm, spec, steps=60, batch=8 * comm.size)[1][-1][1]
             for name, spec in ex.VARIANTS}
    none = final["none"]
    ok = all(abs(final[n] / none - 1) < 0.01 for n in ("fp16", "bf16", "int8")) and \
        abs(final["topk 1% + EF"] / none - 1) < 0.1 and \
        final["topk 1%, no EF"] > 1.1 * final["topk 1% + EF"]
    agree(comm, ok, f"final losses {final}")
