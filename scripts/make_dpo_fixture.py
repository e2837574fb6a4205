"""Writes tests/fixtures/dpo/: TRL's own preference-training numbers, the outside truth for tune's DPO recipe (run with
.venv/bin/python; needs trl==1.16.0 and its datasets dependency; CPU only, float32, a few seconds).

    .venv/bin/python scripts/make_dpo_fixture.py [--tune build/apps/tune/tune]

Everything is regenerated from scratch and is deterministic (seeded; the BPE trainer has no ties it breaks at random).

model/ and ref_model/: two tiny random LlamaForCausalLM (hidden 32, 2 layers, 4 heads, 2 key-value heads, untied
lm_head, float32 safetensors, different seeds) written by save_pretrained, each with the same tiny tokenizer: a
byte-level BPE (Llama 3's Split regex + ByteLevel pre-tokenizer, ByteLevel decoder, a TemplateProcessing
post-processor that prepends <|begin_of_text|>) trained by the `tokenizers` library on the fixture's own texts, and a
tokenizer_config.json with a small Jinja chat template (<|role|>\\ncontent<|end|>\\n per message,
add_generation_prompt -> <|assistant|>\\n).

adapter_init.safetensors + adapter_config.json: a PEFT LoRA adapter for model/ (r 4, alpha 8, every projection of
every layer) with random, non-zero lora_A and lora_B (seeded normal draws), saved by PEFT's save_pretrained.

rows_standard.jsonl, rows_conversational.jsonl, rows_implicit.jsonl: the three dataset forms DPOTrainer accepts
(prompt/chosen/rejected strings; conversational prompt + one assistant message each; implicit prompt inside full
conversations).

tokenized.json: the prompt_ids / chosen_ids / rejected_ids that DPOTrainer._prepare_dataset produces for each row of
each file (read from a constructed DPOTrainer's train_dataset), and, for rows_standard.jsonl with a small max_length,
which rows TRL keeps and what its collator (DataCollatorForPreference, keep_start) gives for them.

cases.json + cases.safetensors: one first step of TRL on all three rows of rows_standard.jsonl as one batch (TRL's
collator; chosen rows 0,1,2 then rejected rows 0,1,2): DPOTrainer._compute_loss for sigmoid / hinge / ipo / robust with
LoRA (model/ + adapter_init, reference = adapters disabled) and with full fine-tuning (model/, reference =
ref_model/), sigmoid with beta 0.5 (LoRA), CPO's SimPO loss (trl.experimental.cpo) and ORPO (trl.experimental.orpo),
both full fine-tuning: the loss, per-sequence log-probs captured from TRL's own forward calls, TRL's logged metrics,
and the gradient of every trainable parameter after loss.backward() (cases.safetensors, "<case>/<parameter>").

README.md beside the files says what each holds and which TRL behaviours needed care.

With --tune (default build/apps/tune/tune when it exists) the script also checks that tune's tokenizer gives the ids
transformers gives, for every text and conversation the fixture uses (`tune tokenize --json`); it writes nothing
from tune.
"""
import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")

import torch  # noqa: E402
import datasets  # noqa: E402
import transformers  # noqa: E402
import peft  # noqa: E402
import tokenizers  # noqa: E402
import trl  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402
from peft import LoraConfig, get_peft_model, set_peft_model_state_dict  # noqa: E402
from trl import DPOConfig, DPOTrainer  # noqa: E402
from trl.experimental.cpo import CPOConfig, CPOTrainer  # noqa: E402
from trl.experimental.orpo import ORPOConfig, ORPOTrainer  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "dpo")

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
VOCAB_SIZE = 300
# Llama 3's pre-tokenizer split (tokenizer.json of meta-llama/Meta-Llama-3-8B).
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}"
                 "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")

MODEL_SEED, REF_MODEL_SEED, ADAPTER_SEED = 1234, 5678, 91011
INITIALIZER_RANGE = 0.2  # larger than Llama's 0.02, so that log-probs and their policy/reference gaps are O(1)
LORA_INIT_STD = 0.2
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TRUNCATION_MAX_LENGTH = 24  # rows_standard row 1's prompt alone fills it (dropped); rows 0 and 2 get truncated

