"""The MPI side of ``pyar verify``: run cases on a target, judge them, agree on the verdict.

Started by :mod:`pyar.verify.driver` as ``mpiexec -n N python -m mpi4py -m
pyar.verify.worker [--load SPEC ...]``. Once every rank is up, rank 0 prints
``@@pyar-verify {"ready": true}``; then it reads one JSON request per line on stdin
(``{"id", "target", "case", "nan", "int_overflow"}``, ``nan`` and ``int_overflow`` the rules
of :mod:`pyar.verify.judge`), every rank runs it, and rank 0 prints the verdict as one line
``@@pyar-verify {json}``. Each case gives the target a fresh communicator (freed
after a case that passed; state a target caches on it dies with it); the verdicts travel
on another, so a broken target cannot disturb them.

A target is, by the case's collective (``comm`` an mpi4py communicator, ``op`` a name):

- ``allreduce(x, comm, op="sum", out=None)``: an array of x's shape; ``out is x``: in place,
  x holds the result;
- ``reduce_scatter(x, comm, op="sum", out=None)``: this rank's block of the reduction of
  ``x.ravel()`` (:func:`pyar.reduce_scatter`'s blocks, numpy.array_split's), 1-D;
  ``out is x``: x is the target's to overwrite;
- ``allgather(x, comm, out=None)``: every rank's x, stacked: shape ``(size, *x.shape)``.

``out``, another array, is the result's shape and must hold it. A target may raise
NotImplementedError for a dtype or op it does not offer: the case's verdict is then
``unsupported`` (with the exception's words), not a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback

import numpy as np
from mpi4py import MPI

import pyar
from ..algorithms import check_name, msccl
from ..collectives import block, collective as record
from ..core import loader
from ..runtime.baseline import typed
from ..runtime.library import current, read_cvar
from . import cases as C, judge, targets

USER_WAIT = 10.0        # seconds the user's own messages may take to arrive after a call


def resolve(spec: str, collective: str = "allreduce"):
    """The callable a TARGET names for ``collective``: ``mpi``, ``mpi:ALGO`` (MPI_Allreduce
    with ALGO forced: :mod:`pyar.verify.targets`; ValueError unless this rank's MPI library
    got the setting), ``torch:BACKEND`` (:mod:`pyar.verify.torch_target`), ``pyar:ALGO`` or
    ``module:function`` / ``path.py:function`` (through :mod:`pyar.core.loader`)."""
    if spec == "mpi":
        return MPI_TARGETS[collective]
    if spec.startswith(("mpi:", "torch:")):
        if collective != "allreduce":
            raise ValueError(f"target {spec!r} is an allreduce; for --collective {collective}"
                             f" the library's own is the target mpi")
        if spec.startswith("torch:"):
            targets.setting(spec, "")                   # ValueError for an unknown backend
            try:
                torch_target = loader.import_spec("pyar.verify.torch_target")   # torch's
            except ImportError as e:
                raise ValueError(f"target {spec!r}: {e}") from None
            torch_target.group(spec[6:])                # (collective: every rank is here)
            return torch_target.make(spec[6:])
        forced_here(spec)
        return mpi_allreduce
    if spec.startswith("pyar:"):
        name = spec[5:]
        if name != "auto":
            check_name(name, collective)
        call = getattr(pyar, collective)
        if not record(collective).reduces:
            return lambda x, comm, out=None: call(x, out=out, algorithm=name, comm=comm)

        def algorithm(x, comm, op="sum", out=None):
            return call(x, out=out, op=op, algorithm=name, comm=comm)
        return algorithm
    if ":" not in spec:
        raise ValueError(f"target {spec!r}: expected mpi, pyar:ALGORITHM, module:function or "
                         f"path.py:function")
    target = loader.load(spec)
    if not callable(target):
        raise ValueError(f"target {spec!r} is not callable (got {type(target).__name__})")
    return target


def forced_here(spec: str) -> None:
    """Check that ``mpi:ALGO``'s setting reached this rank: in its environment, and where
    MPI_T reads it (MPICH's control variable, Open MPI's MCA variable), in the value
    MPI_Init parsed; ValueError saying what is missing (e.g. a reproducer run without the
    variables it sets)."""
    family = current().family
    wanted = targets.setting(spec, family)
    missing = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    if missing:
        raise ValueError(f"{spec}: set {' '.join(f'{k}={v}' for k, v in missing.items())} in "
                         f"the job's environment, before MPI_Init (this rank has "
                         f"{', '.join(f'{k}={os.environ.get(k)!r}' for k in missing)})")
    names = dict(enumerate(targets.MPICH_ENUM)) if family == "mpich" else \
        {n: a for a, n in targets.OPENMPI_ALGORITHMS.items()}
    variable = targets.MPICH_VARIABLE if family == "mpich" else \
        targets.OPENMPI_VARIABLE.removeprefix("OMPI_MCA_")
    parsed = read_cvar(variable)
    if parsed is not None and names.get(parsed) != spec[4:]:
        raise ValueError(f"{spec}: the library parsed {variable} as "
                         f"{names.get(parsed, parsed)!r}, not {spec[4:]!r}")


def mpi_allreduce(x, comm, op="sum", out=None):
    """The MPI library's own MPI_Allreduce as a target (avg: MPI_SUM, then a division).
    MPI has no float16 or bfloat16: NotImplementedError for those."""
    send, reduction = _reducing(x, op)
    result = np.empty_like(send)
    comm.Allreduce(typed(send), typed(result), reduction)
    return _deliver(result, op, comm, out)


def mpi_reduce_scatter(x, comm, op="sum", out=None):
    """The MPI library's own MPI_Reduce_scatter_block as a target where the ranks divide x's
    count, MPI_Reduce_scatter with pyar's block counts where they do not (avg: MPI_SUM, then
    a division). MPI has no float16 or bfloat16: NotImplementedError for those."""
    send, reduction = _reducing(x, op)
    send, size = send.reshape(-1), comm.Get_size()
    counts = [b.stop - b.start for b in (block(send.size, size, r) for r in range(size))]
    result = np.empty(counts[comm.Get_rank()], send.dtype)
    if send.size % size == 0:
        comm.Reduce_scatter_block(typed(send), typed(result), reduction)
    else:
        comm.Reduce_scatter(typed(send), typed(result), counts, reduction)
    return _deliver(result, op, comm, None if out is x else out)


def mpi_allgather(x, comm, out=None):
    """The MPI library's own MPI_Allgather as a target (as bytes: every dtype)."""
    send = np.ascontiguousarray(x)
    result = np.empty((comm.Get_size(), *send.shape), send.dtype)
    comm.Allgather(send.reshape(-1).view(np.uint8), result.reshape(-1).view(np.uint8))
    return _deliver(result, None, comm, out)


