"""vLLM on tpu through torch_tpu's platform plugin (torch_tpu/vllm): vLLM's
own engine (scheduler, paged KV cache, sampler) with the model on tpu. One
engine for the module, in this process; tokens against Hugging Face on CPU.
The attention backend and the slot mapping are also checked alone against
references in plain PyTorch on CPU."""

import os
import random
import subprocess
import sys

import pytest
import torch

import torch_tpu

vllm = pytest.importorskip("vllm")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from torch_tpu.vllm import attention as tpu_attention  # noqa: E402
from torch_tpu.vllm import kernels  # noqa: E402

VOCAB, BLOCK, MAX_LEN, BUDGET = 256, 16, 128, 64


def _save_model(path):
    words = ["<unk>", "<pad>", "<eos>", "<bos>"] + [f"w{i}" for i in range(VOCAB - 4)]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                                eos_token="<eos>", bos_token="<bos>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                   max_position_embeddings=MAX_LEN, eos_token_id=2, bos_token_id=3, pad_token_id=1,
                                   tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # large weights: peaked logits, so greedy tokens vary and have no near-ties
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return model.eval()


@pytest.fixture(scope="module")
def hf_and_llm(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("llama"))
    hf = _save_model(path)
    with pytest.MonkeyPatch.context() as mp:
        if torch_tpu.get_execution_mode() != "strict":  # (what the warm-up steps do is checked in strict eager)
            mp.setenv("TORCH_TPU_VLLM_WARMUP_STEPS", "0")
        llm = in_process_llm(path, enable_prefix_caching=True)
    yield hf, llm
    del llm


def in_process_llm(path, **kw):
    """A small vLLM engine for ``path``, its engine core in this process
    (so that tests reach its worker), float32, a 64-token step budget."""
    old = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        return vllm.LLM(model=path, **{**dict(dtype="float32", max_model_len=MAX_LEN, kv_cache_memory_bytes=8 << 20,
                                              max_num_seqs=8, max_num_batched_tokens=BUDGET, seed=0), **kw})
    finally:
        if old is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = old


def _hf_greedy(hf, ids, n):
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[-n:]


def _prompt(ids):
    return {"prompt_token_ids": list(ids)}


def _ids(seed, n):
    rng = random.Random(seed)
    return [rng.randrange(4, VOCAB) for _ in range(n)]


def test_vllm_selects_the_tpu_platform_and_runs_the_model_on_tpu(hf_and_llm):
    _, llm = hf_and_llm
    from vllm.platforms import current_platform

    assert current_platform.device_type == "tpu" and current_platform.dispatch_key == "PrivateUse1"
    worker = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker
    runner = worker.model_runner
    assert worker.device.type == "tpu"
    assert {p.device.type for p in runner.model.parameters()} == {"tpu"}
    assert runner.kv_caches and all(kv.device.type == "tpu" for kv in runner.kv_caches)


def test_steps_are_padded_to_token_and_request_buckets(hf_and_llm):
    import numpy as np
    from torch_tpu.vllm import worker as tpu_worker

    _, llm = hf_and_llm
    runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    assert runner.token_buckets == [16, 32, BUDGET] and runner.request_buckets == [8]
    assert tpu_worker.buckets(100, 8) == [8, 16, 32, 64, 100]
    for tokens, reqs, want in ((1, 1, 16), (17, 3, 32), (47, 8, 64)):
        mode, desc, *_ = runner._determine_batch_execution_and_padding(
            num_tokens=tokens, num_reqs=reqs, num_scheduled_tokens_np=np.ones(reqs, dtype=np.int32),
            max_num_scheduled_tokens=1)
        # vLLM's full-graph mode: its attention metadata padded as well (no CUDA graph is captured).
        assert (mode.name, desc.num_tokens, desc.num_reqs) == ("FULL", want, 8)


