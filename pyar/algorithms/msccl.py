"""MSCCL programs: an algorithm XML of msccl-tools (MSCCLang, TACCL, TE-CCL) as a pyar algorithm.

An MSCCL program is an ``<algo name coll ngpus nchunksperloop proto inplace>`` element
holding one ``<gpu id i_chunks o_chunks s_chunks>`` per rank, each holding threadblocks
``<tb id send recv chan>`` whose ``<step s type srcbuf srcoff dstbuf dstoff cnt depid deps
hasdep>`` elements run in order; ``depid``/``deps`` make a step wait for step ``deps`` of
threadblock ``depid`` of the same gpu. :func:`load_algorithm` registers the program under
its ``name`` for its collective (``allreduce``, ``allgather``, ``reduce_scatter``) at
exactly ``ngpus`` ranks (any other size: ValueError).

Instructions, with offsets local to the gpu as the MSCCL runtime reads them:

==== ============================================================= ====================
type what it does                                                  pyar
==== ============================================================= ====================
s    send ``src`` to the threadblock's ``send`` peer               Send
r    receive from the ``recv`` peer into ``dst``                   Recv (copy)
rcs  receive into ``dst``, then send ``dst`` on                    Recv; next step Send
rrc  receive, fold into ``src``, store in ``dst`` (``src == dst``) Recv (reduce)
rrs  receive, fold into ``src``, send the sum                      Recv (reduce) into
                                                                   ``src``; Send
rrcs rrc, then send ``dst`` on (``src == dst``)                    Recv (reduce); Send
cpy  copy ``src`` to ``dst`` locally (only where both are one      nothing
     pyar chunk: pyar's schedules have no local copies)
nop  wait for its dependency only                                  nothing
==== ============================================================= ====================

``re`` (a local reduction) and any other type is refused, as are ``rrc``/``rrcs`` whose
``src`` and ``dst`` differ: a pyar receive folds into its own chunk. ``rrs`` keeps its sum
in ``src`` (MSCCL discards it; the generators emit ``rrs`` where the chunk is overwritten
afterwards).

Buffers: MSCCL's input ``i`` and output ``o`` are both pyar's ``data`` (in place, as
pyar's collectives run): for allreduce chunk k of either is chunk k of data; for allgather
``i[k]`` is chunk ``gpu * c + k`` of data (``c = nchunksperloop / ngpus``), ``o[k]``
chunk k; for reduce_scatter ``o[k]`` is chunk ``gpu * c + k``, ``i[k]`` chunk k. Scratch
``s[k]`` is pyar scratch ``[k * q, (k + 1) * q)``. A program that reads its input chunk
after writing the output chunk at the same place is not one pyar can run.

Chunks: pyar's ``count`` elements are cut into ``nchunksperloop`` chunks as
:func:`pyar.schedule.split` cuts them (allreduce), or into ``ngpus`` blocks as the
collective cuts them and each block into ``c`` chunks (allgather, reduce_scatter, which
need ``nchunksperloop`` divisible by ``ngpus``). Chunks may differ by one element when
the count is not divisible: a message whose two ends then differ in size, and any use
of scratch (whose chunks are ``q = ceil(count / nchunksperloop)`` elements), need
``count`` divisible by ``nchunksperloop`` (ValueError naming the step otherwise).

Order: every transfer gets a round, the earliest that keeps the program's happens-before
(threadblock order and ``depid``/``deps``): a step after a receive runs a round later
(its effect lands when the round ends), a step after a send may share its round (sends
read when the round begins); a fused instruction sends a round after it receives; a
send and its receive share a round. A rank's steps are its rounds in order, sends and
receives listed by channel, then threadblock order, so both ends of a pair list their
messages alike. Sends match receives in order per (sender, receiver, channel).

Steps, messages and bytes per rank are the program's: a rank's messages are its
instructions' sends, its steps the rounds in which it transfers. Cost: what
:mod:`pyar.model.cost` predicts from the schedule (no closed form). Picture (the ring of
``tests/data/msccl/allreduce_ring_4.xml``, rank g, c = its chunk of data)::

    round:  0      1        2        3         4        5        6
    send:   c[g]   c[g-1]+  c[g-2]+  c[g-3]*   c[g]*    c[g-1]*
    recv:   c[g-1]+ c[g-2]+ c[g-3]+  c[g]*     c[g-1]*  c[g-2]*
            (+ folds a partial sum in, * copies the reduced chunk)
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from typing import NamedTuple

from ..core import loader
from ..core.errors import ScheduleError
from ..core.schedule import Chunk, Recv, Send, bounds, compact
from . import register_algorithm

COLLECTIVES = {"allreduce": "allreduce", "allgather": "allgather",
               "reducescatter": "reduce_scatter"}     # MSCCL's name, without "_", -> pyar's
SENDS = {"s", "rcs", "rrs", "rrcs"}
RECEIVES = {"r", "rcs", "rrc", "rrs", "rrcs"}
FOLDS = {"rrc", "rrs", "rrcs"}
LOCAL = {"cpy", "nop"}


class ProgramError(ScheduleError, ValueError):
    """An MSCCL program pyar cannot read or run: says which gpu, threadblock and step."""


class Op(NamedTuple):
    """One ``<step>``: its place, instruction, chunk refs ``(buffer, offset)`` and count."""

    gpu: int
    tb: int
    index: int
    type: str
    src: tuple
    dst: tuple
    cnt: int
    dep: tuple | None       # (threadblock, step) it waits for, or None


class Transfer(NamedTuple):
    """A Send or Recv of the program: its round, ordering key and chunk (chunk units)."""

    round: int
    key: tuple              # (channel, threadblock, step) as both ends list it
    send: bool
    peer: int
    ref: tuple              # ("data" | "scratch", first chunk, chunks)
    reduce: bool
    where: str
    other: tuple            # the peer's ref, to compare sizes


class Program(NamedTuple):
    name: str
    collective: str
    ngpus: int
    nchunks: int
    transfers: list         # per gpu, its Transfers


def _int(element, attribute, where, default=None):
    value = element.get(attribute)
    if value is None:
        if default is not None:
            return default
        raise ProgramError(f"{where}: attribute {attribute!r} is missing")
    try:
        return int(value)
    except ValueError:
        raise ProgramError(f"{where}: attribute {attribute}={value!r} is not an integer") from None


def parse(text: str, source: str = "<string>") -> Program:
    """The program of the MSCCL XML ``text``; ProgramError saying what is wrong otherwise."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ProgramError(f"{source}: not well-formed XML ({e})") from None
    if root.tag != "algo":
        raise ProgramError(f"{source}: the root element is <{root.tag}>, expected <algo>")
    name = root.get("name", "")
    if not name.isidentifier():
        raise ProgramError(f"{source}: algo name {name!r} is not an identifier")
    coll = root.get("coll", "")
    collective = COLLECTIVES.get(coll.replace("_", "").lower())
    if collective is None:
        raise ProgramError(f"{source}: coll {coll!r} is not one pyar runs from MSCCL "
                           f"(expected one of allreduce, allgather, reduce_scatter)")
    ngpus = _int(root, "ngpus", source)
    nchunks = _int(root, "nchunksperloop", source)
    if ngpus < 1 or nchunks < 1:
        raise ProgramError(f"{source}: ngpus and nchunksperloop must be >= 1, got {ngpus} "
                           f"and {nchunks}")
    if collective != "allreduce" and nchunks % ngpus:
        raise ProgramError(f"{source}: a {collective} needs nchunksperloop ({nchunks}) "
                           f"divisible by ngpus ({ngpus})")
    ops, tbs = _ops(root, ngpus, nchunks, collective, source)
    return Program(name, collective, ngpus, nchunks, _rounds(ops, tbs, ngpus))


