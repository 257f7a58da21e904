"""vLLM's sampler on tpu, run at the bucket of the step's request count.

vLLM samples from logits of the step's exact request count, and its
sampler's ops (temperature, top-k and top-p masks, the sort behind them,
the exponential noise, the logprobs' top-k) are not ops whose padding the
device can mask for itself: each request count met for the first time
compiled 15-20 programs, after the engine's warm-up too. Here the sampler
runs on the logits' bucket (the rows past the request count hold
neutral sampling parameters), so each bucket's programs compile once, at
start-up, and its results leave held padded, as the rest of the step's
tensors are. vLLM's TPU runners pad their sampler the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types

import numpy as np
import torch
from vllm.model_executor.layers.utils import apply_penalties
from vllm.v1.outputs import SamplerOutput
from vllm.v1.sample.logits_processor.builtin import (
    LogitBiasLogitsProcessor,
    MinPLogitsProcessor,
    MinTokensLogitsProcessor,
)
from vllm.v1.sample.sampler import Sampler

from torch_tpu._sparse import _bucket, _exact_new_tensors, _held

_tt = torch.ops.torch_tpu

# The value a padding row of each per-request metadata tensor takes: one
# that samples without filtering (no temperature change, no top-p, top-k of
# the whole vocabulary, no penalties, no banned tokens). None: the
# vocabulary's size.
_NEUTRAL = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": None,
    "frequency_penalties": 0.0,
    "presence_penalties": 0.0,
    "repetition_penalties": 1.0,
    "allowed_token_ids_mask": False,
}

# Processors whose state is indexed by request (rows past the count are
# never touched) or, for min-p, padded here.
_BUILTIN = (LogitBiasLogitsProcessor, MinTokensLogitsProcessor, MinPLogitsProcessor)


def _prefix_of(t: torch.Tensor, rows: int) -> torch.Tensor | None:
    """Up to ``rows`` rows of the tensor whose first rows ``t`` is (vLLM's
    per-request state is a slice of a persistent buffer of ``max_num_seqs``
    rows): a view of t's storage with t's strides, where it holds more rows
    than t; else None."""
    if t.dim() == 0 or t.stride(0) <= 0:
        return None
    row = 1 + sum((size - 1) * stride for size, stride in zip(t.shape[1:], t.stride()[1:]))
    room = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset() - row
    fits = min(rows, room // t.stride(0) + 1)
    return t.as_strided([fits, *t.shape[1:]], t.stride()) if fits > t.shape[0] else None


def _rows(t: torch.Tensor, n: int, rows: int, valid: torch.Tensor, neutral) -> torch.Tensor:
    """``t`` ([n, ...]) as [rows, ...], ``neutral`` past row n (``valid``:
    which rows are real, n a run-time operand). Its rows are read from its
    bucket where it is held padded, or from the buffer it is a prefix of,
    cut or padded to ``rows``: programs of fixed shapes, not one per n."""
    b = _tt._padded_value(t)
    b = b[0] if b and b[0].shape[1:] == t.shape[1:] else _prefix_of(t, rows)
    if b is None:
        b = t
    if b.shape[0] > rows:
        b = b.narrow(0, 0, rows)
    elif b.shape[0] < rows:
        b = torch.constant_pad_nd(b, [0, 0] * (t.dim() - 1) + [0, rows - b.shape[0]], 0)
    return torch.where(valid.view([rows] + [1] * (t.dim() - 1)), b, neutral)


def _paddable(md) -> bool:
    return (not any(md.spec_token_ids or ())
            and (md.thinking_budget_state_holder is None
                 or not md.thinking_budget_state_holder.has_tracked_requests())
            and all(isinstance(p, _BUILTIN) for p in md.logitsprocs.all))


def _held_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    if t.dim() == 0 or t.numel() == 0:  # (vLLM's placeholders: torch.empty(0))
        return t
    return _held(t.contiguous(), [n, *t.shape[1:]], 0)


def _host(t: torch.Tensor) -> torch.Tensor:
    """``t`` on the host, read from its bucket where it is held padded (no
    program of its exact shape)."""
    b = _tt._padded_value(t)
    return b[0].cpu()[tuple(slice(0, s) for s in t.shape)] if b else t.cpu()


class TpuSampler(Sampler):
    """vLLM's Sampler, padded to the bucket of the request count where
    bucketing is on (the engine's steps): the same tokens and logprobs as
    the exact sampler for every real request (the noise of unseeded
    requests is drawn for the padding rows too, so it is not the noise an
    exact draw of the default generator would give)."""

    def forward(self, logits, sampling_metadata, predict_bonus_token=False, logprobs_mode_override=None):
        self._sampling = True  # (gather_logprobs: the sampled tokens' logprobs)
        try:
            return self._forward(logits, sampling_metadata, predict_bonus_token, logprobs_mode_override)
        finally:
            self._sampling = False

    def _forward(self, logits, sampling_metadata, predict_bonus_token, logprobs_mode_override):
        n = logits.shape[0]
        md = sampling_metadata
        if n < 2 or not _tt._bucketing() or not _paddable(md):
            return super().forward(logits, md, predict_bonus_token, logprobs_mode_override)
        padded = _bucket(logits, 0, True)
        if padded is None:  # n is a bucket: the exact programs are the bucket's
            return super().forward(logits, md, predict_bonus_token, logprobs_mode_override)
        rows, vocab = padded.shape[0], logits.shape[1]
        valid = torch.arange(rows, device=logits.device) < n
        padded = torch.where(valid.view(rows, 1), padded, 0)
        fields = {}
        for name, neutral in _NEUTRAL.items():
            t = getattr(md, name)
            if isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape[0] == n:
                fields[name] = _rows(t, n, rows, valid, vocab if neutral is None else neutral)
        for name in ("output_token_ids", "spec_token_ids"):  # (lists of tokens per request)
            if getattr(md, name) is not None:
                fields[name] = list(getattr(md, name)) + [[] for _ in range(rows - n)]
        with _min_p_padded(md.logitsprocs, n, rows, valid):
            out = super().forward(padded, dataclasses.replace(md, **fields), predict_bonus_token,
                                  logprobs_mode_override)
        lp = out.logprobs_tensors
        if lp is not None:
            lp = lp._replace(logprob_token_ids=_held_rows(lp.logprob_token_ids, n),
                             logprobs=_held_rows(lp.logprobs, n),
                             selected_token_ranks=_held_rows(lp.selected_token_ranks, n))
        return SamplerOutput(sampled_token_ids=_held_rows(out.sampled_token_ids, n), logprobs_tensors=lp)

    _prompts: tuple = (None, 0, None)  # (vLLM's prompt tokens tensor, rows, their padded copy)
    # The engine's max_logprobs (the runner sets it): the sampled tokens'
    # logprobs' top-k is taken at that width whatever number a batch asks for.
    widest_logprobs: int | None = None
    _sampling = False

    def gather_logprobs(self, logprobs, num_logprobs, token_ids):
        """vLLM's gather_logprobs, for the sampled tokens at the engine's
        widest top-k, not at the batch's largest number of logprobs: a
        number met for the first time compiled its top-k and
        concatenations again, after the warm-up too. The extra columns are
        never read: vLLM keeps each request's own first ``logprobs``
        (``append_logprobs_for_next_position``). (The prompt's logprobs
        keep their number: the runner copies them into a buffer of it.)"""
        widest = self.widest_logprobs
        if (self._sampling and widest is not None and num_logprobs < widest <= logprobs.shape[-1]
                and _tt._bucketing()):
            num_logprobs = widest
        return Sampler.gather_logprobs(logprobs, num_logprobs, token_ids)

    def apply_penalties(self, logits, sampling_metadata, output_token_ids):
        """vLLM's penalties, counting the prompt and output tokens at
        bucketed lengths: vLLM pads both to the batch's longest with
        ``vocab`` (a token counted nowhere), lengths that change at every
        step; here they are padded on the host to their bucket and uploaded
        at that shape, so the counting programs are one per pair of buckets
        of rows and lengths (``warm_up_penalties``). The prompts' copy is
        kept while vLLM keeps its prompt tensor (until the batch changes)."""
        md = sampling_metadata
        if md.no_penalties:
            return logits
        rows, vocab = logits.shape
        prompts = md.prompt_token_ids
        if self._prompts[0] is not prompts or self._prompts[1] != rows:
            self._prompts = (prompts, rows, _padded_tokens(_host(prompts), rows, vocab, prompts.device))
        return apply_penalties(logits, self._prompts[2], _padded_tokens(output_token_ids, rows, vocab, logits.device),
                               md.presence_penalties, md.frequency_penalties, md.repetition_penalties)


def _padded_tokens(tokens, rows: int, vocab: int, device) -> torch.Tensor:
    """Token ids per row (a host tensor, or lists), as a [rows, bucket]
    int64 tpu tensor padded with ``vocab`` (vLLM's -1 placeholders too)."""
    lengths = [len(t) for t in tokens]
    width = _tt._bucket_of(max(max(lengths, default=0), 1) - 1)  # (the smallest bucket that holds them)
    out = np.full((rows, width), vocab, dtype=np.int64)
    for i, t in enumerate(tokens):
        out[i, :lengths[i]] = t.numpy() if isinstance(t, torch.Tensor) else t
    out[out == -1] = vocab
    with _exact_new_tensors():  # (already at a bucket's shape)
        return torch.from_numpy(out).to(device)


def warm_up_penalties(sampler: TpuSampler, device, vocab: int, row_buckets, longest: int) -> None:
    """Compiles the penalties' programs at every pair of a row bucket and a
    length bucket up to ``longest`` tokens (prompt and output lengths
    change at every step)."""
    lengths = [_tt._bucket_of(0)]
    while lengths[-1] < longest:
        lengths.append(_tt._bucket_of(lengths[-1]))
    for rows in row_buckets:
        per_row = [torch.ones(rows, device=device) for _ in range(3)]
        for length in lengths:
            tokens = torch.zeros(rows, length, dtype=torch.int64)
            md = types.SimpleNamespace(no_penalties=False, prompt_token_ids=tokens.to(device),
                                       presence_penalties=per_row[0], frequency_penalties=per_row[1],
                                       repetition_penalties=per_row[2])
            sampler.apply_penalties(torch.zeros(rows, vocab, device=device), md, tokens.tolist())


@contextlib.contextmanager
def _min_p_padded(procs, n, rows, valid):
    """Min-p's per-request tensor ([n, 1]) padded with 0 (no filtering)
    while the padded sampler runs."""
    saved = [(p, p.min_p) for p in procs.all
             if isinstance(p, MinPLogitsProcessor) and p.min_p_count and p.min_p.shape[0] == n]
    for p, t in saved:
        p.min_p = _rows(t, n, rows, valid, 0.0)
    try:
        yield
    finally:
        for p, t in saved:
            p.min_p = t

