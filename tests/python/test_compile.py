"""torch.compile on tpu: graphs through AOTAutograd replayed through the tpu
lowerings, one program per graph call, against eager tpu and CPU PyTorch."""

import copy
import os
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same, run_python
from torch_tpu.testing.models import CNN, GPT, MLP, GPTConfig


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch_tpu.compiler.reset_stats()
    yield
    torch._dynamo.reset()


def _graphs():
    return torch_tpu.compiler.stats()["graphs"]


def _calls():
    return torch_tpu.compiler.stats()["calls"]


@pytest.mark.parametrize("backend", ["tpu", None], ids=["backend_tpu", "default_backend"])
def test_mlp_forward_and_backward_match_eager_and_cpu(backend):
    torch.manual_seed(0)
    model = MLP(d_in=16, hidden=32, classes=5, depth=2)
    x = torch.randn(8, 16)
    want = model(x)
    want.sum().backward()
    tpu_model = copy.deepcopy(model).to("tpu")
    tpu_model.zero_grad()
    compiled = torch.compile(tpu_model, backend=backend) if backend else torch.compile(tpu_model)
    got = compiled(x.to("tpu"))
    got.sum().backward()
    assert _graphs() == 2  # forward and backward, both through the tpu compiler
    assert_same(got, want.detach(), rtol=1e-5, atol=1e-5)
    for p, q in zip(tpu_model.parameters(), model.parameters()):
        assert_same(p.grad, q.grad, rtol=1e-5, atol=1e-5)


def test_one_program_per_graph_call_and_no_compile_when_warm():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to("tpu")
    compiled = torch.compile(model, backend="tpu")
    x = torch.randn(4, 8, device="tpu")
    with torch.no_grad():
        compiled(x).cpu()
        torch.tpu.synchronize()
        runs = torch_tpu.counters()["executions"]
        misses = torch_tpu.cache_stats()["misses"]
        for _ in range(3):
            out = compiled(x)
        torch.tpu.synchronize()
    # Each call ran one program (the whole graph), compiled nothing new.
    assert torch_tpu.counters()["executions"] - runs == 3
    assert torch_tpu.cache_stats()["misses"] == misses
    assert_same(out, model(x).detach().cpu())


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_cnn_with_batchnorm_matches_cpu_and_updates_running_stats(train):
    torch.manual_seed(0)
    model = CNN(classes=4, width=4)
    model.train(train)
    x = torch.randn(2, 3, 16, 16)
    tpu_model = copy.deepcopy(model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    for _ in range(2):
        want = model(x)
        got = compiled(x.to("tpu"))
        assert_same(got, want.detach(), rtol=1e-4, atol=1e-4)
    for (name, b), c in zip(tpu_model.named_buffers(), model.buffers()):
        assert_same(b, c, rtol=1e-5, atol=1e-5), name  # running mean/var and the batch counter


def _gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=32))


def _train(model, device, steps, compiled, fused_opt=False, programs=None):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=fused_opt)

    def step(ids):
        opt.zero_grad()
        _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = torch.compile(step, backend="tpu")
    # A few batches seen again and again: the loss falls steadily, so float
    # rounding does not get amplified as it does on random targets.
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 32, (2, 17), generator=g).to(device) for _ in range(2)]
    losses = []
    for i in range(steps):
        if programs is not None and i == steps - 5:  # steady state: the last 5 steps
            torch.tpu.synchronize()
            programs.append(torch_tpu.counters()["executions"])
        losses.append(step(batches[i % 2]).detach().cpu())
    if programs is not None:
        programs.append(torch_tpu.counters()["executions"])
    return torch.stack(losses), model