def _ops(root, ngpus, nchunks, collective, source):
    """Every step as an Op (refs mapped onto pyar's chunks), and each gpu's threadblocks."""
    gpus = root.findall("gpu")
    ids = sorted(_int(g, "id", f"{source}: a <gpu>") for g in gpus)
    if ids != list(range(ngpus)):
        raise ProgramError(f"{source}: gpu ids are {ids}, expected 0..{ngpus - 1} "
                           f"(ngpus={ngpus})")
    per = nchunks // ngpus
    ops, tbs = {}, {}
    for g in gpus:
        gpu = int(g.get("id"))
        limits = {"i": _int(g, "i_chunks", f"gpu {gpu}", 0),
                  "o": _int(g, "o_chunks", f"gpu {gpu}", 0),
                  "s": _int(g, "s_chunks", f"gpu {gpu}", 0)}

        def ref(buffer, offset, cnt, where):
            if buffer not in limits:
                raise ProgramError(f"{where}: buffer {buffer!r} is not i, o or s")
            if offset < 0 or cnt < 0 or offset + cnt > max(limits[buffer], 0) or (
                    buffer != "s" and offset + cnt > nchunks):
                raise ProgramError(f"{where}: chunks [{offset}, {offset + cnt}) of buffer "
                                   f"{buffer!r} do not fit (it has {limits[buffer]} chunks, "
                                   f"nchunksperloop={nchunks})")
            if buffer == "s":
                return ("scratch", offset, cnt)
            moved = (collective == "allgather" and buffer == "i") or (
                collective == "reduce_scatter" and buffer == "o")
            return ("data", gpu * per + offset if moved else offset, cnt)

        for t in g.findall("tb"):
            where = f"gpu {gpu} tb {t.get('id')}"
            tb = _int(t, "id", where)
            if (gpu, tb) in tbs:
                raise ProgramError(f"{where}: a second threadblock with this id")
            peers = {}
            for side in ("send", "recv"):
                peer = _int(t, side, where)
                if peer != -1 and not (0 <= peer < ngpus and peer != gpu):
                    raise ProgramError(f"{where}: {side} peer {peer} is not another gpu in "
                                       f"[0, {ngpus})")
                peers[side] = peer
            tbs[gpu, tb] = (peers["send"], peers["recv"], _int(t, "chan", where, 0))
            for i, s in enumerate(t.findall("step")):
                at = f"{where} step {s.get('s', i)}"
                if _int(s, "s", at, i) != i:
                    raise ProgramError(f"{at}: steps of a threadblock must be numbered 0, 1, ...")
                kind = s.get("type")
                if kind not in SENDS | RECEIVES | LOCAL:
                    raise ProgramError(f"{at}: instruction {kind!r} is not supported (pyar runs "
                                       f"s, r, rcs, rrc, rrs, rrcs, and cpy within one chunk, "
                                       f"nop)")
                if kind in SENDS and peers["send"] < 0:
                    raise ProgramError(f"{at}: {kind} sends, but the threadblock has no send peer")
                if kind in RECEIVES and peers["recv"] < 0:
                    raise ProgramError(f"{at}: {kind} receives, but the threadblock has no recv "
                                       f"peer")
                cnt = _int(s, "cnt", at, 1)
                src = dst = None
                if kind != "nop":
                    src = ref(s.get("srcbuf"), _int(s, "srcoff", at), cnt, at)
                    dst = ref(s.get("dstbuf"), _int(s, "dstoff", at), cnt, at)
                if kind in ("rrc", "rrcs", "cpy") and src != dst:
                    raise ProgramError(f"{at}: {kind} from {src} to another chunk {dst}: a pyar "
                                       f"step folds or copies into the chunk it names only")
                depid, deps = _int(s, "depid", at, -1), _int(s, "deps", at, -1)
                ops[gpu, tb, i] = Op(gpu, tb, i, kind, src, dst, cnt,
                                     None if depid < 0 else (depid, deps))
    for op in ops.values():
        if op.dep is not None and (op.gpu, *op.dep) not in ops:
            raise ProgramError(f"gpu {op.gpu} tb {op.tb} step {op.index}: depends on tb "
                               f"{op.dep[0]} step {op.dep[1]}, which does not exist")
    return ops, tbs


