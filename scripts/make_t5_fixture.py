#!/usr/bin/env python3
"""Reference outputs for tune's T5 encoder and T5 tokenizer from Hugging Face transformers' T5EncoderModel and
T5Tokenizer (read by tests/models/test_t5_encoder.cpp).

    .venv/bin/python scripts/make_t5_fixture.py --out DIR     (deterministic; run by CTest)

The tokenizer is a tiny sentencepiece Unigram model trained here on generated captions (T5's layout: <pad> 0,
</s> 1, <unk> 2, no BOS), loaded by transformers 5's T5Tokenizer, which converts spiece.model to a `tokenizers`
Unigram (T5Tokenizer(vocab_file=...) alone does not: it builds a placeholder vocabulary, so from_pretrained is
used). The encoder is a tiny random T5 v1.1 (gated-gelu) T5EncoderModel, seeded, run in float32 (the test's
reference) and float64 with the eager attention (the textbook formula; transformers' default sdpa agrees to
rounding). Writes, under DIR:
  tokenizer/            spiece.model, a transformers-4-style tokenizer_config.json (additional_special_tokens,
                        added_tokens_decoder) and added_tokens.json, as T5 v1.1 checkpoints ship them
  tokenizer_with_json/  spiece.model beside transformers 5's save_pretrained output (tokenizer.json, a Unigram one,
                        and tokenizer_config.json); transformers gives both directories the same ids (checked here)
  text_encoder/         config.json and the weights, sharded (model-0000k-of-0000n.safetensors + index)
  text_encoder_relu/    a T5 v1.0-style encoder (feed_forward_proj "relu"), one model.safetensors
  prompts.json          the prompts of io.safetensors, and "long_prompt"
  python_str_cases.json the prompt preprocessing of LattePipeline and SanaPipeline (`text.lower().strip()`):
                        "lower_changes", [code point, chr(code point).lower()] for every code point that lower()
                        changes; "unicode_version" (unicodedata's); "texts", [{"text", "lower_strip"}] for capital
                        sigmas in and out of word-final position and for Unicode whitespace around text
  tokenizer_cases.json  [{"text", "ids", "normalized"}]: tokenizer(text)["input_ids"] (EOS included) and the text
                        as transformers' normalizer leaves it (`tokenizers`' Precompiled) for random mixes of words,
                        special tokens, Unicode whitespace and combining marks, for "a{c}b" with format, control
                        and space characters, and for runs of consecutive code points (Latin to CJK, compatibility
                        forms, symbols) with marks and joiners between them. Where transformers' normalizer and
                        sentencepiece's normalize a run of text differently (transformers 5 normalizes per grapheme
                        cluster and may drop a combining mark or joiner after a character it rewrites, e.g.
                        "½\u200d"; sentencepiece and transformers 4's slow T5Tokenizer per character), the case
                        has "normalization_differs": true and "sentencepiece_ids", sentencepiece's own ids, so the
                        test can show that it follows transformers where the two disagree
  io.safetensors        ids_32, mask_32 [P, 32] and ids_16, mask_16 [P, 16] int64 (padding="max_length",
                        truncation=True); hidden_32 [P, 32, 32] f32 and hidden_32_f64 f64: last_hidden_state of the
                        padded 32-token batch; ids_long, mask_long [2, 160] and hidden_long [2, 160, 32] f32 (distances
                        past relative_attention_max_distance); hidden_relu_32 [P, 32, 32] f32: text_encoder_relu's
                        output for ids_32; buckets_32_128 and buckets_16_20 [601]: transformers'
                        bidirectional bucket of the relative positions -300..300 (num_buckets, max_distance)
If transformers or sentencepiece is not installed, writes DIR/SKIPPED with the reason instead and exits 0; the test
then exits 77 (reported skipped by CTest, never passed).
"""
import json
import math
import os
import random
import re
import shutil
import sys
import unicodedata

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_output  # noqa: E402
import safetensors_io  # noqa: E402