@pytest.mark.parametrize("fused_opt", [False, True], ids=["adamw_foreach", "adamw_fused"])
def test_compiled_training_step_matches_eager_step_for_step(fused_opt):
    """forward, backward and AdamW in one compiled function: 20 steps whose
    losses equal eager tpu's and CPU's within float rounding."""
    model = _gpt()
    cpu, cpu_model = _train(model, "cpu", 20, False)
    eager, _ = _train(model, "tpu", 20, False, fused_opt)
    programs = []
    compiled, tpu_model = _train(model, "tpu", 20, True, fused_opt, programs)
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled, cpu, rtol=1e-4, atol=1e-5)
    assert compiled[-1] < compiled[0] - 0.5  # it learned
    for p, q in zip(tpu_model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-3, atol=1e-3)
    # A few graphs (forward, backward, optimizer: Dynamo breaks the graph at
    # backward()), each one program per step, the optimizer's write-backs
    # included; plus the backward's seed gradient.
    per_step = (programs[1] - programs[0]) / 5
    assert per_step <= 5, per_step


def test_graph_break_runs_the_pieces_between():
    def f(x):
        y = torch.sin(x) * 2
        print("graph break")  # noqa: T201
        if y.sum().item() > 0:  # data-dependent branch
            return y + 1
        return y - 1

    x = torch.randn(5)
    compiled = torch.compile(f, backend="tpu")
    assert_same(compiled(x.to("tpu")), f(x))
    assert_same(compiled((-x.abs() - 1).to("tpu")), f(-x.abs() - 1))
    assert _graphs() >= 2


def test_a_new_shape_recompiles_once():
    model = nn.Linear(6, 3).to("tpu")
    compiled = torch.compile(model, backend="tpu", dynamic=False)
    with torch.no_grad():
        compiled(torch.randn(2, 6, device="tpu"))
        compiled(torch.randn(2, 6, device="tpu"))
        assert _graphs() == 1
        out = compiled(torch.randn(5, 6, device="tpu"))
        assert _graphs() == 2
        compiled(torch.randn(5, 6, device="tpu"))
        assert _graphs() == 2
    assert out.shape == (5, 3)
    # torch_tpu says why it recompiled: the guard that failed.
    assert torch_tpu.compiler.stats()["recompiles"] == 1
    (where, reason), = torch_tpu.compiler.recompile_reasons()
    assert "size mismatch" in reason and "expected 2, actual 5" in reason, reason


def test_dropout_follows_the_tpu_generator():
    def f(x):
        return F.dropout(x, p=0.5, training=True) * 3

    compiled = torch.compile(f, backend="tpu")
    x = torch.ones(64, device="tpu")
    torch.manual_seed(7)
    a = compiled(x).cpu()
    b = compiled(x).cpu()
    torch.manual_seed(7)
    assert torch.equal(compiled(x).cpu(), a)  # reproducible from the seed
    assert not torch.equal(a, b)  # and each call draws a fresh mask
    assert set(a.unique().tolist()) <= {0.0, 6.0}
    torch.manual_seed(7)
    e = f(x).cpu()
    assert set(e.unique().tolist()) <= {0.0, 6.0}


def test_input_mutation_is_written_back():
    def f(x, buf):
        buf.add_(x)
        buf.mul_(2)
        return buf.sum()

    x = torch.arange(4.0)
    buf = torch.ones(4)
    tx, tbuf = x.to("tpu"), buf.to("tpu")
    compiled = torch.compile(f, backend="tpu")
    for _ in range(2):
        assert_same(compiled(tx, tbuf), f(x, buf))
        assert_same(tbuf, buf)


def test_cpu_graphs_still_go_to_inductor():
    def f(x):
        return torch.relu(x) * 2 + 1

    x = torch.randn(8)
    got = torch.compile(f)(x)  # the default backend, CPU tensors: Inductor
    torch.testing.assert_close(got, f(x))
    assert _graphs() == 0
    tpu_got = torch.compile(f)(x.to("tpu"))  # the same default, tpu tensors: ours
    assert_same(tpu_got, f(x))
    assert _graphs() == 1


