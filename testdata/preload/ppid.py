# Where the rank came from: its parent's pid, into $PRELOAD_OUT/RANK.WORLD.
import json  # the module the tests preload
import os

with open("%s/%s.%s" % (os.environ["PRELOAD_OUT"], os.environ["RANK"],
                        os.environ["WORLD_SIZE"]), "w") as f:
    f.write("%d\n" % os.getppid())