MPI_TARGETS = {"allreduce": mpi_allreduce, "reduce_scatter": mpi_reduce_scatter,
               "allgather": mpi_allgather}


def _reducing(x, op):
    """x as a contiguous send buffer, and the MPI reduction of ``op``."""
    if x.dtype.itemsize == 2 and x.dtype.kind in "fV":
        raise NotImplementedError("MPI has no float16 or bfloat16")
    reduction = {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX,
                 "min": MPI.MIN}[op]
    return np.ascontiguousarray(x), reduction


def _deliver(result, op, comm, out):
    """The library's ``result`` (divided by the rank count for avg), in ``out`` if given."""
    if op == "avg":
        result /= comm.Get_size()
    if out is None:
        return result
    out[...] = result
    return out


class Runner:
    """One rank's state: the loaded targets and the communicators."""

    def __init__(self, world=None):
        self.world = world or MPI.COMM_WORLD
        self.verdicts = self.world.Dup()        # ours alone
        self.targets = {}
        self._returned = []     # a race case's results: (where, bits on return, the array)

    def target(self, spec, collective):
        if (spec, collective) not in self.targets:
            self.targets[spec, collective] = resolve(spec, collective)
        return self.targets[spec, collective]

    def run(self, spec: str, case: dict, nan: str = "propagate",
            int_overflow: str = "wrap") -> dict:
        """Run ``case`` on every rank, judging float max/min and NaN payloads by rule ``nan``
        and integer overflow by rule ``int_overflow``; every rank returns the same
        verdict."""
        start = time.perf_counter()
        try:
            self.target(spec, case["collective"])
        except Exception as e:          # the same on every rank: no case can run
            return {"verdict": "error", "problems": [f"target {spec}: {_one_line(e)}"],
                    "seconds": 0}
        comm = self.world.Dup()
        results, self._returned = [], []
        try:
            local, results, declined = self._calls(spec, case, comm, nan, int_overflow)
        except Exception as e:          # the verifier's own trouble, e.g. a bad target
            local, declined = [f"rank {self.world.Get_rank()}: {_one_line(e)}"], ""
        digests = [hashlib.sha1(r.view(np.uint8)).hexdigest() if r is not None else ""
                   for r in results]
        everyone = self._allgather({"problems": local, "digests": digests,
                                   "declined": declined})
        problems = [p for r in everyone for p in r["problems"]]
        if case.get("race"):            # every rank has returned: did a result change since?
            changed = [f"{where}: the result changed after the call returned (a receive into "
                       f"it still in flight?)" for where, flat, result in self._returned
                       if not _same_bits(flat, np.ascontiguousarray(result).reshape(-1))]
            problems += [p for r in self._allgather(changed) for p in r]
        problems += self._disagreements(case, everyone, results, nan)
        declined = next((r["declined"] for r in everyone if r["declined"]), "")
        verdict = "fail" if problems else ("unsupported" if declined else "pass")
        if verdict != "fail":                   # a failed call's leftovers may be in flight
            comm.Free()
        return {"verdict": verdict, "problems": problems[:8],
                **({"unsupported": declined} if verdict == "unsupported" else {}),
                **({"digest": digests[0]} if verdict == "pass" and case["dim"] ==
                   "reproducible" and digests else {}),
                "seconds": round(time.perf_counter() - start, 4)}

    def _disagreements(self, case, everyone, results, nan) -> list:
        """Problems where ranks' results of a call differ bitwise (``everyone``: every rank's
        digests), found by gathering those calls' results: which elements, each rank's bits
        and value, and the class (:func:`pyar.verify.judge.disagreement`). Under ``nan="mpi"``
        ranks may differ where each holds a NaN (MPI defines no NaN payload), and for float
        max/min where a NaN meets numbers or zeros of both signs meet. Collective."""
        problems = []
        calls = max(len(r["digests"]) for r in everyone)
        for call in range(calls):
            seen = {r["digests"][call] for r in everyone if len(r["digests"]) > call} - {""}
            if len(seen) < 2:
                continue
            mine = results[call] if len(results) > call else None
            gathered = self._allgather_array(mine, C.dtype_of(case))
            ranks = [rank for rank, a in enumerate(gathered) if a is not None]
            arrays = [gathered[rank] for rank in ranks]
            mpi = None                  # where MPI's rules let ranks differ
            if arrays[0].dtype.kind in "fV":
                values = np.stack(arrays).astype(np.float64)
                mpi = np.isnan(values).all(axis=0)
                if _loose_able(case):
                    x = np.stack([C.contribution(case, r, call) for r in range(len(everyone))])
                    mpi |= judge.meets_nan(x.astype(np.float64)) | (values == 0).all(axis=0)
            where, kinds = judge.disagreement(arrays, mpi if nan == "mpi" else None)
            if not where.size:
                continue
            text = judge.describe_disagreement(arrays, where, kinds, ranks=ranks)
            rule = ""
            if mpi is not None and mpi[where].all():
                rule = (" [pyar's rule (--nan propagate, the default): every rank the same bits; "
                        "--nan mpi accepts this: MPI defines no NaN payload"
                        + (", and MPI_MAX/MPI_MIN neither the result where a NaN meets numbers "
                           "nor the sign of a zero where zeros of both signs meet"
                           if _loose_able(case) else "") + "]")
            problems.append(f"call {call}: {text}{rule}")
        return problems

    def _allgather_array(self, mine, dtype) -> list:
        """Every rank's flat array of ``dtype`` (None where a rank holds none), by
        buffer-based calls on our own communicator."""
        size = self.verdicts.Get_size()
        counts = np.zeros(size, np.int64)
        self.verdicts.Allgather(np.array([-1 if mine is None else mine.size], np.int64), counts)
        data = np.zeros(0, np.uint8) if mine is None else \
            np.ascontiguousarray(mine).view(np.uint8)
        lengths = np.maximum(counts, 0) * dtype.itemsize
        everything = np.empty(int(lengths.sum()), np.uint8)
        self.verdicts.Allgatherv(data, (everything, lengths))
        edges = np.concatenate([[0], np.cumsum(lengths)])
        return [None if n < 0 else everything[a:b].view(dtype)
                for n, a, b in zip(counts, edges[:-1], edges[1:])]

    def _calls(self, spec, case, comm, nan, int_overflow="wrap"):
        """Every call of ``case``: the problems seen here, each call's result, flat, where
        every rank must hold the same bits (allreduce's; None where a call gave none) and
        the target's words where it declined the case (NotImplementedError), else "".

        allreduce: rank 0 judges the values; under ``nan="mpi"`` on float max/min every
        rank judges its own (ranks may differ there: :meth:`_disagreements`).
        reduce_scatter: every rank judges its block, by the bounds of allreduce's elements.
        allgather: every rank judges its result, bit for bit."""
        collective = case["collective"]
        target = self.target(spec, collective)
        rank, size = comm.Get_rank(), comm.Get_size()
        shared_result = collective == "allreduce"
        loose = nan == "mpi" and _loose_able(case) and shared_result
        args = {"op": case["op"]} if record(collective).reduces else {}
        problems, results = [], []
        out_buffer = None
        for call in range(case["calls"]):
            mine = C.contribution(case, rank, call)
            x, base = C.arrays(case, mine)
            pristine = base.copy()
            shape = record(collective).result_shape(x.shape, size, rank)
            out = None
            if case["mode"] == "inplace":
                out = x
            elif case["mode"] == "out":
                if out_buffer is None:
                    out_buffer = np.full(shape, 3, x.dtype)
                out = out_buffer
            pending = _user_sends(comm, call) if case["interleave"] else None
            race = case.get("race", False)
            if race:                            # ranks late by different steps each call
                time.sleep(C.LATE * ((rank + call) % size))
            try:
                result = target(x, comm, out=out, **args)
            except NotImplementedError as e:
                if pending:
                    _finish_user(comm, pending, call)
                return [], [], str(e).splitlines()[0][:300] if str(e) else "NotImplementedError"
            except Exception as e:
                return [f"rank {rank} call {call}: raised {_one_line(e)}"], [], ""
            if race:                            # the caller reuses x at once
                base.view(np.uint8).reshape(-1)[...] = C.POISON
            if pending:
                problems += _finish_user(comm, pending, call)
            where = f"rank {rank} call {call}"
            results.append(None)
            if not isinstance(result, np.ndarray):
                problems.append(f"{where}: returned {type(result).__name__}, not a numpy array")
                continue                        # every rank makes every call: none is left
            if result.dtype != x.dtype or result.shape != shape:    # waiting in one
                problems.append(f"{where}: returned {result.dtype} {result.shape}, expected "
                                f"{x.dtype} {shape}")
                continue
            if case["mode"] == "inplace" and shared_result and not _same_bits(x, result):
                problems.append(f"{where}: in place (out=x), but x does not hold the result")
            if case["mode"] == "out" and not _same_bits(out, result):
                problems.append(f"{where}: out= given, but out does not hold the result")
            if case["mode"] != "inplace" and not race and not _same_bits(base, pristine):
                problems.append(f"{where}: x was modified (not in place)")
            flat = np.array(result, copy=True).reshape(-1) if race else \
                np.ascontiguousarray(result).reshape(-1)        # (race: as it was on return)
            if race:                            # (out= is the next call's to overwrite)
                if case["mode"] == "out":
                    self._returned.clear()
                self._returned.append((where, flat, result))
            inputs = [C.contribution(case, r, call) for r in range(size)] \
                if rank == 0 or loose or not shared_result else None
            if collective == "allgather":
                bad = judge.not_gathered(flat, inputs)
                if bad.size:
                    problems.append(f"{where}: " + judge.describe_gathered(flat, inputs, bad))
                continue
            if collective == "reduce_scatter":
                owned = block(case["count"], size, rank)
                inputs = [contribution[owned] for contribution in inputs]
                where += f" (its block: elements {owned.start}-{owned.stop - 1} of the reduction)"
            if inputs is not None:
                bad = judge.wrong(flat, inputs, case["op"], case["dtype"], nan, int_overflow)
                if bad.size:
                    rule = judge.broken_rule(flat, inputs, bad, case["op"], case["dtype"], nan,
                                             int_overflow)
                    problems.append(f"{where if loose or not shared_result else f'call {call}'}: "
                                    + judge.describe(flat, inputs, bad)
                                    + (f" [{rule}]" if rule else ""))
            if shared_result:
                results[-1] = flat
        if case["dim"] == "reproducible":
            problems += self._reorderings(target, case, comm, args, results[0])
        return problems, results, ""

    def _reorderings(self, target, case, comm, args, first) -> list:
        """The reproducible dimension's calls (one call's case, contiguous, a new result): the
        same contributions reversed and rotated among the ranks and cut into two calls, each
        result held to the bits of the case's call here (``first``; None where it gave none:
        then not compared); and for a sum, the last rank's contribution zeros, then the
        others' alone on a communicator of their own, the second held to the first's bits.
        Every rank makes every call it takes part in. Collective over ``comm``."""
        rank, size, count = comm.Get_rank(), comm.Get_size(), case["count"]

        def held(r):
            return C.contribution(case, r, 0)

        def call(what, x, on=comm):
            try:
                return target(x, on, **args)
            except Exception as e:
                problems.append(f"rank {rank}, {what}: raised {_one_line(e)}")

        problems, mine = [], held(rank)
        if size > 1:
            what = "the ranks reversed"
            problems += _same_as(first, call(what, held(size - 1 - rank)), rank, what)
        if size > 2:
            what = "the ranks rotated"
            problems += _same_as(first, call(what, held((rank + 1) % size)), rank, what)
        if count > 2:
            cut = count // 3
            what = f"cut in two calls (elements 0-{cut - 1}, {cut}-{count - 1})"
            parts = [call(what, mine[:cut].copy()), call(what, mine[cut:].copy())]
            if all(isinstance(p, np.ndarray) for p in parts):
                problems += _same_as(first, np.concatenate([p.reshape(-1) for p in parts]),
                                     rank, what)
        if size > 1 and case["op"] == "sum":
            last = f"rank {size - 1}'s contribution zeros"
            zeros = mine.copy() if rank < size - 1 else np.zeros_like(mine)
            base = call(last, zeros)
            base = np.ascontiguousarray(base).reshape(-1) if isinstance(base, np.ndarray) \
                else None
            others = comm.Split(0 if rank < size - 1 else MPI.UNDEFINED, rank)
            if others != MPI.COMM_NULL:
                what = f"ranks 0-{size - 2} alone"
                problems += _same_as(base, call(what, mine.copy(), others), rank, what, last)
                others.Free()
        return problems

    def _allgather(self, mine: dict) -> list:
        """Every rank's dict, by buffer-based calls on our own communicator."""
        data = np.frombuffer(json.dumps(mine).encode(), np.uint8)
        lengths = np.zeros(self.verdicts.Get_size(), np.int64)
        self.verdicts.Allgather(np.array([data.size], np.int64), lengths)
        everything = np.empty(int(lengths.sum()), np.uint8)
        self.verdicts.Allgatherv(data, (everything, lengths))
        edges = np.concatenate([[0], np.cumsum(lengths)])
        return [json.loads(everything[a:b].tobytes()) for a, b in zip(edges[:-1], edges[1:])]

    def bcast_line(self, line: str | None) -> str:
        """Rank 0's request line, on every rank."""
        data = np.frombuffer((line or "").encode(), np.uint8)
        n = np.array([data.size], np.int64)
        self.verdicts.Bcast(n)
        buf = data.copy() if self.verdicts.Get_rank() == 0 else np.empty(int(n[0]), np.uint8)
        self.verdicts.Bcast(buf)
        return buf.tobytes().decode()


