"""Regressions of issue-12 classes: inputs that crashed the process, hung,
or were accepted where CPU raises. Each case runs on CPU and on tpu and must
give the same outcome: the same exception type, or the same values."""

import warnings

import pytest
import torch

import torch_tpu  # noqa: F401
from conftest import assert_close_to_float64_reference, assert_same, run_python


def _outcome(fn, device):
    """('ok', result on the CPU) or (exception type,); the input x is the
    arange 2x3 float tensor on `device`."""
    x = torch.arange(6.0, device=device).view(2, 3).clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = fn(x, device)
        except Exception as e:  # noqa: BLE001  (the type is what is compared)
            return (type(e),)
    return ("ok", x.cpu(), out.cpu() if isinstance(out, torch.Tensor) else None)


def _same_outcome(fn):
    cpu, tpu = _outcome(fn, "cpu"), _outcome(fn, "tpu")
    assert cpu[0] == tpu[0], (cpu, tpu)
    if cpu[0] == "ok":
        torch.testing.assert_close(tpu[1], cpu[1])
        if cpu[2] is not None:
            torch.testing.assert_close(tpu[2], cpu[2])


def _long(d, *shape):
    return torch.zeros(*shape, dtype=torch.long, device=d)


OVERLAPS = {
    "cat_out_is_input": lambda x, d: torch.cat([x, x], out=x),
    "cat_out_is_only_input": lambda x, d: torch.cat([x], out=x),
    "stack_out_views_input": lambda x, d: torch.stack([x[0], x[1]], out=x),
    "index_select_out_is_input": lambda x, d: torch.index_select(x, 0, torch.tensor([1, 0], device=d), out=x),
    "gather_out_is_input": lambda x, d: torch.gather(x, 1, _long(d, 2, 3), out=x),
    "take_out_is_input": lambda x, d: torch.take(x, _long(d, 2, 3), out=x),
    "index_add_source_is_self": lambda x, d: x.index_add_(0, torch.tensor([1, 0], device=d), x),
    "scatter_source_is_self": lambda x, d: x.scatter_(1, _long(d, 2, 3), x),
    "partial_in_place": lambda x, d: x.view(-1)[1:].add_(x.view(-1)[:-1]),
    "partial_out": lambda x, d: torch.mul(x.view(-1)[1:], 2, out=x.view(-1)[:-1]),
    "partial_copy": lambda x, d: x.view(-1)[1:].copy_(x.view(-1)[:-1]),
    # Allowed on CPU: an elementwise op may write the tensor it reads.
    "add_out_is_input": lambda x, d: torch.add(x, x, out=x),
    "add_self": lambda x, d: x.add_(x),
    "where_out_is_input": lambda x, d: torch.where(x > 2, x, x, out=x),
    "cumsum_out_is_input": lambda x, d: torch.cumsum(x, 1, out=x),
    # (out= is self only: where it is also mat2, CPU's values depend on its
    # BLAS, which on some machines reads rows it has already written.)
    "addmm_out_is_input": lambda x, d: torch.addmm(x, torch.ones(2, 2, device=d), x.clone(), out=x),
    "sort_out_is_input": lambda x, d: torch.sort(x, out=(x, torch.empty(2, 3, dtype=torch.long, device=d))),
}


@pytest.mark.parametrize("name", sorted(OVERLAPS))
def test_overlapping_outputs_follow_cpu(name):
    """out= and in-place writes that share memory with an input raise where
    CPU raises (and write nothing), and compute CPU's values where CPU
    accepts them; in every mode (fused eager deadlocked on cat out=x)."""
    _same_outcome(OVERLAPS[name])


def test_refused_overlap_writes_nothing_and_later_work_is_unaffected():
    x = torch.arange(4.0, device="tpu")
    y = x * 2
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.cat([x, x], out=x)
    assert_same(x, torch.arange(4.0))
    assert_same(y, torch.arange(4.0) * 2)


@pytest.mark.parametrize("shape", [(0,), (4, 0), (0, 4), (0, 0, 3)], ids=str)
def test_boolean_mask_of_zero_size_tensor(shape):
    """Crashed the interpreter with SIGFPE (a stride divided by a zero size)."""
    x = torch.zeros(shape)
    m = torch.zeros(shape, dtype=torch.bool)
    assert_same(x.to("tpu")[m.to("tpu")], x[m])
    assert_same(torch.nonzero(m.to("tpu")), torch.nonzero(m))
    if x.dim() > 1:  # a mask over the leading dims only
        lead = m.any(-1)
        assert_same(x.to("tpu")[lead.to("tpu")], x[lead])


@pytest.mark.parametrize("src,idx", [((0,), (0,)), ((0, 3), (0,)), ((2, 0), (2,)), ((0, 3), (2, 0))], ids=str)
def test_gathers_from_and_into_zero_size_tensors(src, idx):
    """An empty index on a zero-size source failed with XLA compiler text."""
    x, i = torch.zeros(src), torch.zeros(idx, dtype=torch.long)
    xt, it = x.to("tpu"), i.to("tpu")
    assert_same(xt[it], x[it.cpu()])
    if i.dim() == 1:
        assert_same(xt.index_select(0, it), x.index_select(0, i))
    assert_same(torch.zeros(src, device="tpu").index_put_((it,), torch.zeros((), device="tpu")),
                torch.zeros(src).index_put_((i,), torch.zeros(())))


def test_rng_state_must_be_a_cpu_byte_tensor():
    """A tpu or float state segfaulted; CPU's contract is a TypeError."""
    state = torch.tpu.get_rng_state()
    assert state.device.type == "cpu" and state.dtype == torch.uint8
    for bad in (state.to("tpu"), state.float()):
        with pytest.raises(TypeError, match="ByteTensor"):
            torch.tpu.set_rng_state(bad)
        with pytest.raises(TypeError, match="ByteTensor"):
            torch.Generator("tpu").set_state(bad)
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.tpu.set_rng_state(state[:8])
    g = torch.Generator("tpu")
    g.set_state(state)
    assert torch.equal(g.get_state(), state)