def test_greedy_tokens_equal_hf_in_prefill_decode_and_mixed_chunked_batches(hf_and_llm):
    hf, llm = hf_and_llm
    # 5 + 70 + 20 prompt tokens against a 64-token step budget: the long
    # prompt is prefilled in chunks, in steps shared with the others' decodes.
    prompts = [_ids(1, 5), _ids(2, 70), _ids(3, 20), _ids(4, 1)]
    params = vllm.SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    outs = llm.generate([_prompt(p) for p in prompts], params, use_tqdm=False)
    for p, o in zip(prompts, outs):
        assert list(o.outputs[0].token_ids) == _hf_greedy(hf, p, 12), f"prompt of {len(p)} tokens"
        assert o.outputs[0].finish_reason == "length"


def test_prefix_caching_reuses_the_shared_blocks_and_gives_the_same_tokens(hf_and_llm):
    hf, llm = hf_and_llm
    shared = _ids(10, 3 * BLOCK + 5)
    params = vllm.SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    first = llm.generate([_prompt(shared + [7, 8])], params, use_tqdm=False)[0]
    second = llm.generate([_prompt(shared + [9])], params, use_tqdm=False)[0]
    assert second.num_cached_tokens >= 3 * BLOCK  # the three full blocks of the shared prefix
    assert list(first.outputs[0].token_ids) == _hf_greedy(hf, shared + [7, 8], 6)
    assert list(second.outputs[0].token_ids) == _hf_greedy(hf, shared + [9], 6)


def test_stop_strings_and_max_tokens(hf_and_llm):
    hf, llm = hf_and_llm
    prompt = _ids(20, 9)
    want = _hf_greedy(hf, prompt, 8)
    words = [f"w{t - 4}" for t in want]
    stop_at = next(i for i in range(2, 8) if words[i] not in words[:i])
    o = llm.generate([_prompt(prompt)], vllm.SamplingParams(max_tokens=8, temperature=0, ignore_eos=True,
                                                             stop=[words[stop_at]]), use_tqdm=False)[0].outputs[0]
    assert o.finish_reason == "stop" and o.stop_reason == words[stop_at]
    assert o.text.split() == words[:stop_at]
    o = llm.generate([_prompt(prompt)], vllm.SamplingParams(max_tokens=3, temperature=0, ignore_eos=True),
                     use_tqdm=False)[0].outputs[0]
    assert list(o.token_ids) == want[:3] and o.finish_reason == "length"


def test_seeded_sampling_repeats_and_draws_within_top_k_and_top_p(hf_and_llm):
    hf, llm = hf_and_llm
    prompt = _ids(30, 7)
    n, top_k, top_p, temp = 16, 8, 0.9, 1.5

    def sample(seed, **kw):
        params = vllm.SamplingParams(max_tokens=n, ignore_eos=True, seed=seed, **kw)
        return list(llm.generate([_prompt(prompt)], params, use_tqdm=False)[0].outputs[0].token_ids)

    a = sample(1, temperature=temp, top_k=top_k, top_p=top_p)
    assert sample(1, temperature=temp, top_k=top_k, top_p=top_p) == a
    assert sample(2, temperature=temp, top_k=top_k, top_p=top_p) != a
    assert sample(5, temperature=1.0, top_k=1) == _hf_greedy(hf, prompt, n)
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + a])).logits[0, len(prompt) - 1:-1].double() / temp
    for step, token in enumerate(a):
        ranked = logits[step].argsort(descending=True)
        rank = int((ranked == token).nonzero())
        assert rank < top_k, f"step {step}: token of rank {rank}"
        probs = logits[step][ranked[:top_k]].softmax(0)
        assert float(probs[:rank].sum()) < top_p + 1e-6, f"step {step}: token outside the top-p nucleus"


def test_logprobs_and_parallel_samples(hf_and_llm):
    hf, llm = hf_and_llm
    prompt = _ids(40, 6)
    o = llm.generate([_prompt(prompt)], vllm.SamplingParams(max_tokens=5, temperature=0, ignore_eos=True, logprobs=3,
                                                             prompt_logprobs=2), use_tqdm=False)[0]
    tokens = list(o.outputs[0].token_ids)
    with torch.no_grad():
        want = hf(torch.tensor([prompt + tokens])).logits[0].double().log_softmax(-1)
    for step, (token, top) in enumerate(zip(tokens, o.outputs[0].logprobs)):
        assert top[token].rank == 1
        assert abs(top[token].logprob - float(want[len(prompt) - 1 + step, token])) < 1e-4
        assert len(top) >= 3
    for i, entry in enumerate(o.prompt_logprobs[1:], start=1):  # each prompt token given the ones before it
        assert abs(entry[prompt[i]].logprob - float(want[i - 1, prompt[i]])) < 1e-4
    outs = llm.generate([_prompt(prompt)], vllm.SamplingParams(max_tokens=4, temperature=1.5, n=3, seed=7,
                                                                ignore_eos=True), use_tqdm=False)[0].outputs
    assert len(outs) == 3 and len({tuple(c.token_ids) for c in outs}) > 1


