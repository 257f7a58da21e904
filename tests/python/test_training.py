"""Training on tpu: modules, optimizers, mixed precision and checkpoints.

Every check runs the same thing on CPU PyTorch and on tpu from the same
weights and data and compares the results; the end-to-end parity runs are in
test_parity.py.
"""

import contextlib
import copy
import io
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same, assert_trained_close


def _fresh(seed=0):
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed + 1)


# ---- modules: forward and gradients against CPU ------------------------------------------

def _rand(*shape, g):
    return torch.randn(*shape, generator=g)


def _module_cases():
    g = _fresh()
    x = _rand(6, 8, g=g)
    seq = _rand(3, 5, 8, g=g)
    img = _rand(2, 3, 9, 9, g=g)
    ids = torch.randint(0, 10, (3, 5), generator=g)
    ids[0, 0] = 0
    return {
        "linear": (nn.Linear(8, 5), [x]),
        "linear_noncontiguous": (nn.Linear(6, 5), [x.t()]),
        "linear_zero_batch": (nn.Linear(8, 5), [x[:0]]),
        "conv1d": (nn.Conv1d(8, 4, 3, padding=1), [seq.transpose(1, 2)]),
        "conv2d": (nn.Conv2d(3, 4, 3, stride=2, padding=1, dilation=1), [img]),
        "conv2d_grouped": (nn.Conv2d(4, 6, 3, groups=2, bias=False), [_rand(2, 4, 7, 7, g=g)]),
        "conv_transpose2d": (nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), [img]),
        "batch_norm2d": (nn.BatchNorm2d(3), [img]),
        "batch_norm1d_eval": (nn.BatchNorm1d(8).eval(), [x]),
        "layer_norm": (nn.LayerNorm(8), [seq]),
        "group_norm": (nn.GroupNorm(2, 4), [_rand(3, 4, 5, g=g)]),
        "rms_norm": (nn.RMSNorm(8), [seq]),
        "embedding": (nn.Embedding(10, 4, padding_idx=0), [ids]),
        "dropout_eval": (nn.Dropout(0.5).eval(), [x]),
        "gelu": (nn.GELU(), [x]),
        "gelu_tanh": (nn.GELU(approximate="tanh"), [x]),
        "silu": (nn.SiLU(), [x]),
        "relu": (nn.ReLU(), [x]),
        "softmax": (nn.Softmax(dim=-1), [seq]),
        "mha": (nn.MultiheadAttention(8, 2, batch_first=True), [seq, seq * 0.5, seq + 1]),
        "mha_causal_mask": (nn.MultiheadAttention(8, 2), [seq, seq, seq, None, True,
                                                         nn.Transformer.generate_square_subsequent_mask(3)]),
        "transformer_layer": (nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), [seq]),
        "lstm": (nn.LSTM(8, 6, num_layers=2, batch_first=True), [seq]),
        "lstm_proj_bidirectional": (nn.LSTM(8, 6, proj_size=3, bidirectional=True), [seq]),
        "lstm_unbatched_no_bias": (nn.LSTM(8, 6, bias=False), [seq[0]]),
        "gru_bidirectional": (nn.GRU(8, 6, batch_first=True, bidirectional=True), [seq]),
        "gru_two_layers": (nn.GRU(8, 6, num_layers=2), [seq]),
        "lstm_cell": (nn.LSTMCell(8, 6), [x]),
        "gru_cell": (nn.GRUCell(8, 6), [x]),
    }


MODULES = _module_cases()


