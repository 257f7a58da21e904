"""The serving engine (torch_tpu.serving) and its OpenAI-compatible server
(torch_tpu.serve): tokens equal to Hugging Face generate() on CPU, sampling
parameters that hold, continuous batching, and no compile after warm-up."""

import os
import random
import subprocess
import sys
import threading
import time

import pytest
import torch

import torch_tpu
from conftest import free_port
from torch_tpu import compiler, serving

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

MAX_SLOTS, MAX_LEN = 4, 64


def _model():
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(serving.tiny_model_config()).eval()


@pytest.fixture(scope="module")
def cpu_model():
    return _model()


@pytest.fixture(scope="module")
def engine():
    e = serving.Engine(_model(), config=serving.EngineConfig(max_slots=MAX_SLOTS, max_len=MAX_LEN))
    e.warmup()
    return e


def _cpu_greedy(model, prompt, n):
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=model.config.vocab_size - 1)
    return out[0, len(prompt):].tolist()


def _prompts(seed, count, lo=1, hi=MAX_LEN // 2):
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(rng.randint(lo, hi))] for _ in range(count)]


GREEDY = serving.SamplingParams(max_tokens=10, temperature=0, ignore_eos=True)


def test_greedy_tokens_equal_hf_generate_on_cpu_with_more_requests_than_slots(engine, cpu_model):
    prompts = _prompts(0, 2 * MAX_SLOTS + 1)  # requests wait for slots and join between decode steps
    prefills = engine.stats["prefills"]
    got = engine.generate(prompts, GREEDY)
    assert got == [_cpu_greedy(cpu_model, p, 10) for p in prompts]
    assert engine.stats["prefills"] - prefills < len(prompts)  # prompts admitted together are packed


def test_requests_of_different_lengths_leave_and_join_between_steps(engine, cpu_model):
    prompts = _prompts(1, 6, 1, 40)
    params = [serving.SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in (1, 7, 3, 12, 2, 9)]
    got = engine.generate(prompts, params)
    assert [len(g) for g in got] == [1, 7, 3, 12, 2, 9]
    assert got == [_cpu_greedy(cpu_model, p, len(g)) for p, g in zip(prompts, got)]


def test_the_context_length_ends_a_request_and_long_prompts_are_refused(engine, cpu_model):
    prompt = _prompts(2, 1, MAX_LEN - 3, MAX_LEN - 3)[0]
    r = engine.submit(prompt, serving.SamplingParams(max_tokens=50, temperature=0, ignore_eos=True))
    while not r.finished:
        engine.step()
    assert r.finish_reason == "length" and len(r.output_ids) == 3
    assert r.output_ids == _cpu_greedy(cpu_model, prompt, 3)
    with pytest.raises(ValueError, match="at most 63 prompt tokens"):
        engine.submit([1] * MAX_LEN)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.submit([1, 100000])
    with pytest.raises(ValueError, match="empty"):
        engine.submit([])
    for bad in (dict(top_p=0.0), dict(top_p=1.5), dict(temperature=-1.0), dict(max_tokens=0), dict(top_k=-2)):
        with pytest.raises(ValueError):
            engine.submit([1, 2], serving.SamplingParams(**bad))


def test_stop_tokens_end_a_request_with_reason_stop(engine, cpu_model):
    prompt = [5, 6, 7, 8]
    ref = _cpu_greedy(cpu_model, prompt, 8)
    stop = ref[4]
    first = ref.index(stop)
    (out,) = engine.generate([prompt], serving.SamplingParams(max_tokens=8, temperature=0, stop_token_ids=[stop]))
    assert out == ref[:first + 1]
    r = engine.submit(prompt, serving.SamplingParams(max_tokens=8, temperature=0, stop_token_ids=[stop]))
    while not r.finished:
        engine.step()
    assert r.finish_reason == "stop"


