"""vLLM on tpu with tensor parallelism 2 on one host: two worker processes
(vLLM's multiprocessing executor, spawned), one tpu device each, vLLM's
collectives over torch_tpu's ``tpu`` c10d backend; the same greedy tokens as
Hugging Face on CPU (and so as tensor parallelism 1, test_vllm.py), with
each rank's forward compiled (its collectives inside the replayed programs:
vLLM's default on tpu). The engine runs in a child process bounded in
time. (The same collectives as eager ops are test_distributed.py's; an
eager engine here cost CI a minute and a quarter.)"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("vllm")

from test_vllm import _hf_greedy, _ids, _save_model  # noqa: E402

TIMEOUT = 420


def test_tensor_parallel_2_gives_the_same_greedy_tokens(tmp_path):
    path = str(tmp_path / "model")
    hf = _save_model(path)
    prompts = [_ids(1, 5), _ids(2, 70), _ids(3, 20)]
    script = textwrap.dedent(f"""
        import json
        from vllm import LLM, SamplingParams
        if __name__ == "__main__":
            llm = LLM(model={path!r}, dtype="float32", max_model_len=128,
                      kv_cache_memory_bytes=8 << 20, max_num_seqs=4, max_num_batched_tokens=64,
                      tensor_parallel_size=2)
            outs = llm.generate([{{"prompt_token_ids": p}} for p in {prompts!r}],
                                SamplingParams(max_tokens=8, temperature=0, ignore_eos=True), use_tqdm=False)
            print("TOKENS " + json.dumps([list(o.outputs[0].token_ids) for o in outs]), flush=True)
    """)
    (tmp_path / "tp2.py").write_text(script)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "tp2.py")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            # (the engine's warm-up steps are test_vllm.py's to check)
                            env=dict(os.environ, TORCH_TPU_VLLM_WARMUP_STEPS="0"))
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"tensor parallel engine did not finish in {TIMEOUT} s:\n{out[-6000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the workers, if any outlived the engine
        except ProcessLookupError:
            pass
    line = next((x for x in out.splitlines() if x.startswith("TOKENS ")), None)
    assert proc.returncode == 0 and line is not None, out[-6000:]
    import json

    got = json.loads(line[7:])
    assert "world_size=2 rank=1" in out and "backend=tpu" in out  # two ranks, our c10d backend
    for p, tokens in zip(prompts, got):
        assert tokens == _hf_greedy(hf, p, 8), f"prompt of {len(p)} tokens"
