# One rank of scripts/bench-torch: torch.distributed through BACKEND
# ("distrun" or "gloo"), at the torch level (dist.barrier(), dist.all_reduce,
# a DDP step).  Rank 0 prints, per case, the median of SAMPLES samples of
# the time per call (every rank runs the same number of calls, agreed on
# from the slowest rank's warm-up; calls synchronise the ranks, so rank 0's
# time is the slowest rank's):
#   case=barrier us=2.41
#   bench_torch.py BACKEND [SAMPLES] [BUDGET_MS] [CASES]
import sys
import time

import torch
import torch.distributed as dist

backend = sys.argv[1]
samples = int(sys.argv[2]) if len(sys.argv) > 2 else 5
budget = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.3
cases = sys.argv[4].split(",") if len(sys.argv) > 4 else None
if backend == "distrun":
    import distrun_torch  # noqa: F401
torch.set_num_threads(1)
dist.init_process_group(backend)
rank = dist.get_rank()


def ddp_step():
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
        torch.nn.ReLU(), torch.nn.Linear(512, 10))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(8, 256), torch.randint(0, 10, (8,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return step


def all_reduce(nbytes):
    t = torch.zeros(nbytes // 4)
    return lambda: dist.all_reduce(t)


CASES = [
    ("barrier", lambda: dist.barrier),
    ("all_reduce_4B", lambda: all_reduce(4)),
    ("all_reduce_64KiB", lambda: all_reduce(64 << 10)),
    ("all_reduce_64MiB", lambda: all_reduce(64 << 20)),
    ("ddp_step", ddp_step),
]


WARMUP = {"barrier": 300, "all_reduce_4B": 300, "all_reduce_64KiB": 50,
          "all_reduce_64MiB": 2, "ddp_step": 5}


def agreed(n):
    t = torch.tensor([n], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


for name, make in CASES:
    if cases and name not in cases:
        continue
    f = make()
    f()
    dist.barrier()
    # warm-up: the same number of calls on every rank (a count from each
    # rank's own clock would make the ranks' calls differ)
    k = WARMUP[name]
    t0 = time.perf_counter()
    for _ in range(k):
        f()
    per = (time.perf_counter() - t0) / k
    iters = agreed(max(1, int(budget / samples / max(per, 1e-9))))
    times = []
    for _ in range(samples):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            f()
        times.append((time.perf_counter() - t0) / iters * 1e6)
    times.sort()
    if rank == 0:
        print("case=%s us=%.2f iters=%d" % (name, times[len(times) // 2],
                                            iters), flush=True)
dist.destroy_process_group()