def _first(y):
    return y if torch.is_tensor(y) else _first(y[0])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_forward_and_backward_match_cpu(name):
    module, inputs = MODULES[name]
    cpu = copy.deepcopy(module)
    dev = copy.deepcopy(module).to("tpu")

    def prepare(device):
        out = []
        for t in inputs:
            if torch.is_tensor(t) and t.is_floating_point():
                t = t.detach().clone().to(device).requires_grad_()
            elif torch.is_tensor(t):
                t = t.to(device)
            out.append(t)
        return out

    args_c, args_t = prepare("cpu"), prepare("tpu")
    y_c, y_t = _first(cpu(*args_c)), _first(dev(*args_t))
    assert_same(y_t, y_c.detach(), rtol=1e-4, atol=1e-5)
    # A loss that weights every output element differently.
    w = torch.linspace(-1, 1, y_c.numel()).reshape(y_c.shape)
    (y_c * w).sum().backward()
    (y_t * w.to("tpu")).sum().backward()
    for (pname, p_c), p_t in zip(cpu.named_parameters(), dev.parameters()):
        assert p_t.grad is not None, pname
        assert_same(p_t.grad, p_c.grad, rtol=1e-4, atol=1e-5)
    for a_c, a_t in zip(args_c, args_t):
        if torch.is_tensor(a_c) and a_c.requires_grad:
            assert_same(a_t.grad, a_c.grad, rtol=1e-4, atol=1e-5)
    for (bname, b_c), b_t in zip(cpu.named_buffers(), dev.buffers()):
        assert_same(b_t, b_c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss", ["cross_entropy", "cross_entropy_smoothing", "nll", "mse", "bce",
                                  "bce_with_logits"])
def test_losses_and_their_gradients_match_cpu(loss):
    g = _fresh()
    logits = _rand(7, 5, g=g)
    labels = torch.randint(0, 5, (7,), generator=g)
    probs = torch.rand(7, 5, generator=g)
    fns = {
        "cross_entropy": lambda z, d: F.cross_entropy(z, labels.to(d)),
        "cross_entropy_smoothing": lambda z, d: F.cross_entropy(z, labels.to(d), label_smoothing=0.1),
        "nll": lambda z, d: F.nll_loss(z.log_softmax(-1), labels.to(d), reduction="sum"),
        "mse": lambda z, d: F.mse_loss(z, probs.to(d)),
        "bce": lambda z, d: F.binary_cross_entropy(z.sigmoid(), probs.to(d)),
        "bce_with_logits": lambda z, d: F.binary_cross_entropy_with_logits(z, probs.to(d),
                                                                           pos_weight=torch.ones(5, device=d) * 2),
    }
    results = {}
    for d in ("cpu", "tpu"):
        z = logits.detach().clone().to(d).requires_grad_()
        out = fns[loss](z, d)
        out.backward()
        results[d] = (out, z.grad)
    assert_same(results["tpu"][0], results["cpu"][0].detach(), rtol=1e-5, atol=1e-6)
    assert_same(results["tpu"][1], results["cpu"][1], rtol=1e-5, atol=1e-6)


def test_dropout_in_training_masks_and_scales():
    torch.manual_seed(0)
    x = torch.ones(200, 200, device="tpu", requires_grad=True)
    y = F.dropout(x, p=0.3, training=True)
    y.sum().backward()
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.7) < 0.01
    nonzero = y[y != 0].cpu()
    torch.testing.assert_close(nonzero, torch.full_like(nonzero, 1 / 0.7))
    # The gradient uses the same mask and scale.
    torch.testing.assert_close(x.grad.cpu(), y.detach().cpu())
    # The same seed gives the same mask.
    torch.manual_seed(0)
    torch.testing.assert_close(F.dropout(torch.ones(200, 200, device="tpu"), p=0.3).cpu(), y.detach().cpu())


# ---- autograd features --------------------------------------------------------------------

