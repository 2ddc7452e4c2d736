"""Progress: the one wait of pyar, its event hook, and the collectives in flight.

A collective call is a :class:`Run`: a compiled plan's steps (or the MPI
library's own nonblocking collective, as one step) on the call's buffers.
Every step, whatever its transport (``Isend``/``Irecv``, shared-memory
mailboxes and persistent requests, native mailbox programs, device
buffers), is a :class:`Step`, one protocol implemented once per kind::

    start(ctx)      post its transfers
    test(ctx)       True once they are all complete (never blocks)
    finish(ctx)     fold and copy what arrived, in the schedule's order
    pending(ctx)    the peers it still waits for (for error messages)
    run(ctx)        start, wait, finish: its blocking form, derived from the above

:meth:`Run.progress` advances a run as far as it can without blocking, so a
nonblocking collective is a run the caller's ``test``/``wait``, the next
pyar call, or a progress thread (:class:`Progress`, ``PYAR_PROGRESS_THREAD=1``)
progresses. Every wait goes through :func:`wait_for`, which polls with a
deadline, advances every run in flight meanwhile (so ranks that wait for
their requests in different orders, or make a blocking call while another
is in flight, still meet), yields the core after a few polls (or, on a node
with more ranks than processors, sleeps between polls once the wait has gone
on a moment: :data:`napping`), and raises :class:`pyar.TimeoutError` naming
the collective, its sequence number on the communicator, the step and the
peer. :data:`hook`, when set, is called as ``hook(event, run, step)`` for
every step's events and ``"done"`` of every run; unset, it costs nothing,
since the lean paths are only taken then. The events of a step are ``"start"`` (before its
transfers are posted), ``"post"`` (after), ``"ready"`` (they are complete)
and ``"complete"`` (folded and copied); the logs, the timeline and anything
else put themselves on the hook with :func:`listen`.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
from functools import partial

import numpy as np

from ..core.errors import PyarError, TimeoutError

hook = None                 # hook(event, run, step) or None; see the module docstring
_listeners: list = []       # what :func:`listen` put on the hook
on_stall = None             # on_stall(seconds waited): a stalled wait's duty (notice.poll)
STALL_POLL = 1e-3           # seconds between a stalled wait's calls of on_stall
OPEN: list = []             # runs in flight (nonblocking collectives not yet complete)
# what keeps a native start (kernels.mailbox.start) from running at once: the runs in
# OPEN, a hook set, a progress thread running (their count: 0 lets it run); :func:`_fly`,
# :func:`_land` and :func:`_flight` keep it
FLIGHT = np.zeros(1, np.int64)
WAITED: list = []           # runs being waited for (out of OPEN meanwhile: advanced by
                            # their wait alone)
ABANDONED: list = []        # contexts (buffers) of failed runs: MPI may still write there
SPINS = 64                  # polls before a waiting rank starts to yield its core
NAPPING_SPINS = 4           # the same on an oversubscribed node (a poll there holds the core
                            # a peer needs: a run's poll costs ~1 us of Python)
NAP = 5e-5                  # seconds a wait then sleeps between polls, where napping is set,
NAP_AFTER = 2e-4            # once it has yielded this long (the peer is not about to come)
napping = False             # set once a node turned out oversubscribed (.shm.Pool): a yield
                            # leaves a spinning rank runnable, taking turns with the peers it
                            # waits for; a nap hands the core to them
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))
_monotonic = time.monotonic
_sleep = time.sleep


class Step:
    """One step of a call on some transport: the protocol of the module docstring. A kind of
    step implements :meth:`start`, :meth:`test`, :meth:`finish` and :meth:`pending` once;
    :meth:`run`, the blocking form, follows from them. ``where`` names it in errors
    (``"rank 3 step 2"``); ``ctx`` is the call's state for it, whatever its kind needs."""

    __slots__ = ()
    where = "a step"

    def start(self, ctx) -> None:
        """Post the step's transfers."""
        raise NotImplementedError

    def test(self, ctx) -> bool:
        """Whether every transfer is complete (never blocks)."""
        raise NotImplementedError

    def finish(self, ctx) -> None:
        """Fold and copy what arrived, in the schedule's order."""

    def pending(self, ctx) -> list[int]:
        """The peers the step still waits for."""
        return []

    def run(self, ctx, deadline=None) -> None:
        """Start, wait through :func:`wait_for` (until ``deadline``, a ``time.monotonic()``
        value, at most; then pyar.TimeoutError naming the peers it waited for), finish."""
        self.start(ctx)
        if not self.test(ctx):
            wait_for(partial(self.test, ctx), deadline, partial(self.stalled, ctx))
        self.finish(ctx)

    def stalled(self, ctx, waited: float) -> TimeoutError:
        """The error of a wait for this step that ran past its deadline after ``waited`` s."""
        peers = self.pending(ctx)
        return TimeoutError(f"{self.where} waited{_for(peers)}; gave up after {waited:.1f} s",
                            step=getattr(self.where, "step", None), peers=peers, waited=waited)


