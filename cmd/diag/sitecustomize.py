# distrun's Python stack helper (see distrun(1), DIAGNOSIS).
#
# distrun puts this directory first on the ranks' PYTHONPATH.  When
# DISTRUN_PYSTACKS=1, every thread's Python stack is dumped by faulthandler
# on SIGUSR2 into an anonymous memfd named "distrun-pystack", which distrun
# finds in /proc/PID/fd and reads for its stall report.  The rank keeps
# running: the dump is written by faulthandler's C signal handler, which
# needs neither the GIL nor the interpreter to be responsive.  Then the
# sitecustomize this file hides (Debian's, a virtualenv's) runs as usual.
import os
import sys


def _distrun_register():
    try:
        import faulthandler
        import signal
        fd = os.memfd_create("distrun-pystack")  # close-on-exec
        faulthandler.register(signal.SIGUSR2, file=fd, all_threads=True,
                              chain=False)
    except (AttributeError, OSError, RuntimeError, ValueError):
        pass  # no memfd or no faulthandler: distrun falls back to gdb


def _distrun_chain():
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.origin == os.path.abspath(__file__):
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = mod
    spec.loader.exec_module(mod)


# Under a name of its own too: _distrun_chain puts the hidden sitecustomize
# in sys.modules["sitecustomize"], and --preload's forked ranks call
# _distrun_register again for a memfd of their own (preload.py).
sys.modules["_distrun_sitecustomize"] = sys.modules[__name__]
if os.environ.get("DISTRUN_PYSTACKS") == "1":
    _distrun_register()
_distrun_chain()
