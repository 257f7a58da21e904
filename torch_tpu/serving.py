"""Retired: torch_tpu's own serving engine gave way to vLLM on tpu.

vLLM's engine (scheduler, paged KV cache, prefix caching, sampler, OpenAI
server) runs on the tpu device through torch_tpu's platform plugin
(``torch_tpu/vllm``; ``pip install -e ".[vllm]"``), its forward compiled by
the tpu backend, a program per token bucket. What the engine here did:

    from vllm import LLM, SamplingParams
    llm = LLM(model="./my-hf-model", dtype="float32")
    outs = llm.generate(["Hello"], SamplingParams(max_tokens=16, temperature=0))

and its server: ``vllm serve ./my-hf-model`` (``python -m torch_tpu.serve``
is an alias of it).
"""

raise ImportError(
    "torch_tpu.serving was retired: serve with vLLM on tpu (torch_tpu's vLLM platform plugin, "
    "pip install -e '.[vllm]'): `from vllm import LLM, SamplingParams; LLM(model=...).generate(...)`, "
    "or `vllm serve MODEL` (python -m torch_tpu.serve is an alias of it). See README, 'vLLM on tpu'."
)
