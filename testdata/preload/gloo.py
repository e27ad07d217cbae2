# A torch job: init gloo, a barrier, an all_reduce, exit (bench-preload).
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
t = torch.ones(1)
dist.all_reduce(t)
if os.environ.get("GLOO_QUIET") != "1":
    print("sum", int(t.item()), "of", dist.get_world_size())
dist.destroy_process_group()