def _loose_able(case) -> bool:
    """Whether the ``nan`` rule matters for ``case``: float max or min."""
    return case["op"] in ("max", "min") and case["dtype"] in C.FLOATS


def _same_as(first, got, rank, what, against="as called") -> list:
    """A problem unless ``got`` (the result of the call ``what``) has the bits of ``first``
    (that of the call ``against``)."""
    if first is None or got is None:            # (a call that raised: said already)
        return []
    if not isinstance(got, np.ndarray) or got.dtype != first.dtype or got.size != first.size:
        return [f"rank {rank}, {what}: returned {getattr(got, 'dtype', type(got).__name__)} "
                f"{getattr(got, 'shape', '')}, expected {first.dtype} ({first.size},)"]
    got = np.ascontiguousarray(got).reshape(-1)
    where, kinds = judge.disagreement([first, got])
    if not where.size:
        return []
    return [f"rank {rank}, {what}: not reproducible: " + judge.describe_disagreement(
        [first, got], where, kinds, labels=[against, what])]


def _same_bits(a, b) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _user_message(tag, source, call):
    return np.array([tag, source, 424242, call], np.int64)


def _user_sends(comm, call):
    """The user's own traffic around a call: to the right neighbour, on the target's
    communicator, with the small tags a library might use too."""
    rank, size = comm.Get_rank(), comm.Get_size()
    right = (rank + 1) % size
    messages = [_user_message(t, rank, call) for t in C.TAGS]
    return [comm.Isend(m, dest=right, tag=t) for m, t in zip(messages, C.TAGS)], messages