def _rounds(ops, tbs, ngpus):
    """Each gpu's Transfers, in rounds that keep the program's happens-before."""
    sends, recvs = {}, {}       # (from, to, channel) -> ops in threadblock order
    for key in sorted(ops):
        op = ops[key]
        send, recv, chan = tbs[op.gpu, op.tb]
        if op.type in SENDS:
            sends.setdefault((op.gpu, send, chan), []).append(op)
        if op.type in RECEIVES:
            recvs.setdefault((recv, op.gpu, chan), []).append(op)
    match = {}                  # a receiving op -> the op whose send it receives
    for link in sorted(set(sends) | set(recvs)):
        out, into = sends.get(link, []), recvs.get(link, [])
        for a, b in zip(out, into):
            if a.cnt != b.cnt:
                raise ProgramError(f"gpu {b.gpu} tb {b.tb} step {b.index}: receives {b.cnt} "
                                   f"chunks from gpu {a.gpu} tb {a.tb} step {a.index}, which "
                                   f"sends {a.cnt}")
            match[b] = a
        if len(out) != len(into):
            extra = (out if len(out) > len(into) else into)[min(len(out), len(into))]
            what = (f"receive on gpu {link[1]}" if len(out) > len(into)
                    else f"send from gpu {link[0]}")
            raise ProgramError(f"gpu {extra.gpu} tb {extra.tb} step {extra.index}: its "
                               f"{extra.type} has no matching {what} on channel "
                               f"{link[2]} ({len(out)} sends, {len(into)} receives)")
    order = sorted(ops)
    first, last = {}, {}        # op -> round of its first and last transfer
    floor = dict.fromkeys(order, 0)
    for _ in range(2 * len(order) + 2):
        changed = False
        for key in order:
            op = ops[key]
            before = [ops[op.gpu, op.tb, op.index - 1]] if op.index else []
            if op.dep is not None:
                before.append(ops[(op.gpu, *op.dep)])
            start = max([floor[key]] + [last.get(p, 0) + (p.type in RECEIVES and p.type not in
                                                          SENDS) for p in before])
            if op.type in RECEIVES:         # its receive shares the round of the send
                sender = match[op]
                sent = last.get(sender, 0)
                start = max(start, sent)
                if sent < start:
                    at = (sender.gpu, sender.tb, sender.index)
                    floor[at] = max(floor[at], start - sent + first.get(sender, 0))
                    changed = True
            end = start + (op.type in RECEIVES and op.type in SENDS)
            if first.get(op) != start or last.get(op) != end:
                first[op], last[op], changed = start, end, True
        if not changed:
            break
    else:
        raise ProgramError("the program's dependencies and messages form a cycle: it deadlocks")
    transfers = [[] for _ in range(ngpus)]
    for op in ops.values():
        send, recv, chan = tbs[op.gpu, op.tb]
        where = f"gpu {op.gpu} tb {op.tb} step {op.index}"
        if op.type in RECEIVES:
            sender = match[op]
            into = op.src if op.type == "rrs" else op.dst
            transfers[op.gpu].append(Transfer(first[op], (chan, op.tb, op.index), False, recv,
                                              into, op.type in FOLDS, where, sender.src
                                              if sender.type in ("s", "rrs") else sender.dst))
        if op.type in SENDS:
            out = op.src if op.type in ("s", "rrs") else op.dst
            transfers[op.gpu].append(Transfer(last[op], (chan, op.tb, op.index), True, send,
                                              out, False, where, None))
    for mine in transfers:
        mine.sort(key=lambda t: (t.round, not t.send, t.key))
    return transfers


