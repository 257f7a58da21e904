"""`vllm serve` on tpu: vLLM's OpenAI-compatible server, its engine core in
a worker process of its own (spawned, as vLLM runs it), the forward
compiled, answering /v1/completions and /v1/chat/completions through the
openai client, streamed and not; bad requests get vLLM's errors and the
server keeps serving. Started as `python -m torch_tpu.serve` with the
retired engine's options (an alias of `vllm serve`)."""

import os
import subprocess
import sys
import time

import pytest
import torch

vllm = pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

from conftest import free_port  # noqa: E402
from test_vllm import _hf_greedy, _save_model  # noqa: E402

START_TIMEOUT = 300


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("served"))
    hf = _save_model(path)
    port = free_port()
    log = open(tmp_path_factory.mktemp("log") / "serve.log", "w+")
    cmd = [sys.executable, "-m", "torch_tpu.serve", "--model", path, "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--max-len", "128", "--max-slots", "4", "--no-warmup",
           "--kv-cache-memory-bytes", str(8 << 20), "--max-num-batched-tokens", "64", "--served-model-name", "tiny"]
    # (the engine's warm-up steps are test_vllm.py's to check)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, TORCH_TPU_VLLM_WARMUP_STEPS="0"), start_new_session=True)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120, max_retries=0)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read()[-6000:]}")
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                if time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"vllm serve did not answer in {START_TIMEOUT} s:\n{log.read()[-6000:]}")
                time.sleep(1)
        yield hf, client, log
    finally:
        _stop(proc)
        log.close()


def _stop(proc):
    """Ends the server and the engine process it started (one session)."""
    for sig, wait in ((15, 60), (9, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _words(ids):
    return [f"w{t - 4}" for t in ids]


PROMPT = "w5 w17 w3 w99 w42"
PROMPT_IDS = [9, 21, 7, 103, 46]


def test_completions_streamed_and_not_give_hf_greedy_tokens(server):
    hf, client, log = server
    want = _words(_hf_greedy(hf, PROMPT_IDS, 8))
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text.split() == want and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(PROMPT_IDS) and r.usage.completion_tokens == 8
    chunks = list(client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, temperature=0, stream=True,
                                            extra_body={"ignore_eos": True}))
    # (How many tokens each server-sent event carries depends on timing: the
    # server merges the deltas of steps that finish before it sends.)
    assert all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks).split() == want
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_completions_streamed_and_not(server):
    hf, client, log = server
    messages = [{"role": "user", "content": PROMPT}]
    # The model's chat template joins the messages' contents, a space after each.
    want = _words(_hf_greedy(hf, PROMPT_IDS, 6))
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.choices[0].message.content.split() == want
    deltas = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=6, temperature=0, stream=True, extra_body={"ignore_eos": True})
        if c.choices]
    assert "".join(deltas).split() == want


def test_bad_requests_get_vllms_errors_and_the_server_keeps_serving(server):
    hf, client, log = server
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=500)  # past max_model_len
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, temperature=-1)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=4)
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=3, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text.split() == _words(_hf_greedy(hf, PROMPT_IDS, 3))
    log.seek(0)
    text = log.read()
    assert "backend=tpu" in text and "TPU_PAGED" in text  # the tpu platform's c10d backend and attention
    assert "Traceback" not in text


def test_the_serve_command_maps_the_retired_engines_options_to_vllm_serve():
    from torch_tpu.serve import vllm_args

    assert vllm_args(["--model", "m", "--max-slots", "8", "--max-len=512", "--port", "9", "--no-warmup",
                      "--device", "tpu:0", "--enforce-eager"]) == [
        "serve", "m", "--max-num-seqs", "8", "--max-model-len", "512", "--port", "9", "--enforce-eager"]
    with pytest.raises(SystemExit, match="--model PATH is required"):
        vllm_args(["--port", "9"])
    with pytest.raises(SystemExit, match="serves on tpu"):
        vllm_args(["--model", "m", "--device", "cpu"])


def test_the_retired_serving_module_says_where_its_engine_went():
    with pytest.raises(ImportError, match="retired: serve with vLLM on tpu"):
        import torch_tpu.serving  # noqa: F401
