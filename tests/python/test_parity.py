"""Models train on tpu exactly as on CPU.

Each model trains for STEPS steps on tpu and on CPU from the same weights and
the same batches; the float32 losses must agree at every step. A bfloat16
autocast run must converge, and Hugging Face generation must pick the same
tokens as on CPU. The Hugging Face models are built from tiny configs with
random weights (no download).
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from torch_tpu.testing.models import CNN, GPT, MLP, GPTConfig

STEPS = 20
# Relative tolerance of the per-step float32 losses. Both sides compute in
# float32; summation orders differ, and 20 optimizer steps amplify that a
# little, so the bound is well above float32 rounding and far below any real
# difference (a wrong gradient moves the loss in the first digits).
LOSS_RTOL = 1e-4


def _batches(kind, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        if kind == "mlp":
            x = torch.randn(64, 32, generator=g)
            out.append((x, (x[:, :10] * 3).argmax(1)))
        elif kind == "cnn":
            x = torch.randn(16, 3, 16, 16, generator=g)
            out.append((x, (x.mean(dim=(2, 3)) * 10).argmax(1) % 10))
        else:
            ids = torch.randint(0, 32, (8, 17), generator=g)
            ids[:, 1::2] = (ids[:, ::2][:, :8] * 7 + 3) % 32  # learnable structure
            out.append((ids[:, :-1], ids[:, 1:]))
    return out


def _loss(kind, model, x, y):
    if kind in ("mlp", "cnn"):
        return F.cross_entropy(model(x), y)
    if kind == "gpt":
        return model(x, y)[1]
    return model(input_ids=x, labels=x).loss  # Hugging Face causal LMs shift the labels themselves


def _train(kind, model, device, batches, opt_fn, autocast=None):
    model = copy.deepcopy(model).to(device).train()
    opt = opt_fn(model.parameters())
    losses = []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device, dtype=autocast, enabled=autocast is not None):
            loss = _loss(kind, model, x, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach().float())
    return torch.stack(losses).cpu(), model


def _hf_model(name):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=32, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                      bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def _model(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        return MLP(d_in=32, hidden=64, classes=10, depth=3)
    if kind == "cnn":
        return CNN(classes=10, width=8)
    if kind == "gpt":
        return GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=4, n_embd=32))
    return _hf_model(kind)


OPTIMIZERS = {
    "mlp": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "cnn": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "gpt": lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.1),
    "gpt2": lambda p: torch.optim.AdamW(p, lr=3e-3, fused=True),
    "llama": lambda p: torch.optim.Adam(p, lr=3e-3),
}


@pytest.mark.parametrize("kind", ["mlp", "cnn", "gpt", "gpt2", "llama"])
def test_float32_training_matches_cpu_step_for_step(kind):
    model = _model(kind)
    batches = _batches(kind, STEPS)
    cpu_losses, cpu_model = _train(kind, model, "cpu", batches, OPTIMIZERS[kind])
    tpu_losses, tpu_model = _train(kind, model, "tpu", batches, OPTIMIZERS[kind])
    torch.testing.assert_close(tpu_losses, cpu_losses, rtol=LOSS_RTOL, atol=0)
    assert tpu_losses[-1] < tpu_losses[0]  # it learned something, on both devices
    for (name, p), q in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-3, atol=1e-4, msg=name)
    if kind == "cnn":  # batch norm's running statistics follow too
        for (name, b), c in zip(cpu_model.named_buffers(), tpu_model.buffers()):
            torch.testing.assert_close(c.cpu(), b, rtol=1e-3, atol=1e-4, msg=name)


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_bfloat16_autocast_training_converges(kind):
    model = _model(kind)
    batches = _batches(kind, 2) * 15  # two batches, seen 15 times: the model can fit them

    def adamw(p):
        return torch.optim.AdamW(p, lr=1e-2)

    bf16, _ = _train(kind, model, "tpu", batches, adamw, autocast=torch.bfloat16)
    fp32, _ = _train(kind, model, "tpu", batches, adamw)
    assert torch.isfinite(bf16).all()
    # From ln(32) = 3.47 at random initialization to under a third of it ...
    assert bf16[-2:].mean() < bf16[0] / 3, bf16
    # ... and as far as float32 training gets, within a quarter.
    assert abs(bf16[-2:].mean() - fp32[-2:].mean()) < 0.25 * fp32[-2:].mean() + 0.05, (bf16, fp32)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_hugging_face_greedy_generate_matches_cpu(kind):
    model = _model(kind).eval()
    prompt = torch.randint(1, 32, (2, 6), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    want = model.generate(prompt, attention_mask=torch.ones_like(prompt), **kw)
    dev = copy.deepcopy(model).to("tpu")
    got = dev.generate(prompt.to("tpu"), attention_mask=torch.ones_like(prompt).to("tpu"), **kw)
    assert got.device.type == "tpu"
    assert torch.equal(got.cpu(), want)


def test_gpt_sampling_is_reproducible_on_tpu():
    model = _model("gpt").to("tpu").eval()
    prompt = torch.randint(0, 32, (1, 16), generator=torch.Generator().manual_seed(0)).to("tpu")
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        runs.append(model.generate(prompt, 6, temperature=1.0, top_k=5).cpu())
    assert torch.equal(runs[0], runs[1]) and runs[0].shape == (1, 22)
    greedy = model.generate(prompt, 6, temperature=0)
    assert torch.equal(greedy.cpu(), model.cpu().generate(prompt.cpu(), 6, temperature=0))
