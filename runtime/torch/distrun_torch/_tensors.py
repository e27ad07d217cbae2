"""Tensors as libdistrun buffers: dtypes, ops, pointers, copies.

A contiguous CPU tensor goes to libdistrun as its data_ptr(): no copy.  A
non-contiguous one is copied once into a contiguous temporary, and the
result copied back where the call writes it.  Collectives that only move
data (broadcast, gather, all_to_all, send, ...) take any dtype as bytes;
reductions need one of libdistrun's dtypes, or bool (as uint8: SUM and MAX
are a logical or, PRODUCT and MIN a logical and, as in torch).
"""
import torch

from . import _lib as L
from ._lib import DistrunError

DTYPES = {
    torch.int8: L.INT8, torch.uint8: L.UINT8, torch.int32: L.INT32,
    torch.int64: L.INT64, torch.float16: L.FLOAT16,
    torch.bfloat16: L.BFLOAT16, torch.float32: L.FLOAT32,
    torch.float64: L.FLOAT64, torch.bool: L.UINT8,
}
_BOOL_OPS = {L.SUM: L.MAX, L.MAX: L.MAX, L.PRODUCT: L.MIN, L.MIN: L.MIN,
             L.BAND: L.BAND, L.BOR: L.BOR, L.BXOR: L.BXOR}
_OP_NAMES = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR",
             "PREMUL_SUM"]


def fail(what, msg):
    return DistrunError("distrun: %s: %s" % (what, msg), "DR_EINVAL")


def check(t, what):
    """Raises unless t is a dense tensor in host memory."""
    if not isinstance(t, torch.Tensor):
        raise fail(what, "expected a torch.Tensor, got %s" % type(t).__name__)
    if not t.is_cpu:
        if t.is_cuda:
            raise fail(what, "tensor on %s: the distrun backend takes CPU "
                       "tensors (CUDA tensors: use backend 'nccl', or "
                       "'cpu:distrun,cuda:nccl' on torch 2.x)" % t.device)
        raise fail(what, "tensor on device '%s': the distrun backend takes "
                   "CPU tensors" % t.device)
    if t.layout is not torch.strided:
        raise fail(what, "%s tensor: the distrun backend takes dense "
                   "(strided) tensors" % str(t.layout).replace("torch.", ""))


def reduce_args(t, op, what):
    """(dr dtype, dr op) for a reduction of t with RedOpType op."""
    dt = DTYPES.get(t.dtype)
    if dt is None:
        raise fail(what, "dtype %s cannot be reduced (libdistrun reduces "
                   "bool, int8, uint8, int32, int64, float16, bfloat16, "
                   "float32 and float64)" % str(t.dtype).replace("torch.", ""))
    o = int(op)
    if o > L.BXOR:
        raise fail(what, "ReduceOp.%s is not supported: torch 1.13 does not "
                   "show its factor to a Python backend (multiply, then "
                   "use SUM)" % _OP_NAMES[o] if o < len(_OP_NAMES) else o)
    if t.dtype == torch.bool:
        if o not in _BOOL_OPS:
            raise fail(what, "ReduceOp.%s is not defined for bool tensors"
                       % _OP_NAMES[o])
        o = _BOOL_OPS[o]
    return dt, o


def move_args(t):
    """(dr dtype, count) to move t's elements as they are."""
    dt = DTYPES.get(t.dtype)
    if dt is not None:
        return dt, t.numel()
    return L.UINT8, t.numel() * t.element_size()


class Buf:
    """A tensor as a pointer; a temporary when it is not contiguous."""
    __slots__ = ("t", "tmp", "ptr")

    def __init__(self, t, what, load=True):
        check(t, what)
        self.t = t
        if t.is_contiguous():
            self.tmp = None
            self.ptr = t.data_ptr()
        else:
            self.tmp = t.contiguous() if load else torch.empty(
                t.shape, dtype=t.dtype)
            self.ptr = self.tmp.data_ptr()

    def store(self):
        """The result back into the caller's tensor (if copied)."""
        if self.tmp is not None:
            self.t.copy_(self.tmp)


def adjacent(ts):
    """The pointer to ts as one contiguous run (each tensor contiguous and
    each one starting where the one before ends, as views of one tensor
    are), else None."""
    if not ts:
        return None
    p = ts[0].data_ptr()
    base = p
    for t in ts:
        if (not t.is_contiguous() or t.device.type != "cpu" or
                t.data_ptr() != p):
            return None
        p += t.numel() * t.element_size()
    return base


def same_shapes(ts, like, what):
    for i, t in enumerate(ts):
        check(t, what)
        if t.dtype != like.dtype or t.numel() != like.numel():
            raise fail(what, "tensor %d has %d elements of %s; expected %d "
                       "of %s, as the input" % (
                           i, t.numel(), str(t.dtype).replace("torch.", ""),
                           like.numel(), str(like.dtype).replace("torch.", "")))


def flat(ts, what):
    """One contiguous tensor holding ts (each flattened) in order."""
    if len(ts) == 1 and ts[0].is_contiguous():
        return ts[0].reshape(-1)
    return torch.cat([t.reshape(-1) for t in ts]) if ts else torch.empty(0)


def unflat(src, ts):
    """Copies consecutive pieces of src into each tensor of ts."""
    off = 0
    for t in ts:
        n = t.numel()
        t.copy_(src[off:off + n].view(t.shape))
        off += n