PROMPTS = [
    "a red square moving left",
    "A small purple hexagon is spinning slowly over the dark ocean while the camera pans right across a bright "
    "city street at sunset, and a white bird flies up",
    "  odd\twhitespace\n\nbetween   words  ",
    "UPPERCASE GREEN Circle Bouncing",
    "<extra_id_0> a blue star<extra_id_1>shrinking </s> after",
    "café naïve Zürich 東京 ☃ ｆｕｌｌ",
    "",
]
LONG_PROMPT = " ".join([PROMPTS[1]] * 5)
EXTRA_IDS = 100
ENCODER = dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, relative_attention_num_buckets=32,
               relative_attention_max_distance=128, feed_forward_proj="gated-gelu", dropout_rate=0.0,
               is_encoder_decoder=False, use_cache=False, tie_word_embeddings=False)


def captions(count, seed):
    """Generated captions plus pseudo-words, so a few hundred pieces can be learnt."""
    rng = random.Random(seed)
    colors = "red green blue yellow purple orange black white pink brown".split()
    shapes = "square circle triangle star hexagon cross ring dot".split()
    motions = "moving left right up down spinning bouncing growing shrinking fading".split()
    words = ("a the and with on over under slowly quickly large small bright dark video of scene camera zoom pan "
             "city street ocean forest mountain cat dog bird car train night day sunset café naïve über Zürich "
             "東京 while across at flies is").split()
    syllables = "ka lo mi ne ru sa ti vo ze pa qu bri str ght ion ing ed er ly".split()
    words += ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    lines = []
    for _ in range(count):
        line = [rng.choice(["a", "the", "one"]), rng.choice(colors), rng.choice(shapes), rng.choice(motions)]
        line += [rng.choice(words) for _ in range(rng.randint(0, 8))]
        if rng.random() < 0.1:
            line = [w.capitalize() for w in line]
        if rng.random() < 0.1:
            line.append(rng.choice([",", ".", "!", "?", "(x)", "3", "42"]))
        lines.append(" ".join(line))
    return lines


def train_spiece(work_dir):
    import sentencepiece as spm
    corpus = os.path.join(work_dir, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(captions(4000, seed=0)) + "\n")
    spm.set_random_generator_seed(1)
    # Relative paths from work_dir: the model records its training input's path, and the file should not depend on DIR.
    cwd = os.getcwd()
    os.chdir(work_dir)
    try:
        spm.SentencePieceTrainer.train(
            input="corpus.txt", model_prefix="spiece", vocab_size=400, model_type="unigram",
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>",
            character_coverage=1.0, num_threads=1, minloglevel=2)
    finally:
        os.chdir(cwd)
    return os.path.join(work_dir, "spiece.model")


def sentinel_id(pieces, index):
    return pieces + EXTRA_IDS - 1 - index


def write_t5_v11_style_tokenizer(directory, spiece, pieces):
    """spiece.model with the tokenizer_config.json / added_tokens.json layout of a transformers-4 T5 checkpoint."""
    os.makedirs(directory)
    shutil.copy(spiece, os.path.join(directory, "spiece.model"))
    sentinels = [f"<extra_id_{i}>" for i in range(EXTRA_IDS)]
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for i, t in enumerate(["<pad>", "</s>", "<unk>"])}
    for i, token in enumerate(sentinels):
        decoder[str(sentinel_id(pieces, i))] = {"content": token, "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": True}
    config = {"additional_special_tokens": sentinels, "added_tokens_decoder": decoder, "eos_token": "</s>",
              "extra_ids": EXTRA_IDS, "legacy": True, "model_max_length": 512, "pad_token": "<pad>",
              "sp_model_kwargs": {}, "tokenizer_class": "T5Tokenizer", "unk_token": "<unk>"}
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    with open(os.path.join(directory, "added_tokens.json"), "w", encoding="utf-8") as f:
        json.dump({t: sentinel_id(pieces, i) for i, t in enumerate(sentinels)}, f, indent=2)


# Unicode White_Space as Rust's char::is_whitespace, which transformers' WhitespaceSplit splits at.
RUST_WHITESPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200b)) +
                   "\u2028\u2029\u202f\u205f\u3000")


