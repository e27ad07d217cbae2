"""libdistrun through ctypes: finding the library, the signatures, errors.

The library is found relative to this file, so that a checkout, an
installed tree and the copy distrun puts on its ranks' PYTHONPATH all
find their own libdistrun without LD_LIBRARY_PATH:

    build/share/distrun/python/distrun_torch  ->  build/lib
    PREFIX/share/distrun/python/distrun_torch ->  PREFIX/lib
    PREFIX/lib/python3.X/dist-packages/distrun_torch -> PREFIX/lib
    runtime/torch/distrun_torch (a checkout)  ->  build/lib

then the dynamic linker's own search (ldconfig'd /usr/local/lib).
DISTRUN_LIB (a file or a directory) overrides all of them.

ctypes.CDLL releases the GIL for the length of every call: a rank blocked
in a collective does not stop the process's other Python threads.
"""
import ctypes
import os

SONAME = "libdistrun.so.0"
_HERE = os.path.dirname(os.path.abspath(__file__))


class DistrunError(RuntimeError):
    """A libdistrun call failed.  A RuntimeError, as torch's backends
    raise; `code` is libdistrun's error name ("DR_EMISMATCH", ...)."""

    def __init__(self, msg, code=None):
        super().__init__(msg)
        self.code = code


def _candidates():
    env = os.environ.get("DISTRUN_LIB")
    if env:
        yield os.path.join(env, SONAME) if os.path.isdir(env) else env
        return
    up = lambda *p: os.path.normpath(os.path.join(_HERE, *p))
    yield up("..", "..", "..", "..", "lib", SONAME)  # PREFIX/share/distrun/python
    yield up("..", "..", "..", SONAME)               # PREFIX/lib/python3.X/dist-packages
    yield up("..", "..", "..", "build", "lib", SONAME)  # runtime/torch/ of a checkout
    yield SONAME                                     # the dynamic linker's search


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "distrun_torch: cannot load libdistrun; tried: %s.  Build it "
        "(make) or install it (make install), or set DISTRUN_LIB to "
        "the library or its directory" % "; ".join(tried))


lib, path = _load()

_p = ctypes.c_void_p
_i = ctypes.c_int
_z = ctypes.c_size_t
_pp = ctypes.POINTER(ctypes.c_void_p)
_zp = ctypes.POINTER(ctypes.c_size_t)


class InitOptions(ctypes.Structure):
    # dr_init_options, field for field (distrun.h)
    _fields_ = [("backend", ctypes.c_char_p), ("init_method", ctypes.c_char_p),
                ("rank", _i), ("world_size", _i),
                ("timeout_ms", ctypes.c_int64),
                ("transport", ctypes.c_char_p)]


_SIGS = {
    "dr_strerror": ([_i], ctypes.c_char_p),
    "dr_err_name": ([_i], ctypes.c_char_p),
    "dr_last_error": ([], ctypes.c_char_p),
    "dr_init_process_group_opts": ([ctypes.POINTER(InitOptions)], _i),
    "dr_destroy_process_group": ([], _i),
    "dr_is_initialized": ([], _i),
    "dr_get_rank": ([], _i),
    "dr_get_world_size": ([], _i),
    "dr_transport_name": ([], ctypes.c_char_p),
    "dr_new_subgroup": ([ctypes.POINTER(_i), _i, ctypes.c_uint32, _pp], _i),
    "dr_group_destroy": ([_p], None),
    "dr_barrier": ([_p, _pp, _p, _i], _i),
    "dr_all_reduce": ([_p, _z, _i, _i, _p, _pp], _i),
    "dr_broadcast": ([_p, _z, _i, _i, _p, _pp], _i),
    "dr_reduce": ([_p, _z, _i, _i, _i, _p, _pp], _i),
    "dr_all_gather": ([_p, _p, _z, _i, _p, _pp], _i),
    "dr_gather": ([_p, _p, _z, _i, _i, _p, _pp], _i),
    "dr_scatter": ([_p, _p, _z, _i, _i, _p, _pp], _i),
    "dr_reduce_scatter": ([_p, _p, _z, _i, _i, _p, _pp], _i),
    "dr_all_to_all": ([_p, _p, _z, _i, _p, _pp], _i),
    "dr_all_to_all_v": ([_p, _zp, _p, _zp, _i, _p, _pp], _i),
    "dr_monitored_barrier": ([_p, ctypes.c_int64, _i], _i),
    "dr_send": ([_p, _z, _i, _i, _i, _p], _i),
    "dr_recv": ([_p, _z, _i, _i, _i, _p, ctypes.POINTER(_i)], _i),
    "dr_isend": ([_p, _z, _i, _i, _i, _p, _pp], _i),
    "dr_irecv": ([_p, _z, _i, _i, _i, _p, _pp], _i),
    "dr_work_wait": ([_p], _i),
    "dr_work_wait_timeout": ([_p, ctypes.c_int64], _i),
    "dr_work_is_completed": ([_p], _i),
    "dr_work_source": ([_p], _i),
    "dr_work_free": ([_p], None),
}
for _name, (_args, _res) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.argtypes = _args
    _f.restype = _res

# dr_dtype and dr_op (distrun.h); torch's RedOpType numbers its ops as
# libdistrun does (SUM 0 ... BXOR 7).
INT8, UINT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64 = range(8)
SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR = range(8)
ETIMEDOUT = 5


def message(rc):
    """libdistrun's message for the calling thread's last failure."""
    m = lib.dr_last_error()
    m = m.decode("utf-8", "replace") if m else ""
    return m or lib.dr_strerror(rc).decode()


def error(rc, what=None):
    """The exception for return code rc, with dr_last_error()'s text."""
    name = lib.dr_err_name(rc).decode()
    m = message(rc)
    return DistrunError("distrun: %s%s [%s]" % (what + ": " if what else "",
                                                m, name), name)
