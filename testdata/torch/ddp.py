# DistributedDataParallel trains a small model for a few steps; prints the
# parameters after, rounded: the same under "gloo" and "distrun".
#   ddp.py BACKEND [STEPS]
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

backend = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
if backend == "distrun":
    import distrun_torch  # noqa: F401
dist.init_process_group(backend)
r = dist.get_rank()
torch.manual_seed(1234 + r)  # DDP must broadcast rank 0's parameters
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 4))
ddp = DDP(model, bucket_cap_mb=0.001)  # several buckets in flight
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
g = torch.Generator().manual_seed(99 + r)
for _ in range(steps):
    x = torch.randn(8, 16, generator=g)
    y = torch.randn(8, 4, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
print("params", len(flat), " ".join("%.5f" % v for v in flat[::7].tolist()))
dist.destroy_process_group()