def _hf_penalized(hf, prompt, n, repetition=1.0, presence=0.0, frequency=0.0):
    """Greedy tokens under OpenAI's penalties, as vLLM defines them: the
    repetition penalty divides the positive logits of tokens seen in the
    prompt or the output (multiplies the negative ones), presence and
    frequency subtract per output token (float64, HF's logits)."""
    ids, out = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            logits = hf(torch.tensor([ids])).logits[0, -1].double()
            for t in set(prompt) | set(out):
                logits[t] = logits[t] / repetition if logits[t] > 0 else logits[t] * repetition
            for t in set(out):
                logits[t] -= frequency * out.count(t) + presence
            out.append(int(logits.argmax()))
            ids.append(out[-1])
    return out


# Each kind of row the sampler handles, with the tokens it must give: the
# filters that leave one token (top-k 1, top-p below the top token's
# probability, min-p 1) give the greedy token at any temperature.
_SAMPLER_ROWS = [
    (dict(temperature=0), {}),
    (dict(temperature=0.8, top_k=1), {}),
    (dict(temperature=1.3, top_p=1e-6), {}),
    (dict(temperature=0.7, min_p=1.0), {}),
    (dict(temperature=0, repetition_penalty=1.6), dict(repetition=1.6)),
    (dict(temperature=0, presence_penalty=1.5, frequency_penalty=0.7), dict(presence=1.5, frequency=0.7)),
    (dict(temperature=0, logprobs=2), {}),
    (dict(temperature=0.9, top_k=1, logprobs=5), {}),  # (a number of logprobs met after the first batch)
]


@pytest.mark.strict_eager_only  # (the compile count is the strict engine's; the values are checked there)
def test_sampler_features_in_mixed_batches_give_reference_tokens_and_compile_nothing_again(hf_and_llm):
    """vLLM's sampler runs at the bucket of the step's request count
    (torch_tpu/vllm/sampler.py): rows of every kind in one batch (top-k,
    top-p, min-p, penalties, logprobs) give the reference tokens; once a
    kind has been met in a bucket, batches of new request counts, prompt
    lengths and output lengths compile nothing (penalties count tokens at
    bucketed lengths), nor does a number of logprobs met for the first
    time (their top-k is taken at the engine's widest)."""
    import torch_tpu

    hf, llm = hf_and_llm

    def built():
        s = torch_tpu.cache_stats()
        return s["misses"] + s["disk_hits"]

    def run(seed, kinds, lengths, n):
        prompts = [_ids(seed + k, length) for k, length in enumerate(lengths)]
        params = [vllm.SamplingParams(max_tokens=n, ignore_eos=True, **_SAMPLER_ROWS[k][0]) for k in kinds]
        outs = llm.generate([_prompt(p) for p in prompts], params, use_tqdm=False)
        for k, p, o in zip(kinds, prompts, outs):
            got = list(o.outputs[0].token_ids)
            assert got == _hf_penalized(hf, p, n, **_SAMPLER_ROWS[k][1]), f"row kind {_SAMPLER_ROWS[k][0]}"
            if o.outputs[0].logprobs:
                with torch.no_grad():
                    want = hf(torch.tensor([p + got])).logits[0, len(p) - 1:-1].double().log_softmax(-1)
                for step, (token, top) in enumerate(zip(got, o.outputs[0].logprobs)):
                    assert top[token].rank == 1 and len(top) >= 2
                    assert abs(top[token].logprob - float(want[step, token])) < 1e-4

    run(700, range(len(_SAMPLER_ROWS) - 1), [5, 9, 14, 3, 11, 7, 6], 6)
    before = built()
    run(800, [7, 6, 5, 4, 3, 2, 1], [17, 2, 30, 8, 12, 21, 10], 9)
    run(900, [4, 5, 0, 3, 1], [40, 4, 23, 9, 15], 4)
    assert built() == before


