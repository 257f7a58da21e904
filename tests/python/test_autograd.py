"""Training on tpu follows CPU training step for step."""

import copy

import torch

from conftest import assert_same


def train(model, device, steps=4, opt_cls=torch.optim.SGD, **opt_kw):
    torch.manual_seed(0)
    model = copy.deepcopy(model).to(device)
    opt = opt_cls(model.parameters(), **opt_kw)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 12, generator=g).to(device)
        y = torch.randint(0, 5, (8,), generator=g).to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 5))


def test_mlp_sgd_matches_cpu():
    m = mlp()
    cpu_losses, cpu_model = train(m, "cpu", lr=0.1, momentum=0.9)
    tpu_losses, tpu_model = train(m, "tpu", lr=0.1, momentum=0.9)
    torch.testing.assert_close(tpu_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for p, q in zip(tpu_model.parameters(), cpu_model.parameters()):
        assert_same(p.detach(), q.detach(), rtol=1e-4, atol=1e-5)


def test_mlp_adamw_matches_cpu():
    m = mlp()
    cpu_losses, _ = train(m, "cpu", opt_cls=torch.optim.AdamW, lr=1e-2)
    tpu_losses, _ = train(m, "tpu", opt_cls=torch.optim.AdamW, lr=1e-2)
    torch.testing.assert_close(tpu_losses, cpu_losses, rtol=1e-4, atol=1e-5)


def test_gradients_of_basic_ops():
    torch.manual_seed(0)
    a = torch.randn(4, 5, requires_grad=True)
    b = torch.randn(5, 3, requires_grad=True)
    ta = a.detach().to("tpu").requires_grad_()
    tb = b.detach().to("tpu").requires_grad_()
    for x, y in ((a, b), (ta, tb)):
        out = (torch.tanh(x @ y).sigmoid() * 2 - x.sum(1, keepdim=True).exp().mean()).sum()
        out.backward()
    assert_same(ta.grad, a.grad, rtol=1e-5, atol=1e-6)
    assert_same(tb.grad, b.grad, rtol=1e-5, atol=1e-6)