@pytest.mark.parametrize("foreach", [True, False])
def test_clip_grad_norm_matches_cpu(foreach):
    g = _fresh()
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    x = _rand(5, 8, g=g)
    norms, grads = {}, {}
    for d in ("cpu", "tpu"):
        m = copy.deepcopy(model).to(d)
        (m(x.to(d)) * 10).pow(2).sum().backward()
        norms[d] = nn.utils.clip_grad_norm_(m.parameters(), max_norm=0.5, foreach=foreach)
        grads[d] = [p.grad for p in m.parameters()]
    assert_same(norms["tpu"], norms["cpu"], rtol=1e-5)
    for a, b in zip(grads["tpu"], grads["cpu"]):
        assert_same(a, b, rtol=1e-5, atol=1e-7)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(q) for q in grads["tpu"]]))
    assert abs(total.item() - 0.5) < 1e-4


def test_gradient_accumulation_matches_one_big_batch():
    g = _fresh()
    model = nn.Linear(8, 3).to("tpu")
    x, y = _rand(12, 8, g=g).to("tpu"), torch.randint(0, 3, (12,), generator=g).to("tpu")
    for xs, ys in zip(x.split(4), y.split(4)):
        (F.cross_entropy(model(xs), ys) / 3).backward()
    accumulated = model.weight.grad.clone()
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    assert_same(accumulated, model.weight.grad.cpu(), rtol=1e-5, atol=1e-7)


def test_requires_grad_detach_no_grad_inference_mode():
    w = torch.randn(3, 3, device="tpu").requires_grad_()
    assert w.requires_grad and w.is_leaf
    d = w.detach()
    assert not d.requires_grad and d.data_ptr() == w.data_ptr()
    with torch.no_grad():
        y = w * 2
    assert not y.requires_grad
    with torch.inference_mode():
        z = w + 1
    assert z.is_inference() and z.device.type == "tpu"
    with pytest.raises(RuntimeError, match="[Ii]nference"):
        (z * w).sum().backward()
    (w * w).sum().backward()
    assert_same(w.grad, 2 * w.detach().cpu())
    w.requires_grad_(False)
    assert not (w * 2).requires_grad


def test_tied_weights_stay_tied_after_to():
    """module.to("tpu") swaps parameter data in place, as for "cuda", so
    shared parameters (tied embeddings) stay one parameter."""
    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = nn.ModuleDict({"emb": emb, "head": head})
    p = model["emb"].weight
    model.to("tpu")
    assert model["head"].weight is model["emb"].weight is p
    assert p.device.type == "tpu"


# ---- optimizers -----------------------------------------------------------------------------

OPTIMIZERS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=1e-2)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
    "sgd_loop": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, foreach=False)),
    "sgd_fused": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, fused=True)),
    "adam": (torch.optim.Adam, dict(lr=1e-2)),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, weight_decay=1e-2)),
    "adam_loop": (torch.optim.Adam, dict(lr=1e-2, foreach=False)),
    "adam_fused": (torch.optim.Adam, dict(lr=1e-2, fused=True)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    "adamw_fused": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, fused=True)),
    "adamw_fused_tensor_lr": (torch.optim.AdamW, dict(lr=torch.tensor(1e-2), fused=True)),
    "adagrad": (torch.optim.Adagrad, dict(lr=1e-1)),
    "adagrad_fused": (torch.optim.Adagrad, dict(lr=1e-1, lr_decay=1e-2, weight_decay=1e-2, fused=True)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=1e-2)),
    "rmsprop_centered_momentum": (torch.optim.RMSprop, dict(lr=1e-2, momentum=0.9, centered=True)),
}


