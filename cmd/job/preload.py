# distrun's warm interpreter (see distrun(1), --preload; cmd/job/preload.c).
#
# distrun runs this file with the interpreter (and interpreter options) the
# ranks would have run, in the ranks' environment and working directory:
#
#     PYTHON [OPTS] preload.py MODULES SYS_PATH0 client|door FD
#
# It imports MODULES once, then serves one or more distrun processes: each
# is a connected AF_UNIX stream socket ("client FD" is the first; with
# "door FD", new ones arrive as SCM_RIGHTS over that socket, from the
# distrun that runs a sweep or `distrun test`).  To each it says
# "READY pid" or "FAIL why" once the imports are done, then on a FORK
# frame forks a child that becomes the rank: its own process group,
# PR_SET_PDEATHSIG, the job's cgroup, the fds it was sent as 0, 1, 2 and
# the segment, the rank's environment, cwd and argv, fresh stdio objects
# and random state, then the script as __main__, as `python SCRIPT` (or
# -m, -c) would.  The server watches each child with a pidfd; when one
# exits it says "EXITED pid", and reaps it (wait4, for the rusage) only
# when distrun answers REAP: distrun has then struck the pid from its
# guard, so no pid that may be reused is ever signalled.
#
# Before every fork the server checks that forking is safe: one OS thread
# (/proc/self/task; a started OpenMP pool or torch's native threads show
# there, threading.active_count() misses them), and no CUDA context.  It
# changes no signal disposition and no signal mask, so a child starts with
# exactly what a fresh interpreter would have (Python's SIGINT handler,
# SIGPIPE ignored, faulthandler's handlers).  It keeps no thread.
import os
import sys


def _fail_reason(exc, mod):
    text = "%s: %s" % (type(exc).__name__, exc)
    return "cannot import %s (%s)" % (mod, " ".join(text.split()))


def _threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


def _unsafe():
    """Why forking now would be unsafe, or None."""
    n = _threads()
    if n != 1:
        return ("the warm interpreter runs %d threads (a preloaded module "
                "started them; forking would copy locks they hold)" % n
                if n > 1 else "cannot count the warm interpreter's threads")
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None:
        try:
            if cuda.is_initialized() or cuda._is_in_bad_fork():
                return "CUDA is initialised in the warm interpreter"
        except AttributeError:
            pass
    return None


class _Client:
    def __init__(self, sock):
        self.sock = sock
        self.ranks = {}      # pid -> pidfd
        self.told = False


