"""A failing case as a script that needs mpi4py and numpy only, not pyar: for a library's
bug tracker as it is.

:func:`script` writes each rank's inputs into the script (as numbers up to
:data:`INLINE` elements, else as zlib-compressed base64 of their bytes), the expected
result and its tolerance per element (:func:`pyar.verify.judge.expectation`), the target's
call (the MPI library's own collective written out in mpi4py, ``mpi:ALGO``'s with its
algorithm's variables set before MPI_Init; ``torch:BACKEND``'s ``dist.all_reduce`` on a
process group of COMM_WORLD's ranks, which needs torch; a user's ``module:function``
imported; ``pyar:ALGO`` imports pyar, being pyar's), the case's layout, ``out`` mode, calls
in a row, the user's own messages, a race case's late ranks and reused x, a reproducible
case's calls with the contributions held elsewhere, and a check that
prints each rank's mismatches and exits 1 while the target fails, 0 once it passes. Every
wait of its own is bounded (the target's are the ``timeout`` of its first line's).

What the check holds a result to: each element within its tolerance of the expected
value (NaN matching NaN; exact for integers, max and min; the error bound of any order for
float sums, averages and products), every rank's result the same bits where the collective
is an allreduce (under ``--nan mpi`` NaN payloads may differ, and for float max/min every
element where a NaN meets numbers or zeros of both signs meet), ``x`` untouched when not in
place, ``out`` holding the result. It is pyar's judgement, less its finer points: where
pyar accepts more than one kind of result (+-inf where partial sums may overflow, a number
where a NaN meets numbers under ``--nan mpi``, a signed overflow under ``--int-overflow
any``) the script accepts anything. Size: per call, every rank's inputs and 16 bytes an
element for the expected values and tolerances (float64), before compression.
"""

from __future__ import annotations

import base64
import os
import zlib

import numpy as np

from ..collectives import block
from . import cases as C, judge

INLINE = 32         # elements per array written as numbers; above, compressed bytes


def script(target: str, ranks: int, case: dict, load=(), nan: str = "propagate",
           int_overflow: str = "wrap", problems=(), name: str = "repro.py",
           setting=None) -> str:
    """The standalone script ``name`` that runs ``case`` of ``target`` on ``ranks`` ranks
    and checks it as :mod:`pyar.verify` does (``problems``: what pyar verify saw, quoted in
    its head); it sets ``setting``'s variables (``mpi:ALGO``'s algorithm) before
    MPI_Init."""
    collective, dtype = case["collective"], C.dtype_of(case)
    calls = [[C.contribution(case, r, call) for r in range(ranks)]
             for call in range(case["calls"])]
    checks = []
    for inputs in calls:
        if collective == "allgather":
            expected, tolerance = np.concatenate(inputs), np.zeros(ranks * case["count"])
        else:
            expected, tolerance = judge.expectation(inputs, case["op"], case["dtype"], nan,
                                                    int_overflow)
        checks.append((expected, tolerance))
    floating = case["dtype"] in C.FLOATS
    lines = [
        f"# timeout -k 5 60 mpiexec -n {ranks} python {name}",
        f"# A case pyar verify found failing, standalone (mpi4py and numpy"
        f"{', ml_dtypes' if case['dtype'] == 'bfloat16' else ''} only): the "
        f"{collective} of {target}",
        f"# on {ranks} ranks: {_summary(case)}.",
        "# Exit status 1 while it fails, 0 once it passes; each rank prints its mismatches.",
        *(f"# pyar verify saw: {p[:300]}" for p in list(problems)[:3]),
        "import base64, importlib, importlib.util, os, sys, time, zlib",
        *([f"os.environ.update({dict(setting)!r})     # before MPI_Init: its settings"]
          if setting else []),
        "",
        "import numpy as np",
        "from mpi4py import MPI",
        *(["import ml_dtypes"] if case["dtype"] == "bfloat16" else []),
        "",
        _target_code(target, collective, load),
        "",
        "comm = MPI.COMM_WORLD",
        "rank, size = comm.Get_rank(), comm.Get_size()",
        f"if size != {ranks}:",
        f"    sys.exit(f'run it on {ranks} ranks, not {{size}}')",
        f"DTYPE = {'ml_dtypes.bfloat16' if case['dtype'] == 'bfloat16' else repr(dtype.name)}",
        "",
        "",
        "def unpack(text, dtype=DTYPE):",
        "    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype).copy()",
        "",
        "",
        f"# INPUTS[call][rank]: each rank's x, flat (C order); EXPECTED[call], TOLERANCE[call]:",
        f"# {'the ' + collective + ' of them' if collective != 'allgather' else 'every x'}, "
        f"and how far each element may be from it (inf: anything passes)",
        "INPUTS = [",
        *(f"    [{', '.join(_array(x, 'DTYPE') for x in inputs)}]," for inputs in calls),
        "]",
        "EXPECTED = [" + ", ".join(_array(e, "np.float64" if floating else "DTYPE")
                                   for e, _ in checks) + "]",
        "TOLERANCE = [" + ", ".join(_array(t, "np.float64") for _, t in checks) + "]",
        f"SHAPE = {C.shape_of(case)!r}",
        "",
        "",
        _layout_code(case["layout"]),
        "",
        "",
        _CHECK,
        "",
        _run_code(case, collective, nan),
    ]
    return "\n".join(lines) + "\n"