def test_the_forward_is_one_compiled_graph_captured_per_bucket_at_start_up(hf_and_llm):
    import torch_tpu

    hf, llm = hf_and_llm
    runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    cc = runner.vllm_config.compilation_config
    assert (cc.mode.name, cc.backend) == ("DYNAMO_TRACE_ONCE", "tpu")
    # Prompts of lengths no earlier test used: every step's forward replays
    # a program the warm-up captured for its bucket; none is captured now.
    before = torch_tpu.compiler.stats()
    prompts = [_ids(40, 9), _ids(41, 23), _ids(42, 2)]
    params = vllm.SamplingParams(max_tokens=5, temperature=0, ignore_eos=True)
    outs = llm.generate([_prompt(p) for p in prompts], params, use_tqdm=False)
    after = torch_tpu.compiler.stats()
    assert after["captures"] == before["captures"] and after["op_runs"] == before["op_runs"]
    assert after["replays"] - before["replays"] >= 5  # a replay per step at least
    for p, o in zip(prompts, outs):
        assert list(o.outputs[0].token_ids) == _hf_greedy(hf, p, 5)


@pytest.mark.strict_eager_only  # (fused eager flushes a step's input preparation as one graph, whose
# structure follows how many requests the step adds: about one new graph per round of new batches)
def test_requests_of_new_lengths_compile_nothing_once_the_engine_is_up(hf_and_llm):
    """Issue 46's steady state: after the engine's start (its warm-up steps
    through vLLM's input preparation and sampler at every token and request
    bucket), greedy batches of new request counts, prompt lengths and
    output lengths compile no program and load none, and give HF's tokens:
    prompts longer than the step's budget (prefilled in chunks that share
    steps with other requests' decodes, split as the scheduler goes), more
    requests than a step holds, prompts sharing a cached prefix.
    (A sampled batch of a request count met for the first time compiles
    vLLM's noise draw, made at the exact count.)"""
    import torch_tpu

    hf, llm = hf_and_llm
    rng = random.Random(7)
    shared = _ids(499, 40)

    def built():
        s = torch_tpu.cache_stats()
        return s["misses"] + s["disk_hits"]

    before = built()
    for round_, count in enumerate([3, 1, 11, 5, 8]):
        prompts = [_ids(500 + 10 * round_ + k, rng.randint(1, MAX_LEN - 10)) for k in range(count)]
        if round_ == 2:
            prompts = [shared[:rng.randint(17, 40)] + p[:60] for p in prompts]
        n = rng.randint(2, 9)
        outs = llm.generate([_prompt(p) for p in prompts], vllm.SamplingParams(max_tokens=n, temperature=0,
                                                                               ignore_eos=True), use_tqdm=False)
        assert built() == before, f"round {round_}: {len(prompts)} requests of {[len(p) for p in prompts]} tokens"
        if round_ < 2:
            for p, o in zip(prompts, outs):
                assert list(o.outputs[0].token_ids) == _hf_greedy(hf, p, n)


