"""nn building blocks on tpu against CPU, forward and backward."""

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_close_to_float64_reference, assert_same


def check(fn, *inputs, rtol=1e-4, atol=1e-5, grad=True):
    """fn on CPU and tpu: outputs and input gradients match."""
    torch.manual_seed(0)
    cpu_in = [x.detach().clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    tpu_in = [x.detach().to("tpu").requires_grad_(grad and x.is_floating_point()) for x in inputs]
    out_c, out_t = fn(*cpu_in), fn(*tpu_in)
    if isinstance(out_c, torch.Tensor):
        out_c, out_t = (out_c,), (out_t,)
    for a, b in zip(out_t, out_c):
        assert_same(a, b, rtol=rtol, atol=atol)
    if grad:
        g = torch.Generator().manual_seed(1)
        gs = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in out_c if o.requires_grad]
        diff_c = [o for o in out_c if o.requires_grad]
        diff_t = [o for o in out_t if o.requires_grad]
        if diff_c:
            torch.autograd.backward(diff_c, gs)
            torch.autograd.backward(diff_t, [x.to("tpu") for x in gs])
            for a, b in zip(tpu_in, cpu_in):
                if b.grad is not None:
                    assert_same(a.grad, b.grad, rtol=rtol * 10, atol=atol * 10)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2, padding=2), dict(groups=3)],
                         ids=str)
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv(kw, dims):
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
    x = torch.randn(2, 6, *([7] * dims))
    w = torch.randn(9, 6 // kw.get("groups", 1), *([3] * dims))
    b = torch.randn(9)
    check(lambda x, w, b: conv(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1), dict(groups=2, dilation=2)],
                         ids=str)
def test_conv_transpose(kw):
    x = torch.randn(2, 4, 5, 6)
    w = torch.randn(4, 6 // kw.get("groups", 1), 3, 3)
    check(lambda x, w: F.conv_transpose2d(x, w, **kw), x, w)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=2, dilation=2)],
                         ids=str)
def test_max_pool(kw):
    x = torch.randn(2, 3, 9, 8)
    check(lambda x: F.max_pool2d(x, return_indices=True, **kw), x)
    check(lambda x: F.max_pool1d(x, **kw), torch.randn(2, 3, 11))
    check(lambda x: F.max_pool3d(x, **kw), torch.randn(1, 2, 7, 6, 8))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                                dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=2, divisor_override=3)],
                         ids=str)
def test_avg_pool(kw):
    check(lambda x: F.avg_pool2d(x, **kw), torch.randn(2, 3, 9, 8))
    check(lambda x: F.avg_pool3d(x, **kw), torch.randn(1, 2, 7, 6, 8))


@pytest.mark.parametrize("out", [(1, 1), (3, 4), (5, 7)])
def test_adaptive_pools(out):
    x = torch.randn(2, 3, 10, 9)
    check(lambda x: F.adaptive_avg_pool2d(x, out), x)
    check(lambda x: F.adaptive_max_pool2d(x, out, return_indices=True), x)


def test_norms():
    x = torch.randn(4, 6, 5, 5)
    w, b = torch.randn(6), torch.randn(6)
    check(lambda x, w, b: F.layer_norm(x, (5, 5), None, None), x, w, b)
    check(lambda x, w, b: F.layer_norm(x.transpose(1, 3), (6,), w, b), x, w, b)
    check(lambda x, w, b: F.group_norm(x, 3, w, b), x, w, b)
    check(lambda x, w, b: F.rms_norm(x.transpose(1, 3), (6,), w), x, w, b)
    rm, rv = torch.randn(6), torch.rand(6) + 0.5
    check(lambda x, w, b: F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, training=False), x, w, b)
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b)