# Row 1's chosen already ends with the EOS text (TRL adds none); rows 0 and 2 get EOS appended. Row 2's prompt ends
# inside a word ("... on t" + "he mat."), so its last prompt token merges with the completion's first characters
# ("Ġt" alone, "Ġthe" together): the completion starts where the tokenisations diverge.
ROWS_STANDARD = [
    {"prompt": "What color is the sky?", "chosen": " The sky is blue.",
     "rejected": " The sky is green, and the moon is made of cheese."},
    {"prompt": "Write one short sentence about the sea for a young reader who likes boats and fish.",
     "chosen": " The sea is big and blue, and boats sail on it." + EOS, "rejected": " No."},
    {"prompt": "Finish the line: the cat sat on t", "chosen": "he mat.",
     "rejected": "he hat, and then the cat fell asleep in the warm sun."},
]
ROWS_CONVERSATIONAL = [
    {"prompt": [{"role": "system", "content": "You are a kind helper."},
                {"role": "user", "content": "What is two plus two?"}],
     "chosen": [{"role": "assistant", "content": "Two plus two is four."}],
     "rejected": [{"role": "assistant", "content": "It is five."}]},
    {"prompt": [{"role": "user", "content": "Name a fruit."},
                {"role": "assistant", "content": "An apple."},
                {"role": "user", "content": "Name another one."}],
     "chosen": [{"role": "assistant", "content": "A banana."}],
     "rejected": [{"role": "assistant", "content": "An apple again, and then one more apple."}]},
    {"prompt": [{"role": "user", "content": "Say hello to the sea."}],
     "chosen": [{"role": "assistant", "content": "Hello, sea!"}],
     "rejected": [{"role": "assistant", "content": "No."}]},
]
ROWS_IMPLICIT = [
    {"chosen": [{"role": "user", "content": "What color is the sky?"},
                {"role": "assistant", "content": "The sky is blue."}],
     "rejected": [{"role": "user", "content": "What color is the sky?"},
                  {"role": "assistant", "content": "The sky is green."}]},
    {"chosen": [{"role": "system", "content": "Answer in one word."},
                {"role": "user", "content": "Is the sea wet?"},
                {"role": "assistant", "content": "Yes."},
                {"role": "user", "content": "Is the sun cold?"},
                {"role": "assistant", "content": "No."}],
     "rejected": [{"role": "system", "content": "Answer in one word."},
                  {"role": "user", "content": "Is the sea wet?"},
                  {"role": "assistant", "content": "Yes."},
                  {"role": "user", "content": "Is the sun cold?"},
                  {"role": "assistant", "content": "Yes, very cold."}]},
]
FILES = {"rows_standard.jsonl": ROWS_STANDARD, "rows_conversational.jsonl": ROWS_CONVERSATIONAL,
         "rows_implicit.jsonl": ROWS_IMPLICIT}

BETA = 0.1
SIMPO_BETA, SIMPO_GAMMA = 2.0, 0.5
ORPO_BETA = 0.1
# (name, loss_type, beta, label_smoothing, policy)
DPO_CASES = []
for _loss, _smoothing in (("sigmoid", 0.0), ("hinge", 0.0), ("ipo", 0.0), ("robust", 0.1)):
    DPO_CASES.append((f"{_loss}_lora", _loss, BETA, _smoothing, "lora"))
    DPO_CASES.append((f"{_loss}_separate", _loss, BETA, _smoothing, "full"))
DPO_CASES.append(("sigmoid_beta0.5_lora", "sigmoid", 0.5, 0.0, "lora"))
# Full fine-tuning gradients are ~150 KB a case (the embeddings and output layer of a 300-token vocabulary): kept for
# one reference-model case (and simpo, orpo), so the fixture stays under 1 MB; the other separate-reference cases
# keep their losses, log-probs and metrics, and their gradients differ from sigmoid's by the loss's derivative only.
GRADIENT_FREE_CASES = {"hinge_separate", "ipo_separate", "robust_separate"}
FUSED_VS_PLAIN = []  # per DPO case: max |TRL's policy log-prob sum - plain log_softmax sum|


# ----------------------------------------------------------------------------------------------------------- data
def message_texts(messages):
    return [m["content"] for m in messages]


def corpus():
    """Every text of the fixture (the BPE is trained on them, so the merges fit them), in a fixed order."""
    texts = []
    for row in ROWS_STANDARD:
        texts += [row["prompt"], row["prompt"] + row["chosen"].replace(EOS, ""),
                  row["prompt"] + row["rejected"]]
    for row in ROWS_CONVERSATIONAL:
        texts += message_texts(row["prompt"]) + message_texts(row["chosen"]) + message_texts(row["rejected"])
    for row in ROWS_IMPLICIT:
        texts += message_texts(row["chosen"]) + message_texts(row["rejected"])
    return texts


def write_rows():
    for name, rows in FILES.items():
        with open(os.path.join(OUT, name), "w") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def load_rows(name):
    """The rows as a datasets.Dataset, read back from the written file (what a user would hand TRL)."""
    with open(os.path.join(OUT, name)) as f:
        rows = [json.loads(line) for line in f]
    return datasets.Dataset.from_list(rows)


# ------------------------------------------------------------------------------------------------------ tokenizer
def build_tokenizer():
    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus(), trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B:1",
                                      special_tokens=[(BOS, bos_id)]),
    ])
    assert tokenizer.get_vocab_size() == VOCAB_SIZE, tokenizer.get_vocab_size()
    return tokenizer


def write_tokenizer(directory, tokenizer):
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
        "model_max_length": 256,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


# --------------------------------------------------------------------------------------------------------- models
def model_config(tokenizer):
    return LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False,
        rms_norm_eps=1e-5, initializer_range=INITIALIZER_RANGE, attention_dropout=0.0,
        bos_token_id=tokenizer.token_to_id(BOS), eos_token_id=tokenizer.token_to_id(EOS),
        pad_token_id=tokenizer.token_to_id(PAD),
    )


def write_model(directory, tokenizer, seed):
    os.makedirs(directory)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(model_config(tokenizer)).to(torch.float32)
    # The RMSNorm weights start at 1; give them a spread too, so their gradients are not all alike.
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
    model.save_pretrained(directory, safe_serialization=True)
    write_tokenizer(directory, tokenizer)
    # save_pretrained writes generation_config.json too; it is harmless and kept.


def lora_config():
    return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=LORA_TARGETS, bias="none",
                      task_type="CAUSAL_LM", init_lora_weights=False)


