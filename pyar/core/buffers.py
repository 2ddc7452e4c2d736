"""User arrays in, a contiguous work buffer for the schedule, the result out.

The collectives' ``x``/``out`` contract: ``out=None`` returns a new array,
``out is x`` works in place, any other ``out`` must match x's shape and dtype
and is written; the input is never modified otherwise. Non-contiguous arrays
are copied, never mis-read.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Callable, NamedTuple

import ml_dtypes
import numpy as np

from . import ops


class Work(NamedTuple):
    data: np.ndarray               # 1-D, C-contiguous: what the schedule runs on
    result: np.ndarray             # what the collective returns
    writeback: np.ndarray | None   # where ``data`` must be copied at the end, if anywhere
    load: Callable | None = None   # copies x into ``data`` again (None: data is x's memory)

    def finish(self) -> np.ndarray:
        if self.writeback is not None:
            self.writeback[...] = self.data.reshape(self.writeback.shape)
        return self.result


def is_torch(x) -> bool:
    """Whether ``x`` is a torch tensor (without importing torch)."""
    return type(x).__module__.startswith("torch")


def as_array(t):
    """The numpy (CPU) or cupy (CUDA) array sharing the torch tensor ``t``'s memory, a detached
    view: a CPU tensor through ``Tensor.numpy()`` (bfloat16 through an int16 view), a CUDA
    tensor through DLPack."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch tensor, got {type(t).__name__}")
    t = t.detach()
    if t.device.type == "cuda":
        import cupy  # (optional: the gpu extra; imported only for a CUDA tensor)
        return cupy.from_dlpack(t)
    if t.device.type != "cpu":
        raise TypeError(f"pyar takes CPU and CUDA tensors, got one on {t.device}")
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def as_tensor(a):
    """The torch tensor sharing the numpy or cupy array ``a``'s memory (torch already
    imported: by whoever passed a tensor)."""
    torch = sys.modules["torch"]
    if isinstance(a, np.ndarray):
        if a.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)
    return torch.from_dlpack(a)


def check_array(x, name: str = "x") -> np.ndarray:
    """``x`` if it is a numpy array of a supported dtype; TypeError otherwise."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    ops.check_dtype(x.dtype, name)
    return x


def check_out(out, shape, dtype, what: str = "x's") -> np.ndarray:
    """``out`` if it is a writeable numpy array of ``shape`` and ``dtype``; else an error."""
    check_array(out, "out")
    if out.shape != tuple(shape) or out.dtype != dtype:
        raise ValueError(f"out must have {what} shape {tuple(shape)} and dtype {dtype}, "
                         f"got {out.shape} and {out.dtype}")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    return out


def prepare(x: np.ndarray, out, copy: bool = True) -> Work:
    """The work buffer for a collective on ``x`` (already passed :func:`check_array`) whose
    result has x's shape, written to ``out``; holding x's contents unless ``copy`` is False
    (then, where it is not x itself, its contents are undefined)."""
    if out is None:
        result = np.array(x, order="C") if copy else np.empty(x.shape, x.dtype)
        return Work(result.reshape(-1), result, None, loader(result, x) if copy else None)
    if out is not x:
        check_out(out, x.shape, x.dtype)
    elif not x.flags.writeable:
        raise ValueError("x is read-only, so the result cannot be written into it (out=x, in "
                         "place); pass a writeable x, or out=None for a new array")
    if out.flags.c_contiguous:
        if out is x or not copy:
            return Work(out.reshape(-1), out, None)
        np.copyto(out, x)
        return Work(out.reshape(-1), out, None, loader(out, x))
    data = np.array(x, order="C") if copy else np.empty(x.shape, x.dtype)
    return Work(data.reshape(-1), out, out, loader(data, x) if copy else None)


def loader(dst: np.ndarray, src: np.ndarray) -> Callable:
    """``load()``: ``dst[...] = src`` (one shape, or ``src`` flattened into 1-D ``dst``), bound
    now; a byte copy between memoryviews where both are C-contiguous (a fifth of numpy's
    time for small arrays)."""
    if dst.flags.c_contiguous and src.flags.c_contiguous and dst.nbytes == src.nbytes:
        return partial(memoryview(dst.reshape(-1).view(np.uint8)).__setitem__, slice(None),
                       memoryview(src.reshape(-1).view(np.uint8)))
    return partial(np.copyto, dst, src.reshape(dst.shape))


def apart(x: np.ndarray, out) -> bool:
    """Whether a collective can write ``out`` while it still reads ``x``: ``out`` is a new
    array, or one whose memory cannot overlap x's."""
    return out is None or (out is not x and not np.may_share_memory(x, out))