@pytest.mark.parametrize("case", ["factory_only", "cpu_input_moved_in", "no_input"])
def test_graphs_that_make_their_tpu_tensors_inside_go_to_the_tpu_backend(case):
    """The default backend routes by where the graph computes, not only by
    its inputs: a graph whose tpu tensors are all made inside it (a factory
    with device="tpu", a CPU batch moved to tpu inside the compiled step, as
    torch.compile(create_block_mask) does) reaches the tpu backend, not
    Inductor's own tpu device."""
    def factory_only(n):
        return torch.arange(n, device="tpu").float().softmax(0)

    def cpu_input_moved_in(x):
        return ((x * 2).to("tpu") + 1).relu().sum(0)

    def no_input():
        return torch.ones(3, 2, device="tpu").cumsum(0) * 2

    fn, args = {"factory_only": (factory_only, (6,)),
                "cpu_input_moved_in": (cpu_input_moved_in, (torch.randn(4, 3),)),
                "no_input": (no_input, ())}[case]
    want = fn(*args)
    got = torch.compile(fn)(*args)
    assert_same(got, want.cpu())
    assert _graphs() == 1


def test_compiled_create_block_mask_on_tpu():
    from torch.nn.attention.flex_attention import and_masks, create_block_mask

    def causal(b, h, q, k):
        return q >= k

    def window(b, h, q, k):
        return q - k < 16

    mask = and_masks(causal, window)
    want = create_block_mask(mask, 2, 1, 128, 128, device="cpu", BLOCK_SIZE=32)
    for got in (create_block_mask(mask, 2, 1, 128, 128, device="tpu", BLOCK_SIZE=32, _compile=True),
                torch.compile(create_block_mask)(mask, 2, 1, 128, 128, device="tpu", BLOCK_SIZE=32)):
        for a, b in zip(got.as_tuple(), want.as_tuple()):
            if isinstance(b, torch.Tensor):
                assert_same(a, b, rtol=0, atol=0)


