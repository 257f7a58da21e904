"""vLLM's GPU worker and model runner on ``tpu:N`` (see ``torch_tpu.vllm``)."""

from __future__ import annotations

import contextlib
import dataclasses
import os

import torch
from vllm.config import set_current_vllm_config
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes
from vllm.v1.worker.workspace import init_workspace_manager

from torch_tpu import compiler

from . import attention
from .sampler import TpuSampler, warm_up_penalties

_log = init_logger(__name__)


@contextlib.contextmanager
def _cuda_names_on_tpu():
    """vLLM's GPU model runner makes its side streams and events with
    ``torch.cuda``'s names while it is built: the tpu device's streams and
    events stand in for them (``torch.Event`` already follows the current
    accelerator)."""
    saved = {name: getattr(torch.cuda, name) for name in ("Stream", "Event", "current_stream", "stream")}

    def event(*args, blocking=None, **kwargs):  # torch.cuda.Event's blocking= has no meaning here
        return torch.tpu.Event(*args, **kwargs)

    torch.cuda.Stream = torch.tpu.Stream
    torch.cuda.Event = event
    torch.cuda.current_stream = torch.tpu.current_stream
    torch.cuda.stream = torch.tpu.stream
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)


@contextlib.contextmanager
def _uncompiled(model: torch.nn.Module):
    """The model's compiled modules run their plain forward inside. vLLM's
    compiled forward is one Dynamo trace that serves every later step: it
    must be made by a step with attention metadata (the first bucket's
    warm-up), not by the profiling run, which has none and whose attention
    is skipped."""
    compiled = [m for m in model.modules() if getattr(m, "do_not_compile", True) is False]
    for m in compiled:
        m.do_not_compile = True
    try:
        yield
    finally:
        for m in compiled:
            m.do_not_compile = False


def buckets(limit: int, smallest: int) -> list[int]:
    """Powers of two from ``smallest`` (at least 1), then ``limit``."""
    out, b = [], max(1, smallest)
    while b < limit:
        out.append(b)
        b *= 2
    return out + [limit]


def _sampler_buckets(limit: int) -> list[int]:
    """The row counts the sampler runs at for 2 to ``limit`` requests (the
    buckets of those counts; one request runs exact)."""
    out = [torch.ops.torch_tpu._bucket_of(2)]
    while out[-1] < limit:
        out.append(torch.ops.torch_tpu._bucket_of(out[-1] + 1))
    return out