def test_rng_state_under_fake_tensor_mode():
    """torch.compile's tracing reads the state under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = torch.tpu.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with FakeTensorMode():
            s = torch.tpu.get_rng_state()
            g = torch.Generator("tpu").get_state()
    assert s.shape == (16,) and g.shape == (16,)
    assert torch.equal(torch.tpu.get_rng_state(), real)


def test_no_crash_in_a_fresh_process():
    """The crashes above killed the process: run them in a child too."""
    code = (
        "import torch, torch_tpu\n"
        "x = torch.zeros(0, device='tpu'); m = torch.zeros(0, dtype=torch.bool, device='tpu')\n"
        "assert x[m].shape == (0,)\n"
        "try:\n    torch.tpu.set_rng_state(torch.tpu.get_rng_state().to('tpu'))\nexcept TypeError:\n    pass\n"
        "print('alive')\n"
    )
    r = run_python(code, timeout=120)
    assert r.returncode == 0 and "alive" in r.stdout, r.stderr


DIVISIONS = {
    "floor_divide_scalar": lambda x: x // 0,
    "floor_divide_tensor": lambda x: x // torch.tensor([1, 0], device=x.device),
    "remainder": lambda x: x % 0,
    "fmod": lambda x: torch.fmod(x, torch.zeros(2, dtype=x.dtype, device=x.device)),
    "div_trunc": lambda x: torch.div(x, 0, rounding_mode="trunc"),
    "div_floor": lambda x: torch.div(x, torch.tensor(0, device=x.device), rounding_mode="floor"),
}


@pytest.mark.parametrize("name", sorted(DIVISIONS))
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_integer_division_by_zero_raises(name, dtype):
    """Returned garbage; CPU raises ZeroDivisionError (a RuntimeError). On tpu
    it is a device-side check, raised at the next wait (at once in debug
    eager); unrelated tensors stay readable."""
    fn = DIVISIONS[name]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(torch.tensor([7, 8], dtype=dtype))
    other = torch.arange(3.0, device="tpu") * 2
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(torch.tensor([7, 8], dtype=dtype, device="tpu")).cpu()
    assert_same(other, torch.arange(3.0) * 2)
    # Float division by zero is IEEE arithmetic, as on CPU.
    assert_same(fn(torch.tensor([7.0, -8.0], device="tpu")), fn(torch.tensor([7.0, -8.0])))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.bfloat16])
def test_in_place_floor_divide(dtype):
    """x //= 2 raised NotImplementedError for every tensor."""
    c = torch.arange(-7, 9, dtype=dtype).view(4, 4)
    t = c.to("tpu")
    t //= 3
    c //= 3
    assert_same(t, c)
    t2, c2 = c.to("tpu").mT, c.clone().mT
    t2.floor_divide_(torch.tensor([2, -3, 4, 5], dtype=dtype, device="tpu"))
    c2.floor_divide_(torch.tensor([2, -3, 4, 5], dtype=dtype))
    assert_same(t2, c2)


@pytest.mark.parametrize("kw", [{}, {"minlength": 12}, {"weights": "float"}, {"weights": "int"}, {"weights": "double"}],
                         ids=["plain", "minlength", "float_weights", "int_weights", "double_weights"])
def test_bincount(kw):
    x = torch.tensor([0, 3, 1, 1, 7, 3, 3])
    weights = {"float": torch.rand(7), "int": torch.arange(7, dtype=torch.int32),
               "double": torch.rand(7, dtype=torch.float64)}.get(kw.get("weights"))
    args = {"minlength": kw.get("minlength", 0)}
    want = torch.bincount(x, weights=weights, **args)
    got = torch.bincount(x.to("tpu"), weights=None if weights is None else weights.to("tpu"), **args)
    assert_same(got, want)
    assert_same(torch.bincount(torch.zeros(0, dtype=torch.long, device="tpu"), minlength=3),
                torch.bincount(torch.zeros(0, dtype=torch.long), minlength=3))


@pytest.mark.parametrize("bad", ["negative", "2d", "float", "weights_length", "minlength"])
def test_bincount_errors_match_cpu(bad):
    def call(d):
        x = torch.tensor([1, 2, 3], device=d)
        if bad == "negative":
            return torch.bincount(torch.tensor([-1, 2], device=d))
        if bad == "2d":
            return torch.bincount(x.view(1, 3))
        if bad == "float":
            return torch.bincount(x.float())
        if bad == "weights_length":
            return torch.bincount(x, weights=torch.ones(2, device=d))
        return torch.bincount(x, minlength=-1)

    with pytest.raises(Exception) as cpu_err:
        call("cpu")
    with pytest.raises(cpu_err.type):
        call("tpu")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_histc_accepts_integers_as_cuda_does(dtype):
    """Transformers' MoE routers call histc on integer expert indices for
    every non-CPU device; CUDA counts them in the input's dtype."""
    g = torch.Generator().manual_seed(0)
    experts = torch.randint(0, 8, (200,), generator=g).to(dtype)
    got = torch.histc(experts.to("tpu"), bins=8, min=0, max=7)
    assert got.dtype == dtype
    want = torch.histc(experts.double(), bins=8, min=0, max=7).to(dtype)
    assert_same(got, want)
    assert_same(torch.histc(experts.to("tpu"), bins=4), torch.histc(experts.double(), bins=4).to(dtype))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_random_tensors(dtype):
    """randn/rand/normal_ of complex dtypes raised; as on CPU, each part is
    drawn as a real value (normal parts with std / sqrt(2))."""
    torch.manual_seed(0)
    z = torch.randn(20000, dtype=dtype, device="tpu").cpu()
    assert z.dtype == dtype
    for part in (z.real, z.imag):
        assert abs(part.mean().item()) < 0.03 and abs(part.var().item() - 0.5) < 0.03
    u = torch.rand(20000, dtype=dtype, device="tpu").cpu()
    for part in (u.real, u.imag):
        assert 0 <= part.min().item() and part.max().item() < 1 and abs(part.mean().item() - 0.5) < 0.02
    n = torch.empty(20000, dtype=dtype, device="tpu").normal_(3.0, 2.0).cpu()
    assert abs(n.real.mean().item() - 3) < 0.05 and abs(n.imag.mean().item() - 3) < 0.05
    assert abs((n - (3 + 3j)).abs().pow(2).mean().item() - 4) < 0.2  # the complex variance is std**2
    torch.manual_seed(5)
    a = torch.randn(3, 4, dtype=dtype, device="tpu").cpu()
    torch.manual_seed(5)
    assert torch.equal(torch.randn(3, 4, dtype=dtype, device="tpu").cpu(), a)


