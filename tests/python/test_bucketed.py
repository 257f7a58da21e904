"""Bucketed programs (docs/bounded_dynamism.md): a tensor that grows by
concatenation keeps a padded storage, and the elementwise ops, comparisons,
selections and concatenations that read it compile once per bucket of its
size, not once per size. Every value, dtype, shape and stride equals CPU's;
every other reader sees the exact tensor."""

import pytest
import torch

import torch_tpu

# Bucketed programs run in every eager mode: fused eager records them, and
# the padded values wait in its graph like any other.


def _programs():
    # programs built: ops' (one per signature) and the paddings' (whatever
    # the executable cache already holds)
    return torch_tpu.counters()["programs_built"]


def _padded(t):
    return torch.ops.torch_tpu._storage_info(t).startswith("padded")


def _same(got, want, exact=True):
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset()
    if exact:
        assert torch.equal(got.cpu(), want), (got.cpu(), want)
    else:  # sums in another order
        torch.testing.assert_close(got.cpu(), want)


def _grow(dtype, steps, start=5, batch=3, seed=0):
    """(tpu, cpu) pairs of a sequence grown one column per step, as generate
    grows input_ids and the attention mask."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if dtype.is_floating_point:
            return torch.randn(shape, generator=g).to(dtype)
        return torch.randint(-50, 50, shape, generator=g).to(dtype)

    c = rand(batch, start)
    t = c.to("tpu")
    for _ in range(steps):
        n = rand(batch, 1)
        c = torch.cat([c, n], -1)
        t = torch.cat([t, n.to("tpu")], -1)
        yield t, c


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.bfloat16, torch.bool])
def test_a_growing_concatenation_is_padded_and_equals_cpu(dtype):
    padded = 0
    for t, c in _grow(dtype, 40):
        _same(t, c)
        padded += _padded(t)
    assert padded >= 35  # every result once the growth is seen


def test_ops_on_growing_tensors_compile_once_per_bucket_and_equal_cpu():
    ids_t, ids_c = torch.randint(0, 100, (2, 5)).to("tpu"), None
    ids_c = ids_t.cpu()
    mask_c = torch.ones(2, 5, dtype=torch.long)
    mask_t = mask_c.to("tpu")
    eos = torch.tensor([3, 5])
    counts = []
    for step in range(44):
        before = _programs()
        nxt = torch.randint(0, 100, (2, 1), generator=torch.Generator().manual_seed(step))
        results = []
        for ids, mask, dev in ((ids_t, mask_t, "tpu"), (ids_c, mask_c, "cpu")):
            ids = torch.cat([ids, nxt.to(dev)], -1)
            mask = torch.cat([mask, mask.new_ones((2, 1))], -1)
            hit = (ids == 7) | (mask == 0) | (ids > 90)
            results.append([
                ids, mask, hit, torch.where(hit, ids, -ids), ids.masked_fill(ids < 10, -1), ids * 3 - mask,
                torch.isin(ids, eos.to(dev)), torch.isin(ids[:, -1], eos.to(dev)), ids[:, -1:] + 1,
                ids[:, -2] * mask[:, -1], (mask == 1).logical_and(ids != 0), ~hit, torch.cat([mask, ids], 0),
                ids.neg(),
            ])
            if dev == "tpu":
                ids_t, mask_t = ids, mask
            else:
                ids_c, mask_c = ids, mask
        counts.append(_programs() - before)
        for got, want in zip(*results):
            _same(got, want)
    assert _padded(ids_t) and _padded(mask_t)
    # Sizes 20..31 share the bucket of 32, and 36..43 that of 64 (the checks'
    # .cpu() copies compile once per size: subtracted by comparing steps).
    within = counts[20:26] + counts[36:42]
    assert max(within) == min(within), counts


def test_other_readers_get_the_exact_tensor():
    seqs = list(_grow(torch.float32, 12))
    t, c = seqs[-1]
    assert _padded(t)
    # reductions, scans, matmuls, reshapes and transposes run on the exact value
    _same(t.sum(1), c.sum(1), exact=False)
    _same(t.cumsum(1), c.cumsum(1), exact=False)
    _same(t @ t.T, c @ c.T, exact=False)
    _same(t.reshape(-1), c.reshape(-1))
    _same(t.T.contiguous(), c.T.contiguous())
    _same(t[:, 1:-1].clone(), c[:, 1:-1].clone())
    assert torch.equal(torch.from_numpy(t.cpu().numpy()), c)
    # torch.compile and fused eager see it too
    f = torch.compile(lambda x: (x * 2).softmax(-1), backend="tpu")
    torch.testing.assert_close(f(t).cpu(), (c * 2).softmax(-1))
    with torch_tpu.execution_mode("fused"):
        y = t * 2 + 1
    _same(y, c * 2 + 1)


def test_writing_into_a_padded_tensor_makes_it_exact():
    t, c = list(_grow(torch.int64, 10))[-1]
    assert _padded(t)
    v = t[:, 2:4]
    t[:, 0] = 99
    c[:, 0] = 99
    assert not _padded(t)
    _same(t, c)
    _same(v, c[:, 2:4])
    t.add_(1)
    c.add_(1)
    _same(t + t, c + c)


def test_autograd_through_a_growing_concatenation():
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(2, 3, generator=g, requires_grad=True) for _ in range(12)]
    xt = [x.detach().to("tpu").requires_grad_() for x in xs]
    c, t = xs[0], xt[0]
    loss_c = loss_t = 0
    for k in range(1, 12):
        c = torch.cat([c, xs[k] * k], 1)
        t = torch.cat([t, xt[k] * k], 1)
        loss_c = loss_c + (c * 1.5).sin().sum()
        loss_t = loss_t + (t * 1.5).sin().sum()
    assert _padded(t)
    loss_c.backward()
    loss_t.backward()
    for a, b in zip(xt, xs):
        torch.testing.assert_close(a.grad.cpu(), b.grad)


def test_a_padded_size_one_dim_does_not_broadcast_wrongly():
    # A growing tensor and a tensor of one column along the varying dim.
    g = torch.Generator().manual_seed(2)
    a_c = torch.randn(2, 1, generator=g)
    a_t = a_c.to("tpu")
    for k in range(8):
        n = torch.randn(2, 1, generator=g)
        a_c, a_t = torch.cat([a_c, n], 1), torch.cat([a_t, n.to("tpu")], 1)
    one_t, one_c = a_t[:, :1].clone(), a_c[:, :1].clone()
    _same(a_t + one_t, a_c + one_c)
    _same(one_t * a_t, one_c * a_c)
    with pytest.raises(RuntimeError, match="must match the size"):
        a_t + a_t[:, :3]


def test_a_growing_kv_concatenation_along_a_middle_dim():
    g = torch.Generator().manual_seed(3)
    c = torch.randn(2, 2, 3, 4, generator=g)
    t = c.to("tpu")
    for _ in range(20):
        n = torch.randn(2, 2, 1, 4, generator=g)
        c, t = torch.cat([c, n], -2), torch.cat([t, n.to("tpu")], -2)
        _same(t, c)
        _same(t * 2 + 1, c * 2 + 1)
        _same(t[:, :, -1:] - 1, c[:, :, -1:] - 1)
    assert _padded(t)
    _same(t.transpose(1, 2).contiguous(), c.transpose(1, 2).contiguous())
    torch.testing.assert_close((t @ t.transpose(-1, -2)).softmax(-1).cpu(), (c @ c.transpose(-1, -2)).softmax(-1))


def test_attention_over_a_growing_kv_cache_compiles_once_per_bucket():
    """Grouped-query attention as Transformers' eager path runs it over a
    DynamicCache: the K and V concatenations, their expansion to every head,
    the scores, softmax and the weighted sum."""
    g = torch.Generator().manual_seed(5)
    b, kv, rep, d = 2, 2, 2, 16

    def attend(q, k, v):
        k = k[:, :, None].expand(b, kv, rep, k.shape[2], d).reshape(b, kv * rep, k.shape[2], d)
        v = v[:, :, None].expand(b, kv, rep, v.shape[2], d).reshape(b, kv * rep, v.shape[2], d)
        w = torch.nn.functional.softmax(torch.matmul(q, k.transpose(2, 3)) * 0.25, dim=-1, dtype=torch.float32)
        return torch.matmul(w, v), w

    kc, vc = torch.randn(b, kv, 3, d, generator=g), torch.randn(b, kv, 3, d, generator=g)
    kt, vt = kc.to("tpu"), vc.to("tpu")
    counts = []
    for step in range(30):
        before = _programs()
        nk, nv = torch.randn(b, kv, 1, d, generator=g), torch.randn(b, kv, 1, d, generator=g)
        q = torch.randn(b, kv * rep, 1, d, generator=g)
        kc, vc = torch.cat([kc, nk], 2), torch.cat([vc, nv], 2)
        kt, vt = torch.cat([kt, nk.to("tpu")], 2), torch.cat([vt, nv.to("tpu")], 2)
        (ot, wt), (oc, wc) = attend(q.to("tpu"), kt, vt), attend(q, kc, vc)
        counts.append(_programs() - before)
        _same(ot, oc, exact=False)
        _same(wt, wc, exact=False)
    assert _padded(kt) and _padded(wt)
    assert sum(counts[4:12]) == 0 and sum(counts[14:28]) == 0, counts  # (lengths 8-15 and 18-31)


def _hf_models():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    # A small Llama, random weights.
    cfg = transformers.LlamaConfig(vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                   bos_token_id=256, eos_token_id=256, pad_token_id=256)
    torch.manual_seed(0)
    cpu = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    tpu = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu.to("tpu")


def test_hf_generate_with_the_dynamic_cache_compiles_nothing_per_step():
    cpu, tpu = _hf_models()

    def generate(model, ids, n):
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                  do_sample=False, pad_token_id=256)

    ids = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(4))
    added = []
    for n in (40, 56, 12):
        before = _programs()
        out = generate(tpu, ids.to("tpu"), n)
        added.append(_programs() - before)
        assert torch.equal(out.cpu(), generate(cpu, ids, n))
    # after 40 steps (lengths up to 47: buckets up to 64), 56 steps (lengths
    # up to 63) compile almost nothing, and 12 steps nothing
    assert added[1] <= 5 and added[2] == 0, added


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_hf_generate_in_fused_eager_compiles_nothing_per_step(cache):
    # Fused eager runs each decode step as one program: its structure (the
    # ops recorded, at their bucket shapes) is the same for every step of a
    # bucket, so it is compiled once per bucket, not once per length.
    cpu, tpu = _hf_models()
    kw = dict(do_sample=False, pad_token_id=256)
    if cache == "static":
        kw["cache_implementation"] = "static"

    def generate(model, ids, n):
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, **kw)

    ids = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(4))
    graphs = []
    with torch_tpu.execution_mode("fused"):
        generate(tpu, ids.to("tpu"), 40)  # buckets up to 64
        for n in (56, 56, 56, 12, 12):
            before = torch_tpu.fused_stats()["graphs"]
            out = generate(tpu, ids.to("tpu"), n)
            graphs.append(torch_tpu.fused_stats()["graphs"] - before)
            assert torch.equal(out.cpu(), generate(cpu, ids, n))
    # 16 more steps than before (within the bucket) add only what a new
    # static cache size needs (its first generate records more than the
    # next) or the last step's program; repeats add nothing
    bound = 12 if cache == "static" else 2
    assert graphs[0] <= bound and graphs[2] == 0 and graphs[3] <= bound and graphs[4] == 0, graphs


def test_hf_generate_with_a_static_cache_compiles_nothing_per_step():
    cpu, tpu = _hf_models()

    def generate(model, ids, n):
        kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=256,
                  cache_implementation="static")
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), **kw)

    ids = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(4))
    generate(tpu, ids.to("tpu"), 8)  # warm
    added = []
    for n in (37, 53):  # prompt and output within the buckets up to 64
        before = _programs()
        out = generate(tpu, ids.to("tpu"), n)
        added.append(_programs() - before)
        assert torch.equal(out.cpu(), generate(cpu, ids, n))
    # 16 more steps compile nothing more: a new cache size builds the same
    # few programs (13 here), not one per step. (The count is of this
    # process's programs: another test in the same worker may have built
    # some of the first size's already, hence the slack of two.)
    assert added[1] <= min(added[0] + 2, 20), added


def test_a_concatenation_of_other_tensors_stays_exact():
    # A class token onto batches whose length varies is not a growing sequence.
    cls = torch.zeros(2, 1, 4)
    for n in (5, 9, 7, 12, 5):
        x = torch.randn(2, n, 4)
        t = torch.cat([cls.to("tpu"), x.to("tpu")], 1)
        assert not _padded(t)
        _same(t, torch.cat([cls, x], 1))


def test_copies_and_casts_of_growing_tensors_and_their_views():
    seqs = list(_grow(torch.int64, 14))
    t, c = seqs[-1]
    assert _padded(t)
    for got, want in [(t.float(), c.float()), (t.to(torch.bool), c.to(torch.bool)), (t.clone(), c.clone()),
                      (t.T.contiguous(), c.T.contiguous()), (t[:, -3:].double(), c[:, -3:].double()),
                      (t[:, None].expand(3, 2, t.shape[1]).clone(), c[:, None].expand(3, 2, c.shape[1]).clone()),
                      (torch.where(t > 0, t, torch.zeros(3, 1, dtype=torch.long).to("tpu")),
                       torch.where(c > 0, c, torch.zeros(3, 1, dtype=torch.long)))]:
        _same(got, want)
    t[:, -1:] += 5
    c[:, -1:] += 5
    _same(t, c)


def _grown(shape, dim, length, seed):
    """(tpu, cpu) of a tensor of `shape` grown along `dim` to `length`."""
    g = torch.Generator().manual_seed(seed)
    s = list(shape)
    s[dim] = 2
    c = torch.randn(s, generator=g)
    t = c.to("tpu")
    one = list(shape)
    one[dim] = 1
    while c.shape[dim] < length:
        n = torch.randn(one, generator=g)
        c, t = torch.cat([c, n], dim), torch.cat([t, n.to("tpu")], dim)
    assert _padded(t)
    return t, c


@pytest.mark.parametrize("length", [13, 20])
def test_views_of_padded_tensors_equal_cpu(length):
    # Views that range over one dim each (select, narrow, transpose, expand,
    # unsqueeze), views that merge whole static dims (a reshape of them) and
    # views that merge the varying dim (read by a gather), under ops, copies
    # and batched matmuls.
    x, xc = _grown((2, 3, 8, 5), 2, length, 0)
    y, yc = _grown((2, 3, 8, 5), 2, length, 1)
    z, zc = _grown((3, 8, 4), 1, length, 2)
    L = length
    cases = [
        (lambda a, b, c: a[:, :, -1] * 2, False),
        (lambda a, b, c: a.narrow(2, 1, 3) + 1, False),
        (lambda a, b, c: a.transpose(1, 3) - b.transpose(1, 3), False),
        (lambda a, b, c: a.transpose(2, 3).contiguous(), False),
        (lambda a, b, c: a[:, :, None].expand(2, 3, 2, L, 5).reshape(2, 6, L, 5), False),
        (lambda a, b, c: a.unsqueeze(0).expand(2, 2, 3, L, 5) * 1, False),
        (lambda a, b, c: a.transpose(2, 3).reshape(6, 5, L) * 2, False),
        (lambda a, b, c: a[1:].reshape(3, L, 5) + 1, False),
        (lambda a, b, c: a[:, :, -1].reshape(6, 5) + 1, False),
        (lambda a, b, c: torch.bmm(a.reshape(6, L, 5), b.transpose(2, 3).reshape(6, 5, L)), True),
        (lambda a, b, c: c.reshape(3 * L, 4) + 1, False),
        (lambda a, b, c: c[:, None].expand(3, 2, L, 4).reshape(6, L, 4) * 1, False),
        (lambda a, b, c: (c.transpose(0, 1)[-2:] * 3).softmax(1), True),
    ]
    for f, close in cases:
        _same(f(x, y, z), f(xc, yc, zc), exact=not close)


def test_a_growing_arange_is_padded_and_equals_cpu():
    # generate's masks compare key positions, torch.arange(kv_length), that
    # grow by one each step
    counts = []
    keep = torch.tensor([[3], [11]])

    def ops(n, dev):
        a = torch.arange(n, device=dev)
        mask = a[None, :] < keep.to(dev)  # a padding mask
        return [a, (a + 3) <= n - 2, a[None, None, :] * 2, a.sum(), torch.arange(n, dtype=torch.int32, device=dev),
                mask, mask.sum(1), torch.where(mask, 0.0, float("-inf"))]

    for n in range(5, 40):
        before = _programs()
        got = ops(n, "tpu")
        counts.append(_programs() - before)  # (the ops' programs, not the checks')
        for g, w in zip(got, ops(n, "cpu")):
            _same(g, w)
    assert _padded(got[0])
    assert counts[21:27] == [0] * 6, counts  # lengths 26..31: the bucket of 32, built at 17

def test_comparisons_with_new_integer_values_reuse_their_program():
    # x == 3 and x == 4 share a program, as x == 3.5 and x == 4.5 do; a
    # lowering that reads an integer Scalar (pow's exponent, arange's end)
    # still gets a program per value, and every value is right
    x_c = torch.arange(-6, 6).reshape(3, 4)
    x = x_c.to("tpu")
    built = []
    for v in range(-3, 5):
        before = _programs()
        for f in (lambda t: t == v, lambda t: t < v, lambda t: t != v, lambda t: t.masked_fill(t > v, v),
                  lambda t: torch.full_like(t, v), lambda t: t.clamp(max=v)):
            _same(f(x), f(x_c))
        built.append(_programs() - before)
        _same(x ** abs(v), x_c ** abs(v))
        _same(torch.arange(v + 4, device="tpu"), torch.arange(v + 4))
    assert built[2:] == [0] * len(built[2:]), built


def test_attention_with_a_mask_over_a_growing_kv_cache_equals_cpu():
    # scaled_dot_product_attention with a padding mask (generate with left
    # padding) reads the growing cache as it is
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(6)
    k_c = torch.randn(2, 4, 3, 8, generator=g)
    v_c = torch.randn(2, 4, 3, 8, generator=g)
    k, v = k_c.to("tpu"), v_c.to("tpu")
    keep_c = torch.ones(2, 3, dtype=torch.bool)
    keep_c[0, 0] = False
    keep = keep_c.to("tpu")
    counts = []
    for step in range(24):
        q_c = torch.randn(2, 4, 1, 8, generator=g)
        nk, nv = torch.randn(2, 4, 1, 8, generator=g), torch.randn(2, 4, 1, 8, generator=g)
        k_c, v_c = torch.cat([k_c, nk], 2), torch.cat([v_c, nv], 2)
        k, v = torch.cat([k, nk.to("tpu")], 2), torch.cat([v, nv.to("tpu")], 2)
        ones = torch.ones(2, 1, dtype=torch.bool)
        keep_c, keep = torch.cat([keep_c, ones], 1), torch.cat([keep, ones.to("tpu")], 1)
        q = q_c.to("tpu")
        before = _programs()
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        counts.append(_programs() - before)  # (the attention's programs, not the checks')
        want = F.scaled_dot_product_attention(q_c, k_c, v_c, attn_mask=keep_c[:, None, None, :])
        _same(got, want, exact=False)
    assert _padded(k) and _padded(keep)
    assert counts[14:21] == [0] * 7, counts  # lengths 18..24: the bucket of 32, built at 16


def test_advanced_indexing_of_growing_tensors_equals_cpu_and_compiles_once_per_bucket():
    # generate's padding mask reads attention_mask[batch_idx, kv_idx]: an
    # index along the growing dim, by a growing arange. Negative indices wrap
    # by the actual size (not the bucket's), in both operands' roles.
    g = torch.Generator().manual_seed(7)
    b = 3
    mask_c = torch.randint(0, 2, (b, 4), generator=g)
    x_c = torch.randn(b, 4, 5, generator=g)
    mask, x = mask_c.to("tpu"), x_c.to("tpu")
    rows = torch.tensor([2, 0, -1])
    counts = []
    for n in range(5, 36):
        col = torch.randint(0, 2, (b, 1), generator=g)
        mask_c, mask = torch.cat([mask_c, col], 1), torch.cat([mask, col.to("tpu")], 1)
        step = torch.randn(b, 1, 5, generator=g)
        x_c, x = torch.cat([x_c, step], 1), torch.cat([x, step.to("tpu")], 1)

        def ops(mask, x, dev):
            kv = torch.arange(n, device=dev)
            bi = torch.arange(b, device=dev)[:, None, None, None]
            return [mask[bi, kv[None, None, None, :]],          # HF's padding_mask_function
                    mask[:, kv - n],                            # negative, wrapped by n
                    mask[rows.to(dev)],                         # along the static dim
                    x[:, n - 1 - kv],                           # a middle dim, reversed
                    x[rows.to(dev)][:, torch.tensor([0, -1, -2], device=dev)],
                    mask[bi[:, 0, 0, 0, None], kv[None, :]].bool() & (kv[None, :] >= 1)]

        before = _programs()
        got = ops(mask, x, "tpu")
        counts.append(_programs() - before)  # (the ops' programs, not the reads')
        for t, c in zip(got, ops(mask_c, x_c, "cpu")):
            _same(t, c)
    assert _padded(got[0]) and _padded(got[3])
    assert counts[13:26] == [0] * 13, counts  # lengths 18..30: the bucket of 32, built at 17


def test_an_index_out_of_range_of_a_padded_tensor_names_its_actual_size():
    # An index past the actual size but inside the bucket is out of range,
    # as on CPU, and the message names the size the tensor has.
    mask = torch.ones(2, 4, dtype=torch.long, device="tpu")
    for _ in range(16):
        mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long, device="tpu")], 1)
    assert _padded(mask) and mask.shape[1] == 20
    for bad in (20, 25, -21):
        with pytest.raises(IndexError, match=r"index out of bounds for dimension 1 with size 20.*Long\[2, 20\]"):
            mask[:, torch.arange(3, device="tpu") + bad].cpu()
        with pytest.raises(IndexError, match=r"with size 20"):
            mask[torch.arange(2, device="tpu")[:, None], torch.arange(3, device="tpu")[None, :] + bad].cpu()
    _same(mask[:, torch.tensor([-20, 19], device="tpu")], torch.ones(2, 2, dtype=torch.long))


def test_hf_generate_with_left_padding_compiles_nothing_per_step():
    # A batch of prompts of different lengths: generate builds its padding
    # mask every step from the growing attention mask.
    cpu, tpu = _hf_models()
    ids = torch.randint(1, 256, (3, 9), generator=torch.Generator().manual_seed(8))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    mask[2, :1] = 0
    ids = ids * mask

    def generate(model, dev, n):
        with torch.no_grad():
            return model.generate(ids.to(dev), attention_mask=mask.to(dev), max_new_tokens=n, min_new_tokens=n,
                                  do_sample=False, pad_token_id=0).cpu()

    added = []
    for n in (40, 52, 12):
        before = _programs()
        out = generate(tpu, "tpu", n)
        added.append(_programs() - before)
        assert torch.equal(out, generate(cpu, "cpu", n))
    # lengths up to 48, then up to 60: the same buckets (the second prefill
    # may build a few: its positions are padded, its token ids, a length
    # seen before, are not)
    assert added[1] <= 8 and added[2] == 0, added


def test_gather_and_scatter_by_growing_indices_equal_cpu():
    # A repetition penalty gathers the scores of the tokens so far (a padded
    # index), scales them and scatters them back; the padding of the index
    # (whatever values it holds) must neither be gathered into the result
    # nor scattered over real scores.
    g = torch.Generator().manual_seed(9)
    vocab, b = 50, 3
    ids_c = torch.randint(0, vocab, (b, 4), generator=g)
    x_c = torch.randn(b, 4, generator=g)
    ids, x = ids_c.to("tpu"), x_c.to("tpu")
    rows = torch.tensor([[0, 1], [2, 3], [1, 0]])
    counts = []
    for n in range(5, 36):
        nxt, nx = torch.randint(0, vocab, (b, 1), generator=g), torch.randn(b, 1, generator=g)
        ids_c, ids = torch.cat([ids_c, nxt], 1), torch.cat([ids, nxt.to("tpu")], 1)
        x_c, x = torch.cat([x_c, nx], 1), torch.cat([x, nx.to("tpu")], 1)
        scores_c = torch.randn(b, vocab, generator=g)

        def ops(ids, x, scores, dev):
            shifted = torch.where(ids + 5 >= vocab, ids + 5 - vocab, ids + 5)  # padding 5, not 0
            picked = torch.gather(scores, 1, shifted.clamp(0, vocab - 1))
            scaled = torch.where(picked < 0, picked * 1.3, picked / 1.3)
            return [picked, scaled, scores.scatter(1, shifted, scaled), scores.scatter(1, ids, 7.0),
                    scores.scatter(1, ids, x),                # a padded source
                    torch.gather(x, 1, rows.to(dev)),         # from a padded tensor
                    x.index_select(0, torch.tensor([2, 0], device=dev))]

        before = _programs()
        got = ops(ids, x, scores_c.to("tpu"), "tpu")
        counts.append(_programs() - before)
        for t, c in zip(got, ops(ids_c, x_c, scores_c, "cpu")):
            _same(t, c)
    assert _padded(got[0]) and _padded(got[6])
    assert counts[13:26] == [0] * 13, counts  # lengths 18..30: the bucket of 32, built at 17
    with pytest.raises(RuntimeError, match=r"gather\(\): index out of bounds for dimension 1 with size 35"):
        torch.gather(x, 1, torch.full((b, 2), 40, device="tpu")).cpu()


@pytest.mark.parametrize("kw", [dict(repetition_penalty=1.3), dict(num_beams=2)], ids=["penalty", "beams"])
def test_hf_generate_with_logits_processors_and_beams_compiles_little_per_step(kw):
    # A repetition penalty (gather and scatter by the tokens so far) and a
    # beam search (which reorders its KV cache every step) stay bucketed.
    cpu, tpu = _hf_models()
    ids = torch.randint(1, 256, (2, 7), generator=torch.Generator().manual_seed(10))

    def generate(model, dev, n):
        with torch.no_grad():
            return model.generate(ids.to(dev), attention_mask=torch.ones_like(ids).to(dev), max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False, pad_token_id=0, **kw).cpu()

    added = []
    for n in (40, 56):
        before = _programs()
        out = generate(tpu, "tpu", n)
        added.append(_programs() - before)
        assert torch.equal(out, generate(cpu, "cpu", n))
    # 16 more steps within the buckets up to 64 (before: 8 programs per step
    # with the penalty, 11 with beams). A beam search also sizes its
    # bookkeeping by max_length: about 30 programs once per generate.
    assert added[1] <= (40 if "num_beams" in kw else 16), added


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_integer_pow_of_growing_tensors_with_large_exponents_equals_cpu(dtype):
    # Exponents from 64 on take 64 squaring steps; at bucket shapes (bounded
    # dynamic dims) such a chain once never finished compiling (XLA walked
    # it path by path), which hung the OpInfo subset in CI.
    for i, (t, c) in enumerate(_grow(dtype, 20, start=3)):
        if i < 16:
            continue
        assert _padded(t)
        e_c = (c.abs() * 7 + torch.arange(c.shape[-1], dtype=dtype)).abs()  # 0 .. >64 (wraps in int8)
        e_t = e_c.to("tpu")
        _same(torch.pow(t, e_t), torch.pow(c, e_c))
        _same(t ** 77, c ** 77)
        _same(torch.pow(3, e_t), torch.pow(3, e_c))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.bool])
def test_staging_buffer_copies_and_fills_compile_once_per_window(dtype):
    """A step's worth of host data copied into the front of a persistent
    buffer (vLLM's copy_to_gpu(n), pinned batch buffers), into a run in its
    middle or end, into the leading rows of a 2-d table, and the fill of
    its tail past the step's count: CPU's values, and one program per
    power-of-two window (and buffer size), not one per length or offset."""
    g = torch.Generator().manual_seed(1)

    def rand(*shape):
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        return torch.randint(-50, 50, shape, generator=g).to(dtype)

    flat_c, table_c = rand(300), rand(24, 8)
    flat, table = flat_c.to("tpu"), table_c.to("tpu")
    counts = []
    for step, n in enumerate([3, 17, 5, 200, 33, 9, 120, 64, 1, 250, 31, 77]):
        before = _programs()
        src = rand(n)
        mid = (300 - n) // 3
        for dst_c, dst in ((flat_c[:n], flat[:n]), (flat_c[-n:], flat[-n:]), (flat_c[mid:mid + n], flat[mid:mid + n])):
            dst_c.copy_(src)
            dst.copy_(src, non_blocking=step % 2 == 1)
        flat_c[n:].fill_(step % 2)
        flat[n:].fill_(step % 2)
        rows = n % 20 + 1
        block = rand(rows, 8)
        table_c[:rows] = block
        table[:rows] = block
        table_c[rows:].zero_()
        table[rows:].zero_()
        counts.append(_programs() - before)
        assert torch.equal(flat.cpu(), flat_c), n
        assert torch.equal(table.cpu(), table_c), rows
    # windows of 16 .. 256 elements (and 300) for the flat buffer and of
    # 16 .. 128 (and 192) for the table, a program each for copies and for
    # fills: at most 2 * (6 + 5), built as they first appear (60 writes of
    # 40 lengths and offsets), then none
    assert sum(counts) <= 22, counts
    assert counts[-2:] == [0, 0], counts  # (their windows all met before)


def _engine_step(bufs, n, r):
    """A serving engine's input preparation (vLLM's _prepare_inputs): runs of
    persistent buffers read and written at the step's token count n and
    request count r."""
    positions, seq_lens, num_computed, req_indices, query_pos, qsl, hidden = bufs
    positions[:n] = num_computed[req_indices[:n]].to(torch.int64) + query_pos[:n]
    seq_lens[:r] = num_computed[:r] + qsl[:r]
    seq_lens[r:].fill_(0)
    logits_indices = qsl[: r + 1][1:] - 1
    rows = hidden[logits_indices]
    return (rows @ hidden[:8].T).argmax(-1).to(torch.int32)


def test_runs_of_persistent_buffers_read_at_changing_lengths_compile_once_per_bucket():
    """Ops reading a run of whole rows of a persistent buffer whose length
    changes from step to step (positions[:n], seq_lens[:r],
    query_start_loc[1:r + 1]), and copies of their results into such runs:
    CPU's values everywhere in the buffers (what lies past a run is never
    read or written), and no program for a new length once its buckets have
    been met. A run read at one length stays exact."""
    g = torch.Generator().manual_seed(0)
    # (the request buffers hold 14: a request count's bucket of 16 passes
    # their end, as max_num_seqs below a power of two makes it)
    host = [torch.full((256,), -7, dtype=torch.int64), torch.full((14,), 99, dtype=torch.int32),
            torch.randint(0, 100, (14,), dtype=torch.int32, generator=g),
            torch.randint(0, 14, (256,), generator=g), torch.randint(0, 50, (256,), generator=g),
            torch.randint(1, 200, (15,), dtype=torch.int32, generator=g), torch.randn(256, 8, generator=g)]
    dev = [t.to("tpu") for t in host]
    built = []
    steps = [(30, 5), (41, 7), (50, 9), (60, 10), (33, 6), (47, 11), (58, 13), (35, 4), (62, 12)]
    for n, r in steps:  # (tokens in bucket 64, requests in bucket 16)
        before = _programs()
        tokens = _engine_step(dev, n, r)
        built.append(_programs() - before)
        want = _engine_step(host, n, r)
        assert torch.equal(tokens.cpu(), want), (n, r)
        for d, h in zip(dev, host):
            assert torch.equal(d.cpu(), h), (n, r)
    assert built[3:] == [0] * (len(steps) - 3), built
    # a run of a constant length is read exact, as before
    fixed = dev[4][:40] + 1
    assert not torch.ops.torch_tpu._storage_info(fixed).startswith("padded")