def _summary(case) -> str:
    parts = [f"{case['dtype']} {case['op']}" if case["collective"] != "allgather"
             else case["dtype"], f"{case['count']} elements", f"layout {case['layout']}",
             {"new": "out=None", "out": "out= an array", "inplace": "in place (out=x)"}[
                 case["mode"]]]
    if case["calls"] > 1:
        parts.append(f"{case['calls']} calls in a row")
    if case["interleave"]:
        parts.append("the caller's own messages in flight around each call")
    return ", ".join(parts)


def _array(a: np.ndarray, dtype: str) -> str:
    a = np.ascontiguousarray(a)
    if a.size <= INLINE:
        if a.dtype.kind in "iu":
            items = ", ".join(str(int(v)) for v in a)
        else:
            items = ", ".join(_float(float(v)) for v in a.astype(np.float64))
        return f"np.array([{items}], {dtype})"
    text = base64.b64encode(zlib.compress(a.tobytes(), 9)).decode()
    return f"unpack({text!r}{'' if dtype == 'DTYPE' else ', ' + dtype})"


def _float(v: float) -> str:
    return repr(v) if np.isfinite(v) else {"nan": "np.nan", "inf": "np.inf",
                                           "-inf": "-np.inf"}[repr(v)]


_MPI_CALLS = {
    "allreduce": '''OPS = {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX,
       "min": MPI.MIN}


def target(x, comm, op="sum", out=None):
    """The MPI library's own MPI_Allreduce (avg: MPI_SUM, then a division)."""
    send = np.ascontiguousarray(x)
    result = np.empty(send.shape, send.dtype)
    comm.Allreduce(send, result, OPS[op])
    if op == "avg":
        result /= comm.Get_size()
    if out is None:
        return result
    out[...] = result
    return out''',
    "reduce_scatter": '''OPS = {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX,
       "min": MPI.MIN}


def target(x, comm, op="sum", out=None):
    """The MPI library's own MPI_Reduce_scatter_block (MPI_Reduce_scatter where the ranks
    do not divide the count; blocks as numpy.array_split cuts; avg: MPI_SUM, a division)."""
    send, size = np.ascontiguousarray(x).reshape(-1), comm.Get_size()
    counts = [len(b) for b in np.array_split(np.arange(send.size), size)]
    result = np.empty(counts[comm.Get_rank()], send.dtype)
    if send.size % size == 0:
        comm.Reduce_scatter_block(send, result, OPS[op])
    else:
        comm.Reduce_scatter(send, result, counts, OPS[op])
    if op == "avg":
        result /= size
    if out is None or out is x:
        return result
    out[...] = result
    return out''',
    "allgather": '''def target(x, comm, out=None):
    """The MPI library's own MPI_Allgather (as bytes)."""
    send = np.ascontiguousarray(x)
    result = np.empty((comm.Get_size(), *send.shape), send.dtype)
    comm.Allgather(send.reshape(-1).view(np.uint8), result.reshape(-1).view(np.uint8))
    if out is None:
        return result
    out[...] = result
    return out''',
}