def test_sampling_is_seeded_per_request_whatever_shares_the_batch(engine):
    p = serving.SamplingParams(max_tokens=12, temperature=1.0, seed=1234, ignore_eos=True)
    alone = engine.generate([[1, 2, 3]], p)[0]
    others = [serving.SamplingParams(max_tokens=12, temperature=0.7, top_k=5, seed=s, ignore_eos=True)
              for s in range(3)]
    crowded = engine.generate([[9, 9], [1, 2, 3], [4], [7, 7, 7, 7]], [others[0], p, others[1], others[2]])
    assert crowded[1] == alone
    other_seed = engine.generate([[1, 2, 3]], serving.SamplingParams(max_tokens=12, temperature=1.0, seed=99,
                                                                     ignore_eos=True))[0]
    assert other_seed != alone


def test_top_k_and_top_p_keep_only_the_most_likely_tokens(engine, cpu_model):
    prompt = [3, 1, 4, 1, 5]
    greedy = _cpu_greedy(cpu_model, prompt, 8)
    for p in (dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-6)):
        params = serving.SamplingParams(max_tokens=8, seed=7, ignore_eos=True, **{"temperature": 1.0, **p})
        assert engine.generate([prompt], params)[0] == greedy, p
    k = 3
    outs = engine.generate([prompt] * 3, [serving.SamplingParams(max_tokens=10, top_k=k, seed=s, ignore_eos=True)
                                          for s in range(3)])
    assert len({tuple(o) for o in outs}) > 1  # sampled, not greedy
    for out in outs:
        ids = torch.tensor([prompt + out])
        logits = cpu_model(ids).logits[0, len(prompt) - 1:-1]
        top = logits.topk(k + 1, -1)
        for i, tok in enumerate(out):
            # (the (k+1)th value guards against near ties between tpu and CPU logits)
            assert logits[i, tok] >= top.values[i, k] - 1e-4, (i, tok)


def test_sampling_uniforms_are_inside_the_open_interval():
    # Seeds 1 and 3 hash these token ids to 24 one bits at position 0: half
    # a step above that rounds to 1.0 in float32, an infinite Gumbel key
    # that would pick the token whatever its probability.
    for seed, tokens in ((1, [6009547, 13792038]), (3, [2108936, 16420255])):
        u = serving._uniform(torch.tensor(seed), torch.tensor(0), torch.tensor(tokens))
        assert (u < 1).all() and (u > 0).all()
        assert torch.isfinite(-torch.log(-torch.log(u))).all()
    u = serving._uniform(torch.tensor(7), torch.tensor(5), torch.arange(1 << 20))
    assert 0 < u.min().item() and u.max().item() < 1
    assert abs(u.double().mean().item() - 0.5) < 2e-3


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_the_plain_draw_chooses_as_the_filtered_one_and_follows_the_softmax(device):
    # A batch whose requests keep every token decodes with a Gumbel-max over
    # all tokens (no sort); a row that keeps every token must choose the
    # same there as in the sorted, filtered draw its batch takes when
    # another request filters.
    torch.manual_seed(0)
    n, v = 4000, 5
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]]).expand(n, v).contiguous().to(device)
    temperature = torch.full((n,), 0.7, device=device)
    top_k = torch.zeros(n, dtype=torch.int64, device=device)
    top_p = torch.ones(n, device=device)
    seed, position = torch.arange(n, device=device), torch.full((n,), 3, device=device)
    args = (logits, temperature, top_k, top_p, seed, position)
    plain = serving._sample(*args, serving.PLAIN).cpu()
    assert torch.equal(plain, serving._sample(*args, serving.FILTERED).cpu())
    freq = torch.bincount(plain, minlength=v).double() / n
    want = (logits[0].cpu().double() / 0.7).softmax(-1)
    assert (freq - want).abs().max() < 0.03, (freq, want)
    assert serving._sampling_mode([serving.SamplingParams(temperature=0.0), serving.SamplingParams()]) == "plain"
    assert serving._sampling_mode([serving.SamplingParams(), serving.SamplingParams(top_p=0.9)]) == "filtered"
    assert serving._sampling_mode([serving.SamplingParams(temperature=0.0)]) == "greedy"


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_top_k_and_top_p_keep_the_sorted_nucleus(device):
    # The filtered draw's thresholds (bisections, no sort) against the
    # definition: the top_k largest probabilities (ties kept), renormalized,
    # then the fewest most likely whose mass reaches top_p.
    torch.manual_seed(0)
    n, v = 48, 300
    logits = torch.randn(n, v) * torch.linspace(0.2, 6, n)[:, None]
    logits[0, :10] = 4.0  # ties
    probs = logits.softmax(-1)
    top_k = torch.tensor([0, 1, 5, 10, 50, 299, 300, 1000] * 6)
    top_p = torch.tensor([1.0, 0.9, 0.5, 0.99, 1e-6, 0.7] * 8)
    got = serving._kept(probs.to(device), top_k.to(device), top_p.to(device)).cpu()
    for i in range(n):
        p, k, q = probs[i].double(), int(top_k[i]), float(top_p[i])
        order = p.argsort(descending=True)
        keep = torch.ones(v, dtype=torch.bool)
        if k > 0:
            keep = p >= p[order[min(k, v) - 1]]
        if q < 1:
            kp = torch.where(keep, p, 0.0) / torch.where(keep, p, 0.0).sum()
            sp = kp.sort(descending=True).values
            cut = sp[int(((sp.cumsum(0) - sp) < q).sum()) - 1]  # the last value the nucleus needs
            keep &= kp >= cut
        assert torch.equal(got[i], keep), (i, k, q, got[i].sum().item(), keep.sum().item())


