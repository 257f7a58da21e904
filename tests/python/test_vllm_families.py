"""vLLM on tpu with model families beyond Llama: Qwen2 (biased QKV) and a
Mixtral-style mixture of experts (vLLM's router and fused-MoE layer, whose
tpu versions are torch_tpu/vllm/layers.py). Greedy tokens against Hugging
Face on CPU; one engine per family, in this process."""

import pytest
import torch

vllm = pytest.importorskip("vllm")
transformers = pytest.importorskip("transformers")

from test_vllm import _hf_greedy, _ids, _prompt, _save_model, in_process_llm  # noqa: E402

from torch_tpu.vllm import layers  # noqa: E402


def _family(name):
    common = dict(vocab_size=256, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=128, tie_word_embeddings=False)
    if name == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(intermediate_size=256, **common))
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        intermediate_size=128, head_dim=32, num_local_experts=4, num_experts_per_tok=2, **common))


@pytest.fixture(scope="module", params=["qwen2", "mixtral"])
def hf_and_llm(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp(request.param))
    _save_model(path)  # the tokenizer (the Llama it also saves is replaced below)
    torch.manual_seed(0)
    hf = _family(request.param)
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5)
    hf.save_pretrained(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCH_TPU_VLLM_WARMUP_STEPS", "0")  # (the engine's warm-up steps are test_vllm.py's to check)
        llm = in_process_llm(path)
    yield hf.eval(), llm
    del llm


def test_greedy_tokens_equal_hf(hf_and_llm):
    hf, llm = hf_and_llm
    prompts = [_ids(1, 5), _ids(2, 70), _ids(3, 20)]  # the 70-token prompt is prefilled in two chunks
    params = vllm.SamplingParams(max_tokens=10, temperature=0, ignore_eos=True)
    outs = llm.generate([_prompt(p) for p in prompts], params, use_tqdm=False)
    for p, o in zip(prompts, outs):
        assert list(o.outputs[0].token_ids) == _hf_greedy(hf, p, 10), f"prompt of {len(p)} tokens"


@pytest.mark.parametrize("renormalize", [False, True])
def test_moe_router_and_experts_match_hf_mixtral_block(renormalize):
    torch.manual_seed(1)
    cfg = transformers.MixtralConfig(hidden_size=32, intermediate_size=24, num_local_experts=5, num_experts_per_tok=2)
    block = transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock(cfg).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(9, 32)
    logits = x @ block.gate.weight.T
    t = lambda a: a.to("tpu")  # noqa: E731
    w = torch.empty(9, 2, device="tpu")
    ids = torch.empty(9, 2, dtype=torch.int32, device="tpu")
    idx = torch.empty(9, 2, dtype=torch.int32, device="tpu")
    layers.topk_scores(w, ids, idx, t(logits), renormalize)
    want_w, want_ids = logits.softmax(-1).topk(2, dim=-1)
    if renormalize:
        want_w = want_w / want_w.sum(-1, keepdim=True)
    assert ids.cpu().tolist() == want_ids.int().tolist()
    torch.testing.assert_close(w.cpu(), want_w)
    assert idx.cpu().tolist() == [[t_ + k * 9 for k in range(2)] for t_ in range(9)]
    # The experts, stacked as vLLM loads them: w13 = [gate; up], w2 = down.
    experts = block.experts
    w13, w2 = experts.gate_up_proj.detach(), experts.down_proj.detach()
    if renormalize:  # Mixtral's own routing: the HF block end to end
        with torch.no_grad():
            want = block(x.unsqueeze(0))
            want = want[0] if isinstance(want, tuple) else want
        got = layers.fused_experts(t(x), t(w13), t(w2), w, ids, "silu")
        torch.testing.assert_close(got.cpu(), want.reshape(9, 32), rtol=1e-5, atol=1e-5)
