"""Reduction kernels: fold one array into another in place.

Installed as ``pyar.kernels`` and never imports the rest of pyar, so it can be
used, tested and benchmarked on its own. Ops are named by the strings
``"sum" "prod" "max" "min"``.

Every kernel is commutative bit for bit (``a op b`` and ``b op a`` have the
same bits), so that algorithms in which two ranks fold the same pair in
opposite order (recursive doubling) still give every rank identical bits. For
floats that needs care only in max/min: ``-0.0`` and ``+0.0`` compare equal,
and numpy returns whichever came first; here max prefers ``+0.0`` and min
``-0.0`` (IEEE 754-2019 maximum/minimum). One exception remains: when both
operands are NaNs with different payloads, the first operand's payload wins.
"""

import numpy as np

__all__ = ["OPS", "reduce_into"]

_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
# equal floats have equal bits but for the sign of zero: AND keeps +0.0, OR keeps -0.0
_TIES = {"max": np.bitwise_and, "min": np.bitwise_or}
_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}

OPS = tuple(_UFUNCS)


def reduce_into(dst, src, op):
    """``dst = dst op src`` elementwise, in place; integers wrap as in C, max/min propagate NaN.

    ``dst`` and ``src`` are host arrays of one dtype and length.
    """
    try:
        ufunc = _UFUNCS[op]
    except KeyError:
        raise ValueError(f"op must be one of {OPS}, got {op!r}") from None
    if dst.dtype.kind == "f" and op in _TIES:
        tie = np.equal(dst, src)
        bits = _BITS[dst.dtype.itemsize]
        _TIES[op](dst.view(bits), src.view(bits), out=dst.view(bits), where=tie)
        ufunc(dst, src, out=dst, where=~tie)
    else:
        ufunc(dst, src, out=dst)