def test_cancel_frees_the_slot(engine):
    r = engine.submit([1, 2, 3], serving.SamplingParams(max_tokens=40, temperature=0, ignore_eos=True))
    engine.step()
    engine.step()
    engine.cancel(r)
    produced = len(r.output_ids)
    assert produced >= 2
    engine.step()
    engine.step()
    assert r.finished and r.finish_reason == "cancelled" and len(r.output_ids) == produced
    waiting = engine.submit([4], GREEDY)
    engine.cancel(waiting)
    assert waiting.finished and waiting.output_ids == []
    assert sorted(engine._free) == list(range(MAX_SLOTS))


def test_concurrent_clients_after_warmup_compile_nothing(engine, cpu_model):
    """100 requests of random prompt and output lengths from 8 client
    threads, greedy and sampled, while the engine loop runs: every call of a
    prefill or decode program replays a capture, and no executable is
    compiled or loaded."""
    rng = random.Random(3)
    jobs = []
    for i in range(100):
        n = rng.randint(1, MAX_LEN - 1)
        prompt = [rng.randrange(256) for _ in range(n)]
        params = serving.SamplingParams(max_tokens=rng.randint(1, 24), temperature=rng.choice([0, 0, 0.8]),
                                        top_k=rng.choice([0, 4]), top_p=rng.choice([1.0, 0.9]), seed=i,
                                        ignore_eos=True)
        jobs.append((prompt, params))
    before, graph_before = torch_tpu.cache_stats(), compiler.stats()
    results = [None] * len(jobs)
    engine.start()
    try:
        def client(k):
            for i in range(k, len(jobs), 8):
                prompt, params = jobs[i]
                r = engine.submit(prompt, params)
                results[i] = (r.wait(timeout=300), list(r))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert not any(t.is_alive() for t in threads)
    finally:
        engine.stop()
    after, graph_after = torch_tpu.cache_stats(), compiler.stats()
    assert after["misses"] == before["misses"] and after["disk_hits"] == before["disk_hits"]
    assert graph_after["captures"] == graph_before["captures"]
    assert graph_after["op_runs"] == graph_before["op_runs"]
    assert graph_after["graphs"] == graph_before["graphs"]
    assert graph_after["replays"] > graph_before["replays"]
    for (prompt, params), (r, streamed) in zip(jobs, results):
        assert streamed == r.output_ids
        assert len(r.output_ids) == min(params.max_tokens, MAX_LEN - len(prompt))
    # Spot-check greedy outputs against CPU.
    greedy = [(p, r) for (p, q), (r, _) in zip(jobs, results) if q.temperature == 0][:5]
    for prompt, r in greedy:
        assert r.output_ids == _cpu_greedy(cpu_model, prompt, len(r.output_ids))


