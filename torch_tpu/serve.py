"""An OpenAI-compatible HTTP server over ``torch_tpu.serving.Engine``.

    python -m torch_tpu.serve --model PATH_OR_CONFIG [--port 8000]

``--model`` is a saved Hugging Face model directory, a config.json (random
weights) or ``tiny-llama``. Endpoints: ``GET /v1/models``, ``GET /health``,
``POST /v1/completions`` and ``POST /v1/chat/completions``, with
``"stream": true`` as server-sent events. Bad requests get OpenAI-style
errors (``{"error": {"message", "type", "param", "code"}}``) and the
server keeps serving. Built on FastAPI and uvicorn (``pip install
'torch_tpu[serve]'``).
"""


import argparse
import asyncio
import json
import time
import uuid
from typing import Any

from .serving import Engine, EngineConfig, Request, SamplingParams, plain_chat_text

__all__ = ["build_app", "main"]


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.kind = message, param, code, status, kind


def _error(status: int, message: str, kind: str, param=None, code=None):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status,
                        content={"error": {"message": message, "type": kind, "param": param, "code": code}})


def _number(body: dict, name: str, default, lo=None, hi=None, integer=False, lo_open=False):
    v = body.get(name, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise _BadRequest(f"'{name}' must be {'an integer' if integer else 'a number'}, got {v!r}", name)
    if (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
        bounds = f"{'(' if lo_open else '['}{lo}, {hi if hi is not None else 'inf'}]"
        raise _BadRequest(f"'{name}' must be in {bounds}, got {v!r}", name)
    return v


class _Stops:
    """Text stop sequences over an incrementally decoded output: holds back
    what could still become a stop sequence."""

    def __init__(self, tokenizer, stop):
        self.tokenizer = tokenizer
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 4:
            raise _BadRequest("'stop' must be a non-empty string or a list of at most 4 of them", "stop")
        self.stop = stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.sent = 0
        self.hit = False

    def delta(self, ids: list[int], final: bool) -> str:
        """The text to send now for output ``ids``."""
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        for s in self.stop:
            i = text.find(s)
            if i >= 0:
                text, final, self.hit = text[:i], True, True
        end = len(text)
        if not final:
            end = max(self.sent, end - self.hold)
            while end > self.sent and text[end - 1] == "\ufffd":  # an incomplete UTF-8 sequence
                end -= 1
        out = text[self.sent:end]
        self.sent = max(self.sent, end)
        return out


def build_app(engine: Engine, model_name: str):
    """The FastAPI application serving ``engine`` as ``model_name``."""
    from fastapi import FastAPI, Request as HTTPRequest
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException

    tokenizer = engine.tokenizer
    app = FastAPI(title="torch_tpu serve")
    created = int(time.time())

    @app.exception_handler(_BadRequest)
    async def _bad(_, e: _BadRequest):
        return _error(e.status, e.message, e.kind, e.param, e.code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_, e):
        return _error(400, f"invalid request: {e.errors()}", "invalid_request_error")

    @app.exception_handler(HTTPException)
    async def _http(_, e):
        return _error(e.status_code, str(e.detail), "invalid_request_error")

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": created,
                                            "owned_by": "torch_tpu"}]}

    async def _body(request: HTTPRequest) -> dict:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _BadRequest("the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise _BadRequest("the request body must be a JSON object")
        model = body.get("model")
        if model is None:
            raise _BadRequest("'model' is required", "model")
        if model != model_name:
            raise _BadRequest(f"The model `{model}` does not exist. This server serves `{model_name}`.", "model",
                              "model_not_found", status=404)
        return body

    def _params(body: dict, default_max: int | None) -> tuple[SamplingParams, _Stops]:
        n = _number(body, "n", 1, 1, 1, integer=True)
        del n
        limit = engine.config.max_len - 1
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = _number({"max_tokens": max_tokens}, "max_tokens", default_max or limit, 1, integer=True)
        p = SamplingParams(
            max_tokens=max_tokens,
            temperature=float(_number(body, "temperature", 1.0, 0.0, 2.0)),
            top_p=float(_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)),
            top_k=_number(body, "top_k", 0, 0, integer=True),
            seed=_number(body, "seed", None, integer=True) if body.get("seed") is not None else None,
            ignore_eos=bool(body.get("ignore_eos", False)),
        )
        return p, _Stops(tokenizer, body.get("stop"))

    def _submit(ids: list[int], p: SamplingParams, param: str = "prompt") -> Request:
        if len(ids) + 1 > engine.config.max_len:
            raise _BadRequest(f"This model's maximum context length is {engine.config.max_len} tokens; the prompt "
                              f"has {len(ids)} tokens (at least one more is needed for the output).", param,
                              "context_length_exceeded")
        p = SamplingParams(**{**p.__dict__, "max_tokens": min(p.max_tokens, engine.config.max_len - len(ids))})
        try:
            return engine.submit(ids, p)
        except ValueError as e:
            raise _BadRequest(str(e), param) from None

    def _watch(r: Request) -> asyncio.Queue:
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        r.add_listener(lambda _r, tok: loop.call_soon_threadsafe(q.put_nowait, tok))  # (earlier tokens replayed)
        return q

    async def _tokens(r: Request, q: asyncio.Queue, stops: _Stops):
        """(text delta, finish reason or None) as tokens arrive."""
        ids: list[int] = []
        while True:
            tok = await q.get()
            if tok is None:
                if r.error is not None:
                    raise r.error
                reason = r.finish_reason
                yield stops.delta(ids, True), ("stop" if stops.hit else reason)
                return
            ids.append(tok)
            text = stops.delta(ids, False)
            if stops.hit:
                engine.cancel(r)
                yield text, "stop"
                return
            yield text, None

    async def _collect(r: Request, stops: _Stops) -> tuple[str, str, int]:
        q = _watch(r)
        parts, reason = [], None
        try:
            async for text, reason in _tokens(r, q, stops):
                parts.append(text)
        finally:
            engine.cancel(r)
        return "".join(parts), reason, len(r.output_ids)

    def _usage(prompt: int, completion: int) -> dict:
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _sse(obj) -> str:
        return f"data: {json.dumps(obj)}\n\n"

    def _stream(reqs: list[Request], stops: list[_Stops], chunk, usage_chunk) -> StreamingResponse:
        async def events():
            queues = [_watch(r) for r in reqs]
            try:
                if chunk("", None, 0, first=True) is not None:
                    for i in range(len(reqs)):
                        yield _sse(chunk("", None, i, first=True))
                gens = [_tokens(r, q, s) for r, q, s in zip(reqs, queues, stops)]
                # Interleave the choices as their tokens arrive.
                pending = {asyncio.ensure_future(g.__anext__()): i for i, g in enumerate(gens)}
                while pending:
                    done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for f in done:
                        i = pending.pop(f)
                        try:
                            text, reason = f.result()
                        except StopAsyncIteration:
                            continue
                        if text or reason:
                            yield _sse(chunk(text, reason, i))
                        pending[asyncio.ensure_future(gens[i].__anext__())] = i
                if usage_chunk is not None:
                    yield _sse(usage_chunk(_usage(sum(len(r.prompt_ids) for r in reqs),
                                                  sum(len(r.output_ids) for r in reqs))))
                yield "data: [DONE]\n\n"
            except Exception as e:  # noqa: BLE001 (reported in the stream: the status line is sent)
                yield _sse({"error": {"message": str(e), "type": "server_error", "param": None, "code": None}})
            finally:
                for r in reqs:
                    engine.cancel(r)

        return StreamingResponse(events(), media_type="text/event-stream")

    def _encode_prompt(prompt) -> list[list[int]]:
        if isinstance(prompt, str):
            return [tokenizer.encode(prompt)]
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            return [tokenizer.encode(p) for p in prompt]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return [list(prompt)]
        if (isinstance(prompt, list) and prompt and all(isinstance(p, list) and p for p in prompt)
                and all(isinstance(t, int) for p in prompt for t in p)):
            return [list(p) for p in prompt]
        raise _BadRequest("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists",
                          "prompt")

    @app.post("/v1/completions")
    async def completions(request: HTTPRequest):
        body = await _body(request)
        if "prompt" not in body:
            raise _BadRequest("'prompt' is required", "prompt")
        prompts = _encode_prompt(body["prompt"])
        for ids in prompts:
            if not ids:
                raise _BadRequest("the prompt is empty (no tokens)", "prompt")
        params, _ = _params(body, 16)
        stops = [_Stops(tokenizer, body.get("stop")) for _ in prompts]
        reqs = []
        try:
            for ids in prompts:
                reqs.append(_submit(ids, params))
        except _BadRequest:
            for r in reqs:
                engine.cancel(r)
            raise
        rid, now = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        base = {"id": rid, "object": "text_completion", "created": now, "model": model_name}
        if body.get("stream"):
            def chunk(text, reason, i, first=False):
                if first:
                    return None
                return {**base, "choices": [{"index": i, "text": text, "logprobs": None, "finish_reason": reason}]}

            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return _stream(reqs, stops, chunk, (lambda u: {**base, "choices": [], "usage": u}) if include else None)
        results = await asyncio.gather(*(_collect(r, s) for r, s in zip(reqs, stops)))
        choices = [{"index": i, "text": text, "logprobs": None, "finish_reason": reason}
                   for i, (text, reason, _) in enumerate(results)]
        return JSONResponse({**base, "choices": choices,
                             "usage": _usage(sum(len(p) for p in prompts), sum(n for _, _, n in results))})

    @app.post("/v1/chat/completions")
    async def chat(request: HTTPRequest):
        body = await _body(request)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise _BadRequest("'messages' must be a non-empty list of {'role': str, 'content': str} objects",
                              "messages")
        ids = _chat_ids(tokenizer, messages)
        params, stops = _params(body, None)
        r = _submit(ids, params, "messages")
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        base = {"id": rid, "object": "chat.completion", "created": now, "model": model_name}
        if body.get("stream"):
            cbase = {**base, "object": "chat.completion.chunk"}

            def chunk(text, reason, i, first=False):
                delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
                return {**cbase, "choices": [{"index": i, "delta": delta, "logprobs": None,
                                              "finish_reason": None if first else reason}]}

            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return _stream([r], [stops], chunk, (lambda u: {**cbase, "choices": [], "usage": u}) if include else None)
        text, reason, n = await _collect(r, stops)
        return JSONResponse({**base, "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                  "logprobs": None, "finish_reason": reason}],
                             "usage": _usage(len(ids), n)})

    return app


