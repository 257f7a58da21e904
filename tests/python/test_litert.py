"""LiteRT export of models trained on tpu: ``litert_torch.convert`` takes the
tpu model as it is (tpu sample inputs), and the LiteRT interpreter's outputs
match the tpu model's.

The conversion runs in a fresh process: litert-torch imports torchao, JAX and
LiteRT's converter, which the other test files should not inherit. Skipped
when litert-torch or ai-edge-litert is not installed (the ``litert`` extra;
README, "LiteRT export"). Strict eager only: the other modes change nothing
that the export reads.
"""

import dataclasses
import importlib.util
import json
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import current_mode, run_python
from torch_tpu import _litert

pytestmark = pytest.mark.skipif(current_mode() != "strict", reason="strict eager only")
needs_litert = pytest.mark.skipif(
    importlib.util.find_spec("litert_torch") is None or importlib.util.find_spec("ai_edge_litert") is None,
    reason="litert-torch / ai-edge-litert not installed (the litert extra)",
)

_SCRIPT = r"""
import json, sys, torch, torch.nn as nn, torch.nn.functional as F
import litert_torch
from ai_edge_litert.interpreter import Interpreter

out_dir = sys.argv[1]
torch.manual_seed(0)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.pos = nn.Parameter(0.02 * torch.randn(12, 32))
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 3)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens) + self.pos)
        return self.head(self.norm(h).mean(1))


def train(model, make_batch, steps=4):
    model.to("tpu").train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        x, y = make_batch()
        loss = F.cross_entropy(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model.eval(), losses


def check(name, model, sample):
    assert all(p.device.type == "tpu" for p in model.parameters())
    with torch.no_grad():
        expected = model(sample.to("tpu")).cpu()
    edge = litert_torch.convert(model, (sample.to("tpu"),))
    path = f"{out_dir}/{name}.tflite"
    edge.export(path)
    interpreter = Interpreter(model_path=path)
    runner = interpreter.get_signature_runner()
    (arg,) = interpreter.get_signature_list()["serving_default"]["inputs"]
    # LiteRT's model I/O is 32-bit unless enable_x64: token ids go in as int32.
    (got,) = runner(**{arg: sample.numpy().astype(runner.get_input_details()[arg]["dtype"])}).values()
    got = torch.from_numpy(got)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return float((got - expected).abs().max()), float(expected.abs().max())


g = torch.Generator().manual_seed(1)
cnn, cnn_losses = train(CNN(), lambda: (torch.randn(16, 3, 16, 16, generator=g), torch.randint(0, 5, (16,), generator=g)))
encoder, enc_losses = train(Encoder(), lambda: (torch.randint(0, 50, (16, 12), generator=g), torch.randint(0, 3, (16,), generator=g)))
result = {
    "cnn": check("cnn", cnn, torch.randn(2, 3, 16, 16, generator=g)),
    "encoder": check("encoder", encoder, torch.randint(0, 50, (2, 12), generator=g)),
    "losses": [cnn_losses, enc_losses],
}
print("RESULT " + json.dumps(result))
"""


@needs_litert
def test_litert_export_of_tpu_trained_cnn_and_transformer_encoder(tmp_path):
    out = run_python(_SCRIPT.replace("sys.argv[1]", repr(str(tmp_path))), timeout=420)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-8000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    for name in ("cnn", "encoder"):
        diff, scale = result[name]
        # float32 through different kernels (XNNPACK vs XLA CPU): rounding only.
        assert diff <= 1e-5 * max(1.0, scale), (name, diff, scale)
        assert (tmp_path / f"{name}.tflite").stat().st_size > 0
    for losses in result["losses"]:
        assert all(l == l for l in losses)  # trained: finite losses, no NaN


# ---- the pieces, without litert-torch ----------------------------------------

_OVERRIDEABLE = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default


class _Attention(nn.Module):
    def __init__(self, mask=None, is_causal=False):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)
        self.mask, self.is_causal = mask, is_causal

    def forward(self, x):
        q = x.view(2, 10, 4, 8).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, attn_mask=self.mask, is_causal=self.is_causal)
        return self.mha(x, x, x, need_weights=False)[0] + a.transpose(1, 2).reshape(2, 10, 32)


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask"])
def test_exported_tpu_attention_decomposes_to_the_math_backend(case):
    """What litert-torch's decomposition table gets: the exported tpu graph
    holds the overrideable op; with torch_tpu's decomposition it holds core
    ATen ops and computes what eager tpu computes."""
    g = torch.Generator().manual_seed(0)
    mask = {"bool_mask": torch.rand(10, 10, generator=g) > 0.3, "float_mask": torch.randn(10, 10, generator=g)}.get(case)
    torch.manual_seed(0)
    model = _Attention(None if mask is None else mask.to("tpu"), case == "causal").to("tpu").eval()
    x = torch.randn(2, 10, 32, generator=g).to("tpu")
    with torch.no_grad():
        expected = model(x).cpu()
    exported = torch.export.export(model, (x,))
    assert any(n.target == _OVERRIDEABLE for n in exported.run_decompositions().graph.nodes)
    table = torch.export.default_decompositions()
    table[_OVERRIDEABLE] = _litert.sdpa_overrideable_decomposition
    ep = exported.run_decompositions(table)
    assert not any(n.target == _OVERRIDEABLE for n in ep.graph.nodes)
    with torch.no_grad():
        got = ep.module()(x).cpu()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_sdpa_decomposition_outputs_match_the_fused_op():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g).to("tpu") for _ in range(3))
    bias = torch.randn(5, 5, generator=g).to("tpu")
    fused = _OVERRIDEABLE(q, k, v, bias, 0.0, False, False, scale=0.3)
    mine = _litert.sdpa_overrideable_decomposition(q, k, v, bias, 0.0, False, False, scale=0.3)
    torch.testing.assert_close(mine[0].cpu(), fused[0].cpu(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mine[1].cpu(), fused[1].cpu(), rtol=1e-5, atol=1e-5)
    assert mine[0].stride() == fused[0].stride() and mine[1].shape == fused[1].shape


def test_constant_fingerprint_keeps_the_host_copy_alive():
    @dataclasses.dataclass(frozen=True)
    class Fingerprint:
        data_ptr: int

        @classmethod
        def from_tensor(cls, tensor):
            return cls(data_ptr=tensor.untyped_storage().data_ptr())

    module = types.SimpleNamespace(_ConstantFingerprint=Fingerprint)
    _litert._patch_constant_cache(module)
    _litert._patch_constant_cache(module)  # once only
    w = torch.ones(32, device="tpu")
    cache = {Fingerprint.from_tensor(t.cpu()): i for i, t in enumerate((w, w + 1, w + 2))}
    assert len(cache) == 3  # three host copies, three addresses
    key = next(iter(cache))
    assert key == Fingerprint(key.data_ptr) and hash(key) == hash(Fingerprint(key.data_ptr))