def _train_small(device, opt_cls, kw, steps=5, scheduler=False):
    g = _fresh()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
    opt = opt_cls(model.parameters(), **kw)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=steps) if scheduler else None
    losses = []
    for _ in range(steps):
        x, y = _rand(10, 8, g=g).to(device), torch.randint(0, 3, (10,), generator=g).to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        losses.append(loss.detach())
    return model, opt, torch.stack(losses)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_cpu(name):
    cls, kw = OPTIMIZERS[name]
    cpu_model, cpu_opt, cpu_losses = _train_small("cpu", cls, kw)
    tpu_model, tpu_opt, tpu_losses = _train_small("tpu", cls, kw)
    assert_same(tpu_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    # (RMSprop turned a 3e-9 difference in a 2e-5 gradient into 2.2e-6 in a
    # weight on one machine: a hundredth of an lr step bounds any element.)
    lr = float(kw["lr"])
    for p, q in zip(tpu_model.parameters(), cpu_model.parameters()):
        assert p.device.type == "tpu"
        assert_trained_close(p, q, any_atol=lr / 100)
    # The optimizer state lives on the device, as on CUDA.
    for state in tpu_opt.state.values():
        for key, v in state.items():
            if torch.is_tensor(v) and v.dim() > 0:
                assert v.device.type == "tpu", key


def test_lr_scheduler_matches_cpu():
    cpu = _train_small("cpu", torch.optim.SGD, dict(lr=0.01, momentum=0.9), steps=6, scheduler=True)
    tpu = _train_small("tpu", torch.optim.SGD, dict(lr=0.01, momentum=0.9), steps=6, scheduler=True)
    assert_same(tpu[2], cpu[2], rtol=1e-5, atol=1e-6)
    assert tpu[1].param_groups[0]["lr"] == cpu[1].param_groups[0]["lr"]


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD])
@torch_tpu.execution_mode("strict")  # one program per op: count them
def test_fused_step_is_one_program_updating_in_place(cls):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).to("tpu")
    kw = dict(momentum=0.9) if cls is torch.optim.SGD else {}
    opt = cls(model.parameters(), lr=1e-3, fused=True, **kw)
    model(torch.randn(16, 32, device="tpu")).sum().backward()
    opt.step()  # creates the state
    ptrs = [p.data_ptr() for p in model.parameters()]
    torch.tpu.synchronize()
    before_mem = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    before = torch_tpu.counters()
    opt.step()
    after = torch_tpu.counters()
    torch.tpu.synchronize()
    # Adam and AdamW also bump their step counters (one _foreach_add_).
    assert after["executions"] - before["executions"] == (1 if cls is torch.optim.SGD else 2)
    assert after["host_reads"] == before["host_reads"], "the optimizer step waited for the device"
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    # The parameters' and states' buffers were donated: no second copy.
    assert torch.tpu.memory_allocated() == before_mem
    assert torch.tpu.max_memory_allocated() == before_mem


def test_training_steps_never_wait_for_the_device():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 16, device="tpu"), torch.randint(0, 4, (8,), device="tpu")
    before = torch_tpu.counters()["host_reads"]
    for _ in range(3):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    if torch_tpu.get_execution_mode() != "debug":  # (debug eager reads every device-side check at once)
        assert torch_tpu.counters()["host_reads"] == before
    assert math.isfinite(loss.item())


# ---- mixed precision ----------------------------------------------------------------------------

def test_autocast_op_dtypes():
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    a, b = torch.randn(4, 8, device="tpu"), torch.randn(8, 3, device="tpu")
    img, w = torch.randn(1, 2, 5, 5, device="tpu"), torch.randn(3, 2, 3, 3, device="tpu")
    lin = nn.Linear(8, 3).to("tpu")
    with torch.autocast("tpu"):
        assert torch.is_autocast_enabled("tpu")
        assert (a @ b).dtype == torch.bfloat16
        assert lin(a).dtype == torch.bfloat16
        assert F.conv2d(img, w).dtype == torch.bfloat16
        h = a @ b
        assert h.softmax(-1).dtype == torch.float32
        assert h.sum().dtype == torch.float32
        assert F.layer_norm(h, (3,)).dtype == torch.float32
        assert F.cross_entropy(h, torch.zeros(4, dtype=torch.long, device="tpu")).dtype == torch.float32
        assert (h + 1).dtype == torch.bfloat16  # elementwise ops keep their input dtype
        assert torch.randn(2, device="tpu").dtype == torch.float32
    with torch.autocast("tpu", dtype=torch.float16):
        assert (a @ b).dtype == torch.float16
    with torch.autocast("tpu", enabled=False):
        assert (a @ b).dtype == torch.float32
    # The values are the float32 result rounded through bfloat16 inputs.
    with torch.autocast("tpu"):
        got = (a @ b).cpu()
    want = (a.cpu().bfloat16().float() @ b.cpu().bfloat16().float()).bfloat16()
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_autocast_gradients_are_float32_for_float32_parameters():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = model(torch.randn(4, 8, device="tpu"))
        loss = F.cross_entropy(out, torch.tensor([0, 1, 0, 1], device="tpu"))
    assert out.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())


