# Random state: fresh per rank and per run, as after an exec.
import random

import numpy
import torch

print("random", random.random())
print("numpy", numpy.random.random())
print("torch", torch.initial_seed(), torch.rand(1).item())