def _chat_ids(tokenizer, messages) -> list[int]:
    if getattr(tokenizer, "chat_template", None) or not hasattr(tokenizer, "chat_template"):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    return tokenizer.encode(plain_chat_text(messages))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m torch_tpu.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model directory, a config.json, or tiny-llama")
    ap.add_argument("--served-model-name", default=None, help="the name clients use (default: --model)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--device", default="tpu")
    ap.add_argument("--max-slots", type=int, default=8, help="requests decoded together at most")
    ap.add_argument("--max-len", type=int, default=512, help="prompt plus output tokens of a request at most")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                    help="the dtype to serve in (default: the model's)")
    ap.add_argument("--no-warmup", action="store_true", help="compile each bucket on first use instead")
    args = ap.parse_args(argv)

    import torch
    import uvicorn

    cfg = EngineConfig(max_slots=args.max_slots, max_len=args.max_len,
                       dtype=getattr(torch, args.dtype) if args.dtype else None)
    engine = Engine(args.model, config=cfg, device=args.device)
    if not args.no_warmup:
        t = time.perf_counter()
        counts = engine.warmup()
        print(f"torch_tpu.serve: warmed up {counts['functions']} step functions in {time.perf_counter() - t:.1f} s "
              f"({counts['compiled']} programs compiled, {counts['loaded']} loaded from the disk cache, the rest "
              f"already in memory)", flush=True)
    engine.start()
    try:
        uvicorn.run(build_app(engine, args.served_model_name or args.model), host=args.host, port=args.port,
                    log_level="warning")
    finally:
        engine.stop()


if __name__ == "__main__":
    main()