def _elements(program: Program, count: int):
    """``chunk -> (lo, hi)`` of data, and the scratch chunk size, for ``count`` elements."""
    n, size = program.nchunks, program.ngpus
    if program.collective == "allreduce":
        edges = bounds(count, n)
    else:
        per = n // size
        blocks = bounds(count, size)
        edges = [e for b in range(size) for e in bounds(blocks[b + 1] - blocks[b], per,
                                                        blocks[b])[:-1]] + [count]
    return edges, -(-count // n), count % n == 0


def builder_of(program: Program):
    """The pure builder ``(rank, size, count, topology=None) -> list[Step]`` of ``program``."""

    def build(rank, size, count, topology=None):
        if size != program.ngpus:
            raise ValueError(f"MSCCL program {program.name!r} is for exactly {program.ngpus} "
                             f"ranks, not {size}")
        if size == 1 or count == 0:
            return []
        edges, q, even = _elements(program, count)

        def chunk(ref, where):
            space, offset, cnt = ref
            if space == "scratch":
                if not even:
                    raise ValueError(f"{where}: uses scratch, which needs count ({count}) "
                                     f"divisible by nchunksperloop ({program.nchunks})")
                return Chunk("scratch", offset * q, (offset + cnt) * q)
            return Chunk("data", edges[offset], edges[offset + cnt])

        rounds = {}
        for t in program.transfers[rank]:
            mine = chunk(t.ref, t.where)
            if t.other is not None and t.other[0] == "data" and mine.buffer == "data":
                theirs = chunk(t.other, t.where)
                if theirs.count != mine.count:
                    raise ValueError(f"{t.where}: receives {theirs.count} elements into a chunk "
                                     f"of {mine.count} (count {count} is not divisible by "
                                     f"nchunksperloop {program.nchunks})")
            op = Send(t.peer, mine) if t.send else Recv(t.peer, mine, t.reduce)
            rounds.setdefault(t.round, []).append(op)
        return compact(rounds[r] for r in sorted(rounds))

    build.__doc__ = __doc__
    return build


def load_algorithm(path: str) -> str:
    """Register the MSCCL program in XML file ``path`` as an algorithm; return its name.

    The name is the program's ``name`` attribute; the collective its ``coll``; it runs at
    exactly ``ngpus`` ranks. ValueError (a :class:`pyar.ScheduleError` as well) naming the
    gpu, threadblock and step of what pyar cannot run.
    """
    if not os.path.isfile(path):
        raise ValueError(f"no such MSCCL program file {os.path.abspath(path)}")
    with open(path, encoding="utf-8") as f:
        program = parse(f.read(), path)
    register_algorithm(program.name, program.collective)(builder_of(program))
    return program.name


def load_all(specs) -> None:
    """Every ``--load`` given (a list, or None): an ``.xml`` file is an MSCCL program
    (:func:`load_algorithm`), anything else a module (:func:`pyar.core.loader.import_spec`)."""
    for spec in specs or ():
        if spec.lower().endswith(".xml"):
            load_algorithm(spec)
        else:
            loader.import_spec(spec)
