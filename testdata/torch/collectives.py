# Every collective of torch.distributed on CPU tensors, every dtype and
# ReduceOp, printed in one canonical form: run with "gloo" and with
# "distrun" and compare the outputs (tests/torch-backend.bats).  What gloo
# does not do (AVG, reduce_scatter, bool reductions, ...) is checked here
# against the value it must have, under "distrun" only ("selfcheck" lines).
#   collectives.py BACKEND
import sys

import warnings

import torch
import torch.distributed as dist

warnings.simplefilter("ignore")  # 1.13's notes on _all_gather_base & co.
backend = sys.argv[1]
if backend == "distrun":
    import distrun_torch  # noqa: F401
dist.init_process_group(backend)
r, n = dist.get_rank(), dist.get_world_size()
D = dist.ReduceOp
INTS = [torch.uint8, torch.int8, torch.int32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
ALL = [torch.bool] + INTS + FLOATS
# gloo moves no bool tensor at all ("Invalid scalar type"): bool is
# compared with gloo's results as uint8, and checked under distrun below.
# Neither bfloat16 (gloo 1.13 has none): checked the same way.
COMPARED = INTS + [torch.float16, torch.float32, torch.float64]


def show(name, t):
    if isinstance(t, (list, tuple)):
        t = [x.tolist() if torch.is_tensor(x) else x for x in t]
    elif torch.is_tensor(t):
        t = (str(t.dtype), t.tolist())
    print("%s: %s" % (name, t), flush=True)


def data(dt, k=5, rank=r):
    # small values: products and float16 sums stay exact
    v = (torch.arange(k) + rank) % 3
    return (v > 0) if dt == torch.bool else (v + 1).to(dt)


def ops_for(dt):
    if dt in (torch.bool, torch.bfloat16):
        return []  # gloo refuses to reduce these: selfcheck below
    ops = [("SUM", D.SUM), ("PRODUCT", D.PRODUCT), ("MIN", D.MIN),
           ("MAX", D.MAX)]
    if not dt.is_floating_point:
        ops += [("BAND", D.BAND), ("BOR", D.BOR), ("BXOR", D.BXOR)]
    return ops


def movement(dt, show, data=data):
    name = str(dt).replace("torch.", "")
    for root in range(n):
        t = data(dt)
        dist.broadcast(t, src=root)
        show("broadcast %s root %d" % (name, root), t)
    out = [torch.zeros(5, dtype=dt) for _ in range(n)]
    dist.all_gather(out, data(dt))
    show("all_gather " + name, out)
    g = [torch.zeros(5, dtype=dt) for _ in range(n)] if r == 0 else None
    dist.gather(data(dt), g, dst=0)
    show("gather " + name, g if g else [])
    out = torch.zeros(5, dtype=dt)
    dist.scatter(out, [data(dt, rank=i + 10) for i in range(n)] if r == n - 1
                 else None, src=n - 1)
    show("scatter " + name, out)
    inp = torch.cat([data(dt, 2, rank=r * n + i) for i in range(n)])
    out = torch.zeros(2 * n, dtype=dt)
    dist.all_to_all_single(out, inp)
    show("all_to_all_single " + name, out)


for dt in COMPARED:
    name = str(dt).replace("torch.", "")
    for oname, op in ops_for(dt):
        t = data(dt)
        dist.all_reduce(t, op=op)
        show("all_reduce %s %s" % (name, oname), t)
        t = data(dt)
        dist.reduce(t, dst=n - 1, op=op)
        if r == n - 1:  # elsewhere gloo leaves partial results
            show("reduce %s %s" % (name, oname), t)
    movement(dt, show)

# non-contiguous tensors (a transposed view), in place and out
t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (r + 1)
dist.all_reduce(t)
show("all_reduce noncontig", t)
t = torch.arange(6, dtype=torch.int64).reshape(2, 3).t() + r
dist.broadcast(t, src=n - 1)
show("broadcast noncontig", t)
out = [torch.zeros(3, 2).t() for _ in range(n)]
dist.all_gather(out, torch.arange(6.).reshape(3, 2).t() + r)
show("all_gather noncontig", out)

# complex: torch reduces it as real (int16 and complex moves, which gloo
# lacks: below)
t = torch.tensor([1 + 2j, r + 0j], dtype=torch.complex64)
dist.all_reduce(t)
show("all_reduce complex64 (as real)", t)

# all_to_all with split sizes, and with lists of uneven tensors
ins = [r + 1] * n
outs = [i + 1 for i in range(n)]
inp = torch.arange(sum(ins), dtype=torch.float32) + 100 * r
out = torch.zeros(sum(outs))
dist.all_to_all_single(out, inp, outs, ins)
show("all_to_all_single splits", out)

# async_op: wait, is_completed, get_future
t = data(torch.float32)
w = dist.all_reduce(t, async_op=True)
w.wait()
show("async all_reduce", t)
show("async is_completed", [w.is_completed()])
t = data(torch.int64)
w = dist.broadcast(t, src=0, async_op=True)
v = w.get_future().wait()
show("async broadcast future", v)
w = dist.barrier(async_op=True)
w.wait()
show("async barrier", [w.is_completed()])

# point-to-point: a ring with send/recv, isend/irecv, batch_isend_irecv,
# recv from any source
if n > 1:
    nxt, prv = (r + 1) % n, (r - 1) % n
    t = torch.zeros(3)
    if r % 2 == 0:
        dist.send(torch.full((3,), float(r)), nxt)
        dist.recv(t, prv)
    else:
        dist.recv(t, prv)
        dist.send(torch.full((3,), float(r)), nxt)
    show("send/recv", t)
    t = torch.zeros(2, dtype=torch.int32)
    ws = [dist.isend(torch.tensor([r, r * r], dtype=torch.int32), nxt),
          dist.irecv(t, prv)]
    for w in ws:
        w.wait()
    show("isend/irecv", t)
    t = torch.zeros(4)
    ops = [dist.P2POp(dist.isend, torch.full((4,), r + 0.5), nxt),
           dist.P2POp(dist.irecv, t, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    show("batch_isend_irecv", t)
    if r == 0:
        got = sorted(dist.recv(torch.zeros(1)) for _ in range(n - 1))
        show("recv any source", got)
    else:
        dist.send(torch.ones(1) * r, 0)

# object collectives
objs = [None] * n
dist.all_gather_object(objs, {"rank": r, "sq": [r] * r})
show("all_gather_object", objs)
lst = [{"from": r}, "x" * r] if r == 0 else [None, None]
dist.broadcast_object_list(lst, src=0)
show("broadcast_object_list", lst)
g = [None] * n if r == 0 else None
dist.gather_object(("g", r), g, dst=0)
show("gather_object", g or [])
out = [None]
dist.scatter_object_list(out, [("s", i) for i in range(n)] if r == 0
                         else None, src=0)
show("scatter_object_list", out)

# subgroups: even ranks, and a group of one
evens = list(range(0, n, 2))
ge = dist.new_group(evens)
gl = dist.new_group([n - 1])
if r in evens:
    t = torch.tensor([float(r + 1)])
    dist.all_reduce(t, group=ge)
    show("subgroup all_reduce", t)
    t = torch.tensor([r])
    dist.broadcast(t, src=evens[-1], group=ge)
    show("subgroup broadcast", t)
if r == n - 1:
    t = torch.tensor([7.0])
    dist.all_reduce(t, group=gl)
    show("group of one", t)
dist.barrier()

# what gloo does not do: checked against the value it must have
if backend == "distrun":
    total = lambda dt: sum(data(dt, rank=i) for i in range(n))
    # bool moves as gloo moves uint8
    got, want = [], []
    movement(torch.bool, lambda name, t: got.append(t))
    movement(torch.uint8, lambda name, t: want.append(t),
             lambda dt, k=5, rank=r: data(torch.bool, k, rank).to(dt))
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        if torch.is_tensor(a):
            a, b = [a], [b]
        assert [x.to(torch.uint8).tolist() for x in a] == \
            [x.tolist() for x in b], (a, b)
    got, want = [], []
    movement(torch.bfloat16, lambda name, t: got.append(t))
    movement(torch.float32, lambda name, t: want.append(t))
    for a, b in zip(got, want):
        if torch.is_tensor(a):
            a, b = [a], [b]
        assert [x.float().tolist() for x in a] == [x.tolist() for x in b]
    for dt in [torch.int16, torch.complex64, torch.complex128]:
        t = (torch.arange(4) + r).to(dt)
        dist.broadcast(t, src=0)
        assert t.tolist() == torch.arange(4).to(dt).tolist(), t
        out = [torch.zeros(4, dtype=dt) for _ in range(n)]
        dist.all_gather(out, (torch.arange(4) * (r + 1)).to(dt))
        assert [o.tolist() for o in out] == [
            (torch.arange(4) * (i + 1)).to(dt).tolist() for i in range(n)]
    # all_to_all of lists of uneven tensors (gloo has none)
    inl = [torch.full((i + 1,), float(r * 10 + i)) for i in range(n)]
    outl = [torch.zeros(r + 1) for _ in range(n)]
    dist.all_to_all(outl, inl)
    assert [o.tolist() for o in outl] == [[float(i * 10 + r)] * (r + 1)
                                          for i in range(n)], outl
    t = (torch.arange(4) + r).to(torch.int16) - 300
    dist.broadcast(t, src=n - 1)
    assert t.tolist() == [n - 1 - 300 + i for i in range(4)], t
    # bfloat16 reductions (gloo has none)
    stack = torch.stack([data(torch.float64, rank=i) for i in range(n)])
    for op, want in [(D.SUM, stack.sum(0)), (D.PRODUCT, stack.prod(0)),
                     (D.MIN, stack.min(0).values),
                     (D.MAX, stack.max(0).values)]:
        t = data(torch.bfloat16)
        dist.all_reduce(t, op=op)
        assert torch.equal(t, want.to(torch.bfloat16)), (op, t, want)
        t = data(torch.bfloat16)
        dist.reduce(t, dst=0, op=op)
        assert r or torch.equal(t, want.to(torch.bfloat16)), (op, t, want)
    # all_gather_into_tensor (gloo has none): all_gather's result, flat
    for dt in ALL:
        out = torch.zeros(5 * n, dtype=dt)
        dist.all_gather_into_tensor(out, data(dt))
        assert torch.equal(out, torch.cat([data(dt, rank=i)
                                           for i in range(n)])), (dt, out)
    for dt in FLOATS:
        t = data(dt)
        dist.all_reduce(t, op=D.AVG)
        assert torch.equal(t, (total(torch.float64) / n).to(dt)), t
    for oname, op, f in [("SUM", D.SUM, any), ("MAX", D.MAX, any),
                         ("PRODUCT", D.PRODUCT, all), ("MIN", D.MIN, all)]:
        t = data(torch.bool)
        dist.all_reduce(t, op=op)
        want = [f(bool(data(torch.bool, rank=i)[k]) for i in range(n))
                for k in range(5)]
        assert t.tolist() == want, (oname, t, want)
    for dt in ALL:
        ins = [data(dt, 3, rank=r + 10 * i) for i in range(n)]
        out = torch.zeros(3, dtype=dt)
        op = D.MAX if dt == torch.bool else D.SUM
        dist.reduce_scatter(out, ins, op=op)
        want = [data(dt, 3, rank=i + 10 * r) for i in range(n)]
        want = (torch.stack(want).any(0) if dt == torch.bool else
                sum(want).to(dt))
        assert torch.equal(out, want), (dt, out, want)
        out = torch.zeros(3, dtype=dt)
        dist._reduce_scatter_base(out, torch.cat(ins), op=op)
        assert torch.equal(out, want), (dt, out, want)
    t = torch.arange(6.).reshape(2, 3).t() + r
    dist.all_reduce(t, op=D.AVG)
    assert torch.equal(t, torch.arange(6.).reshape(2, 3).t() + (n - 1) / 2)
    dist.monitored_barrier(wait_all_ranks=True)
    ts = [torch.ones(2) * r, torch.ones(3, dtype=torch.float32)]
    dist.all_reduce_coalesced(ts)
    assert ts[0].tolist() == [n * (n - 1) / 2] * 2 and ts[1].tolist() == [n] * 3
    print("selfcheck ok", flush=True)

dist.destroy_process_group()
print("done", flush=True)
