"""Reference values: what a reduction of every rank's input is, computed exactly with numpy,
and the scale its rounding error is relative to. The collectives' postconditions
(:meth:`pyar.collectives.Collective.expected`) and :mod:`pyar.verify` use them."""

from __future__ import annotations

import numpy as np

from ..core.ops import Op, is_float, resolve


def reference(inputs, op) -> np.ndarray:
    """The reduction of per-rank ``inputs`` with numpy: exact dtype for integers, float64 for floats."""
    op = resolve(op)
    stack = np.stack([np.asarray(x) for x in inputs])
    if is_float(stack.dtype):
        stack = stack.astype(np.float64)
    ufunc = {Op.SUM: np.add, Op.AVG: np.add, Op.PROD: np.multiply,
             Op.MAX: np.maximum, Op.MIN: np.minimum}[op]
    result = ufunc.reduce(stack, axis=0)
    if op is Op.AVG:
        result = result / len(inputs)
    return result


def magnitude(inputs, op) -> np.ndarray:
    """Per element, the scale the rounding error is proportional to (float64)."""
    op = resolve(op)
    stack = np.abs(np.stack([np.asarray(x, dtype=np.float64) for x in inputs]))
    if op is Op.PROD:
        return np.multiply.reduce(stack, axis=0)
    total = stack.sum(axis=0)
    return total / len(inputs) if op is Op.AVG else total
