"""The "distrun" process group: torch.distributed's calls on libdistrun.

torch calls the methods below with group ranks; libdistrun takes world
ranks (self._ranks maps them).  A group is the world (libdistrun's
default group, handle NULL) or a subgroup made with dr_new_subgroup on
its members only, as torch creates a backend's group on its members only.

Blocking or not: torch asks every backend for a Work and, for
async_op=False, waits on it at once.  Running such a call in libdistrun's
background and waiting for it would cost a thread handoff per call (tens
of microseconds on a busy host), so a call made by one of
torch.distributed's own functions whose async_op is False runs to
completion on the calling thread (libdistrun's blocking form) and returns
a finished Work.  Every other call (async_op=True, DDP's allreduce from
its C++ reducer, isend/irecv) runs in libdistrun's background and returns
an Async work, which keeps its tensors alive until it completes.
"""
import ctypes
import os
import secrets
import sys
import tempfile
import zlib

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from . import _lib as L
from . import _tensors as T
from . import _work as W

lib = L.lib
_C10D = c10d.__file__
_HAS_ASYNC = {}


def _blocking_locals(depth):
    """The caller's locals if the caller `depth` frames up is one of
    torch.distributed's functions called with async_op=False (it waits on
    the Work at once), else None."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        # Called from C++ on a thread without Python (DDP's reducer in
        # the backward pass): run it there, blocking.  Handing it to a
        # progress thread and a future to another thread doubled a small
        # DDP step on a busy 2-core host; the reducer only gets the
        # future and waits for it anyway.
        return _FROM_CPP
    code = f.f_code
    has = _HAS_ASYNC.get(code)
    if has is None:
        has = _HAS_ASYNC[code] = (code.co_filename == _C10D and
                                  "async_op" in code.co_varnames)
    if not has:
        return None
    loc = f.f_locals
    return None if loc.get("async_op") else loc


_FROM_CPP = {}


def _blocking(depth):
    return _blocking_locals(depth + 1) is not None


# torch's ReduceOp.SUM ... are single objects: the op a blocking caller
# passed is found by identity, cheaper than reading opts.reduceOp (which
# copies it into a new object, then its enum into another).
_OP_IDS = {id(getattr(dist.ReduceOp, k)): v for k, v in (
    ("SUM", 0), ("AVG", 1), ("PRODUCT", 2), ("MIN", 3), ("MAX", 4),
    ("BAND", 5), ("BOR", 6), ("BXOR", 7))}


def _caller_is(depth, names):
    try:
        f = sys._getframe(depth)
    except ValueError:
        return False
    return f.f_code.co_filename == _C10D and f.f_code.co_name in names


def _op(opts, loc=None):
    if loc is not None:
        op = _OP_IDS.get(id(loc.get("op")))
        if op is not None:
            return op
    return opts.reduceOp.op.value if opts is not None else L.SUM


def _ms(timeout):
    if timeout is None:
        return 0
    if hasattr(timeout, "total_seconds"):
        return int(timeout.total_seconds() * 1000)
    return int(timeout)


class ProcessGroupDistrun(dist.ProcessGroup):
    """torch.distributed's ProcessGroup API on libdistrun (CPU tensors)."""

    def __init__(self, rank, size, handle, ranks, name):
        super().__init__(rank, size)
        self._g = handle
        self._ranks = ranks
        self._name = name
        self._closed = None
        self._owner = W.Owner(name)

    def __repr__(self):
        return "<ProcessGroupDistrun %s rank %d of %d>" % (
            self._name, self.rank(), self.size())

    def getBackendName(self):
        return "distrun"

    def name(self):
        return "distrun"

    # ------------------------------------------------------- plumbing
    def _live(self, what):
        if self._closed:
            raise L.DistrunError("distrun: %s: %s" % (what, self._closed),
                                 "DR_ENOINIT")

    def _root(self, r, what):
        if not 0 <= r < len(self._ranks):
            raise T.fail(what, "rank %d is not in this group of %d" %
                         (r, len(self._ranks)))
        return self._ranks[r]

    def _one(self, tensors, what):
        self._live(what)
        if len(tensors) != 1:
            raise T.fail(what, "%d tensors; the distrun backend takes one "
                         "tensor per call" % len(tensors))
        return tensors[0]

    def _go(self, what, call, after=None, result=None, keep=None,
            blocking=None):
        """Runs call(work_ptr) blocking (work_ptr None) when torch waits
        at once, else in the background; returns the Work."""
        if blocking is None:
            loc = _blocking_locals(3)
            blocking = loc is not None
        else:
            loc = None
        if blocking:
            rc = call(None)
            if rc:
                raise L.error(rc, what)
            if after is not None:
                after()
            return self._done(loc, result)
        h = ctypes.c_void_p()
        rc = call(ctypes.byref(h))
        if rc:
            raise L.error(rc, what)
        self._owner.sweep()
        return W.Async(self._owner, h, what, keep, after, result)

    def _done(self, loc, result):
        """The finished Work of a blocking call: for torch's Python
        functions, which wait on it at once, one shared object; for a C++
        caller, one that holds the result (DDP reads it from the future)
        and stays referenced until it is waited on or asked for its
        future (the lifetime trap: _work.py)."""
        if loc is not _FROM_CPP:
            return W.DONE
        return W.Done(result, owner=self._owner)

    def close(self, why):
        """Called once torch no longer knows this group; join() after
        the library's destroy (the world's: after every group's close)."""
        if self._closed:
            return
        self.stop_futures()
        self._closed = why
        if self._g is not None:
            lib.dr_group_destroy(self._g)
            self._g = None

    def stop_futures(self):
        """Tells this group's future threads to end once done."""
        self._owner.stop()

    def join(self, timeout=W.JOIN_S):
        """Waits for this group's future threads to end (_work.py:
        Owner.join says why)."""
        self._owner.join(timeout)

    # ---------------------------------------------------- collectives
    def barrier(self, opts=None):
        if self._closed:
            self._live("barrier")
        if _blocking(2):
            rc = lib.dr_barrier(self._g, None, None, 0)
            if rc:
                raise L.error(rc, "barrier")
            return W.DONE
        return self._go("barrier",
                        lambda w: lib.dr_barrier(self._g, w, None, 0),
                        blocking=False)

    def allreduce(self, tensors, opts=None):
        what = "all_reduce"
        loc = _blocking_locals(2)
        t = self._one(tensors, what)
        dt, op = T.reduce_args(t, _op(opts, loc), what)
        b = T.Buf(t, what)
        n = t.numel()
        if loc is not None:  # the common case, without a closure
            rc = lib.dr_all_reduce(b.ptr, n, dt, op, self._g, None)
            if rc:
                raise L.error(rc, what)
            b.store()
            return self._done(loc, tensors)
        return self._go(what, lambda w: lib.dr_all_reduce(
            b.ptr, n, dt, op, self._g, w),
            b.store if b.tmp is not None else None, tensors, b, False)

    def allreduce_coalesced(self, tensors, opts=None):
        what = "all_reduce_coalesced"
        self._live(what)
        if not tensors:
            return W.DONE
        for t in tensors:
            T.check(t, what)
            if t.dtype != tensors[0].dtype:
                raise T.fail(what, "tensors of different dtypes (%s, %s)" %
                             (tensors[0].dtype, t.dtype))
        dt, op = T.reduce_args(tensors[0], _op(opts), what)
        buf = T.flat(tensors, what)
        own = buf.data_ptr() != tensors[0].data_ptr() or len(tensors) > 1
        return self._go(what, lambda w: lib.dr_all_reduce(
            buf.data_ptr(), buf.numel(), dt, op, self._g, w),
            (lambda: T.unflat(buf, tensors)) if own else None, tensors, buf)

    def broadcast(self, tensors, opts=None):
        what = "broadcast"
        t = self._one(tensors, what)
        root = self._root(opts.rootRank if opts is not None else 0, what)
        dt, n = T.move_args(t)
        b = T.Buf(t, what)
        return self._go(what, lambda w: lib.dr_broadcast(
            b.ptr, n, dt, root, self._g, w),
            b.store if b.tmp is not None else None, tensors, b)

    def reduce(self, tensors, opts=None):
        what = "reduce"
        t = self._one(tensors, what)
        root = self._root(opts.rootRank if opts is not None else 0, what)
        dt, op = T.reduce_args(t, _op(opts), what)
        b = T.Buf(t, what)
        n = t.numel()
        return self._go(what, lambda w: lib.dr_reduce(
            b.ptr, n, dt, op, root, self._g, w),
            b.store if b.tmp is not None else None, tensors, b)

    def _gather_out(self, outs, like, what):
        """A receive buffer for len(group) pieces like `like`: outs
        themselves when they are one contiguous run, else a temporary
        (and the copy out)."""
        if len(outs) != self.size():
            raise T.fail(what, "%d output tensors for a group of %d" %
                         (len(outs), self.size()))
        T.same_shapes(outs, like, what)
        p = T.adjacent(outs)
        if p is not None:
            return p, None, None
        tmp = torch.empty(like.numel() * self.size(), dtype=like.dtype)
        return tmp.data_ptr(), tmp, lambda: T.unflat(tmp, outs)

    def allgather(self, output_lists, inputs, opts=None):
        what = "all_gather"
        t = self._one(inputs, what)
        if len(output_lists) != 1:
            raise T.fail(what, "expected one list of output tensors")
        b = T.Buf(t, what)
        rp, tmp, after = self._gather_out(output_lists[0], t, what)
        dt, n = T.move_args(t)
        return self._go(what, lambda w: lib.dr_all_gather(
            b.ptr, rp, n, dt, self._g, w), after, output_lists[0], (b, tmp))

    def _allgather_base(self, output, input, opts=None):
        what = "all_gather_into_tensor"
        self._live(what)
        T.check(input, what)
        T.check(output, what)
        if (output.numel() != input.numel() * self.size() or
                output.dtype != input.dtype):
            raise T.fail(what, "output has %d elements of %s; expected %d "
                         "(group size x input) of %s" % (
                             output.numel(), output.dtype,
                             input.numel() * self.size(), input.dtype))
        b = T.Buf(input, what)
        o = T.Buf(output, what, load=False)
        dt, n = T.move_args(input)
        return self._go(what, lambda w: lib.dr_all_gather(
            b.ptr, o.ptr, n, dt, self._g, w),
            o.store if o.tmp is not None else None, [output], (b, o))

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        what = "all_gather_coalesced"
        self._live(what)
        if len(output_lists) != self.size():
            raise T.fail(what, "%d output lists for a group of %d" %
                         (len(output_lists), self.size()))
        for t in inputs:
            T.check(t, what)
            if t.dtype != inputs[0].dtype:
                raise T.fail(what, "inputs of different dtypes")
        send = T.flat(inputs, what)
        n = send.numel()
        recv = torch.empty(n * self.size(), dtype=send.dtype)
        dt, cnt = T.move_args(send)

        def after():
            for r, outs in enumerate(output_lists):
                T.unflat(recv[r * n:(r + 1) * n], outs)
        return self._go(what, lambda w: lib.dr_all_gather(
            send.data_ptr(), recv.data_ptr(), cnt, dt, self._g, w), after,
            output_lists, (send, recv))

    def gather(self, output_lists, inputs, opts=None):
        what = "gather"
        t = self._one(inputs, what)
        root = self._root(opts.rootRank if opts is not None else 0, what)
        b = T.Buf(t, what)
        rp, tmp, after, res = None, None, None, []
        if self._ranks[self.rank()] == root:
            if len(output_lists) != 1:
                raise T.fail(what, "the root expects one list of outputs")
            rp, tmp, after = self._gather_out(output_lists[0], t, what)
            res = output_lists[0]
        dt, n = T.move_args(t)
        return self._go(what, lambda w: lib.dr_gather(
            b.ptr, rp, n, dt, root, self._g, w), after, res, (b, tmp))

    def scatter(self, outputs, input_lists, opts=None):
        what = "scatter"
        t = self._one(outputs, what)
        root = self._root(opts.rootRank if opts is not None else 0, what)
        sp, send = None, None
        if self._ranks[self.rank()] == root:
            if len(input_lists) != 1 or len(input_lists[0]) != self.size():
                raise T.fail(what, "the root expects one list of %d input "
                             "tensors" % self.size())
            T.same_shapes(input_lists[0], t, what)
            sp = T.adjacent(input_lists[0])
            if sp is None:
                send = T.flat(input_lists[0], what)
                sp = send.data_ptr()
        o = T.Buf(t, what, load=False)
        dt, n = T.move_args(t)
        return self._go(what, lambda w: lib.dr_scatter(
            sp, o.ptr, n, dt, root, self._g, w),
            o.store if o.tmp is not None else None, outputs, (o, send))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        what = "reduce_scatter"
        t = self._one(outputs, what)
        if len(input_lists) != 1 or len(input_lists[0]) != self.size():
            raise T.fail(what, "expected one list of %d input tensors" %
                         self.size())
        T.same_shapes(input_lists[0], t, what)
        dt, op = T.reduce_args(t, _op(opts), what)
        sp = T.adjacent(input_lists[0])
        send = None
        if sp is None:
            send = T.flat(input_lists[0], what)
            sp = send.data_ptr()
        o = T.Buf(t, what, load=False)
        n = t.numel()
        return self._go(what, lambda w: lib.dr_reduce_scatter(
            sp, o.ptr, n, dt, op, self._g, w),
            o.store if o.tmp is not None else None, outputs, (o, send))

    def _reduce_scatter_base(self, output, input, opts=None):
        what = "reduce_scatter_tensor"
        self._live(what)
        T.check(input, what)
        T.check(output, what)
        if (input.numel() != output.numel() * self.size() or
                output.dtype != input.dtype):
            raise T.fail(what, "input has %d elements of %s; expected %d "
                         "(group size x output) of %s" % (
                             input.numel(), input.dtype,
                             output.numel() * self.size(), output.dtype))
        dt, op = T.reduce_args(output, _op(opts), what)
        b = T.Buf(input, what)
        o = T.Buf(output, what, load=False)
        n = output.numel()
        return self._go(what, lambda w: lib.dr_reduce_scatter(
            b.ptr, o.ptr, n, dt, op, self._g, w),
            o.store if o.tmp is not None else None, [output], (b, o))

    def _splits(self, t, splits, what, side):
        """Element counts per rank along dim 0 (equal pieces if none)."""
        p = self.size()
        rows = t.shape[0] if t.dim() else 1
        per = t.numel() // rows if rows else 0
        if not splits:
            if rows % p:
                raise T.fail(what, "%s has %d rows along dim 0, not a "
                             "multiple of the group size %d" %
                             (side, rows, p))
            return [rows // p * per] * p
        if len(splits) != p or sum(splits) != rows or min(splits) < 0:
            raise T.fail(what, "%s split sizes %s: expected %d sizes "
                         "adding up to %d" % (side, list(splits), p, rows))
        return [s * per for s in splits]

    def alltoall_base(self, output, input, output_split_sizes,
                      input_split_sizes, opts=None):
        what = "all_to_all_single"
        self._live(what)
        T.check(input, what)
        T.check(output, what)
        if output.dtype != input.dtype:
            raise T.fail(what, "input is %s but output %s" %
                         (input.dtype, output.dtype))
        b = T.Buf(input, what)
        o = T.Buf(output, what, load=False)
        dt, _ = T.move_args(input)
        scale = 1 if input.dtype in T.DTYPES else input.element_size()
        if not output_split_sizes and not input_split_sizes:
            if input.numel() != output.numel() or input.numel() % self.size():
                raise T.fail(what, "input has %d elements, output %d: both "
                             "must be the same multiple of the group size "
                             "%d" % (input.numel(), output.numel(),
                                     self.size()))
            n = input.numel() // self.size() * scale
            call = lambda w: lib.dr_all_to_all(b.ptr, o.ptr, n, dt,
                                               self._g, w)
        else:
            sc = self._splits(input, input_split_sizes, what, "input")
            rc = self._splits(output, output_split_sizes, what, "output")
            Z = ctypes.c_size_t * self.size()
            sc = Z(*[c * scale for c in sc])
            rc = Z(*[c * scale for c in rc])
            call = lambda w: lib.dr_all_to_all_v(b.ptr, sc, o.ptr, rc, dt,
                                                 self._g, w)
        return self._go(what, call, o.store if o.tmp is not None else None,
                        [output], (b, o))

    def alltoall(self, outputs, inputs, opts=None):
        what = "all_to_all"
        self._live(what)
        p = self.size()
        if len(outputs) != p or len(inputs) != p:
            raise T.fail(what, "%d input and %d output tensors for a group "
                         "of %d" % (len(inputs), len(outputs), p))
        for t in list(inputs) + list(outputs):
            T.check(t, what)
            if t.dtype != inputs[0].dtype:
                raise T.fail(what, "tensors of different dtypes")
        dt, _ = T.move_args(inputs[0])
        scale = 1 if inputs[0].dtype in T.DTYPES else inputs[0].element_size()
        Z = ctypes.c_size_t * p
        sc = Z(*[t.numel() * scale for t in inputs])
        rc = Z(*[t.numel() * scale for t in outputs])
        sp, send = T.adjacent(inputs), None
        if sp is None:
            send = T.flat(inputs, what)
            sp = send.data_ptr()
        rp, recv, after = T.adjacent(outputs), None, None
        if rp is None:
            recv = torch.empty(sum(t.numel() for t in outputs),
                               dtype=inputs[0].dtype)
            rp = recv.data_ptr()
            after = lambda: T.unflat(recv, outputs)
        return self._go(what, lambda w: lib.dr_all_to_all_v(
            sp, sc, rp, rc, dt, self._g, w), after, outputs, (send, recv))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        self._live("monitored_barrier")
        rc = lib.dr_monitored_barrier(self._g, _ms(timeout),
                                      1 if wait_all_ranks else 0)
        if rc:
            raise L.error(rc, "monitored_barrier")

    # ------------------------------------------------- point-to-point
    def send(self, tensors, dst, tag=0):
        what = "send"
        t = self._one(tensors, what)
        peer = self._root(dst, what)
        b = T.Buf(t, what)
        dt, n = T.move_args(t)
        if _caller_is(2, ("send",)):
            rc = lib.dr_send(b.ptr, n, dt, peer, tag, self._g)
            if rc:
                raise L.error(rc, what)
            return W.DONE
        h = ctypes.c_void_p()
        rc = lib.dr_isend(b.ptr, n, dt, peer, tag, self._g, ctypes.byref(h))
        if rc:
            raise L.error(rc, what)
        self._owner.sweep()
        return W.Async(self._owner, h, what, b, None, tensors, False)

    def _recv(self, tensors, src, tag, what):
        t = self._one(tensors, what)
        b = T.Buf(t, what, load=False)
        dt, n = T.move_args(t)
        after = b.store if b.tmp is not None else None
        if _caller_is(3, ("recv",)):
            got = ctypes.c_int(-1)
            rc = lib.dr_recv(b.ptr, n, dt, src, tag, self._g,
                             ctypes.byref(got))
            if rc:
                raise L.error(rc, what)
            if after is not None:
                after()
            return W.Done(tensors, self._group_rank(got.value))
        h = ctypes.c_void_p()
        rc = lib.dr_irecv(b.ptr, n, dt, src, tag, self._g, ctypes.byref(h))
        if rc:
            raise L.error(rc, what)
        self._owner.sweep()
        w = W.Async(self._owner, h, what, b, after, tensors, False)
        w._to_group = self._group_rank
        return w

    def _group_rank(self, world_rank):
        try:
            return self._ranks.index(world_rank)
        except ValueError:
            return world_rank

    def recv(self, tensors, src, tag=0):
        return self._recv(tensors, self._root(src, "recv"), tag, "recv")

    def recv_anysource(self, tensors, tag=0):
        return self._recv(tensors, -1, tag, "recv")

    # batch_isend_irecv: isend and irecv already progress on their own.
    def _start_coalescing(self):
        pass

    def _end_coalescing(self, reqs):
        pass
