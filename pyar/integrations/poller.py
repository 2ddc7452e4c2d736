"""A daemon thread that finishes what completes in the background: the futures of torch's
comm hooks and of the ``"pyar"`` process group's works."""

from __future__ import annotations

import atexit
import threading
import time

POLL_SECONDS = 50e-6        # the pause between passes over the pending items
STOP_SECONDS = 10.0         # at exit, the wait for the pass in progress to end


class Poller:
    """While anything is pending, a daemon thread (``name``) calls ``poll(item)`` on each
    pending item every :data:`POLL_SECONDS`; an item leaves once ``poll`` returns True
    (it has finished it). The thread starts with the first item and idles (a 50 ms wait)
    while none is pending.

    It stops at the interpreter's exit, before Python finalizes: an ``atexit`` hook ends
    its loop and joins it (at most :data:`STOP_SECONDS`, the time a pass's future
    callbacks may still take); items still pending are left unfinished. A daemon thread
    that Python finalizes under it instead is ended where it next takes the GIL, which
    inside torch's C++ (a future's ``set_result`` and its callbacks) aborts the process
    ("terminate called without an active exception")."""

    def __init__(self, name: str, poll):
        self.name, self.poll = name, poll
        self.pending, self.wake, self.thread = [], threading.Event(), None
        self.lock = threading.Lock()
        self.stopping = False

    def add(self, item) -> None:
        with self.lock:
            self.pending.append(item)
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self.thread.start()
                atexit.register(self._stop)
        self.wake.set()

    def _loop(self) -> None:
        while not self.stopping:
            if not self.pending:
                self.wake.wait(0.05)
                self.wake.clear()
                continue
            for item in list(self.pending):
                if self.poll(item):
                    with self.lock:
                        self.pending.remove(item)
            time.sleep(POLL_SECONDS)

    def _stop(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(STOP_SECONDS)