_TORCH_CALL = '''import datetime

import torch
import torch.distributed as dist

OPS = {"sum": "SUM", "prod": "PRODUCT", "max": "MAX", "min": "MIN", "avg": "AVG"}
BACKEND = %r


def target(x, comm, op="sum", out=None):
    """torch.distributed.all_reduce on BACKEND's process group of COMM_WORLD's ranks."""
    if not dist.is_initialized():
        world, wait = MPI.COMM_WORLD, datetime.timedelta(seconds=60)
        store = dist.TCPStore("127.0.0.1", 0, world.size, is_master=True, timeout=wait,
                              wait_for_workers=False) if world.rank == 0 else None
        port = world.bcast(store.port if store else None, root=0)
        store = store or dist.TCPStore("127.0.0.1", port, world.size, timeout=wait)
        dist.init_process_group(BACKEND, store=store, rank=world.rank,
                                world_size=world.size, timeout=wait)
    work = np.array(x, order="C", copy=True)
    t = torch.from_numpy(work.view(np.int16)).view(torch.bfloat16) \\
        if work.dtype.name == "bfloat16" else torch.from_numpy(work)
    on = t.cuda(MPI.COMM_WORLD.rank %% torch.cuda.device_count()) if BACKEND == "nccl" else t
    dist.all_reduce(on, op=getattr(dist.ReduceOp, OPS[op]))
    t.copy_(on.cpu())
    if out is None:
        return work
    out[...] = work
    return out'''


def _target_code(target: str, collective: str, load) -> str:
    if target == "mpi" or target.startswith("mpi:"):
        return _MPI_CALLS[collective]
    if target.startswith("torch:"):
        return (("import pyar.torch     # registers the backend pyar\n" if target == "torch:pyar"
                 else "") + _TORCH_CALL % target[6:])
    if target.startswith("pyar:"):
        loads = (f"from pyar.algorithms import msccl\nmsccl.load_all({list(load)!r})\n"
                 if load else "")
        op = ", op=op" if collective != "allgather" else ""
        args = "x, comm, op='sum', out=None" if collective != "allgather" else "x, comm, out=None"
        return (f"import pyar     # the target is pyar's own {target[5:]}\n{loads}\n\n"
                f"def target({args}):\n"
                f"    return pyar.{collective}(x, out=out{op}, algorithm={target[5:]!r}, "
                f"comm=comm)")
    where, function = target.rsplit(":", 1)
    if where.endswith(".py"):
        path = os.path.abspath(where)
        load_module = (f"spec = importlib.util.spec_from_file_location("
                       f"{os.path.splitext(os.path.basename(path))[0]!r}, {path!r})\n"
                       f"module = importlib.util.module_from_spec(spec)\n"
                       f"spec.loader.exec_module(module)")
    else:
        load_module = f"module = importlib.import_module({where!r})"
    return (f"{load_module}\ntarget = module\nfor part in {function.split('.')!r}:\n"
            f"    target = getattr(target, part)")


def _layout_code(layout: str) -> str:
    """``arrange(flat)``: x in the case's layout holding ``flat``, and the buffer it lives
    in (as :func:`pyar.verify.cases.arrays`)."""
    body = {"strided": "    base = np.zeros(2 * flat.size, DTYPE)\n    x = base[::2]",
            "offset": "    base = np.zeros(flat.size + 1, DTYPE)\n    x = base[1:]",
            "transposed": "    base = np.zeros(SHAPE[::-1], DTYPE)\n    x = base.T"}.get(
        layout, "    base = np.zeros(SHAPE, DTYPE)\n    x = base")
    return (f"def arrange(flat):\n    \"\"\"x laid out as the case has it ({layout}), and the "
            f"buffer it lives in.\"\"\"\n{body}\n    x[...] = flat.reshape(x.shape)\n"
            f"    return x, base")


_CHECK = '''def mismatches(got, expected, tolerance):
    """Flat indices where got is not within tolerance of expected (NaN matches NaN)."""
    if np.dtype(DTYPE).kind in "iu":
        return np.flatnonzero((got != expected) & ~np.isinf(tolerance))
    g = got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = (np.abs(g - expected) <= tolerance) | (g == expected) | np.isinf(tolerance) \\
            | (np.isnan(g) & np.isnan(expected))
    return np.flatnonzero(~ok)'''


