"""Serving a Llama on tpu with torch_tpu.serving against Hugging Face generate().

    python benchmarks/serving.py [--rounds 3] [--tokens 64] [--temperature T] [--quick]

One model (a 4-layer Llama with random weights), greedy decoding (or, with
``--temperature``, sampling at that temperature, every token kept) of
``--tokens`` tokens per request from prompts of random lengths (16 to 96
tokens), at 1, 8 and 32 concurrent requests. Contenders:
  - the engine on tpu (``torch_tpu.serving.Engine``; warm-up compiles first,
    not timed): requests submitted together, served by continuous batching;
  - HF ``generate()`` on CPU PyTorch: the concurrent requests as one batch
    (left padding), the default dynamic cache;
  - HF ``generate()`` on tpu (strict eager), same batch: timed at 1 and 8
    only, and its compiles counted (it meets new shapes every step).
Printed, medians over the rounds (contenders alternate within each round):
output tokens/s, time to first token (engine: per request, from submission;
HF: a generate of one new token), and programs compiled after warm-up.
"""

import argparse
import random
import statistics
import time

import torch
import transformers

import torch_tpu
from torch_tpu import serving

transformers.logging.set_verbosity_error()


def model():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                                   eos_token_id=None, bos_token_id=None, pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg).eval()


def prompts(n, seed):
    rng = random.Random(seed)
    return [[rng.randrange(1, 2048) for _ in range(rng.randint(16, 96))] for _ in range(n)]


def compiles():
    s = torch_tpu.cache_stats()
    return s["misses"] + s["disk_hits"]


def run_engine(engine, ps, tokens, temperature=0.0):
    params = serving.SamplingParams(max_tokens=tokens, temperature=temperature, ignore_eos=True)
    t0 = time.perf_counter()
    reqs = [engine.submit(p, params) for p in ps]
    while not all(r.finished for r in reqs):
        engine.step()
    dt = time.perf_counter() - t0
    ttft = statistics.median(r.first_token_time - r.arrival for r in reqs)
    return sum(len(r.output_ids) for r in reqs) / dt, ttft


def run_hf(m, ps, tokens, device, temperature=0.0):
    n = max(len(p) for p in ps)
    ids = torch.zeros(len(ps), n, dtype=torch.int64)
    mask = torch.zeros(len(ps), n, dtype=torch.int64)
    for i, p in enumerate(ps):  # left padding
        ids[i, n - len(p):] = torch.tensor(p)
        mask[i, n - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)

    def gen(k):
        sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature else dict(
            do_sample=False)
        out = m.generate(ids, attention_mask=mask, max_new_tokens=k, min_new_tokens=k, pad_token_id=0, **sampling)
        return out.cpu()

    t0 = time.perf_counter()
    gen(1)
    ttft = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = gen(tokens)
    dt = time.perf_counter() - t0
    return (out.shape[1] - n) * len(ps) / dt, ttft


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    ap.add_argument("--quick", action="store_true", help="one round, 16 tokens, concurrency 1 and 8")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.tokens = 1, 16
    levels = [1, 8] if args.quick else [1, 8, 32]
    cpu = model()
    tpu_hf = model().to("tpu")
    t0 = time.perf_counter()
    engine = serving.Engine(model(), config=serving.EngineConfig(max_slots=max(levels), max_len=256))
    counts = engine.warmup()
    warm_s = time.perf_counter() - t0
    print(f"engine warm-up: {counts['functions']} step functions in {warm_s:.1f} s ({counts['compiled']} programs "
          f"compiled, {counts['loaded']} loaded from the disk cache, the rest already in memory; buckets: prefill "
          f"{engine.config.prefill_buckets}, batch {engine.config.batch_buckets}, kv {engine.config.kv_buckets})")
    results = {}
    engine_compiles = 0
    hf_tpu_compiles = {}
    for rnd in range(args.rounds):
        for c in levels:
            ps = prompts(c, seed=rnd * 100 + c)
            order = ["engine", "hf cpu", "hf tpu"] if c <= 8 else ["engine", "hf cpu"]
            order = order[rnd % len(order):] + order[:rnd % len(order)]
            for who in order:
                before = compiles()
                if who == "engine":
                    r = run_engine(engine, ps, args.tokens, args.temperature)
                    engine_compiles += compiles() - before
                elif who == "hf cpu":
                    r = run_hf(cpu, ps, args.tokens, "cpu", args.temperature)
                else:
                    r = run_hf(tpu_hf, ps, args.tokens, "tpu", args.temperature)
                    hf_tpu_compiles.setdefault(c, compiles() - before)  # the first round's
                results.setdefault((who, c), []).append(r)
    print(f"\n{'concurrency':>11} | {'contender':<22} | {'tokens/s':>9} | {'TTFT ms':>8} | vs HF CPU")
    for c in levels:
        base = statistics.median(x[0] for x in results["hf cpu", c])
        for who, label in (("engine", "engine on tpu"), ("hf cpu", "HF generate, CPU"),
                           ("hf tpu", "HF generate, tpu eager")):
            if (who, c) not in results:
                continue
            tps = statistics.median(x[0] for x in results[who, c])
            ttft = statistics.median(x[1] for x in results[who, c]) * 1e3
            print(f"{c:>11} | {label:<22} | {tps:9.0f} | {ttft:8.1f} | {tps / base:.2f}x")
    print(f"\nprograms compiled after warm-up: engine {engine_compiles} (all rounds); HF generate on tpu, first "
          f"round: " + ", ".join(f"{n} at concurrency {c}" for c, n in hf_tpu_compiles.items()))


if __name__ == "__main__":
    main()
