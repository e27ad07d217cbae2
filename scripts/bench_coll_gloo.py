# bench_coll_gloo.py - torch.distributed (gloo, CPU tensors) side of
# scripts/bench-coll: the same collectives, sizes, timing method (median of
# the slowest rank's time per call, iterations agreed from the warm-up) and
# output lines as scripts/bench_coll.c.  A collective this torch's gloo
# does not implement prints "op=NAME n=N unsupported".
#
#   python3 bench_coll_gloo.py [--ops a,b] [--min BYTES] [--max BYTES] [--budget-ms MS]
#                              [--sizes B1,B2,...]
import argparse
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--ops", default=None)
ap.add_argument("--min", type=int, default=4)
ap.add_argument("--max", type=int, default=64 << 20)
ap.add_argument("--budget-ms", type=float, default=500)
ap.add_argument("--sizes", default=None)
args = ap.parse_args()

dist.init_process_group(backend="gloo", init_method="env://")
rank, n = dist.get_rank(), dist.get_world_size()

# name: (busbw factor, bytes cut in n pieces)
TABLE = [
    ("barrier", 0, False),
    ("all_reduce", 2 * (n - 1) / n, False),
    ("broadcast", 1, False),
    ("reduce", 1, False),
    ("all_gather", (n - 1) / n, True),
    ("reduce_scatter", (n - 1) / n, True),
    ("all_to_all", (n - 1) / n, True),
    ("gather", (n - 1) / n, True),
    ("scatter", (n - 1) / n, True),
    ("all_to_all_v", (n - 1) / n, True),  # even splits
]


def make(name, count):
    """A closure running one call of `name` on count elements per piece."""
    x = torch.ones(count * (n if name in ("reduce_scatter", "all_to_all", "all_to_all_v") else 1))
    if name == "barrier":
        return dist.barrier
    if name == "all_reduce":
        return lambda: dist.all_reduce(x)
    if name == "broadcast":
        return lambda: dist.broadcast(x, 0)
    if name == "reduce":
        return lambda: dist.reduce(x, 0)
    if name == "all_gather":
        outs = [torch.empty(count) for _ in range(n)]
        return lambda: dist.all_gather(outs, x)
    if name == "reduce_scatter":
        out = torch.empty(count)
        return lambda: dist.reduce_scatter_tensor(out, x)
    if name == "all_to_all":
        out = torch.empty(count * n)
        return lambda: dist.all_to_all_single(out, x)
    if name == "all_to_all_v":
        out = torch.empty(count * n)
        splits = [count] * n
        return lambda: dist.all_to_all_single(out, x, splits, splits)
    if name == "gather":
        outs = [torch.empty(count) for _ in range(n)] if rank == 0 else None
        return lambda: dist.gather(x, outs, dst=0)
    if name == "scatter":
        ins = [torch.ones(count) for _ in range(n)] if rank == 0 else None
        out = torch.empty(count)
        return lambda: dist.scatter(out, ins, src=0)
    raise ValueError(name)


def bench(name, factor, per_rank, nbytes):
    count = nbytes // 4
    if per_rank:
        count //= n
    if name != "barrier" and count == 0:
        return
    try:
        fn = make(name, count)
        fn()
    except (RuntimeError, AttributeError, ValueError) as e:
        # every rank fails alike: gloo lacks the call
        if rank == 0:
            print(f"op={name} n={n} unsupported ({str(e).splitlines()[0][:80]})", flush=True)
        return True
    t0 = time.perf_counter()
    fn()
    warm = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(warm, op=dist.ReduceOp.MAX)
    w = warm.item()
    iters = int(args.budget_ms / 1e3 / w) if w > 0 else 1000
    iters = max(5, min(1000, iters))
    times = torch.zeros(iters, dtype=torch.float64)
    dist.barrier()
    for i in range(iters):
        t0 = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - t0
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    if rank == 0:
        med = times.sort().values[iters // 2].item()
        real = count * 4 * (n if per_rank else 1)
        alg = real / med / 1e9 if name != "barrier" else 0
        print(f"op={name} n={n} bytes={real if name != 'barrier' else 0} "
              f"us={med * 1e6:.2f} algbw_GBps={alg:.3f} "
              f"busbw_GBps={alg * factor:.3f} iters={iters}", flush=True)


ops = args.ops.split(",") if args.ops else None
for name, factor, per_rank in TABLE:
    if ops and name not in ops:
        continue
    if name == "barrier":
        bench(name, factor, per_rank, 0)
        continue
    if args.sizes:
        sizes = [int(v) for v in args.sizes.split(",")]
    else:
        sizes, b = [], args.min
        while b <= args.max:
            sizes.append(b)
            b *= 16
    for b in sizes:
        if bench(name, factor, per_rank, b):
            break
dist.destroy_process_group()