_T = lambda: torch.randn(3, 4).t().abs() + 0.5  # noqa: E731  (strides (1, 4))
_LAYOUT_OPERANDS = {
    "transposed,contiguous": lambda: (_T(), torch.randn(4, 3).abs() + 0.5),
    "contiguous,transposed": lambda: (torch.randn(4, 3).abs() + 0.5, _T()),
    "one_element,transposed": lambda: (torch.randn(1, 1).abs() + 0.5, _T()),
    "zero_dim,transposed": lambda: (torch.tensor(1.5), _T()),
    "transposed,one_element": lambda: (_T(), torch.randn(1, 1).abs() + 0.5),
    # Size-1 dims whose strides tie with another dim's: TensorIterator and
    # the Python meta kernels order them differently (found by the fuzzer).
    "size_one_ties,broadcast": lambda: (torch.randn(4).abs().add(0.5).as_strided((1, 1, 4, 1), (1, 1, 1, 1)),
                                        torch.randn(4, 1, 5).abs() + 0.5),
    "broadcast,size_one_ties": lambda: (torch.randn(4, 1, 5).abs() + 0.5,
                                        torch.randn(4).abs().add(0.5).as_strided((1, 1, 4, 1), (1, 1, 1, 1))),
}


@pytest.mark.parametrize("operands", sorted(_LAYOUT_OPERANDS))
@pytest.mark.parametrize("op", ["floor_divide", "logical_and", "logical_or", "logical_xor", "copysign", "xlogy",
                                "heaviside", "add", "mul", "maximum", "atan2"])
def test_binary_results_are_laid_out_as_on_cpu(op, operands):
    """Results take CPU's strides (TensorIterator's rule), also for the ops
    whose meta kernels lay results out otherwise: a later view or in-place
    write then behaves as on CPU."""
    a, b = _LAYOUT_OPERANDS[operands]()
    fn = getattr(torch, op)
    want = fn(a, b)
    got = fn(a.to("tpu"), b.to("tpu"))
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    assert_same(got, want)


@pytest.mark.parametrize("operands", sorted(_LAYOUT_OPERANDS))
@pytest.mark.parametrize("op", ["where", "addcmul", "lerp", "clamp"])
def test_ternary_results_are_laid_out_as_on_cpu(op, operands):
    a, b = _LAYOUT_OPERANDS[operands]()
    fns = {"where": lambda x, y: torch.where(x + y > 2, x, y), "addcmul": lambda x, y: torch.addcmul(x, y, x),
           "lerp": lambda x, y: torch.lerp(x, y, x), "clamp": lambda x, y: torch.clamp(x, y, x + y)}
    want = fns[op](a, b)
    got = fns[op](a.to("tpu"), b.to("tpu"))
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    assert_same(got, want)


_ROLL_INPUTS = {
    "channels_last": lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
    "channels_last_size_one": lambda: torch.randn(9).as_strided((1, 3, 3, 1), (9, 1, 3, 3)),
    "channels_last_3d": lambda: torch.randn(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d),
    "transposed": lambda: torch.randn(2, 3, 4).transpose(1, 2),
}


@pytest.mark.parametrize("name", sorted(_ROLL_INPUTS))
@pytest.mark.parametrize("roll", [(1, 1), (-1, 2), (0, 1), (3, 1), ((1, 2), (1, 2)), (2, None), ((3, 1), (1, 2))],
                         ids=str)
def test_roll_is_laid_out_as_on_cpu(name, roll):
    """CPU rolls a dim as a cat of two narrows: a channels-last input stays
    channels-last unless a part is empty (a shift by a multiple of the
    size), and the flattened roll is contiguous (found by the fuzzer)."""
    x = _ROLL_INPUTS[name]()
    shifts, dims = roll
    fn = (lambda t: t.roll(shifts)) if dims is None else (lambda t: t.roll(shifts, dims))
    want, got = fn(x), fn(x.to("tpu"))
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    assert_same(got, want)


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _lt(t):  # the same values, the last two dims swapped in memory
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _cl(t):  # the same values, channels-last (2-d or 3-d)
    return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)


_KERNEL_LAYOUTS = {
    # CPU's kernels lay these out otherwise than PyTorch's meta kernels.
    "conv1d_weight_channels_last": lambda x: torch.nn.functional.conv1d(x(_t(2, 4, 9)), _lt(x(_t(5, 4, 3)))),
    "conv1d_input_channels_last": lambda x: torch.nn.functional.conv1d(_lt(x(_t(2, 4, 9))), x(_t(5, 4, 3))),
    "conv_transpose1d": lambda x: torch.nn.functional.conv_transpose1d(x(_t(2, 4, 9)), _lt(x(_t(4, 5, 3))), stride=2),
    "batch_norm_3d": lambda x: torch.nn.functional.batch_norm(_lt(x(_t(3, 4, 5))), None, None, training=True),
    "batch_norm_channels_last": lambda x: torch.nn.functional.batch_norm(
        x(_t(2, 4, 3, 3)).to(memory_format=torch.channels_last), None, None, training=True),
    "pixel_shuffle_channels_last": lambda x: torch.nn.functional.pixel_shuffle(_cl(x(_t(2, 8, 3, 3))), 2),
    "pixel_unshuffle_channels_last": lambda x: torch.nn.functional.pixel_unshuffle(_cl(x(_t(2, 2, 4, 6))), 2),
    "pixel_shuffle_batched": lambda x: torch.nn.functional.pixel_shuffle(x(_t(2, 3, 9, 2, 3)), 3),
    "pixel_unshuffle_3d": lambda x: torch.nn.functional.pixel_unshuffle(x(_t(2, 4, 6)), 2),
    "channel_shuffle_channels_last": lambda x: torch.nn.functional.channel_shuffle(_cl(x(_t(2, 6, 3, 3))), 3),
    "channel_shuffle_channels_last_3d": lambda x: torch.nn.functional.channel_shuffle(_cl(x(_t(2, 4, 2, 3, 3))), 2),
    "max_unpool2d_channels_last": lambda x: torch.nn.functional.max_unpool2d(
        *torch.nn.functional.max_pool2d(_cl(x(_t(2, 3, 4, 6))), 2, return_indices=True), 2),
    "reflection_pad2d_channels_last": lambda x: torch.nn.functional.pad(_cl(x(_t(2, 3, 4, 5))), (1, 2, 2, 1), "reflect"),
    "replication_pad3d_channels_last": lambda x: torch.nn.functional.pad(_cl(x(_t(2, 3, 3, 4, 5))), (1, 0, 2, 1, 1, 1),
                                                                         "replicate"),
    "replication_pad2d_negative": lambda x: torch.nn.functional.pad(_cl(x(_t(2, 3, 4, 5))), (-1, 2, 1, -1),
                                                                    "replicate"),
    "reflection_pad2d_backward": lambda x: torch.ops.aten.reflection_pad2d_backward(
        _cl(x(_t(2, 3, 6, 7))), _cl(x(_t(2, 3, 4, 5, seed=1))), [1, 1, 1, 1]),
    "replication_pad3d_backward": lambda x: torch.ops.aten.replication_pad3d_backward(
        x(_t(2, 3, 5, 6, 7)), _cl(x(_t(2, 3, 3, 4, 5, seed=1))), [1, 1, 1, 1, 1, 1]),
    "normal_tensors": lambda x: torch.normal(_lt(x(_t(3, 4, 2))), _lt(x(_t(3, 4, 2))).abs()) * 0,
    "sdpa_3d_transposed": lambda x: torch.nn.functional.scaled_dot_product_attention(
        _lt(x(_t(4, 3, 8))), _lt(x(_t(4, 6, 8, seed=1))), _lt(x(_t(4, 6, 8, seed=2)))),
    "sdpa_heads_second": lambda x: torch.nn.functional.scaled_dot_product_attention(
        *(x(_t(2, 6, 4, 8, seed=s)).transpose(1, 2) for s in range(3))),
    "resize_as_same_shape": lambda x: _lt(x(_t(5, 5, 5))).resize_as_(x(_t(5, 5, 5))),
    "solve_empty_batch": lambda x: torch.linalg.solve(x(torch.eye(5).expand(0, 5, 5)), x(torch.ones(0, 5, 3))),
    "eig_vectors": lambda x: torch.linalg.eig(x(_t(2, 4, 4)))[1].abs(),
    "svd_vh_wide": lambda x: torch.linalg.svd(x(_t(2, 3, 5)), full_matrices=False)[2].abs(),
    "svd_vh_tall_full": lambda x: torch.linalg.svd(x(_t(4, 3)))[2].abs(),
    "batch_norm_with_update_transposed": lambda x: torch.ops.aten._batch_norm_with_update(
        _lt(x(_t(4, 5, 3))), x(torch.ones(5)), x(torch.zeros(5)), x(torch.zeros(5)), x(torch.ones(5)), 0.1, 1e-5)[0],
}