def test_buckets_share_a_trace_and_each_is_pinned(engine):
    """Warm-up made a function per (kind, sampling mode, bucket) and pinned
    each (later steps call its graph without Dynamo). The buckets of one
    kind and mode share one code object, traced with the bucketed
    dimensions dynamic: Dynamo holds a graph for the general case and the
    sizes the model specializes (a batch of one, a window of whole rows),
    not one per bucket."""
    c = engine.config
    decode = {(b, k) for b in c.batch_buckets for k in c.kv_buckets}
    assert {key for key in engine._fns if key[0] == "decode"} == {("decode", m, bk) for m in ("greedy", "plain",
                                                                                           "filtered") for bk in decode}
    assert {key for key in engine._fns if key[0] == "prefill"} == {("prefill", m, (t,)) for m in ("greedy", "filtered")
                                                                   for t in c.prefill_buckets}
    traced = {}
    for (kind, mode, _), f in engine._fns.items():
        assert f.graph is not None and not f.refused
        traced.setdefault((kind, mode), set()).add(f.fn)
    assert all(len(fns) == 1 for fns in traced.values())  # one traced function per kind and mode
    for (kind, mode), (fn,) in traced.items():
        buckets = len(decode) if kind == "decode" else len(c.prefill_buckets)
        graphs = len(torch._C._dynamo.eval_frame._debug_get_cache_entry_list(fn.code))
        assert 1 <= graphs < buckets, (kind, mode, graphs, buckets)


def _family(name):
    common = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=128)
    t = transformers
    if name == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(vocab_size=300, n_embd=64, n_layer=2, n_head=4, n_positions=128))
    if name == "mistral (sliding window)":
        return t.MistralForCausalLM(t.MistralConfig(num_key_value_heads=2, sliding_window=8, **common))
    if name == "gemma2 (eager attention, sliding and full layers)":
        return t.Gemma2ForCausalLM(t.Gemma2Config(num_key_value_heads=2, head_dim=16, sliding_window=4, **common))
    if name == "qwen2 (sliding layers)":
        return t.Qwen2ForCausalLM(t.Qwen2Config(num_key_value_heads=2, use_sliding_window=True, sliding_window=4,
                                                max_window_layers=1, **common))
    return t.Phi3ForCausalLM(t.Phi3Config(num_key_value_heads=2, pad_token_id=0, **common))


@pytest.mark.parametrize("name", ["gpt2", "mistral (sliding window)", "gemma2 (eager attention, sliding and full layers)",
                                  "qwen2 (sliding layers)", "phi3"])
def test_other_families_give_hf_generate_tokens(name):
    """The engine's masks (one per layer type, sliding windows, additive
    masks for eager attention) and slot cache across model families: greedy
    tokens equal to HF generate() (the engine's own logic, run uncompiled on
    CPU; the compiled tpu path is tested on Llama above)."""
    torch.manual_seed(0)
    ref_model = _family(name).eval()
    prompts = [list(range(5, 17)), [1, 2]]
    ref = [_cpu_greedy(ref_model, p, 10) for p in prompts]
    torch.manual_seed(0)
    e = serving.Engine(_family(name).eval(), config=serving.EngineConfig(max_slots=2, max_len=64, compile=False),
                       device="cpu")
    assert e.generate(prompts, GREEDY) == ref


def test_pipelined_and_unpipelined_engines_give_the_same_tokens(cpu_model):
    """A pipelined engine launches a step before reading the one before it
    (stops are found one step late); unpipelined, each step is read at once.
    Same tokens either way, with stop tokens and max_tokens of all sizes."""
    prompts = _prompts(4, 7, 1, 20)
    stop = _cpu_greedy(cpu_model, prompts[0], 6)[3]
    params = [serving.SamplingParams(max_tokens=n, temperature=0, stop_token_ids=[stop], ignore_eos=True)
              for n in (1, 2, 3, 9, 5, 8, 4)]
    outs = []
    for pipeline in (True, False):
        torch.manual_seed(0)
        e = serving.Engine(_model(), config=serving.EngineConfig(max_slots=3, max_len=MAX_LEN, compile=False,
                                                                pipeline=pipeline), device="cpu")
        outs.append(e.generate(prompts, params))
    assert outs[0] == outs[1]
    for p, q, out in zip(prompts, params, outs[0]):
        ref = _cpu_greedy(cpu_model, p, q.max_tokens)
        assert out == (ref[:ref.index(stop) + 1] if stop in ref else ref)


