#!/usr/bin/env python3
"""transformers' Gemma 2 as the reference for tune's gemma2 variant (tests/models/test_gemma2_reference.cpp).

Tiny seeded models in float32 with eager attention (transformers' SDPA path drops the attention soft cap), shaped so
that every Gemma-2 difference from Llama shows: head_dim 32 != hidden 64 / 4 heads, 2 kv heads, query_pre_attn_scalar
24 != head_dim, sliding window 4 on the even layers of 4 with 12-token rows, soft caps small enough to bite (attention
5.0, final 3.0), zero-centred norm weights far from zero. Writes into OUT:
  gemma2_lm/               Gemma2ForCausalLM.save_pretrained, with reference.safetensors:
                             input_ids [2, 12], attention_mask [2, 12] (row 1 right-padded after 8 tokens, pad id 0),
                             logits [2, 12, vocab] and hidden [2, 12, 64] (model.model's last_hidden_state, after the
                             final norm) of that masked batch, greedy_ids [8] (generate() from row 0, new tokens only),
                             labels [2, 12] (input_ids, -100 on padding), loss (transformers' mean next-token loss of
                             them), row_logps [2] (per row, the sum of log p(label) over the scored positions: what
                             DPO compares) and grad.<name> for the parameters in GRADIENTS (d loss / d parameter)
  text_encoder/            Gemma2Model.save_pretrained (a diffusers pipeline's text_encoder/: architectures
                           ["Gemma2Model"], tensor names without "model."), with reference.safetensors: input_ids,
                           attention_mask (both rows right-padded), last_hidden_state
  text_encoder_sharded/    the same weights saved in several shards (model.safetensors.index.json)
Without transformers, writes OUT/SKIPPED instead (the test then exits 77).

Run: .venv/bin/python scripts/make_gemma2_fixtures.py --out DIR   (deterministic; CTest runs it as a setup fixture)
"""
import os
import shutil

import fixture_output

LENGTH = 12
NEW_TOKENS = 8
MIN_GREEDY_MARGIN = 1e-3
# Gradients recorded: the (tied) embedding, projections of a sliding and a full layer, the last sandwich norm.
GRADIENTS = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.1.self_attn.k_proj.weight", "model.layers.3.post_feedforward_layernorm.weight")  # 100x the logits tolerance: greedy ids are a fair test only with clear winners

SHAPE = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=24, sliding_window=4,
             attn_logit_softcapping=5.0, final_logit_softcapping=3.0, max_position_embeddings=256,
             rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1, pad_token_id=0,
             hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)


def randomize(model, generator, torch):
    """Seeded weights under our control, scaled so activations stay of order one and the soft caps are reached."""
    with torch.no_grad():
        for name, param in model.named_parameters():  # the tied lm_head appears once, as the embedding
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight"):
                param.copy_(0.3 * noise)  # stored as offsets from one
            elif name.endswith("embed_tokens.weight"):
                param.copy_(noise / param.shape[1] ** 0.5)  # rows of norm ~1; logits of order 1-5 against the cap 3
            else:
                param.copy_(2.0 * noise / param.shape[1] ** 0.5)  # large scores, so the attention cap matters


def batch(generator, vocab, real_lengths, torch):
    ids = torch.randint(3, vocab, (len(real_lengths), LENGTH), generator=generator)
    mask = torch.zeros(len(real_lengths), LENGTH, dtype=torch.int64)
    for row, real in enumerate(real_lengths):
        mask[row, :real] = 1
        ids[row, real:] = 0  # the pad id
        ids[row, 0] = 2      # BOS, as Gemma's tokenizer prepends
    return ids, mask


def greedy(model, prompt, torch):
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=NEW_TOKENS,
                         eos_token_id=None, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
    for step, logits in enumerate(out.logits):
        top2 = logits[0].topk(2).values
        assert (top2[0] - top2[1]).item() > MIN_GREEDY_MARGIN, f"greedy step {step} is a near tie; pick another seed"
    return out.sequences[0, prompt.shape[1]:]


def save(directory, model, reference, save_file, **save_options):
    shutil.rmtree(directory, ignore_errors=True)
    model.save_pretrained(directory, safe_serialization=True, **save_options)
    save_file({name: tensor.contiguous() for name, tensor in reference.items()},
              os.path.join(directory, "reference.safetensors"))


def main():
    out = fixture_output.fresh_output_dir(__doc__.splitlines()[0])
    if fixture_output.skipped_without(out, "make_gemma2_fixtures", "torch", "transformers", "safetensors"):
        return
    import torch
    from safetensors.torch import save_file
    from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma2Model
    from transformers.utils import logging
    logging.disable_progress_bar()

    config = Gemma2Config(**SHAPE)
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2, config.layer_types

    generator = torch.Generator().manual_seed(2024)
    lm = Gemma2ForCausalLM._from_config(config, attn_implementation="eager", dtype=torch.float32).eval()
    randomize(lm, generator, torch)
    ids, mask = batch(generator, config.vocab_size, [LENGTH, 8], torch)
    with torch.no_grad():
        logits = lm(input_ids=ids, attention_mask=mask).logits
        hidden = lm.model(input_ids=ids, attention_mask=mask).last_hidden_state
        greedy_ids = greedy(lm, ids[:1], torch)
    labels = ids.masked_fill(mask == 0, -100)
    next_labels = labels[:, 1:]
    token_logps = torch.log_softmax(logits[:, :-1].double(), -1).gather(-1, next_labels.clamp_min(0).unsqueeze(-1))
    row_logps = (token_logps.squeeze(-1) * (next_labels != -100)).sum(1).float()
    loss = lm(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    parameters = dict(lm.named_parameters())
    gradients = {f"grad.{name}": parameters[name].grad.detach().clone() for name in GRADIENTS}
    # The caps must bite for the test to be evidence of them: the final cap bounds the logits by 3.
    assert logits.abs().max() > 2.0, "final soft cap not reached; scale the weights up"
    save(os.path.join(out, "gemma2_lm"), lm,
         {"input_ids": ids, "attention_mask": mask, "logits": logits, "hidden": hidden, "greedy_ids": greedy_ids,
          "labels": labels, "loss": loss.detach(), "row_logps": row_logps, **gradients},
         save_file)

    encoder = Gemma2Model._from_config(config, attn_implementation="eager", dtype=torch.float32).eval()
    randomize(encoder, generator, torch)
    ids, mask = batch(generator, config.vocab_size, [10, 5], torch)
    with torch.no_grad():
        last_hidden_state = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    reference = {"input_ids": ids, "attention_mask": mask, "last_hidden_state": last_hidden_state}
    save(os.path.join(out, "text_encoder"), encoder, reference, save_file)
    save(os.path.join(out, "text_encoder_sharded"), encoder, reference, save_file, max_shard_size="100KB")
    assert os.path.exists(os.path.join(out, "text_encoder_sharded", "model.safetensors.index.json"))
    print(f"make_gemma2_fixtures: wrote {out}")


if __name__ == "__main__":
    main()