@pytest.mark.strict_eager_only  # (loading the artifact does not depend on the mode)
def test_the_compiled_forward_loads_from_its_aot_artifact_in_a_new_process(hf_and_llm):
    """vLLM saves the compiled forward (PyTorch's AOT compile) and a second
    start with the same model and configuration loads it: no Dynamo trace,
    no compile of the model's graph, the same tokens. The second start has
    a KV cache of another size (vLLM's cache key leaves it out): the graph
    must not have baked the block count in."""
    hf, llm = hf_and_llm
    runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    root = runner.vllm_config.compilation_config.local_cache_dir.split(os.sep + "torch_compile_cache")[0]
    p = _ids(43, 11)
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
            "import test_vllm as T, vllm, torch_tpu\n"
            "from vllm.compilation.counter import compilation_counter as cc\n"
            f"llm = T.in_process_llm({runner.vllm_config.model_config.model!r}, enable_prefix_caching=True,"
            " kv_cache_memory_bytes=6 << 20)\n"
            "o = llm.generate([T._prompt(%r)], vllm.SamplingParams(max_tokens=5, temperature=0, ignore_eos=True),"
            " use_tqdm=False)[0]\n"
            "s = torch_tpu.compiler.stats()\n"
            "print('RESULT', cc.num_aot_artifacts_loaded, cc.num_aot_compiles, s['graphs'], s['op_runs'],"
            " *o.outputs[0].token_ids)\n" % (p,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=400,
                         env={**os.environ, "VLLM_CACHE_ROOT": root})
    assert out.returncode == 0, out.stderr[-3000:]
    loaded, compiles, graphs, op_runs, *tokens = map(int, out.stdout.split("RESULT")[1].split())
    # (the one graph is vLLM's own compiled helper counting the sampled
    # tokens' logprob ranks, which the warm-up's sampled steps reach)
    assert (loaded, compiles, graphs, op_runs) == (1, 0, 1, 0)
    assert tokens == _hf_greedy(hf, p, 5)


def test_vllm_cpu_kernels_refuse_tpu_tensors_with_a_python_error(hf_and_llm):
    x = torch.randn(4, 16, device="tpu")
    out = torch.empty(4, 8, device="tpu")
    with pytest.raises(NotImplementedError, match=r"_C::silu_and_mul.*raw pointers"):
        torch.ops._C.silu_and_mul(out, x)
    # Guarded, not crashed: the device and the CPU kernel still work.
    assert torch.equal((x + 1).cpu(), x.cpu() + 1)
    cpu_out = torch.empty(4, 8)
    torch.ops._C.silu_and_mul(cpu_out, x.cpu())
    ref = torch.nn.functional.silu(x.cpu()[:, :8]) * x.cpu()[:, 8:]
    torch.testing.assert_close(cpu_out, ref)


@pytest.mark.strict_eager_only  # (a fresh process registering the kernel; no op runs)
def test_the_slot_mapping_kernel_is_overridden_after_llvmlite_is_imported():
    # vLLM's kernel registration scans every module and stopped on
    # llvmlite's library wrapper (numba, a vLLM dependency, imports it):
    # the engine then failed to start in any process that had imported it.
    code = ("import llvmlite.binding.ffi\n"
            "from torch_tpu.vllm import kernels\n"
            "kernels.register_overrides()\n"
            "from vllm.v1.worker.block_table import ComputeSlotMappingKernel as K\n"
            "print('RESULT', type(K.kernel).__name__, K.kernel.func is kernels.compute_slot_mapping)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("RESULT")[1].split() == ["KernelOverride", "True"]


def test_the_kv_cache_takes_its_share_of_the_device_memory_when_no_size_is_given():
    # vLLM's default sizing (no kv_cache_memory_bytes): gpu_memory_utilization
    # of the device's memory less the model's peak in the profiling run,
    # and never more than what is free; a share too small says what to do.
    import types

    from torch_tpu.vllm import worker as tpu_worker

    held = []

    class Runner:
        def profile_run(self):  # the model's peak: 1 MiB held
            held.append(torch.empty(1 << 18, device="tpu"))

    w = object.__new__(tpu_worker.TpuWorker)
    w.device, w.model_runner, w.vllm_config = torch.device("tpu", 0), Runner(), None
    w.cache_config = types.SimpleNamespace(kv_cache_memory_bytes=None, gpu_memory_utilization=0.05)
    got = w.determine_available_memory()
    total, peak = torch.tpu.mem_get_info(0)[1], torch.tpu.max_memory_allocated(0)
    assert 0 < got == int(total * 0.05) - peak and peak >= 1 << 20  # (far less than is free)
    w.cache_config.kv_cache_memory_bytes = 3 << 20
    assert w.determine_available_memory() == 3 << 20
    w.cache_config = types.SimpleNamespace(kv_cache_memory_bytes=None, gpu_memory_utilization=1e-12)
    with pytest.raises(ValueError, match="no memory left for the KV cache.*gpu_memory_utilization"):
        w.determine_available_memory()


@pytest.mark.strict_eager_only  # (registration and platform detection: no op of a mode runs)
def test_the_plugin_steps_aside_when_turned_off(monkeypatch):
    from torch_tpu import vllm as plugin

    assert plugin.register() == plugin.PLATFORM
    monkeypatch.setenv("TORCH_TPU_VLLM", "0")
    assert plugin.register() is None
    # A fresh process: vLLM then detects its own (CPU) platform, and its
    # version, as the `vllm` command reads it, carries the CPU build's mark.
    code = ("import importlib.metadata, vllm\n"
            "from vllm.platforms import current_platform\n"
            "print(current_platform.device_type, importlib.metadata.version('vllm'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TORCH_TPU_VLLM": "0"})
    assert out.returncode == 0, out.stderr[-3000:]
    device, version = out.stdout.split()[-2:]
    assert device == "cpu" and version.endswith("+cpu")


