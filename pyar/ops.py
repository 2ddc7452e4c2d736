"""Reduction operators and the dtypes pyar reduces."""

from __future__ import annotations

import sys
from enum import Enum

import numpy as np


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


DTYPES = tuple(np.dtype(t) for t in (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64"))
_SUPPORTED = frozenset(DTYPES)
_DTYPE_NAMES = ", ".join(str(d) for d in DTYPES)
_NOT_YET = {"float16": "float16", "bfloat16": "bfloat16"}


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


def check_dtype(dtype) -> np.dtype:
    """``dtype`` if pyar reduces it, else a TypeError naming the supported set."""
    dtype = np.dtype(dtype)
    if dtype in _SUPPORTED:
        return dtype
    hint = " (half precision comes with the Numba kernels)" if dtype.name in _NOT_YET else ""
    raise TypeError(f"dtype {dtype} is not supported{hint}; expected one of: {_DTYPE_NAMES}")


def check(op: Op, dtype: np.dtype) -> None:
    """Raise TypeError if ``op`` is undefined on ``dtype`` (avg needs a floating dtype)."""
    if op is Op.AVG and dtype.kind != "f":
        raise TypeError(f"op 'avg' needs a floating dtype, got {dtype}; use 'sum' and divide")


def finalize(buf, op: Op, size: int) -> None:
    """Finish ``op`` on a reduced buffer in place: ``avg`` divides the sum by ``size``."""
    if op is Op.AVG and size > 1:
        np.divide(buf, size, out=buf)
