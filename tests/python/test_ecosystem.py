"""Hugging Face models and PyTorch's device-generic utilities on tpu, as a
user would run them: tiny configs, random weights, CPU as the reference."""

import copy

import pytest
import torch

import torch_tpu  # noqa: F401

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def _train(model, device, batches, steps=3):
    model = copy.deepcopy(model).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for i in range(steps):
        ids = batches[i % len(batches)].to(device)
        out = model(ids, labels=ids)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.detach().cpu())
    return torch.stack(losses), model


def _moe(kind):
    torch.manual_seed(0)
    common = dict(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64, output_router_logits=True)
    if kind == "mixtral":
        return transformers.MixtralForCausalLM(transformers.MixtralConfig(
            intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, **common))
    return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        intermediate_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4,
        num_experts_per_tok=2, decoder_sparse_step=1, **common))


@pytest.mark.parametrize("kind", ["mixtral", "qwen2_moe"])
def test_mixture_of_experts_trains_with_cpu_losses(kind):
    """Transformers' MoE routers call histc on integer expert indices on
    every non-CPU device (and in the router's auxiliary loss)."""
    model = _moe(kind)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 32, (2, 9), generator=g) for _ in range(2)]
    cpu, cpu_model = _train(model, "cpu", batches)
    tpu, tpu_model = _train(model, "tpu", batches)
    torch.testing.assert_close(tpu, cpu, rtol=1e-4, atol=1e-5)
    for p, q in zip(tpu_model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-3, atol=1e-4)


def test_hf_gradient_checkpointing_with_dropout_equals_no_checkpointing():
    """gradient_checkpointing_enable() recomputes each layer in the backward:
    the recomputation must draw the same dropout mask (it saves and restores
    the tpu RNG state through torch.tpu, as with torch.cuda)."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=32, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.3, embd_pdrop=0.3, attn_pdrop=0.3)
    model = transformers.GPT2LMHeadModel(cfg).to("tpu").train()
    ids = torch.randint(0, 32, (2, 12)).to("tpu")

    def grads(checkpointing):
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_disable()
        model.zero_grad()
        torch.manual_seed(5)
        model(ids, labels=ids).loss.backward()
        return [p.grad.detach().cpu().clone() for p in model.parameters()]

    plain, checkpointed = grads(False), grads(True)
    for a, b in zip(plain, checkpointed):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n=8, length=12):
        g = torch.Generator().manual_seed(3)
        self.ids = torch.randint(0, 32, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _trainer_losses(tmp_path, use_cpu, **kw):
    pytest.importorskip("accelerate")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=32, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / ("cpu" if use_cpu else "tpu")), max_steps=4,
                                          per_device_train_batch_size=2, logging_steps=1, report_to=[],
                                          save_strategy="no", use_cpu=use_cpu, dataloader_pin_memory=False, **kw)
    devices = []

    class Watch(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **_):
            devices.append(next(model.parameters()).device.type)

    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens(), callbacks=[Watch()])
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return torch.tensor(losses), devices


@pytest.mark.parametrize("kw", [{}, {"gradient_accumulation_steps": 2}], ids=["default", "grad_accum"])
def test_trainer_with_default_settings_trains_on_tpu_with_cpu_losses(tmp_path, kw):
    """Transformers picks tpu through torch.accelerator; accelerate, which
    knows no out-of-tree device, is taught to pick it too (no environment
    variable): model and batches meet on tpu."""
    tpu, tpu_devices = _trainer_losses(tmp_path, False, **kw)
    cpu, cpu_devices = _trainer_losses(tmp_path, True, **kw)
    assert set(tpu_devices) == {"tpu"} and set(cpu_devices) == {"cpu"}
    torch.testing.assert_close(tpu, cpu, rtol=1e-4, atol=1e-4)


def test_trainer_in_bfloat16_trains_on_tpu(tmp_path):
    losses, devices = _trainer_losses(tmp_path, False, bf16=True)
    assert set(devices) == {"tpu"} and torch.isfinite(losses).all() and len(losses) == 4


@pytest.mark.strict_eager_only  # (which device accelerate picks in fresh processes: no op of a mode runs)
def test_accelerate_picks_tpu_whichever_is_imported_first():
    pytest.importorskip("accelerate")
    from conftest import run_python

    for order in ("import torch_tpu, accelerate", "import accelerate, accelerate.state, torch_tpu"):
        r = run_python(f"import torch; {order}\nfrom accelerate import Accelerator\n"
                       "print(Accelerator().device.type)", timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[-1] == "tpu", r.stdout


_DEVICE_MAP_SCRIPT = """
import tempfile, torch, torch_tpu, transformers
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2)
ref = transformers.LlamaForCausalLM(cfg).eval()
path = tempfile.mkdtemp()
ref.save_pretrained(path)
ids = torch.randint(0, 64, (2, 8))
want, want_gen = ref(ids).logits, ref.generate(ids, max_new_tokens=4, do_sample=False)
for device_map in ("auto", "balanced", "sequential"):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, device_map=device_map).eval()
    devices = sorted({str(p.device) for p in model.parameters()})
    torch.testing.assert_close(model(ids.to(model.device)).logits.cpu(), want, rtol=1e-4, atol=1e-4)
    assert torch.equal(model.generate(ids.to(model.device), max_new_tokens=4, do_sample=False).cpu(), want_gen)
    print(device_map, ",".join(devices))