def _finish_user(comm, pending, call):
    """Receive the left neighbour's user messages (bounded wait); problems if one is lost."""
    sends, _ = pending
    rank, size = comm.Get_rank(), comm.Get_size()
    left = (rank - 1) % size
    problems = []
    boxes = [np.zeros(4, np.int64) for _ in C.TAGS]
    recvs = [comm.Irecv(b, source=left, tag=t) for b, t in zip(boxes, C.TAGS)]
    deadline = time.monotonic() + USER_WAIT
    while not MPI.Request.Testall(recvs) and time.monotonic() < deadline:
        time.sleep(0.001)
    for tag, req, box in zip(C.TAGS, recvs, boxes):
        if not req.Test():
            req.Cancel()
            problems.append(f"rank {rank} call {call}: the user's message with tag {tag} from "
                            f"rank {left} never arrived (the target received it?)")
        elif not np.array_equal(box, _user_message(tag, left, call)):
            problems.append(f"rank {rank} call {call}: the user's message with tag {tag} from "
                            f"rank {left} arrived holding {box.tolist()} (the target's data?)")
    deadline = time.monotonic() + USER_WAIT
    while not MPI.Request.Testall(sends) and time.monotonic() < deadline:
        time.sleep(0.001)
    return problems


def _one_line(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}{where}"