class _Server:
    HDR = 8

    def __init__(self, error):
        import selectors
        self.error = error
        self.sel = selectors.DefaultSelector()
        self.clients = {}    # fileno -> _Client
        self.pidfds = {}     # pidfd -> (client, pid)
        self.door = None
        self.pid = os.getpid()

    # ------------------------------------------------------------ wire

    def send(self, client, line):
        try:
            client.sock.sendall(line.encode("utf-8", "replace") + b"\n")
        except OSError:
            pass   # its EOF comes through the selector

    def add_client(self, sock):
        import selectors
        sock.setblocking(True)
        c = _Client(sock)
        self.clients[sock.fileno()] = c
        self.sel.register(sock, selectors.EVENT_READ, ("client", c))
        if self.error:
            self.send(c, "FAIL " + self.error)
        else:
            self.send(c, "READY %d" % os.getpid())

    def drop_client(self, c):
        import signal
        # distrun is gone (or done): its ranks go with it.
        for pid, pidfd in list(c.ranks.items()):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.sel.unregister(pidfd)
            except KeyError:
                pass   # already seen to exit
            del self.pidfds[pidfd]
            os.close(pidfd)
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
        c.ranks.clear()
        self.sel.unregister(c.sock)
        del self.clients[c.sock.fileno()]
        c.sock.close()

    def recv_exact(self, sock, n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def read_frame(self, c):
        """(type, body, fds), or None at EOF."""
        import socket
        import struct
        try:
            data, anc, _flags, _addr = c.sock.recvmsg(
                self.HDR, socket.CMSG_SPACE(16 * 4))
        except OSError:
            return None
        fds = []
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds.extend(struct.unpack("%di" % (usable // 4),
                                         payload[:usable]))
        if not data:
            for fd in fds:
                os.close(fd)
            return None
        if len(data) < self.HDR:
            rest = self.recv_exact(c.sock, self.HDR - len(data))
            if rest is None:
                return None
            data += rest
        kind, length = struct.unpack("<4sI", data)
        body = self.recv_exact(c.sock, length) if length else b""
        if body is None:
            for fd in fds:
                os.close(fd)
            return None
        return kind, body, fds

    # ------------------------------------------------------------ loop

    def serve(self):
        """Returns the job in a forked child; never returns in the server."""
        while True:
            if not self.clients and self.door is None:
                os._exit(0)
            for key, _ev in self.sel.select():
                what, obj = key.data
                try:
                    if what == "door":
                        job = self.on_door()
                    elif what == "client":
                        job = self.on_client(obj)
                    else:
                        job = self.on_exit(key.fd)
                except Exception as e:
                    if os.getpid() != self.pid:
                        raise   # in a child: its own failure
                    # A malformed request: that distrun is dropped (its
                    # ranks with it), the others are served on.
                    sys.stderr.write("distrun: preload: %s: %s\n" % (
                        type(e).__name__, e))
                    if what == "client" and obj.sock.fileno() in \
                            self.clients:
                        self.drop_client(obj)
                    continue
                if job is not None:
                    return job

    def on_door(self):
        import socket
        try:
            msg, fds, _flags, _addr = socket.recv_fds(self.door, 16, 4)
        except OSError:
            msg, fds = b"", []
        if not msg and not fds:
            # The sweep's distrun is gone: no new clients.
            self.sel.unregister(self.door)
            self.door.close()
            self.door = None
            return None
        for fd in fds:
            self.add_client(socket.socket(fileno=fd))
        return None

    def on_client(self, c):
        frame = self.read_frame(c)
        if frame is None:
            self.drop_client(c)
            return None
        kind, body, fds = frame
        if kind == b"REAP":
            try:
                pid = int(body.rstrip(b"\0"))
            except ValueError:
                return None
            self.reap(c, pid)
            return None
        if kind == b"FORK" and not self.error:
            return self.fork(c, body, fds)
        for fd in fds:
            os.close(fd)
        if kind == b"FORK":
            self.send(c, "NOFORK %s %s" % (body.split(b"\0", 1)[0].decode(),
                                           self.error))
        return None

    def on_exit(self, pidfd):
        c, pid = self.pidfds[pidfd]
        # Only seen (WNOWAIT): reaped when distrun says REAP.
        self.sel.unregister(pidfd)
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            info = None
        if info is None:
            status = 9
        elif info.si_code == os.CLD_EXITED:
            status = (info.si_status & 0xff) << 8
        else:
            status = info.si_status | (0x80 if info.si_code ==
                                       os.CLD_DUMPED else 0)
        self.send(c, "EXITED %d %d" % (pid, status))
        return None

    def reap(self, c, pid):
        pidfd = c.ranks.pop(pid, None)
        if pidfd is None:
            return
        del self.pidfds[pidfd]
        os.close(pidfd)
        try:
            _pid, status, ru = os.wait4(pid, 0)
        except ChildProcessError:
            return
        self.send(c, "STATUS %d %d %d %d %d %d %d %d %d %d %d" % (
            pid, status, int(ru.ru_utime * 1e6), int(ru.ru_stime * 1e6),
            ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw,
            ru.ru_nivcsw, ru.ru_inblock, ru.ru_oublock))

    def fork(self, c, body, fds):
        import selectors
        fields = body.split(b"\0")
        r = fields[0].decode()
        why = _unsafe()
        if why:
            for fd in fds:
                os.close(fd)
            self.send(c, "NOFORK %s %s" % (r, why))
            return None
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (AttributeError, OSError, ValueError):
                pass
        server = os.getpid()
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            self.send(c, "NOFORK %s fork: %s" % (r, e.strerror))
            return None
        if pid == 0:
            self.close_all()
            return (server, fields, fds)
        for fd in fds:
            os.close(fd)
        try:
            os.setpgid(pid, pid)   # also here: killpg works at once
        except OSError:
            pass
        pidfd = os.pidfd_open(pid)
        c.ranks[pid] = pidfd
        self.pidfds[pidfd] = (c, pid)
        self.sel.register(pidfd, selectors.EVENT_READ, ("pid", None))
        self.send(c, "FORKED %s %d" % (r, pid))
        return None

    def close_all(self):
        """In the child: none of the server's fds stay."""
        for pidfd in self.pidfds:
            os.close(pidfd)
        for c in self.clients.values():
            c.sock.close()
        if self.door is not None:
            self.door.close()
        self.sel.close()


# ------------------------------------------------------------ the rank


def _prctl(option, arg):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)


# -u or PYTHONUNBUFFERED, as the interpreter saw them at its start (the
# server runs with the ranks' interpreter options and environment).
_UNBUFFERED = False
_ORIG_ARGV = []


def _fresh_stdio(unbuffered):
    """sys.stdin/out/err as a fresh interpreter makes them for fds 0-2
    (Python/pylifecycle.c, create_stdio): the server's were made for its
    own fds, which may be a terminal where the rank's are pipes."""
    import io
    made = []
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"),
                           (2, "stderr", "w")):
        old = getattr(sys, "__%s__" % name, None)
        try:
            raw = io.FileIO(fd, mode + "b", closefd=False)
        except OSError:
            made.append(None)
            continue
        if unbuffered and mode == "w":
            buf = raw
        elif mode == "r":
            buf = io.BufferedReader(raw)
        else:
            buf = io.BufferedWriter(raw)
        line = not unbuffered and (raw.isatty() or fd == 2)
        stream = io.TextIOWrapper(
            buf, encoding=getattr(old, "encoding", None),
            errors=getattr(old, "errors", None), newline="\n",
            line_buffering=line, write_through=unbuffered)
        stream.mode = mode
        made.append(stream)
    sys.stdin = sys.__stdin__ = made[0]
    sys.stdout = sys.__stdout__ = made[1]
    sys.stderr = sys.__stderr__ = made[2]