def _for(peers) -> str:
    """`` for rank 3`` or `` for ranks 0, 3`` (nothing for no peers)."""
    return f" for rank{'s' if len(peers) > 1 else ''} {', '.join(map(str, peers))}" \
        if peers else ""


class Run:
    """One collective call: ``steps`` run one after another with ``ctx`` (their buffers and
    communicator), then ``finish()`` gives its result; ``what`` names it in errors (e.g.
    ``"allreduce #12 (ring, 1024 float32)"``), ``on_error(exc)`` is told if it fails."""

    __slots__ = ("steps", "ctx", "index", "started", "finish", "what", "on_error", "result",
                 "error", "done", "deadline", "record", "__weakref__")

    def __init__(self, steps, ctx, finish, what, on_error=None, deadline=None, record=None):
        self.steps, self.ctx, self.finish, self.what = steps, ctx, finish, what
        self.on_error, self.deadline = on_error, deadline
        self.record = record        # (flight-recorder entry, Comm) for the hook's listeners
        self.index, self.started, self.done = 0, False, False
        self.result = self.error = None

    def begin(self) -> None:
        """Post the first step now (so that collectives begin in the caller's order)."""
        if self.done or self.started or not self.steps:
            return
        if hook is not None:
            hook("start", self, 0)
        try:
            self.steps[0].start(self.ctx)
        except BaseException as e:
            self.fail(e)
            raise
        self.started = True
        if hook is not None:
            hook("post", self, 0)

    def progress(self) -> bool:
        """Advance as far as possible without blocking; True once complete (or failed). An
        interrupt (not an Exception) fails the run and goes on up. Under :data:`_lock`, so
        that threads waiting on requests advance each run one at a time."""
        if self.done:
            return True
        with _lock:
            return self._progress()

    def _progress(self) -> bool:
        if self.done:
            return True
        try:
            steps, ctx = self.steps, self.ctx
            while self.index < len(steps):
                step = steps[self.index]
                if not self.started:
                    if hook is not None:
                        hook("start", self, self.index)
                    step.start(ctx)
                    self.started = True
                    if hook is not None:
                        hook("post", self, self.index)
                if not step.test(ctx):
                    if self.deadline is not None and _monotonic() > self.deadline:
                        self.fail(self.stalled(None))     # the call's own timeout, for
                        return True                       # test() and the thread too
                    return False
                if hook is not None:
                    hook("ready", self, self.index)
                step.finish(ctx)
                if hook is not None:
                    hook("complete", self, self.index)
                self.index += 1
                self.started = False
            self.result = self.finish()
        except BaseException as e:
            self.fail(e)
            if not isinstance(e, Exception):
                raise
        self.done = True
        if hook is not None:
            hook("done", self, self.index)
        return True

    def fail(self, error: BaseException) -> None:
        """Record ``error`` as this run's outcome and tell its owner (once). Its buffers are
        kept for good (:data:`ABANDONED`): a late peer's message may still land there."""
        if self.error is None:
            self.error = error
            ABANDONED.append(self.ctx)
            if self.on_error is not None:
                self.on_error(error)
        self.done = True

    def complete(self, deadline=None):
        """Block until done (deadline: a ``time.monotonic()`` value, or None); the result, or
        the run's error raised. Past the call's own deadline the run fails; past only the
        waiter's, it stays in flight (TimeoutError all the same)."""
        if not self.done:
            own = self.deadline
            if own is not None:
                deadline = own if deadline is None else min(deadline, own)
            with _lock:     # advanced by this wait alone meanwhile (not also by its passes
                waited = self in OPEN           # over the runs in flight: on a busy node,
                if waited:                      # a poll is the core's time a peer needs)
                    _land(self)
                WAITED.append(self)
            try:
                wait_for(self.progress, deadline, self.stalled)
            except TimeoutError as e:     # this wait's deadline, not the call's: in flight
                if e.failed_rank is None and (own is None or _monotonic() < own):
                    if waited and not self.done:
                        with _lock:
                            _fly(self)
                    raise
                self.fail(e)
            except BaseException as e:
                self.fail(e)
            finally:
                with _lock:
                    WAITED.remove(self)
        if OPEN and self in OPEN:       # (complete: out of flight now, not at the next pass)
            with _lock:
                if self in OPEN:
                    _land(self)
        if self.error is not None:
            raise self.error
        return self.result

    def stalled(self, waited: float | None) -> TimeoutError:
        """The error of a wait on this run that ran past its deadline (``waited``: seconds
        this wait took; None: the call's own deadline passed while it was advanced)."""
        where, step, peers = "before its first step", None, []
        if self.index < len(self.steps):
            step = self.index
            peers = self.steps[step].pending(self.ctx) if self.started else []
            where = f"step {step} of {len(self.steps)} waited{_for(peers)}"
        after = "its timeout passed" if waited is None else f"gave up after {waited:.1f} s"
        return TimeoutError(f"{self.what}: {where}; {after} (did every rank call it, and with "
                            f"the same arguments?)", step=step, steps=len(self.steps),
                            peers=peers, waited=waited)