def special_token_pattern():
    """Leftmost, then longest, as transformers splits added tokens out of the text."""
    tokens = ["<pad>", "</s>", "<unk>"] + [f"<extra_id_{i}>" for i in range(EXTRA_IDS)]
    return re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))


def normalization_differs(tokenizer, sp, pattern, text):
    """Whether transformers' normalizer (`tokenizers`' Precompiled: per grapheme cluster, a cluster of fewer than 6
    bytes whose first characters have a mapping becomes that mapping and loses the rest) and sentencepiece's
    (per character, longest match) normalize a run of text between special tokens differently; whitespace is
    compared as each side splits and marks it."""
    normalizer = tokenizer.backend_tokenizer.normalizer
    whitespace = re.compile("[" + re.escape(RUST_WHITESPACE) + "]+")
    for run in pattern.split(text):
        words = [w for w in whitespace.split(normalizer.normalize_str(run)) if w]
        transformers_form = "".join(w if w.startswith("\u2581") else "\u2581" + w for w in words)
        if transformers_form != sp.normalize(run.replace("\x85", " ")):
            return True
    return False


def sentencepiece_ids(sp, pattern, text):
    """sentencepiece's own reading (as transformers 4's slow T5Tokenizer): its encoding of each run between special
    tokens (U+0085 read as a space), the special tokens' ids, EOS. Kept where the normalizers differ, to show that
    tune follows transformers 5 there."""
    ids, at = [], 0
    for match in pattern.finditer(text):
        ids += sp.encode(text[at:match.start()].replace("\x85", " "))
        ids.append(sp.piece_to_id(match.group()) if match.group() in ("<pad>", "</s>", "<unk>")
                   else sentinel_id(sp.get_piece_size(), int(match.group()[len("<extra_id_"):-1])))
        at = match.end()
    return ids + sp.encode(text[at:].replace("\x85", " ")) + [sp.eos_id()]


def tokenizer_cases(tokenizer, sp):
    """Texts whose ids tune must reproduce: whitespace of every kind, specials, NFKC-normalised characters, combining
    marks and joiners. Where the two normalizers differ (normalization_differs), the case also holds
    sentencepiece's own ids."""
    spaces = ["\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u1680", "\u180e", "\u2000", "\u2007",
              "\u200a", "\u200b", "\u200d", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff"]
    controls = [chr(c) for c in list(range(0x00, 0x20)) + list(range(0x7f, 0xa1))]
    odd = ["ｆ", "ﬁ", "①", "½", "™", "\u212b", "e\u0301", "㍻", "▁", "▁▁", "<", ">", "<extra_id_", "<extra_id_100>",
           "<extra_id_99>", "</s>", "<pad>", "<unk>", "☃", "東京"]
    words = "a red square moving left Right UP café naïve Zürich hello, world!! (x) 42".split()
    texts = [f"a{c}b" for c in sorted(set(spaces + controls + odd))]
    texts += ["", " ", "  ", "\n", "a", " a", "a ", "  a  b  ", "a\n\nb", "A<extra_id_0>B", "<extra_id_0><extra_id_1>",
              "<extra_id_1>0>", "<pa<pad>d>", "x</s></s>y"]
    # Where transformers' grapheme-cluster normalization drops what follows a mapped character.
    texts += ["½\u200d", "ﬁ\u0301 x", "a\u0308\u0301", "\xa0\u0301b", "e\u0302\u0301 red"]
    rng = random.Random(5)
    pool = words + spaces + odd
    for _ in range(400):
        texts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 10))))
    marks = ["\u0301", "\u0308", "\u0302", "\u0323", "\u200d", "\u200c", "\ufe0f", "\u20e3", "\U0001F3FD"]
    bases = ["a", "e", "E", "x", "1", " ", "½", "ﬁ", "①", "ｆ", "\u212b", "\xa0", "👍", "❤", "\u1100", "\u1161", "\u11a8",
             "▁", "\x01"]
    for _ in range(1500):
        texts.append("".join(rng.choice(bases + marks) for _ in range(rng.randint(1, 6))))
    for start in list(range(0xa0, 0x3400, 24)) + list(range(0xf900, 0x10000, 24)) + list(range(0x1f100, 0x1f700, 24)):
        characters = [chr(c) for c in range(start, start + 24) if not 0xd800 <= c < 0xe000]
        texts.append("".join(c + rng.choice(["", "", " ", "\u0301", "\u200d", "\ufe0f"]) for c in characters))
    pattern = special_token_pattern()
    cases = []
    for text in texts:
        case = {"text": text, "ids": tokenizer(text)["input_ids"],
                "normalized": tokenizer.backend_tokenizer.normalizer.normalize_str(text)}
        if normalization_differs(tokenizer, sp, pattern, text):
            case["normalization_differs"] = True
            case["sentencepiece_ids"] = sentencepiece_ids(sp, pattern, text)
        cases.append(case)
    if not any(c.get("normalization_differs") and c["ids"] != c["sentencepiece_ids"] for c in cases):
        raise SystemExit("make_t5_fixture: no case shows the grapheme-normalization difference")
    return cases