def _place_fds(fds, targets):
    """fds[i] becomes targets[i] (inheritable, as after exec)."""
    import fcntl
    base = max(targets + [63]) + 1
    moved = []
    for fd in fds:
        moved.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, base))
        os.close(fd)
    for fd, target in zip(moved, targets):
        os.dup2(fd, target, inheritable=True)
        os.close(fd)


def _pystacks():
    """A memfd of the rank's own for distrun's stack report
    (sitecustomize.py): the server's would be shared by every rank."""
    sc = sys.modules.get("_distrun_sitecustomize")
    if os.environ.get("DISTRUN_PYSTACKS") != "1" or not sc or \
            not hasattr(sc, "_distrun_register"):
        return
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + name).startswith(
                    "/memfd:distrun-pystack"):
                os.close(int(name))
        except OSError:
            pass
    sc._distrun_register()


def _set_cmdline(argv):
    """The rank's command line in /proc/self/cmdline (ps, pgrep, distrun's
    report of left-behind processes): written over the server's own argv
    strings, cut to their length, the rest NUL."""
    import ctypes
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])
    except (OSError, IndexError, ValueError):
        return
    if end <= start:
        return
    new = b"\0".join(os.fsencode(a) for a in argv)[:end - start - 1]
    new += b"\0" * (end - start - len(new))
    ctypes.memmove(start, new, end - start)


def _reseed():
    """Random state as after an exec: random reseeds itself at fork;
    numpy's and torch's global generators are seeded here from the OS."""
    np = sys.modules.get("numpy")
    try:
        if np is not None and hasattr(np, "random"):
            np.random.seed()
    except Exception:
        pass
    torch = sys.modules.get("torch")
    gen = getattr(torch, "default_generator", None)
    if gen is not None:
        gen.seed()


def _become_rank(job):
    import signal
    server, fields, fds = job
    r, tracer, seg, cgroup, cwd, mode, target, nargs = fields[:8]
    nargs = int(nargs)
    args = [a.decode("utf-8", "surrogateescape") for a in fields[8:8 + nargs]]
    env = fields[8 + nargs:]
    seg, cgroup = int(seg), int(cgroup)
    os.setpgid(0, 0)
    # Dies with the warm interpreter, which dies with distrun.
    if _prctl(1, signal.SIGKILL) or os.getppid() != server:
        os._exit(127)
    _prctl(0x59616d61, int(tracer))    # PR_SET_PTRACER: distrun's gdb
    # fds: stdin, stdout, stderr, [segment], [cgroup.procs]
    if cgroup:
        try:
            os.write(fds[-1], b"0")
        except OSError:
            pass   # harmless, as in spawn.c
        os.close(fds.pop())
    _place_fds(fds, [0, 1, 2] + ([seg] if seg >= 0 else []))
    os.environ.clear()
    for entry in env:
        if b"=" in entry:
            k, v = entry.split(b"=", 1)
            os.environb[k] = v
    os.chdir(cwd)
    mode, target = mode.decode(), target.decode("utf-8", "surrogateescape")
    if _ORIG_ARGV:
        sys.orig_argv = _ORIG_ARGV + (
            [target] if mode == "script" else
            ["-m" if mode == "module" else "-c", target]) + args
    _fresh_stdio(_UNBUFFERED)
    import faulthandler
    if faulthandler.is_enabled():
        faulthandler.enable(file=sys.stderr, all_threads=True)
    _pystacks()
    _reseed()
    return mode, target, args, r.decode()


