"""Jagged nested tensors (torch.nested, layout=torch.jagged) on tpu equal
CPU's: construction from values and offsets or from a list, the padded
conversions both ways, elementwise ops, reductions over the ragged dim,
matmul and Linear with a dense weight, softmax over the ragged dim, and the
gradients of each, as an embedding-bag pooling and a sequence model use
them (issue 48, item 3)."""

import pytest
import torch

import torch_tpu  # noqa: F401

LENGTHS = [3, 0, 4, 1, 6]


def _values(total, *rest, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (total, *rest), generator=g).bool()
    if not dtype.is_floating_point:
        return torch.randint(-20, 20, (total, *rest), generator=g).to(dtype)
    return torch.randn(total, *rest, generator=g).to(dtype)


def _offsets(lengths):
    return torch.cat([torch.zeros(1, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64).cumsum(0)])


def _pair(lengths=LENGTHS, rest=(4,), dtype=torch.float32, requires_grad=False, seed=0):
    """(tpu, cpu) jagged tensors of the same values and offsets."""
    off = _offsets(lengths)
    v = _values(int(off[-1]), *rest, dtype=dtype, seed=seed)
    vc = v.clone().requires_grad_(requires_grad)
    vt = v.to("tpu").requires_grad_(requires_grad)
    return (torch.nested.nested_tensor_from_jagged(vt, off.to("tpu")),
            torch.nested.nested_tensor_from_jagged(vc, off)), (vt, vc)


def _same(got, want, exact=False):
    if got.is_nested:
        assert want.is_nested and got.layout == torch.jagged
        assert torch.equal(got.offsets().cpu(), want.offsets())
        got, want = got.values(), want.values()
    assert got.device.type == "tpu", got.device
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if exact:
        assert torch.equal(got.cpu(), want), (got.cpu(), want)
    else:
        torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("rest", [(), (4,), (2, 3)], ids=["1d", "2d", "3d"])
def test_to_padded_tensor_equals_cpu(dtype, rest):
    (t, c), _ = _pair(rest=rest, dtype=dtype)
    assert t.device.type == "tpu" and t.layout == torch.jagged and t.shape[0] == c.shape[0]
    pad = True if dtype == torch.bool else (-3 if not dtype.is_floating_point else -1.5)
    _same(t.to_padded_tensor(pad), c.to_padded_tensor(pad), exact=True)
    # cut to a shorter length, and padded past the longest row
    for n in (2, 9):
        _same(t.to_padded_tensor(pad, output_size=(len(LENGTHS), n) + rest),
              c.to_padded_tensor(pad, output_size=(len(LENGTHS), n) + rest), exact=True)


def test_construction_from_a_list_and_back_from_padded():
    rows = [_values(n, 4, seed=n) for n in LENGTHS]
    t = torch.nested.nested_tensor([r.to("tpu") for r in rows], layout=torch.jagged)
    c = torch.nested.nested_tensor(rows, layout=torch.jagged)
    _same(t, c, exact=True)
    t2 = torch.nested.as_nested_tensor([r.to("tpu") for r in rows], layout=torch.jagged, device="tpu")
    _same(t2, c, exact=True)
    for got, want in zip(t.unbind(), c.unbind()):
        _same(got, want, exact=True)
    # padded -> jagged: values at each row's first L_b positions
    padded_c = c.to_padded_tensor(0.0) + 1
    padded_t = t.to_padded_tensor(0.0) + 1
    back_c = torch.nested.nested_tensor_from_jagged(
        torch.ops.aten._padded_dense_to_jagged_forward(padded_c, [c.offsets()]), c.offsets())
    back_t = torch.nested.nested_tensor_from_jagged(
        torch.ops.aten._padded_dense_to_jagged_forward(padded_t, [t.offsets()]), t.offsets())
    _same(back_t, back_c, exact=True)


def test_padded_to_jagged_of_rows_longer_than_the_padding_is_refused():
    off = _offsets([2, 5, 1])
    dense = _values(3, 3, 2)  # a row of length 5 in a padded length of 3
    with pytest.raises(RuntimeError, match="batch item of length 5"):
        torch.ops.aten._padded_dense_to_jagged_forward(dense, [off], 8)
    with pytest.raises(RuntimeError, match="_padded_dense_to_jagged_forward.*longer than the max length 3"):
        torch.ops.aten._padded_dense_to_jagged_forward(dense.to("tpu"), [off.to("tpu")], 8)
        torch.tpu.synchronize()  # a device-side check, raised at the next synchronization
    ok = torch.ops.aten._padded_dense_to_jagged_forward(dense.to("tpu"), [_offsets([2, 3, 1]).to("tpu")])
    _same(ok, torch.ops.aten._padded_dense_to_jagged_forward(dense, [_offsets([2, 3, 1])]), exact=True)


