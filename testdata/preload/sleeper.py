# Sleeps, after saying so (the kill -9 test).
import json  # the module the tests preload
import os
import time

print("up", os.getpid(), flush=True)
time.sleep(120)