def _run(mode, target, args):
    """The script as __main__, as `python SCRIPT` / -m / -c runs it."""
    import builtins
    import io
    import types
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    main.__annotations__ = {}
    sys.modules["__main__"] = main
    isolated = sys.flags.isolated or getattr(sys.flags, "safe_path", False)
    if mode != "script":
        from importlib.machinery import BuiltinImporter
        main.__loader__ = BuiltinImporter
    if mode == "module":
        sys.argv = ["-m"] + args
        if not isolated:
            sys.path[0] = os.getcwd()
        import runpy
        runpy._run_module_as_main(target)
        return
    if mode == "code":
        sys.argv = ["-c"] + args
        if not isolated:
            sys.path[0] = ""
        exec(compile(target, "<string>", "exec", dont_inherit=True),
             main.__dict__)
        return
    sys.argv = [target] + args
    path = os.path.abspath(target)
    if not isolated:
        sys.path[0] = os.path.dirname(os.path.realpath(target))
    if not os.path.isfile(path):
        import runpy
        runpy.run_path(path, run_name="__main__")
        return
    from importlib.machinery import SourceFileLoader
    main.__file__ = path
    main.__cached__ = None
    main.__loader__ = SourceFileLoader("__main__", path)
    try:
        with io.open_code(path) as f:
            source = f.read()
    except OSError as e:
        sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n" % (
            sys.orig_argv[0], path, e.errno, e.strerror))
        raise SystemExit(2)
    exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)


def _trim(tb):
    """The traceback without this file's frames (a fresh interpreter has
    none above the script's)."""
    here = os.path.abspath(__file__)
    while tb is not None and os.path.abspath(
            tb.tb_frame.f_code.co_filename) == here:
        tb = tb.tb_next
    return tb


def _exit_code(exc):
    """SystemExit's code as the interpreter makes it a status
    (Python/pythonrun.c, handle_system_exit)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xff
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1


def _uncaught(exc):
    """What the interpreter does with an exception that ends __main__:
    sys.excepthook with the script's frames only, status 1."""
    tb = _trim(exc.__traceback__)
    exc.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    sys.excepthook(type(exc), exc, tb)
    return 1


def _finish(code, sigint=False):
    """The interpreter's shutdown as a program sees it (Py_FinalizeEx):
    wait for non-daemon threads, run the atexit handlers, flush files,
    then _exit.  Tearing down every module of the warm interpreter (torch's
    thousands of objects) would cost each rank most of a second and copy
    the pages it shares with the server; as in multiprocessing's forked
    workers, objects still alive at exit are not finalized, but files a
    program left open are flushed as the teardown would have."""
    import atexit
    import gc
    import io
    import threading
    try:
        threading._shutdown()
    except Exception:
        pass
    atexit._run_exitfuncs()
    kinds = (io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper)
    for obj in gc.get_objects():
        if isinstance(obj, kinds) and obj is not sys.stdout and \
                obj is not sys.stderr:
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:
                pass
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None:
                f.flush()
        except Exception:
            if f is sys.stdout and not code:
                code = 120   # as Python when stdout cannot be flushed
    if sigint:
        # Python 3.8+: an uncaught KeyboardInterrupt ends by SIGINT, so
        # that the shell sees the signal.
        import signal
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _main():
    global _UNBUFFERED, _ORIG_ARGV
    import importlib
    import io
    _UNBUFFERED = isinstance(getattr(sys.__stdout__, "buffer", None),
                             io.FileIO)
    orig = list(getattr(sys, "orig_argv", []))
    _ORIG_ARGV = orig[:len(orig) - len(sys.argv)]
    mods = [m for m in sys.argv[1].split(",") if m]
    path0, how, fd = sys.argv[2], sys.argv[3], int(sys.argv[4])
    if not (sys.flags.isolated or getattr(sys.flags, "safe_path", False)):
        sys.path[0] = path0
    error = None
    if sys.version_info < (3, 9):
        error = "the warm interpreter needs Python 3.9 or later"
        mods = []
    import ctypes   # warm for the ranks' prctl
    ctypes.CDLL(None)
    for mod in mods:
        try:
            importlib.import_module(mod)
        except BaseException as e:   # SystemExit from a module too
            error = _fail_reason(e, mod)
            break
    if error is None:
        error = _unsafe()
    if error is None:
        import gc
        gc.freeze()   # fewer pages copied in the ranks
    import socket
    server = _Server(error)
    if how == "door":
        import selectors
        server.door = socket.socket(fileno=fd)
        server.sel.register(server.door, selectors.EVENT_READ,
                            ("door", None))
    else:
        server.add_client(socket.socket(fileno=fd))
    return server.serve()


if __name__ == "__main__":
    _job = _main()
    # Only a forked rank gets here.
    try:
        _mode, _target, _args, _rank = _become_rank(_job)
    except Exception as _exc:
        os.write(2, ("distrun: preload: cannot set up the rank: %s: %s\n" % (
            type(_exc).__name__, _exc)).encode())
        os._exit(1)
    del _job
    _set_cmdline(sys.orig_argv)
    try:
        _run(_mode, _target, _args)
    except SystemExit as _exc:
        _finish(_exit_code(_exc))
    except BaseException as _exc:
        _finish(_uncaught(_exc), isinstance(_exc, KeyboardInterrupt))
    _finish(0)