def test_grad_scaler_unscales_and_skips_non_finite_steps():
    model = nn.Linear(4, 2).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("tpu", init_scale=1024.0, growth_interval=2)
    x = torch.randn(3, 4, device="tpu")
    w0 = model.weight.detach().cpu().clone()
    # A clean step: gradients are unscaled before the update.
    with torch.autocast("tpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    grad = model.weight.grad.detach().cpu().clone()
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(model.weight.detach().cpu(), w0 - 0.1 * grad)
    assert scaler.get_scale() == 1024.0
    # An infinite gradient: the step is skipped and the scale backs off.
    w1 = model.weight.detach().cpu().clone()
    opt.zero_grad()
    (model(x).sum() * float("inf")).backward()
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(model.weight.detach().cpu(), w1)
    assert scaler.get_scale() == 512.0
    # Two clean steps in a row grow it again.
    for _ in range(2):
        opt.zero_grad()
        scaler.scale(model(x).pow(2).mean()).backward()
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 1024.0


def test_device_amp_spellings_from_cuda_code():
    """torch.tpu.amp.autocast / GradScaler / custom_fwd / custom_bwd, as
    code written for torch.cuda.amp uses them once "cuda" becomes "tpu":
    deprecated aliases of torch.amp with the device filled in (a
    FutureWarning, as CUDA's say), training like the torch.amp spelling."""
    from torch.tpu.amp import GradScaler, autocast, custom_bwd, custom_fwd

    assert torch.tpu.amp.autocast is autocast
    torch.manual_seed(0)
    models = [nn.Linear(4, 2).to("tpu") for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    x = torch.randn(3, 4, device="tpu")
    with pytest.warns(FutureWarning, match=r"torch\.tpu\.amp\.GradScaler.*torch\.amp\.GradScaler\('tpu'"):
        old = GradScaler(init_scale=256.0, growth_interval=1)
    new = torch.amp.GradScaler("tpu", init_scale=256.0, growth_interval=1)
    for model, scaler, ctx in ((models[0], old, autocast), (models[1], new, lambda: torch.autocast("tpu"))):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            with pytest.warns(FutureWarning) if ctx is autocast else contextlib.nullcontext():
                cm = ctx()
            with cm:
                out = model(x)
                assert out.dtype == torch.bfloat16 and torch.is_autocast_enabled("tpu")
                loss = out.float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    assert old.get_scale() == new.get_scale() == 1024.0
    torch.testing.assert_close(models[0].weight.cpu(), models[1].weight.cpu(), rtol=0, atol=0)
    with pytest.warns(FutureWarning):
        with autocast(dtype=torch.float16):
            assert (x @ x.T).dtype == torch.float16

    class Scale(torch.autograd.Function):
        @staticmethod
        @custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, a):
            assert a.dtype == torch.float32 and not torch.is_autocast_enabled("tpu")
            return a * 2

        @staticmethod
        @custom_bwd
        def backward(ctx, g):
            return g * 2

    a = torch.ones(2, device="tpu", dtype=torch.bfloat16, requires_grad=True)
    with torch.autocast("tpu"):
        Scale.apply(a).sum().backward()
    assert_same(a.grad, torch.full((2,), 2.0, dtype=torch.bfloat16))


def test_grad_scaler_ops_match_cpu():
    grads = [torch.tensor([1.0, 2.0]), torch.tensor([[3.0, float("nan")]]), torch.tensor([4.0])]
    for bad in (False, True):
        cur = [t.clone() if bad else t.nan_to_num() for t in grads]
        res = {}
        for d in ("cpu", "tpu"):
            ts = [t.clone().to(d) for t in cur]
            found = torch.zeros(1, device=d)
            torch._amp_foreach_non_finite_check_and_unscale_(ts, found, torch.tensor([0.5], device=d))
            res[d] = (ts, found)
        for a, b in zip(res["tpu"][0], res["cpu"][0]):
            assert_same(a, b)
        assert_same(res["tpu"][1], res["cpu"][1])
    for found_inf, tracker in ((0.0, 0), (0.0, 2), (1.0, 2)):
        res = {}
        for d in ("cpu", "tpu"):
            scale = torch.tensor([8.0], device=d)
            growth = torch.tensor([tracker], dtype=torch.int32, device=d)
            torch._amp_update_scale_(scale, growth, torch.tensor([found_inf], device=d), 2.0, 0.5, 3)
            res[d] = (scale, growth)
        assert_same(res["tpu"][0], res["cpu"][0])
        assert_same(res["tpu"][1], res["cpu"][1])


# ---- checkpoints ----------------------------------------------------------------------------

def _trained_model_and_optimizer():
    model, opt, _ = _train_small("tpu", torch.optim.AdamW, dict(lr=1e-2), steps=2)
    return model, opt


def test_save_and_load_tensors_modules_and_optimizer_state(tmp_path):
    model, opt = _trained_model_and_optimizer()
    view = torch.arange(10.0, device="tpu")[2:7:2]
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "view": view}, path)

    loaded = torch.load(path)
    assert loaded["view"].device == torch.device("tpu:0")
    assert_same(loaded["view"], view.cpu())
    for k, v in model.state_dict().items():
        assert loaded["model"][k].device.type == "tpu"
        assert_same(loaded["model"][k], v.cpu())
    for pid, st in opt.state_dict()["state"].items():
        for key, v in st.items():
            assert torch.equal(loaded["opt"]["state"][pid][key].cpu(), v.cpu())

    # map_location moves everything to the CPU, and back onto tpu.
    on_cpu = torch.load(path, map_location="cpu")
    assert all(v.device.type == "cpu" for v in on_cpu["model"].values())
    cpu_path = tmp_path / "cpu.pt"
    torch.save(on_cpu, cpu_path)
    back = torch.load(cpu_path, map_location="tpu")
    assert all(v.device.type == "tpu" for v in back["model"].values())

    # Resuming: a fresh model and optimizer continue exactly where the saved ones were.
    fresh = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to("tpu")
    fresh.load_state_dict(loaded["model"])
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    fresh_opt.load_state_dict(loaded["opt"])
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 0])
    for m, o in ((model, opt), (fresh, fresh_opt)):
        o.zero_grad()
        F.cross_entropy(m(x.to("tpu")), y.to("tpu")).backward()
        o.step()
    for p, q in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach().cpu())