def reproduce(target: str, case: dict, load=(), nan: str = "propagate",
              int_overflow: str = "wrap") -> int:
    """Run one case of ``target`` on COMM_WORLD (every rank calls it), float max/min judged
    by rule ``nan``; rank 0 prints the verdict. Returns 1 if it fails, 0 if it passes, on
    every rank (a reproducer's exit)."""
    if nan not in judge.NAN_RULES:
        raise ValueError(f"nan must be one of {', '.join(judge.NAN_RULES)}, got {nan!r}")
    if int_overflow not in judge.INT_OVERFLOW_RULES:
        raise ValueError(f"int_overflow must be one of {', '.join(judge.INT_OVERFLOW_RULES)}, "
                         f"got {int_overflow!r}")
    msccl.load_all(load)
    runner = Runner()
    result = runner.run(target, case, nan, int_overflow)
    if runner.world.Get_rank() == 0:
        print(f"pyar verify --collective {case['collective']} {target} on "
              f"{runner.world.Get_size()} ranks: {result['verdict']}")
        for p in result["problems"]:
            print("  " + p)
        sys.stdout.flush()
    return 1 if result["verdict"] == "fail" else 0


def serve(load=()) -> int:
    """The job's loop: the ready line, then one request a line on rank 0's stdin, until end
    of input."""
    msccl.load_all(load)
    runner = Runner()
    root = runner.world.Get_rank() == 0
    runner.verdicts.Barrier()                   # every rank is up
    if root:
        sys.stdout.write(C.PREFIX + json.dumps({"ready": True}) + "\n")
        sys.stdout.flush()
    while True:
        line = sys.stdin.readline() if root else None
        line = runner.bcast_line(line.strip() if line else "")
        if not line:
            return 0
        request = json.loads(line)
        try:
            result = runner.run(request["target"], request["case"], request["nan"],
                                request.get("int_overflow", "wrap"))
        except Exception as e:                  # e.g. an unloadable target: said, not hidden
            result = {"verdict": "error", "problems": [_one_line(e)], "seconds": 0}
        if root:
            sys.stdout.write(C.PREFIX + json.dumps({"id": request["id"], **result}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pyar.verify.worker")
    parser.add_argument("--load", action="append", default=[])
    sys.exit(serve(parser.parse_args().load))
