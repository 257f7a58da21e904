"""``python -m torch_tpu.serve``: an alias of ``vllm serve`` (vLLM's
OpenAI-compatible server, on tpu through torch_tpu's platform plugin).

    python -m torch_tpu.serve --model PATH [--max-slots N] [--max-len N] [vLLM's serve options]

The retired engine's options map to vLLM's: ``--model`` is the model
(vLLM's positional argument), ``--max-slots`` is ``--max-num-seqs`` and
``--max-len`` is ``--max-model-len``; ``--no-warmup`` and ``--device tpu``
are accepted and mean nothing more (vLLM warms up every bucket at start; the
plugin picks tpu). Every other option goes to ``vllm serve`` as it is.
"""

from __future__ import annotations

import sys

__all__ = ["main", "vllm_args"]

_RENAMED = {"--max-slots": "--max-num-seqs", "--max-len": "--max-model-len"}


def vllm_args(argv: list[str]) -> list[str]:
    """``vllm serve``'s arguments for this command's."""
    out, model, i = [], None, 0
    while i < len(argv):
        arg, value = argv[i], None
        name = arg.split("=", 1)[0]
        if name in ("--model", "--device", *_RENAMED):
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif i + 1 < len(argv):
                i, value = i + 1, argv[i + 1]
            else:
                raise SystemExit(f"python -m torch_tpu.serve: {name} needs a value")
            if name == "--model":
                model = value
            elif name == "--device":
                if value.split(":")[0] != "tpu":
                    raise SystemExit(f"python -m torch_tpu.serve: --device {value}: this command serves on tpu; "
                                     "for another device run `vllm serve` without torch_tpu's plugin "
                                     "(TORCH_TPU_VLLM=0)")
            else:
                out += [_RENAMED[name], value]
        elif arg != "--no-warmup":
            out.append(arg)
        i += 1
    if model is None:
        raise SystemExit("python -m torch_tpu.serve: --model PATH is required (a Hugging Face model directory)")
    return ["serve", model, *out]


def main(argv: list[str] | None = None) -> None:
    args = vllm_args(list(sys.argv[1:] if argv is None else argv))
    print("torch_tpu.serve: running `vllm " + " ".join(args) + "` (torch_tpu's own engine was retired for vLLM)",
          file=sys.stderr, flush=True)
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *args]
    vllm_main()


if __name__ == "__main__":
    main()
