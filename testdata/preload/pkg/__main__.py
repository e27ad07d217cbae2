import os
import sys

print("module", __name__, __spec__.name, sys.argv[0].endswith("pkg/__main__.py"),
      os.environ["RANK"])
raise SystemExit(3)
