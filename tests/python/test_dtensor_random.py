"""DTensor's random ops on tpu draw what one device draws (issue 45).

DTensor's OffsetBasedRNGTracker runs a random op on a shard after moving
the device generator's offset (CUDA's philox state layout: seed, then
offset) to where the shard starts in the whole tensor, and afterwards moves
every rank's offset past the whole tensor. The tpu generator's positions
work that way (value i of a random op comes from position offset + i), so a
tensor sharded on dim 0 and filled by normal_/uniform_/randn equals the
tensor one device fills with the same seed, as FSDP2's sharded
initialization of a model equals the single-device one.
"""

from __future__ import annotations

import torch
import torch.nn as nn

import dist_workers as w


# ---- one process: the positions --------------------------------------------------

def test_consecutive_random_ops_take_disjoint_positions():
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        a = torch.rand(64, device="tpu", dtype=dtype).cpu()
        b = torch.rand(64, device="tpu", dtype=dtype).cpu()
        # (Before, each op's key moved on by one: b was a shifted by one.)
        assert not torch.equal(a[1:], b[:-1]) and not torch.equal(a[2:], b[:-2])
        if dtype != torch.bfloat16:  # (256 values only)
            assert len(set(a.tolist()) & set(b.tolist())) < 8


def test_offset_moves_by_numel_rounded_to_4_and_pieces_equal_the_whole():
    gen = torch.Generator("tpu")
    for dtype in (torch.float32, torch.float64):
        for shape in ((6, 10), (7, 12), (3, 4, 5)):
            gen.manual_seed(1234)
            whole = torch.empty(shape, device="tpu", dtype=dtype).normal_(generator=gen)
            n = whole.numel()
            assert gen.get_offset() == (n + 3) // 4 * 4
            flat = whole.flatten().cpu()
            # Any piece that starts at a multiple of 4, drawn at its offset.
            for start, length in ((0, 8), (4, 13), (n - (n % 4 or 4), n % 4 or 4)):
                gen.manual_seed(1234)
                gen.set_offset(start)
                piece = torch.empty(length, device="tpu", dtype=dtype).normal_(generator=gen)
                assert torch.equal(piece.cpu(), flat[start:start + length]), (dtype, shape, start)
    # CUDA's rule for philox offsets.
    try:
        gen.set_offset(2)
    except RuntimeError as e:
        assert "multiple of 4" in str(e)
    else:
        raise AssertionError("an offset that is not a multiple of 4 was accepted")


def test_rng_state_is_seed_then_offset():
    torch.tpu.manual_seed(77)
    torch.randn(10, device="tpu")
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    assert state[:8].view(torch.int64).item() == 77
    assert state[8:].view(torch.int64).item() == 12
    state[8:] = torch.tensor([4], dtype=torch.int64).view(torch.uint8)
    torch.tpu.set_rng_state(state)
    x = torch.randn(10, device="tpu").cpu()
    torch.tpu.manual_seed(77)
    y = torch.randn(14, device="tpu").cpu()
    assert torch.equal(x, y[4:])


# ---- two ranks: DTensor's tracker ---------------------------------------------------

def _single(seed, fn):
    torch.manual_seed(seed)
    return fn().cpu()


def sharded_random_equals_single_device(rank, world, init):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor
    import torch.distributed.tensor as dtensor

    w._init(rank, world, init)
    mesh = init_device_mesh("tpu", (world,))

    def dense(shape, dtype):
        return torch.empty(shape, device="tpu", dtype=dtype)

    def sharded(shape, dtype):
        return distribute_tensor(torch.empty(shape, device="tpu", dtype=dtype), mesh, [Shard(0)])

    inits = {
        "normal_": lambda t: nn.init.normal_(t, 0.5, 2.0),
        "uniform_": lambda t: nn.init.uniform_(t, -1.0, 3.0),
        "trunc_normal_": lambda t: nn.init.trunc_normal_(t, std=0.02),
        "kaiming_uniform_": lambda t: nn.init.kaiming_uniform_(t, a=5 ** 0.5),
    }
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for shape in ((8, 6), (7, 12), (6, 4, 3)):  # (7: uneven shards 4 and 3 rows)
            for name, f in inits.items():
                # Two ops in a row: the second starts where the first left every rank.
                def both(make):
                    a, b = make(shape, dtype), make((4, 6), dtype)
                    f(a), f(b)
                    return a, b
                torch.manual_seed(5)
                want = both(dense)
                torch.manual_seed(5)
                got = both(sharded)
                for g, x in zip(got, want):
                    assert isinstance(g, DTensor)
                    assert torch.equal(g.full_tensor().cpu(), x.cpu()), (name, dtype, shape)
                # Every rank's generator ends where one device's does.
                assert torch.equal(torch.tpu.get_rng_state(), _state_after(5, both, dense))

    # torch.distributed.tensor.randn / rand with a mesh and Shard(0).
    for factory, plain in ((dtensor.randn, torch.randn), (dtensor.rand, torch.rand)):
        torch.manual_seed(11)
        got = factory(10, 8, device_mesh=mesh, placements=[Shard(0)])
        want = _single(11, lambda: plain(10, 8, device="tpu"))
        assert torch.equal(got.full_tensor().cpu(), want), factory.__name__

    # FSDP2: a model made on the meta device, sharded, then initialized on
    # tpu gets the single-device model's weights. (As on CUDA, a shard must
    # start at a multiple of 4 values: the tracker rounds offsets up to one,
    # so a bias of 12 split 6 + 6 would draw rank 1's values from 8, not 6.)
    def model():
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.LayerNorm(16), nn.Linear(16, 8))

    torch.manual_seed(3)
    ref = model().to("tpu")  # (initialized on CPU, moved: not what we compare)
    torch.manual_seed(3)
    for m in ref.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()  # CPU weights moved above; now drawn on tpu
    with torch.device("meta"):
        sharded_model = model()
    for layer in sharded_model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(sharded_model, mesh=mesh)
    sharded_model.to_empty(device="tpu")
    torch.manual_seed(3)
    with torch.no_grad():
        for m in sharded_model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
    for (name, p), q in zip(sharded_model.named_parameters(), ref.parameters()):
        assert torch.equal(p.full_tensor().cpu(), q.detach().cpu()), name
    dist.destroy_process_group()


def _state_after(seed, both, dense):
    torch.manual_seed(seed)
    keep = torch.tpu.get_rng_state()
    both(dense)
    state = torch.tpu.get_rng_state()
    torch.tpu.set_rng_state(keep)
    return state


def test_sharded_random_init_equals_single_device_on_two_ranks():
    w.launch(sharded_random_equals_single_device, 2, timeout=240)