def write_adapter():
    base = AutoModelForCausalLM.from_pretrained(os.path.join(OUT, "model"), dtype=torch.float32)
    model = get_peft_model(base, lora_config())
    generator = torch.Generator().manual_seed(ADAPTER_SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(LORA_INIT_STD * torch.randn(param.shape, generator=generator))
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        shutil.copyfile(os.path.join(tmp, "adapter_model.safetensors"), os.path.join(OUT, "adapter_init.safetensors"))
        with open(os.path.join(tmp, "adapter_config.json")) as f:
            config = json.load(f)
    # base_model_name_or_path is the absolute path of model/ on this machine; make it relative and stable.
    config["base_model_name_or_path"] = "model"
    config["target_modules"] = sorted(config["target_modules"])  # PEFT writes a set's order (hash-seed dependent)
    with open(os.path.join(OUT, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


# ----------------------------------------------------------------------------------------------------------- TRL
def hf_tokenizer():
    return AutoTokenizer.from_pretrained(os.path.join(OUT, "model"))


def load_model(name):
    return AutoModelForCausalLM.from_pretrained(os.path.join(OUT, name), dtype=torch.float32)


def common_args(workdir):
    """TrainingArguments shared by every trainer: float32 on the CPU, no checkpointing, no logging, no shuffling
    that matters (the batch is built here from rows 0, 1, 2 in order)."""
    return dict(output_dir=workdir, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
                report_to="none", per_device_train_batch_size=3, seed=42, disable_dropout=True,
                dataloader_num_workers=0, save_strategy="no", logging_strategy="no")


def make_dpo_trainer(workdir, dataset, policy="full", ref_model=None, **config):
    args = DPOConfig(**common_args(workdir), **config)
    if policy == "lora":
        trainer = DPOTrainer(model=load_model("model"), ref_model=None, args=args, train_dataset=dataset,
                             processing_class=hf_tokenizer(), peft_config=lora_config())
        # TRL's PEFT path: get_peft_model(model, peft_config) made a fresh "default" adapter; load adapter_init into
        # it with PEFT's own loader. (Passing a PeftModel instead makes TRL copy the adapter into a frozen "ref"
        # adapter, i.e. the reference would be the initial adapter, not the adapters-off base model.)
        result = set_peft_model_state_dict(trainer.model, load_file(os.path.join(OUT, "adapter_init.safetensors")))
        assert not result.unexpected_keys, result.unexpected_keys
        assert not [k for k in result.missing_keys if "lora_" in k], result.missing_keys
        assert "ref" not in trainer.model.peft_config
    else:
        trainer = DPOTrainer(model=load_model("model"), ref_model=ref_model, args=args, train_dataset=dataset,
                             processing_class=hf_tokenizer())
    return trainer


def processed_rows(trainer):
    out = []
    for example in trainer.train_dataset:
        out.append({key: example[key] for key in ("prompt", "chosen", "rejected", "prompt_ids", "chosen_ids",
                                                    "rejected_ids")})
    return out


def tensor_lists(batch):
    return {key: value.tolist() for key, value in batch.items()}


def tokenized_fixture(workdir):
    result = {"trl_version": trl.__version__, "files": {}}
    for name in FILES:
        trainer = make_dpo_trainer(workdir, load_rows(name), max_length=None)
        result["files"][name] = processed_rows(trainer)
        del trainer

    # Truncation: rows_standard.jsonl with a small max_length (keep_start, TRL's only mode for text).
    trainer = make_dpo_trainer(workdir, load_rows("rows_standard.jsonl"), max_length=TRUNCATION_MAX_LENGTH)
    kept = processed_rows(trainer)
    prompts = [row["prompt"] for row in ROWS_STANDARD]
    kept_rows = [prompts.index(row["prompt"]) for row in kept]
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(trainer.train_dataset))])
    full = result["files"]["rows_standard.jsonl"]
    dropped = [i for i in range(len(ROWS_STANDARD)) if i not in kept_rows]
    truncated = [i for i in kept_rows for key in ("chosen_ids", "rejected_ids")
                 if len(full[i]["prompt_ids"]) + len(full[i][key]) > TRUNCATION_MAX_LENGTH]
    assert dropped and all(len(full[i]["prompt_ids"]) >= TRUNCATION_MAX_LENGTH for i in dropped), dropped
    assert truncated, "max_length truncates no kept row"
    result["truncation"] = {
        "file": "rows_standard.jsonl", "max_length": TRUNCATION_MAX_LENGTH, "truncation_mode": "keep_start",
        "kept_rows": kept_rows, "dropped_rows": dropped, "rows": kept,
        "collated": {key: batch[key].tolist() for key in ("input_ids", "attention_mask", "completion_mask")},
    }
    return result


class ForwardRecorder:
    """Wraps a model's (TRL-patched) forward and records the per-token log-probs of every call, tagged with whether
    autograd was on (the policy call) or off (the reference call)."""

    def __init__(self, module, tag):
        self.calls = []
        original = module.forward

        def recording_forward(*args, **kwargs):
            output = original(*args, **kwargs)
            if kwargs.get("fused_lm_head"):  # TRL's calls; not the script's own plain forward
                self.calls.append((tag if torch.is_grad_enabled() else tag + "_nograd",
                                   output.log_probs.detach().clone()))
            return output

        module.forward = recording_forward


def per_sequence(per_token_logps, completion_mask):
    """TRL's own reduction (_compute_loss with ld_alpha None): log_probs[:, -seq_len:].sum(1)."""
    seq_len = completion_mask.size(1) - 1
    return per_token_logps[:, -seq_len:].sum(dim=1)