def test_empty_rows_and_an_all_empty_batch():
    (t, c), _ = _pair(lengths=[0, 0, 0])
    _same(t.to_padded_tensor(7.0), c.to_padded_tensor(7.0), exact=True)
    (t, c), _ = _pair(lengths=[0, 2, 0])
    _same(t.to_padded_tensor(7.0), c.to_padded_tensor(7.0), exact=True)
    _same(t.sum(dim=1), c.sum(dim=1))


def test_elementwise_ops_equal_cpu():
    (t, c), _ = _pair()
    t2 = torch.nested.nested_tensor_from_jagged(_values(t.values().shape[0], 4, seed=1).to("tpu"), t.offsets())
    c2 = torch.nested.nested_tensor_from_jagged(t2.values().cpu(), c.offsets())
    for f in (lambda x, y: x + y, lambda x, y: x * y - 2, lambda x, y: torch.sin(x) + y.relu(),
              lambda x, y: torch.where(x > 0, x, y), lambda x, y: (x / 3).exp().tanh()):
        _same(f(t, t2), f(c, c2))
    bias = torch.randn(4)
    _same(t + bias.to("tpu"), c + bias)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax"])
def test_reductions_over_the_ragged_dim_equal_cpu(reduce):
    (t, c), _ = _pair(lengths=[3, 2, 4, 1, 6])  # (mean and amax of an empty row are NaN / refused on CPU)
    _same(getattr(t, reduce)(dim=1), getattr(c, reduce)(dim=1))
    _same(getattr(t, reduce)(dim=-1), getattr(c, reduce)(dim=-1))


def test_what_pytorch_cannot_differentiate_raises_as_on_cpu():
    # torch 2.13 has no jagged _nested_sum_backward, and mean over the ragged
    # dim fails in its backward too: the same errors as on CPU, never a crash
    # or a wrong gradient (pool through to_padded_tensor instead, as below).
    for reduce, dim in (("sum", 1), ("sum", -1), ("mean", 1)):
        errors = []
        for dev in ("cpu", "tpu"):
            (t, c), _ = _pair(lengths=[3, 2, 4], requires_grad=True)
            nt = t if dev == "tpu" else c
            with pytest.raises((NotImplementedError, RuntimeError)) as e:
                getattr(nt, reduce)(dim=dim).sum().backward()
            errors.append(type(e.value))
        assert errors[0] is errors[1], (reduce, dim, errors)


def test_softmax_over_the_ragged_dim_equals_cpu():
    (t, c), _ = _pair(lengths=[3, 2, 4, 1, 6])
    _same(torch.softmax(t, dim=1), torch.softmax(c, dim=1))
    _same(torch.softmax(t, dim=-1), torch.softmax(c, dim=-1))


def test_matmul_and_linear_with_a_dense_weight_equal_cpu():
    (t, c), _ = _pair()
    w = torch.randn(4, 5)
    _same(torch.matmul(t, w.to("tpu")), torch.matmul(c, w))
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 6)
    lin_t = torch.nn.Linear(4, 6).to("tpu")
    lin_t.load_state_dict(lin.state_dict())
    _same(lin_t(t), lin(c))


def test_gradients_through_padding_reductions_and_matmul_equal_cpu():
    torch.manual_seed(0)
    w = torch.randn(4, 5)
    wt, wc = w.to("tpu").requires_grad_(), w.clone().requires_grad_()
    (t, c), (vt, vc) = _pair(requires_grad=True)
    outs = []
    for nt, weight in ((t, wt), (c, wc)):
        h = torch.matmul(nt, weight).relu()
        loss = ((h.to_padded_tensor(0.0).sum(1) ** 2).sum() + (nt.to_padded_tensor(0.0) ** 3).sum()
                + torch.softmax(nt, dim=-1).amax(dim=1).sum() + nt.mean(dim=-1).values().sum())
        loss.backward()
        outs.append(loss)
    _same(outs[0], outs[1])
    _same(vt.grad, vc.grad)
    _same(wt.grad, wc.grad)


def test_softmax_over_the_ragged_dim_backward_equals_cpu():
    (t, c), (vt, vc) = _pair(lengths=[3, 2, 4, 1, 6], requires_grad=True)
    g = _values(16, 4, seed=5)
    for nt, gg in ((t, g.to("tpu")), (c, g)):
        (torch.softmax(nt, dim=1).values() * gg).sum().backward()
    _same(vt.grad, vc.grad)