def wait_for(test, deadline, stalled) -> None:
    """Poll ``test()`` until it is true: every wait in pyar comes here.

    Meanwhile every run in flight is advanced. ``deadline`` is a
    ``time.monotonic()`` value or None (wait for ever, as MPI does); past it,
    ``stalled(seconds waited)`` is raised. Once the wait yields its core, it calls
    :data:`on_stall` every :data:`STALL_POLL` seconds, which may raise too (a peer's failure:
    :mod:`.notice`).
    """
    spins, began, polled = 0, None, 0.0
    while not test():
        if OPEN:
            progress_open()
        spins += 1
        if spins < (NAPPING_SPINS if napping else SPINS):
            continue
        now = _monotonic()
        if began is None:
            began = polled = now
        if napping and now - began > NAP_AFTER:
            _sleep(NAP)
        else:
            _yield()
        if deadline is not None and now > deadline:
            raise stalled(now - began + SPINS * 1e-7)
        if now >= polled and on_stall is not None:
            polled = now + STALL_POLL
            try:
                on_stall(now - began)
            except PyarError as e:      # what this wait waited for, for the flight recorder
                if stalled is not None and e.waiting is None:
                    e.waiting = stalled(now - began)
                raise


def stop(comm, error: BaseException) -> None:
    """Fail every run in flight on ``comm`` (its :attr:`Run.record`'s), made unusable by
    ``error`` (another of its calls failed mid-way): its ranks are out of step, so no run
    there can count on its peers any more. Each fails with an error of ``error``'s class
    naming both calls; a wait on one returns at its next poll."""
    kind = type(error) if isinstance(error, PyarError) else PyarError
    with _lock:
        for run in [*OPEN, *WAITED]:
            if run.error is None and run.record is not None and run.record[1] is comm:
                run.fail(kind(f"{run.what} stopped: {comm.broken}"))


def progress_open() -> None:
    """Advance every run in flight once; those that complete leave :data:`OPEN`."""
    with _lock:
        for run in list(OPEN):
            if run.progress():
                _land(run)


def deadline_of(timeout) -> float | None:
    """The ``time.monotonic()`` deadline of a wait of ``timeout`` seconds (None: none)."""
    return None if timeout is None else _monotonic() + timeout


def check_timeout(timeout) -> float | None:
    """``timeout`` as seconds > 0, or None; ValueError otherwise."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a number of seconds > 0, or None, got {timeout!r}")
    return float(timeout)


class Request:
    """A nonblocking collective in flight (``pyar.iallreduce`` and its siblings).

    ``test()`` advances it and says whether it is complete; ``wait(timeout=None)``
    blocks until it is and returns its result (raising its error, if it failed);
    ``done`` and ``result`` read its state. It is advanced by its own
    ``test``/``wait``, by any other pyar call's waits, and by a progress thread
    if one runs (:class:`Progress`). The input ``x`` must not be written, nor
    the result read, until it is complete (as MPI's nonblocking collectives
    require). A request dropped before completion warns, and is still
    completed by later pyar calls (its buffers are held until then).
    """

    __slots__ = ("_run",)

    def __init__(self, run: Run):
        self._run = run

    def __repr__(self):
        state = "done" if self._run.done else f"step {self._run.index} of {len(self._run.steps)}"
        return f"<pyar.Request {self._run.what}: {state}>"

    def test(self) -> bool:
        """Advance this request (and every other in flight); whether it is complete."""
        with _lock:
            if OPEN:
                progress_open()
            return self._run.progress()

    def wait(self, timeout=None):
        """Block until complete (at most ``timeout`` seconds: then pyar.TimeoutError) and
        return the collective's result."""
        deadline = deadline_of(check_timeout(timeout))
        return self._run.complete(deadline)

    @property
    def done(self) -> bool:
        return self._run.done

    @property
    def result(self):
        """The collective's result; PyarError if the request is not complete yet."""
        run = self._run
        if not run.done:
            raise PyarError(f"{run.what} is not complete yet: wait() for it first")
        if run.error is not None:
            raise run.error
        return run.result

    def __del__(self):
        run = self._run
        if not run.done:
            warnings.warn(f"pyar.Request for {run.what} dropped before it completed: wait() "
                          f"for every request (later pyar calls complete it meanwhile)",
                          ResourceWarning, stacklevel=2)