@pytest.mark.parametrize("shape,normalized", [((32, 16, 24), (24,)), ((3, 4, 5, 6), (5, 6)), ((7, 1), (1,)),
                                              ((0, 5), (5,)), ((2, 3), (2, 3)), ((4, 0, 3), (0, 3))], ids=str)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_gradients_are_cpus(shape, normalized, affine):
    """The layer norm backward sums over the normalized and the leading dims
    as products with ones: every gradient, every shape, as on CPU."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g) * 3 + 1
    w, b = torch.randn(normalized, generator=g), torch.randn(normalized, generator=g)
    wt = w if affine != "none" else None
    bt = b if affine == "both" else None
    check(lambda x, w, b: F.layer_norm(x, normalized, w if wt is not None else None, b if bt is not None else None),
          x, w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)
def test_layer_norm_gradients_in_other_dtypes_are_cpus(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 10, 16, generator=g).to(dtype)
    w, b = torch.randn(16, generator=g).to(dtype), torch.randn(16, generator=g).to(dtype)
    if dtype == torch.float64:
        check(lambda x, w, b: F.layer_norm(x, (16,), w, b), x, w, b, rtol=1e-7, atol=1e-9)
        return
    # bfloat16: against the float64 layer norm of the same values, not CPU's
    # bfloat16 kernel; the input and weight gradients read the mean and rstd
    # saved in the input's dtype (native_layer_norm's outputs): two values
    # rounded.
    grad = torch.randn(6, 10, 16, generator=g).to(dtype)

    def forward_backward(x, w, b, grad):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        y = F.layer_norm(x, (16,), w, b)
        y.backward(grad)
        return y.detach(), x.grad, w.grad, b.grad

    got = forward_backward(*(t.to("tpu") for t in (x, w, b, grad)))
    assert_close_to_float64_reference(got, forward_backward, (x, w, b, grad), roundings=(0, 2, 2, 0))


def test_batch_norm_updates_running_stats():
    torch.manual_seed(0)
    bn_c = torch.nn.BatchNorm1d(5)
    bn_t = torch.nn.BatchNorm1d(5).to("tpu")
    for _ in range(3):
        x = torch.randn(8, 5)
        assert_same(bn_t(x.to("tpu")), bn_c(x), rtol=1e-4, atol=1e-5)
    assert_same(bn_t.running_mean, bn_c.running_mean, rtol=1e-5, atol=1e-6)
    assert_same(bn_t.running_var, bn_c.running_var, rtol=1e-5, atol=1e-6)
    assert bn_t.num_batches_tracked.item() == 3


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses(reduction):
    x, y = torch.randn(6, 5), torch.randn(6, 5)
    t = torch.tensor([0, 4, 2, 2, 1, 3])
    check(lambda x: F.cross_entropy(x, t.to(x.device), reduction=reduction), x)
    check(lambda x: F.cross_entropy(x, t.to(x.device), weight=torch.arange(1.0, 6).to(x.device),
                                    ignore_index=2, reduction=reduction), x)
    check(lambda x: F.cross_entropy(x, t.to(x.device), label_smoothing=0.1, reduction=reduction), x)
    check(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, y)
    check(lambda x, y: F.l1_loss(x, y, reduction=reduction), x, y)
    check(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.5), x, y)
    check(lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=0.7), x, y)
    p = torch.rand(6, 5) * 0.9 + 0.05
    check(lambda p, y: F.binary_cross_entropy(p, y.sigmoid(), reduction=reduction), p, y)
    check(lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid(), reduction=reduction), x, y)
    # multilabel margin of one unbatched row: CPU's loss is 0-d even with
    # reduction='none' (PyTorch's meta kernel says [1])
    labels = torch.tensor([[3, 0, -1, 1, 2], [4, 4, 1, -1, 0], [0, 1, 2, 3, 4], [2, -1, 0, 0, 0], [1, 2, 3, 0, -1],
                           [-1, 0, 1, 2, 3]])
    check(lambda x: F.multilabel_margin_loss(x, labels.to(x.device), reduction=reduction), x)
    check(lambda x: F.multilabel_margin_loss(x, labels[0].to(x.device), reduction=reduction), x[0])
    img = torch.randn(2, 4, 3, 3)
    tgt = torch.randint(0, 4, (2, 3, 3))
    check(lambda x: F.cross_entropy(x, tgt.to(x.device), reduction=reduction), img)


@pytest.mark.parametrize("act", ["relu", "gelu", "silu", "mish", "elu", "leaky_relu", "hardtanh", "hardswish",
                                 "hardsigmoid", "softplus", "logsigmoid", "tanh", "sigmoid", "selu", "celu",
                                 "softsign", "tanhshrink", "hardshrink", "softshrink", "relu6", "glu"])
def test_activations(act):
    x = torch.randn(4, 6) * 3
    check(getattr(F, act), x)


def test_gelu_tanh_and_prelu():
    x = torch.randn(5, 4) * 3
    check(lambda x: F.gelu(x, approximate="tanh"), x)
    check(lambda x, w: F.prelu(x, w), x, torch.rand(4))


@pytest.mark.parametrize("mode,kw", [("nearest", {}), ("bilinear", dict(align_corners=False)),
                                     ("bilinear", dict(align_corners=True)), ("nearest-exact", {})],
                         ids=str)
def test_upsample(mode, kw):
    x = torch.randn(2, 3, 5, 4)
    check(lambda x: F.interpolate(x, scale_factor=2, mode=mode, **kw), x)
    check(lambda x: F.interpolate(x, size=(7, 3), mode=mode, **kw), x)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_antialiased_resize(mode, align_corners, dtype):
    """interpolate(antialias=True) (torchvision's Resize on tensors): PIL's
    widened filters when downscaling, ordinary ones when upscaling; values,
    strides and gradients as CPU's, float64 to its last bits."""
    tight = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else {}
    for shape, size in (((2, 3, 32, 27), (8, 9)), ((1, 2, 7, 9), (12, 4)), ((1, 1, 100, 6), (11, 6)),
                        ((2, 2, 9, 9), (9, 9))):
        x = torch.randn(shape, dtype=dtype)
        check(lambda x: F.interpolate(x, size=size, mode=mode, align_corners=align_corners, antialias=True), x,
              **tight)
    x = torch.randn(1, 3, 20, 30, dtype=dtype).to(memory_format=torch.channels_last)
    down = lambda x: F.interpolate(x, scale_factor=0.3, mode=mode, antialias=True)  # noqa: E731
    check(down, x, grad=False, **tight)
    assert down(x.to("tpu")).stride() == down(x).stride()
    # An input's inf reaches only the outputs whose filter covers it.
    x = torch.ones(1, 1, 8, 8, dtype=dtype)
    x[0, 0, 0, 0] = float("inf")
    check(lambda x: F.interpolate(x, size=(2, 2), mode=mode, antialias=True), x, grad=False)


@pytest.mark.parametrize("legacy", [False, True], ids=["parametrization", "legacy"])
def test_weight_norm_layers_train_as_on_cpu(legacy):
    """weight_norm (HiFi-GAN, wav2vec2's positional convolution): outputs and
    the gradients of g and v as CPU's, along dim 0, the last dim and
    ConvTranspose's dim 1."""
    nn = torch.nn
    wrap = nn.utils.weight_norm if legacy else nn.utils.parametrizations.weight_norm
    for make, dim, shape in ((lambda: nn.Linear(5, 3), 0, (2, 5)), (lambda: nn.Conv1d(4, 6, 3), 2, (2, 4, 7)),
                             (lambda: nn.Conv2d(2, 3, 3), 0, (2, 2, 6, 6)),
                             (lambda: nn.ConvTranspose1d(4, 2, 3), 1, (2, 4, 7))):
        mods = []
        for dev in ("cpu", "tpu"):
            torch.manual_seed(0)
            mods.append(wrap(make(), dim=dim).to(dev))
        x = torch.randn(shape)
        ys = [m(x.to(dev)) for m, dev in zip(mods, ("cpu", "tpu"))]
        for y in ys:
            y.square().sum().backward()
        assert_same(ys[1], ys[0].detach())
        want, got = dict(mods[0].named_parameters()), dict(mods[1].named_parameters())
        for name in want:
            assert_same(got[name].grad, want[name].grad, rtol=1e-4, atol=1e-5)


def test_weight_norm_interface_values_dtypes_and_layout():
    v, g = torch.randn(4, 3, 2, dtype=torch.float64), torch.randn(4, 1, 1, dtype=torch.float64)
    assert_same(torch._weight_norm_interface(v.to("tpu"), g.to("tpu"), 0), torch._weight_norm_interface(v, g, 0),
                rtol=1e-12, atol=1e-12)
    vb, gb = v[:, :, :1].float().bfloat16(), g.float().bfloat16()  # (against the float64 norm of these values)
    assert_close_to_float64_reference(torch._weight_norm_interface(vb.to("tpu"), gb.to("tpu"), 0),
                                      lambda v, g: torch._weight_norm_interface(v, g, 0), (vb, gb))
    vt, gt = torch.randn(3, 4).t(), torch.randn(4, 1)
    got, want = torch._weight_norm_interface(vt.to("tpu"), gt.to("tpu"), 0), torch._weight_norm_interface(vt, gt, 0)
    assert [t.stride() for t in got] == [t.stride() for t in want]


def test_embedding_and_backward():
    w = torch.randn(10, 4)
    idx = torch.tensor([[1, 2, 4], [4, 3, 9]])
    check(lambda w: F.embedding(idx.to(w.device), w, padding_idx=2), w)
    check(lambda w: F.embedding(idx.to(w.device), w, scale_grad_by_freq=True), w)


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal):
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    if causal:
        k, v = k[:, :, :5], v[:, :, :5]
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v)
    mask = torch.rand(5, k.shape[2]) > 0.3
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.device)), q, k, v)