def test_compiled_activation_checkpointing_with_dropout_recomputes_the_forwards_mask():
    """checkpoint() around a block with dropout, compiled: AOTAutograd saves
    the generator's state in the forward and recomputes the dropout from it
    in the backward (run_and_save_rng_state / run_with_rng_state, which
    PyTorch implements only for its own devices). Output and gradients equal
    the eager block's with the same seed, step after step; a recomputation
    that drew fresh numbers would give other gradients."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(64, 16)).to("tpu")
    compiled = torch.compile(lambda t: checkpoint(block, t, use_reentrant=False), backend="tpu")

    def step(fn, x, seed):
        x = x.clone().requires_grad_()
        torch.manual_seed(seed)
        y = fn(x)
        (y * y).sum().backward()
        grads = [x.grad.cpu()] + [p.grad.cpu() for p in block.parameters()]
        block.zero_grad(set_to_none=True)
        return y.detach().cpu(), grads

    for seed in (1, 2, 3):
        x = torch.randn(8, 16, device="tpu")
        want, want_grads = step(block, x, seed)
        got, got_grads = step(compiled, x, seed)
        assert torch.equal(got, want)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_an_op_without_lowering_names_the_op_and_the_source_line():
    """linalg_ldl_factor_ex has no tpu lowering (nor a decomposition): the
    error names the op and the user's line, not an XLA dump, and eager raises
    the same type."""
    def f(x):
        y = x * 2
        return torch.linalg.ldl_factor(y)[0].sum()

    x = torch.randn(3, 3, device="tpu")
    with pytest.raises(NotImplementedError):
        f(x)
    with pytest.raises(NotImplementedError, match="linalg_ldl_factor") as err:
        torch.compile(f, backend="tpu")(x)
    assert "test_compile.py" in str(err.value) and "ldl_factor(y)" in str(err.value)


def test_hf_gpt2_compiled_forward_gives_cpu_logits():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=32, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 32, (2, 10))
    with torch.no_grad():
        want = model(ids).logits
        tpu_model = copy.deepcopy(model).to("tpu")
        got = torch.compile(tpu_model, backend="tpu")(ids.to("tpu")).logits
    assert_same(got, want, rtol=1e-4, atol=1e-4)


def test_a_second_process_compiles_nothing(tmp_path):
    code = textwrap.dedent("""
        import torch, torch_tpu
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to("tpu")
        torch.manual_seed(0)
        out = torch.compile(model, backend="tpu")(torch.ones(3, 8, device="tpu"))
        out.sum().backward()
        out.cpu()
        s = torch_tpu.cache_stats()
        print("MISSES", s["misses"], "DISK", s["disk_hits"])
    """)
    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path / "cache"), "TORCH_TPU_SESSION": "0",
           "TORCH_TPU_DEFER_AND_FUSE": None, "TORCH_TPU_LAUNCH_BLOCKING": None}
    first = run_python(code, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    second = run_python(code, env=env, timeout=300)
    assert second.returncode == 0, second.stderr
    misses = int(second.stdout.split("MISSES")[1].split()[0])
    disk = int(second.stdout.split("DISK")[1].split()[0])
    assert misses == 0 and disk > 0, (first.stdout, second.stdout)


def test_inductor_options_are_accepted_with_one_warning():
    model = nn.Linear(4, 2).to("tpu")
    with pytest.warns(UserWarning, match="no effect"):
        compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
        compiled(torch.randn(3, 4, device="tpu"))
    assert _graphs() >= 1


def test_execution_mode_of_the_caller_is_unchanged():
    outside = torch_tpu.get_execution_mode()
    compiled = torch.compile(lambda x: x * 2 + 1, backend="tpu")
    assert_same(compiled(torch.ones(3, device="tpu")), torch.full((3,), 3.0))
    assert torch_tpu.get_execution_mode() == outside
    assert os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "0") != "0" or outside != "fused"


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic_true"])
def test_dynamic_shapes_work_one_program_per_shape_with_a_warning(dynamic):
    """A symbolic graph (dynamic=True, or Dynamo's automatic dynamic shapes
    after a second shape) gives the right values; each shape compiles its
    own XLA program once, and the backend says so."""
    torch_tpu.compiler._warned_dynamic = False
    f = lambda x: (x * 2).sum(0) + x.shape[0]  # noqa: E731
    compiled = torch.compile(f, backend="tpu", dynamic=dynamic)
    with pytest.warns(UserWarning, match="dynamic shapes"):
        for n in (2, 3, 4):
            assert_same(compiled(torch.ones(n, 3, device="tpu")), f(torch.ones(n, 3)))
    misses = torch_tpu.cache_stats()["misses"]
    assert_same(compiled(torch.ones(3, 3, device="tpu")), f(torch.ones(3, 3)))
    assert torch_tpu.cache_stats()["misses"] == misses  # a shape seen before: no compile


def test_dynamic_shape_training_replays_graphs_that_read_intermediate_sizes():
    """A backward graph with dynamic shapes reads sizes of intermediates
    (max pooling's indices, here): a replay runs no device op, so those
    sizes come from the inputs' sizes through their symbolic expressions,
    and the graph is replayed (before: it ran its ops every call). Gradients
    match CPU at every batch size, the second visit of a size included."""
    torch_tpu.compiler._warned_dynamic = True
    torch.manual_seed(0)
    cpu = CNN()
    dev = copy.deepcopy(cpu).to("tpu")
    compiled = torch.compile(dev, backend="tpu", dynamic=True)
    for b in (3, 5, 7, 5, 3):
        x = torch.randn(b, 3, 32, 32)
        compiled(x.to("tpu")).square().mean().backward()
        cpu(x).square().mean().backward()
        for p, q in zip(dev.parameters(), cpu.parameters()):
            assert_same(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad, q.grad = None, None
    s = torch_tpu.compiler.stats()
    assert s["op_runs"] == 0 and s["replays"] >= 2, s


@pytest.mark.parametrize("masked", [False, True], ids=["no_mask", "mask"])
def test_attention_with_dynamic_shapes_is_traced_once(masked):
    """scaled_dot_product_attention's backend choice and its output's meta
    read sizes symbolically: with dynamic batch and lengths, Dynamo traces
    the graph once (each shape still compiles its own program), with the
    values CPU gives. Reading them as numbers specialized every size, and
    each new batch or length traced the whole model again."""
    torch_tpu.compiler._warned_dynamic = True  # (said by the test above)

    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m if masked else None) * 2

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for b, t, s in ((2, 5, 7), (3, 4, 9), (5, 6, 6)):
        q, k, v = torch.randn(b, 4, t, 8), torch.randn(b, 4, s, 8), torch.randn(b, 4, s, 8)
        m = torch.rand(b, 1, t, s) > 0.3
        m[..., 0] = True
        got = compiled(q.to("tpu"), k.to("tpu"), v.to("tpu"), m.to("tpu"))
        assert_same(got, f(q, k, v, m), rtol=1e-5, atol=1e-5)
    assert _graphs() == 1


def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg).eval()


def test_hf_llama_compiled_forward_gives_cpu_logits():
    model = _tiny_llama()
    ids = torch.randint(1, 32, (2, 7))
    with torch.no_grad():
        want = model(ids).logits
        got = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")(ids.to("tpu")).logits
    assert_same(got, want, rtol=1e-4, atol=1e-4)


def test_hf_generate_with_a_static_cache_compiles_through_tpu_and_gives_eager_tokens():
    """cache_implementation="static" makes Transformers compile the decode
    step with the default backend: on tpu tensors it comes here."""
    model = _tiny_llama()
    ids = torch.randint(1, 32, (2, 7))
    want = model.generate(ids, max_new_tokens=8, do_sample=False)
    tpu_model = copy.deepcopy(model).to("tpu")
    eager = tpu_model.generate(ids.to("tpu"), max_new_tokens=8, do_sample=False)
    static = tpu_model.generate(ids.to("tpu"), max_new_tokens=8, do_sample=False, cache_implementation="static")
    assert torch.equal(eager.cpu(), want)
    assert torch.equal(static.cpu(), want)
    assert _graphs() >= 1  # the decode step went through the tpu compiler


def test_a_failing_graph_leaves_its_inputs_unchanged():
    """Mutations of inputs are written back at the end of a graph, so a graph
    that fails part-way (here on an op without a lowering) changes none."""
    def f(p, x):
        p.add_(1)
        return torch.linalg.ldl_factor(x * p.sum())[0]

    p = torch.zeros(3, device="tpu")
    with pytest.raises(NotImplementedError, match="linalg_ldl_factor"):
        torch.compile(f, backend="tpu")(p, torch.eye(3, device="tpu"))
    assert_same(p, torch.zeros(3))


# ---- captured graphs replayed (csrc/aten/graph_replay.cpp) -----------------------------


def _ops_dispatched():
    c = torch_tpu.counters()
    return c["programs_built"] + c["programs_reused"]


def _stat(key):
    return torch_tpu.compiler.stats()[key]


def test_a_warm_graph_is_replayed_without_dispatching_its_ops():
    torch.manual_seed(0)
    cpu_model = MLP(d_in=16, hidden=32, classes=5, depth=3)
    model = copy.deepcopy(cpu_model).to("tpu")
    compiled = torch.compile(model, backend="tpu")
    with torch.no_grad():
        compiled(torch.randn(8, 16, device="tpu")).cpu()
        xs = [torch.randn(8, 16, device="tpu") for _ in range(3)]
        before = _ops_dispatched()
        outs = [compiled(x) for x in xs]
        assert _ops_dispatched() == before  # no op went through the dispatcher
        assert _stat("replays") == 3 and _stat("captures") == 1
        for x, out in zip(xs, outs):  # each call computed its own input's result
            assert_same(out, cpu_model(x.cpu()), rtol=1e-5, atol=1e-5)


def test_a_replay_reads_each_calls_cpu_scalars_and_host_updates():
    """An optimizer's step count lives in a CPU tensor that the graph
    increments on the host and the device ops read: a replay runs the host
    part and binds the new values."""
    def f(x, step, lr):
        step.add_(1)
        return x * (1 - 0.9 ** step) + lr

    x = torch.randn(5)
    step, step_t = torch.tensor(0.0), torch.tensor(0.0)
    compiled = torch.compile(f, backend="tpu")
    for i in range(4):
        lr = torch.tensor(0.1 * (i + 1))
        assert_same(compiled(x.to("tpu"), step_t, lr), f(x, step, lr), rtol=1e-6, atol=1e-6)
        assert step_t.item() == step.item() == i + 1
    assert _stat("replays") >= 2


def test_a_replay_writes_mutated_inputs_and_batchnorm_statistics():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    tpu_model = copy.deepcopy(model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    for i in range(4):
        x = torch.randn(2, 3, 8, 8)
        assert_same(compiled(x.to("tpu")), model(x).detach(), rtol=1e-4, atol=1e-4)
    for b, c in zip(tpu_model.buffers(), model.buffers()):
        assert_same(b, c, rtol=1e-5, atol=1e-5)
    assert _stat("replays") >= 2


def test_a_replay_inside_fused_eager_joins_the_callers_program():
    def f(x, w):
        return torch.tanh(x @ w)

    compiled = torch.compile(f, backend="tpu")
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    tx, tw = x.to("tpu"), w.to("tpu")
    compiled(tx, tw).cpu()
    torch.tpu.synchronize()
    runs = torch_tpu.counters()["executions"]
    with torch_tpu.execution_mode("fused"):
        y = compiled(tx * 2, tw) + 1  # the input is pending in the caller's graph
        z = compiled(y, tw)
    z.cpu()
    assert torch_tpu.counters()["executions"] - runs == 1
    assert_same(z, f(f(x * 2, w) + 1, w), rtol=1e-5, atol=1e-5)


def test_a_graph_capture_stays_replayable_when_a_storage_reads_its_old_checks():
    """A storage written every step and never read (a KV cache) collects each
    write's index check; past 64 the oldest are read. When that happened in
    the middle of a capture, the read was taken for the graph's own (a
    data-dependent value) and that signature ran its ops at every later
    call, bucketed like eager ops (vLLM's prefill: 0.8 s a step replayed,
    8.7 s run op by op)."""
    def f(cache, idx, src):
        for k in range(30):  # 30 more checks on the cache's storage
            cache.index_copy_(0, idx + k, src * k)
        return cache.sum(0)

    cache, want = torch.zeros(64, 8, device="tpu"), torch.zeros(64, 8)
    for k in range(40):  # eager writes: 40 checks run, none read
        src = torch.randn(2, 8)
        idx = torch.tensor([k, k + 20])
        cache.index_copy_(0, idx.to("tpu"), src.to("tpu"))
        want.index_copy_(0, idx, src)
    compiled = torch.compile(f, backend="tpu")
    for step in range(3):
        src, idx = torch.randn(2, 8), torch.tensor([step, step + 32])
        got = compiled(cache, idx.to("tpu"), src.to("tpu"))
        assert_same(got, f(want, idx, src), rtol=1e-5, atol=1e-5)
    assert_same(cache, want)
    assert (_stat("captures"), _stat("replays"), _stat("op_runs")) == (1, 2, 0)


def test_a_graph_that_cannot_be_replayed_runs_its_ops_each_call():
    """Here an op computes on the CPU (the fallback uploads its result): that
    signature is never replayed, and every call is still right."""
    def f(x):
        return torch.linalg.ldl_factor(x @ x.t() + torch.eye(3, device=x.device))[0].sum() * 2

    torch_tpu.set_cpu_fallback(True)
    try:
        compiled = torch.compile(f, backend="tpu")
        for _ in range(3):
            x = torch.randn(3, 3)
            assert_same(compiled(x.to("tpu")), f(x), rtol=1e-4, atol=1e-4)
    finally:
        torch_tpu.set_cpu_fallback(False)
    assert _stat("replays") == 0 and _stat("op_runs") >= 2


def test_replayed_dropout_draws_like_the_graph_run_op_by_op():
    def f(x):
        return F.dropout(x, p=0.5, training=True).sum(0)

    x = torch.ones(16, 32, device="tpu")
    compiled = torch.compile(f, backend="tpu")
    torch.manual_seed(3)
    replayed = [compiled(x).cpu() for _ in range(3)]
    assert _stat("replays") == 2
    torch._dynamo.reset()
    torch_tpu.compiler._replay_enabled = False
    try:
        torch.manual_seed(3)
        by_ops = [torch.compile(f, backend="tpu")(x).cpu() for _ in range(3)]
    finally:
        torch_tpu.compiler._replay_enabled = True
    for a, b in zip(replayed, by_ops):
        assert torch.equal(a, b)
    assert not torch.equal(replayed[1], replayed[2])


def test_a_growing_length_is_bounded_and_buckets_fix_it(monkeypatch):
    """A loop whose length grows by one each call would compile a program
    per length: past config.max_shapes the call says what to do instead;
    padding to buckets (with a mask) keeps it to a few programs."""
    monkeypatch.setattr(torch_tpu.compiler.config, "max_shapes", 4)
    torch_tpu.compiler._warned_dynamic = True

    def step(x, mask):
        return (x * mask).sum(-1)

    compiled = torch.compile(step, backend="tpu", dynamic=True)
    with pytest.raises(torch_tpu.compiler.CompileError, match="pad_to_bucket"):
        for n in range(1, 10):
            compiled(torch.ones(2, n, device="tpu"), torch.ones(2, n, device="tpu"))
    torch._dynamo.reset()
    compiled = torch.compile(step, backend="tpu", dynamic=True)
    for n in (1, 5, 17, 30, 33, 40):
        x = torch.randn(2, n)
        px, length = torch_tpu.compiler.pad_to_bucket(x.to("tpu"), 1)
        mask, _ = torch_tpu.compiler.pad_to_bucket(torch.ones(2, n, device="tpu"), 1)
        assert length == n and px.shape[1] in (16, 32, 64)
        assert_same(compiled(px, mask), x.sum(-1), rtol=1e-5, atol=1e-5)
    assert torch_tpu.compiler.bucket(17, [8, 24, 48]) == 24


def test_aot_compile_saves_and_loads_the_compiled_function_for_inference_and_training(tmp_path):
    """PyTorch's AOT compile (what vLLM uses by default): the backend's
    artifact serializes (each ATen graph as an OutputCode) and loads in a
    fresh process, where forward and backward replay their graphs and
    compile no program that the first process compiled (the disk cache)."""
    code = textwrap.dedent("""
        import sys, torch, torch_tpu
        from torch_tpu.testing.models import MLP

        torch.manual_seed(0)
        model = MLP(d_in=16, hidden=32, classes=5, depth=2).to("tpu")
        x = torch.randn(8, 16).to("tpu")
        # (The model is an argument: an artifact holds no module, as vLLM
        # compiles a module's forward and passes the module.)
        def step(m, x):
            return m(x).square().mean()
        def infer(m, x):
            return torch.relu(m(x)) * 2

        path = {path!r}
        if {save}:
            with torch._dynamo.config.patch(enable_aot_compile=True):
                for name, fn in (("step", step), ("infer", infer)):
                    c = torch.compile(fn, fullgraph=True, backend="tpu").aot_compile(((model, x), {{}}))
                    c.save_compiled_function(f"{{path}}.{{name}}")
        torch_tpu.compiler.reset_stats()
        before = torch_tpu.cache_stats()
        with open(f"{{path}}.step", "rb") as f:
            step_c = torch.compiler.load_compiled_function(f, f_globals=globals())
        with open(f"{{path}}.infer", "rb") as f:
            infer_c = torch.compiler.load_compiled_function(f, f_globals=globals())
        for _ in range(2):
            model.zero_grad()
            loss = step_c(model, x)
            loss.backward()
            got = [p.grad.cpu() for p in model.parameters()]
            model.zero_grad()
            step(model, x).backward()
            want = [p.grad.cpu() for p in model.parameters()]
            assert all(torch.allclose(g, w, atol=1e-6) for g, w in zip(got, want))
            # (Under the grad mode it was compiled in: its guards check it.)
            assert torch.allclose(infer_c(model, x).detach().cpu(), infer(model, x).detach().cpu(), atol=1e-6)
        after = torch_tpu.cache_stats()
        s = torch_tpu.compiler.stats()
        print("STATS", s["replays"], s["op_runs"], after["misses"] - before["misses"])
    """)
    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path / "xla")}
    first = run_python(code.format(path=str(tmp_path / "fn"), save=True), env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_python(code.format(path=str(tmp_path / "fn"), save=False), env=env, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    replays, op_runs, misses = map(int, second.stdout.split("STATS")[1].split())
    # Forward, backward and the inference graph, captured at their first call and replayed at the second.
    assert replays >= 3 and op_runs == 0
    assert misses == 0  # (the eager reference's programs included: the first process compiled them too)
