"""tpu implementations of vLLM's pluggable layers, in torch ops.

vLLM lets a platform plugin replace a custom op's class by name
(``CustomOp.register_oot``); an out-of-tree platform's layers otherwise
fall back to CUDA or CPU kernels that do not exist for ``tpu``.

- ``unquantized_fused_moe``: the experts of a mixture-of-experts layer
  (Mixtral, Qwen-MoE, ...), after vLLM's router has picked each token's
  top-k experts and weights;
- the router's top-k softmax and sigmoid (``_moe_C`` kernels, which vLLM's
  CPU build does not have): ``fused_topk_router``'s functions.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

_lock = threading.Lock()
_registered = False


def _activation(name: str, gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    name = str(getattr(name, "value", name)).lower()
    if name in ("silu", "swiglu", "moeactivation.silu"):
        return F.silu(gate) * up
    if name in ("gelu", "moeactivation.gelu"):
        return F.gelu(gate) * up
    if name in ("gelu_tanh", "moeactivation.gelu_tanh"):
        return F.gelu(gate, approximate="tanh") * up
    raise NotImplementedError(f"tpu fused MoE: activation {name!r} is not supported (silu, gelu, gelu_tanh)")


def fused_experts(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, activation="silu") -> torch.Tensor:
    """``sum_k topk_weights[t, k] * expert[topk_ids[t, k]](x[t])``, with
    ``expert_e(x) = w2[e] @ act(w13[e] @ x)`` (``w13`` the gate and up
    projections stacked, ``[E, 2I, H]``; ``w2`` ``[E, H, I]``).

    Every expert runs on every token, weighted by the token's routing weight
    (zero for the experts it did not pick): static shapes, dense matmuls, no
    host round trip; E / k times the routed FLOPs, which is what small expert
    counts on a systolic array prefer to ragged gathers."""
    experts = w13.shape[0]
    weights = torch.zeros(x.shape[0], experts, dtype=torch.float32, device=x.device)
    weights.scatter_add_(1, topk_ids.to(torch.int64), topk_weights.to(torch.float32))
    hidden = _activation(activation, torch.einsum("th,eih->tei", x, w13))
    out = torch.einsum("tei,ehi->teh", hidden, w2)
    return torch.einsum("teh,te->th", out.float(), weights).to(x.dtype)


def topk_scores(topk_weights: torch.Tensor, topk_ids: torch.Tensor, token_expert_indices: torch.Tensor,
                gating_output: torch.Tensor, renormalize: bool = False, scoring: str = "softmax"):
    """vLLM's ``topk_softmax`` / ``topk_sigmoid``: each token's top-k experts
    by score and their scores (renormalized to sum to one if asked), written
    into the given outputs."""
    logits = gating_output.float()
    scores = logits.softmax(-1) if scoring == "softmax" else logits.sigmoid()
    k = topk_weights.shape[-1]
    values, ids = scores.topk(k, dim=-1)
    if renormalize:
        values = values / values.sum(-1, keepdim=True)
    topk_weights.copy_(values)
    topk_ids.copy_(ids.to(topk_ids.dtype))
    # The source row of each (token, k) pair, k-major, as vLLM's kernels give it.
    rows = torch.arange(ids.shape[0], device=ids.device, dtype=torch.int64).unsqueeze(1)
    token_expert_indices.copy_((rows + torch.arange(k, device=ids.device) * ids.shape[0]).to(
        token_expert_indices.dtype))
    return topk_weights, topk_ids


def register_layers() -> None:
    """Registers the tpu layers with vLLM (once per process)."""
    global _registered
    with _lock:
        if _registered:
            return
        from vllm.model_executor.custom_op import CustomOp
        from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

        class TpuUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
            @property
            def is_monolithic(self) -> bool:
                return False

            def forward_oot(self, layer, x, topk_weights, topk_ids, shared_experts=None,
                            shared_experts_input=None):
                if getattr(layer, "expert_map", None) is not None:
                    raise NotImplementedError("tpu fused MoE: expert parallelism (expert_map) is not supported yet")
                if getattr(layer, "apply_router_weight_on_input", False):
                    raise NotImplementedError("tpu fused MoE: apply_router_weight_on_input is not supported yet")
                if getattr(self.moe, "has_bias", False):
                    raise NotImplementedError("tpu fused MoE: experts with biases are not supported yet")
                out = fused_experts(x, layer.w13_weight, layer.w2_weight, topk_weights, topk_ids, layer.activation)
                if shared_experts is not None:
                    raise NotImplementedError("tpu fused MoE: shared experts inside the fused layer are not supported yet")
                return out

        CustomOp.register_oot(TpuUnquantizedFusedMoEMethod, name="UnquantizedFusedMoEMethod")

        from vllm.model_executor.layers.fused_moe.router import fused_topk_router

        def topk_softmax(w, ids, idx, gating, renormalize=False):
            return topk_scores(w, ids, idx, gating, renormalize, "softmax")

        def topk_sigmoid(w, ids, idx, gating, renormalize=False):
            return topk_scores(w, ids, idx, gating, renormalize, "sigmoid")

        fused_topk_router.vllm_topk_softmax = topk_softmax
        fused_topk_router.vllm_topk_sigmoid = topk_sigmoid
        _registered = True
