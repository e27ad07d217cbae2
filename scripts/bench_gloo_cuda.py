# bench_gloo_cuda.py - torch.distributed gloo all_reduce on CUDA tensors,
# measured as scripts/bench_cuda.c measures libdistrun (same sizes, same
# line format), for scripts/bench-gpu to pair:
#   distrun --raw -n 4 python3 scripts/bench_gloo_cuda.py [MAXBYTES [MINBYTES]]
# One timed call: barrier, start clock, all_reduce, torch.cuda.synchronize(),
# stop clock; a call's time is the slowest rank's; rank 0 prints the median.
# BENCH_DEVICE=cpu: a dry run on CPU tensors (to test this script).
import os, statistics, sys, time

import torch
import torch.distributed as dist

maxb = int(sys.argv[1], 0) if len(sys.argv) > 1 else 64 << 20
minb = int(sys.argv[2], 0) if len(sys.argv) > 2 else 4
dist.init_process_group(backend="gloo", init_method="env://")
rank, n = dist.get_rank(), dist.get_world_size()
if os.environ.get("BENCH_DEVICE") == "cpu":  # a dry run of this script
    dev = torch.device("cpu")
    torch.cuda.synchronize = lambda: None
elif not torch.cuda.is_available():
    if rank == 0:
        print("skip - torch sees no CUDA device", flush=True)
    dist.destroy_process_group()
    sys.exit(0)
else:
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = torch.device(f"cuda:{local % torch.cuda.device_count()}")
    torch.cuda.set_device(dev)


def iterations(b):
    return 12 if b >= (1 << 20) else 50 if b >= (64 << 10) else 200


b = minb
while b <= maxb:
    x = torch.ones(b // 4, dtype=torch.float32, device=dev)
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(iterations(b)):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    tt = torch.tensor(ts, dtype=torch.float64)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
    med = statistics.median(tt.tolist())
    if rank == 0:
        print(f"op=allreduce impl=gloo-{dev.type} n={n} bytes={b} median_us={med * 1e6:.2f} "
              f"busbw_GBps={b / med / 1e9 * 2 * (n - 1) / n:.3f}", flush=True)
    b *= 16
dist.destroy_process_group()