def start(run: Run) -> Run:
    """Put ``run`` in flight and advance it once (with a progress thread, only begin its
    first step and leave the rest to the thread: whoever tests a request also does MPI's
    copying of its messages); ``run``."""
    with _lock:
        if thread is not None:      # its first step begins here, in this rank's call order
            run.begin()             # (MPI's own collectives match in the order started)
            _fly(run)
            _wake.set()
        else:
            if OPEN:
                progress_open()
            if not run.progress():
                _fly(run)
    return run


def wait_all(requests, timeout=None) -> list:
    """Wait for every request (``timeout`` seconds in all); their results, in order."""
    deadline = deadline_of(check_timeout(timeout))
    return [r._run.complete(deadline) for r in requests]


def test_any(requests) -> int | None:
    """Advance every request once; the index of one that is complete, else None."""
    with _lock:
        progress_open()
        for i, r in enumerate(requests):
            if r._run.progress():
                return i
    return None


# Held while a run is advanced or put in flight, never across a wait (a thread blocked in
# one for its peers would keep the others from theirs: a deadlock across the ranks).
_lock = threading.RLock()
_wake = threading.Event()   # set when a run is put in flight
thread: threading.Thread | None = None    # the progress thread, while one runs
_users = 0
POLL_SECONDS = 50e-6        # the progress thread's pause between passes


def _progress_loop():
    while thread is threading.current_thread():
        if not OPEN:
            _wake.wait(0.05)
            _wake.clear()
            continue
        with _lock:
            progress_open()
        time.sleep(POLL_SECONDS)    # gives the GIL back, so the caller's Python goes on


class Progress:
    """A background thread that advances the collectives in flight, so they overlap work
    that does not call into pyar (``with pyar.Progress(): ...``; nests; also started at
    import with ``PYAR_PROGRESS_THREAD=1``). The MPI library must provide
    MPI_THREAD_MULTIPLE (mpi4py asks for it)."""

    def __enter__(self):
        global thread, _users
        _users += 1
        if thread is None:
            from mpi4py import MPI

            if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
                _users -= 1
                raise PyarError("pyar.Progress needs MPI_THREAD_MULTIPLE; this MPI was "
                                "initialized with less (mpi4py.rc.thread_level)")
            thread = threading.Thread(target=_progress_loop, name="pyar-progress",
                                       daemon=True)
            _flight()
            thread.start()
        return self

    def __exit__(self, *exc):
        global thread, _users
        _users -= 1
        if _users == 0 and thread is not None:
            stopping, thread = thread, None
            _flight()
            _wake.set()
            stopping.join()
        return False


def from_environment() -> None:
    """Start a progress thread for the whole process if ``PYAR_PROGRESS_THREAD=1`` (stopped
    at exit, before MPI is finalized)."""
    text = os.environ.get("PYAR_PROGRESS_THREAD", "").strip()
    if text not in ("", "0", "1"):
        raise ValueError(f"PYAR_PROGRESS_THREAD must be 0 or 1, got {text!r}")
    if text == "1" and thread is None:
        whole = Progress().__enter__()
        atexit.register(whole.__exit__, None, None, None)


def _fly(run: Run) -> None:
    """Put ``run`` in :data:`OPEN`."""
    OPEN.append(run)
    _flight()


def _land(run: Run) -> None:
    """Take ``run`` out of :data:`OPEN`."""
    OPEN.remove(run)
    _flight()


def _flight() -> None:
    """:data:`FLIGHT` anew (a run put in flight or out of it, a hook or the progress thread
    set or unset)."""
    FLIGHT[0] = len(OPEN) + (hook is not None) + (thread is not None)


def quiet() -> bool:
    """Whether a blocking call may take the lean paths: no hook, nothing in flight, no
    progress thread."""
    return hook is None and not OPEN and thread is None


def lock():
    """The lock held while runs are advanced or put in flight (an RLock; never across a
    wait)."""
    return _lock


def listen(listener) -> None:
    """Call ``listener(event, run, step)`` on every event of the hook from now on (which
    takes every later call off the lean paths: decide once, when settings are read)."""
    global hook
    if listener not in _listeners:
        _listeners.append(listener)
    hook = _listeners[0] if len(_listeners) == 1 else _fan_out
    _flight()


def unlisten(listener) -> None:
    """Stop calling ``listener``; with none left, the hook is unset (the lean paths again)."""
    global hook
    if listener in _listeners:
        _listeners.remove(listener)
    hook = None if not _listeners else _listeners[0] if len(_listeners) == 1 else _fan_out
    _flight()


def _fan_out(event, run, step) -> None:
    for listener in _listeners:
        listener(event, run, step)