"""


@pytest.mark.parametrize("devices", [1, 2])
def test_device_map_auto_places_the_model_on_tpu_devices(devices):
    """from_pretrained(device_map="auto" | "balanced" | "sequential"):
    accelerate sizes only the accelerators it knows and put every layer on
    the CPU; with an available tpu the tpu devices are sized (by index, as
    CUDA's), so the layers go to tpu:0 (and tpu:1 with two devices, hooks
    moving activations between them), with CPU's logits and generation."""
    pytest.importorskip("accelerate")
    from conftest import run_python

    r = run_python(_DEVICE_MAP_SCRIPT, env={"TORCH_TPU_CPU_DEVICES": str(devices)}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    placed = dict(line.split() for line in r.stdout.strip().splitlines()[-3:])
    both = "tpu:0,tpu:1" if devices == 2 else "tpu:0"
    assert placed == {"auto": both, "balanced": both, "sequential": "tpu:0"}, placed


def _tiny_qwen2():
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))


def test_peft_lora_trains_with_cpu_losses():
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    torch.manual_seed(0)
    model = peft.get_peft_model(_tiny_qwen2(), cfg)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 64, (2, 12), generator=g) for _ in range(2)]
    cpu, cpu_model = _train(model, "cpu", batches, steps=4)
    tpu, tpu_model = _train(model, "tpu", batches, steps=4)
    torch.testing.assert_close(tpu, cpu, rtol=1e-4, atol=1e-5)
    assert tpu[-1] < tpu[0]
    # Only the adapters moved; merging them gives CPU's merged weights.
    cpu_merged = cpu_model.merge_and_unload().state_dict()
    tpu_merged = tpu_model.merge_and_unload().state_dict()
    for k, v in cpu_merged.items():
        torch.testing.assert_close(tpu_merged[k].cpu(), v, rtol=1e-4, atol=1e-5, msg=k)


def _word_tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    words = ["<unk>", "<pad>", "<eos>"] + [f"w{i}" for i in range(61)]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                                eos_token="<eos>")


def test_pipeline_on_tpu_generates_cpu_tokens():
    tok = _word_tokenizer()
    model = _tiny_qwen2().eval()
    prompt = "w1 w2 w3 w4"
    kw = dict(max_new_tokens=6, do_sample=False, return_full_text=False)
    cpu = transformers.pipeline("text-generation", model=copy.deepcopy(model), tokenizer=tok, device="cpu")(prompt, **kw)
    pipe = transformers.pipeline("text-generation", model=model, tokenizer=tok, device="tpu")
    assert pipe.device.type == "tpu" and next(pipe.model.parameters()).device.type == "tpu"
    assert pipe(prompt, **kw) == cpu


def _family(name):
    T = transformers
    no_drop = dict(hidden_dropout_prob=0, attention_probs_dropout_prob=0)
    if name == "bert":
        return T.BertForMaskedLM(T.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                              intermediate_size=64, max_position_embeddings=32, **no_drop)), "tokens"
    if name == "t5":
        return T.T5ForConditionalGeneration(T.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                       num_heads=4, dropout_rate=0, decoder_start_token_id=0)), "seq2seq"
    if name == "bart":
        return T.BartForConditionalGeneration(T.BartConfig(
            vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32, dropout=0,
            attention_dropout=0, activation_dropout=0)), "seq2seq"
    if name == "vit":
        return T.ViTForImageClassification(T.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32,
                                                       num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                                       num_labels=5, **no_drop)), "image"
    if name == "resnet":
        return T.ResNetForImageClassification(T.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16],
                                                             depths=[1, 1], num_labels=5)), "image"
    if name == "convnext":
        return T.ConvNextForImageClassification(T.ConvNextConfig(num_channels=3, hidden_sizes=[8, 16], depths=[1, 1],
                                                                 num_labels=5, image_size=16, num_stages=2)), "image"
    if name == "whisper":
        return T.WhisperForConditionalGeneration(T.WhisperConfig(
            vocab_size=64, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
            max_target_positions=16, dropout=0, decoder_start_token_id=1, pad_token_id=0)), "audio"
    return T.GemmaForCausalLM(T.GemmaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            num_key_value_heads=2, head_dim=8, intermediate_size=64,
                                            max_position_embeddings=32)), "tokens"


def _family_batch(kind, g):
    if kind == "tokens":
        ids = torch.randint(0, 64, (2, 12), generator=g)
        return dict(input_ids=ids, labels=ids, attention_mask=torch.ones(2, 12, dtype=torch.long))
    if kind == "seq2seq":
        return dict(input_ids=torch.randint(1, 64, (2, 10), generator=g), labels=torch.randint(1, 64, (2, 7), generator=g))
    if kind == "image":
        return dict(pixel_values=torch.randn(2, 3, 16, 16, generator=g), labels=torch.randint(0, 5, (2,), generator=g))
    return dict(input_features=torch.randn(2, 8, 32, generator=g), labels=torch.randint(2, 64, (2, 6), generator=g))


@pytest.mark.parametrize("name", ["bert", "t5", "bart", "vit", "resnet", "convnext", "whisper", "gemma"])
def test_model_families_train_with_cpu_losses(name):
    """Encoders, encoder-decoders, vision (attention and convolutional) and
    speech models: three AdamW steps give CPU's losses and weights."""
    torch.manual_seed(0)
    model, kind = _family(name)
    g = torch.Generator().manual_seed(1)
    batches = [_family_batch(kind, g) for _ in range(3)]

    def run(device):
        m = copy.deepcopy(model).to(device)
        m.train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses = []
        for b in batches:
            out = m(**{k: v.to(device) for k, v in b.items()})
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            losses.append(out.loss.detach().cpu())
        return torch.stack(losses), m

    cpu, cpu_model = run("cpu")
    tpu, tpu_model = run("tpu")
    torch.testing.assert_close(tpu, cpu, rtol=1e-5, atol=1e-5)
    for p, q in zip(tpu_model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-3, atol=1e-4)