class TpuModelRunner(GPUModelRunner):
    """vLLM's GPU model runner, on ``tpu``: its buffers, KV cache, sampler
    and attention metadata live on the device; no CUDA graphs.

    XLA programs have static shapes, so each step's token count is padded to
    one of a few buckets (powers of two up to the step's token budget) and
    its request count too (up to ``max_num_seqs``), as vLLM pads a batch to a
    CUDA graph's size: vLLM then pads the attention metadata itself (its
    "FULL" graph mode, which here captures nothing: the model is never
    wrapped in a CUDA graph). The sampler runs at the bucket of the request
    count (``TpuSampler``).

    The model's forward is vLLM's compiled one (platform.py): one Dynamo
    trace, made by the first bucket's warm-up step, compiled by the tpu
    backend with the token and request dimensions symbolic; each bucket's
    program is captured at start-up (``warm_up``) and every later step
    replays its bucket's. With ``enforce_eager`` the same padded steps run
    op by op."""

    def __init__(self, vllm_config, device: torch.device):
        import vllm.v1.worker.gpu_model_runner as gmr

        exact, gmr.Sampler = gmr.Sampler, TpuSampler  # (the runner makes its sampler by this name)
        try:
            with _cuda_names_on_tpu():
                super().__init__(vllm_config, device)
        finally:
            gmr.Sampler = exact
        self.use_cuda_graph = False
        self.sampler.widest_logprobs = vllm_config.model_config.max_logprobs
        sched = vllm_config.scheduler_config
        self.token_buckets = buckets(sched.max_num_batched_tokens, 16)
        self.request_buckets = buckets(sched.max_num_seqs, 8)

    def _determine_batch_execution_and_padding(self, num_tokens, num_reqs, *args, **kwargs):
        mode, desc, ubatch, across_dp, stats = super()._determine_batch_execution_and_padding(
            num_tokens, num_reqs, *args, **kwargs)
        if not self.kv_caches:  # the profiling run, before the KV cache exists: no attention metadata
            return mode, desc, ubatch, across_dp, stats
        desc = dataclasses.replace(desc, num_tokens=compiler.bucket(desc.num_tokens, self.token_buckets),
                                   num_reqs=compiler.bucket(num_reqs, self.request_buckets))
        return CUDAGraphMode.FULL, desc, ubatch, across_dp, stats

    def initialize_kv_cache_tensors(self, *args, **kwargs):
        """vLLM's KV cache, each layer's in a storage of its own.

        vLLM places every layer's cache in one backing allocation and hands
        each layer a view at its offset. In the compiled forward the write
        of a step's keys and values into such a view is functionalized as a
        new value of the whole layer's slab, copied back into the shared
        buffer: each step rewrote every layer's cache (30 ms a step for a
        64 MB cache here). Into a storage of its own, the write is a scatter
        in place, of the step's rows only. The views keep vLLM's shapes and
        strides (worked out on the meta device, allocating nothing)."""
        import vllm.v1.worker.gpu_model_runner as gmr

        shared = gmr.allocate_kv_cache

        def per_layer(kv_cache_config, device, *rest, **kw):
            views = shared(kv_cache_config, torch.device("meta"), *rest, **kw)
            own: dict[int, torch.Tensor] = {}
            for v in views.values():
                if id(v) not in own:
                    own[id(v)] = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=device).zero_()
                    # (the block count symbolic in the compiled forward, as
                    # vLLM's compile cache assumes: its key leaves the KV
                    # cache's size out)
                    torch._dynamo.maybe_mark_dynamic(own[id(v)], 0)
            return {name: own[id(v)] for name, v in views.items()}

        gmr.allocate_kv_cache = per_layer
        try:
            return super().initialize_kv_cache_tensors(*args, **kwargs)
        finally:
            gmr.allocate_kv_cache = shared

    def profile_run(self) -> None:
        with _uncompiled(self.model):
            super().profile_run()

    def execute_model(self, *args, **kwargs):
        # Steps come padded to the buckets: the compiled forward's dynamic
        # token dimension meets those shapes only (no warning, no bound).
        with compiler._bucketed_shapes():
            return super().execute_model(*args, **kwargs)

    def warm_up(self) -> None:
        """Compiles, before the first request, the step programs of every
        pair of token and request buckets (the compiled forward's, or in
        eager its ops'); with the executable cache on disk, a later start
        loads them instead. Pairs whose attention would need more than a
        quarter of the device's free memory are left to their first use
        (named in a log line): warming them up could exhaust it."""
        sched = self.scheduler_config
        limit = sched.max_num_seqs
        budget = torch.tpu.mem_get_info(self.device)[0] // 4
        heads = self.model_config.get_num_attention_heads(self.parallel_config)
        kv_heads = self.model_config.get_num_kv_heads(self.parallel_config)
        head_size = self.model_config.get_head_size()
        block = self.cache_config.block_size
        keys = -(-self.max_model_len // block) * block  # a request's blocks, in tokens
        skipped = []
        try:
            with compiler._bucketed_shapes():
                for reqs in reversed(self.request_buckets):
                    # A dummy step has min(tokens, max_num_seqs) requests.
                    sched.max_num_seqs = reqs
                    for size in reversed(self.token_buckets):
                        if size < reqs:
                            continue
                        if attention.scratch_bytes(size, heads, kv_heads, head_size, keys) > budget:
                            skipped.append((size, reqs))
                            continue
                        self._dummy_run(size, skip_eplb=True, remove_lora=False)
        finally:
            sched.max_num_seqs = limit
        if skipped:
            _log.warning(
                "tpu: %d step shapes (tokens, requests) were not warmed up: their attention would need more than "
                "a quarter of the free device memory (%s); they compile at first use, and such a step may run out "
                "of memory: lower max_num_batched_tokens or max_model_len", len(skipped),
                ", ".join(f"{t}x{r}" for t, r in skipped))
        if os.environ.get("TORCH_TPU_VLLM_WARMUP_STEPS", "1") != "0":
            self._warm_up_steps(set(skipped))
            warm_up_penalties(self.sampler, self.device, self.model_config.get_vocab_size(),
                              [1, *_sampler_buckets(sched.max_num_seqs)], self.max_model_len)

    def _warm_up_steps(self, skipped) -> None:
        """Engine steps before the first request, through what the dummy runs
        leave out: vLLM's own input preparation (runs of its persistent
        buffers at the step's token and request counts), its sampler (greedy
        and sampled) and the logits of the sampled rows. Their ops run once
        per bucket of those counts (docs/bounded_dynamism.md), so steps of
        token counts across every token bucket and request counts across
        every request bucket, each a prefill and two decodes, compile them
        all now. The requests use cache blocks the scheduler has not handed out
        yet (written before any request reads them) and are then
        finished."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

        sched = self.scheduler_config
        block = self.cache_config.block_size
        free_blocks = self.kv_cache_config.num_blocks - 1  # (block 0 is vLLM's null block)
        vocab = self.model_config.get_vocab_size()
        longest = self.max_model_len - 3  # (room for the decodes)
        greedy = SamplingParams(temperature=0.0, max_tokens=4)
        # (every filter and penalty at once: in strict eager each adds ops of its own)
        sampled = SamplingParams(temperature=0.8, top_p=0.9, top_k=8, min_p=0.05, presence_penalty=0.2,
                                 frequency_penalty=0.1, repetition_penalty=1.1, max_tokens=4, logprobs=1)
        seeded = SamplingParams(temperature=0.8, top_p=0.9, top_k=8, seed=0, max_tokens=4)
        counts = sorted({r for r in (1, 2, 3, 4, 5, sched.max_num_seqs // 2 + 1, sched.max_num_seqs)
                         if r <= sched.max_num_seqs})
        serial = 0

        def step(new, cached, tokens):
            out = SchedulerOutput.make_empty()
            out.scheduled_new_reqs, out.scheduled_cached_reqs = new, cached
            out.num_scheduled_tokens, out.total_num_scheduled_tokens = tokens, sum(tokens.values())
            if self.execute_model(out) is None:
                self.sample_tokens(None)

        # Greedy steps at the two ends of each token bucket by every request
        # count (how a step's tokens split between prefills and decodes
        # sizes some of its runs too); the sampler runs at the bucket of the
        # request count (sampler.py): one sampled step per bucket, and
        # seeded ones (one request runs exact). The penalties' token counts
        # are compiled apart, at every pair of buckets of rows and lengths.
        # The sampled steps ask for logprobs: their top-k is taken at the
        # engine's widest whatever the number (TpuSampler.gather_logprobs).
        sizes = sorted({n for size in self.token_buckets for n in (size // 2 + 1, size)})
        plans = [(greedy, n, reqs) for n in sizes for reqs in counts]
        rows = _sampler_buckets(sched.max_num_seqs)
        sampled_counts = sorted({*counts, *(min(b, sched.max_num_seqs) for b in rows)})
        plans += [(sampled, max(reqs, sizes[0]), reqs) for reqs in sampled_counts]
        plans += [(seeded, sizes[0], 1), (seeded, sizes[0], 2)]
        for params, n, reqs in plans:
            lengths = [n // reqs + (k < n % reqs) for k in range(reqs)]
            blocks = [-(-(length + 3) // block) for length in lengths]
            pair = (compiler.bucket(n, self.token_buckets), compiler.bucket(reqs, self.request_buckets))
            if (n < reqs or n > sched.max_num_batched_tokens or max(lengths) > longest or sum(blocks) > free_blocks
                    or pair in skipped):
                continue
            ids, new, first = [], [], 1
            for length, need in zip(lengths, blocks):
                serial += 1
                ids.append(f"tpu-warm-up-{serial}")
                new.append(NewRequestData(
                    req_id=ids[-1], prompt_token_ids=[(7 * k + serial) % vocab for k in range(length)],
                    mm_features=[], sampling_params=params, pooling_params=None,
                    block_ids=(list(range(first, first + need)),), num_computed_tokens=0, lora_request=None))
                first += need
            step(new, CachedRequestData.make_empty(), dict(zip(ids, lengths)))
            for k in range(2):
                step([], CachedRequestData(
                    req_ids=list(ids), resumed_req_ids=set(), new_token_ids=[], all_token_ids={},
                    new_block_ids=[None] * reqs, num_computed_tokens=[x + k for x in lengths],
                    num_output_tokens=[k + 1] * reqs), {i: 1 for i in ids})
            done = SchedulerOutput.make_empty()
            done.finished_req_ids = set(ids)
            self.execute_model(done)

    def _sync_device(self) -> None:
        torch.tpu.synchronize(self.device)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        return sampled_token_ids.tolist()


class TpuWorker(Worker):
    """vLLM's GPU worker on ``tpu:N``: the device's memory sizes the KV cache;
    no sleep mode, no CUDA graphs."""

    def __init__(self, *args, **kwargs):
        from . import layers

        layers.register_layers()
        super().__init__(*args, **kwargs)

    def init_device(self):
        index = self.local_rank % max(torch.tpu.device_count(), 1)
        self.device = torch.device("tpu", index)
        torch.tpu.set_device(self.device)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        init_worker_distributed_environment(
            self.vllm_config, self.rank, self.distributed_init_method, self.local_rank,
            current_platform.dist_backend,
        )
        set_random_seed(self.model_config.seed)
        init_workspace_manager(self.device, 1, 1)
        self.model_runner = TpuModelRunner(self.vllm_config, self.device)

    def determine_available_memory(self) -> int:
        """The bytes the KV cache may take: ``kv_cache_memory_bytes`` when
        given, else ``gpu_memory_utilization`` of the device's memory less the
        peak the model reached in a profiling run at the largest batch."""
        torch.tpu.reset_peak_memory_stats(self.device)
        with set_current_vllm_config(self.vllm_config):
            self.model_runner.profile_run()
        torch.tpu.synchronize(self.device)
        if self.cache_config.kv_cache_memory_bytes:
            return int(self.cache_config.kv_cache_memory_bytes)
        free, total = torch.tpu.mem_get_info(self.device)
        peak = torch.tpu.max_memory_allocated(self.device)
        budget = int(total * self.cache_config.gpu_memory_utilization) - peak
        available = min(budget, free - (free >> 4))
        if available <= 0:
            raise ValueError(
                f"tpu: no memory left for the KV cache: {peak} bytes used by the model at its peak, "
                f"{free} of {total} bytes free, gpu_memory_utilization "
                f"{self.cache_config.gpu_memory_utilization}. Raise gpu_memory_utilization or set "
                "kv_cache_memory_bytes."
            )
        _log.info("tpu: %d bytes for the KV cache (peak of the model %d, free %d of %d)", available, peak, free, total)
        return available

    def compile_or_warm_up_model(self) -> CompilationTimes:
        self.model_runner.warm_up()
        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=self.compilation_config.compilation_time,
                                encoder=getattr(self.compilation_config, "encoder_compilation_time", 0.0))

    def _maybe_get_memory_pool_context(self, tag: str):
        # No sleep-mode allocator: the device's own allocator holds everything.
        return contextlib.nullcontext()

    def sleep(self, level: int = 1) -> None:
        _log.warning("tpu: vLLM's sleep mode is not supported on tpu; ignored")

    def wake_up(self, tags: list[str] | None = None) -> None:
        _log.warning("tpu: vLLM's sleep mode is not supported on tpu; ignored")
