"""Workers for test_distributed.py: each runs in every rank of a spawned group.

A worker is fn(rank, world, init_method, *args). It asserts what must hold
and raises on failure; the launcher (launch()) turns a failure in any rank,
or a rank that outlives its time, into a test failure.
"""

from __future__ import annotations

import datetime
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

import torch_tpu  # (registers the tpu device and its c10d backend)


def launch(fn, world: int, *args, timeout: float = 180.0) -> None:
    """Runs fn(rank, world, init_method, *args) in `world` spawned processes,
    with a file store; raises if a rank fails, kills every rank on timeout."""
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{os.path.join(tmp, 'store')}"
        ctx = mp.start_processes(fn, args=(world, init, *args), nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise TimeoutError(f"{fn.__name__} with {world} ranks did not finish in {timeout:.0f} s")


def _init(rank, world, init, backend=None, **kw):
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world, **kw)


def _data(rank: int, shape, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * salt + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g).to(dtype)


def _same(name: str, got, want) -> None:
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{name}: {len(got)} results, want {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(f"{name}[{i}]", g, w)
        return
    assert got.device.type == "tpu", f"{name}: result on {got.device}"
    g = got.cpu()
    assert g.dtype == want.dtype and g.shape == want.shape, f"{name}: {g.dtype}{list(g.shape)} vs {want.dtype}{list(want.shape)}"
    assert torch.equal(g, want), f"{name}: tpu {g} vs gloo {want}"


def _both(name: str, case) -> None:
    """Runs `case(device)` on CPU tensors (gloo) and on tpu tensors (the tpu
    backend) and checks that the results are the same."""
    want = case("cpu")
    got = case("tpu")
    _same(name, got, want)


def collectives(rank, world, init):
    """Every collective on tpu tensors equals the same collective with gloo on
    CPU tensors: values, dtypes and shapes."""
    _init(rank, world, init)  # no backend: tpu tensors -> tpu, CPU tensors -> gloo
    pg = dist.distributed_c10d._get_default_group()
    assert pg._get_backend(torch.device("tpu")).name() == "tpu"
    R = dist.ReduceOp
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
        ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if dtype.is_floating_point else [])
        for op in ops:
            def ar(dev, op=op, dtype=dtype):
                t = _data(rank, (3, 5), dtype, 1).to(dev)
                dist.all_reduce(t, op=op)
                return t
            _both(f"all_reduce {op} {dtype}", ar)
    for op in (R.SUM, R.MAX, R.MIN):
        def ar_bool(dev, op=op):
            t = _data(rank, (7,), torch.bool, 2).to(dev)
            dist.all_reduce(t, op=op)
            return t
        _both(f"all_reduce {op} bool", ar_bool)

    # PREMUL_SUM (gloo has none): sum of each rank's input times the factor.
    t = _data(rank, (4,), torch.float32, 3).to("tpu")
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    want = sum(_data(r, (4,), torch.float32, 3) * 0.5 for r in range(world))
    torch.testing.assert_close(t.cpu(), want)

    # A transposed (non-contiguous) tensor and a zero-size one.
    def ar_t(dev):
        base = _data(rank, (4, 3), torch.float32, 4).to(dev)
        t = base.t()
        dist.all_reduce(t)
        return [t.contiguous(), base]
    _both("all_reduce transposed", ar_t)

    def ar_empty(dev):
        t = torch.empty(0, 3, device=dev)
        dist.all_reduce(t)
        return t
    _both("all_reduce zero-size", ar_empty)

    def bcast(dev):
        t = _data(rank, (2, 3), torch.float32, 5).to(dev)
        dist.broadcast(t, src=world - 1)
        return t
    _both("broadcast", bcast)

    def reduce(dev):
        t = _data(rank, (5,), torch.float32, 6).to(dev)
        dist.reduce(t, dst=0, op=R.SUM)
        return t if rank == 0 else torch.zeros(0, device=dev)
    _both("reduce", reduce)

    def all_gather(dev):
        outs = [torch.empty(2, 2, device=dev) for _ in range(world)]
        dist.all_gather(outs, _data(rank, (2, 2), torch.float32, 7).to(dev))
        return outs
    _both("all_gather", all_gather)

    def all_gather_into(dev):
        out = torch.empty(world * 3, 2, dtype=torch.bfloat16, device=dev)
        dist.all_gather_into_tensor(out, _data(rank, (3, 2), torch.bfloat16, 8).to(dev))
        return out
    _both("all_gather_into_tensor", all_gather_into)

    def reduce_scatter(dev):
        out = torch.empty(3, device=dev)
        dist.reduce_scatter(out, [_data(rank, (3,), torch.float32, 9 + r).to(dev) for r in range(world)])
        return out
    _both("reduce_scatter", reduce_scatter)

    def reduce_scatter_tensor(dev):
        out = torch.empty(2, 4, device=dev)
        dist.reduce_scatter_tensor(out, _data(rank, (2 * world, 4), torch.float32, 20).to(dev))
        return out
    _both("reduce_scatter_tensor", reduce_scatter_tensor)

    def all_to_all(dev):
        outs = [torch.empty(2, dtype=torch.int64, device=dev) for _ in range(world)]
        dist.all_to_all(outs, [_data(rank, (2,), torch.int64, 30 + r).to(dev) for r in range(world)])
        return outs
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 13):
        # torch 2.11's Gloo has no list all_to_all: rank r's tensor for this rank.
        _same("all_to_all", all_to_all("tpu"), [_data(r, (2,), torch.int64, 30 + rank) for r in range(world)])
    else:
        _both("all_to_all", all_to_all)

    # all_to_all_single with uneven splits: rank r sends r + j + 1 rows to rank j.
    def all_to_all_uneven(dev):
        in_splits = [rank + j + 1 for j in range(world)]
        out_splits = [r + rank + 1 for r in range(world)]
        inp = _data(rank, (sum(in_splits), 2), torch.float32, 40).to(dev)
        out = torch.empty(sum(out_splits), 2, device=dev)
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        return out
    _both("all_to_all_single uneven", all_to_all_uneven)

    def scatter(dev):
        out = torch.empty(3, device=dev)
        chunks = [_data(r, (3,), torch.float32, 50).to(dev) for r in range(world)] if rank == 0 else None
        dist.scatter(out, chunks, src=0)
        return out
    _both("scatter", scatter)

    def gather(dev):
        t = _data(rank, (2,), torch.float32, 60).to(dev)
        outs = [torch.empty(2, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(t, outs, dst=0)
        return outs if rank == 0 else []
    _both("gather", gather)

    # Point to point: a ring of send/recv, isend/irecv and batch_isend_irecv.
    nxt, prv = (rank + 1) % world, (rank - 1) % world

    def p2p(dev):
        mine = _data(rank, (3,), torch.float32, 70).to(dev)
        got = torch.empty(3, device=dev)
        if rank % 2 == 0:
            dist.send(mine, nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(mine, nxt)
        got2 = torch.empty(3, device=dev)
        reqs = [dist.isend(mine * 2, nxt), dist.irecv(got2, prv)]
        for r in reqs:
            r.wait()
        got3 = torch.empty(3, device=dev)
        ops = [dist.P2POp(dist.isend, mine + 1, nxt), dist.P2POp(dist.irecv, got3, prv)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        return [got, got2, got3]
    _both("send/recv", p2p)

    # async_op: the Work completes with the device result, and its Future holds it.
    t = _data(rank, (1000,), torch.float32, 80).to("tpu")
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    work.wait()
    assert work.is_completed() and work.is_success()
    want = sum(_data(r, (1000,), torch.float32, 80) for r in range(world))
    torch.testing.assert_close(t.cpu(), want)
    (res,) = fut.wait()
    assert res.device.type == "tpu" and torch.equal(res.cpu(), t.cpu())

    # Objects, barrier, a subgroup.
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(world)]
    dist.barrier()
    sub = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        t = torch.full((2,), float(rank + 1), device="tpu")
        dist.all_reduce(t, group=sub)
        assert t.cpu().tolist() == [float(world + 1)] * 2
    # MPMD: the ranks run different programs between collectives.
    if rank == 0:
        a = _data(rank, (8, 8), torch.float32, 95).to("tpu")
        v = (a @ a).sum().reshape(1)
    else:
        v = torch.arange(10.0, device="tpu").cumsum(0)[-1:].clone()
    dist.broadcast(v, src=0)
    a = _data(0, (8, 8), torch.float32, 95)
    torch.testing.assert_close(v.cpu(), (a @ a).sum().reshape(1))
    # CPU tensors in the same group still go through gloo.
    c = torch.ones(2) * rank
    dist.all_reduce(c)
    assert c.tolist() == [float(sum(range(world)))] * 2
    dist.destroy_process_group()


def backend_names(rank, world, init, backend):
    """init_process_group(backend) for each accepted spelling."""
    _init(rank, world, init, backend)
    pg = dist.distributed_c10d._get_default_group()
    assert pg._get_backend(torch.device("tpu")).name() == "tpu"
    t = torch.ones(2, device="tpu")
    dist.all_reduce(t)
    c = torch.ones(2)
    dist.all_reduce(c)
    assert t.cpu().tolist() == c.tolist() == [float(world)] * 2
    dist.destroy_process_group()


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batches(steps, n=8):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g)) for _ in range(steps)]


