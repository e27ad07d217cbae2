# Ends as its argument says: raise, exit N, a signal, or hang.
import json  # the module the tests preload
import os
import signal
import sys
import time


def inner(how):
    if how == "raise":
        raise ValueError("rank %s failed" % os.environ["RANK"])
    if how == "exitmsg":
        sys.exit("a message")
    if how.startswith("exit"):
        sys.exit(int(how[4:]))
    if how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if how == "hang":
        print("hanging", flush=True)
        time.sleep(300)


how = sys.argv[1]
if os.environ["RANK"] == "1" or how == "hang":
    inner(how)
# (Rank 0 says nothing when rank 1 fails: it may be stopped before.)
if how == "ok":
    print("rank", os.environ["RANK"], "ok")
