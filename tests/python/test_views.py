"""Views alias their storage: writes through any view are seen by all, and
sizes, strides, offsets and data_ptr relations match CPU."""

import pytest
import torch

from conftest import assert_same, make


def pair(shape=(4, 6), dtype=torch.float32):
    x = make(shape, dtype)
    return x, x.to("tpu")


VIEWS = [
    ("view", lambda t: t.view(6, 4)),
    ("reshape", lambda t: t.reshape(2, 12)),
    ("permute", lambda t: t.permute(1, 0)),
    ("transpose", lambda t: t.transpose(0, 1)),
    ("t", lambda t: t.t()),
    ("expand", lambda t: t[:1].expand(3, 6)),
    ("squeeze", lambda t: t[:1].squeeze(0)),
    ("unsqueeze", lambda t: t.unsqueeze(1)),
    ("slice", lambda t: t[1:3, ::2]),
    ("select", lambda t: t[2]),
    ("narrow", lambda t: t.narrow(1, 2, 3)),
    ("as_strided", lambda t: t.as_strided((3, 3), (7, 1), 2)),
    ("as_strided_overlap", lambda t: t.as_strided((4, 3), (1, 1), 5)),
    ("diagonal", lambda t: t.diagonal()),
    ("unfold", lambda t: t.unfold(1, 3, 2)),
    ("view_dtype", lambda t: t.view(torch.int32)),
]


@pytest.mark.parametrize("name,fn", VIEWS, ids=[v[0] for v in VIEWS])
def test_view_metadata_and_values(name, fn):
    x, t = pair()
    vx, vt = fn(x), fn(t)
    assert vt.shape == vx.shape
    assert vt.stride() == vx.stride()
    assert vt.storage_offset() == vx.storage_offset()
    assert vt.data_ptr() - t.data_ptr() == vx.data_ptr() - x.data_ptr()
    assert vt.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    assert torch.equal(vt.cpu(), vx)


WRITABLE = [v for v in VIEWS if v[0] not in ("expand", "as_strided_overlap", "unfold")]


@pytest.mark.parametrize("name,fn", WRITABLE, ids=[v[0] for v in WRITABLE])
def test_in_place_through_view_is_seen_by_base(name, fn):
    x, t = pair()
    fn(x).mul_(2).add_(1) if name != "view_dtype" else fn(x).bitwise_xor_(0x55)
    fn(t).mul_(2).add_(1) if name != "view_dtype" else fn(t).bitwise_xor_(0x55)
    assert torch.equal(t.cpu(), x)


def test_setitem_and_copy_into_views():
    x, t = pair((5, 5))
    for target in (lambda a: a[1], lambda a: a[:, 2], lambda a: a[1:4, 1:4], lambda a: a.t()[0],
                   lambda a: a.diagonal()):
        target(x).copy_(torch.arange(float(target(x).numel())).reshape(target(x).shape))
        target(t).copy_(torch.arange(float(target(t).numel())).reshape(target(t).shape))
    assert torch.equal(t.cpu(), x)
    x[0, 0] = 42
    t[0, 0] = 42
    x[2:, 3] = torch.tensor([7.0, 8.0, 9.0])
    t[2:, 3] = torch.tensor([7.0, 8.0, 9.0], device="tpu")
    x[x > 5] = -1
    t[t > 5] = -1
    assert torch.equal(t.cpu(), x)


def test_out_argument_into_view():
    x, t = pair((4, 4))
    torch.add(x[1], 10, out=x[2])
    torch.add(t[1], 10, out=t[2])
    torch.mul(x.t()[0], x.t()[1], out=x.t()[3])
    torch.mul(t.t()[0], t.t()[1], out=t.t()[3])
    assert torch.equal(t.cpu(), x)


def test_all_views_see_a_write():
    x, t = pair((3, 4))
    views_t = [t[0], t.t(), t.view(12), t[:, 1:3]]
    views_x = [x[0], x.t(), x.view(12), x[:, 1:3]]
    t.view(12)[5] = -7
    x.view(12)[5] = -7
    for vt, vx in zip(views_t, views_x):
        assert torch.equal(vt.cpu(), vx)


