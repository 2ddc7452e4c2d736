"""Persistent collectives (MPI-4's ``MPI_Allreduce_init`` and its siblings): how every call runs.

A :class:`Persistent` request is one collective on bound buffers, set up once
and started many times::

    with pyar.allreduce_init(grad, grad) as request:    # collective: checked, agreed
        for batch in batches:
            backward(batch)                             # writes grad
            request.start()
            ...                                         # anything else meanwhile
            request.wait()                              # grad holds the sum

Its init is collective, as ``MPI_Allreduce_init`` is, and numbered on the
communicator like a call: the arguments are checked, every rank agrees on
the call (a rank with other arguments gets MismatchError, as every rank
does, there), the algorithm is chosen, the plan compiled and bound to the
buffers with what it runs on (:meth:`~.plan.Plan.engine`: mailboxes and
scratch of its own, so requests may be in flight together). A start takes
no argument checks and allocates nothing: it numbers the call (so a start
that is not the other ranks' is a MismatchError, as any call's), records
it in the flight recorder, copies x in where the result is apart from it
(or leaves that to the native program), and with nothing else in flight
runs the native program as far as the peers allow at once (a small
allreduce between ranks that start together completes there); what
remains is a :class:`~.progress.Run` in flight, which every wait advances.
The timeout bounds each wait; a failure mid-way leaves the communicator
unusable (its ranks are out of step), as any call's does.

The plain calls run the same way (:func:`call`): a blocking
``pyar.allreduce(x, out)`` starts and waits for the request cached for its
signature, bound again when its arrays change (its plan's mailboxes are
shared with the other blocking calls, which never overlap: the buffers
copied in and out, or, once the same arrays come twice in a row, bound to
them); a nonblocking ``pyar.iallreduce`` starts a request made for it alone
and returns it. Costs and limits: a request holds its buffers and, for a
plan of a node's ranks, some of the communicator's shared-memory segment
(``PYAR_SHM_BYTES``; once it is full, requests send through MPI); where the
node's ranks read a large request's buffers from each other's memory, the
kernel is asked to back them with huge pages at its init (a blocking call's
once the same arrays come twice: :func:`.shm.huge_pages`, a few ms a 16 MiB
buffer of 4 KiB pages, once); requests on cupy arrays stage through the host
at each start (:mod:`.device`).
"""

from __future__ import annotations

import numpy as np

from ..algorithms import LIBRARY, generation
from ..collectives import widened
from ..core import buffers, ops
from ..core.errors import PyarError
from ..core.ops import Op
from ..kernels import mailbox
from ..model import tuner
from . import calls, notice, progress, recorder, shm
from .baseline import built_in, library
from .comm import Comm
from .plan import RESIDENT_BYTES, Engine
from .programs import Resident
from .progress import Run

recorder.on_call_path(__file__)     # a call record's caller is outside this module

IDLE, ACTIVE, FREED = "inactive", "active", "freed"   # a request's states
_clock, _ENDED = recorder.clock, recorder.ENDED
_native_start = None        # kernels.mailbox.start, loaded with the first native request
_NOT_STARTED = mailbox.NOT_STARTED


