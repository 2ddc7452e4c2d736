"""reduce_scatter: ``x.ravel()`` reduced over all ranks and cut as numpy.array_split cuts it;
rank r gets block r (the first half of ZeRO's and FSDP's allreduce)."""

import numpy as np

from ..core import buffers
from . import Collective, Work, block, register_collective
from .reference import magnitude, reference


class ReduceScatter(Collective):
    name = "reduce_scatter"
    reduces = True
    blocked = True
    library_name = "comm.Reduce_scatter"

    def factor(self, size):
        return (size - 1) / size

    def result_shape(self, shape, size, rank):
        b = block(int(np.prod(shape)), size, rank)
        return (b.stop - b.start,)

    def result(self, data, shape, rank, size, root):
        return data[block(data.size, size, rank)]

    def direct(self, count, size, rank, root):
        return slice(0, count), block(count, size, rank)

    def prepare(self, x, out, rank, size, root, copy=True, window=None):
        """``out is x``: x is worked in (overwritten) and the result is a view of its block,
        if x is contiguous; otherwise the block comes back new. With ``window`` (its block:
        a plan that reads x and uses no other part of data), data is the result's buffer."""
        mine = block(x.size, size, rank)
        n = mine.stop - mine.start
        if out is not None and out is not x:
            if getattr(out, "shape", None) != (n,) and getattr(out, "ndim", 0) == 1:
                raise ValueError(f"out must have the block's shape ({n},): pyar's reduce_scatter "
                                 f"splits x.ravel() as numpy.array_split does, so block {rank} "
                                 f"of {x.size} elements over {size} ranks has {n}; got "
                                 f"{out.shape[0]}")
            buffers.check_out(out, (n,), x.dtype, "the block's")
        if out is x and x.flags.c_contiguous:
            if not x.flags.writeable:
                raise ValueError("x is read-only, so it cannot be reduced in place")
            data = x.reshape(-1)
            return Work(data, data[mine], lambda: data[mine])
        if window is not None:          # (window == mine)
            data = out if out is not None and out.flags.c_contiguous else np.empty(n, x.dtype)

            def written():
                if out is not None and out is not data:
                    out[...] = data
                    return out
                return data
            return Work(data, data, written)
        if not copy:
            data, load = np.empty(x.size, x.dtype), None
        else:
            data = np.array(x, order="C").reshape(-1)
            load = buffers.loader(data, x)

        def finish():
            if out is None or out is x:
                return data[mine].copy()    # not a view that keeps all of data alive
            out[...] = data[mine]
            return out
        return Work(data, data[mine], finish, load)

    def library_buffers(self, x, work, rank, root):
        mine = work.reduced
        block_out = mine.copy()             # (of mine's array type: numpy or cupy)

        def after():
            mine[...] = block_out
        return work.data, block_out, after

    def expected(self, inputs, rank, root, op):
        mine = block(inputs[0].size, len(inputs), rank)
        blocks = [np.asarray(x).reshape(-1)[mine] for x in inputs]   # N·count, not N²·count
        return reference(blocks, op), magnitude(blocks, op)

    def shapes(self, size, count):
        return (size * count,), (count,)


REDUCE_SCATTER = register_collective(ReduceScatter())