def test_embedding_bag_pooling_and_a_sequence_model_train_as_on_cpu():
    """Mean pooling of jagged id lists through an embedding table (what an
    embedding bag computes; through to_padded_tensor, since PyTorch cannot
    differentiate a jagged sum), and a sequence model (Linear, GELU, softmax
    attention pooling over the ragged dim) trained 3 steps with SGD: losses
    and parameters equal CPU's."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(50, 8)
    proj = torch.nn.Linear(8, 8)
    score = torch.nn.Linear(8, 1)
    head = torch.nn.Linear(16, 1)
    models = {}
    for dev in ("cpu", "tpu"):
        mods = [emb, proj, score, head]
        copies = [type(m)(*((m.num_embeddings, m.embedding_dim) if isinstance(m, torch.nn.Embedding)
                            else (m.in_features, m.out_features))) for m in mods]
        for cp, m in zip(copies, mods):
            cp.load_state_dict(m.state_dict())
        models[dev] = torch.nn.ModuleList(copies).to(dev)
    g = torch.Generator().manual_seed(1)
    losses = {"cpu": [], "tpu": []}
    for step in range(3):
        lengths = torch.randint(1, 6, (4,), generator=g).tolist()
        off = _offsets(lengths)
        ids = torch.randint(0, 50, (int(off[-1]),), generator=g)
        target = torch.randn(4, 1, generator=g)
        for dev, (e, p, s, h) in models.items():
            opt = torch.optim.SGD(models[dev].parameters(), lr=0.1)
            nt = torch.nested.nested_tensor_from_jagged(e(ids.to(dev)), off.to(dev))
            lengths_d = (nt.offsets().diff()).unsqueeze(1).to(torch.float32)
            pooled = nt.to_padded_tensor(0.0).sum(1) / lengths_d      # (B, 8): an embedding bag's mean
            x = torch.nn.functional.gelu(p(nt))
            attn = torch.softmax(s(x), dim=1)                         # over each row's positions
            seq = (attn * x).to_padded_tensor(0.0).sum(1)             # (B, 8)
            loss = ((h(torch.cat([pooled, seq], -1)) - target.to(dev)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[dev].append(loss.item())
    torch.testing.assert_close(losses["tpu"], losses["cpu"])
    for pt, pc in zip(models["tpu"].parameters(), models["cpu"].parameters()):
        torch.testing.assert_close(pt.detach().cpu(), pc.detach())


def test_bad_offsets_name_the_op_and_shapes():
    v = torch.randn(6, 2, device="tpu")
    with pytest.raises(RuntimeError, match="_padded_dense_to_jagged_forward.*batch"):
        torch.ops.aten._padded_dense_to_jagged_forward(torch.zeros(3, 4, 2, device="tpu"),
                                                       [torch.tensor([0, 2, 6], device="tpu")], 6)
    with pytest.raises(RuntimeError, match="_jagged_to_padded_dense_forward.*one jagged"):
        torch.ops.aten._jagged_to_padded_dense_forward(v, [torch.tensor([0, 6], device="tpu")] * 2, [6, 6])


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_attention_over_jagged_sequences_equals_cpu(cross):
    """F.scaled_dot_product_attention over (B, H, j, D) jagged tensors (the
    usual q.unflatten(-1, (H, D)).transpose(1, 2)): CPU's values and
    gradients, an empty sequence included, keys of other lengths than the
    queries; causal attention (CPU refuses it; CUDA's flash kernels take it)
    equals padded causal attention per sequence."""
    (tq, cq), (vtq, vcq) = _pair(rest=(8,), dtype=torch.float64, requires_grad=True)
    (tk, ck), (vtk, vck) = _pair(lengths=[2, 3, 4, 5, 6], rest=(8,), dtype=torch.float64, requires_grad=True,
                                 seed=1) if cross else ((tq, cq), (vtq, vcq))
    weight = torch.randn(int(_offsets(LENGTHS)[-1]), 2, 4, dtype=torch.float64)
    for nq, nk, w in ((tq, tk, weight.to("tpu")), (cq, ck, weight)):
        q, k = (x.unflatten(-1, (2, 4)).transpose(1, 2) for x in (nq, nk))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, k)
        assert out.is_nested and out.shape[1] == 2
        (out.transpose(1, 2).values() * w).sum().backward()
    got, want = (torch.nn.functional.scaled_dot_product_attention(
        *[x.unflatten(-1, (2, 4)).transpose(1, 2) for x in (nq, nk, nk)]).transpose(1, 2).values()
        for nq, nk in ((tq, tk), (cq, ck)))
    _same(got, want)
    _same(vtq.grad, vcq.grad)
    _same(vtk.grad, vck.grad)
    # causal: each sequence against its own padded causal attention
    q = tq.unflatten(-1, (2, 4)).transpose(1, 2)
    got = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2)
    for i, seq in enumerate(cq.unbind()):
        if seq.shape[0]:
            s = seq.detach().unflatten(-1, (2, 4)).transpose(0, 1)
            ref = torch.nn.functional.scaled_dot_product_attention(s, s, s, is_causal=True).transpose(0, 1)
            torch.testing.assert_close(got.unbind()[i].cpu(), ref)
