# What goes wrong reaches Python as an exception with libdistrun's
# message, on the rank that erred (bad input) or on every rank (a mismatch
# between ranks); nothing hangs.  Under "distrun", 2 ranks or more.
import os
import sys

import torch
import torch.distributed as dist

import distrun_torch
from torch.distributed import distributed_c10d as c10d

dist.init_process_group("distrun")
r, n = dist.get_rank(), dist.get_world_size()


def expect(what, fn, *words):
    try:
        fn()
    except Exception as e:
        msg = str(e)
        missing = [w for w in words if w not in msg]
        print("%s: %s %s%s" % (what, type(e).__name__, msg,
                               " MISSING %s" % missing if missing else ""),
              flush=True)
        return
    print("%s: NO ERROR" % what, flush=True)


pg = c10d._get_default_group()
expect("int16 all_reduce", lambda: dist.all_reduce(
    torch.ones(3, dtype=torch.int16)), "int16", "cannot be reduced")
expect("meta device", lambda: dist.all_reduce(
    torch.ones(3, device="meta")), "meta", "CPU tensors")
expect("sparse", lambda: dist.broadcast(
    torch.ones(3).to_sparse(), 0), "sparse")
expect("premul_sum", lambda: dist.all_reduce(
    torch.ones(3), op=torch._C._distributed_c10d._make_nccl_premul_sum(2.0)),
    "PREMUL_SUM")
expect("bool avg", lambda: dist.all_reduce(
    torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.AVG), "AVG", "bool")
expect("all_gather sizes", lambda: dist.all_gather(
    [torch.zeros(2) for _ in range(n)], torch.ones(3)), "elements")
expect("all_gather count", lambda: dist.all_gather(
    [torch.zeros(3)], torch.ones(3)), "output tensors")
expect("all_to_all_single splits", lambda: dist.all_to_all_single(
    torch.zeros(n), torch.ones(n), [1] * n, [2] * n), "split sizes")
opts = dist.BroadcastOptions()
opts.rootRank = n + 5
expect("root outside the group", lambda: pg.broadcast([torch.ones(1)], opts),
       "rank %d is not in this group" % (n + 5))
expect("send to itself out of range", lambda: dist.send(
    torch.ones(1), n + 3), "")
# the group goes on after bad input
t = torch.ones(2)
dist.all_reduce(t)
print("after bad input: all_reduce", t.tolist(), flush=True)

# a call after destroy, and a second init in the same process
dist.destroy_process_group()
expect("after destroy", lambda: pg.allreduce([torch.ones(1)]).wait(),
       "destroyed")
expect("dist after destroy", lambda: dist.all_reduce(torch.ones(1)),
       "not been initialized")
# (through a FileStore: torch's env:// cannot start twice in a process,
# for gloo neither: rank 0's new TCPStore races the old one)
path = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                    "distrun-torch-%s" % os.environ["MASTER_PORT"])
dist.init_process_group("distrun", init_method="file://" + path, rank=r,
                        world_size=n)
t = torch.ones(1)
dist.all_reduce(t)
print("second init: all_reduce", t.tolist(), flush=True)

# a mismatch: rank 1 broadcasts where the others all_reduce
t = torch.ones(3)
if r == 1:
    expect("mismatch", lambda: dist.broadcast(t, 0), "broadcast",
           "all_reduce")
else:
    expect("mismatch", lambda: dist.all_reduce(t), "broadcast", "all_reduce")
expect("after the mismatch", lambda: dist.all_reduce(t), "")
dist.destroy_process_group()
print("done", flush=True)
