"""``python -m pyar.kernels.bench``: the host kernels' throughput beside numpy's, per op and dtype.

For each size, op and dtype, in one run, it times ``reduce_into(dst, src,
op)`` (with its argument checks: about a microsecond), the Numba kernel it
calls, called directly, and the numpy ufunc doing the same fold
(``np.add(dst, src, out=dst)`` etc.; for float16 numpy's own loops, for
bfloat16 ml_dtypes' ufuncs); ``avg`` is ``divide_into(out, x, 3)`` beside
``np.divide(x, 3, out=out)``. The numpy float max/min are plain
``np.maximum``/``np.minimum``, without the kernels' signed-zero and NaN rules.
GB/s counts the bytes of one operand per second (the kernel reads two arrays
and writes one); each figure is the best of the repetitions. One size should
fit in L2 (64 KiB), one not (64 MiB).

Usage: python -m pyar.kernels.bench [SIZE ...]   (sizes in KiB; default 64 65536)
"""

import sys
import time

import numpy as np

from . import _CODES, DTYPES, HALF, OPS, _host_kernels, divide_into, reduce_into, warm_up

_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _best(call, seconds):
    """Best time of ``call`` over repetitions lasting about ``seconds``."""
    call()
    best, spent, reps = float("inf"), 0.0, 0
    while spent < seconds or reps < 3:
        start = time.perf_counter()
        call()
        took = time.perf_counter() - start
        best, spent, reps = min(best, took), spent + took, reps + 1
    return best


def _direct(entry, dst, src, arg):
    """The kernel of a host-table ``entry`` bound to its arguments: no checks, no dispatch."""
    kernel, half, extra = entry
    if half:
        d, s = dst.view(np.uint16), src.view(np.uint16)
        return lambda: kernel(d, s, arg)
    if kernel is np.divide:
        divisor = extra(arg)
        return lambda: kernel(src, divisor, out=dst)
    if extra is None:
        return lambda: kernel(dst, src, arg)
    return lambda: kernel(dst, src, arg, extra)


def run(sizes_kib=(64, 65536), budget=0.05, file=sys.stdout):
    """Print one row per size, dtype and op; returns the rows as dicts."""
    warm_up()
    rows = []
    print("# pyar.kernels.bench: GB/s of one operand, best of repetitions; "
          "'x numpy' = reduce_into's speed / numpy's", file=file)
    print(f"# {'size':>8} {'dtype':>9} {'op':>6} {'reduce_into':>12} {'kernel':>9} {'numpy':>9} "
          f"{'x numpy':>8}", file=file)
    rng = np.random.default_rng(0)
    for kib in sizes_kib:
        for dtype in DTYPES:
            count = kib * 1024 // dtype.itemsize
            a = rng.integers(1, 4, count).astype(dtype)
            b = rng.integers(1, 4, count).astype(dtype)
            nbytes = a.nbytes
            for op in OPS + ("avg",):
                if op == "avg":           # the average's division, into another array
                    if dtype.kind != "f" and dtype not in HALF:
                        continue
                    out = np.empty_like(a)
                    api = lambda: divide_into(out, a, 3)  # noqa: E731
                    kernel = _direct(_host_kernels(out, a, None)[1], out, a,
                                     np.float32(3) if dtype in HALF else 3)
                    reference = lambda: np.divide(a, 3, out=out)  # noqa: E731
                else:
                    dst = a.copy()
                    api = lambda: reduce_into(dst, b, op)  # noqa: E731
                    kernel = _direct(_host_kernels(dst, b, None)[0], dst, b, _CODES[op])
                    reference = lambda: _UFUNCS[op](dst, b, out=dst)  # noqa: E731
                with np.errstate(all="ignore"):
                    times = [_best(call, budget) for call in (api, kernel, reference)]
                row = dict(kib=kib, dtype=str(dtype), op=op,
                           **{k: nbytes / t / 1e9 for k, t in zip(("api", "kernel", "numpy"),
                                                                  times)})
                rows.append(row)
                print(f"  {kib:>7}K {row['dtype']:>9} {op:>6} {row['api']:>12.2f} "
                      f"{row['kernel']:>9.2f} {row['numpy']:>9.2f} {times[2] / times[0]:>8.2f}",
                      file=file, flush=True)
    return rows


if __name__ == "__main__":
    run(tuple(int(s) for s in sys.argv[1:]) or (64, 65536))