def _reorderings_code(case, op: str) -> list:
    """The reproducible dimension's calls after the case's (as
    :meth:`pyar.verify.worker.Runner._reorderings` makes them), each result held to the bits
    of the case's call on this rank (the others' alone: to the call with the last rank's
    contribution zeros)."""
    count, cut = case["count"], case["count"] // 3
    code = ["# Reproducible sums: the same contributions held elsewhere, each result the same bits",
            "def again(what, got, first=flat, against=\"as called\"):",
            "    bits = f\"u{first.dtype.itemsize}\"",
            "    got, first = np.ascontiguousarray(got).reshape(-1).view(bits), first.view(bits)",
            "    width = 2 * got.itemsize",
            "    for i in np.flatnonzero(got != first)[:3]:",
            "        say(f\"{what}: not reproducible: [{i}] 0x{int(got[i]):0{width}x}, \"",
            "            f\"{against} 0x{int(first[i]):0{width}x}\")",
            "",
            "",
            "mine = INPUTS[0]",
            "if size > 1:",
            f"    again(\"the ranks reversed\", target(mine[size - 1 - rank].copy(), comm{op}))",
            "if size > 2:",
            f"    again(\"the ranks rotated\", target(mine[(rank + 1) % size].copy(), comm{op}))"]
    if count > 2:
        code += [f"again(\"cut in two calls\", np.concatenate([target(mine[rank][:{cut}].copy(), "
                 f"comm{op}),",
                 f"                                       target(mine[rank][{cut}:].copy(), "
                 f"comm{op})]))"]
    if case["op"] == "sum":
        code += ["if size > 1:                  # the last rank's zeros, then the others alone",
                 "    zeros = mine[rank].copy() if rank < size - 1 else np.zeros_like(mine[rank])",
                 f"    base = np.ascontiguousarray(target(zeros, comm{op})).reshape(-1)",
                 "    others = comm.Split(0 if rank < size - 1 else MPI.UNDEFINED, rank)",
                 "    if others != MPI.COMM_NULL:",
                 f"        again(f\"ranks 0-{{size - 2}} alone\", target(mine[rank].copy(), "
                 f"others{op}), base,",
                 "              f\"rank {size - 1}'s contribution zeros\")",
                 "        others.Free()"]
    return code + [""]