def python_str_cases():
    """str.lower() and str.strip() as CPython computes them (the reference for tune's data/python_str)."""
    changes = [[c, chr(c).lower()] for c in range(0x110000) if not 0xd800 <= c < 0xe000 and chr(c).lower() != chr(c)]
    texts = ["ΣΑΣ", "ΟΔΟΣ ΟΔΟΣ.", "Σ", "aΣ", "aΣb", "aΣ'", "a'Σ", "a\u0301Σ", "aΣ\u0301", "aΣ\u0301b", "ΑΣ'Σ", "1Σ",
             "Σa", " ΣΑΣ ", "ΑΣ.Β", "ΑΣ:Β", "ΑΣ\u00b7Β", "ΑΣ\u200dΒ", "ΑΣ\u00adΒ", "ΑΣ\u02b0", "ΑΣ-Β", "ΑΣ1", "ǅΣ",
             "ΑΣΣ", "İstanbul", "İ\u0307", "ΑΣ\U0001d400", "\u2160Σ"]
    spaces = ["\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1f", " ", "\x85", "\xa0", "\u1680", "\u180e", "\u2000",
              "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff"]
    texts += [f"{c}A red Square{c}" for c in spaces] + ["".join(spaces), "  \u3000x\xa0 y \x85"]
    return {"lower_changes": changes, "unicode_version": unicodedata.unidata_version,
            "texts": [{"text": t, "lower_strip": t.lower().strip()} for t in texts]}


def padded(tokenizer, prompts, max_length):
    batch = tokenizer(prompts, padding="max_length", max_length=max_length, truncation=True, add_special_tokens=True,
                      return_tensors="pt")
    return batch["input_ids"].to(torch.int64), batch["attention_mask"].to(torch.int64)