# ---- the HTTP server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    openai = pytest.importorskip("openai")
    path = tmp_path_factory.mktemp("model")
    _model().save_pretrained(path)
    port = free_port()
    log = open(path / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "torch_tpu.serve", "--model", str(path), "--served-model-name",
                             "tiny", "--port", str(port), "--max-slots", str(MAX_SLOTS), "--max-len", str(MAX_LEN)],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120, max_retries=0)
    deadline = time.time() + 300
    while True:
        try:
            client.models.list()
            break
        except openai.APIConnectionError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                log.seek(0)
                pytest.fail(f"the server did not start:\n{log.read()[-4000:]}")
            time.sleep(0.5)
    yield client, openai
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def _text(ids):
    return serving.ByteTokenizer().decode(ids)


def test_server_completions_give_the_engine_tokens_streamed_or_not(server, cpu_model):
    client, _ = server
    assert [m.id for m in client.models.list().data] == ["tiny"]
    prompt = "Hello, tpu"
    ref = _cpu_greedy(cpu_model, serving.ByteTokenizer().encode(prompt), 8)
    r = client.completions.create(model="tiny", prompt=prompt, max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text == _text(ref)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(prompt) and r.usage.completion_tokens == 8
    chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=8, temperature=0, stream=True,
                                            extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks) == _text(ref)
    assert chunks[-1].choices[0].finish_reason == "length"
    many = client.completions.create(model="tiny", prompt=["ab", "cde"], max_tokens=4, temperature=0,
                                     extra_body={"ignore_eos": True})
    assert [c.index for c in many.choices] == [0, 1]
    assert many.choices[1].text == _text(_cpu_greedy(cpu_model, list(b"cde"), 4))


def test_server_chat_streams_and_seeds_repeat(server):
    client, _ = server
    msgs = [{"role": "user", "content": "hi"}]
    a = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, seed=5,
                                       extra_body={"ignore_eos": True})
    b = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, seed=5, stream=True,
                                       extra_body={"ignore_eos": True})
    chunks = list(b)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == a.choices[0].message.content
    assert a.choices[0].message.role == "assistant" and a.usage.completion_tokens == 6


def test_server_bad_requests_get_openai_errors_and_it_keeps_serving(server):
    client, openai = server
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-x", prompt="a", max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="maximum context length") as e:
        client.completions.create(model="tiny", prompt="x" * (MAX_LEN + 5), max_tokens=1)
    assert e.value.code == "context_length_exceeded"
    for bad in (dict(temperature=3.0), dict(top_p=0.0), dict(max_tokens=0), dict(n=2)):
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="tiny", prompt="a", **{"max_tokens": 1, **bad})
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user"}], max_tokens=1)
    r = client.completions.create(model="tiny", prompt="still here", max_tokens=2, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop")


def test_server_stop_strings_end_the_text(server, cpu_model):
    client, _ = server
    prompt = "stop test"
    full = _text(_cpu_greedy(cpu_model, list(prompt.encode()), 12))
    stop = full[3:5]
    expect = full[:full.index(stop)]
    for stream in (False, True):
        r = client.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0, stop=[stop],
                                      stream=stream, extra_body={"ignore_eos": True})
        if stream:
            chunks = list(r)
            assert "".join(c.choices[0].text for c in chunks) == expect
            assert chunks[-1].choices[0].finish_reason == "stop"
        else:
            assert r.choices[0].text == expect and r.choices[0].finish_reason == "stop"


def test_server_concurrent_clients(server, cpu_model):
    client, _ = server
    prompts = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"]
    out = [None] * len(prompts)

    def ask(i):
        out[i] = client.completions.create(model="tiny", prompt=prompts[i], max_tokens=5, temperature=0,
                                           extra_body={"ignore_eos": True}).choices[0].text

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert out == [_text(_cpu_greedy(cpu_model, list(p.encode()), 5)) for p in prompts]
