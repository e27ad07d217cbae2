# breakpoint() on rank 0 reads distrun's stdin (--stdin 0).
import json  # the module the tests preload
import os


def main():
    x = os.environ["RANK"]
    breakpoint()
    print("after", x)


main()
print("done")
