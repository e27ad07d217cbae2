"""distrun_torch: torch.distributed's "distrun" backend, on libdistrun.

    import distrun_torch                     # registers "distrun"
    dist.init_process_group("distrun")       # instead of "gloo"

Every collective, point-to-point call, subgroup and async_op of
torch.distributed on CPU tensors then runs on libdistrun: shared memory
between the ranks of a host, TCP between hosts, a mismatch between ranks
raised as a RuntimeError on every rank naming both calls, the stall
report and the trace of the distrun launcher.  See distrun_torch(7).

Rendezvous: through the store torch's init_process_group made (the
TCPStore of env:// and tcp://, torchrun's agent store, a FileStore of
file://), so that "distrun" takes what "gloo" takes: env://, tcp://,
file://, torchrun, distrun -n N, mpirun/srun with MASTER_ADDR.
"""
import atexit
import ctypes
import os
import secrets
import tempfile
import zlib

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from . import _lib as L
from ._lib import DistrunError
from ._pg import ProcessGroupDistrun

__all__ = ["ProcessGroupDistrun", "DistrunError", "BACKEND", "library_path",
           "transport", "monitored_barrier"]
__version__ = "0.1.0"
BACKEND = "distrun"
library_path = L.path
lib = L.lib

# The groups this module made and torch may still use.
_groups = []
_world = [None]


def transport():
    """"shm", "tcp" or "shm+tcp" once initialized, else None."""
    t = lib.dr_transport_name()
    return t.decode() if t else None


def _base_store(store):
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store


def _init_method(store, rank, size):
    """libdistrun's init_method for a rendezvous through torch's store.

    A generation number (every rank adds 1 to one key; init ends with a
    barrier, so generations never interleave) keeps this init's keys apart
    from an earlier one's in a store that outlives it (torchrun's)."""
    gen = (store.add("distrun_torch/joined", 1) - 1) // size
    key = "distrun_torch/nonce/%d" % gen
    if rank == 0:
        nonce = secrets.token_hex(8)
        store.set(key, nonce)
    else:
        nonce = store.get(key).decode()
    base = _base_store(store)
    if isinstance(base, dist.TCPStore):
        host = base.host
        if ":" in host and not host.startswith("["):
            host = "[%s]" % host
        return "tcpstore://%s:%d/distrun_torch/%s/" % (host, base.port, nonce)
    if isinstance(base, dist.FileStore):
        return "file://%s.distrun-%s" % (os.path.abspath(base.path), nonce)
    if size == 1:
        d = tempfile.mkdtemp(prefix="distrun-torch-")
        return "file://%s/rdzv" % d
    raise DistrunError(
        "distrun: init_process_group: a %s cannot carry the rendezvous of "
        "%d ranks; use init_method env://, tcp:// or file://, or a "
        "TCPStore or FileStore as store=" % (type(base).__name__, size),
        "DR_EINVAL")


def _destroy_world(why):
    groups = list(_groups)
    for pg in groups:
        pg.close(why)
    del _groups[:]
    _world[0] = None
    if lib.dr_is_initialized():
        lib.dr_destroy_process_group()
    for pg in groups:
        pg.join()


def _create_world(store, rank, size, timeout):
    if lib.dr_is_initialized():
        # torch forgot the last one (destroy_process_group imported
        # before distrun_torch was, or never called): leave it first.
        _destroy_world("the process group was destroyed (a new one was "
                       "initialized)")
    method = _init_method(store, rank, size)
    ms = int(timeout.total_seconds() * 1000) if timeout else 0
    o = L.InitOptions(None, method.encode(), rank, size, ms, None)
    rc = lib.dr_init_process_group_opts(ctypes.byref(o))
    if rc:
        raise L.error(rc, "init_process_group")
    pg = ProcessGroupDistrun(rank, size, None, list(range(size)), "world")
    _world[0] = pg
    _groups.append(pg)
    return pg


def _create_subgroup(ranks, name, rank, size):
    if _world[0] is None or not lib.dr_is_initialized():
        raise DistrunError("distrun: new_group: the default process group "
                           "is not a distrun one (init_process_group("
                           "\"distrun\") first)", "DR_ENOINIT")
    name = str(name)
    gid = int(name) if name.isdigit() and int(name) < 2 ** 31 else (
        zlib.crc32(name.encode()) & 0x7fffffff)
    arr = (ctypes.c_int * len(ranks))(*ranks)
    h = ctypes.c_void_p()
    rc = lib.dr_new_subgroup(arr, len(ranks), gid, ctypes.byref(h))
    if rc:
        raise L.error(rc, "new_group")
    pg = ProcessGroupDistrun(rank, size, h.value, sorted(ranks),
                             "group " + name)
    _groups.append(pg)
    return pg


def _create(opts, pg_options=None):
    """torch's creator (extended API: it names the group's world ranks)."""
    if pg_options is not None:
        raise DistrunError("distrun: pg_options are not supported by the "
                           "distrun backend", "DR_EINVAL")
    ranks = list(opts.global_ranks_in_group)
    if not ranks:
        return _create_world(opts.store, opts.group_rank, opts.group_size,
                             opts.timeout)
    return _create_subgroup(ranks, opts.group_id, opts.group_rank,
                            opts.group_size)


def _sweep_destroyed():
    """Closes the groups torch has forgotten (destroy_process_group)."""
    known = c10d._pg_map
    if _world[0] is not None and _world[0] not in known:
        _destroy_world("the process group was destroyed "
                       "(destroy_process_group)")
        return
    for pg in list(_groups):
        if pg not in known:
            pg.close("the group was destroyed (destroy_process_group)")
            pg.join()
            _groups.remove(pg)


def _at_exit():
    """A program that exits without destroy_process_group: the future
    threads still end before the interpreter does (Owner.join says why),
    unless a call they wait for is still out after EXIT_JOIN_S."""
    for pg in list(_groups):
        pg.stop_futures()
    for pg in list(_groups):
        pg.join(EXIT_JOIN_S)


EXIT_JOIN_S = 2.0
atexit.register(_at_exit)

_torch_destroy = c10d.destroy_process_group
_torch_monitored = c10d.monitored_barrier


def destroy_process_group(group=None):
    _torch_destroy(group)
    _sweep_destroyed()


destroy_process_group.__doc__ = _torch_destroy.__doc__


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch's monitored_barrier, which 1.13 allows on gloo only, on a
    distrun group as well: ranks that did not arrive within timeout are
    named in the RuntimeError."""
    if c10d._rank_not_in_group(group):
        return None
    pg = c10d._get_default_group() if group is None else group
    if isinstance(pg, ProcessGroupDistrun):
        return pg.monitored_barrier(timeout or c10d.default_pg_timeout,
                                    wait_all_ranks)
    return _torch_monitored(group, timeout, wait_all_ranks)


monitored_barrier.__wrapped__ = _torch_monitored


def _register():
    if "DISTRUN" in dist.Backend._plugins:
        return
    try:  # torch 2.x: a CPU backend
        dist.Backend.register_backend(BACKEND, _create, extended_api=True,
                                      devices=["cpu"])
    except TypeError:  # torch 1.13
        dist.Backend.register_backend(BACKEND, _create, extended_api=True)
    for mod in (c10d, dist):
        mod.destroy_process_group = destroy_process_group
        mod.monitored_barrier = monitored_barrier


_register()
