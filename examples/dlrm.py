"""A DLRM-style recommendation model trained on tpu: embedding tables with
sparse gradients, a dot-product interaction, MLPs over dense features.

    python examples/dlrm.py                          # 20 steps on tpu, strict eager, vs CPU
    python examples/dlrm.py --compile                # the dense part under torch.compile
    TORCH_TPU_DEFER_AND_FUSE=1 python examples/dlrm.py   # fused eager
    torchrun --standalone --nproc-per-node=2 examples/dlrm.py --table-wise
                                                     # tables split over 2 ranks

The model is the one DLRM (Naumov et al., 2019) describes, written in plain
PyTorch, nothing tpu-specific in it:

- **sparse part**: one ``nn.EmbeddingBag(sparse=True)`` per categorical
  feature, sum-pooling each sample's ids (1 to ``max_ids`` per feature,
  skewed toward popular rows as click logs are), trained with Adagrad on
  the sparse gradients;
- **dense part**: a bottom MLP over the dense features, the pairwise dot
  products of its output and the pooled embeddings (the interaction), and
  a top MLP to one logit; trained with Adam, optionally compiled.

The click data is generated: dense features, ids, and labels drawn from a
hidden logistic rule over both, so the loss falls.

With ``--table-wise`` (under torchrun, our ``tpu`` c10d backend), table t
lives on rank ``t % world``, which pools it for the whole global batch;
an ``all_to_all`` sends each rank the pooled rows of its share of the batch
(and the gradients back), and DDP averages the dense part's gradients. Each
rank reads the ids of its own tables for the global batch (TorchRec's input
distribution would send them with another all_to_all). The result equals
one process trained on the global batch.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    tables: int = 4           # categorical features, one embedding table each
    rows: int = 1000          # rows per table
    dim: int = 16             # embedding width (= the bottom MLP's output)
    dense_in: int = 13        # dense features
    bottom: tuple = (64, 16)
    top: tuple = (64, 32)
    max_ids: int = 20         # ids per sample and feature: 1..max_ids
    batch: int = 64
    lr_sparse: float = 0.05
    lr_dense: float = 1e-3
    seed: int = 0


def make_batch(cfg: Config, step: int):
    """The global batch of `step`: dense features [B, dense_in], per table
    (ids, offsets) for EmbeddingBag, labels [B] in {0, 1}."""
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    dense = torch.randn(cfg.batch, cfg.dense_in, generator=g)
    ids, offsets, score = [], [], dense[:, 0] - 0.5 * dense[:, 1]
    for _ in range(cfg.tables):
        lengths = torch.randint(1, cfg.max_ids + 1, (cfg.batch,), generator=g)
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]]))
        u = torch.rand(int(lengths.sum()), generator=g)
        table_ids = (u ** 3 * cfg.rows).to(torch.int64).clamp_(max=cfg.rows - 1)  # popular rows first
        ids.append(table_ids)
        # the hidden rule: samples that clicked on low ids of this table
        low = torch.zeros(cfg.batch).index_add_(
            0, torch.repeat_interleave(torch.arange(cfg.batch), lengths), (table_ids < cfg.rows // 10).float())
        score = score + low / lengths - 0.3
    labels = (torch.rand(cfg.batch, generator=g) < torch.sigmoid(score)).float()
    return dense, ids, offsets, labels


def _mlp(sizes, last_relu=True):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class SparseArch(nn.Module):
    """The embedding tables (sum-pooled bags, sparse gradients); `owned`
    selects the tables this process holds (all by default)."""

    def __init__(self, cfg: Config, owned=None):
        super().__init__()
        self.owned = list(range(cfg.tables)) if owned is None else list(owned)
        self.tables = nn.ModuleList(nn.EmbeddingBag(cfg.rows, cfg.dim, mode="sum", sparse=True)
                                    for _ in range(cfg.tables))
        for t in range(cfg.tables):  # the same initial weights in every layout
            if t not in self.owned:
                self.tables[t] = nn.Identity()

    def forward(self, ids, offsets):
        """[B, len(owned), dim]"""
        return torch.stack([self.tables[t](ids[t], offsets[t]) for t in self.owned], 1)


class DenseArch(nn.Module):
    """Bottom MLP, dot-product interaction, top MLP: one logit per sample."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.bottom = _mlp((cfg.dense_in,) + tuple(cfg.bottom))
        n = cfg.tables + 1
        self.register_buffer("pairs", torch.tril_indices(n, n, offset=-1), persistent=False)
        self.top = _mlp((cfg.dim + n * (n - 1) // 2,) + tuple(cfg.top) + (1,), last_relu=False)

    def forward(self, dense, pooled):
        x = self.bottom(dense)                                   # [B, dim]
        feats = torch.cat([x.unsqueeze(1), pooled], 1)           # [B, T + 1, dim]
        z = torch.bmm(feats, feats.transpose(1, 2))              # [B, T + 1, T + 1]
        inter = z[:, self.pairs[0], self.pairs[1]]               # the pairs below the diagonal
        return self.top(torch.cat([x, inter], 1)).squeeze(1)


def build(cfg: Config, device, owned=None):
    torch.manual_seed(cfg.seed)
    sparse, dense = SparseArch(cfg, owned), DenseArch(cfg)
    return sparse.to(device), dense.to(device)


def _optimizers(cfg, sparse, dense):
    return (torch.optim.Adagrad(list(sparse.parameters()), lr=cfg.lr_sparse),
            torch.optim.Adam(dense.parameters(), lr=cfg.lr_dense))


def _on(device, batch):
    dense, ids, offsets, labels = batch
    return dense.to(device), [i.to(device) for i in ids], [o.to(device) for o in offsets], labels.to(device)


def train(cfg: Config, device="tpu", steps: int = 20, compile_dense: bool = False):
    """One process on the global batch: (losses, {name: tensor on CPU})."""
    sparse, dense = build(cfg, device)
    opt_s, opt_d = _optimizers(cfg, sparse, dense)
    run_dense = torch.compile(dense, backend="tpu" if torch.device(device).type == "tpu" else "inductor") \
        if compile_dense else dense
    losses = [train_step(sparse, run_dense, opt_s, opt_d, _on(device, make_batch(cfg, step)))
              for step in range(steps)]
    return [float(v) for v in losses], _state(sparse, dense)


def train_step(sparse, run_dense, opt_s, opt_d, batch):
    """One step on a batch already on the device: the loss (detached)."""
    x, ids, offsets, y = batch
    loss = F.binary_cross_entropy_with_logits(run_dense(x, sparse(ids, offsets)), y)
    opt_s.zero_grad()
    opt_d.zero_grad()
    loss.backward()
    opt_s.step()
    opt_d.step()
    return loss.detach()


def _state(sparse, dense):
    out = {f"dense.{k}": v.detach().cpu() for k, v in dense.state_dict().items()}
    for t in sparse.owned:
        out[f"table{t}"] = sparse.tables[t].weight.detach().cpu()
    return out


def train_table_wise(cfg: Config, steps: int = 20, compile_dense: bool = False):
    """Under torchrun: tables split over the ranks, DDP over the dense part.
    Returns (losses of the global batch, this rank's parameters on CPU)."""
    import torch.distributed as dist
    import torch.distributed.nn.functional as dist_fn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("tpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cfg.tables % world or cfg.batch % world:
        raise ValueError(f"{cfg.tables} tables and a batch of {cfg.batch} must split evenly over {world} ranks")
    device = torch.device("tpu", int(os.environ.get("LOCAL_RANK", 0)))
    torch.tpu.set_device(device)
    owned = list(range(rank, cfg.tables, world))
    sparse, dense = build(cfg, device, owned)
    ddp = DDP(dense)
    run_dense = torch.compile(ddp, backend="tpu") if compile_dense else ddp
    opt_s, opt_d = _optimizers(cfg, sparse, dense)
    local = cfg.batch // world
    losses = []
    for step in range(steps):
        x, ids, offsets, y = _on(device, make_batch(cfg, step))
        mine = slice(rank * local, (rank + 1) * local)
        pooled = sparse(ids, offsets)                            # [B, T / world, dim], my tables
        # Each rank's loss is a mean over its share: the tables' gradients
        # come back from every rank, so scale them to the global mean.
        pooled.register_hook(lambda g: g / world)
        send = pooled.reshape(world, local, len(owned), cfg.dim)
        got = dist_fn.all_to_all_single(torch.empty_like(send), send)  # [world, local, T / world, dim]
        # got[r, :, j] is table r + j * world: in table order
        pooled_mine = got.permute(1, 2, 0, 3).reshape(local, cfg.tables, cfg.dim)
        loss = F.binary_cross_entropy_with_logits(run_dense(x[mine], pooled_mine), y[mine])
        opt_s.zero_grad()
        opt_d.zero_grad()
        loss.backward()
        opt_s.step()
        opt_d.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / world)
    state = _state(sparse, dense)
    dist.destroy_process_group()
    return losses, state


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--compile", action="store_true", help="the dense part under torch.compile")
    p.add_argument("--table-wise", action="store_true", help="under torchrun: tables split over the ranks")
    p.add_argument("--out", default=None, help="save losses and parameters here (torch.save)")
    args = p.parse_args()
    cfg = Config()
    if args.table_wise:
        losses, state = train_table_wise(cfg, args.steps, args.compile)
        if args.out:
            torch.save({"losses": losses, "state": state}, f"{args.out}.rank{os.environ.get('RANK', 0)}")
        if os.environ.get("RANK", "0") == "0":
            print("losses", " ".join(f"{v:.5f}" for v in losses))
        return
    losses, state = train(cfg, "tpu", args.steps, args.compile)
    if args.out:
        torch.save({"losses": losses, "state": state}, args.out)
    ref_losses, ref = train(cfg, "cpu", args.steps, args.compile)
    worst = max((state[k] - ref[k]).abs().max().item() for k in ref)
    print("tpu losses", " ".join(f"{v:.5f}" for v in losses))
    print("cpu losses", " ".join(f"{v:.5f}" for v in ref_losses))
    print(f"largest parameter difference from CPU: {worst:.2e}")


if __name__ == "__main__":
    main()
