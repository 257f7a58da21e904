"""vLLM on tpu (torch_tpu's platform plugin) against vLLM on CPU and Hugging
Face generate() on CPU.

    python benchmarks/vllm_serving.py [--rounds 3] [--tokens 32] [--quick] [--sampling]

One model (a 4-layer Llama, hidden 256, random weights, a word-level
tokenizer; vLLM with a 512-token step budget), greedy decoding of
``--tokens`` tokens per request (EOS ignored) from prompts of random lengths
(16 to 96 tokens), at 1, 8 and 32 concurrent requests; with
``--sampling``, sampled decoding instead (temperature 0.8, top-k 50, top-p
0.9, unseeded: vLLM's sampler on its full path). Contenders, each in a
process of its own (vLLM picks its platform once per process), alternating
within each round:

  - vLLM on tpu: ``vllm.LLM`` with the tpu platform (the engine in the
    process, so that torch_tpu's compile counters are readable), as it
    starts by default: the forward compiled by the tpu backend, a program
    per token bucket;
  - vLLM on tpu, eager (``enforce_eager=True``): the same steps op by op;
  - vLLM on CPU: the same vLLM install with ``TORCH_TPU_VLLM=0`` (its CPU
    platform, its C++ attention kernels), eager;
  - HF ``generate()`` on CPU PyTorch: the concurrent requests as one batch,
    left padded.

Each process warms up first (every concurrency level once, untimed). Printed,
medians over the rounds: output tokens/s (all requests' output tokens over
the wall time of serving them together), time to first token (the wall time
of the same requests with one output token each), for tpu the programs
compiled during the timed runs (``torch_tpu.cache_stats()``; each process
has an executable cache of its own), and the tokens/s of the same requests
served again ("again": the second repeat; every program it needs exists by
then).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

VOCAB, LEVELS = 2048, (1, 8, 32)
SAMPLING = dict(temperature=0.8, top_k=50, top_p=0.9)


def save_model(path):
    import tokenizers
    import torch
    import transformers

    words = ["<unk>", "<pad>", "<eos>", "<bos>"] + [f"w{i}" for i in range(VOCAB - 4)]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                        eos_token="<eos>", bos_token="<bos>").save_pretrained(path)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                                   eos_token_id=2, bos_token_id=3, pad_token_id=1)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)


def prompts(n, seed):
    rng = random.Random(seed)
    return [[rng.randrange(4, VOCAB) for _ in range(rng.randint(16, 96))] for _ in range(n)]


def run_vllm(path, tokens, rounds_seed):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm

    llm = vllm.LLM(model=path, dtype="float32", max_model_len=256,
                   enforce_eager=os.environ.get("BENCH_VLLM_EAGER") == "1",
                   kv_cache_memory_bytes=64 << 20, max_num_seqs=max(LEVELS), max_num_batched_tokens=512, seed=0)

    def serve(ps, n):
        sampling = SAMPLING if os.environ.get("BENCH_SAMPLING") == "1" else dict(temperature=0)
        params = vllm.SamplingParams(max_tokens=n, ignore_eos=True, **sampling)
        t0 = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in ps], params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs), time.perf_counter() - t0

    return measure(serve, tokens, rounds_seed)


def run_hf(path, tokens, rounds_seed):
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()

    def serve(ps, n):
        width = max(len(p) for p in ps)
        ids = torch.tensor([[1] * (width - len(p)) + p for p in ps])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps])
        t0 = time.perf_counter()
        with torch.no_grad():
            sampling = (dict(do_sample=True, **SAMPLING) if os.environ.get("BENCH_SAMPLING") == "1"
                        else dict(do_sample=False))
            out = model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, pad_token_id=1,
                                 **sampling)
        return (out.shape[1] - width) * len(ps), time.perf_counter() - t0

    return measure(serve, tokens, rounds_seed)


def measure(serve, tokens, seed):
    for level in LEVELS:  # warm-up: each level once
        serve(prompts(level, 1000 + level), tokens)
    compiles = None
    try:
        import torch_tpu

        before = torch_tpu.cache_stats()
        compiles = lambda: (lambda s: s["misses"] + s["disk_hits"])(torch_tpu.cache_stats()) - (  # noqa: E731
            before["misses"] + before["disk_hits"])
    except ImportError:
        pass
    result = {}
    for level in LEVELS:
        ps = prompts(level, seed + level)
        n, dt = serve(ps, tokens)
        _, ttft = serve(ps, 1)
        result[level] = {"tok_s": n / dt, "ttft_ms": ttft * 1e3}
    result["compiles"] = compiles() if compiles else None
    # The same requests again, twice, the second timed: every program they
    # need exists by then (the first repeat meets vLLM's prefix cache, whose
    # hits change the steps' token counts): the engine's step speed, without
    # the compiles of new prompt lengths.
    for level in LEVELS:
        serve(prompts(level, seed + level), tokens)
        n, dt = serve(prompts(level, seed + level), tokens)
        result[level]["again_tok_s"] = n / dt
    return result


CONTENDERS = {
    "vLLM tpu": ("vllm", {}),
    "vLLM tpu eager": ("vllm", {"BENCH_VLLM_EAGER": "1"}),
    "vLLM CPU": ("vllm", {"TORCH_TPU_VLLM": "0", "BENCH_VLLM_EAGER": "1"}),
    "HF CPU": ("hf", {}),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="one round of 8 tokens")
    ap.add_argument("--sampling", action="store_true", help="sampled decoding (temperature, top-k, top-p)")
    ap.add_argument("--worker", choices=["vllm", "hf"])
    ap.add_argument("--model")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.worker:
        run = run_vllm if args.worker == "vllm" else run_hf
        print("RESULT " + json.dumps(run(args.model, args.tokens, args.seed)))
        return
    if args.quick:
        args.rounds, args.tokens = 1, 8
    path = tempfile.mkdtemp(prefix="vllm_bench_")
    save_model(path)
    got = {name: [] for name in CONTENDERS}
    for r in range(args.rounds):
        for name, (worker, env) in CONTENDERS.items():
            cmd = [sys.executable, __file__, "--worker", worker, "--model", path, "--tokens", str(args.tokens),
                   "--seed", str(r)]
            # Each process with an executable cache of its own (it starts
            # cold, warms up, then is timed): no contender loads programs
            # that another compiled for the same prompts.
            cache = {"TORCH_TPU_CACHE_DIR": os.path.join(path, f"xla-{name.replace(' ', '_')}-{r}"),
                     "VLLM_CACHE_ROOT": os.path.join(path, f"vllm-{name.replace(' ', '_')}-{r}")}
            mode = {"BENCH_SAMPLING": "1" if args.sampling else "0"}
            out = subprocess.run(cmd, env={**os.environ, **cache, **env, **mode}, capture_output=True, text=True,
                                 timeout=1800)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{name} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
            got[name].append(json.loads(line[7:]))
            print(f"round {r + 1}: {name} done", file=sys.stderr)
    how = "sampled (temperature 0.8, top-k 50, top-p 0.9)" if args.sampling else "greedy"
    print(f"Llama 4x256, {args.tokens} output tokens per request ({how}), prompts of 16-96 tokens; "
          f"medians of {args.rounds}")
    print(f"{'':16}" + "".join(f"{f'tok/s @{c}':>12}{f'TTFT ms @{c}':>14}" for c in LEVELS) + f"{'compiles':>10}"
          + "".join(f"{f'again @{c}':>11}" for c in LEVELS))
    med = {}
    for name, runs in got.items():
        row = f"{name:16}"
        for c in LEVELS:
            key = str(c)
            tok = statistics.median(x[key]["tok_s"] for x in runs)
            ttft = statistics.median(x[key]["ttft_ms"] for x in runs)
            med[(name, c)] = tok
            row += f"{tok:12.1f}{ttft:14.1f}"
        comp = [x["compiles"] for x in runs if x["compiles"] is not None]
        row += f"{statistics.median(comp) if comp and name.startswith('vLLM tpu') else '-':>10}"
        for c in LEVELS:
            again = statistics.median(x[str(c)]["again_tok_s"] for x in runs)
            med[(name, c, "again")] = again
            row += f"{again:11.1f}"
        print(row)
    for c in LEVELS:
        print(f"vLLM tpu / vLLM CPU at {c} concurrent: {med[('vLLM tpu', c)] / med[('vLLM CPU', c)]:.2f}x "
              f"(the same requests again: {med[('vLLM tpu', c, 'again')] / med[('vLLM CPU', c, 'again')]:.2f}x); "
              f"/ HF CPU: {med[('vLLM tpu', c)] / med[('HF CPU', c)]:.2f}x")


if __name__ == "__main__":
    main()
