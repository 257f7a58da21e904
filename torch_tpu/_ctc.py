"""CTC loss on tpu (aten::_ctc_loss, both overloads), forward and backward.

The forward is the alpha recursion over time, vectorized over the batch and
the extended label sequence (blank, l1, blank, l2, ..., blank), in the ops we
lower; the backward differentiates that recursion with autograd. Both are
registered as the tpu autograd kernels of ``_ctc_loss``. The gradient is
CPU's: PyTorch's CTC backward returns exp(log_probs) minus the label
occupancies (the gradient through a log_softmax the caller is assumed to
have applied), zero past each input length, and for an infinite loss NaN
(zero under zero_infinity).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_lib = None


def _logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    # logsumexp whose gradient stays finite where every input is -inf
    # (states no path reaches): those give -inf and a zero gradient.
    m = x.amax(dim, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m).detach()
    s = torch.exp(x - m).sum(dim)
    m = m.squeeze(dim)
    return torch.where(s > 0, torch.log(torch.where(s > 0, s, torch.ones_like(s))) + m,
                       torch.full_like(s, float("-inf")))


def _extended(targets, target_lengths, blank, n, device):
    """Extended labels [N, 2S+1] and where a state may skip the blank before it."""
    lengths = [int(v) for v in target_lengths]
    s_max = max(lengths, default=0)
    if targets.dim() == 1:  # concatenated targets
        rows, at = [], 0
        for length in lengths:
            rows.append(F.pad(targets[at:at + length], (0, s_max - length)))
            at += length
        padded = torch.stack(rows) if rows else targets.new_zeros((n, 0))
    else:
        padded = targets[:, :s_max]
    padded = padded.to(device=device, dtype=torch.int64)
    k = 2 * s_max + 1
    ext = torch.full((n, k), blank, dtype=torch.int64, device=device)
    if s_max:
        ext[:, 1::2] = padded
    same = torch.zeros((n, k), dtype=torch.bool, device=device)
    if s_max > 1:
        same[:, 3::2] = ext[:, 3::2] == ext[:, 1:-2:2]
    odd = (torch.arange(k, device=device) % 2 == 1).unsqueeze(0)
    skip = odd & ~same & (torch.arange(k, device=device) >= 2).unsqueeze(0)
    return ext, skip, torch.tensor(lengths, dtype=torch.int64, device=device)


def _forward(lp, ext, skip, in_len, tgt_len):
    """Negative log likelihoods [N] and log alphas [N, T, K]."""
    t_max, n, _ = lp.shape
    k = ext.shape[1]
    ninf = float("-inf")
    pos = torch.arange(k, device=lp.device).unsqueeze(0)
    valid = pos <= 2 * tgt_len.unsqueeze(1)
    emit = lp.gather(2, ext.unsqueeze(0).expand(t_max, n, k))  # [T, N, K]
    a = torch.where((pos <= 1) & valid, emit[0], torch.full_like(emit[0], ninf))
    alphas = [a]
    for t in range(1, t_max):
        prev1 = F.pad(a, (1, 0), value=ninf)[:, :k]
        prev2 = torch.where(skip, F.pad(a, (2, 0), value=ninf)[:, :k], torch.full_like(a, ninf))
        new = _logsumexp(torch.stack([a, prev1, prev2]), 0) + emit[t]
        new = torch.where(valid, new, torch.full_like(new, ninf))
        a = torch.where((t < in_len).unsqueeze(1), new, a)
        alphas.append(a)
    last_blank = a.gather(1, (2 * tgt_len).unsqueeze(1)).squeeze(1)
    last_label = a.gather(1, (2 * tgt_len - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    last_label = torch.where(tgt_len > 0, last_label, torch.full_like(last_label, ninf))
    nll = -_logsumexp(torch.stack([last_blank, last_label]), 0)
    return nll, torch.stack(alphas, 1)


class _CTC(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
        unbatched = log_probs.dim() == 2
        lp = log_probs.unsqueeze(1) if unbatched else log_probs
        n = lp.shape[1]
        if unbatched and targets.dim() == 1 and len(target_lengths) == 1:
            targets = targets.unsqueeze(0)
        ext, skip, tgt_len = _extended(targets, target_lengths, blank, n, lp.device)
        in_len = torch.tensor([int(v) for v in input_lengths], dtype=torch.int64, device=lp.device)
        nll, log_alpha = _forward(lp, ext, skip, in_len, tgt_len)
        if zero_infinity:
            nll = torch.where(torch.isinf(nll), torch.zeros_like(nll), nll)
        ctx.save_for_backward(log_probs, ext, skip, in_len, tgt_len)
        ctx.zero_infinity, ctx.unbatched = zero_infinity, unbatched
        ctx.mark_non_differentiable(log_alpha)
        return (nll.squeeze(0) if unbatched else nll), log_alpha

    @staticmethod
    def backward(ctx, grad_nll, _grad_alpha):
        log_probs, ext, skip, in_len, tgt_len = ctx.saved_tensors
        with torch.enable_grad():
            lp = log_probs.detach().requires_grad_()
            lp3 = lp.unsqueeze(1) if ctx.unbatched else lp
            nll, _ = _forward(lp3, ext, skip, in_len, tgt_len)
            g = grad_nll.reshape(-1).to(nll.dtype).expand_as(nll)
            inf = torch.isinf(nll)
            if ctx.zero_infinity:
                g = torch.where(inf, torch.zeros_like(g), g)
            (glp,) = torch.autograd.grad(nll, lp3, g)
        t_max = lp3.shape[0]
        live = (torch.arange(t_max, device=lp3.device).unsqueeze(1) < in_len.unsqueeze(0)).unsqueeze(2)  # [T, N, 1]
        glp = glp + torch.exp(lp3.detach()) * g.view(1, -1, 1)
        glp = torch.where(live, glp, torch.zeros_like(glp))
        # An impossible alignment (infinite loss): zero under zero_infinity,
        # else NaN within the input length, as CPU gives.
        fill = 0.0 if ctx.zero_infinity else float("nan")
        glp = torch.where(inf.view(1, -1, 1) & live, torch.full_like(glp, fill), glp)
        return (glp.squeeze(1) if ctx.unbatched else glp), None, None, None, None, None


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return _CTC.apply(log_probs, targets, list(input_lengths), list(target_lengths), blank, zero_infinity)


def ctc_loss_tensor(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return ctc_loss(log_probs, targets, input_lengths.tolist(), target_lengths.tolist(), blank, zero_infinity)


def register() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    for key in ("AutogradPrivateUse1", "PrivateUse1"):
        _lib.impl("_ctc_loss", ctc_loss, key)
        _lib.impl("_ctc_loss.Tensor", ctc_loss_tensor, key)
