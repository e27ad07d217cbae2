# hang.py - rank 1 skips dist.barrier() (tests/diag.bats): the others
# wait in it, rank 1 sleeps.  Lines marked HANG-LINE are looked for in
# the stacks distrun reports.
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} ready", flush=True)
if rank == 1:
    time.sleep(600)  # HANG-LINE sleep
dist.barrier()  # HANG-LINE barrier
dist.destroy_process_group()
