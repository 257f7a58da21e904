"""Attention over vLLM's paged KV cache on ``tpu``, in torch ops.

The KV cache of a layer is vLLM's ``[num_blocks, num_kv_heads, block_size,
2 * head_size]`` (keys then values in the last dimension), laid out
blocks-then-tokens (``KVCacheLayout.LBNHC``), so the cache seen as one row
per slot is a view: the write of a step's keys and values is one
``index_copy_`` into it, in place.

A step's batch is ragged: prefill chunks, decodes and mixed batches together,
``query_start_loc`` splitting the flat token axis into requests. Each token
attends to the keys of its own request up to its own position (causal), over
the request's blocks gathered from the block table, grouped-query heads
sharing their key-value head. The gathered keys have one fixed length per
step (the block table's width), so the programs' shapes depend only on the
number of tokens and requests in the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.registry import AttentionBackendEnum
from vllm.v1.kv_cache_layout import KVCacheLayout

from . import kernels

NAME = "TPU_PAGED"
PATH = "torch_tpu.vllm.attention.TpuAttentionBackend"


class TpuAttentionBackend(AttentionBackend):
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float16", "bfloat16", "float32"]
    forward_includes_kv_cache_update: bool = False

    @staticmethod
    def get_name() -> str:
        return NAME

    @staticmethod
    def get_impl_cls() -> type["TpuAttentionImpl"]:
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls() -> type["TpuAttentionMetadataBuilder"]:
        return TpuAttentionMetadataBuilder

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # Blocks, then tokens, then heads: one slot's keys and values are
        # contiguous, and the cache is a [slots, heads, 2 * head_size] view.
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_non_causal(cls) -> bool:
        return False

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    num_reqs: int
    max_query_len: int
    max_seq_len: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    # Per token (num_actual_tokens): its request and its position.
    token_request: torch.Tensor
    token_position: torch.Tensor


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):  # (abstract in vLLM's base)
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        m = common_attn_metadata
        # The step's token and request counts, padded to their buckets
        # (worker.TpuModelRunner): padding requests have no tokens and
        # padding tokens write to the null block.
        n, r = m.num_actual_tokens, m.num_reqs
        qsl = m.query_start_loc[: r + 1]
        req = kernels.token_requests(qsl, n).clamp(max=max(r - 1, 0))
        if m.positions is not None:
            pos = m.positions[:n].to(torch.int64)
        else:  # a token's position: its request's length less the tokens after it
            tok = torch.arange(n, device=qsl.device, dtype=torch.int64)
            pos = m.seq_lens[:r].to(torch.int64)[req] - (qsl[1:].to(torch.int64)[req] - tok)
        meta = TpuAttentionMetadata(
            num_actual_tokens=n, num_reqs=r, max_query_len=m.max_query_len, max_seq_len=m.max_seq_len,
            query_start_loc=qsl, seq_lens=m.seq_lens[:r], block_table=m.block_table_tensor[:r],
            slot_mapping=m.slot_mapping[:n], token_request=req, token_position=pos,
        )
        # The compiled forward (one Dynamo trace for every step) reads these
        # through vLLM's forward context: their token and request dimensions
        # are symbolic in it, as the model's inputs' token dimension is, so
        # each bucket's program is the same graph at other sizes. (The
        # forward reads no step-dependent Python number.)
        for t in (meta.token_request, meta.token_position, meta.slot_mapping, meta.seq_lens, meta.block_table,
                  meta.query_start_loc):
            torch._dynamo.maybe_mark_dynamic(t, 0)
        return meta


def scratch_bytes(tokens: int, heads: int, kv_heads: int, head_size: int, keys: int) -> int:
    """About the bytes ``TpuAttentionImpl.forward`` holds at once for a step
    of ``tokens`` tokens whose requests have up to ``keys`` keys: each
    token's gathered keys and values (float32 at most), its float32 scores
    and the few temporaries of their softmax."""
    return 4 * tokens * keys * (2 * kv_heads * head_size + 4 * heads)


def _exact(t: torch.Tensor) -> torch.Tensor:
    """``t`` as an exact tensor where eager ops hold it padded: the step's
    token count is already one of the runner's buckets, and held padded (at
    the next power of two above it) the block gather and every op after it
    would run at twice that size."""
    if torch.compiler.is_compiling():
        return t
    got = torch.ops.torch_tpu._padded_value(t)
    return got[0].narrow(0, 0, t.shape[0]).contiguous() if got else t


class TpuAttentionImpl(AttentionImpl):
    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: list[float] | None, sliding_window: int | None, kv_cache_dtype: str,
                 logits_soft_cap: float | None = None, attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None, sinks: torch.Tensor | None = None) -> None:
        if alibi_slopes is not None:
            raise NotImplementedError("tpu attention: ALiBi slopes are not supported yet")
        if sinks is not None:
            raise NotImplementedError("tpu attention: attention sinks are not supported yet")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"tpu attention: {attn_type} attention is not supported yet (decoder only)")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.sliding_window = sliding_window
        self.logits_soft_cap = logits_soft_cap or 0.0
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def _slots(self, kv_cache: torch.Tensor) -> torch.Tensor:
        blocks, heads, block_size, width = kv_cache.shape
        return kv_cache.transpose(1, 2).view(blocks * block_size, heads, width)

    def do_kv_cache_update(self, layer, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                           slot_mapping: torch.Tensor) -> None:
        n = min(key.shape[0], slot_mapping.shape[0])
        # Padding tokens carry slot -1: they go to block 0, which vLLM keeps
        # as its null block and never reads.
        slots = slot_mapping[:n].clamp(min=0)
        self._slots(kv_cache).index_copy_(0, slots, torch.cat([key[:n], value[:n]], -1).to(kv_cache.dtype))

    def forward(self, layer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                attn_metadata: TpuAttentionMetadata | None, output: torch.Tensor,
                output_scale: torch.Tensor | None = None, output_block_scale: torch.Tensor | None = None
                ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("tpu attention: fused output quantization is not supported")
        if attn_metadata is None:  # the profiling run
            return output.fill_(0)
        m = attn_metadata
        # Sizes from the tensors only (see TpuAttentionMetadataBuilder.build).
        n, d, hk = query.shape[0], self.head_size, self.num_kv_heads
        g = self.num_heads // hk
        block_size = kv_cache.shape[2]
        width = m.block_table.shape[1]
        # Each token's own request's blocks, in order, gathered in the cache's
        # own layout (whole contiguous blocks): [t, width * block_size, kv heads, 2d].
        # The scores are then each token's against its own request's keys,
        # not every request's.
        blocks_of = _exact(m.block_table.to(torch.int64)[m.token_request])
        kv = kv_cache.transpose(1, 2).index_select(0, blocks_of.reshape(-1)).view(n, width * block_size, hk, 2 * d)
        k, v = kv[..., :d], kv[..., d:]
        q = query.reshape(n, hk, g, d)
        scores = torch.einsum("tkgd,tskd->tkgs", q.to(k.dtype), k).float() * self.scale
        if self.logits_soft_cap:
            scores = self.logits_soft_cap * torch.tanh(scores / self.logits_soft_cap)
        s = torch.arange(width * block_size, device=q.device)
        pos = m.token_position.unsqueeze(1)
        visible = s.unsqueeze(0) <= pos  # [t, s]
        if self.sliding_window is not None:
            visible = visible & (s.unsqueeze(0) > pos - self.sliding_window)
        # A finite floor, not -inf: a padding token sees nothing, and its row
        # must stay finite (its keys and values are written to the null block).
        scores = scores.masked_fill(~visible[:, None, None], -1e30)
        p = scores.softmax(-1).to(v.dtype)
        # Values past a request's length were never written (or are another
        # step's padding): zero them, so that a zero weight times them is zero.
        written = s.unsqueeze(0) < m.seq_lens[m.token_request].unsqueeze(1)
        v = torch.where(written[:, :, None, None], v, torch.zeros((), dtype=v.dtype, device=v.device))
        out = torch.einsum("tkgs,tskd->tkgd", p, v)
        output.copy_(out.reshape(n, self.num_heads * d).to(output.dtype).view(output.shape))
        return output


# vLLM's attention layers look their backend up by name in this enum.
if NAME not in AttentionBackendEnum._member_map_:
    AttentionBackendEnum.register(NAME, PATH)