@pytest.mark.parametrize("name", sorted(_KERNEL_LAYOUTS))
def test_kernel_layouts_are_cpus(name):
    """Results whose CPU kernels' layouts differ from the meta kernels'
    (sweeps of OpInfo samples with transposed and channels-last inputs
    found them): 1-d convolutions follow the weight; batch norm, the
    reflection and replication pads (and their input gradients),
    max_unpool2d, channel_shuffle and pixel_(un)shuffle the input's
    suggested format; normal of tensors and 3-d attention are contiguous,
    resize_as_ to the same shape keeps strides, empty batches of solves and
    svd's Vh are column-major."""
    fn = _KERNEL_LAYOUTS[name]
    want, got = fn(lambda t: t), fn(lambda t: t.to("tpu"))
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    assert_same(got, want, rtol=1e-4, atol=1e-4)


# Operands whose size-1 dims have strides CPU's rules could give them: dense,
# the other dims contiguous or transposed.
_SIZE_ONE_LAYOUTS = [((1, 2, 1), (2, 1, 2)), ((2, 1, 3, 1), (3, 1, 1, 9)), ((3, 1, 4), (1, 1, 3)),
                     ((1, 3), (7, 1)), ((2, 1, 2), (1, 9, 2))]


def _with_strides(shape, strides, dtype=torch.float32, seed=0):
    x = torch.empty_strided(shape, strides, dtype=dtype)
    x.copy_(_t(*shape, seed=seed).to(dtype) if dtype.is_floating_point else (_t(*shape, seed=seed) * 4).to(dtype))
    return x


def test_results_keep_cpus_strides_of_size_one_dims_for_every_fuzzer_op():
    """Every op of the fuzzer, on operands whose size-1 dims have odd strides:
    the result's strides are CPU's, those of size-1 dims included. They are
    not cosmetic: a later broadcasting op orders its result's dims by them
    (the fuzzer's run of seed 9400000 found where() of a flipped tensor laid
    out otherwise than on CPU). TensorIterator's fast set-up makes a result
    contiguous where Python's elementwise rule (the meta kernels) keeps the
    input's strides, a 0-dim operand (a Python number) takes that set-up
    away, and flip and nan_to_num copy the input's strides exactly."""
    import random

    from torch_tpu.testing import fuzz

    wrong = {}
    for name, (arity, accepts, fn) in sorted(fuzz.ops().items()):
        if name.startswith("__"):
            continue
        dtype = next((d for d in ("float32", "int64", "bool") if accepts(*([d] * arity))), None)
        if dtype is None:
            continue
        for shape, strides in _SIZE_ONE_LAYOUTS:
            args = [_with_strides(shape, strides, getattr(torch, dtype), seed=k) for k in range(arity)]
            try:
                want = fn(torch, args, random.Random(3))
            except Exception:  # noqa: BLE001  (errors are compared elsewhere)
                continue
            got = fn(torch, [a.to("tpu") for a in args], random.Random(3))
            want, got = (want[0], got[0]) if isinstance(want, tuple) else (want, got)
            if isinstance(want, torch.Tensor) and want.numel() and got.stride() != want.stride():
                wrong.setdefault(name, (shape, strides, want.stride(), got.stride()))
    assert not wrong, f"(operand shape, operand strides, CPU's strides, tpu's): {wrong}"


def test_where_of_a_flipped_tensor_is_laid_out_as_on_cpu():
    # The fuzzer's finding, program 13464 of seed 9400000.
    def run(dev):
        base = torch.empty_strided((1, 2, 1), (2, 1, 2), dtype=torch.bool)
        base.copy_(torch.tensor([True, False]).view(1, 2, 1))
        a = base.to(dev)
        b = a.permute(1, 0, 2)
        c = a.flip(1)
        return c, torch.where(c, c, b)

    (cf, cw), (tf, tw) = run("cpu"), run("tpu")
    assert tf.stride() == cf.stride() == (2, 1, 2)
    assert tw.stride() == cw.stride() == (2, 1, 4)
    assert_same(tw, cw)


