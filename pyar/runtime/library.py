"""The MPI library pyar runs on, and the mpiexec that launches it: detected, never assumed.

In a process running MPI (:func:`current`, decided once):

- which library: its family (``mpich``, ``openmpi``, ``impi``, ``mvapich``, else
  ``unknown``) and version, from ``MPI_Get_library_version``; its ``slug``
  names the tuning file of it (:func:`pyar.model.tuner.tuning_path`);
- its eager limit within a node, read through the MPI tool interface (the
  MPI_T control variable of its shared-memory transport, :data:`EAGER_CVARS`:
  Open MPI's ``btl_sm_eager_limit``, MPICH's cell size); None where it has
  none of them;
- whether its integer sums and products wrap around as C's unsigned arithmetic (and
  numpy's, and pyar's kernels) do: :func:`saturating` tries ``MPI_Reduce_local``.
  Open MPI 5.0.11's AVX op component saturates int8, uint8, int16 and uint16
  sums instead (``OMPI_MCA_op=^avx`` turns it off): where a library does, pyar's
  oracles (:func:`pyar.verify.library_reference`) reduce with numpy instead;
- CUDA-awareness (:func:`pyar.runtime.cuda.awareness`).

How pyar launches mpiexec on one machine is :mod:`pyar.runtime.launch`'s (no MPI there).
"""

from __future__ import annotations

import ctypes
import functools
import re
import struct
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from ..core.ops import DTYPES
from .cuda import libmpi_paths

FAMILIES = (("Open MPI", "openmpi"), ("Intel(R) MPI", "impi"), ("MVAPICH", "mvapich"),
            ("MPICH", "mpich"))
# The MPI_T control variable of each family's shared-memory eager limit (bytes).
EAGER_CVARS = {"openmpi": "btl_sm_eager_limit", "mpich": "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE"}


class Library(NamedTuple):
    family: str             # mpich, openmpi, impi, mvapich or unknown
    version: str            # e.g. "5.0.11", or "" if the version string has none
    description: str        # the first line of MPI_Get_library_version
    eager: int | None       # bytes: the shared-memory eager limit, if MPI_T tells it
    eager_source: str       # where eager came from, in words
    saturating: tuple       # ("int8 sum", ...): what MPI's predefined ops do not wrap

    @property
    def slug(self) -> str:
        """``family-version``, for file names (``mpich-5.0.2``): the tuning file's."""
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"{self.family}-{self.version}"
                      if self.version else self.family)


def family_of(text: str) -> str:
    """The family named in a library or mpiexec version string (``unknown`` if none is)."""
    for name, family in FAMILIES:
        if name.lower() in text.lower():
            return family
    return "unknown"


def version_of(text: str, family: str) -> str:
    """The first dotted number after the family's name in ``text`` ("" if none)."""
    names = [name for name, f in FAMILIES if f == family]
    at = text.lower().find(names[0].lower()) if names else 0
    found = re.search(r"\d+(?:\.\d+)+", text[max(at, 0):])
    return found.group(0) if found else ""


@functools.lru_cache(maxsize=None)
def current() -> Library:
    """The library of this process."""
    text = MPI.Get_library_version().strip("\x00 \n")
    family = family_of(text)
    cvar = EAGER_CVARS.get(family)
    eager = None if cvar is None else read_cvar(cvar)
    where = (f"MPI_T {cvar}" if eager is not None else
             f"MPI_T has no {cvar} (now)" if cvar else f"no MPI_T variable known for {family}")
    return Library(family, version_of(text, family), text.splitlines()[0].strip(), eager,
                   where, saturating())


def saturating() -> tuple:
    """``"dtype op"`` for each integer dtype and op (sum, prod) whose ``MPI_Reduce_local`` on
    1,024 pairs of numbers across the dtype's whole range differs from numpy's wrapping
    result (local: no communication)."""

    found = []
    rng = np.random.default_rng(16)
    for dtype in (d for d in DTYPES if d.kind in "iu"):
        info = np.iinfo(dtype)
        a, b = (rng.integers(info.min, info.max, 1024, dtype=dtype, endpoint=True)
                for _ in range(2))
        for name, op, ufunc in (("sum", MPI.SUM, np.add), ("prod", MPI.PROD, np.multiply)):
            got = b.copy()
            op.Reduce_local(a, got)
            if not np.array_equal(got, ufunc(a, b)):
                found.append(f"{dtype.name} {name}")
    return tuple(found)


def wraps(dtype, op: str) -> bool:
    """Whether the library's ``op`` (``sum prod max min avg``) on ``dtype`` gives numpy's
    result (:func:`saturating`)."""
    return f"{np.dtype(dtype).name} {'sum' if op == 'avg' else op}" not in current().saturating


def _libmpi():
    """The loaded MPI library as a ctypes CDLL with the MPI_T functions, or None."""
    for path in (None, *libmpi_paths()):
        try:
            lib = ctypes.CDLL(path)
            lib.MPI_T_cvar_get_info
        except (OSError, AttributeError):
            continue
        return lib
    return None


def read_cvar(name: str) -> int | None:
    """The integer MPI_T control variable ``name`` of the loaded library, or None (no MPI_T,
    no such variable, not an integer, or not readable without an object)."""
    lib = _libmpi()
    if lib is None:
        return None
    provided = ctypes.c_int()       # (asking for less than MPI has lowers Open MPI's level)
    if lib.MPI_T_init_thread(MPI.Query_thread(), ctypes.byref(provided)) != 0:
        return None
    codes = {MPI.INT.handle: "i", MPI.UNSIGNED.handle: "I", MPI.LONG.handle: "l",
             MPI.UNSIGNED_LONG.handle: "L", MPI.LONG_LONG.handle: "q",
             MPI.UNSIGNED_LONG_LONG.handle: "Q", MPI.COUNT.handle: "q"}
    try:
        index = ctypes.c_int()
        get_index = getattr(lib, "MPI_T_cvar_get_index", None)
        if get_index is None or get_index(name.encode(), ctypes.byref(index)) != 0:
            return None
        text, size, desc, desc_size = (ctypes.create_string_buffer(256), ctypes.c_int(256),
                                       ctypes.create_string_buffer(8), ctypes.c_int(8))
        verbosity, bind, scope = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        datatype, enum = ctypes.c_void_p(), ctypes.c_void_p()
        if lib.MPI_T_cvar_get_info(index, text, ctypes.byref(size), ctypes.byref(verbosity),
                                   ctypes.byref(datatype), ctypes.byref(enum), desc,
                                   ctypes.byref(desc_size), ctypes.byref(bind),
                                   ctypes.byref(scope)) != 0:
            return None
        code = codes.get(datatype.value or 0)
        handle, count = ctypes.c_void_p(), ctypes.c_int()
        if code is None or lib.MPI_T_cvar_handle_alloc(index, None, ctypes.byref(handle),
                                                       ctypes.byref(count)) != 0:
            return None
        try:
            value = (ctypes.c_char * 64)()
            if count.value != 1 or lib.MPI_T_cvar_read(handle, value) != 0:
                return None
            return struct.unpack_from(code, value)[0]
        finally:
            lib.MPI_T_cvar_handle_free(ctypes.byref(handle))
    finally:
        lib.MPI_T_finalize()
