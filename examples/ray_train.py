"""Ray Train on the tpu device: DDP over 2 workers, nothing but the backend changed.

    pip install --no-build-isolation -e ".[ray]"
    python examples/ray_train.py                 # 2 workers, DDP on tpu
    python examples/ray_train.py --compare-cpu   # and the same run on gloo/CPU, weights compared

This is a plain Ray Train script: the training function uses Ray's
``get_device``, ``prepare_model`` and ``prepare_data_loader`` and never names
torch_tpu. ``TorchConfig(backend="tpu")`` is the only change from a CPU/GPU
run: ``import torch`` brings up the tpu device in every Ray worker
(device-backend autoload), the workers join a ``tpu`` process group, and
``get_device()`` is ``tpu:LOCAL_RANK``. The model is a small CNN on synthetic
16x16 images; rank 0 saves the trained weights in a Ray checkpoint, which the
driver loads.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import ray
import ray.train
import ray.train.torch
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def synthetic_data(n: int = 256, classes: int = 4, seed: int = 0):
    """Images whose class is which quadrant is bright, plus noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, 1, 16, 16, generator=g)
    for i, c in enumerate(y.tolist()):
        r, q = divmod(c, 2)
        x[i, 0, 8 * r : 8 * r + 8, 8 * q : 8 * q + 8] += 0.5
    return x, y


def train_func(config):
    torch.manual_seed(0)  # the same initial weights on every worker and backend
    model = ray.train.torch.prepare_model(SmallCNN())  # to get_device(), wrapped in DDP
    x, y = synthetic_data()
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=config["batch_size"], shuffle=True
    )
    loader = ray.train.torch.prepare_data_loader(loader)  # DistributedSampler, batches to the device
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    device = ray.train.torch.get_device()
    rank = ray.train.get_context().get_world_rank()
    step = 0
    for epoch in range(config["epochs"]):
        loader.sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == config["steps"]:
                break
        if step == config["steps"]:
            break
    state = {k: v.detach().cpu() for k, v in model.module.state_dict().items()}
    metrics = {"loss": loss.item(), "steps": step, "device": str(device)}
    if rank == 0:
        with tempfile.TemporaryDirectory() as d:
            torch.save(state, os.path.join(d, "model.pt"))
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
    else:
        ray.train.report(metrics)


def train(backend: str, steps: int, storage: str) -> tuple[dict, dict]:
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"batch_size": 32, "lr": 0.05, "epochs": 100, "steps": steps},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        torch_config=TorchConfig(backend=backend),
        run_config=RunConfig(name=f"ray_train_{backend}", storage_path=storage),
    )
    result = trainer.fit()
    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "model.pt"))
    return state, result.metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compare-cpu", action="store_true", help="also train on gloo/CPU and compare weights")
    parser.add_argument("--storage", default=None, help="Ray's storage_path (default: a temporary directory)")
    args = parser.parse_args()

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        storage = args.storage or tmp
        t = time.time()
        state, metrics = train("tpu", args.steps, storage)
        print(f"tpu:  {metrics['steps']} steps on {metrics['device']}, loss {metrics['loss']:.4f} ({time.time() - t:.1f} s)")
        if args.compare_cpu:
            t = time.time()
            ref, ref_metrics = train("gloo", args.steps, storage)
            print(f"gloo: {ref_metrics['steps']} steps on {ref_metrics['device']}, loss {ref_metrics['loss']:.4f} ({time.time() - t:.1f} s)")
            diff = max((state[k] - ref[k]).abs().max().item() for k in ref)
            print(f"max |weight difference| tpu vs gloo/CPU: {diff:.3e}")
    ray.shutdown()


if __name__ == "__main__":
    main()