_A = torch.ops.aten
_NUMBER_OVERLOADS = {
    "add.Scalar": lambda x: _A.add.Scalar(x, 1), "mul.Scalar": lambda x: _A.mul.Scalar(x, 2),
    "div.Scalar_mode": lambda x: _A.div.Scalar_mode(x, 2, rounding_mode="floor"),
    "remainder.Scalar": lambda x: _A.remainder.Scalar(x, 2), "rsub.Scalar": lambda x: _A.rsub.Scalar(x, 2),
    "eq.Scalar": lambda x: x == 0, "x_plus_1": lambda x: x + 1,
    "mul_0dim": lambda x: x * torch.tensor(2.0, device=x.device),
    "bitwise_and.Scalar_Tensor": lambda x: _A.bitwise_and.Scalar_Tensor(3, x.long()),
    "bitwise_left_shift.Tensor_Scalar": lambda x: _A.bitwise_left_shift.Tensor_Scalar(x.long(), 1),
    "xlogy.Scalar_Self": lambda x: _A.xlogy.Scalar_Self(2.0, x),
    "special_zeta.self_scalar": lambda x: _A.special_zeta.self_scalar(2.0, x),
    "chebyshev_polynomial_t.x_scalar": lambda x: _A.special_chebyshev_polynomial_t.x_scalar(0.5, x),
    "hermite_polynomial_h.n_scalar": lambda x: _A.special_hermite_polynomial_h.n_scalar(x, 3),
    "pow.Scalar": lambda x: torch.pow(2.0, x), "float_power.Scalar": lambda x: torch.float_power(2, x),
    "pow.Tensor_Scalar": lambda x: x ** 2, "lerp.Scalar": lambda x: x.lerp(x, 0.3),
    "abs": torch.abs, "logical_not": torch.logical_not, "square": torch.square, "isinf": torch.isinf,
    "deg2rad": torch.deg2rad, "rad2deg": torch.rad2deg, "clip": lambda x: torch.clip(x, -1, 1),
    "relu6": torch.nn.functional.relu6, "hardtanh": torch.nn.functional.hardtanh,
    "rrelu": lambda x: torch.nn.functional.rrelu(x, training=False), "frexp": lambda x: torch.frexp(x)[1],
    "mvlgamma": lambda x: torch.mvlgamma(x.abs() + 2, 2), "masked_fill": lambda x: x.masked_fill(x > 0, 1.0),
    "nan_to_num": torch.nan_to_num, "tril": torch.tril, "triu": torch.triu,
    "log_softmax": lambda x: x.log_softmax(-1), "where_number": lambda x: torch.where(x > 0, x, 0.0),
}


