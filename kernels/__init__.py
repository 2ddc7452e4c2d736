"""Reduction kernels: fold one array into another in place.

Installed as ``pyar.kernels`` and never imports the rest of pyar, so it can be
used, tested and benchmarked on its own. Ops are named by the strings
``"sum" "prod" "max" "min"``.
"""

import numpy as np

__all__ = ["OPS", "reduce_into"]

_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}

OPS = tuple(_UFUNCS)


def reduce_into(dst, src, op):
    """``dst = dst op src`` elementwise, in place; integers wrap as in C, max/min propagate NaN.

    ``dst`` and ``src`` are host arrays of one dtype and length.
    """
    try:
        ufunc = _UFUNCS[op]
    except KeyError:
        raise ValueError(f"op must be one of {OPS}, got {op!r}") from None
    ufunc(dst, src, out=dst)
