"""Bucketed prefill (docs/bounded_dynamism.md, "New lengths"): the token ids
of prompts of several lengths, and the masks and positions made at each
length, are padded from the third distinct length a line of code makes;
linear layers, norms, rotary embeddings and attention then read them at
bucket shapes, so a new prompt length within a bucket compiles nothing.
Every value, dtype, shape and stride equals CPU's."""

import pytest
import torch
import torch.nn.functional as F
from conftest import run_python
from test_bucketed import _hf_models, _padded, _programs, _same


def _growing(batch, width, steps, seed, start=2):
    """(tpu, cpu) pairs of a (batch, length, width) sequence grown by one
    position per step (its storage is padded from the third length on)."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(batch, start, width, generator=g)
    t = c.to("tpu")
    for _ in range(steps):
        n = torch.randn(batch, 1, width, generator=g)
        c, t = torch.cat([c, n], 1), torch.cat([t, n.to("tpu")], 1)
        yield t, c


def test_linear_layers_on_a_growing_sequence_equal_cpu_and_compile_once_per_bucket():
    # A linear layer flattens batch and sequence (a view merging a varying
    # dim with a static one) and its result is split back: both stay padded.
    g = torch.Generator().manual_seed(1)
    batch, width, out, heads = 3, 8, 12, 3
    w_c, b_c = torch.randn(out, width, generator=g), torch.randn(out, generator=g)
    w, b = w_c.to("tpu"), b_c.to("tpu")
    built = []
    for t, c in _growing(batch, width, 12, seed=2):
        n = c.shape[1]
        before = _programs()

        def ops(x, w, b):
            y = F.linear(x, w)
            yb = F.linear(x, w, b)
            heads_first = yb.view(batch, n, heads, out // heads).transpose(1, 2)
            return [y, yb, heads_first * 2, heads_first.contiguous(), y.sum(1), yb.mean(1), y.mean(),
                    F.linear(yb.relu(), w[:, :out].t())]

        got = ops(t, w, b)
        built.append(_programs() - before)
        for x, want in zip(got, ops(c, w_c, b_c)):
            _same(x, want, exact=False)
    assert _padded(got[0]) and _padded(got[3])
    # lengths 3..14: the bucket of 16 from length 4 on (its programs built once)
    assert built[3:] == [0] * len(built[3:]), built


def test_views_merging_and_splitting_a_varying_dim_equal_cpu():
    # Flattening batch and sequence (or everything), a concatenation that
    # doubles the varying dim and is split again, contractions and
    # reductions over a merged dim, argmax of a flattened tensor.
    batch, width = 3, 4

    def ops(x, n):
        flat = x.reshape(batch * n, width)
        return [x.reshape(-1) * 2, flat.sum(0), flat.cumsum(0), x.reshape(-1).argmax(), torch.cat([x, x], 1) + 1,
                torch.cat([x, x], 1).reshape(batch, 2, n, width)[:, 1] - 1, (flat @ flat.t()).sum(), flat.t() @ flat,
                x.transpose(0, 1).reshape(n * batch, width) * 3, (flat * 2).view(batch, n, width).mean(1),
                x.flatten(1).softmax(-1), x.reshape(batch, n * width).max(1).values, flat.argmin(0),
                x.amax(1), x.argmax(1)]

    for t, c in _growing(batch, width, 14, seed=4):
        for got, want in zip(ops(t, c.shape[1]), ops(c, c.shape[1])):
            _same(got, want, exact=False)
    assert _padded(t)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_merges_with_the_varying_dim_anywhere_equal_cpu(dim):
    # The varying dim outermost (sequence-major), in the middle or
    # innermost of the dims a view merges: every layout reads right.
    g = torch.Generator().manual_seed(10 + dim)
    sizes = [3, 4, 5]
    sizes[dim] = 2
    c = torch.randn(sizes, generator=g)
    t = c.to("tpu")
    m_c = torch.randn(5, 6, generator=g)
    m = m_c.to("tpu")

    def ops(x, m):
        a, b, w = x.shape
        out = [x.flatten(0, 1) * 2, x.flatten(1).cumsum(-1), x.flatten().argmax(), x.flatten(0, 1).sum(0),
               x.transpose(0, 1).flatten(0, 1) + 1, x.flatten(1).softmax(-1)]
        if w == 5:  # (the product's width is static)
            y = x.flatten(0, 1) @ m
            out += [y, y.view(a, b, 6).transpose(0, 1) * 3, F.linear(x.flatten(0, 1), m.t(), m[0]).view(a, b, 6).sum(1)]
        return out

    for _ in range(10):
        extra = list(sizes)
        extra[dim] = 1
        n = torch.randn(extra, generator=g)
        c, t = torch.cat([c, n], dim), torch.cat([t, n.to("tpu")], dim)
        for got, want in zip(ops(t, m), ops(c, m_c)):
            _same(got, want, exact=False)
    assert _padded(t)


def test_a_gather_by_a_flattened_index_holds_its_rows_as_the_index_does():
    # A paged KV cache read: whole blocks gathered by a flattened (n, 16)
    # block table (rows i * 16 + j, the varying n outermost), then split
    # (n, 16 * block). The result is held padded as (n, 16, ...), so the
    # split reads it by slicing; held as (16, n, ...) it was read through a
    # gather computing each element's index (16x slower).
    g = torch.Generator().manual_seed(12)
    cache_c = torch.randn(40, 4, 3, 8, generator=g)
    cache = cache_c.to("tpu")
    built = []
    for n in [5, 7, 9, 11, 12, 13, 14, 19, 23]:
        idx_c = torch.randint(0, 40, (n, 16), generator=g)
        before = _programs()

        def ops(cache, idx):
            rows = cache.index_select(0, idx.reshape(-1))
            blocks = rows.view(n, 64, 3, 8)
            return [rows, blocks * 2, blocks.sum((1, 2)), blocks[:, 5:9].transpose(1, 2) - 1]

        idx = idx_c.to("tpu")
        got = ops(cache, idx)
        built.append(_programs() - before)
        for x, want in zip(got, ops(cache_c, idx_c)):
            _same(x, want, exact=False)  # (the sum's order)
    assert _padded(idx) and _padded(got[0]) and _padded(got[1])
    assert "holding [23, 16, 4, 3, 8]" in torch.ops.torch_tpu._storage_info(got[0])
    # 11, 12, 13 and 14 share the bucket of 16 (the index is padded from 9 on)
    assert built[4:7] == [0, 0, 0], built


def test_a_mean_over_a_varying_dim_divides_by_its_actual_size():
    for t, c in _growing(2, 4, 6, seed=3):
        for dims in ([1], [0, 1], [1, 2]):
            _same(t.mean(dims), c.mean(dims), exact=False)
            _same(t.mean(dims, keepdim=True), c.mean(dims, keepdim=True), exact=False)
    assert _padded(t)


def test_masks_and_positions_made_at_each_length_are_padded():
    # A causal mask and the positions of a sequence, made at every length
    # (as a prefill makes them), are padded from the third length; a batch
    # index made at every call on another line keeps its size and stays
    # exact.
    built = []
    for n in (5, 9, 7, 12, 10, 14, 6, 11):
        before = _programs()
        mask = torch.ones((n, n), dtype=torch.bool, device="tpu").tril()
        bias = torch.where(mask, torch.zeros_like(mask, dtype=torch.float32), float("-inf"))
        pos = torch.arange(n, device="tpu")
        rows = torch.arange(3, device="tpu")
        sel = bias[None] + (pos[None, :] * rows[:, None, None]).float()
        built.append(_programs() - before)
        mask_c = torch.ones((n, n), dtype=torch.bool).tril()
        bias_c = torch.where(mask_c, 0.0, float("-inf"))
        pos_c, rows_c = torch.arange(n), torch.arange(3)
        for got, want in ((mask, mask_c), (bias, bias_c), (pos, pos_c), (rows, rows_c),
                          (sel, bias_c[None] + (pos_c[None, :] * rows_c[:, None, None]).float())):
            _same(got, want)
        assert not _padded(rows)
    assert _padded(mask) and _padded(pos)
    # from the fourth length on, in the bucket of 16: nothing new
    assert built[4:] == [0] * len(built[4:]), built


def test_tensors_made_like_others_mirror_them_and_float_fills_stay_exact():
    # An optimizer's state (zeros_like of parameters of many shapes, made at
    # one line), a parameter shard or a static cache (float fills at
    # several sizes) are long-lived: none is padded, whatever the sizes
    # around it. A tensor made like a padded one is padded as it is.
    shapes = [(16, 8), (16,), (4, 16), (4,), (32, 16), (32,), (64, 32), (8,), (3, 5, 7), (3, 6, 7), (3, 9, 7)]
    for dtype in (torch.float32, torch.bfloat16):
        model = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(s, dtype=dtype, device="tpu")) for s in shapes])
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        for p in model:
            p.grad = torch.ones_like(p)
        opt.step()
        for p in model:
            for name in ("exp_avg", "exp_avg_sq"):
                state = opt.state[p][name]
                assert not _padded(state), (p.shape, name)
                _same(state, torch.full(p.shape, 0.1 if name == "exp_avg" else 1e-3, dtype=dtype), exact=False)
            assert not _padded(p.grad)
    for s in shapes:
        for made in (torch.zeros(s, device="tpu"), torch.full(s, 2.0, device="tpu")):
            assert not _padded(made)
    # an integer fill at changing sizes is padded; one made like it mirrors
    # it, in any dtype, and one made like an exact tensor stays exact
    for n in (5, 9, 7, 12):
        ids = torch.ones((2, n), dtype=torch.int64, device="tpu")
    assert _padded(ids)
    for like in (torch.zeros_like(ids), torch.ones_like(ids, dtype=torch.float32), torch.full_like(ids, 3)):
        assert _padded(like)
        _same(like, torch.full((2, 12), like.flatten()[0].item(), dtype=like.dtype))
    assert not _padded(torch.zeros_like(torch.ones(2, 12, device="tpu")))


def test_tensors_pytorch_moves_or_makes_stay_exact_and_user_uploads_pad():
    # A module's int64 and bool buffers (position ids, masks) moved by
    # module.to, and a checkpoint's loaded with map_location, at several
    # sizes: state, never padded. The same tensors uploaded at several
    # sizes by one line of the user's code are token ids: padded.
    import io
    for n in (512, 1024, 77, 300, 45):
        m = torch.nn.Module()
        m.register_buffer("position_ids", torch.arange(n).expand((1, -1)))
        m.register_buffer("mask", torch.ones(n, dtype=torch.bool))
        m.to("tpu")
        buf = io.BytesIO()
        torch.save({"ids": torch.arange(n), "ok": torch.ones(2, n, dtype=torch.bool)}, buf)
        buf.seek(0)
        loaded = torch.load(buf, map_location="tpu")
        for t, want in ((m.position_ids, torch.arange(n).expand((1, -1))), (m.mask, torch.ones(n, dtype=torch.bool)),
                        (loaded["ids"], torch.arange(n)), (loaded["ok"], torch.ones(2, n, dtype=torch.bool))):
            assert not _padded(t), (n, t.shape)
            assert torch.equal(t.cpu(), want)
        uploaded = torch.arange(n)[None].to("tpu")
    assert _padded(uploaded)
    _same(uploaded, torch.arange(45)[None])


def test_explain_says_what_was_padded_and_what_ran_at_exact_sizes():
    code = (
        "import torch, torch_tpu\n"
        "x = torch.zeros(2, 3).to('tpu')\n"
        "for i in range(4):\n"
        "    x = torch.cat([x, torch.ones(2, 1).to('tpu')], 1)\n"
        "    y = (x * 2).sort(-1).values\n"
        "print(y.cpu().sum().item())\n"
    )
    run = run_python(code, env={"TORCH_TPU_BUCKETING": "explain"}, timeout=300)
    assert run.returncode == 0, run.stderr
    assert float(run.stdout.split()[-1]) == 16.0
    assert "torch_tpu bucketing: a growing concatenation of sizes [2, 5] padded to [2, 16]" in run.stderr, run.stderr
    assert "aten::sort.stable ran at exact sizes: its lowering is not checked for bucket shapes" in run.stderr


def test_token_ids_of_several_lengths_upload_padded_and_read_back_exactly():
    g = torch.Generator().manual_seed(5)
    built = []
    for n in (6, 9, 7, 12, 10, 13):
        ids_c = torch.randint(0, 100, (2, n), generator=g)
        mask_c = torch.ones_like(ids_c, dtype=torch.bool)
        mask_c[0, :2] = False
        ids, mask = ids_c.to("tpu"), mask_c.to("tpu")
        before = _programs()
        for got, want in ((ids, ids_c), (mask, mask_c), (ids[:, 1:], ids_c[:, 1:]), (ids[1], ids_c[1])):
            assert torch.equal(got.cpu(), want)  # (read back on the host: no program per length)
        assert ids[0, -1].item() == ids_c[0, -1].item()
        built.append(_programs() - before)
        _same(ids.masked_fill(~mask, 0), ids_c.masked_fill(~mask_c, 0))
        _same(ids.cumsum(-1), ids_c.cumsum(-1))
    assert _padded(ids) and _padded(mask)
    # (the first two lengths are exact: reading a view of them is a program)
    assert built[2:] == [0] * len(built[2:]), built
    # floating-point uploads (weights, features) stay exact
    for n in (6, 9, 7, 12):
        x = torch.randn(2, n).to("tpu")
    assert not _padded(x)


def test_in_place_ops_on_a_padded_tensor_equal_cpu():
    for t, c in _growing(2, 5, 5, seed=6):
        y, y_c = t * 2, c * 2
        y.add_(1.5)
        y_c.add_(1.5)
        y.mul_(t)
        y_c.mul_(c)
        _same(y, y_c, exact=False)
    assert _padded(y)


def test_hf_generate_with_prompts_of_new_lengths_compiles_nothing_after_three_lengths():
    cpu, tpu = _hf_models()
    g = torch.Generator().manual_seed(7)
    added = []
    for n in (7, 9, 10, 12, 11, 13, 5):
        ids = torch.randint(1, 256, (2, n), generator=g)
        mask = torch.ones_like(ids)
        mask[1, :2] = 0  # left padding

        def generate(model, dev):
            with torch.no_grad():
                return model.generate(ids.to(dev), attention_mask=mask.to(dev), max_new_tokens=2,
                                      min_new_tokens=2, do_sample=False, pad_token_id=0).cpu()

        before = _programs()
        out = generate(tpu, "tpu")
        added.append(_programs() - before)
        assert torch.equal(out, generate(cpu, "cpu"))
    # lengths up to 15: the bucket of 16, its programs built at the third
    # length (a length this process made exact before, in another test,
    # stays exact: a few programs); before, about 45 per new length
    assert max(added[3:]) <= 8 and added[3:].count(0) >= 2, added


def test_a_full_recompute_decode_loop_equals_cpu_and_compiles_little_per_step():
    # A loop that runs the whole model on the growing sequence at every
    # step (no KV cache), as a minimal sampling script does.
    cpu, tpu = _hf_models()
    ids_c = torch.randint(1, 256, (2, 5), generator=torch.Generator().manual_seed(8))
    ids = ids_c.to("tpu")
    per_step = []
    with torch.no_grad():
        # an earlier loop ran at length 12 (made exact there, before this
        # line had seen its sizes vary)
        tpu(torch.randint(1, 256, (2, 12)).to("tpu"), use_cache=False)
        for _ in range(10):
            before = _programs()
            logits = tpu(ids, use_cache=False).logits
            ids = torch.cat([ids, logits[:, -1].argmax(-1)[:, None]], 1)
            per_step.append(_programs() - before)
            logits_c = cpu(ids_c, use_cache=False).logits
            ids_c = torch.cat([ids_c, logits_c[:, -1].argmax(-1)[:, None]], 1)
            torch.testing.assert_close(logits.cpu(), logits_c, rtol=1e-4, atol=1e-4)
    assert torch.equal(ids.cpu(), ids_c)
    # lengths 11..14 share the bucket of 16, 12 included (exact in the
    # earlier loop, padded once the lengths around it vary); before, about
    # 50 per step
    assert max(per_step[-4:]) <= 8, per_step
