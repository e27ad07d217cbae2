"""Work handles torch gets back from the distrun process group.

Done: a call that ran to completion before returning (torch's blocking
path).  Async: a call running in libdistrun's background (async_op=True,
DDP's allreduce, isend/irecv), around a dr_work handle.

The lifetime trap: torch's C++ side (DDP's reducer, _broadcast_coalesced)
holds only the C++ part of a Work; if the Python object is collected,
its wait() and get_future() overrides vanish and C++ waits on the base
class forever (pytorch PR #146376).  So every Async stays referenced
from its process group's `inflight` set until it has completed and been
collected by wait(), is_completed() or its future.

A dr_work handle is waited on by one thread at a time (distrun.h): each
Async guards its handle with a lock; whoever holds it finishes the call
(copies results back, frees the handle, completes the future).
"""
import threading
import time
from collections import deque

import torch
import torch.distributed as dist

from . import _lib as L

lib = L.lib


def _future(value=None, exc=None):
    f = torch.futures.Future()
    if exc is not None:
        f.set_exception(exc)
    else:
        f.set_result(value)
    return f


class Done(dist.Work):
    """A call that has completed; result() holds its output tensors."""

    def __init__(self, result=None, source=-1, owner=None):
        super().__init__()
        self._result = result
        self._source = source
        self._owner = owner
        if owner is not None:
            owner.keep(self)

    def _release(self):
        if self._owner is not None:
            self._owner.inflight.discard(self)
            self._owner = None

    def wait(self, timeout=None):
        self._release()
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def result(self):
        return list(self._result or [])

    def synchronize(self):
        pass

    def get_future(self):
        self._release()
        return _future(list(self._result or []))

    def source_rank(self):
        return self._source

    _source_rank = source_rank


# torch's blocking path waits on the Work and drops it: one serves all.
DONE = Done()


class Async(dist.Work):
    """A call in libdistrun's background.  after() runs once on success
    (copies from temporaries into the caller's tensors)."""

    def __init__(self, owner, handle, what, keep, after=None, result=None,
                 ordered=True):
        super().__init__()
        self._ordered = ordered
        self._h = handle
        self._what = what
        self._keep = keep
        self._after = after
        self._result = result
        self._lock = threading.Lock()
        self._done = False
        self._exc = None
        self._source = -1
        self._fut = None
        self._to_group = None  # recv from any source: world -> group rank
        self._owner = owner
        owner.inflight.add(self)

    # The one place a handle is waited on and freed.
    def _finish_locked(self, timeout_ms=0):
        if self._done:
            return
        if timeout_ms > 0:
            rc = lib.dr_work_wait_timeout(self._h, timeout_ms)
            if rc == L.ETIMEDOUT:
                raise L.error(rc, self._what)
        else:
            rc = lib.dr_work_wait(self._h)
        if rc:
            self._exc = L.error(rc, self._what)
        else:
            self._source = lib.dr_work_source(self._h)
            if self._after is not None:
                try:
                    self._after()
                except Exception as e:  # a copy back that failed
                    self._exc = e
        lib.dr_work_free(self._h)
        self._h = None
        self._keep = self._after = None
        self._done = True
        self._owner.inflight.discard(self)
        if self._fut is not None:
            if self._exc is not None:
                self._fut.set_exception(self._exc)
            else:
                self._fut.set_result(self.result())

    def wait(self, timeout=None):
        ms = 0
        if timeout is not None:
            ms = int(timeout.total_seconds() * 1000) if hasattr(
                timeout, "total_seconds") else int(timeout)
        with self._lock:
            self._finish_locked(ms)
        if self._exc is not None:
            raise self._exc
        return True

    def is_completed(self):
        if self._done:
            return True
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._h is not None and lib.dr_work_is_completed(self._h):
                self._finish_locked()
        finally:
            self._lock.release()
        return self._done

    def is_success(self):
        return self._done and self._exc is None

    def exception(self):
        return self._exc

    def result(self):
        return list(self._result or [])

    def synchronize(self):
        pass

    def source_rank(self):
        self.wait()
        if self._to_group is not None and self._source >= 0:
            return self._to_group(self._source)
        return self._source

    _source_rank = source_rank

    def get_future(self):
        with self._lock:
            if self._fut is None:
                if self._done:
                    return _future(self.result(), self._exc)
                self._fut = torch.futures.Future()
                self._owner.complete_later(self, self._ordered)
            return self._fut


# How long destroy (and the interpreter's exit) waits for the threads that
# complete futures (Owner.join).
JOIN_S = 10.0


class Owner:
    """What a process group keeps of its asynchronous calls: the set that
    keeps them alive, and the thread that completes the futures asked for
    (in call order: a group's calls complete in order, so waiting on them
    in order never waits on a later one)."""

    def __init__(self, name):
        self.inflight = set()
        self._kept = deque()
        self._name = name
        self._q = deque()
        self._cv = threading.Condition()
        self._thread = None
        self._p2p_threads = []

    def complete_later(self, w, ordered=True):
        if not ordered:
            # point-to-point calls complete in any order: one thread each
            t = threading.Thread(target=w.wait, daemon=True,
                                 name="distrun-p2p-future")
            with self._cv:
                self._p2p_threads = [x for x in self._p2p_threads
                                     if x.is_alive()]
                self._p2p_threads.append(t)
            t.start()
            return
        with self._cv:
            self._q.append(w)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, daemon=True,
                    name="distrun-futures-" + self._name)
                self._thread.start()
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._q:
                    self._cv.wait()
                w = self._q.popleft()
            if w is None:
                return
            try:
                w.wait()
            except Exception:
                pass  # the future carries it

    def keep(self, w):
        """Keeps a finished Work a C++ caller got until it uses it; a
        caller that never does cannot make the set grow without bound."""
        self.inflight.add(w)
        self._kept.append(w)
        while self._kept and self._kept[0]._owner is None:
            self._kept.popleft()  # used: released already
        while len(self._kept) > 256:
            self.inflight.discard(self._kept.popleft())

    def sweep(self):
        """Collects calls that completed without anyone waiting (an
        isend nobody waits for), so that the set stays small."""
        if len(self.inflight) > 64:
            for w in list(self.inflight):
                w.is_completed()

    def stop(self):
        """Ends the future thread once it has done what is queued.  Calls
        still out are not waited for here: libdistrun's destroy finishes
        the collectives and fails point-to-point calls nobody matched
        (DR_EABORTED), so that an irecv left posted cannot hold up a
        destroy or the exit until the timeout."""
        with self._cv:
            if self._thread is not None:
                self._q.append(None)
                self._cv.notify()

    def join(self, timeout=JOIN_S):
        """Waits, at most timeout seconds in all, for the threads that
        complete futures to end, once stop() has told them to and the
        library's destroy has ended or failed every call they wait for.
        A thread of ours still inside torch when the interpreter exits
        (completing a future runs its callbacks in C++: DDP's) is stopped
        by Python when it next takes the GIL, and where that happens in
        a C++ frame that may not throw, the process dies of
        std::terminate ("terminate called without an active exception",
        SIGABRT) after the program has done everything right."""
        me = threading.current_thread()
        end = time.monotonic() + timeout
        with self._cv:
            threads = [t for t in [self._thread] + self._p2p_threads
                       if t is not None and t is not me]
            self._p2p_threads = []
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