def _run_code(case, collective: str, nan: str) -> str:
    """The calls and their checks."""
    if collective == "reduce_scatter":
        piece, result_shape = "np.array_split(np.arange(EXPECTED[call].size), size)[rank]", \
            "(len(mine),)"
    else:
        piece, result_shape = "slice(None)", "(size, *SHAPE)" if collective == "allgather" \
            else "SHAPE"
    mode = {"new": "None", "inplace": "x", "out": "out_buffer"}[case["mode"]]
    op = f", op={case['op']!r}" if collective != "allgather" else ""
    code = ["failed = []", "", "", "def say(text):", "    failed.append(text)",
            "    print(f\"rank {rank}: {text}\", flush=True)", "", "",
            "def show(v):",
            "    return repr(int(v) if np.dtype(DTYPE).kind in \"iu\" else float(v))",
            "", ""]
    if case["interleave"]:
        code += ["TAGS = (0, 1, 7, 99)     # the caller's own messages: same communicator, tags",
                 "right, left = (rank + 1) % size, (rank - 1) % size"]
    code += ["out_buffer = None", "returned = []", "for call, inputs in enumerate(INPUTS):",
             "    x, base = arrange(inputs[rank])", "    pristine = base.copy()",
             f"    mine = {piece}"]
    if case["mode"] == "out":
        code += ["    if out_buffer is None:",
                 f"        out_buffer = np.full({result_shape}, 3, DTYPE)"]
    if case["interleave"]:
        code += ["    mail = [np.array([tag, rank, 424242, call], np.int64) for tag in TAGS]",
                 "    sends = [comm.Isend(m, dest=right, tag=tag) for m, tag in zip(mail, TAGS)]"]
    race = case.get("race", False)
    if race:
        code += [f"    time.sleep({C.LATE} * ((rank + call) % size))   # ranks late by turns"]
    code += [f"    result = target(x, comm{op}, out={mode})"]
    if race:
        code += [f"    base.view(np.uint8).reshape(-1)[...] = {C.POISON:#x}   # x reused at once"]
    if case["interleave"]:
        code += ["    boxes = [np.zeros(4, np.int64) for _ in TAGS]",
                 "    recvs = [comm.Irecv(b, source=left, tag=tag)",
                 "             for b, tag in zip(boxes, TAGS)]",
                 "    deadline = time.monotonic() + 10",
                 "    while not MPI.Request.Testall(recvs + sends) and \\",
                 "            time.monotonic() < deadline:",
                 "        time.sleep(0.001)",
                 "    for tag, req, box in zip(TAGS, recvs, boxes):",
                 "        if not req.Test():",
                 "            say(f\"call {call}: my message with tag {tag} from rank {left} \"",
                 "                \"never arrived\")",
                 "        elif box.tolist() != [tag, left, 424242, call]:",
                 "            say(f\"call {call}: my message with tag {tag} holds \"",
                 "                f\"{box.tolist()}\")"]
    origin = "" if collective == "allgather" else \
        " + \", from \" + \", \".join(show(v[i]) for v in inputs)"
    code += ["    flat = np.array(result, copy=True).reshape(-1)"
             + ("", "\n    returned.append((call, flat, result))")[race],
             "    want, tolerance = EXPECTED[call][mine], TOLERANCE[call][mine]",
             "    if flat.shape != want.shape:",
             "        say(f\"call {call}: {flat.size} elements, expected {want.size}\")",
             "        continue",
             "    for i in mismatches(flat, want, tolerance)[:10]:",
             "        say(f\"call {call}: [{i}] got {show(flat[i])}, expected {show(want[i])}\""
             + (" + (f\" within {tolerance[i]:g}\" if tolerance[i] else \"\")"
                if case["dtype"] in C.FLOATS else "") + origin + ")"]
    if case["mode"] != "inplace" and not race:
        code += ["    if pristine.tobytes() != base.tobytes():",
                 "        say(f\"call {call}: x was modified (not in place)\")"]
    if case["mode"] == "out":
        code += ["    if np.ascontiguousarray(out_buffer).tobytes() != "
                 "np.ascontiguousarray(result).tobytes():",
                 "        say(f\"call {call}: out= given, but out does not hold the result\")"]
    if collective == "allreduce":
        code += ["    bits = flat.view(f\"u{flat.dtype.itemsize}\")",
                 "    everyone = np.stack(comm.allgather(bits))",
                 "    differ = (everyone != everyone[0]).any(axis=0)"]
        if nan == "mpi" and case["dtype"] in C.FLOATS:
            code += ["    values = everyone.view(DTYPE).astype(np.float64)",
                     "    differ &= ~np.isnan(values).all(axis=0)   # MPI defines no NaN payload"]
            if case["op"] in ("max", "min"):
                code += ["    nans = np.isnan(np.stack(inputs).astype(np.float64))",
                         "    differ &= ~(nans.any(axis=0) & ~nans.all(axis=0))",
                         "    differ &= ~(values == 0).all(axis=0)    # zeros of both signs"]
        code += ["    if rank == 0:",
                 "        for i in np.flatnonzero(differ)[:3]:",
                 "            say(f\"call {call}: ranks' results differ bitwise at [{i}]: \" + "
                 "\", \".join(",
                 "                f\"rank {r} 0x{int(b):0{2 * flat.dtype.itemsize}x}\" "
                 "for r, b in enumerate(everyone[:, i])))"]
    code += [""]
    if case["dim"] == "reproducible":
        code += _reorderings_code(case, op)
    if race:
        code += ["comm.Barrier()              # every rank has returned: has a result changed?",
                 "for call, flat, result in returned" + ("[-1:]" if case["mode"] == "out"
                                                         else "") + ":",
                 "    if flat.tobytes() != np.ascontiguousarray(result).tobytes():",
                 "        say(f\"call {call}: the result changed after the call returned\")"]
    code += ["sys.exit(1 if any(comm.allgather(bool(failed))) else 0)"]
    return "\n".join(code)