def floats(tensor):
    return [float(x) for x in tensor.reshape(-1).tolist()]


def gradients(model, case, strip_adapter_name):
    grads = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        assert param.grad is not None, name
        if strip_adapter_name:
            assert ".default." in name, name
            name = name.replace(".default.", ".")
        grads[f"{case}/{name}"] = param.grad.detach().to(torch.float32).contiguous().clone()
    return grads


def dpo_case(workdir, name, loss_type, beta, label_smoothing, policy):
    ref_model = load_model("ref_model") if policy == "full" else None
    trainer = make_dpo_trainer(workdir, load_rows("rows_standard.jsonl"), policy=policy, ref_model=ref_model,
                               max_length=None, loss_type=[loss_type], beta=beta, label_smoothing=label_smoothing)
    model = trainer.model
    model.train()
    base = model.get_base_model() if policy == "lora" else model
    recorders = [ForwardRecorder(base, "policy")]
    if trainer.ref_model is not None:
        recorders.append(ForwardRecorder(trainer.ref_model, "reference"))
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(ROWS_STANDARD))])
    loss = trainer.compute_loss(model, batch)
    loss.backward()

    # How far TRL's fused, chunked log-probs are from a plain log_softmax over full float32 logits (same model).
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
        targets = batch["input_ids"][:, 1:]
        plain = logits[:, :-1].log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        plain = (plain * batch["completion_mask"][:, 1:]).sum(dim=1)

    calls = [call for recorder in recorders for call in recorder.calls]
    tags = sorted(tag for tag, _ in calls)
    expected_ref_tag = "policy_nograd" if policy == "lora" else "reference_nograd"
    assert tags == sorted(["policy", expected_ref_tag]), tags
    logps = {("policy" if tag == "policy" else "reference"): per_sequence(value, batch["completion_mask"])
             for tag, value in calls}
    chosen, rejected = logps["policy"].chunk(2)
    ref_chosen, ref_rejected = logps["reference"].chunk(2)
    FUSED_VS_PLAIN.append((logps["policy"] - plain).abs().max().item())
    metrics = {key: values[-1] for key, values in trainer._metrics["train"].items()}
    # The captured sums are the ones TRL used: its logged means agree.
    assert abs(metrics["logps/chosen"] - chosen.mean().item()) <= 1e-5 * max(1.0, abs(metrics["logps/chosen"]))
    rewards_chosen = (beta * (chosen - ref_chosen)).mean().item()
    assert abs(metrics["rewards/chosen"] - rewards_chosen) <= 1e-5 * max(1.0, abs(rewards_chosen)), name

    entry = {
        "trainer": "DPOTrainer", "loss_type": loss_type, "beta": beta, "label_smoothing": label_smoothing,
        "policy": policy, "reference": "adapters_off" if policy == "lora" else "separate",
        "loss": loss.item(),
        "policy_chosen_logps": floats(chosen), "policy_rejected_logps": floats(rejected),
        "reference_chosen_logps": floats(ref_chosen), "reference_rejected_logps": floats(ref_rejected),
        "logps_source": "per-token log_probs of TRL's own policy and reference forward calls in _compute_loss "
                        "(recorded by wrapping the fused forward), summed as TRL sums them",
        "completion_token_counts": [int(x) for x in batch["completion_mask"].sum(dim=1).tolist()],
        "metrics": metrics,
        "num_trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    return entry, gradients(model, name, strip_adapter_name=(policy == "lora")), batch


def assert_same_batch(concatenated, dpo_batch, label):
    ids = concatenated["concatenated_input_ids"]
    labels = concatenated["concatenated_labels"]
    assert torch.equal(ids, dpo_batch["input_ids"]), f"{label}: input_ids differ from DPOTrainer's batch"
    assert torch.equal(concatenated["concatenated_attention_mask"], dpo_batch["attention_mask"]), label
    assert torch.equal((labels != -100).long(), dpo_batch["completion_mask"]), label


def reference_free_case(workdir, name, dpo_batch):
    if name == "simpo":
        args = CPOConfig(**common_args(workdir), loss_type="simpo", cpo_alpha=0.0, simpo_gamma=SIMPO_GAMMA,
                         beta=SIMPO_BETA, max_length=1024, remove_unused_columns=False)
        trainer_class = CPOTrainer
    else:
        args = ORPOConfig(**common_args(workdir), beta=ORPO_BETA, max_length=1024, remove_unused_columns=False)
        trainer_class = ORPOTrainer
    trainer = trainer_class(model=load_model("model"), args=args, train_dataset=load_rows("rows_standard.jsonl"),
                            processing_class=hf_tokenizer())
    model = trainer.model
    model.train()
    captured = {}
    original_forward = trainer.concatenated_forward

    def recording_forward(model_, batch_):
        output = original_forward(model_, batch_)
        captured["chosen"], captured["rejected"] = output[0].detach().clone(), output[1].detach().clone()
        captured["nll_loss"] = output[4].detach().clone()
        captured["concatenated"] = trainer.concatenated_inputs(batch_, padding_value=trainer.pad_token_id
                                                               if name == "simpo" else trainer.padding_value)
        return output

    trainer.concatenated_forward = recording_forward
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(ROWS_STANDARD))])
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    assert_same_batch(captured["concatenated"], dpo_batch, name)
    metrics = {key: values[-1] for key, values in trainer._stored_metrics["train"].items()}
    labels = captured["concatenated"]["concatenated_labels"]
    entry = {
        "trainer": type(trainer).__name__, "policy": "full", "reference": "none",
        "loss": loss.item(),
        "policy_chosen_logps": floats(captured["chosen"]), "policy_rejected_logps": floats(captured["rejected"]),
        "logps_source": "the chosen/rejected log-probs returned by the trainer's own concatenated_forward "
                        "(get_batch_logps with average_log_prob=True: mean over completion tokens)",
        "logps_are_token_means": True,
        "nll_loss": captured["nll_loss"].item(),
        "completion_token_counts": [int(x) for x in (labels[:, 1:] != -100).sum(dim=1).tolist()],
        "metrics": metrics,
        "num_trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    if name == "simpo":
        entry.update(loss_type="simpo", beta=SIMPO_BETA, simpo_gamma=SIMPO_GAMMA, cpo_alpha=0.0,
                     label_smoothing=0.0)
    else:
        entry.update(loss_type="orpo", beta=ORPO_BETA)
        # ORPO's NLL term: mean cross-entropy over every non-padding token of the chosen rows (prompt included),
        # i.e. over this many predicted tokens.
        chosen_mask = captured["concatenated"]["concatenated_attention_mask"][: len(ROWS_STANDARD)]
        entry["nll_token_count"] = int(chosen_mask[:, 1:].sum().item())
    return entry, gradients(model, name, strip_adapter_name=False)


def cases_fixture(workdir):
    cases, tensors, batch = {}, {}, None
    for name, loss_type, beta, smoothing, policy in DPO_CASES:
        entry, grads, case_batch = dpo_case(workdir, name, loss_type, beta, smoothing, policy)
        if batch is None:
            batch = case_batch
        assert all(torch.equal(batch[k], case_batch[k]) for k in batch), name
        cases[name] = entry
        entry["gradients_stored"] = name not in GRADIENT_FREE_CASES
        if entry["gradients_stored"]:
            tensors.update(grads)
    for name in ("simpo", "orpo"):
        entry, grads = reference_free_case(workdir, name, batch)
        cases[name] = entry
        tensors.update(grads)
    fixture = {
        "trl_version": trl.__version__, "transformers_version": transformers.__version__,
        "peft_version": peft.__version__, "torch_version": torch.__version__,
        "rows": "rows_standard.jsonl", "batch_rows": list(range(len(ROWS_STANDARD))),
        "dtype": "float32", "device": "cpu",
        "attn_implementation": load_model("model").config._attn_implementation,
        "batch": {key: batch[key].tolist() for key in ("input_ids", "attention_mask", "completion_mask")},
        "fused_head_vs_log_softmax_max_abs_diff": max(FUSED_VS_PLAIN),
        "cases": cases,
    }
    return fixture, tensors


def write_json(path, value):
    """Indented JSON with every flat list (numbers, no strings) on one line."""
    text = json.dumps(value, indent=1, ensure_ascii=False)
    text = re.sub(r"\[([^\[\]{}\"]*)\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",") if x.strip()) + "]", text)
    assert json.loads(text) == value
    with open(path, "w") as f:
        f.write(text + "\n")


# ------------------------------------------------------------------------------------------------ tune check
def tune_ids_text(tune, text):
    out = subprocess.run([tune, "tokenize", os.path.join(OUT, "model"), "--text", text, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ids"]


def tune_ids_messages(tune, messages, add_generation_prompt):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(messages, f)
        path = f.name
    try:
        command = [tune, "tokenize", os.path.join(OUT, "model"), "--messages", path, "--json"]
        if add_generation_prompt:
            command.append("--add-generation-prompt")
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        return json.loads(out)["ids"]
    finally:
        os.unlink(path)


def check_tune(tune):
    tokenizer = hf_tokenizer()
    texts, conversations = [], []
    for row in ROWS_STANDARD:
        texts += [row["prompt"], row["prompt"] + row["chosen"], row["prompt"] + row["rejected"],
                  row["prompt"] + row["rejected"] + EOS]
    for row in ROWS_CONVERSATIONAL:
        conversations += [(row["prompt"], True), (row["prompt"] + row["chosen"], False),
                          (row["prompt"] + row["rejected"], False)]
    for row in ROWS_IMPLICIT:
        conversations += [(row["chosen"], False), (row["rejected"], False), (row["chosen"][:-1], True)]
    mismatches = []
    for text in texts:
        expected = tokenizer(text)["input_ids"]
        got = tune_ids_text(tune, text)
        if got != expected:
            mismatches.append({"text": text, "transformers": expected, "tune": got})
    for messages, generation_prompt in conversations:
        expected = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt,
                                                 return_dict=True)["input_ids"]
        got = tune_ids_messages(tune, messages, generation_prompt)
        if got != expected:
            mismatches.append({"messages": messages, "add_generation_prompt": generation_prompt,
                               "transformers": expected, "tune": got})
    return len(texts), len(conversations), mismatches


# ------------------------------------------------------------------------------------------------------- main
def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_tune = os.path.join(ROOT, "build", "apps", "tune", "tune")
    parser.add_argument("--tune", default=default_tune if os.path.exists(default_tune) else None,
                        help="tune binary for the tokenizer cross-check (skipped when absent)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    datasets.disable_caching()
    logging.getLogger("trl").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)

    tokenizer = build_tokenizer()
    write_model(os.path.join(OUT, "model"), tokenizer, MODEL_SEED)
    write_model(os.path.join(OUT, "ref_model"), tokenizer, REF_MODEL_SEED)
    write_adapter()
    write_rows()

    with tempfile.TemporaryDirectory() as workdir:
        tokenized = tokenized_fixture(workdir)
        cases, tensors = cases_fixture(workdir)
    write_json(os.path.join(OUT, "tokenized.json"), tokenized)
    write_json(os.path.join(OUT, "cases.json"), cases)
    save_file(tensors, os.path.join(OUT, "cases.safetensors"), metadata={"trl": trl.__version__})
    write_readme(tokenized, cases)

    print(f"wrote {os.path.relpath(OUT, ROOT)}: vocab {tokenizer.get_vocab_size()}, "
          f"{len(cases['cases'])} cases, {len(tensors)} gradient tensors")
    for name, entry in cases["cases"].items():
        print(f"  {name:22s} loss {entry['loss']:.6f}  metrics: " + ", ".join(
            f"{k}={entry['metrics'][k]:.4f}" for k in ("rewards/chosen", "rewards/rejected", "rewards/accuracies")
            if k in entry["metrics"]))
    kept = tokenized["truncation"]["kept_rows"]
    print(f"  truncation max_length {TRUNCATION_MAX_LENGTH}: kept rows {kept}, "
          f"dropped {tokenized['truncation']['dropped_rows']}")
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(OUT) for f in fs)
    print(f"  total size {total} bytes")
    if args.tune:
        n_texts, n_conversations, mismatches = check_tune(args.tune)
        if mismatches:
            print(json.dumps(mismatches, indent=1, ensure_ascii=False))
            sys.exit(f"tune's tokenizer disagrees with transformers on {len(mismatches)} inputs")
        print(f"  tune tokenize agrees with transformers on {n_texts} texts and {n_conversations} conversations")
    else:
        print("  tune binary not found: tokenizer cross-check skipped")


def write_readme(tokenized, cases):
    truncation = tokenized["truncation"]
    standard = tokenized["files"]["rows_standard.jsonl"]
    lengths = ", ".join(f"row {i}: {len(r['prompt_ids'])}+{len(r['chosen_ids'])}/{len(r['rejected_ids'])}"
                        for i, r in enumerate(standard))
    batch_length = len(cases["batch"]["input_ids"][0])
    text = f"""# tests/fixtures/dpo: TRL's preference-training numbers

Written by `scripts/make_dpo_fixture.py` (do not edit by hand). Regenerate from the repository root with

    .venv/bin/python scripts/make_dpo_fixture.py

It deletes and rewrites this directory; two runs give identical bytes. Made with trl {trl.__version__}, transformers
{transformers.__version__}, peft {peft.__version__}, tokenizers {tokenizers.__version__}, datasets {datasets.__version__}, torch {torch.__version__}, on the CPU in float32 (one
thread, deterministic algorithms). When `build/apps/tune/tune` exists (or `--tune PATH`), the script also checks
that `tune tokenize --json` gives the ids transformers gives for every text and conversation below (with BOS;
`apply_chat_template(..., tokenize=True)` with and without the generation prompt) and fails if not; nothing from
tune is written.

## Files

- `model/`: a random `LlamaForCausalLM` (vocab {VOCAB_SIZE}, hidden 32, intermediate 64, 2 layers, 4 heads,
  2 key-value heads, head_dim 8, max_position_embeddings 256, untied lm_head, rms_norm_eps 1e-5, seed {MODEL_SEED},
  initializer_range {INITIALIZER_RANGE}, RMSNorm weights 1 + 0.1·N(0,1)) saved by `save_pretrained` (float32
  safetensors), with `tokenizer.json` and `tokenizer_config.json`.
- `ref_model/`: the same architecture with other weights (seed {REF_MODEL_SEED}), same tokenizer files.
- Tokenizer: byte-level BPE trained by `tokenizers` on the fixture's texts (vocab {VOCAB_SIZE}: ids 0-6 are the
  special tokens {" ".join(SPECIAL_TOKENS)},
  then the 256 byte symbols and the merges). Llama 3's `Split` regex +
  `ByteLevel` (no prefix space, no regex) pre-tokenizer, no normaliser, `ByteLevel` decoder, BPE with
  `ignore_merges`, and a `Sequence[ByteLevel, TemplateProcessing]` post-processor that prepends
  `<|begin_of_text|>` (id 0). `tokenizer_config.json`: bos `<|begin_of_text|>`, eos `<|end_of_text|>` (id 1), pad
  `<|pad|>` (id 2), and this chat template (as a JSON string):

      {json.dumps(CHAT_TEMPLATE)}
- `adapter_init.safetensors` + `adapter_config.json`: PEFT LoRA for `model/` (r 4, lora_alpha 8, dropout 0, q/k/v/o/
  gate/up/down_proj of both layers), lora_A and lora_B both {LORA_INIT_STD}·N(0,1) (seed {ADAPTER_SEED}), saved by
  PEFT's `save_pretrained` (names `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`, ...).
- `rows_standard.jsonl`, `rows_conversational.jsonl`, `rows_implicit.jsonl`: the datasets (one form per file).
- `tokenized.json`: what `DPOTrainer._prepare_dataset` made of each row, and a truncation case.
- `cases.json` + `cases.safetensors`: TRL's first step (loss, log-probs, metrics, gradients) for {len(cases["cases"])}
  cases on the batch of all rows of `rows_standard.jsonl`.

## tokenized.json

    {{"trl_version": str,
     "files": {{"<file>": [{{"prompt": ..., "chosen": ..., "rejected": ...,   # the row as TRL holds it after
                                                                            # extract_prompt / adding EOS
                            "prompt_ids": [int], "chosen_ids": [int], "rejected_ids": [int]}}, ...]}},
     "truncation": {{"file": "rows_standard.jsonl", "max_length": {truncation["max_length"]}, "truncation_mode": "keep_start",
                    "kept_rows": {truncation["kept_rows"]}, "dropped_rows": {truncation["dropped_rows"]},
                    "rows": [the kept rows, as above],
                    "collated": {{"input_ids": [[int]], "attention_mask": [[int]], "completion_mask": [[int]]}}}}}}

Token counts of `rows_standard.jsonl` (prompt + chosen / rejected): {lengths}.
With max_length {truncation["max_length"]} row 1 is dropped (its prompt alone has >= max_length tokens) and the kept
rows' sequences are cut to their first {truncation["max_length"]} tokens (`collated`: chosen rows, then rejected
rows).

## cases.json

    {{"trl_version", "transformers_version", "peft_version", "torch_version": str,
     "rows": "rows_standard.jsonl", "batch_rows": [0, 1, 2], "dtype": "float32", "device": "cpu",
     "attn_implementation": "{cases["attn_implementation"]}",
     "batch": {{"input_ids", "attention_mask", "completion_mask": [6 x {batch_length}]}},  # chosen 0,1,2 then rejected 0,1,2
     "fused_head_vs_log_softmax_max_abs_diff": float,
     "cases": {{"<name>": {{...}}}}}}

A DPO case: `trainer` "DPOTrainer", `loss_type`, `beta`, `label_smoothing`, `policy` ("lora": model/ +
adapter_init, or "full": model/), `reference` ("adapters_off" or "separate": ref_model/), `loss`,
`policy_chosen_logps` / `policy_rejected_logps` / `reference_chosen_logps` / `reference_rejected_logps` (3 per-pair
sums of completion-token log-probs), `completion_token_counts` (6: chosen 0,1,2, rejected 0,1,2), `metrics` (every
value TRL appended to `trainer._metrics["train"]`), `num_trainable_parameters`, `logps_source`.
`simpo` (CPOTrainer) and `orpo` (ORPOTrainer): `loss`, `policy_*_logps` (per-sequence MEANS over completion tokens,
`logps_are_token_means`: true), `nll_loss`, `completion_token_counts`, `metrics` (everything in
`trainer._stored_metrics["train"]`), `beta`, and `simpo_gamma`/`cpo_alpha`/`label_smoothing` or `nll_token_count`.

## cases.safetensors

`<case>/<parameter>`, float32, the gradient of every trainable parameter after one `loss.backward()` from fresh
weights. LoRA cases: PEFT's saved names (as in adapter_init.safetensors, no `.default.`), e.g.
`sigmoid_lora/base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight` (28 tensors per case). Full fine-tuning
cases: transformers' names (as in model/model.safetensors), e.g. `simpo/model.embed_tokens.weight`,
`orpo/lm_head.weight` (21 tensors per case).

## How the numbers were made (and what had to be worked around)

- Every trainer gets `use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, report_to="none",
  disable_dropout=True, seed=42`. TRL's configs default to `bf16=True` (autocast) and gradient checkpointing on.
- Batch: `trainer.data_collator([train_dataset[0], train_dataset[1], train_dataset[2]])` (no sampler, so no
  shuffling), then `trainer.compute_loss(model, batch)` with the model in train mode, then `loss.backward()`.
  One fresh trainer (and freshly loaded weights) per case.
- LoRA with the adapters-off reference: the trainer gets the plain model/ plus `peft_config` (TRL calls
  `get_peft_model`, reference = `disable_adapter()`), then `adapter_init.safetensors` is loaded into the "default"
  adapter with `peft.set_peft_model_state_dict`. Passing a ready `PeftModel` instead would make TRL (with peft >=
  0.20) add a frozen copy named "ref" and use it as the reference, i.e. the initial adapter, not the base model.
- DPO log-probs: TRL's `add_fused_lm_head` patches the model's forward; `_compute_loss` calls
  `model(..., labels=input_ids with completion_mask == 0 set to -100, fused_lm_head=True)` and gets per-token
  log-probs from a chunked online log-sum-exp over the vocabulary (float32, CPU torch path; no logits are built).
  The fixture records those per-token values by wrapping that forward (policy call: autograd on; reference call:
  under no_grad), sums them exactly as `_compute_loss` does, and checks them against TRL's logged `logps/chosen` and
  `rewards/chosen`. Against a plain `log_softmax` over the full float32 logits of the same model they differ by at
  most {cases["fused_head_vs_log_softmax_max_abs_diff"]:.3g} (per sequence sum).
- CPOTrainer / ORPOTrainer (trl.experimental) tokenise differently (see below) and use a plain forward over full
  logits (`selective_log_softmax`). They run with `max_length=1024` (their default; no truncation here) and
  `remove_unused_columns=False` (which they force anyway). The script asserts that their concatenated input_ids,
  attention mask and completion positions (labels != -100) equal DPOTrainer's batch exactly, so all cases see the
  same token ids. SimPO: `loss_type="simpo", cpo_alpha=0, simpo_gamma={SIMPO_GAMMA}, beta={SIMPO_BETA}` (CPOConfig's
  default beta is 0.1; 2.0 is the SimPO paper's scale). ORPO: `beta={ORPO_BETA}` (its default).
- The attention implementation is transformers' default for this model ("{cases["attn_implementation"]}"); right
  padding, so padded positions never influence the real ones.

## TRL behaviours a reimplementation must match

- String rows: `_prepare_dataset` appends the EOS *text* to `chosen` and `rejected` unless the string already ends
  with it (`str.endswith`), before tokenising. It tokenises `prompt`, `prompt + chosen`, `prompt + rejected` with
  `tokenizer(text)` (special tokens on: the post-processor's BOS; special-token text inside the string becomes the
  special token). Conversational rows get no EOS; they are tokenised with `apply_chat_template(prompt,
  add_generation_prompt=True)` and `apply_chat_template(prompt + chosen)` (no generation prompt; no extra BOS beyond
  the template's `bos_token`). Implicit rows first go through `extract_prompt`: the longest common prefix of the two
  message lists is the prompt (here it can contain earlier assistant turns).
- The completion starts where the tokenisations diverge: `prompt_len = min(common_prefix(prompt_ids,
  prompt_chosen_ids), common_prefix(prompt_ids, prompt_rejected_ids))`; `prompt_ids` is cut to `prompt_len`,
  `chosen_ids = prompt_chosen_ids[prompt_len:]`. Row 2 of rows_standard.jsonl exercises it: its prompt ends with
  " t" (token "Ġt"), which merges into "Ġthe" with the completion, so that token is dropped from prompt_ids and the
  completion starts with "Ġthe". The trained sequence is therefore exactly `tokenize(prompt + chosen [+ EOS])`.
  For conversations the completion is `content<|end|>\\n` (the template's suffix after the assistant header).
- max_length (keep_start, TRL's only text mode; default 1024; `None` = no limit): rows whose `len(prompt_ids) >=
  max_length` are dropped; the collator cuts each `prompt + completion` to its first max_length tokens (the
  completion mask alike), then right-pads (pad id 2, attention 0, completion mask 0). Batch order: the chosen
  sequences of all rows, then the rejected ones.
- Log-probs: token t+1's log-prob from position t, counted where `completion_mask[t+1] == 1`; per-sequence sum.
- DPO losses (mean over pairs; Δ = (πc − rc) − (πr − rr)): sigmoid `−logsigmoid(βΔ)` (label_smoothing is NOT used
  by sigmoid in TRL 1.16); hinge `relu(1 − βΔ)` (every pair is on the active side here); ipo `((πc − rc)/nc − (πr −
  rr)/nr − 1/(2β))²` with nc, nr the completion token counts (completion_mask sums after truncation, clamped to
  >= 1); robust `(−(1−ε)·logsigmoid(βΔ) + ε·logsigmoid(−βΔ)) / (1 − 2ε)`.
- DPO metrics: `rewards/chosen` = mean β(πc − rc), `rewards/rejected` = mean β(πr − rr), `rewards/accuracies` =
  mean of (chosen reward > rejected reward) (strict), `rewards/margins` = mean difference, `logps/chosen` /
  `logps/rejected` = mean of the policy sums; also `entropy` (mean over all completion tokens of both halves of the
  per-position entropy), `logits/chosen` / `logits/rejected` (mean over completion positions of the vocabulary-mean
  logit), `mean_token_accuracy` (chosen completion tokens whose label is the arg-max), `num_tokens` (attention-mask
  sum, cumulative).
- CPO/ORPO tokenisation: prompt with `add_special_tokens=False`, then BOS prepended unless already first;
  `prompt + answer` tokenised the same way and split at `len(prompt ids)`, one token earlier when the last prompt
  token differs (a merge); the EOS *id* appended unless the last id already is EOS; a sequence longer than
  max_length keeps the whole prompt and cuts the answer (rows are never dropped). Here this gives DPO's ids.
- SimPO (CPOTrainer): per-sequence log-prob = mean over completion tokens (sum / count); `logits = πc − πr −
  γ/β`; loss = mean `−(1−ls)·logsigmoid(β·logits) − ls·logsigmoid(−β·logits)` + cpo_alpha·NLL (cpo_alpha 0: the
  NLL is a constant 0). Logged: `rewards/chosen|rejected` = β·mean-log-prob (no reference), `rewards/accuracies`,
  `rewards/margins`, `logps/chosen|rejected` (the means), `logits/chosen|rejected` = mean of ALL logits of the
  chosen (rejected) rows: every position including padding and the last one, every vocabulary entry, and `nll_loss`.
- ORPO: per-sequence log-prob = mean over completion tokens; `log_odds = (πc − πr) − (log1mexp(πc) −
  log1mexp(πr))` with `log1mexp(x) = log(1 − exp(x))` (computed as log1p(−exp x) below −ln 2, else log(−expm1 x));
  loss = NLL − mean(β·logsigmoid(log_odds)), where NLL is the mean cross-entropy over every non-padding token of the
  chosen rows, PROMPT INCLUDED (`nll_token_count` tokens). Logged: `rewards/*` (β·mean log-probs), `logps/*`,
  `logits/chosen|rejected` = mean of `logits[:, :-1]` of those rows (padding positions included), `nll_loss`,
  `log_odds_ratio` = mean logsigmoid(log_odds), `log_odds_chosen` = mean log_odds.
"""
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
