"""Train a small CNN on the tpu device, export it to LiteRT (.tflite), and
check the LiteRT interpreter against the tpu model.

    pip install --no-build-isolation -e ".[litert]"
    pip install --no-deps litert-torch==0.10.0 litert-converter==0.5.0 xdsl==0.28.0
    python examples/litert_export.py            # writes cnn.tflite here

(README, "LiteRT export", says why the second line uses --no-deps.) The model
is converted as it is, on tpu: ``litert_torch.convert`` traces it with tpu
sample inputs; there is no copy to the CPU first. ``--encoder`` exports a
small transformer encoder classifier instead.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import litert_torch
from ai_edge_litert.interpreter import Interpreter


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class TinyEncoder(nn.Module):
    """Classifies 16x16 images as 16 rows of 16 pixels with 2 encoder layers."""

    def __init__(self, classes: int = 4, d: int = 32):
        super().__init__()
        self.embed = nn.Linear(16, d)
        self.pos = nn.Parameter(0.02 * torch.randn(16, d))
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.encoder(self.embed(x.flatten(1, 2)) + self.pos)
        return self.head(h.mean(1))


def synthetic_batch(g: torch.Generator, n: int = 32, classes: int = 4):
    """Images whose class is which quadrant is bright, plus noise."""
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, 1, 16, 16, generator=g)
    for i, c in enumerate(y.tolist()):
        r, q = divmod(c, 2)
        x[i, 0, 8 * r : 8 * r + 8, 8 * q : 8 * q + 8] += 0.5
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--encoder", action="store_true", help="export a transformer encoder instead of the CNN")
    parser.add_argument("--out", default=None, help="the .tflite file (default: cnn.tflite or encoder.tflite)")
    args = parser.parse_args()
    out = args.out or ("encoder.tflite" if args.encoder else "cnn.tflite")

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = (TinyEncoder() if args.encoder else SmallCNN()).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    t = time.time()
    for step in range(1, args.steps + 1):
        x, y = synthetic_batch(g)
        loss = F.cross_entropy(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == args.steps:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    print(f"trained {args.steps} steps on {next(model.parameters()).device} in {time.time() - t:.1f} s")

    model.eval()
    sample, labels = synthetic_batch(g, n=8)
    with torch.no_grad():
        expected = model(sample.to("tpu")).cpu()

    edge_model = litert_torch.convert(model, (sample.to("tpu"),))  # straight from the tpu model
    edge_model.export(out)

    interpreter = Interpreter(model_path=out)
    runner = interpreter.get_signature_runner()
    (name,) = interpreter.get_signature_list()["serving_default"]["inputs"]
    (got,) = runner(**{name: sample.numpy()}).values()
    got = torch.from_numpy(got)
    accuracy = (got.argmax(1) == labels).float().mean().item()
    print(f"wrote {out}; LiteRT interpreter vs tpu model: max |difference| {(got - expected).abs().max().item():.3e}, "
          f"accuracy on a fresh batch {accuracy:.0%}")


if __name__ == "__main__":
    main()
