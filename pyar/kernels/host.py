"""Host kernels: the loops of :mod:`._loops` over numpy arrays, compiled by Numba on first
use per signature and cached on disk (``NUMBA_CACHE_DIR``, else ``__pycache__``).

Numba checks a cached kernel against this file's modification time only, not
against ``_loops.py`` and ``_half.py``: ``python -m pyar.kernels --fresh`` (which
``make`` runs whenever kernels/ changes) empties the cache and compiles anew.
"""

from numba import njit
from numba.core.extending import intrinsic

from ._cache import serialise
from ._half import bitcasts
from ._loops import loops

_L = loops(njit, njit, *bitcasts(intrinsic))
_fold_int, _fold_float, _fold_f16, _fold_bf16 = _L.fold_int, _L.fold_float, _L.fold_f16, _L.fold_bf16
_divide_f16, _divide_bf16 = _L.divide_f16, _L.divide_bf16
_widen_f16, _narrow_f16 = _L.widen_f16, _L.narrow_f16
_widen_bf16, _narrow_bf16 = _L.widen_bf16, _L.narrow_bf16


@njit(cache=True, nogil=True)
def fold_int(dst, src, op):
    _fold_int(dst, src, op, 0, 1)


@njit(cache=True, nogil=True)
def fold_float(dst, src, op, nan):
    _fold_float(dst, src, op, nan, 0, 1)


@njit(cache=True, nogil=True)
def fold_f16(dst, src, op):
    _fold_f16(dst, src, op, 0, 1)


@njit(cache=True, nogil=True)
def fold_bf16(dst, src, op):
    _fold_bf16(dst, src, op, 0, 1)


@njit(cache=True, nogil=True)
def divide_f16(dst, src, divisor):
    _divide_f16(dst, src, divisor, 0, 1)


@njit(cache=True, nogil=True)
def divide_bf16(dst, src, divisor):
    _divide_bf16(dst, src, divisor, 0, 1)


@njit(cache=True, nogil=True)
def widen_f16(dst, src):
    _widen_f16(dst, src, 0, 1)


@njit(cache=True, nogil=True)
def narrow_f16(dst, src):
    _narrow_f16(dst, src, 0, 1)


@njit(cache=True, nogil=True)
def widen_bf16(dst, src):
    _widen_bf16(dst, src, 0, 1)


@njit(cache=True, nogil=True)
def narrow_bf16(dst, src):
    _narrow_bf16(dst, src, 0, 1)


KERNELS = tuple(map(serialise, (fold_int, fold_float, fold_f16, fold_bf16,
                                divide_f16, divide_bf16, widen_f16, narrow_f16,
                                widen_bf16, narrow_bf16)))
