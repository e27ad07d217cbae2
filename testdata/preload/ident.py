# What a rank can see of how it was started (tests/preload.bats).
import json  # the module the tests preload
import os
import sys

print("argv", sys.argv)
print("name", __name__)
print("file", __file__)
print("path0", sys.path[0])
print("cwd", os.getcwd())
print("rank", os.environ["RANK"], "world", os.environ["WORLD_SIZE"])
print("main", sys.modules["__main__"].__dict__ is globals())
print("pgid", os.getpgrp() == os.getpid())
print("stdin", sys.stdin.readline().strip() or "<eof>")
print("buffered", sys.stdout.line_buffering, sys.stdout.write_through)