class Persistent:
    """A persistent collective request (``pyar.allreduce_init`` and its siblings).

    ``start()`` begins the collective on the bound buffers; ``wait(timeout=None)`` blocks
    until it is complete and returns the result (the bound ``out``, or the request's
    own result array); ``test()`` advances it and says whether it is complete;
    ``free()`` releases it (also at the end of a ``with`` block). Started requests
    complete in any order; every rank must start its requests in the same order.
    ``x`` must not be written and the result not read while a start is active.
    Starting an active request, or using a freed one, raises PyarError.
    """

    __slots__ = ("c", "record", "root", "op", "name", "call", "entry", "sig", "asked",
                 "timeout", "work", "engine", "load", "then", "state", "run", "result",
                 "began", "seq", "x", "out", "kind", "plan", "source", "reduction", "seen",
                 "fresh", "label", "finish", "averaged", "held", "numbered", "shapes",
                 "wire", "direct", "words", "at", "__weakref__")

    def __init__(self, record, x, out, op, algorithm, comm, root, timeout, then=None,
                 kind="own", held=False, reduce_dtype=None):
        """Set up ``record``'s collective on the numpy arrays ``x`` and ``out`` (docs/api.md's
        rules), its arguments as the blocking call's (``reduce_dtype``: the dtype a
        reduction runs in, :func:`~pyar.core.ops.accumulator`); ``then(result)`` maps the result,
        if given (torch tensors). ``kind`` (:meth:`~.plan.Plan.engine`): ``"own"`` for a
        persistent request (collective: the ranks agree here), ``"staged"`` for a blocking
        call's, ``"once"`` for a nonblocking call's (these agree when their plan is
        compiled, at their first call with these arguments, which every rank makes).
        ``held``: the caller holds the communicator's call token (the device path's)."""
        buffers.check_array(x)
        op, c = calls.checked(record, x, op, comm, root)
        self.c, self.record, self.root, self.op, self.kind = c, record, root, op, kind
        self.label = f"pyar.{record.name}"
        if held:
            self._setup(x, out, op, algorithm, timeout, then, kind, reduce_dtype)
            return
        c.enter(self.label)         # (its agreement is a call on c)
        try:
            self._setup(x, out, op, algorithm, timeout, then, kind, reduce_dtype)
        finally:
            c.leave()

    def _setup(self, x, out, op, algorithm, timeout, then, kind, reduce_dtype) -> None:
        c, record, root = self.c, self.record, self.root
        self.timeout = c.timeout if timeout is None else progress.check_timeout(timeout)
        count = record.count(x.size, c.size)
        self.asked = algorithm
        self.name, self.wire = name, wire = calls.chosen(record, algorithm, c, count, x.dtype,
                                                         op, reduce_dtype)
        self.reduction = None if op is None else op.reduction
        self.call = call = calls.signature(record, op, x.dtype, count, root, name, wire)
        self.entry = (notice.fingerprint(call), call)
        self.sig = (record.name, None if op is None else op.value, x.dtype.name, x.size,
                    x.shape, root, name)
        self.then, self.state, self.run, self.result, self.began = then, IDLE, None, None, None
        self.plan = self.engine = self.words = None
        self.seq, self.seen, self.fresh, self.at = 0, None, False, 0
        # the ranks agree at a persistent request's init (a numbered call of its own, as
        # MPI_Allreduce_init is collective), and at a call's where its plan is compiled now,
        # which every rank does at the same call (numbered here, for its start)
        agree = kind == "own" or name != LIBRARY and not calls.is_compiled(
            c, record.name, name, count, root)
        self.numbered = None
        try:
            if kind == "own":
                init = (f"{record.name}_init", *call[1:])
                c.next_tag((notice.fingerprint(init), init))
                self.began = self._record(c, (init[0], *self.sig[1:]))
                checking = init
            else:               # a call's request: numbered for the start that follows
                self.numbered = c.next_tag(self.entry)
                self.began = self._record(c, self.sig)
                checking = call
            if c.check:                 # PYAR_CHECK: before anything else
                c.check_call(checking, progress.deadline_of(self.timeout), self._what(c.seq))
            try:        # out's checks: agreed with the others (it writes out)
                work, refused = self._prepare(x, out), None
            except (ValueError, TypeError) as e:
                work, refused = None, e
            deadline = progress.deadline_of(self.timeout)
            if name != LIBRARY:
                self.plan = calls.compiled(c, record.name, name, count, root, deadline,
                                           self._what(c.seq), refused, call, agree)
            elif agree:
                calls.agreed(c, record.name, name, count, root, deadline, self._what(c.seq),
                             refused, call)
            if refused is not None:
                raise refused
        except BaseException as e:  # before any message, as every rank learnt (agreed): the
            if c.broken is None:    # number is left with no call
                c.unnumbered()
            if isinstance(e, PyarError):
                recorder.failed(self.began, e)
            raise
        try:
            if self.direct is not None and self._window() != self.direct[1]:
                work = self._prepare(x, out)    # (on all of data: the variant needs it)
            self._bind(x, out, work)
        except BaseException as e:  # mid-way (its mailboxes are carved collectively)
            c.abandon(self._what(c.seq), e)
            recorder.failed(self.began, e)
            raise
        if kind == "own":
            self._settle()
        if self.began is not None and kind == "own":
            self.began[_ENDED] = _clock()

    def _record(self, c: Comm, sig: tuple):
        """The flight recorder's record of call number ``c.seq`` (None if nothing records)."""
        if c.recorder is None and progress.hook is None:
            return None
        return recorder.enter(c.recorder, c.seq, sig, self.asked)

    def _prepare(self, x, out):
        """The buffers for ``x`` and ``out`` (the record's :meth:`prepare`): data not filled
        from x where the plan's out-of-place variant or a native program reads x itself."""
        record, c = self.record, self.c
        self.source = self.direct = None
        if self.wire != x.dtype:
            return widened(record, x, out, c.rank, c.size, self.root, self.wire)
        count = record.count(x.size, c.size)
        spans = record.direct(count, c.size, c.rank, self.root)
        if spans is not None and self.name != LIBRARY and x.flags.c_contiguous and \
                buffers.apart(x, out):
            if count * x.dtype.itemsize > RESIDENT_BYTES:
                self.direct = spans             # the plan's out-of-place variant reads x
            if self.direct is not None or spans[0] == slice(0, count):
                self.source = x.reshape(-1)     # (a Resident's program copies all of x in)
        if self.direct is None:
            return record.prepare(x, out, c.rank, c.size, self.root)
        window = self._window()
        if window == slice(0, count):
            return record.prepare(x, out, c.rank, c.size, self.root, copy=False)
        return record.prepare(x, out, c.rank, c.size, self.root, copy=False, window=window)

    def _window(self) -> slice:
        """The part of data that the out-of-place variant runs on (the result's part until
        the plan is compiled)."""
        return self.direct[1] if self.plan is None else \
            self.plan.out_of_place(*self.direct).window

    def _bind(self, x, out, work, kind=None) -> None:
        """Bind ``work`` (prepared for ``x`` and ``out``) and its engine (local: the plan and
        its mailboxes exist on every rank by now)."""
        c, plan, source = self.c, self.plan, self.source
        kind = kind or self.kind
        if kind == "keep":          # another x into the same data: the engine stays (its
            reads = self.engine.resident        # program reads the new x, if it read x)
            if reads is None or reads.source is None:
                source = None
            elif source is not None:
                reads.refill(source)
            else:                   # (a program that cannot read this x: bound anew)
                kind = "bound"
        if kind != "keep" and self.engine is not None:
            self.engine.free()
        if kind == "keep":
            pass
        elif plan is None:
            self.engine = library_engine(self.record, c, x, work, self.reduction, self.root,
                                         kind == "own")
        else:
            if source is not None and self.direct is not None:
                plan = plan.out_of_place(*self.direct)
            self.engine = plan.engine(c.mpi, work.data, self.reduction, self.call, source,
                                      kind)
        fills = self.engine.fills and source is not None
        self.load = None if fills else work.load
        # a record whose prepare() copies x into data but gives no load: bound anew each call
        self.fresh = not fills and work.load is None and work.data.size > 0 and \
            not np.may_share_memory(work.data, x)
        if self.fresh and kind == "own":
            raise TypeError(f"collective {self.record.name!r}: its record's prepare() gives "
                            f"no Work.load, so it has no persistent form")
        self.work, self.x, self.out, self.finish = work, x, out, work.finish
        self.shapes = (x.shape, None, None) if out is None else (x.shape, out.shape, out.dtype)
        self.averaged = work.reduced if self.op is Op.AVG else None   # where avg divides
        self.words = self._words(kind)
        if self.words is not None:      # (the result is the bound buffer, the same each call)
            self.result = work.finish()
        self._arm()

    def _words(self, kind: str):
        """The words of this request's native start (:func:`pyar.kernels.mailbox.start`), or
        None where a start needs Python: its plan is not one native program of a Resident's
        (small, every message a mailbox one), or x is loaded, the result finished, averaged
        or mapped in Python, or PYAR_CHECK checks each call."""
        c, engine, work = self.c, self.engine, self.work
        program = engine.program
        if kind == "once" or not isinstance(program, Resident) or program is not \
                engine.resident or engine.before is not None or engine.after is not None or \
                self.load is not None or not work.plain or self.averaged is not None or \
                self.then is not None or self.fresh or c.check:
            return None
        global _native_start
        if _native_start is None:
            _native_start = mailbox.starter()[0]
        words = np.zeros(mailbox.START_WORDS, np.int64)
        words[mailbox.PROGRAM], words[mailbox.ROWS] = program.address, program.rows
        words[mailbox.FINGERPRINT] = program.fingerprint
        words[mailbox.SPINS] = program.start_spins if kind == "own" else program.blocking_spins
        words[mailbox.CALLS] = program.channels.counter.ctypes.data
        words[mailbox.COMM], words[mailbox.TOKEN] = c.words.ctypes.data, c.token.ctypes.data
        words[mailbox.FLIGHT] = progress.FLIGHT.ctypes.data
        if c.recorder is not None:
            words[mailbox.RING] = c.recorder.ring.ctypes.data
            words[mailbox.WHO] = c.recorder.register(self.sig, self.asked)
        c.know(*self.entry)
        return words

    def _arm(self) -> None:
        """Let a start be native (:attr:`at`, the address of its words; 0: none) where it
        may, once the number that the request's setup gave its first call is used."""
        self.at = 0 if self.words is None or self.numbered is not None else \
            self.words.ctypes.data

    def _settle(self) -> None:
        """The bound buffers are kept from start to start: where the node's ranks read them
        from each other's memory (a Stream's offers), backed by huge pages
        (:func:`.shm.huge_pages`: read about twice as fast as 4 KiB pages)."""
        if getattr(self.engine.program, "attach", False):
            for a in (self.work.data, self.source):
                if a is not None:
                    shm.huge_pages(a)

    def _what(self, seq: int) -> str:
        x = self.sig
        return f"{x[0]} #{seq} on rank {self.c.rank} ({self.name}, {x[3]} {x[2]})"

    def __repr__(self):
        return f"<pyar.Persistent {self.sig[0]} ({self.name}, {self.sig[3]} {self.sig[2]}): " \
               f"{self.state}>"

    def start(self) -> None:
        """Start the collective on the bound buffers (nonblocking): where the request runs
        natively (:meth:`_words`) and nothing is in flight, one native call."""
        at, c = self.at, self.c
        if at and self.state is IDLE:
            went = _native_start(at)
            if went == 0:
                self.state, self.run = ACTIVE, None
                return
            if went != _NOT_STARTED:        # (the native start holds the call token)
                try:
                    self._went_on(c, went)
                finally:
                    c.leave()
                return
        if self.state is not IDLE:
            raise self._refused("start")
        c.enter(self.label)
        try:
            self._start(c)
        finally:
            c.leave()

    def _start(self, c: Comm, blocking: bool = False) -> None:
        """Start the call (the caller holds the call token)."""
        if c.broken is not None:    # a peer's failure told meanwhile is raised first, once
            c.notice.receive(True)
            c.check_usable()
        tag = self.numbered
        if tag is None:
            tag = c.next_tag(self.entry)
            self.began = self._record(c, self.sig)
            if c.check:                 # PYAR_CHECK: before any message (else at the init)
                try:
                    c.check_call(self.call, progress.deadline_of(self.timeout),
                                 self._what(c.seq))
                except BaseException as e:
                    c.unnumbered()
                    if isinstance(e, PyarError):
                        recorder.failed(self.began, e)
                    raise
        else:
            self.numbered = None        # (numbered and recorded by the init, which agreed)
            self._arm()
        self.seq = seq = c.seq
        engine = self.engine
        self.state = ACTIVE
        try:
            if self.load is not None:
                self.load()
            if engine.before is not None:
                engine.before()
            program = engine.program
            if program is not None and progress.hook is None and not progress.OPEN and \
                    progress.thread is None:        # nothing else in flight: at once
                stopped = program.attempt(seq, blocking)
                if stopped is None:
                    self.run = None
                    self._complete()
                    return
                steps, ctx, done, abandon = program.execution(seq, stopped[1], stopped[0])
            else:
                steps, ctx, done, abandon = engine.launch(seq, tag)
        except BaseException as e:
            self.state, self.run = IDLE, None
            self._failed(e, None)
            raise
        self._launch(c, seq, steps, ctx, done, abandon)

    def _went_on(self, c: Comm, went: int) -> None:
        """Go on with the call that a native start numbered, recorded natively and ran up to
        a row it stopped at (``went`` - 1), or at which it went wrong (``went`` < 0); the
        native start left the call token taken, as the caller holds it."""
        words, program = self.words, self.engine.program
        self.seq = seq = words.item(mailbox.SEQ)
        call = words.item(mailbox.CALL)
        self.began = self._record(c, self.sig)
        self.state = ACTIVE
        try:
            if went < 0:
                raise program._failed(went, call, seq)
            steps, ctx, done, abandon = program.execution(seq, went - 1, call)
        except BaseException as e:
            self.state, self.run = IDLE, None
            self._failed(e, None)
            raise
        self._launch(c, seq, steps, ctx, done, abandon)

    def _launch(self, c: Comm, seq: int, steps, ctx, done, abandon) -> None:
        """Put the rest of call ``seq`` in flight: its ``steps`` as a Run."""
        self.run = run = Run(steps, ctx, self._finisher(done), self._what(seq),
                             lambda error: self._failed(error, abandon),
                             progress.deadline_of(self.timeout), (self.began, c))
        progress.start(run)

    def _finisher(self, done):
        if done is None:
            return self._complete

        def finish():
            done()
            return self._complete()
        return finish

    def _complete(self):
        """The call is complete: its result (the engine's copy out, avg's division)."""
        after = self.engine.after
        if after is not None:
            after()
        if self.averaged is not None:
            ops.finalize(self.averaged, Op.AVG, self.c.size)
        if self.began is not None:
            self.began[_ENDED] = _clock()
        result = self.finish()
        if self.then is not None:
            result = self.then(result)
        self.result = result
        return result

    def _failed(self, error: BaseException, abandon) -> None:
        """The start failed mid-way: its buffers are left to late peers' messages and the
        communicator is out of step (every rank is told). A run's error is raised by the
        wait (or test) that finds it."""
        if abandon is not None:
            abandon()
        elif self.engine.program is not None:
            self.engine.program.interrupted()
        self.c.abandon(self._what(self.seq), error)
        recorder.failed(self.began, error)

    def wait(self, timeout=None):
        """Block until the started collective is complete (at most ``timeout`` seconds, else
        the request's own; past it, pyar.TimeoutError) and return its result."""
        if self.state is not ACTIVE:
            raise self._refused("wait for")
        run = self.run
        if run is not None:
            try:
                self.result = run.complete(progress.deadline_of(
                    progress.check_timeout(timeout)))
            except BaseException:
                if run.error is not None:      # (past only this wait's timeout: still active)
                    self.state = IDLE
                raise
        self.state = IDLE
        return self.result

    def test(self) -> bool:
        """Advance the started collective (and every other in flight); whether it is complete
        (then :meth:`wait` returns at once)."""
        if self.state is not ACTIVE:
            raise self._refused("test")
        run = self.run
        if run is None:
            return True
        with progress.lock():
            if progress.OPEN:
                progress.progress_open()
            done = run.progress()
        if done and run.error is not None:
            self.state = IDLE
            raise run.error
        return done

    @property
    def active(self) -> bool:
        """Whether a start has not been waited for yet."""
        return self.state is ACTIVE

    def free(self) -> None:
        """Release the request (its engine's MPI requests); an active one is waited for first
        (as MPI_Request_free lets it complete). Idempotent."""
        if self.state is FREED:
            return
        if self.state is ACTIVE:
            self.wait()
        self.state = FREED
        if self.engine is not None:
            self.engine.free()
        self.work = self.x = self.out = self.result = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.state is ACTIVE and exc[0] is not None:
            self.state = IDLE      # (the error goes on; the communicator tells the rest)
        self.free()
        return False

    def _refused(self, doing: str) -> PyarError:
        if self.state is FREED:
            return PyarError(f"cannot {doing} a freed {self!r}")
        if self.state is ACTIVE:
            return PyarError(f"cannot start {self!r}: it is active (wait() for it first)")
        return PyarError(f"cannot {doing} {self!r}: it is not started (start() it first)")

    def __call__(self, x, out, timeout=None):
        """The blocking call on ``x`` and ``out``: this (cached) request bound to them if it
        is not yet, started and waited for. Binding is local: the same arrays twice in a
        row bind the plan's Resident to them (no copies); other arrays go through its own
        buffers. With ``out`` None, the result is a new array each call. The same arrays
        again, with no timeout of its own: one native call, where :meth:`start`'s is."""
        at = self.at
        if at and x is self.x and out is self.out and timeout is None and self.seen and \
                self.state is IDLE and (x.shape, out.shape, out.dtype) == self.shapes and \
                out.flags.writeable:        # (arrays reshaped or frozen since: checked)
            went = _native_start(at)
            if went == 0:
                return self.result
            if went != _NOT_STARTED:        # (the native start holds the call token)
                c = self.c
                self.timeout = c.timeout
                try:
                    self._went_on(c, went)
                    result = self.wait()
                finally:
                    c.leave()
                return result
        if self.seen is None:       # its first call, on the arrays its init bound
            self.seen = False
        elif out is None or out is not self.out or self.fresh or x.shape != self.shapes[0] \
                or out.shape != self.shapes[1] or out.dtype != self.shapes[2] \
                or not out.flags.writeable:     # (arrays reshaped or frozen since: checked)
            self._bind(x, out, self._prepare(x, out))       # through the plan's buffers
            self.seen = False
        elif not self.seen:         # the same out again: the Resident bound to it from now on
            self.seen = True
            self._bind(x, out, self._prepare(x, out), "bound" if self._bindable(out) else None)
            self._settle()
        elif x is not self.x:       # another x into the same out
            self._bind(x, out, self._prepare(x, out), "keep" if self._bindable(out) else None)
        c = self.c
        self.timeout = c.timeout if timeout is None else progress.check_timeout(timeout)
        if self.state is not IDLE:
            raise self._refused("start")
        c.enter(self.label)         # (held until the call returns, as any blocking call's)
        try:
            self._start(c, True)
            result = self.wait()
        finally:
            c.leave()
        return result

    def _bindable(self, out) -> bool:
        """Whether a blocking call's small plan can run in ``out``'s own memory."""
        return self.kind == "staged" and self.plan is not None and self.wire == out.dtype and \
            self.plan.small(out.dtype) and out.flags.c_contiguous and \
            self.record.count(out.size, self.c.size) == self.plan.count