def main():
    out = fixture_output.fresh_output_dir(__doc__.split("\n")[0])
    if fixture_output.skipped_without(out, "make_t5_fixture", "sentencepiece", "transformers"):
        return
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    work_dir = os.path.join(out, "work")
    os.makedirs(work_dir)
    spiece = train_spiece(work_dir)
    import sentencepiece as spm
    pieces = spm.SentencePieceProcessor(model_file=spiece).get_piece_size()

    tokenizer_dir = os.path.join(out, "tokenizer")
    write_t5_v11_style_tokenizer(tokenizer_dir, spiece, pieces)
    tokenizer = T5Tokenizer.from_pretrained(tokenizer_dir)
    if len(tokenizer) != pieces + EXTRA_IDS or tokenizer.convert_tokens_to_ids("<extra_id_0>") != pieces + 99:
        raise SystemExit(f"make_t5_fixture: unexpected T5Tokenizer layout (len {len(tokenizer)}, {pieces} pieces)")
    with_json_dir = os.path.join(out, "tokenizer_with_json")
    os.makedirs(with_json_dir)
    plain_dir = os.path.join(work_dir, "plain")
    os.makedirs(plain_dir)
    shutil.copy(spiece, os.path.join(plain_dir, "spiece.model"))
    T5Tokenizer.from_pretrained(plain_dir).save_pretrained(with_json_dir)
    shutil.copy(spiece, os.path.join(with_json_dir, "spiece.model"))
    if not os.path.isfile(os.path.join(with_json_dir, "tokenizer.json")):
        raise SystemExit("make_t5_fixture: save_pretrained wrote no tokenizer.json; the directory tests nothing")
    with_json = T5Tokenizer.from_pretrained(with_json_dir)

    cases = tokenizer_cases(tokenizer, spm.SentencePieceProcessor(model_file=spiece))
    for case in cases:
        if with_json(case["text"])["input_ids"] != case["ids"]:
            raise SystemExit(f"make_t5_fixture: the two tokenizer directories disagree on {case['text']!r}")
    with open(os.path.join(out, "tokenizer_cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=0)
    with open(os.path.join(out, "python_str_cases.json"), "w", encoding="utf-8") as f:
        json.dump(python_str_cases(), f, ensure_ascii=False)
    with open(os.path.join(out, "prompts.json"), "w", encoding="utf-8") as f:
        json.dump({"prompts": PROMPTS, "long_prompt": LONG_PROMPT}, f, ensure_ascii=False, indent=2)

    vocab_size = math.ceil(len(tokenizer) / 128) * 128  # padded as T5's 32100 ids are to 32128 rows
    torch.manual_seed(20240523)
    config = T5Config(vocab_size=vocab_size, **ENCODER)
    model = T5EncoderModel(config).eval()
    model.set_attn_implementation("eager")
    encoder_dir = os.path.join(out, "text_encoder")
    model.save_pretrained(encoder_dir, max_shard_size="40KB")
    if not os.path.isfile(os.path.join(encoder_dir, "model.safetensors.index.json")):
        raise SystemExit("make_t5_fixture: the weights were not sharded; lower max_shard_size")
    # T5 v1.0's feed-forward (wo(relu(wi x))), one file.
    relu_model = T5EncoderModel(T5Config(vocab_size=vocab_size, **{**ENCODER, "feed_forward_proj": "relu"})).eval()
    relu_model.set_attn_implementation("eager")
    relu_model.save_pretrained(os.path.join(out, "text_encoder_relu"))

    ids_32, mask_32 = padded(tokenizer, PROMPTS, 32)
    ids_16, mask_16 = padded(tokenizer, PROMPTS, 16)
    ids_long, mask_long = padded(tokenizer, [LONG_PROMPT, PROMPTS[0]], 160)
    if int(mask_long[0].sum()) <= config.relative_attention_max_distance:
        raise SystemExit("make_t5_fixture: the long prompt does not reach relative_attention_max_distance")
    with torch.no_grad():
        hidden_32 = model(input_ids=ids_32, attention_mask=mask_32).last_hidden_state
        hidden_long = model(input_ids=ids_long, attention_mask=mask_long).last_hidden_state
        hidden_32_f64 = model.double()(input_ids=ids_32, attention_mask=mask_32).last_hidden_state
        hidden_relu_32 = relu_model(input_ids=ids_32, attention_mask=mask_32).last_hidden_state
    attention = model.encoder.block[0].layer[0].SelfAttention
    relative = torch.arange(-300, 301)
    buckets = {f"buckets_{n}_{d}": attention._relative_position_bucket(relative, True, n, d).to(torch.int64)
               for n, d in [(32, 128), (16, 20)]}
    safetensors_io.save(os.path.join(out, "io.safetensors"), {
        "ids_32": ids_32, "mask_32": mask_32, "ids_16": ids_16, "mask_16": mask_16,
        "hidden_32": hidden_32.float().contiguous(), "hidden_32_f64": hidden_32_f64.contiguous(),
        "ids_long": ids_long, "mask_long": mask_long, "hidden_long": hidden_long.float().contiguous(),
        "hidden_relu_32": hidden_relu_32.float().contiguous(), **buckets})
    shutil.rmtree(work_dir)
    print(f"make_t5_fixture: wrote {out} ({pieces} pieces + {EXTRA_IDS} sentinels, {len(cases)} tokenizer cases)")


if __name__ == "__main__":
    main()
