# PYTHONPATH=<a checkout> python benchmarks/torch_call_cost.py [LABEL]
"""The pyar backend's own cost per ``dist.all_reduce``, without the network: one rank
(``init_method="pyar://"``), float32 sum in place on the same tensor each call, 8 B and
4 KiB; in us per call, the least over 30 bursts of 100 calls (the least is the cost: a
burst that other processes interrupted only takes longer).

Rows: the backend blocking and ``async_op=True`` then ``wait()``; ``pyar.allreduce`` and
``pyar.iallreduce(...).wait()`` on the numpy array sharing the tensor's memory, on the
group's own Comm; and torch's own part, ``dist.all_reduce`` through a Python process group
whose ``allreduce`` returns a completed work at once.
"""

import sys
import timeit

import torch
import torch.distributed as dist

import pyar
import pyar.torch


class _Done(dist.Work):
    def wait(self, timeout=None):
        return True


class _Nothing(dist.ProcessGroup):
    """A process group whose all_reduce does nothing: what torch's call costs by itself."""

    def __init__(self):
        super().__init__(0, 1)
        self.work = _Done()

    def allreduce(self, tensors, opts=None):
        return self.work


def least(f) -> float:
    f()
    return min(timeit.repeat(f, number=100, repeat=30)) / 100 * 1e6


def main():
    torch.set_num_threads(1)
    dist.init_process_group("pyar", init_method="pyar://")
    group, nothing = dist.distributed_c10d._get_default_group(), _Nothing()
    label = sys.argv[1] if len(sys.argv) > 1 else ""
    print(f"{label} us per call, 1 rank, least of 30 bursts of 100")
    print(f"{'bytes':>6} {'backend':>8} {'async+wait':>10} {'pyar.allreduce':>14} "
          f"{'iallreduce+wait':>15} {'torch alone':>11}")
    for nbytes in (8, 4096):
        t = torch.zeros(nbytes // 4)
        a = t.numpy()
        row = [least(lambda: dist.all_reduce(t)),
               least(lambda: dist.all_reduce(t, async_op=True).wait()),
               least(lambda: pyar.allreduce(a, a, comm=group.comm)),
               least(lambda: pyar.iallreduce(a, a, comm=group.comm).wait()),
               least(lambda: dist.all_reduce(t, group=nothing))]
        print(f"{nbytes:>6} {row[0]:>8.1f} {row[1]:>10.1f} {row[2]:>14.1f} {row[3]:>15.1f} "
              f"{row[4]:>11.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