def library_engine(record, c, x, work, reduction, root, persistent) -> Engine:
    """The engine of algorithm ``"mpi"``: with ``persistent`` (collective), the MPI library's
    own persistent collective, bound now (a built-in collective's); else its nonblocking
    collective at each start."""
    if persistent and built_in(record):
        step = library(record, c, x, work, reduction, root, persistent=True)
        return Engine(lambda seq, tag: ([step], None, None, None), free=step.free)
    return Engine(lambda seq, tag: ([library(record, c, x, work, reduction, root)], None,
                                    None, None))


def start_all(requests) -> None:
    """Start every request, in order (MPI_Startall)."""
    for request in requests:
        request.start()


_cache: dict = {}
_CACHED = 256               # signatures whose requests the blocking calls keep


def call(record, x, out, op, algorithm, comm, root, timeout, reduce_dtype=None):
    """The blocking call on the numpy array ``x``: the request cached for the call's
    signature (made at its first call, which every rank makes), run on ``x`` and ``out``.
    The signature is what every rank passes alike (collective, dtype, count, op,
    algorithm, communicator, root, reduce_dtype, and the tuner's overrides and
    registrations)."""
    key = (record, x.dtype, x.size, id(op), algorithm, id(comm), root, reduce_dtype,
           tuner.overrides(), generation[0])
    request = _cache.get(key)       # (a broken communicator's requests are dropped: _forget)
    if request is None:
        request = Persistent(record, x, out, op, algorithm, comm, root, timeout,
                             kind="staged", reduce_dtype=reduce_dtype)
        request.held = (op, comm)       # (their ids in the key are theirs while it is kept)
        if len(_cache) >= _CACHED:
            _cache.clear()
        _cache[key] = request
    return request(x, out, timeout)


def start_once(record, x, out, op, algorithm, comm, root, timeout, then=None,
               reduce_dtype=None) -> Run:
    """A nonblocking call on the numpy array ``x``: a request made for it alone (on its
    plan's spare buffers), started; its run, in flight."""
    request = Persistent(record, x, out, op, algorithm, comm, root, timeout, then, "once",
                         reduce_dtype=reduce_dtype)
    request.start()
    return request.run


def _forget(c: Comm) -> None:
    """Drop the cached requests of ``c`` (freed, or unusable)."""
    for key, request in list(_cache.items()):  # (a copy, taken at once: other threads'
        if request.c is c:                      # blocking calls change _cache meanwhile)
            _cache.pop(key, None)


Comm.on_retire.append(_forget)