@pytest.mark.parametrize("name", sorted(_NUMBER_OVERLOADS))
def test_results_of_number_overloads_and_composites_are_laid_out_as_on_cpu(name):
    """The Scalar overloads wrap their number as a 0-dim operand on CPU (no
    fast set-up: the result follows the input's strides, size-1 dims
    included); a Scalar parameter (lerp's weight, pow's exponent) does not;
    composites are laid out as the ops CPU makes them of."""
    fn = _NUMBER_OVERLOADS[name]
    for shape, strides in _SIZE_ONE_LAYOUTS + [((4, 3), (1, 4))]:
        x = _with_strides(shape, strides)
        if name in ("tril", "triu") and x.dim() < 2:
            continue
        want, got = fn(x), fn(x.to("tpu"))
        assert got.stride() == want.stride(), (shape, strides, want.stride(), got.stride())
        assert_same(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.strict_eager_only  # (the results' layouts: the same in every mode)
def test_fft_results_are_laid_out_as_on_cpu():
    """CPU (MKL) transforms the dims in order of the input's strides, the
    halved dim of a real transform innermost, the others outermost in the
    order its partition leaves them: random shapes, layouts and dims of
    _fft_r2c, _fft_c2c and _fft_c2r against CPU (plain rfftn of a contiguous
    tensor differed before). The halved dim is the last one given, not the
    highest (a wrong shape before), and 4 or 5 dims compile (an XLA error
    before)."""
    import random

    rng = random.Random(0)
    for _ in range(60):
        nd = rng.randint(1, 4)
        shape = [rng.choice([1, 2, 3, 5]) for _ in range(nd)]
        perm = list(range(nd))
        rng.shuffle(perm)
        x = _t(*shape).permute(perm).contiguous().permute([perm.index(i) for i in range(nd)])
        dim = rng.sample(range(nd), rng.randint(1, nd))
        xc = torch.complex(x, x.flip(0))
        last = rng.choice([2 * (shape[dim[-1]] - 1), 2 * shape[dim[-1]] - 1])
        calls = [lambda t: torch._fft_r2c(t, dim, 0, True), lambda t: torch._fft_r2c(t, dim, 1, False)]
        ccalls = [lambda t: torch._fft_c2c(t, dim, 2, True)]
        if last > 0:
            ccalls.append(lambda t: torch._fft_c2r(t, dim, 0, last))
        for inp, fns in ((x, calls), (xc, ccalls)):
            for fn in fns:
                want, got = fn(inp), fn(inp.to("tpu"))
                assert got.stride() == want.stride(), (tuple(inp.shape), inp.stride(), dim, want.stride(), got.stride())
                assert_same(got, want, rtol=1e-4, atol=1e-4)
    # More than 3 dims (stablehlo.fft's most): successive transforms.
    x = _t(2, 3, 2, 4, 5)
    for fn in (torch.fft.fftn, lambda t: torch.fft.rfftn(t, norm="forward"),
               lambda t: torch.fft.irfftn(torch.fft.rfftn(t), s=t.shape, norm="ortho"),
               lambda t: torch.fft.ifftn(t, dim=(4, 0, 2, 1))):
        want, got = fn(x), fn(x.to("tpu"))
        assert got.stride() == want.stride(), (want.stride(), got.stride())
        assert_same(got, want, rtol=1e-4, atol=1e-4)
    # Through the public API, on contiguous inputs.
    x = _t(5, 6, 7)
    for fn in (torch.fft.rfftn, torch.fft.rfft2, lambda t: torch.fft.hfft2(t, dim=(0, 1)), torch.fft.irfftn):
        inp = x if fn is not torch.fft.irfftn else torch.fft.rfftn(x)
        want, got = fn(inp), fn(inp.to("tpu"))
        assert got.stride() == want.stride(), (want.stride(), got.stride())


@pytest.mark.parametrize("shape", [(5, 5), (2, 4, 3), (3, 2), (4, 1)])
def test_geqrf_is_column_major_as_lapack_writes_it(shape):
    # geqrf has no meta kernel; CPU's a is LAPACK's column-major matrix.
    x = _t(*shape)
    (a, tau), (ta, ttau) = torch.geqrf(x), torch.geqrf(x.to("tpu"))
    assert ta.stride() == a.stride() and ttau.stride() == tau.stride()
    assert_same(ta, a, rtol=1e-4, atol=1e-4)


_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("channels_last", ["input", "weight"])
def test_convolution_results_and_gradients_are_laid_out_as_on_cpu(channels_last, dims, transposed, dtype):
    """A 2-d or 3-d convolution's output and its input and weight gradients
    are in the memory format of the backend CPU chooses: channels-last when
    the input or the weight is (oneDNN, the 2-d fallbacks), contiguous for
    the 3-d fallback (float64). The meta kernels say contiguous always.
    bfloat16 values are compared with the float64 convolution of the same
    rounded inputs: CPU's own bfloat16 kernel rounds otherwise by machine
    (oneDNN's on an AVX2-only CPU was 7 ulps from ours, 275 from float64)."""
    fmt = _CHANNELS_LAST[dims + 2]

    def run(x, w):
        x, w = x.detach(), w.detach()
        if channels_last == "input":
            x = x.to(memory_format=fmt)
        else:
            w = w.to(memory_format=fmt)
        x.requires_grad_()
        w.requires_grad_()
        y = torch.ops.aten.convolution(x, w, None, [1] * dims, [1] * dims, [1] * dims, transposed, [0] * dims, 2)
        y.backward(torch.ones_like(y))
        return y.detach(), x.grad, w.grad

    def written_through_a_reshape(y):
        # A reshape of a channels-last result copies on CPU: the write must
        # not reach y (on tpu it would if y were contiguous).
        before = y.clone()
        y.reshape(-1).add_(1)
        return not torch.equal(y.cpu(), before.cpu())

    x = _t(2, 4, *([5] * dims)).to(dtype)
    w = _t(4, 2, *([3] * dims), seed=1).to(dtype)
    got, want = run(x.to("tpu"), w.to("tpu")), run(x, w)
    for g, c in zip(got, want):
        assert g.stride() == c.stride(), (g.stride(), c.stride())
    if dtype == torch.bfloat16:  # (a sum of at most batch * x's positions products for every result element)
        assert_close_to_float64_reference(got, run, (x, w), sum_of_products=True, terms=x.numel() // x.shape[1])
    else:
        assert_same(got, want, rtol=1e-4, atol=1e-4)
    assert written_through_a_reshape(got[0]) == written_through_a_reshape(want[0])


@pytest.mark.parametrize("x", [0.0, 1.0, [1.0, 1.0, 0.0], [0.0, 0.0], "zeros23", "eye2", [[1.0, 0.0, 0.0]], "zeros03"],
                         ids=str)
def test_nonzero_is_laid_out_column_by_column_as_on_cpu(x):
    """CPU's nonzero is [count, rank] with strides (1, count), also for a
    count or rank of 0 or 1 (0-dim inputs included)."""
    t = {"zeros23": torch.zeros(2, 3), "eye2": torch.eye(2), "zeros03": torch.zeros(0, 3)}.get(x) \
        if isinstance(x, str) else torch.tensor(x)
    want = torch.nonzero(t)
    got = torch.nonzero(t.to("tpu"))
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    assert_same(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("order", ["bool_first", "bool_second"])
def test_a_bool_times_nan_or_inf_is_nan_as_on_cpu(dtype, order):
    """false * nan and false * inf are nan (and false * -3 is -0.0): XLA's
    rewrite of convert(pred) * x into a select must not change that."""
    b = torch.tensor([True, False, True, False, False])
    for x in (torch.tensor(float("nan"), dtype=dtype), torch.tensor(float("inf"), dtype=dtype),
              torch.tensor([-3.0, float("-inf"), 2.0, float("nan"), -0.5], dtype=dtype)):
        args = (b, x) if order == "bool_first" else (x, b)
        want = torch.mul(*args)
        got = torch.mul(*[a.to("tpu") for a in args])
        assert_same(got, want)
        finite = ~want.isnan()  # (a NaN's sign is not specified)
        assert torch.equal(got.cpu().signbit()[finite], want.signbit()[finite])


_SIGNED_ZEROS = {
    "floor_divide": lambda a, b: torch.floor_divide(a, b),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": lambda a, b: torch.remainder(a, b),
    "fmod": lambda a, b: torch.fmod(a, b),
    "sign": lambda a, b: torch.sign(a),
    "sgn": lambda a, b: torch.sgn(a),
    "softshrink": lambda a, b: torch.nn.functional.softshrink(a, 0.5),
    "hardshrink": lambda a, b: torch.nn.functional.hardshrink(a, 0.5),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("name", sorted(_SIGNED_ZEROS))
def test_zeros_and_nans_of_results_are_cpus(name, dtype):
    """A zero result has CPU's sign and a NaN input gives CPU's NaN or number:
    0 // -2 is -0.0 (atan2 of it is -pi), sign(-0.0) is +0, softshrink keeps
    -0.0 and NaN inside its band. The fuzzer found floor_divide's through
    atan2 (program 14915 of seed 9200000)."""
    v = [-0.0, 0.0, -0.25, 0.25, -3.0, 3.0, 1e-30, -1e-30, float("nan"), float("inf")]
    a = torch.tensor(v, dtype=dtype).repeat_interleave(len(v))
    b = torch.tensor(v, dtype=dtype).repeat(len(v))
    want = _SIGNED_ZEROS[name](a, b)
    got = _SIGNED_ZEROS[name](a.to("tpu"), b.to("tpu"))
    assert_same(got, want)
    if name != "softshrink":  # (CPU's own kernels differ: -0 or +0 inside the band)
        finite = ~want.isnan()  # (a NaN's sign is not specified)
        assert torch.equal(got.cpu().signbit()[finite], want.signbit()[finite])
        torch.testing.assert_close(torch.atan2(got, got).cpu(), torch.atan2(want, want), equal_nan=True)


_REDUCED_FLOAT_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "atan2": torch.atan2,
    "fmod": torch.fmod, "remainder": torch.remainder, "hypot": torch.hypot, "floor_divide": torch.floor_divide,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"), "pow": torch.pow,
    "copysign": torch.copysign, "nextafter": torch.nextafter, "xlogy": torch.xlogy,
    "xlog1py": torch.special.xlog1py, "logaddexp": torch.logaddexp, "logaddexp2": torch.logaddexp2,
    "maximum": torch.maximum, "fmax": torch.fmax, "ldexp": torch.ldexp,
    "addcmul": lambda a, b: torch.addcmul(b, b, a, value=0.3),
    "addcdiv": lambda a, b: torch.addcdiv(b, a, b, value=0.3),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(_REDUCED_FLOAT_BINARY))
def test_a_wider_scalar_meets_a_reduced_float_tensor_as_on_cpu(name, dtype):
    """bfloat16 and half results: a 0-dim float32 tensor or a Python float is
    rounded to the result type before the arithmetic (CPU's TensorIterator
    casts every operand to the common dtype), except the right operand of mul
    and div, which CPU's kernels take unrounded; xlogy, xlog1py and nextafter
    compute in the tensor's own type. The strict fuzz run of seed 9300000
    found remainder's (a float32 amax meeting a bfloat16 tensor)."""
    g = torch.Generator().manual_seed(1)
    t = (torch.randn(96, generator=g) * 3).to(dtype)
    fn = _REDUCED_FLOAT_BINARY[name]
    for v in [1.2345678, -0.7654321, 3.1415927, 0.1]:
        zero_dim = torch.tensor(v)
        cases = [((zero_dim, t), (zero_dim.to("tpu"), t.to("tpu"))),
                 ((t, zero_dim), (t.to("tpu"), zero_dim.to("tpu"))),
                 ((t, t.flip(0).abs()), (t.to("tpu"), t.flip(0).abs().to("tpu")))]
        if name in ("add", "sub", "mul", "div", "remainder", "floor_divide", "pow", "xlogy", "xlog1py"):
            cases += [((t, v), (t.to("tpu"), v)), ((v, t), (v, t.to("tpu")))]
        for cpu_args, tpu_args in cases:
            try:
                want = fn(*cpu_args)
            except (RuntimeError, TypeError):
                continue
            assert_same(fn(*tpu_args), want, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("shapes", [((3,), (2, 3), (2, 3)), ((4, 1), (4, 5), (4, 5)), ((1, 3), (4, 3), (3,)),
                                    ((2, 1, 3), (2, 4, 3), (2, 4, 3))], ids=str)
def test_masked_fill_into_an_expanded_tensor_writes_as_cpu(dtype, shapes):
    """CPU (with a deprecation warning) fills a location wherever any of
    its aliases is masked; so does tpu, in every mode."""
    base_shape, expanded, mask_shape = shapes
    g = torch.Generator().manual_seed(0)
    base = (torch.randn(base_shape, generator=g) * 3).to(dtype)
    mask = torch.rand(mask_shape, generator=g) < 0.4
    values = [True] if dtype == torch.bool else [1.5, 0] + ([float("nan")] if dtype.is_floating_point else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for value in values:
            want = base.clone()
            want.expand(expanded).masked_fill_(mask, value)
            got = base.to("tpu")
            got.expand(expanded).masked_fill_(mask.to("tpu"), value)
            assert_same(got, want)
            want, got = base.clone(), base.to("tpu")  # tensor[mask] = scalar, and an index
            want.expand(expanded)[mask.expand(expanded)] = value
            got.expand(expanded)[mask.expand(expanded).to("tpu")] = value
            assert_same(got, want)
            want, got = base.clone(), base.to("tpu")
            want.expand(expanded)[torch.tensor([0])] = value
            got.expand(expanded)[torch.tensor([0], device="tpu")] = value
            assert_same(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_of_varying_values_into_an_expanded_tensor_writes_as_cpu(dtype, accumulate):
    """CPU writes each value in turn where its index points, aliases
    included: a shared location keeps the last value written to any of its
    aliases (accumulate: the sum of them all). Indexed and sliced expanded
    dims, masks, duplicates, non-adjacent indices, every mode."""
    g = torch.Generator().manual_seed(1)

    def vals(*shape):
        v = torch.randint(-5, 6, shape, generator=g)
        return (v > 0) if dtype == torch.bool else v.to(dtype)

    def ix(*values):
        return torch.tensor(values, dtype=torch.long)

    cases = [  # (base shape, expanded shape, indices (None: a full slice), values)
        ((3,), (4, 3), [ix(2, 0, 2)], vals(3, 3)),
        ((3,), (4, 3), [None, ix(0, 2, 0)], vals(4, 3)),
        ((3, 1), (3, 4), [ix(0, 2, 0), ix(1, 3, 0)], vals(3)),
        ((3, 1), (3, 4), [torch.tensor([True, False, True])], vals(2, 4)),
        ((1, 3, 1), (2, 3, 4), [ix(1, 0, 1), None, ix(3, 2, 0)], vals(3, 3)),
        ((2, 1), (2, 5), [None, ix(4, -1, 0)], vals(1, 3)),  # broadcast values, a negative index
        ((3,), (4, 3), [ix(1)], vals(3)),
        ((3,), (4, 3), [ix()], vals(0, 3)),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for base_shape, shape, indices, values in cases:
            base = vals(*base_shape)
            want = base.clone()
            torch.ops.aten.index_put_(want.expand(shape), indices, values, accumulate)
            got = base.to("tpu")
            torch.ops.aten.index_put_(got.expand(shape), [None if i is None else i.to("tpu") for i in indices],
                                      values.to("tpu"), accumulate)
            assert_same(got, want)
        if not accumulate:  # the same through setitem
            base, values = vals(3), vals(4, 2)
            want, got = base.clone(), base.to("tpu")
            want.expand(4, 3)[:, ix(0, 2)] = values
            got.expand(4, 3)[:, ix(0, 2).to("tpu")] = values.to("tpu")
            assert_same(got, want)


def test_copy_of_a_view_onto_the_same_view_is_allowed_and_changes_nothing():
    """CPU's copy_ returns at once when source and destination are the same
    view (same storage, offset, sizes, strides, dtype): an expanded tensor
    copied onto itself included, which any other copy into it refuses."""
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        base = torch.arange(6).to(dtype).view(1, 6)[:, ::2]
        x = base.to("tpu")
        x.expand(3, 3).copy_(x.expand(3, 3))
        x[:, 1:].copy_(x[:, 1:])
        assert_same(x, base)
        with pytest.raises(RuntimeError, match="single memory location"):
            x.expand(3, 3).copy_(x.expand(3, 3).clone())


def test_assert_async_is_a_device_check():
    """torch._assert_async (torch.compile's runtime assertions) checks on the
    device: synchronize raises CPU's RuntimeError; debug eager raises at the
    call; more than one value is refused at once."""
    x = torch.ones(2, device="tpu")
    torch._assert_async((x > 0).all())
    torch._assert_async(x.sum(), "never")
    torch.tpu.synchronize()
    with torch_tpu.execution_mode("strict"):
        torch._assert_async((x > 5).all(), "x must exceed 5")
    with pytest.raises(RuntimeError, match="x must exceed 5"):
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        torch._assert_async(x)
    with torch_tpu.execution_mode("debug"):
        with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value, but got zero"):
            torch._assert_async(x.sum() * 0)


_INTERRUPTED = r"""
import os, signal, sys, threading, time, torch, torch_tpu


def long_program(n):
    x = torch.randn(n, n, device="tpu") * 0.01
    with torch_tpu.execution_mode("fused"):  # one program of 300 matmuls
        y = x
        for _ in range(300):
            y = (y @ x).tanh()
        s = y.sum()
    done = torch.tpu.Event()
    done.record()  # starts the program (compiling it first)
    return s, done


def ctrl_c_during(s, done):
    # Ctrl-C every 50 ms from the moment s.item() is called until the main
    # thread has caught a KeyboardInterrupt: one that lands before the wait
    # has begun is not the wait's to raise (it clears the flag), a later one
    # is. Conditions, not durations: whether the program was still running
    # when the first Ctrl-C was sent, and when the interrupt was caught.
    entered, caught, running_at_first = threading.Event(), [], []

    def sender():
        entered.wait()
        running_at_first.append(not done.query())
        while not caught:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)

    def profile(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") == "item":
            entered.set()

    thread = threading.Thread(target=sender)
    thread.start()
    outcome = "finished"
    try:
        sys.setprofile(profile)
        try:
            s.item()
        finally:
            sys.setprofile(None)
    except KeyboardInterrupt:
        outcome = "interrupted while the program ran" if not done.query() else "interrupted after the program"
    caught.append(outcome)
    while True:  # the KeyboardInterrupt of a Ctrl-C sent before the sender saw `caught`
        try:
            thread.join()
            time.sleep(0.1)
            break
        except KeyboardInterrupt:
            pass
    return outcome, running_at_first[0]


for n in (1200, 2400, 4800):
    s, done = long_program(n)
    outcome, running = ctrl_c_during(s, done)
    print(n, outcome, "(the program was running at the first Ctrl-C)" if running else "(done before the first Ctrl-C)")
    if running:  # (else a machine fast enough to finish first: more work)
        break
assert running and outcome == "interrupted while the program ran", outcome
assert (torch.ones(2, device="tpu") + 1).cpu().tolist() == [2.0, 2.0]  # the device still works
print("ok")
"""


def test_ctrl_c_interrupts_a_wait_for_the_device_with_keyboard_interrupt():
    """Ctrl-C while the host waits for a long program raises KeyboardInterrupt
    from that wait (a user's `except KeyboardInterrupt` catches it) instead of
    when the program finishes; the process and the device stay usable. The
    script checks conditions (the program still running when the interrupt
    is caught), not durations: a timer of a fixed delay fired after a fast
    machine had finished the program (or during its compilation)."""
    out = run_python(_INTERRUPTED, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_var_and_std_of_extreme_magnitudes_are_cpus(dtype):
    """CPU accumulates var/std in double: std of values near 1e20 is finite
    (a float32 square is inf) and near 1e-30 is not 0 (a float32 square
    underflows). The fused fuzz run of seed 9800000 found std of a bfloat16
    exp(cumprod(...)) inf where CPU's was 2.7e20 (program 19267)."""
    cases = [[1e20, -1e20, 3e19], [5.4e20, 1.0, 3.0, 0.5], [1e-30, 2e-30, 5e-31], [1.0, 2.0, 3.5],
             [3e38, 3e38, -3e38], [float("inf"), 1.0, 2.0], [float("nan"), 1.0], [5.0, 5.0, 5.0]]
    for vals in cases:
        x = torch.tensor(vals, dtype=dtype)
        for fn in (torch.std, torch.var, lambda t: torch.std_mean(t)[0], lambda t: torch.var(t, correction=0)):
            assert_same(fn(x.to("tpu")), fn(x), rtol=1e-5, atol=0)
    x = torch.tensor([[1e20, 2e20, -1e20], [1e-30, 3e-30, 2e-30]], dtype=dtype).t()
    assert_same(x.to("tpu").std(0), x.std(0), rtol=1e-5, atol=0)


def test_var_and_std_of_complex_tensors_are_real():
    # The variance of the real and imaginary parts, summed, in the real
    # dtype (an internal error before); the mean stays complex.
    x = torch.randn(4, 5, dtype=torch.complex64)
    assert_same(x.to("tpu").var(1), x.var(1), rtol=1e-5, atol=1e-6)
    assert_same(x.to("tpu").std(), x.std(), rtol=1e-5, atol=1e-6)
    v, m = torch.var_mean(x.to("tpu"), 0)
    want_v, want_m = torch.var_mean(x, 0)
    assert_same(v, want_v, rtol=1e-5, atol=1e-6)
    assert_same(m, want_m, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["flip", "nan_to_num", "hardtanh", "deg2rad", "frexp"])
def test_empty_like_results_of_strided_inputs_keep_the_inputs_order(name):
    # empty_like(self) of a tensor that is not dense (a slice, a diagonal, a
    # permuted slice) is dense in self's order of strides on CPU, not
    # contiguous. The fuzzer's run found flip of a diagonal and of a permuted
    # strided tensor (programs 1035 and 6510 of seed 9400000).
    fn = {"flip": lambda t: t.flip(0), "nan_to_num": torch.nan_to_num, "hardtanh": torch.nn.functional.hardtanh,
          "deg2rad": torch.deg2rad, "frexp": lambda t: torch.frexp(t)[0]}[name]
    views = (lambda b: b[:24].view(4, 6)[:, ::2], lambda b: b.view(3, 4, 5).permute(2, 0, 1)[::2],
             lambda b: b.as_strided((2, 3), (1, 12)), lambda b: b.as_strided((2, 4, 3), (8, 2, 16)))
    for view in views:  # (taken on each device: a copy to tpu would be dense)
        base = _t(60)
        x = view(base)
        want, got = fn(x), fn(view(base.to("tpu")))
        assert got.stride() == want.stride(), (x.shape, x.stride(), want.stride(), got.stride())
        assert_same(got, want)