def ddp(rank, world, init):
    """DDP on tpu equals one process training on the global batch, loss by
    loss; with device_ids, no_sync gradient accumulation, and compiled."""
    _init(rank, world, init)
    from torch.nn.parallel import DistributedDataParallel as DDP

    for variant in ("plain", "device_ids", "no_sync", "compiled"):
        torch.manual_seed(0)
        model = _mlp()
        ref = _mlp()
        ref.load_state_dict(model.state_dict())
        # Small buckets: several all_reduces per step (Dynamo's DDP optimizer
        # wants the default sizes).
        buckets = {} if variant == "compiled" else {"bucket_cap_mb": 0.0001}
        model = DDP(model.to("tpu"), device_ids=[0] if variant == "device_ids" else None, **buckets)
        run = torch.compile(model, backend="tpu") if variant == "compiled" else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        for x, y in _batches(4):
            xs, ys = x.chunk(world)[rank].to("tpu"), y.chunk(world)[rank].to("tpu")
            opt.zero_grad()
            if variant == "no_sync":
                # Two micro-batches per step, gradients synchronized on the second.
                half = xs.shape[0] // 2
                with model.no_sync():
                    (nn.functional.mse_loss(run(xs[:half]), ys[:half]) / 2).backward()
                (nn.functional.mse_loss(run(xs[half:]), ys[half:]) / 2).backward()
            else:
                loss = nn.functional.mse_loss(run(xs), ys)
                loss.backward()
                seen = loss.detach().clone()
                dist.all_reduce(seen, op=dist.ReduceOp.AVG)
            opt.step()
            ropt.zero_grad()
            if variant == "no_sync":
                # The ranks' first micro-batches together, then their second ones.
                xa = torch.cat([c[: c.shape[0] // 2] for c in x.chunk(world)])
                ya = torch.cat([c[: c.shape[0] // 2] for c in y.chunk(world)])
                xb = torch.cat([c[c.shape[0] // 2:] for c in x.chunk(world)])
                yb = torch.cat([c[c.shape[0] // 2:] for c in y.chunk(world)])
                (nn.functional.mse_loss(ref(xa), ya) / 2 + nn.functional.mse_loss(ref(xb), yb) / 2).backward()
            else:
                rl = nn.functional.mse_loss(ref(x), y)
                rl.backward()
                torch.testing.assert_close(seen.cpu(), rl.detach(), rtol=1e-5, atol=1e-6)
            ropt.step()
        for p, q in zip(model.module.parameters(), ref.parameters()):
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6, msg=variant)
    dist.destroy_process_group()


def sync_batch_norm(rank, world, init):
    """DDP of a CNN with SyncBatchNorm (convert_sync_batchnorm) equals one
    process training it with BatchNorm on the global batch: outputs,
    parameters and running statistics; the ranks' halves are uneven. And the
    one-tensor gathers it relies on take any shape of world x n elements."""
    _init(rank, world, init)
    from torch.nn.parallel import DistributedDataParallel as DDP

    # (SyncBatchNorm gathers into a (1, world * n) tensor: the one-tensor
    # collectives take any shape of world x n elements, as NCCL's do.)
    part = torch.arange(3.0, device="tpu") + 10 * rank
    whole = torch.cat([torch.arange(3.0) + 10 * r for r in range(world)])
    for shape in ((1, world * 3), (world, 3), (world * 3,)):
        out = torch.empty(shape, device="tpu")
        dist.all_gather_into_tensor(out, part)
        torch.testing.assert_close(out.cpu().flatten(), whole)
    got = torch.empty(3, device="tpu")
    dist.reduce_scatter_tensor(got, whole.reshape(world, 3).to("tpu"))
    torch.testing.assert_close(got.cpu(), world * whole[3 * rank:3 * rank + 3])
    try:
        dist.all_gather_into_tensor(torch.empty(world * 3 + 1, device="tpu"), part)
    except ValueError as e:
        assert "world_size" in str(e), e
    else:
        raise AssertionError("a wrongly sized output was accepted")

    def cnn():
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1),
                             nn.BatchNorm2d(2))

    torch.manual_seed(0)
    ref = cnn()
    model = cnn()
    model.load_state_dict(ref.state_dict())
    model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(model).to("tpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        x, y = torch.randn(7, 3, 5, 5, generator=g), torch.randn(7, 2, 5, 5, generator=g)
        lo, hi = (0, 3) if rank == 0 else (3, 7)  # 3 and 4 samples
        opt.zero_grad()
        out = model(x[lo:hi].to("tpu"))
        # Each rank's loss is its share of the global mean.
        (nn.functional.mse_loss(out, y[lo:hi].to("tpu"), reduction="sum") * world / y.numel()).backward()
        opt.step()
        ropt.zero_grad()
        rout = ref(x)
        nn.functional.mse_loss(rout, y).backward()
        ropt.step()
        torch.testing.assert_close(out.detach().cpu(), rout.detach()[lo:hi], rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.module.state_dict().items(), ref.state_dict().values()):
        if p.is_floating_point():
            torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5, msg=name)
    dist.destroy_process_group()


def fsdp_dtensor_dcp(rank, world, init, ckpt_dir):
    """FSDP2 (fp32 and a bf16 MixedPrecisionPolicy) equals one process;
    DTensor ops equal dense ones; tensor parallel on an MLP; a distributed
    checkpoint of an FSDP2 model and its optimizer (loaded by one process in
    the test)."""
    _init(rank, world, init)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("tpu", (world,))
    for mp_policy in (None, MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)):
        torch.manual_seed(0)
        model = _mlp().to("tpu")
        ref = _mlp()
        ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
        kw = {"mesh": mesh} if mp_policy is None else {"mesh": mesh, "mp_policy": mp_policy}
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, **kw)
        fully_shard(model, **kw)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        ropt = torch.optim.AdamW(ref.parameters(), lr=0.01)
        tol = {} if mp_policy is None else {"rtol": 2e-2, "atol": 2e-2}
        for x, y in _batches(3):
            loss = nn.functional.mse_loss(model(x.chunk(world)[rank].to("tpu")), y.chunk(world)[rank].to("tpu"))
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen = loss.detach().float().clone()
            dist.all_reduce(seen, op=dist.ReduceOp.AVG)
            r = ref(x if mp_policy is None else x.bfloat16().float())
            rl = nn.functional.mse_loss(r, y)
            ropt.zero_grad()
            rl.backward()
            ropt.step()
            torch.testing.assert_close(seen.cpu(), rl.detach(), **(tol or {"rtol": 1e-5, "atol": 1e-6}))
        full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
        for k, v in ref.state_dict().items():
            torch.testing.assert_close(full[k], v, **(tol or {"rtol": 1e-5, "atol": 1e-6}))

    # DTensor: Shard / Replicate, redistribute, matmul on sharded operands.
    torch.manual_seed(0)
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    da = distribute_tensor(a.to("tpu"), mesh, [Shard(0)])
    db = distribute_tensor(b.to("tpu"), mesh, [Replicate()])
    assert da.to_local().shape == (8 // world, 6)
    torch.testing.assert_close((da @ db).full_tensor().cpu(), a @ b)
    torch.testing.assert_close(da.redistribute(mesh, [Replicate()]).to_local().cpu(), a)
    d1 = distribute_tensor(a.to("tpu"), mesh, [Shard(1)])
    torch.testing.assert_close(d1.sum().full_tensor().cpu(), a.sum())
    torch.testing.assert_close((d1 * 2 + 1).full_tensor().cpu(), a * 2 + 1)

    # Tensor parallel on an MLP: forward and gradients equal the dense model's.
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    dense = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    dense.load_state_dict(mlp.state_dict())
    tp = parallelize_module(mlp.to("tpu"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(4, 8)
    y = tp(x.to("tpu"))
    torch.testing.assert_close(y.cpu(), dense(x))
    y.sum().backward()
    dense(x).sum().backward()
    torch.testing.assert_close(tp[0].weight.grad.full_tensor().cpu(), dense[0].weight.grad)
    torch.testing.assert_close(tp[2].weight.grad.full_tensor().cpu(), dense[2].weight.grad)

    # A distributed checkpoint of an FSDP2 model and its optimizer.
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    torch.manual_seed(0)
    model = _mlp().to("tpu")
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(4, 8, device="tpu")).sum().backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt_dir)
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    if rank == 0:
        torch.save(full, os.path.join(ckpt_dir, "expected.pt"))
    dist.barrier()
    dist.destroy_process_group()


class _FlexBlock(nn.Module):
    """A pre-norm transformer block whose attention is FlexAttention (causal
    block mask) or, for the dense reference, causal SDPA."""

    def __init__(self, dim: int, heads: int, flex: bool):
        super().__init__()
        self.heads, self.flex = heads, flex
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))

    def forward(self, x, block_mask=None):
        from torch.nn.attention.flex_attention import flex_attention

        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(self.n1(x)).split(d, -1))
        a = flex_attention(q, k, v, block_mask=block_mask) if self.flex else \
            nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        return x + self.ff(self.n2(x))


class _FlexLM(nn.Module):
    def __init__(self, flex: bool, vocab=64, dim=32, heads=2, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(_FlexBlock(dim, heads, flex) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids, block_mask=None):
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, block_mask)
        return self.head(x)


def fsdp2_compiled_flex_blocks(rank, world, init):
    """TorchTitan's recipe in small: each transformer block compiled
    (fullgraph) and sharded with FSDP2, FlexAttention with a causal block
    mask, AdamW: losses equal one CPU process training the dense model on
    the global batch."""
    _init(rank, world, init)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.attention.flex_attention import create_block_mask

    batch, seq = 4, 32
    mesh = init_device_mesh("tpu", (world,))
    torch.manual_seed(0)
    model, ref = _FlexLM(flex=True), _FlexLM(flex=False)
    ref.load_state_dict(model.state_dict())
    model.to("tpu")
    for block in model.layers:
        block.compile(backend="tpu", fullgraph=True)
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, seq, seq, device="tpu", BLOCK_SIZE=16)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        ids = torch.randint(0, 64, (batch, seq), generator=g)
        targets = ids.roll(-1, 1)
        mine, my_targets = ids.chunk(world)[rank].to("tpu"), targets.chunk(world)[rank].to("tpu")
        loss = nn.functional.cross_entropy(model(mine, mask).flatten(0, 1), my_targets.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen = loss.detach().clone()
        dist.all_reduce(seen, op=dist.ReduceOp.AVG)
        rl = nn.functional.cross_entropy(ref(ids).flatten(0, 1), targets.flatten())
        ropt.zero_grad()
        rl.backward()
        ropt.step()
        torch.testing.assert_close(seen.cpu(), rl.detach(), rtol=1e-4, atol=1e-5)
    stats = torch_tpu.compiler.stats()
    assert stats["op_runs"] == 0 and stats["replays"] > 0, stats
    dist.destroy_process_group()


def compiled_collectives(rank, world, init):
    """Collectives inside compiled graphs: a functional all_reduce (new
    values each call: a graph that skipped it would return stale sums) and
    a tensor-parallel MLP whose graphs take the device mesh as an input,
    both equal to the dense results, call after call."""
    _init(rank, world, init)
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    @torch.compile(backend="tpu")
    def reduce_twice_plus_one(x):
        return funcol.all_reduce(x * 2, "sum", dist.group.WORLD) + 1

    for i in range(3):
        got = reduce_twice_plus_one(torch.full((4,), float(rank + 1 + i), device="tpu"))
        want = torch.full((4,), 2.0 * sum(r + 1 + i for r in range(world)) + 1)
        assert torch.equal(got.cpu(), want), (i, got, want)

    mesh = init_device_mesh("tpu", (world,))
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    dense = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    dense.load_state_dict(mlp.state_dict())
    tp = parallelize_module(mlp.to("tpu"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    compiled = torch.compile(tp, backend="tpu")
    for i in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(i))
        y = compiled(x.to("tpu"))
        torch.testing.assert_close(y.cpu(), dense(x), rtol=1e-5, atol=1e-5)
        y.sum().backward()
        dense(x).sum().backward()
    torch.testing.assert_close(tp[0].weight.grad.full_tensor().cpu(), dense[0].weight.grad, rtol=1e-5, atol=1e-5)
    dist.destroy_process_group()


def skipped_collective(rank, world, init):
    """A rank that never joins a collective: the ranks that wait raise a
    timeout error naming the collective, its number and the missing rank."""
    _init(rank, world, init, timeout=datetime.timedelta(seconds=2))
    t = torch.ones(2, device="tpu")
    dist.all_reduce(t)
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        # Never joins the second all_reduce; stays alive until rank 0 has seen its error.
        store.wait(["seen"], datetime.timedelta(seconds=60))
        return
    start = time.monotonic()
    try:
        dist.all_reduce(t)
    except dist.DistBackendError as e:
        msg = str(e)
    else:
        raise AssertionError("an all_reduce that rank 1 never joined completed")
    finally:
        store.set("seen", "1")
    assert time.monotonic() - start < 30
    assert "all_reduce" in msg and "#2" in msg and "[1]" in msg and "imed out" in msg, msg


def dead_rank(rank, world, init):
    """A rank that dies: the other fails with a clear error instead of hanging."""
    _init(rank, world, init, timeout=datetime.timedelta(seconds=20))
    t = torch.ones(2, device="tpu")
    dist.all_reduce(t)
    if rank == 1:
        os._exit(0)
    try:
        dist.all_reduce(t)
    except dist.DistBackendError as e:
        assert "all_reduce" in str(e), str(e)
    else:
        raise AssertionError("an all_reduce with a dead peer completed")
    os._exit(0)  # the launcher sees a clean exit; the dead peer's group cannot be destroyed


def subgroups_four(rank, world, init):
    """4 ranks: subgroups, uneven all_to_all_single, reduce_scatter."""
    _init(rank, world, init)
    evens = dist.new_group([0, 2])
    odds = dist.new_group([1, 3])
    group = evens if rank % 2 == 0 else odds
    t = torch.full((3,), float(rank), device="tpu")
    dist.all_reduce(t, group=group)
    assert t.cpu().tolist() == [float(0 + 2 if rank % 2 == 0 else 1 + 3)] * 3

    def uneven(dev):
        in_splits = [(rank * j) % 3 + 1 for j in range(world)]
        out_splits = [(r * rank) % 3 + 1 for r in range(world)]
        inp = _data(rank, (sum(in_splits),), torch.float32, 90).to(dev)
        out = torch.empty(sum(out_splits), device=dev)
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        return out
    _both("all_to_all_single uneven (4 ranks)", uneven)

    def rs(dev):
        out = torch.empty(2, device=dev)
        dist.reduce_scatter_tensor(out, _data(rank, (2 * world,), torch.float32, 91).to(dev))
        return out
    _both("reduce_scatter_tensor (4 ranks)", rs)
    dist.destroy_process_group()
