# atexit handlers run, buffered output is flushed, multiprocessing works.
import atexit
import json  # the module the tests preload
import multiprocessing
import sys


def square(x):
    return x * x


def bye():
    print("atexit ran")


if __name__ == "__main__":
    atexit.register(bye)
    sys.stdout = open(sys.stdout.fileno(), "w", buffering=65536,
                      closefd=False)
    print("buffered line")
    ctx = multiprocessing.get_context(sys.argv[1])
    with ctx.Pool(2) as pool:
        print("pool", sys.argv[1], pool.map(square, [1, 2, 3]))
