"""torch_tpu in one page: the `tpu` device, eager ops, and a training loop.

    python examples/demo.py
"""

import time

import torch

import torch_tpu

info = torch_tpu.plugin_info()
print(f"tpu device backed by the {info['platform']} PJRT plugin (PJRT C API {info['pjrt_api_version']})")
print(f"devices: {torch.tpu.device_count()} x {torch.tpu.get_device_name()}")

# Tensors move to the device as they would to "cuda".
x = torch.randn(3, 4).to("tpu")
print(x)
print("x @ x.T =", (x @ x.t()).cpu().round(decimals=3))
print("softmax rows sum to", x.softmax(-1).sum(-1).cpu())

# Views alias their storage, in-place ops write through them.
x[0].zero_()
x[:, 1] += 10
print("after in-place edits:", x[0].cpu(), x[:, 1].cpu())

# A model trains unchanged: model.to("tpu").
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 4)
).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
data = torch.randn(256, 16)
labels = (data[:, :4].argmax(1)).to("tpu")
data = data.to("tpu")
start = time.perf_counter()
for step in range(60):
    loss = torch.nn.functional.cross_entropy(model(data), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0 or step == 59:
        print(f"step {step:2d}  loss {loss.item():.4f}")
accuracy = (model(data).argmax(1) == labels).float().mean().item()
print(f"train accuracy {accuracy:.2f} in {time.perf_counter() - start:.1f}s")
stats = torch_tpu.cache_stats()
print(f"compiled {stats['misses']} programs, reused them {stats['hits']} times")
