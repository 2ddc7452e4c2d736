"""Reduction operators and the dtypes pyar reduces."""

from __future__ import annotations

import sys
from enum import Enum

import numpy as np

from .. import kernels


class Op(str, Enum):
    """A reduction operator; also accepted as its name or as mpi4py's ``MPI.SUM`` etc."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    AVG = "avg"

    @property
    def reduction(self) -> Op:
        """The op the schedule folds with: ``avg`` folds as ``sum`` and divides at the end."""
        return Op.SUM if self is Op.AVG else self

    def __str__(self):
        return self.value


DTYPES = kernels.DTYPES      # int8..int64, uint8..uint64, float16, bfloat16, float32, float64
HALF = kernels.HALF          # float16 and bfloat16 (``ml_dtypes.bfloat16``): MPI has neither
FLOATS = frozenset(d for d in DTYPES if d.kind == "f" or d in HALF)
_SUPPORTED = frozenset(DTYPES)
_DTYPE_NAMES = ", ".join(str(d) for d in DTYPES)


_BY_NAME = {**{o.value: o for o in Op}, **{o.name: o for o in Op}}


def resolve(op) -> Op:
    """The :class:`Op` named by ``op`` (an Op, a name, or an mpi4py ``MPI.Op``)."""
    if isinstance(op, str):             # an Op is a str too
        found = _BY_NAME.get(op)
        if found is not None:
            return found
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and isinstance(op, mpi.Op):
        for name in ("SUM", "PROD", "MAX", "MIN"):
            if op == getattr(mpi, name):
                return Op[name]
    raise ValueError(f"op must be one of {[o.value for o in Op]} (or MPI.SUM/PROD/MAX/MIN), "
                     f"got {op!r}")


def check_dtype(dtype, name: str = "x") -> np.dtype:
    """``dtype`` (a dtype or its name, ``"bfloat16"`` too) if pyar reduces it, else a TypeError
    naming the supported set, or for a supported type in the other byte order, the fix
    (``name`` is the array's, for the message)."""
    dtype = np.dtype(dtype)
    if dtype in _SUPPORTED:
        return dtype
    native = dtype.newbyteorder("=")
    if native in _SUPPORTED:
        raise TypeError(f"{name} has dtype {dtype.str}: non-native byte order; "
                        f"use {name}.astype('={native.str[1:]}')")
    raise TypeError(f"dtype {dtype} is not supported; expected one of: {_DTYPE_NAMES}")


def is_float(dtype) -> bool:
    """Whether ``dtype`` is a floating type (bfloat16 too, whose numpy kind is ``V``)."""
    return np.dtype(dtype) in FLOATS


def check(op: Op, dtype: np.dtype) -> None:
    """Raise TypeError if ``op`` is undefined on ``dtype`` (avg needs a floating dtype)."""
    if op is Op.AVG and dtype not in FLOATS:
        raise TypeError(f"op 'avg' needs a floating dtype, got {dtype}; use 'sum' and divide")


def accumulator(dtype, op: Op | None, asked=None) -> np.dtype:
    """The dtype a collective on ``dtype`` data with ``op`` runs in: its buffers, its messages
    and its folds. ``asked`` (a call's ``reduce_dtype``), if given: ``dtype`` itself, or
    float32 for a half type. Else float32 for float16 and bfloat16 under sum, avg and
    prod, whose partial results kept in the half type overflow or lose bits where the
    exact result does not: the result is rounded to the half type once, at the end, and
    the messages carry twice the bytes; ``dtype`` itself otherwise (max and min are
    exact in any type; a collective that does not reduce moves x's bytes)."""
    dtype = np.dtype(dtype)
    if op is None:
        return dtype
    if asked is not None:
        wide = np.dtype(asked)
        if wide == dtype or (dtype in HALF and wide == np.float32):
            return wide
        allowed = f"{dtype} or float32" if dtype in HALF else f"{dtype}"
        raise ValueError(f"reduce_dtype must be None or {allowed} for {dtype} data, "
                         f"got {asked!r}")
    if dtype in HALF and op is not Op.MAX and op is not Op.MIN:
        return np.dtype(np.float32)
    return dtype


def finalize(buf, op: Op, size: int) -> None:
    """Finish ``op`` on a reduced buffer in place: ``avg`` divides the sum by ``size``
    (:func:`pyar.kernels.divide_into`: half types through float32)."""
    if op is Op.AVG and size > 1:
        kernels.divide_into(buf, buf, size)