def test_saved_location_tag_is_tpu():
    buf = io.BytesIO()
    torch.save(torch.ones(2, device="tpu"), buf)
    seen = []

    def record(storage, location):
        seen.append(location)
        return storage

    buf.seek(0)
    torch.load(buf, map_location=record)
    assert seen == ["tpu:0"]


def test_safetensors_round_trip_through_cpu(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    model, _ = _trained_model_and_optimizer()
    path = tmp_path / "model.safetensors"
    safetensors.save_file({k: v.cpu() for k, v in model.state_dict().items()}, str(path))
    loaded = {k: v.to("tpu") for k, v in safetensors.load_file(str(path)).items()}
    fresh = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to("tpu")
    fresh.load_state_dict(loaded)
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k].cpu(), v.cpu())


@pytest.mark.parametrize("cls,kw", [
    (torch.optim.Adam, dict(lr=1e-2)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, maximize=True)),
    (torch.optim.Adam, dict(lr=1e-2, amsgrad=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=1e-2)),
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.Adagrad, dict(lr=0.1, maximize=True)),
], ids=["adam", "adamw_maximize", "adam_amsgrad", "sgd_momentum", "sgd", "adagrad_maximize"])
def test_fused_optimizer_under_grad_scaler_unscales_gradients_like_cpu(cls, kw):
    """A fused step given the scaler's grad_scale/found_inf unscales the
    gradients in place (CPU and CUDA do), and leaves them scaled on a
    skipped step; parameters, state and gradients match CPU step by step."""
    results = {}
    for device in ("cpu", "tpu"):
        g = _fresh()
        model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2)).to(device)
        opt = cls(model.parameters(), fused=True, **kw)
        scaler = torch.amp.GradScaler(device, init_scale=256.0, growth_interval=1)
        trace = []
        for step in range(4):
            x = _rand(5, 6, g=g).to(device)
            opt.zero_grad()
            loss = model(x).pow(2).mean() * (float("inf") if step == 2 else 1.0)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            trace.append([p.grad.detach().cpu().clone() for p in model.parameters()])
            trace.append([p.detach().cpu().clone() for p in model.parameters()])
            trace.append(torch.tensor(scaler.get_scale()))
        results[device] = trace
    for got, want in zip(results["tpu"], results["cpu"]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("cls,kw", [
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, fused=True)),
    (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, fused=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, fused=True)),
    (torch.optim.AdamW, dict(lr=1e-2, foreach=True)),
], ids=["adamw_fused", "adam_amsgrad_fused", "sgd_fused", "adamw_foreach"])
def test_resuming_from_a_checkpoint_is_bit_identical_to_continuing(cls, kw):
    """torch.load writes storages as raw bytes; tensors laid over them take
    their typed values, so the resumed steps run the programs the training
    loop ran and round exactly as it did."""
    def make():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("tpu")
        return model, cls(model.parameters(), **kw)

    g = _fresh()
    data = [_rand(4, 8, g=g).to("tpu") for _ in range(7)]

    def step(model, opt, x):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    model, opt = make()
    for x in data[:4]:
        step(model, opt, x)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    for x in data[4:]:
        step(model, opt, x)
    resumed, ropt = make()
    buf.seek(0)
    ck = torch.load(buf)
    assert ck["opt"]["state"][0]["exp_avg" if "exp_avg" in ck["opt"]["state"][0] else "momentum_buffer"].device.type == "tpu"
    resumed.load_state_dict(ck["model"])
    ropt.load_state_dict(ck["opt"])
    del ck
    for x in data[4:]:
        step(resumed, ropt, x)
    for p, q in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach().cpu())
    for p, q in zip(opt.state.values(), ropt.state.values()):
        for k in p:
            assert torch.equal(torch.as_tensor(p[k]).cpu(), torch.as_tensor(q[k]).cpu()), k


def test_tensor_over_a_loaded_byte_storage_reads_its_values():
    """A tensor set over bytes copied to the device (as torch.load does) and
    views of other dtypes over the same storage see the same bytes."""
    src = torch.randn(3, 5)
    storage = src.untyped_storage().to(device="tpu")
    t = torch.tensor([], device="tpu").set_(storage, 0, (3, 5), (5, 1))
    assert_same(t, src)
    as_int = torch.tensor([], dtype=torch.int32, device="tpu").set_(storage, 0, (15,), (1,))
    assert_same(as_int, src.view(-1).view(torch.int32))
    assert_same(t[1:, 2:], src[1:, 2:])
    t.add_(1)
    assert_same(as_int, (src + 1).view(-1).view(torch.int32))
