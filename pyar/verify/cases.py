"""The cases ``pyar verify`` sweeps: one small dict each, and the arrays a case gives each rank.

A case is plain data (it travels as JSON to the MPI job and into reproducers)::

    {"dim": "counts", "collective": "allreduce", "count": 1025, "dtype": "float32",
     "op": "sum", "layout": "contiguous", "mode": "new", "calls": 1, "interleave": False,
     "race": False, "values": "sample", "seed": 0}

``collective``: what the target computes (:data:`COLLECTIVES`); ``count``: the elements of
each rank's x (reduce_scatter cuts x.ravel() into one block per rank as numpy.array_split
does, so any count has a result: blocks of two sizes where the ranks do not divide it,
empty ones below the rank count; allgather's result holds ``size * count``); ``op``: the
reduction, and for allgather, which reduces nothing, only the pattern of the values;
``layout``: contiguous, 2d, 3d, offset (a view one element into a buffer), strided (every
other element), transposed (a 2-D transpose); ``mode``: new (``out=None``), out (an ``out``
array), inplace (``out=x``); ``calls``: calls in a row, each with fresh data (stale state);
``interleave``: the user's own point-to-point messages, on the same communicator and tags,
in flight around each call; ``race``: after each call returns, the caller at once
overwrites x's buffer (a send the target left in flight from it then carries that) and
later checks that the result has not changed since (a receive left in flight into it), and
each call finds the ranks late by different few milliseconds (a rendezvous send left
pending while the target reuses its buffer); x is then not checked for being left as it
was; ``values``: see :func:`contribution`.

Each dimension varies one of these from a base case (float32 sum of 1031 elements,
contiguous, a new result, one call); the ``quick`` and ``smoke`` profiles take fewer values.
The races dimension's counts are large (64 KiB - 4 MiB of float32 or int32, three calls):
messages an MPI library sends by rendezvous, not eagerly copied.
The reproducible dimension, not among the defaults (``pyar verify --reproducible``), holds
a float sum or average to the same bits whatever holds the contributions: every case's
call is made again with the contributions reversed and rotated among the ranks and cut
into two calls, and a sum with the last rank's contribution zeros is made by the other
ranks alone, on a communicator of their own (:meth:`pyar.verify.worker.Runner._reorderings`).
Every collective gets the same sweep, less what it does not define (allgather has no in
place form), and reduce_scatter's counts add multiples of the rank count (equal blocks, as
MPI_Reduce_scatter_block's).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..core import ops
from ..core.ops import Op

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather")
DTYPES = [str(d) for d in ops.DTYPES]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
OPS = [o.value for o in Op]
LAYOUTS = ["contiguous", "2d", "offset", "strided", "transposed", "3d"]
MODES = ["new", "out", "inplace"]
VALUES = ["sample", "random", "negative", "special", "overflow", "big", "halfmax", "halfcancel"]
DIMENSIONS = ["counts", "dtypes", "layouts", "modes", "repeat", "interleave", "races",
              "values", "reproducible"]
DEFAULT_DIMENSIONS = DIMENSIONS[:-1]    # reproducible sums: a property only some targets claim
PROFILES = ("full", "quick", "smoke")
THRESHOLDS = (64 << 10, 256 << 10, 1 << 20, 4 << 20)      # bytes: typical segment sizes
BASE = {"collective": "allreduce", "count": 1031, "dtype": "float32", "op": "sum",
        "layout": "contiguous", "mode": "new", "calls": 1, "interleave": False,
        "race": False, "values": "sample", "seed": 0}
SMOKE_VALUES = [("special", "float32", "max"), ("special", "float32", "sum"),
                ("special", "float16", "min"), ("overflow", "int8", "sum"),
                ("overflow", "uint64", "prod"), ("big", "int64", "sum"),
                ("halfmax", "bfloat16", "sum"), ("negative", "float64", "prod"),
                ("halfcancel", "float16", "avg"), ("halfcancel", "bfloat16", "sum")]
TAGS = (0, 1, 7, 99)        # the user's own messages in the interleave dimension
LATE = 0.005                # seconds: the steps by which ranks are late in the races dimension
POISON = 0x5A               # the byte a race case overwrites x's buffer with
PREFIX = "@@pyar-verify "   # a job's answer line on its stdout (the target may print too)


def sample(rank: int, count: int, dtype, op, seed: int = 0) -> np.ndarray:
    """Rank ``rank``'s test contribution: values that depend on rank, index and seed.

    A missing or doubled contribution changes the result: sums get
    ``(rank + 1) * 1000 + ...`` (never 0 for rank 0), products get factors
    away from 1 (odd integers >= 3, floats in [1 + 1/64, 1.2]), max/min get
    values spread over ranks and indices, with zeros of both signs at every
    13th element (a max or min must not depend on which rank's zero came first).
    """
    op = ops.resolve(op)
    dtype = np.dtype(dtype)
    i = np.arange(count, dtype=np.int64)
    mix = (i * 37 + rank * 7919 + seed * 104729) % 1009
    if op is Op.PROD:
        steps = 1 + (mix % 12)
        if ops.is_float(dtype):
            return (1 + steps / 64).astype(dtype)
        return (2 * steps + 1).astype(dtype)
    if op in (Op.MAX, Op.MIN):
        values = mix - 504
    else:
        values = (rank + 1) * 1000 + mix
    if ops.is_float(dtype):
        values = values + (mix % 7) / 8
        if dtype == np.float16 and op not in (Op.MAX, Op.MIN):
            values = values / 64
        values = values.astype(dtype)
        if op in (Op.MAX, Op.MIN):          # signed zeros meet at every 13th element
            values[i % 13 == 0] = -0.0 if rank % 2 else 0.0
        return values
    if dtype.kind == "u" and op in (Op.MAX, Op.MIN):
        values = values + 504
    return values.astype(dtype)


def case(dim: str, **fields) -> dict:
    return {"dim": dim, **BASE, **fields}


def valid(c: dict) -> bool:
    """Whether a case asks something defined: avg on floats, each value kind on its dtypes,
    in place where the collective has that form."""
    floating, dtype, op = c["dtype"] in FLOATS, c["dtype"], c["op"]
    if op == "avg" and not floating:
        return False
    if c["collective"] == "allgather" and c["mode"] == "inplace":
        return False
    if c.get("race") and c["mode"] == "inplace":       # x is the result: not overwritten
        return False
    if c["dim"] == "reproducible" and not (floating and op in ("sum", "avg")
                                           and c["collective"] == "allreduce"):
        return False
    return {"sample": True, "random": op in ("sum", "avg") or floating,
            "negative": op == "prod" and not dtype.startswith("uint"),
            "special": floating, "overflow": not floating and op in ("sum", "prod"),
            "big": dtype in ("int64", "uint64"),
            "halfmax": dtype in ("float16", "bfloat16") and op != "prod",
            "halfcancel": dtype in ("float16", "bfloat16") and op in ("sum", "avg")}[c["values"]]


def counts(size: int, itemsize: int, profile: str, collective: str = "allreduce") -> list[int]:
    """0, 1, N-1, N, N+1, primes, odd counts beside powers of two, and the counts of
    :data:`THRESHOLDS` bytes (each -1, +0, +1); for reduce_scatter also N x 13 and N x 1031
    (equal blocks of more than one element)."""
    if profile == "smoke":
        small = [0, 1, size + 1, 13]
        edges = [THRESHOLDS[0] // itemsize + 1]
    elif profile == "quick":
        small = [0, 1, size - 1, size, size + 1, 13, 1021, 4097]
        edges = [e + d for e in (THRESHOLDS[0] // itemsize,) for d in (-1, 1)]
    else:
        small = [0, 1, 2, 3, size - 1, size, size + 1, 2 * size + 1, 7, 13, 31, 127, 1021]
        small += [2 ** k + d for k in (4, 6, 8, 10, 12, 14) for d in (-1, 1)]
        edges = [t // itemsize + d for t in THRESHOLDS for d in (-1, 0, 1)]
    if collective == "reduce_scatter":
        small += [size * 13] + ([size * 1031] if profile != "smoke" else [])
    return sorted(set(c for c in small + edges if c >= 0))


def sweep(size: int, profile: str = "full", dims=None,
          collective: str = "allreduce") -> list[dict]:
    """The cases of ``collective`` in ``profile`` for ``size`` ranks, in the dimensions ``dims``
    (default :data:`DEFAULT_DIMENSIONS`)."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got "
                         f"{collective!r}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    dims = DEFAULT_DIMENSIONS if dims is None else list(dims)
    unknown = sorted(set(dims) - set(DIMENSIONS))
    if unknown:
        raise ValueError(f"unknown dimension(s) {', '.join(unknown)}; expected some of "
                         f"{', '.join(DIMENSIONS)}")
    full, smoke = profile == "full", profile == "smoke"
    big = THRESHOLDS[0] // 4 + 1                 # just above 64 KiB of float32
    out = []
    if "counts" in dims:
        kinds = [("float32", "sum"), ("int32", "sum")] + ([("uint8", "max"), ("float64", "min")]
                                                         if full else [])
        for dtype, op in kinds if not smoke else kinds[:1]:
            out += [case("counts", count=n, dtype=dtype, op=op)
                    for n in counts(size, np.dtype(_dtype(dtype)).itemsize, profile,
                                    collective)]
    if "dtypes" in dims:
        chosen = OPS if not smoke else ["sum", "max"]
        out += [c for d in DTYPES for o in chosen
                if valid(c := case("dtypes", dtype=d, op=o, count=1031 if not smoke else 37))
                and (not smoke or o == "sum" or d in FLOATS)]
    if "layouts" in dims:
        kinds = [("float32", "sum"), ("int16", "max"), ("float64", "prod")] if full else \
            [("float32", "sum")]
        sizes = [1032, big + 7] if full else [1032]
        out += [case("layouts", layout=layout, dtype=d, op=o, count=n, mode=m)
                for layout in (LAYOUTS if not smoke else ["strided", "transposed", "3d"])
                for d, o in kinds for n in sizes for m in (MODES if d == "float32" else ["new"])]
    if "modes" in dims:
        kinds = [("float32", "sum"), ("int32", "max"), ("float64", "avg")]
        sizes = [1031, big] if not smoke else [1031]
        out += [case("modes", mode=m, dtype=d, op=o, count=n)
                for m in MODES for d, o in (kinds if not smoke else kinds[:1]) for n in sizes]
    if "repeat" in dims:
        plans = [(3, "new", 1031, "float32"), (3, "inplace", 1031, "int32"),
                 (3, "out", big, "float32")]
        out += [case("repeat", calls=k, mode=m, count=n, dtype=d, seed=1)
                for k, m, n, d in (plans if not smoke else plans[:1])]
    if "interleave" in dims:
        plans = [(1031, "float32"), (1, "int32"), (big, "float64")]
        out += [case("interleave", interleave=True, count=n, dtype=d, calls=2)
                for n, d in (plans if not smoke else plans[:1])]
    if "races" in dims:                         # large messages: rendezvous, not eager
        plans = [(t // 4 + 1, m, d) for t in THRESHOLDS for m in ("new", "out")
                 for d in ("float32", "int32")] if full else \
            [(THRESHOLDS[2] // 4 + 1, "new", "float32"), (big, "out", "int32")] if not smoke \
            else [(THRESHOLDS[1] // 4 + 1, "new", "float32")]
        out += [case("races", race=True, count=n, mode=m, dtype=d, calls=3, seed=3)
                for n, m, d in plans]
    if "values" in dims:
        if smoke:
            out += [case("values", values=v, dtype=d, op=o, seed=2) for v, d, o in SMOKE_VALUES]
        else:
            out += [c for v in VALUES[1:] for d in DTYPES for o in OPS
                    if valid(c := case("values", values=v, dtype=d, op=o, seed=2))
                    and (full or d in ("int8", "uint64", "int64", "float16", "bfloat16",
                                       "float32", "float64"))]
    if "reproducible" in dims:
        plans = [("random", d, "sum", n) for d in ("float32", "float64", "float16", "bfloat16")
                 for n in (1031, big)] + \
            [("special", "float32", "sum", 1031), ("halfcancel", "float16", "sum", 1031),
             ("halfcancel", "bfloat16", "avg", 1031), ("random", "float64", "avg", 1031)]
        if not full:
            plans = plans[:1] + plans[-4:] if not smoke else plans[:1]
        out += [case("reproducible", values=v, dtype=d, op=o, count=n, seed=4)
                for v, d, o, n in plans]
    return [c for c in ({**c, "collective": collective} for c in out) if valid(c)]


def _dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def dtype_of(c: dict) -> np.dtype:
    return _dtype(c["dtype"])


def shape_of(c: dict) -> tuple:
    """The shape of x: 1-D, or for 2d, 3d and transposed the count factored."""
    n = c["count"]
    if c["layout"] in ("2d", "transposed"):
        a = _factor(n)
        return (a, n // a) if n else (0, 3)
    if c["layout"] == "3d":
        a = _factor(n)
        b = _factor(n // a) if n else 1
        return (a, b, n // a // b) if n else (2, 0, 3)
    return (n,)


def _factor(n: int) -> int:
    """The largest divisor of n not above its square root (1 for a prime)."""
    best = 1
    for d in range(1, int(n ** 0.5) + 1):
        if n % d == 0:
            best = d
    return best


def contribution(c: dict, rank: int, call: int) -> np.ndarray:
    """Rank ``rank``'s values for call ``call`` of case ``c``, flat (x's elements in C order).

    ``sample``: :func:`pyar.verify.sample` (depends on rank, index and seed);
    ``random``: random floats whose sum depends on the order (integers: the whole range,
    sums wrap); ``negative``: factors of both signs for prod; ``special``: NaN, +-inf and
    +-0 among ordinary values; ``overflow``: integers whose sum and product wrap as in C;
    ``big``: 64-bit integers above 2**53; ``halfmax``: float16 and bfloat16 near their
    largest finite value (sums overflow to inf on some orders); ``halfcancel``: see
    :func:`half_cancel`.
    """
    dtype, n, kind = dtype_of(c), c["count"], c["values"]
    seed = c["seed"] * 1000 + call
    if kind == "sample":
        return sample(rank, n, dtype, c["op"], seed)
    rng = np.random.default_rng([seed, rank, DTYPES.index(c["dtype"])])
    floating = c["dtype"] in FLOATS
    if kind == "random":
        if not floating:
            info = np.iinfo(dtype)
            return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        scale = 2.0 ** rng.integers(-8, 8, n) if dtype.itemsize > 2 else 2.0 ** rng.integers(-3, 3, n)
        return (rng.standard_normal(n) * scale).astype(dtype)
    if kind == "negative":
        if floating:
            return (rng.choice([-1, 1], n) * rng.uniform(0.5, 2.0, n)).astype(dtype)
        return rng.choice([-3, -1, 1, 3], n).astype(dtype)
    if kind == "special":
        base = (rng.standard_normal(n) * 4).astype(dtype)
        pick = rng.integers(0, 12, n)
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float64).astype(dtype)
        chosen = pick < len(specials)
        base[chosen] = specials[pick[chosen]]
        return base
    info = np.iinfo(dtype) if not floating else None
    if kind == "overflow":
        if c["op"] == "prod":
            return rng.integers(max(info.max >> (info.bits // 2), 2), info.max, n, dtype=dtype)
        return rng.integers(info.max // 2, info.max, n, dtype=dtype, endpoint=True)
    if kind == "big":
        hi = (1 << 62) if c["dtype"] == "int64" else (1 << 63)
        return rng.integers(1 << 53, hi, n, dtype=dtype) | np.array(1, dtype)
    if kind == "halfcancel":
        return half_cancel(dtype, n, rank, np.random.default_rng([seed, DTYPES.index(c["dtype"])]),
                           rng)
    if kind == "halfmax":
        top = float(ml_dtypes.finfo(dtype).max)
        values = rng.uniform(0.3, 1.0, n) * top * rng.choice([-1, 1, 1, 1], n)
        return values.astype(dtype)
    raise ValueError(f"unknown value kind {kind!r}; expected one of {', '.join(VALUES)}")


def half_cancel(dtype, n: int, rank: int, shared, own) -> np.ndarray:
    """Values whose exact sum and average are finite in the half type ``dtype`` but whose
    partial sums overflow it in some orders: at each element ranks 0-3 hold +A, +B, -A, -B in
    an order drawn per element (``shared``: the same generator on every rank), all signs
    flipped at random, other ranks small values (from ``own``). A + B lies above the half
    type's overflow threshold and below float32's largest value, so a partial sum in the half
    type is inf wherever A meets B first (the average too, if summed before the division),
    while float32 partial sums stay exact: A = 2**E (1 + j/2**m), B = 2**(E-2) (1 + k/2**m),
    4j + k = 3 * 2**m - 1 (E the top binade's exponent, m the mantissa bits), so
    A + B = 2**E (2 - 2**-(m+2)), three quarters of the way from the threshold to 2**(E+1)."""
    info = ml_dtypes.finfo(dtype)
    m, top = info.nmant, 2.0 ** (info.maxexp - 1)
    j = shared.integers(2 ** (m - 1), 2 ** (m - 1) + 2 ** (m - 2), n)
    a = top * (1 + j / 2 ** m)
    b = top / 4 * (1 + (3 * 2 ** m - 1 - 4 * j) / 2 ** m)
    roles = shared.permuted(np.tile(np.arange(4), (n, 1)), axis=1)
    sign = shared.choice([-1.0, 1.0], n)
    if rank >= 4:
        return own.standard_normal(n).astype(dtype)
    role = roles[:, rank]
    return (sign * np.choose(role, [a, b, -a, -b])).astype(dtype)


def arrays(c: dict, flat: np.ndarray):
    """``(x, base)``: x in the case's layout holding ``flat``; base is the buffer it lives in."""
    dtype, shape, layout = dtype_of(c), shape_of(c), c["layout"]
    n = flat.size
    if layout == "strided":
        base = np.zeros(2 * n, dtype)
        x = base[::2]
    elif layout == "offset":
        base = np.zeros(n + 1, dtype)
        x = base[1:]
    elif layout == "transposed":
        base = np.zeros(shape[::-1], dtype)
        x = base.T
    else:
        base = np.zeros(shape, dtype)
        x = base
    x[...] = flat.reshape(x.shape)
    return x, base