def test_slot_mapping_matches_the_block_tables_and_compiles_once_per_bucket():
    """As vLLM calls it: each step's query starts and positions are the
    prefix of a persistent buffer whose tail holds other values (here
    garbage, out of any range), steps of new token and request counts. The
    slots equal the block tables', padding slots -1; a new count within its
    power-of-two bucket builds no program."""
    import torch_tpu

    rng = random.Random(0)
    max_reqs, width, max_tokens = 6, 5, 48
    table = torch.tensor([[rng.randrange(1, 40) for _ in range(width)] for _ in range(max_reqs)], dtype=torch.int32)
    qsl_buf = torch.full((max_reqs + 1,), 7, dtype=torch.int32, device="tpu")
    pos_buf = torch.randint(-5, 10**6, (max_tokens,), device="tpu")
    slots = torch.full((max_tokens,), 12345, dtype=torch.int64, device="tpu")
    built = []
    for qlens in ([3, 1, 9, 1], [2, 2], [1, 1, 1, 1, 1], [4, 5, 2], [1], [3, 3, 3, 3, 3, 3]):
        starts = [0]
        for q in qlens:
            starts.append(starts[-1] + q)
        positions = []
        for q in qlens:
            past = rng.randrange(0, width * BLOCK - q)
            positions += list(range(past, past + q))
        n = starts[-1]
        qsl_buf[:len(starts)] = torch.tensor(starts, dtype=torch.int32)
        pos_buf[:n] = torch.tensor(positions)
        before = torch_tpu.counters()["programs_built"]
        kernels.compute_slot_mapping(n, max_tokens, qsl_buf[:len(starts)], pos_buf[:n], table.to("tpu"), width, slots,
                                     BLOCK)
        built.append(torch_tpu.counters()["programs_built"] - before)
        want = []
        for r, q in enumerate(qlens):
            for pos in positions[starts[r]:starts[r] + q]:
                want.append(int(table[r, pos // BLOCK]) * BLOCK + pos % BLOCK)
        assert slots.cpu().tolist() == want + [-1] * (max_tokens - n), qlens
    # 14, 4, 5, 11, 1 and 18 tokens: buckets of 16 (built at the first) and 32
    assert built[1:5] == [0, 0, 0, 0], built


class _Common:
    """The fields of vLLM's CommonAttentionMetadata the backend reads."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.mark.parametrize("dtype,window,with_positions", [(torch.float32, None, True), (torch.float32, 7, False),
                                                         (torch.bfloat16, None, True)])
def test_paged_attention_matches_per_request_attention_on_cpu(dtype, window, with_positions):
    rng = random.Random(1)
    heads, kv_heads, d, blocks = 4, 2, 16, 24
    width = 4  # blocks per request in the block table
    # A mixed step: a prefill chunk after cached tokens, two decodes, a fresh prefill.
    qlens, past = [5, 1, 1, 7], [9, 30, 0, 0]
    seq = [p + q for p, q in zip(past, qlens)]
    r, n = len(qlens), sum(qlens)
    ids = list(range(1, blocks))
    rng.shuffle(ids)
    table = torch.tensor([ids[i * width:(i + 1) * width] for i in range(r)], dtype=torch.int32)
    gen = torch.Generator().manual_seed(0)
    # The cache in the backend's layout: [blocks, block tokens, kv heads, 2d], seen as [blocks, kv heads, tokens, 2d].
    cache = torch.randn(blocks, BLOCK, kv_heads, 2 * d, generator=gen).to(dtype)
    q = torch.randn(n, heads, d, generator=gen).to(dtype)
    k = torch.randn(n, kv_heads, d, generator=gen).to(dtype)
    v = torch.randn(n, kv_heads, d, generator=gen).to(dtype)
    starts = [0]
    for x in qlens:
        starts.append(starts[-1] + x)
    positions = [p for i in range(r) for p in range(past[i], seq[i])]
    slots = torch.tensor([int(table[i, p // BLOCK]) * BLOCK + p % BLOCK
                          for i in range(r) for p in range(past[i], seq[i])])

    # The step as vLLM pads it to its buckets: 3 padding tokens (slot -1, the
    # null block 0) and a padding request with no tokens and a null block table.
    pad = 3
    qp = torch.cat([q, torch.randn(pad, heads, d, generator=gen).to(dtype)])
    kp = torch.cat([k, torch.randn(pad, kv_heads, d, generator=gen).to(dtype)])
    vp = torch.cat([v, torch.randn(pad, kv_heads, d, generator=gen).to(dtype)])
    slots_p = torch.cat([slots, torch.full((pad,), -1)])
    tcache = cache.to("tpu").transpose(1, 2)  # the backend's logical view
    impl = tpu_attention.TpuAttentionImpl(heads, d, d ** -0.5, kv_heads, None, window, "auto")
    impl.do_kv_cache_update(None, kp.to("tpu"), vp.to("tpu"), tcache, slots_p.to("tpu"))
    common = _Common(num_actual_tokens=n + pad, num_reqs=r + 1, max_query_len=max(qlens), max_seq_len=max(seq),
                     query_start_loc=torch.tensor(starts + [n], dtype=torch.int32, device="tpu"),
                     seq_lens=torch.tensor(seq + [0], dtype=torch.int32, device="tpu"),
                     block_table_tensor=torch.cat([table, torch.zeros(1, width, dtype=torch.int32)]).to("tpu"),
                     slot_mapping=slots_p.to("tpu"),
                     positions=torch.tensor(positions + [0] * pad, device="tpu") if with_positions else None)
    builder = tpu_attention.TpuAttentionMetadataBuilder.__new__(tpu_attention.TpuAttentionMetadataBuilder)
    meta = builder.build(0, common)
    assert meta.token_position.cpu().tolist()[:n] == positions
    out = torch.full((n + pad, heads * d), float("nan"), dtype=dtype, device="tpu")
    impl.forward(None, qp.to("tpu"), kp.to("tpu"), vp.to("tpu"), tcache, meta, out)

    # Reference: the cache written in plain PyTorch, then attention per request.
    ref_cache = cache.clone().reshape(blocks * BLOCK, kv_heads, 2 * d)
    ref_cache[slots] = torch.cat([k, v], -1)
    want = torch.zeros(n, heads, d, dtype=torch.float64)
    for i in range(r):
        rows = torch.cat([ref_cache[int(b) * BLOCK:(int(b) + 1) * BLOCK] for b in table[i]])[:seq[i]].double()
        keys = rows[..., :d].repeat_interleave(heads // kv_heads, 1)
        vals = rows[..., d:].repeat_interleave(heads // kv_heads, 1)
        for j in range(qlens[i]):
            t, pos = starts[i] + j, past[i] + j
            lo = 0 if window is None else max(0, pos - window + 1)
            s = torch.einsum("hd,shd->hs", q[t].double(), keys[lo:pos + 1]) * d ** -0.5
            want[t] = torch.einsum("hs,shd->hd", s.softmax(-1), vals[lo:pos + 1])
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[:n].cpu().double(), want.reshape(n, heads * d), **tol)
    assert out[n:].cpu().isfinite().all()  # padding rows: finite, ignored
    # Every block but the null block, where the padding went.
    torch.testing.assert_close(tcache.transpose(1, 2).cpu().reshape(blocks * BLOCK, kv_heads, 2 * d)[BLOCK:],
                               ref_cache[BLOCK:])