def test_writing_into_expanded_view_is_refused():
    t = torch.zeros(3, device="tpu")
    with pytest.raises(RuntimeError, match="single memory location"):
        t[:1].expand(4).add_(1)


def test_loop_over_rows_reuses_one_program():
    import torch_tpu

    t = torch.arange(40.0, device="tpu").reshape(10, 4)
    (t[1] * 2).cpu()  # (in fused eager the first program also computes t)
    (t[2] * 2).cpu()
    before = torch_tpu.cache_stats()["misses"]
    rows = [(t[i] * 2).cpu() for i in range(3, 10)]
    assert torch_tpu.cache_stats()["misses"] == before  # the offset is a runtime operand
    assert torch.equal(torch.stack(rows), torch.arange(40.0).reshape(10, 4)[3:] * 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16], ids=str)
def test_resize_keeps_leading_values(dtype):
    x = make((6,), dtype)
    t = x.to("tpu")
    t.resize_(10)
    x.resize_(10)
    assert t.shape == (10,)
    assert torch.equal(t[:6].cpu(), x[:6])
    t.resize_(2, 2)
    assert torch.equal(t.cpu(), x[:4].reshape(2, 2))


def test_set_shares_storage():
    a = torch.arange(6.0, device="tpu")
    b = torch.empty(0, device="tpu")
    b.set_(a.untyped_storage(), 2, (2, 2), (2, 1))
    a[3] = 100
    assert torch.equal(b.cpu(), torch.tensor([[2.0, 100.0], [4.0, 5.0]]))


def _set_empty(dev):
    a = torch.arange(16.0, device=dev).reshape(8, 2)
    base = a.view(16)
    old = a.untyped_storage()
    assert a.set_() is a
    a.resize_(3).fill_(7)  # the new storage is the tensor's own
    return a, [old.data_ptr() == a.untyped_storage().data_ptr(), base]


def _set_tensor(dev):
    s = torch.arange(16.0, device=dev)
    a = torch.zeros(3, device=dev).set_(s[2:10].view(4, 2).t())
    s.add_(1)
    return a, [a.untyped_storage().data_ptr() == s.untyped_storage().data_ptr(), a.data_ptr() - s.data_ptr()]


def _set_storage(dev):
    s = torch.arange(16, device=dev, dtype=torch.int32)
    a = torch.zeros(3, device=dev, dtype=torch.int32).set_(s.untyped_storage())
    a.mul_(2)
    return a, [a.untyped_storage().data_ptr() == s.untyped_storage().data_ptr(), s]


def _set_storage_offset(dev):
    s = torch.arange(16.0, device=dev)
    a = torch.zeros(3, device=dev).set_(s.untyped_storage(), 3, (2, 3), (1, 4))
    s[3] = 100
    return a, [a.data_ptr() - s.data_ptr(), s]


def _set_storage_no_strides(dev):
    # Strides left out are contiguous ones; a storage too small grows.
    s = torch.arange(4.0, device=dev)
    st = s.untyped_storage()
    a = torch.zeros(3, device=dev).set_(st, 2, (3, 2))
    a[0] = 5
    return a[:1], [st.nbytes(), s, a.untyped_storage().data_ptr() == st.data_ptr()]


def _set_storage_scalar(dev):
    s = torch.arange(6.0, device=dev)
    return torch.zeros(3, device=dev).set_(s.untyped_storage(), 2, (), ()), []


@pytest.mark.parametrize("fn", [_set_empty, _set_tensor, _set_storage, _set_storage_offset,
                                _set_storage_no_strides, _set_storage_scalar], ids=lambda f: f.__name__[1:])
def test_set_overloads_match_cpu(fn):
    """Every set_ overload: sizes, strides, offset, storage size, sharing and values as on CPU."""
    want, want_extra = fn("cpu")
    got, got_extra = fn("tpu")
    assert (got.shape, got.stride(), got.storage_offset(), got.untyped_storage().nbytes()) == \
        (want.shape, want.stride(), want.storage_offset(), want.untyped_storage().nbytes())
    assert torch.equal(got.cpu(), want)
    for g, w in zip(got_extra, want_extra, strict=True):
        assert torch.equal(g.cpu(), w) if isinstance(w, torch.Tensor) else g == w
