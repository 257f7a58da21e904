"""An inference engine for Hugging Face causal LMs on the ``tpu`` device.

XLA programs have static shapes: a serving loop that hands the model a new
shape every step (a growing KV cache, a mask one column longer, each prompt's
own length) compiles a program per step. This engine never does that after
warm-up:

- **A slotted KV cache, preallocated.** Each layer keeps keys and values of
  shape ``(slots, kv_heads, max_len + 1, head_dim)``; a request owns one slot
  (a row) from admission to its end. Writes go through ``index_copy_`` at flat
  indices computed on the device; the extra position ``max_len`` of each row
  is a write-only sink for padding. A decode step writes its new keys first
  and then attends over a window of the rows it updated in place: its
  program reads no value it overwrites, so XLA copies nothing.
- **Buckets.** Prefill packs the prompts admitted together into one
  sequence (each attends to its own tokens only), padded to a length
  bucket; decode runs the first ``B`` slots (``B`` a batch bucket holding
  every live slot) attending over the first ``K`` cache positions (``K`` a
  KV-length bucket holding the longest live sequence). Each (function,
  shapes) pair is one program compiled by ``torch.compile(backend="tpu")``
  and captured for replay at start-up (``Engine.warmup``), so steady state
  only replays.
- **Continuous batching.** Requests join (after their prefill) and leave (at
  a stop token, ``max_tokens`` or the context length) between decode steps;
  a slot freed is taken by the next waiting request.
- **Sampling on the device.** Greedy, temperature, top-k and top-p, per
  request, drawn with a counter-based hash of (seed, position, token id):
  a request's tokens depend on its seed and logits only, never on which
  other requests share its batch. Only the chosen token ids come back to the
  host.

``Engine.generate`` runs requests to completion; ``Engine.submit`` plus a
running ``Engine.start()`` loop serve concurrent callers with streaming (the
HTTP server in ``torch_tpu.serve`` does this).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import queue
import threading
import time
import types
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from .compiler import _bucketed_shapes, _Pinned, bucket

__all__ = ["Engine", "EngineConfig", "SamplingParams", "Request", "ByteTokenizer", "load_model",
           "tiny_model_config"]


# ---- requests ------------------------------------------------------------------------------


@dataclasses.dataclass
class SamplingParams:
    """How one request draws its tokens. ``temperature=0`` is greedy;
    ``top_k=0`` and ``top_p=1`` keep every token. ``seed=None`` takes a fresh
    seed from the engine's generator."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: Sequence[int] = ()
    ignore_eos: bool = False

    def validate(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not (0.0 <= float(self.temperature)):
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be a non-negative integer (0: no limit), got {self.top_k!r}")
        if not (0.0 < float(self.top_p) <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")


_FINISHED = object()


class Request:
    """One sequence being served: its prompt, the tokens produced so far,
    and (once finished) why it stopped: ``"stop"`` (a stop token) or
    ``"length"`` (``max_tokens`` or the context length). Iterating it yields
    token ids as they are produced (from another thread than the engine's)."""

    _ids = itertools.count()

    def __init__(self, prompt_ids: Sequence[int], params: SamplingParams):
        self.id = next(Request._ids)
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.output_ids: list[int] = []
        self.finish_reason: str | None = None
        self.error: BaseException | None = None
        self.slot = -1
        self.seed = 0
        self.arrival = time.perf_counter()
        self.first_token_time: float | None = None
        self._stops: frozenset[int] = frozenset()
        self._cancelled = False
        self._pending = 0  # tokens computed by a launched decode step, not read yet
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Event()
        self._listeners: list[Callable[[Request, int | None], None]] = []
        self._events = threading.Lock()  # orders tokens, the finish and new listeners

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def add_listener(self, fn: Callable[["Request", int | None], None]) -> None:
        """``fn(request, token)`` is called on the engine's thread for each
        new token, then ``fn(request, None)`` once it is finished. Tokens
        produced before the call (and the finish, if it came) are replayed
        to ``fn`` at once, in order: it sees every token exactly once."""
        with self._events:
            for t in self.output_ids:
                fn(self, t)
            if self.finished:
                fn(self, None)
            self._listeners.append(fn)

    def _emit(self, token: int) -> None:
        with self._events:
            if self.first_token_time is None:
                self.first_token_time = time.perf_counter()
            self.output_ids.append(token)
            self._queue.put(token)
            self._notify(token)

    def _finish(self, reason: str | None, error: BaseException | None = None) -> None:
        with self._events:
            self.finish_reason = reason
            self.error = error
            self._done.set()
            self._queue.put(_FINISHED)
            self._notify(None)

    def _notify(self, token: int | None) -> None:
        for fn in self._listeners:
            try:
                fn(self, token)
            except Exception:  # noqa: BLE001 (a listener that went away, e.g. a closed event loop)
                pass

    def __iter__(self) -> Iterator[int]:
        while True:
            t = self._queue.get()
            if t is _FINISHED:
                if self.error is not None:
                    raise self.error
                return
            yield t

    def wait(self, timeout: float | None = None) -> "Request":
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.id} did not finish within {timeout} s")
        if self.error is not None:
            raise self.error
        return self


# ---- the cache -----------------------------------------------------------------------------


class _SlotCache:
    """Keys and values of every layer, one row per slot, (slots, kv_heads,
    max_len + 1, head_dim): heads before positions, so that a window of the
    first B rows and K positions is what attention multiplies by, without a
    transpose. ``write_index`` (flat, over (B, kv_heads, T) of this call's
    keys, into the cache viewed as (-1, head_dim)) says where this call's
    keys go; ``read`` is None in prefill (attention over the prompt's own
    keys) or ``(B, K)`` in decode (the first B rows' first K positions, this
    call's keys written there first)."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self.keys = keys
        self.values = values
        self.write_index: torch.Tensor | None = None
        self.read: tuple[int, int] | None = None

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.write(layer_idx, key_states, value_states, self.write_index)
        if self.read is None:
            return key_states, value_states
        rows, length = self.read
        return self.keys[layer_idx][:rows, :, :length], self.values[layer_idx][:rows, :, :length]

    def write(self, layer_idx, key_states, value_states, index):
        """Writes (B, H, T, D) keys and values at the flat indices (B * H * T)."""
        d = key_states.shape[-1]
        self.keys[layer_idx].view(-1, d).index_copy_(0, index, key_states.reshape(-1, d))
        self.values[layer_idx].view(-1, d).index_copy_(0, index, value_states.reshape(-1, d))

    def window(self, length: int) -> int:
        """The positions decode attends over when the longest sequence fits
        in ``length``: those, or every position of the rows when that is
        more than half of them (a window shorter than the rows is a strided
        slice, which XLA copies before the product: a copy of more than
        half the rows costs more than reading all of them; masked anyway)."""
        width = self.keys[0].shape[2]
        return width if 2 * length > width else length

    def flat_index(self, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """Flat indices (B * H * T) of positions ``columns`` (B, T) of every
        head of slots ``rows`` ((B,), or (B, T): a slot per key), in the
        order of (B, H, T) keys."""
        _, heads, width, _ = self.keys[0].shape
        h = torch.arange(heads, device=rows.device)
        r = rows[:, None, None] if rows.dim() == 1 else rows[:, None, :]
        return ((r * heads + h[None, :, None]) * width + columns[:, None, :]).reshape(-1)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0


def _exact_upload(device, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """The host tensors on ``device`` at their exact sizes. The step
    functions are compiled per bucket already: their inputs must never be
    held padded (the eager bucketing of new lengths, which would add a
    program per size to take the exact value back)."""
    was = torch.ops.torch_tpu._exact_new_tensors(True)
    try:
        return [t.to(device) for t in tensors]
    finally:
        torch.ops.torch_tpu._exact_new_tensors(was)


@functools.lru_cache(maxsize=None)
def _slot_cache_class():
    """``_SlotCache`` as a transformers ``Cache`` (models check the type);
    made on first use, so that importing this module needs no transformers."""
    from transformers.cache_utils import Cache

    class SlotCache(_SlotCache, Cache):
        is_compileable = True

        def __init__(self, keys, values):
            Cache.__init__(self, layers=[])
            _SlotCache.__init__(self, keys, values)

    return SlotCache


def _grouped_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Scaled dot-product attention of (B, Hq, Q, D) queries over (B, Hkv, K,
    D) keys and values with Hq = r * Hkv (grouped-query attention): the
    query heads that share a key head become rows of one attention, so the
    keys and values are never repeated r times (Hugging Face's sdpa path
    repeats them when it is compiled). Returns (B, Q, Hq, D) as the sdpa
    integration does."""
    b, hq, q, d = query.shape
    hkv = key.shape[1]
    r = hq // hkv
    mask = attention_mask
    if r > 1:
        query = query.reshape(b, hkv, r * q, d)
        if mask is not None:
            mask = mask[:, :, None].expand(mask.shape[0], mask.shape[1], r, *mask.shape[2:])
            mask = mask.reshape(mask.shape[0], mask.shape[1], r * q, mask.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(b, hq, q, d).transpose(1, 2), None


@functools.lru_cache(maxsize=None)
def _register_attention() -> str:
    from transformers import AttentionInterface

    AttentionInterface.register("torch_tpu_grouped_sdpa", _grouped_sdpa)
    return "torch_tpu_grouped_sdpa"


# ---- sampling on the device ----------------------------------------------------------------

_M64 = (1 << 64) - 1


def _i64(c: int) -> int:
    c &= _M64
    return c - (1 << 64) if c >= 1 << 63 else c


_GOLDEN, _MIX1, _MIX2 = _i64(0x9E3779B97F4A7C15), _i64(0xBF58476D1CE4E5B9), _i64(0x94D049BB133111EB)


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (``>>`` is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _uniform(seed: torch.Tensor, position: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """Uniform (0, 1) floats from a splitmix64 hash of (seed, position,
    token id): the same triple always draws the same number. The values are
    the odd multiples of 2^-24, exact in float32 (half a step added to 24
    bits would round to 1 at the top, and make that token's Gumbel key
    infinite)."""
    x = seed * _GOLDEN + position * _MIX1 + token * _MIX2
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    x = x ^ _shr(x, 31)
    return (_shr(x, 41) * 2 + 1).to(torch.float32) * (1.0 / (1 << 24))


GREEDY, PLAIN, FILTERED = "greedy", "plain", "filtered"


def _sampling_mode(params: Sequence[SamplingParams]) -> str:
    """The cheapest draw that serves every one of ``params``: argmax when all
    are greedy, a Gumbel-max over every token when none keeps only its top
    k or top p, else the filtered draw (two bisections over the vocabulary)."""
    if all(p.temperature == 0 for p in params):
        return GREEDY
    if all(p.temperature == 0 or (p.top_k == 0 and p.top_p >= 1) for p in params):
        return PLAIN
    return FILTERED


def _threshold(values: torch.Tensor, enough: Callable[[torch.Tensor], torch.Tensor], count: bool = False):
    """Per row of non-negative float32 ``values`` (N, V): the largest t
    such that ``enough(x)`` holds, x (N,) being each row's sum of the values
    >= t (or their count, with ``count``); ``enough`` holds at t = 0 and
    fails above 1. A bisection over the values' int32 bit patterns (ordered
    as the floats are), so t is exact. Returns t (N, 1)."""
    bits = values.view(torch.int32)
    lo = torch.zeros(values.shape[0], dtype=torch.int32, device=values.device)
    hi = torch.full_like(lo, 0x3F800001)  # just above 1.0
    for _ in range(31):
        mid = lo + (hi - lo) // 2
        above = bits >= mid[:, None]
        ok = enough(above.sum(-1) if count else torch.where(above, values, 0.0).sum(-1))
        lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
    return lo[:, None].view(torch.float32)


def _kept(probs: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Which tokens a row may draw (N, V): its top_k most likely (ties at the
    k-th kept, as Hugging Face's warper keeps them; 0: all), then the
    smallest set of those, most likely first, whose renormalized mass
    reaches top_p (1: all). Both thresholds come from bisections over the
    probabilities' bits (exact), not from sorting the vocabulary: on XLA's
    CPU backend a (32, 2048) sort alone takes 7 ms, the two bisections 0.5."""
    keep = (probs >= _threshold(probs, lambda count: count >= top_k.clamp_min(1), count=True)) | (top_k <= 0)[:, None]
    kept = torch.where(keep, probs, 0.0)
    need = top_p * kept.sum(-1)
    return keep & ((kept >= _threshold(kept, lambda mass: mass >= need)) | (top_p >= 1)[:, None])


def _sample(logits, temperature, top_k, top_p, seed, position, mode: str):
    """Token ids (N,) from logits (N, V); per-row parameters (N,). Each
    token's Gumbel key depends on (seed, position, token id) only, and a row
    that filters nothing keeps every token in either draw: a row's choice
    is the same whatever mode its batch takes (whoever shares it)."""
    logits = logits.float()
    greedy = logits.argmax(-1)
    if mode == GREEDY:
        return greedy
    scaled = logits / temperature.clamp_min(1e-5)[:, None]
    # The Gumbel-max: the largest scaled logit plus each token's key.
    token = torch.arange(logits.shape[-1], device=logits.device)
    keyed = scaled - torch.log(-torch.log(_uniform(seed[:, None], position[:, None], token[None, :])))
    if mode == FILTERED:
        keyed = torch.where(_kept(scaled.softmax(-1), top_k, top_p), keyed, float("-inf"))
    sampled = keyed.argmax(-1)
    return torch.where(temperature > 0, sampled, greedy)


# ---- the engine ----------------------------------------------------------------------------


def _powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    out, b = [], lo
    while b < hi:
        out.append(b)
        b *= 2
    out.append(hi)
    return tuple(sorted(set(out)))


@dataclasses.dataclass
class EngineConfig:
    """``max_slots``: requests decoded together at most (the cache's rows).
    ``max_len``: prompt plus output tokens of one request at most (the
    cache's columns). The buckets default to powers of two up to those
    bounds: ``prefill_buckets`` (padded lengths of a prefill's packed
    prompts, from 16), ``batch_buckets`` (decode batch sizes, from 1),
    ``kv_buckets`` (cache positions decode attends over, from 64).
    ``prefills_per_step``: requests admitted between two decode steps at
    most; their prompts are packed into one sequence (as many as fit in the
    largest prefill bucket) and prefilled by one program.
    ``pipeline``: launch each decode step before
    reading the previous one's tokens (their host work overlaps the device's;
    a request that stopped is found one step late and its extra token
    dropped)."""

    max_slots: int = 8
    max_len: int = 256
    prefill_buckets: tuple[int, ...] | None = None
    batch_buckets: tuple[int, ...] | None = None
    kv_buckets: tuple[int, ...] | None = None
    prefills_per_step: int = 4
    pipeline: bool = True
    dtype: torch.dtype | None = None
    compile: bool = True

    def resolved(self) -> "EngineConfig":
        c = dataclasses.replace(self)
        if c.max_slots < 1 or c.max_len < 2:
            raise ValueError(f"EngineConfig: max_slots >= 1 and max_len >= 2 needed, got {c.max_slots}, {c.max_len}")
        c.prefill_buckets = tuple(sorted(c.prefill_buckets or _powers_of_two(min(16, c.max_len), c.max_len)))
        c.batch_buckets = tuple(sorted(c.batch_buckets or _powers_of_two(1, c.max_slots)))
        c.kv_buckets = tuple(sorted(c.kv_buckets or _powers_of_two(min(64, c.max_len), c.max_len)))
        c.prefills_per_step = max(1, min(c.prefills_per_step, c.max_slots))
        for name, bs, hi in (("prefill_buckets", c.prefill_buckets, c.max_len),
                             ("batch_buckets", c.batch_buckets, c.max_slots),
                             ("kv_buckets", c.kv_buckets, c.max_len)):
            if bs[0] < 1 or bs[-1] != hi:
                raise ValueError(f"EngineConfig.{name} must be positive and end at {hi}, got {bs}")
        return c


class Engine:
    """Serves a causal LM (``transformers`` ``PreTrainedModel``, or a path or
    config ``load_model`` accepts) on ``device`` with a slotted KV cache,
    bucketed compiled programs and continuous batching.

    The engine takes the model over: it moves it to ``device`` in eval mode,
    stores its Linear weights input-major (same values; see
    ``_weights_in_input_major_layout``) and, for grouped-query attention
    under sdpa, switches its attention to ``_grouped_sdpa`` (same results)."""

    def __init__(self, model, tokenizer=None, config: EngineConfig | None = None, device: str = "tpu"):
        if not isinstance(model, torch.nn.Module):
            model, tokenizer = load_model(model, tokenizer)
        self.config = (config or EngineConfig()).resolved()
        c = self.config
        self.device = torch.device(device)
        if self.device.type == "tpu":
            import torch_tpu  # noqa: F401 (registers the device)
        if c.dtype is not None:
            model = model.to(c.dtype)
        _weights_in_input_major_layout(model)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        mc = model.config
        self.vocab_size = int(mc.vocab_size)
        heads = mc.num_attention_heads
        kv_heads = getattr(mc, "num_key_value_heads", None) or heads
        head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // heads
        layers = mc.num_hidden_layers
        limit = getattr(mc, "max_position_embeddings", None)
        if limit is not None and c.max_len > limit:
            raise ValueError(f"EngineConfig.max_len={c.max_len} exceeds the model's max_position_embeddings={limit}")
        dtype = next(model.parameters()).dtype
        shape = (c.max_slots, kv_heads, c.max_len + 1, head_dim)
        self.cache = _slot_cache_class()([torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(layers)],
                                 [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(layers)])
        if mc._attn_implementation == "sdpa" and heads != kv_heads and not getattr(mc, "attn_logit_softcapping", None):
            try:
                self.model.set_attn_implementation(_register_attention())
            except (ValueError, ImportError, AttributeError):
                pass  # (a model that refuses it keeps sdpa)
        self._mask_dtype = torch.bool if mc._attn_implementation in ("sdpa", "flash_attention_2",
                                                                     "torch_tpu_grouped_sdpa") else dtype
        # Which masks the model's layers take: one per layer type where the
        # config lists them (a dict, e.g. Gemma 2/3, Qwen2 with sliding
        # layers), else one mask, with the sliding window in it where the
        # config sets one for every layer (Mistral).
        self._window = getattr(mc, "sliding_window", None)
        layer_types = getattr(mc, "layer_types", None)
        self._mask_types = sorted(set(layer_types)) if layer_types and "sliding_attention" in layer_types else None
        self._all_sliding = not layer_types and self._window is not None
        forward_params = inspect.signature(model.forward).parameters
        self._keep_arg = "logits_to_keep" in forward_params
        # transformers 5.24 names the cache argument `cache`; earlier 5.x
        # releases (those vLLM 0.32 supports) `past_key_values`.
        self._cache_arg = "cache" if "cache" in forward_params else "past_key_values"
        self.eos_token_ids = _eos_ids(model, tokenizer)
        self._fns: dict[tuple, Callable] = {}  # (kind, mode, bucket) -> its step function
        self._traced: dict[tuple, Callable] = {}  # (kind, mode) -> the function its buckets share
        self._last_tokens = torch.zeros(c.max_slots, dtype=torch.int64, device=self.device)
        self._inflight: tuple[torch.Tensor, list[Request]] | None = None
        self._lock = threading.Lock()
        self._waiting: list[Request] = []
        self._running: dict[int, Request] = {}  # slot -> request
        self._free = list(range(c.max_slots))
        self._seeds = torch.Generator().manual_seed(0)
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stop = False
        self.stats = {"prefills": 0, "decode_steps": 0, "tokens": 0, "requests": 0}

    # -- the model's step functions (compiled per bucket) --

    def _allowed(self, q_pos, k_pos, same=None) -> torch.Tensor:
        """Which keys each query attends to, made on the host: bool (M, N, 1,
        Q, K) for queries at positions q_pos (N, Q) over keys at positions
        k_pos (N or 1, K), causal; ``same`` (N, Q, K): which keys each query
        may see at all (those of its own prompt, in a packed prefill). M = 1,
        or 2 where the model has full and sliding-window layers (full first).
        NumPy arrays in: CPU torch would run a prefill's mask on its OpenMP
        threads, whose spinning afterwards takes a core from the device's.

        A program input rather than computed in the step: XLA fuses a mask
        computed in the program into each attention's loops, which then
        recompute it from the positions for every score (measured on the CPU
        plugin: a 256-token prefill took twice as long)."""
        q = q_pos[:, None, :, None]
        k = k_pos[:, None, None, :]
        full = k <= q
        if same is not None:
            full = full & same[:, None]
        if self._all_sliding:
            full = full & (k > q - self._window)
        if self._mask_types is None:
            return torch.from_numpy(full[None])
        return torch.from_numpy(np.stack([full, full & (k > q - self._window)]))

    def _masks(self, allowed: torch.Tensor) -> Any:
        """The attention masks the model takes, from ``_allowed``'s: one, or
        one per layer type; boolean or additive as its attention wants."""
        masks = {"full_attention": allowed[0]}
        if self._mask_types is not None:
            masks["sliding_attention"] = allowed[1]
        if self._mask_dtype != torch.bool:
            lo = torch.finfo(self._mask_dtype).min
            masks = {t: torch.where(m, 0.0, lo).to(self._mask_dtype) for t, m in masks.items()}
        return masks if self._mask_types is not None else masks["full_attention"]

    def _forward(self, tokens, positions, mask, keep):
        kwargs = {"logits_to_keep": keep} if self._keep_arg and keep is not None else {}
        kwargs[self._cache_arg] = self.cache
        out = self.model(input_ids=tokens, position_ids=positions, attention_mask=mask, use_cache=True, **kwargs)
        return out.logits

    def _prefill(self, mode, tokens, tmeta, meta, fparams, allowed):
        """Prompts packed into one sequence of T tokens, padded at its end.
        tmeta: int64 (3, T), per token: position in its prompt, which prompt
        (-1: padding, written into the sink column) and its slot. meta:
        int64 (5, P), per prompt: slot, length, top_k, seed, and the index of
        its last token; fparams: float (2, P): temperature, top_p; allowed:
        ``_allowed``'s (M, 1, 1, T, T). Returns each prompt's next token (P,)."""
        pos, seg, slot = tmeta
        column = torch.where(seg >= 0, pos, self.config.max_len)
        self.cache.write_index = self.cache.flat_index(slot[None], column[None])
        self.cache.read = None
        masks = self._masks(allowed)
        last = meta[4]
        if self._keep_arg:
            logits = self._forward(tokens[None], pos[None], masks, last)[0]
        else:
            logits = self._forward(tokens[None], pos[None], masks, None)[0, last]
        self.cache.write_index = None
        return _sample(logits, fparams[0], meta[2], fparams[1], meta[3], meta[1], mode)

    def _decode(self, mode, meta, fparams, allowed):
        """One token for each of the first B slots. meta: int64 (6, B):
        position (where the input token goes), the cache column its key is
        written to (its position, or the sink for an idle row), top_k, seed,
        input token, and whether to take that token (1) or the slot's last
        sampled one, still on the device (0); fparams: float (2, B):
        temperature, top_p; allowed: ``_allowed``'s (M, B, 1, 1, K), over
        the cache's first K positions. Writes the input tokens' keys and
        values into the cache, and the next tokens (returned) as the slots'
        last ones."""
        b = meta.shape[1]
        pos = meta[0]
        tokens = torch.where(meta[5] > 0, meta[4], self._last_tokens[:b])
        self.cache.write_index = self.cache.flat_index(torch.arange(b, device=meta.device), meta[1][:, None])
        self.cache.read = (b, allowed.shape[-1])
        logits = self._forward(tokens[:, None], pos[:, None], self._masks(allowed), None)[:, -1]
        self.cache.read = self.cache.write_index = None
        out = _sample(logits, fparams[0], meta[2], fparams[1], meta[3], pos + 1, mode)
        self._last_tokens[:b].copy_(out)
        return out

    def _prefill_greedy(self, *args):
        return self._prefill(GREEDY, *args)

    def _prefill_sampled(self, *args):
        return self._prefill(FILTERED, *args)

    def _decode_greedy(self, *args):
        return self._decode(GREEDY, *args)

    def _decode_plain(self, *args):
        return self._decode(PLAIN, *args)

    def _decode_sampled(self, *args):
        return self._decode(FILTERED, *args)

    def _call(self, kind: str, mode: str, bucket: tuple[int, ...], *args):
        f = self._fns.get((kind, mode, bucket))
        if f is None:
            f = self._fns[kind, mode, bucket] = self._step_function(kind, mode, bucket)
        with torch.no_grad():
            return f(*args)

    def _step_function(self, kind: str, mode: str, bucket: tuple[int, ...]) -> Callable:
        """The step function of one kind, sampling mode and bucket, compiled.

        The buckets of one kind and mode share one traced function
        (``_traced_step``). Each bucket's is pinned once warm-up has called
        it twice: its graph is then called without Dynamo
        (``compiler._Pinned``; the engine owns the model and the cache,
        which stay the same objects), so no call pays for Dynamo's guards.
        Prefill samples one token per request: its sampled draw is always
        the filtered one; decode has a function per mode."""
        method = _STEPS[kind, mode]
        if not self.config.compile:
            return types.MethodType(method, self)
        traced = self._traced.get((kind, mode))
        if traced is None:
            traced = self._traced[kind, mode] = self._traced_step(kind, mode)
        return _Pinned(traced)

    def _traced_step(self, kind: str, mode: str) -> Callable:
        """The step function of one kind and mode for all its buckets,
        compiled with the bucketed dimensions (batch, prompt length, window)
        marked dynamic: Dynamo and AOTAutograd trace the model once for all
        the buckets (again where the model specializes a size: a batch of
        one, a window of whole rows), and each bucket's shapes compile a
        program of their own. Traced per bucket, warm-up took about 2 s of
        tracing per bucket and mode. The code object is this engine's own,
        so that the engines of one process keep their compiled graphs apart."""
        import torch._dynamo

        method = _STEPS[kind, mode]
        code = method.__code__.replace(co_name=f"{method.__name__}_engine")
        fn = types.FunctionType(code, method.__globals__, code.co_name, method.__defaults__, method.__closure__)
        compiled = torch.compile(types.MethodType(fn, self), backend="tpu", fullgraph=True, dynamic=False)
        dims = _DYNAMIC_DIMS[kind]
        c = self.config
        buckets = len(c.prefill_buckets) if kind == "prefill" else len(c.batch_buckets) * len(c.kv_buckets)
        limit = max(torch._dynamo.config.recompile_limit, buckets + 2)

        def traced(*args):
            for t, ds in zip(args, dims):
                if ds:
                    torch._dynamo.maybe_mark_dynamic(t, ds)
            with _bucketed_shapes(), torch._dynamo.config.patch(recompile_limit=limit):
                return compiled(*args)

        traced.code = code  # (whose Dynamo cache holds the graphs)
        return traced

    # -- warm-up --

    def warmup(self) -> dict[str, int]:
        """Compiles (or loads from the persistent cache) and captures every
        bucket's prefill and decode program, for each way of sampling. Returns
        counts: step functions ready, programs compiled, programs loaded from
        the disk cache now (the others were in memory already: preloaded in
        the background at start-up, or used before). After it, serving
        compiles nothing."""
        from . import cache_stats, execution_mode, get_execution_mode

        if self.device.type == "tpu" and get_execution_mode() == "fused":
            with execution_mode("strict"):
                return self.warmup()
        before = cache_stats()
        c = self.config
        for mode in (GREEDY, PLAIN, FILTERED):
            for t in c.prefill_buckets if mode != PLAIN else ():
                r = Request([0] * min(t, c.max_len - 1), SamplingParams(max_tokens=1))
                r.slot = 0
                for _ in range(2):  # the second call captures the replay
                    self._run_prefill([r], mode)
            for b in c.batch_buckets:
                for k in c.kv_buckets:
                    for _ in range(2):
                        self._launch_decode([], mode, b, k).cpu()
        after = cache_stats()
        return {"functions": len(self._fns), "compiled": after["misses"] - before["misses"],
                "loaded": after["disk_hits"] - before["disk_hits"]}

    # -- requests --

    def submit(self, prompt_ids: Sequence[int], params: SamplingParams | None = None) -> Request:
        """Queues a request; the running loop (``start``) or ``step`` serves it."""
        params = params or SamplingParams()
        params.validate()
        n = len(prompt_ids)
        if n == 0:
            raise ValueError("the prompt is empty: at least one token is needed")
        if n >= self.config.max_len:
            raise ValueError(f"the prompt has {n} tokens; this engine serves at most {self.config.max_len - 1} "
                             f"prompt tokens (max_len={self.config.max_len} counts the prompt and the output)")
        bad = [t for t in prompt_ids if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:4]} are outside the vocabulary [0, {self.vocab_size})")
        r = Request(prompt_ids, params)
        r.seed = (params.seed if params.seed is not None
                  else int(torch.randint(0, 2**62, (1,), generator=self._seeds)))
        r._stops = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_token_ids)
        with self._wake:
            self._waiting.append(r)
            self.stats["requests"] += 1
            self._wake.notify()
        return r

    def cancel(self, r: Request) -> None:
        """Ends ``r`` (a client went away, or a stop string matched): a
        waiting request leaves the queue; a running one leaves its slot
        before the next decode step. No-op once finished."""
        with self._wake:
            if r.finished:
                return
            if r in self._waiting:
                self._waiting.remove(r)
            else:
                r._cancelled = True
                self._wake.notify()
                return
        r._finish("cancelled")

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[list[int]]:
        """Serves ``prompts`` (token id lists) to completion; their output ids."""
        ps = params if isinstance(params, (list, tuple)) else [params] * len(prompts)
        reqs = [self.submit(p, q) for p, q in zip(prompts, ps)]
        if self._thread is None:
            while not all(r.finished for r in reqs):
                self.step()
        return [r.wait().output_ids for r in reqs]

    # -- the loop --

    def step(self) -> bool:
        """Admits waiting requests (their prefill, up to prefills_per_step),
        launches one decode step for every running request with room for a
        token, then reads the previous step's tokens (with
        ``config.pipeline``; else this step's). Returns whether there was
        work.

        Its programs run as they are launched, in a scope of its own: under
        fused eager they are not deferred into the calling thread's (or the
        process's) pending program, which other threads share."""
        if self.device.type != "tpu":
            return self._step()
        from . import execution_mode, get_execution_mode

        if get_execution_mode() != "fused":
            return self._step()
        with execution_mode("strict"):
            return self._step()

    def _step(self) -> bool:
        with self._lock:
            admit = []
            packed = 0  # prompt tokens admitted: they must fit in one prefill bucket
            while self._waiting and self._free and len(admit) < self.config.prefills_per_step:
                n = len(self._waiting[0].prompt_ids)
                if admit and packed + n > self.config.prefill_buckets[-1]:
                    break
                packed += n
                r = self._waiting.pop(0)
                r.slot = self._free.pop(0)
                admit.append(r)
        if admit:
            try:
                mode = GREEDY if all(r.params.temperature == 0 for r in admit) else FILTERED
                toks = self._run_prefill(admit, mode)
            except BaseException as e:  # noqa: BLE001 (the requests fail, the engine goes on)
                for r in admit:
                    self._release(r, None, e)
                toks = None
            if toks is not None:
                self.stats["prefills"] += 1
                with self._lock:
                    for r in admit:
                        self._running[r.slot] = r
                for r, tok in zip(admit, toks):
                    self._accept(r, tok)
        with self._lock:
            running = sorted(self._running.values(), key=lambda r: r.slot)
            cancelled = [r for r in running if r._cancelled]
        for r in cancelled:
            self._release(r, "cancelled")
        # Requests with room for another token (counting one not read yet).
        launch = [r for r in running if not r._cancelled and self._room(r)]
        step = None
        if launch:
            b = bucket(launch[-1].slot + 1, self.config.batch_buckets)
            longest = max(len(r.prompt_ids) + len(r.output_ids) + r._pending for r in launch)
            k = bucket(longest, self.config.kv_buckets)
            try:
                step = (self._launch_decode(launch, _sampling_mode([r.params for r in launch]), b, k), launch)
            except BaseException as e:  # noqa: BLE001
                for r in launch:
                    self._release(r, None, e)
            else:
                self.stats["decode_steps"] += 1
                for r in launch:
                    r._pending += 1
        previous, self._inflight = self._inflight, step
        if previous is not None:
            self._collect(previous)
        if step is not None and not self.config.pipeline:
            self._inflight = None
            self._collect(step)
        return bool(admit or step or previous)

    def _room(self, r: Request) -> bool:
        produced = len(r.output_ids) + r._pending
        return produced < r.params.max_tokens and len(r.prompt_ids) + produced < self.config.max_len

    def _collect(self, step: tuple[torch.Tensor, list[Request]]) -> None:
        """Reads a launched decode step's tokens and hands them to its
        requests (those still running: one that stopped meanwhile drops it)."""
        out, reqs = step
        try:
            toks = out.cpu().tolist()
        except BaseException as e:  # noqa: BLE001
            for r in reqs:
                r._pending = 0
                if not r.finished:
                    self._release(r, None, e)
            return
        for r in reqs:
            r._pending -= 1
            if not r.finished and r.slot >= 0 and not r._cancelled:
                self._accept(r, toks[r.slot])

    def _run_prefill(self, reqs: list[Request], mode: str) -> list[int]:
        c = self.config
        lengths = [len(r.prompt_ids) for r in reqs]
        t = bucket(sum(lengths), c.prefill_buckets)
        tokens, pos, seg, slot = [], [], [], []
        meta = [[reqs[0].slot] * c.prefills_per_step, [1] * c.prefills_per_step, [0] * c.prefills_per_step,
                [0] * c.prefills_per_step, [0] * c.prefills_per_step]
        fparams = [[1.0] * c.prefills_per_step, [1.0] * c.prefills_per_step]
        for i, (r, n) in enumerate(zip(reqs, lengths)):
            tokens += r.prompt_ids
            pos += range(n)
            seg += [i] * n
            slot += [r.slot] * n
            for row, v in enumerate((r.slot, n, r.params.top_k, r.seed, len(tokens) - 1)):
                meta[row][i] = v
            fparams[0][i], fparams[1][i] = r.params.temperature, r.params.top_p
        pad = t - len(tokens)  # padding: its own sequence, written into the first slot's sink
        tokens += [0] * pad
        pos += range(pad)
        seg += [-1] * pad
        slot += [reqs[0].slot] * pad
        # Each token sees its own prompt's tokens up to itself (padding sees
        # padding: no row is all masked).
        p, g = np.array(pos), np.array(seg)
        allowed = self._allowed(p[None], p[None], (g[:, None] == g[None, :])[None])
        out = self._call("prefill", mode, (t,), *_exact_upload(
            self.device, torch.tensor(tokens, dtype=torch.int64), torch.tensor([pos, seg, slot], dtype=torch.int64),
            torch.tensor(meta, dtype=torch.int64), torch.tensor(fparams), allowed))
        return out.cpu().tolist()[:len(reqs)]

    def _launch_decode(self, running: list[Request], mode: str, b: int, k: int) -> torch.Tensor:
        """Launches one decode step (and its cache write) for ``running``;
        returns its tokens (B,) on the device, not read."""
        # Idle rows write into their row's sink column and attend to position 0.
        pos, column, top_k, seed = [0] * b, [self.config.max_len] * b, [0] * b, [0] * b
        tokens, given = [0] * b, [1] * b
        temperature, top_p = [1.0] * b, [1.0] * b
        for r in running:
            s = r.slot
            pos[s] = len(r.prompt_ids) + len(r.output_ids) + r._pending - 1
            column[s] = pos[s]
            top_k[s], seed[s] = r.params.top_k, r.seed
            if r._pending:
                given[s] = 0  # its input is the token the step before sampled, still on the device
            else:
                tokens[s] = r.output_ids[-1]
            temperature[s], top_p[s] = r.params.temperature, r.params.top_p
        allowed = self._allowed(np.array(pos)[:, None], np.arange(self.cache.window(k))[None])
        return self._call("decode", mode, (b, k), *_exact_upload(
            self.device, torch.tensor([pos, column, top_k, seed, tokens, given], dtype=torch.int64),
            torch.tensor([temperature, top_p], dtype=torch.float32), allowed))

    def _accept(self, r: Request, tok: int) -> None:
        r._emit(tok)
        self.stats["tokens"] += 1
        total = len(r.prompt_ids) + len(r.output_ids)
        if tok in r._stops:
            self._release(r, "stop")
        elif len(r.output_ids) >= r.params.max_tokens or total >= self.config.max_len:
            self._release(r, "length")

    def _release(self, r: Request, reason: str | None, error: BaseException | None = None) -> None:
        with self._lock:
            if self._running.get(r.slot) is r:
                del self._running[r.slot]
            if r.slot >= 0:
                self._free.append(r.slot)
                self._free.sort()
                r.slot = -1
        r._finish(reason, error)

    def start(self) -> None:
        """Runs the serving loop on a background thread (``stop`` ends it)."""
        if self._thread is not None:
            return
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="torch_tpu-serving", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stop and not self._waiting and not self._running and self._inflight is None:
                    self._wake.wait()
                if self._stop:
                    break
            self.step()
        with self._lock:
            pending = self._waiting + list(self._running.values())
            self._waiting = []
            self._inflight = None  # (its requests fail below; their tokens are dropped)
        for r in pending:
            self._release(r, None, RuntimeError("the engine was stopped"))


# The step function of each kind and sampling mode (Engine._step_function).
_STEPS = {("prefill", GREEDY): Engine._prefill_greedy, ("prefill", FILTERED): Engine._prefill_sampled,
          ("decode", GREEDY): Engine._decode_greedy, ("decode", PLAIN): Engine._decode_plain,
          ("decode", FILTERED): Engine._decode_sampled}
# The dimensions that differ between the buckets of a kind, per argument:
# prefill (tokens (T,), token meta (3, T), meta, fparams, allowed (M, 1, 1,
# T, T)); decode (meta (6, B), fparams (2, B), allowed (M, B, 1, 1, K)).
_DYNAMIC_DIMS = {"prefill": ([0], [1], [], [], [3, 4]), "decode": ([1], [1], [1, 4])}


def _weights_in_input_major_layout(model: torch.nn.Module) -> None:
    """Stores each Linear weight (out, in) with strides (1, out): same
    values and shape, but a program multiplies by it as (in, out) without
    repacking it (on the CPU plugin, a decode step's matmuls of a few rows
    by a torch-layout weight cost about twice as much)."""
    with torch.no_grad():
        for mod in model.modules():
            w = getattr(mod, "weight", None)
            if isinstance(mod, torch.nn.Linear) and isinstance(w, torch.nn.Parameter) and w.dim() == 2:
                if w.stride() != (1, w.shape[0]):
                    w.data = w.data.t().contiguous().t()


def _eos_ids(model, tokenizer) -> frozenset[int]:
    ids = set()
    for src in (getattr(model, "generation_config", None), model.config, tokenizer):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        if isinstance(e, int):
            ids.add(e)
        elif isinstance(e, (list, tuple)):
            ids.update(int(x) for x in e)
    return frozenset(ids)


# ---- models and tokenizers -----------------------------------------------------------------


class ByteTokenizer:
    """A tokenizer for models saved without one: token ids 0..255 are UTF-8
    bytes; 256 is the end of text (also the beginning)."""

    eos_token_id = 256
    bos_token_id = 256
    vocab_size = 257

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = True, **_):
        text = plain_chat_text(messages, add_generation_prompt)
        return self.encode(text) if tokenize else text


def plain_chat_text(messages, add_generation_prompt: bool = True) -> str:
    """The chat template of tokenizers that have none: ``<role>content``
    lines, then ``<assistant>``."""
    text = "".join(f"<{m['role']}>{m['content']}\n" for m in messages)
    return text + "<assistant>" if add_generation_prompt else text


def tiny_model_config(vocab_size: int = 257, **overrides):
    """A small Llama config (random weights): for tests and demos."""
    from transformers import LlamaConfig

    kw = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, bos_token_id=256,
              eos_token_id=256, pad_token_id=256)
    kw.update(overrides)
    return LlamaConfig(**kw)


def load_model(source, tokenizer=None, seed: int = 0):
    """(model, tokenizer) from a saved model directory (its tokenizer if it
    has one, else ``ByteTokenizer``), a config (a ``PretrainedConfig``, a
    config.json path, or ``"tiny-llama"``: random weights from ``seed``)."""
    import os

    import transformers

    transformers.logging.set_verbosity_error()
    if isinstance(source, transformers.PretrainedConfig) or source == "tiny-llama" or (
            isinstance(source, str) and source.endswith(".json")):
        cfg = (tiny_model_config() if source == "tiny-llama" else source if not isinstance(source, str)
               else transformers.AutoConfig.from_pretrained(source))
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    elif isinstance(source, str) and os.path.isdir(source):
        model = transformers.AutoModelForCausalLM.from_pretrained(source)
        if tokenizer is None:
            try:
                tokenizer = transformers.AutoTokenizer.from_pretrained(source)
            except (OSError, ValueError, TypeError):
                tokenizer = None
    else:
        raise ValueError(f"load_model: {source!r} is neither a model directory, a config.json nor 'tiny-llama'")
    return model.eval(), tokenizer if tokenizer is not None else ByteTokenizer()
