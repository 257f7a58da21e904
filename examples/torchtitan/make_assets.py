"""Writes what TorchTitan's debug config reads from disk, generated locally
(nothing is downloaded): a byte-level BPE tokenizer (tokenizer.json and
tokenizer_config.json, 2048 ids to match the debugmodel flavor's vocab_size)
trained on examples/data/tales.txt, and a small text dataset in the layout of
TorchTitan's c4_test (JSON lines with a "text" field).

    python examples/torchtitan/make_assets.py [OUT_DIR]   # default: examples/torchtitan/assets
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TALES = os.path.join(HERE, "..", "data", "tales.txt")


def make_assets(out_dir: str) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    with open(TALES, encoding="utf-8") as f:
        text = f.read()
    stories = [s.strip() for s in text.split("\n\n") if s.strip()]

    tok_dir = os.path.join(out_dir, "tokenizer")
    data_dir = os.path.join(out_dir, "c4_test")
    os.makedirs(tok_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stories, trainer)
    tok.save(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|end_of_text|>",
                "add_bos_token": True,
                "add_eos_token": True,
            },
            f,
        )
    with open(os.path.join(data_dir, "data.json"), "w") as f:
        for s in stories:
            f.write(json.dumps({"text": s}) + "\n")
    return out_dir


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "assets")
    make_assets(out)
    print(f"wrote {out}/tokenizer and {out}/c4_test")