def test_transformer_layer():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    x = torch.randn(2, 6, 16)
    out_c = layer(x)
    out_t = layer.to("tpu")(x.to("tpu"))
    assert_same(out_t, out_c, rtol=1e-4, atol=1e-5)


# (huber_loss is left out: CPU itself fails its backward for mixed dtypes)
@pytest.mark.parametrize("loss", ["mse_loss", "smooth_l1_loss", "l1_loss"])
@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.float32), (torch.float32, torch.float16),
                                    (torch.float16, torch.bfloat16)])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_losses_of_mixed_dtypes(loss, dtypes, reduction):
    # A bf16 model output against a float32 target (mixed-precision training):
    # the loss takes the promoted dtype where CPU's does, the gradient self's.
    fn = getattr(F, loss)
    x = torch.randn(4, 3).to(dtypes[0])
    y = torch.randn(4, 3).to(dtypes[1])
    check(lambda a, b: fn(a, b, reduction=reduction), x, y, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("concat", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss(concat, reduction, zero_infinity):
    g = torch.Generator().manual_seed(0)
    T, N, C, S = 10, 4, 5, 4
    lp = torch.randn(T, N, C, generator=g).log_softmax(2)
    tl = torch.tensor([4, 2, 0, 6 if zero_infinity else 3])  # 6 labels in <= 10 frames with repeats: maybe impossible
    il = torch.tensor([10, 8, 5, 3])
    tg = torch.randint(1, C, (N, 6), generator=g)
    if concat:
        tg = torch.cat([tg[i, : tl[i]] for i in range(N)])
    a, b = lp.clone().requires_grad_(), lp.to("tpu").requires_grad_()
    kw = dict(reduction=reduction, zero_infinity=zero_infinity)
    la = F.ctc_loss(a, tg, il, tl, **kw)
    lb = F.ctc_loss(b, tg.to("tpu"), il.to("tpu"), tl.to("tpu"), **kw)
    assert lb.dtype == la.dtype and lb.shape == la.shape
    torch.testing.assert_close(lb.cpu(), la.detach(), rtol=1e-5, atol=1e-5, equal_nan=True)
    go = torch.rand(la.shape, generator=g)
    la.backward(go)
    lb.backward(go.to("tpu"))
    torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_ctc_loss_unbatched_and_int_lengths():
    g = torch.Generator().manual_seed(1)
    lp = torch.randn(8, 5, generator=g).log_softmax(1)
    tg = torch.tensor([1, 2, 2])
    a, b = lp.clone().requires_grad_(), lp.to("tpu").requires_grad_()
    la = F.ctc_loss(a, tg, (8,), (3,))
    lb = F.ctc_loss(b, tg.to("tpu"), (8,), (3,))
    torch.testing.assert_close(lb.cpu(), la.detach(), rtol=1e-5, atol=1e-5)
    la.backward()
    lb.backward()
    torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)
    # Through log_softmax, as models use it (nn.CTCLoss).
    x = torch.randn(6, 2, 4, generator=g)
    xa, xb = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    tgt, il, tl = torch.tensor([[1, 2], [3, 3]]), torch.tensor([6, 6]), torch.tensor([2, 2])
    nn_loss = torch.nn.CTCLoss()
    nn_loss(xa.log_softmax(2), tgt, il, tl).backward()
    nn_loss(xb.log_softmax(2), tgt.to("tpu"), il.to("tpu"), tl.to("tpu")).backward()
    torch.testing.assert_close(xb.grad.cpu(), xa.grad, rtol=1e-4, atol=1e-5)


def test_sync_batch_norm_pieces_equal_batch_norm():
    """The ops SyncBatchNorm runs (batch_norm_stats, _gather_stats_with_counts,
    _elemt, _backward_reduce, _backward_elemt), with the batch split into two
    uneven "ranks", give native batch norm's statistics, running statistics,
    output and gradients on the whole batch."""
    torch.manual_seed(0)
    x, w, b, g = torch.randn(6, 3, 4, 5), torch.randn(3), torch.randn(3), torch.randn(6, 3, 4, 5)
    rm, rv = torch.zeros(3), torch.ones(3)
    out, mean, invstd = torch.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
    gx, gw, gb = torch.ops.aten.native_batch_norm_backward(g, x, w, None, None, mean, invstd, True, 1e-5,
                                                          [True, True, True])
    t = lambda v: v.to("tpu")  # noqa: E731
    parts = [torch.batch_norm_stats(t(p), 1e-5) for p in (x[:2], x[2:])]
    trm, trv = torch.zeros(3, device="tpu"), torch.ones(3, device="tpu")
    counts = torch.tensor([2 * 20.0, 4 * 20.0], device="tpu")
    m, inv = torch.batch_norm_gather_stats_with_counts(t(x), torch.stack([p[0] for p in parts]),
                                                       torch.stack([p[1] for p in parts]), trm, trv, 0.1, 1e-5, counts)
    for got, want in ((m, mean), (inv, invstd), (trm, rm), (trv, rv)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.batch_norm_elemt(t(x), t(w), t(b), m, inv, 1e-5).cpu(), out, rtol=1e-5, atol=1e-5)
    sdy, sdx, tgw, tgb = torch.batch_norm_backward_reduce(t(g), t(x), m, inv, t(w), True, True, True)
    tgx = torch.batch_norm_backward_elemt(t(g), t(x), m, inv, t(w), sdy, sdx,
                                          torch.tensor([40, 80], dtype=torch.int32, device="tpu"))
    for got, want in ((tgx, gx), (tgw, gw), (tgb, gb)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    assert torch.batch_norm_backward_reduce(t(g), t(x), m, inv, None, False, False, True)[:3] == (None, None, None)
    assert torch.batch_norm_stats(t(x).half(), 1e-5)[0].dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_fractional_max_pool_windows_values_and_indices_are_cpus(dtype):
    """fractional_max_pool2d/3d with given random samples: CPU's windows
    (their starts rounded in the input's dtype), values and flat indices
    (the first maximum, the last NaN), batched and not; gradients."""
    g = torch.Generator().manual_seed(0)
    for shape, k, o in (((2, 3, 9, 11), (2, 2), (4, 5)), ((3, 7, 7), (3, 2), (5, 6)), ((1, 2, 10, 10), (3, 3), (1, 1)),
                        ((2, 2, 6, 6), (2, 3), (5, 4)), ((2, 2, 5, 6, 7), (2, 2, 2), (3, 4, 5)),
                        ((2, 6, 5, 6), (2, 3, 2), (3, 2, 4))):
        nsp = len(k)
        x = torch.randn(shape, generator=g).to(dtype)
        x.view(-1)[::7] = float("nan")
        x.view(-1)[::5] = x.view(-1)[3]  # ties
        n = shape[0] if len(shape) == nsp + 2 else 1
        # (CPU reads the samples' first n rows; more are allowed)
        s = torch.rand(n + len(shape) % 2, shape[-nsp - 1], nsp, generator=g).to(dtype)
        op = torch.ops.aten.fractional_max_pool2d if nsp == 2 else torch.ops.aten.fractional_max_pool3d
        want, got = op(x, list(k), list(o), s), op(x.to("tpu"), list(k), list(o), s.to("tpu"))
        assert torch.equal(got[1].cpu(), want[1])
        torch.testing.assert_close(got[0].cpu(), want[0], equal_nan=True, rtol=0, atol=0)
        if dtype == torch.float32:
            pool = F.fractional_max_pool2d if nsp == 2 else F.fractional_max_pool3d
            check(lambda t: pool(t, k, output_size=o, _random_samples=s.to(t.device)), x.nan_to_num(0))
