#!/usr/bin/env python3
"""Single-thread tokenizer encode throughput: tune's tokenizer.json support beside Hugging Face's `tokenizers` (the
Rust library, through its Python binding) on the same corpus and the same tokenizer files, side by side in one run.

    cmake --build build --target tune-bench-tokenizer
    .venv/bin/python scripts/bench_tokenizer.py [--fixtures build/tokenizer_fixtures] [--rounds 3] [--repeat 3]
                                                [--models llama3,qwen3,llama2,gemma3] [--keep-corpus PATH]

The tokenizer files are the test fixtures (scripts/make_tokenizer_fixtures.py writes them; running the
test_tokenizer_json CTest does). The corpus is built deterministically from what is on disk, no network: this
repository's README, docs, sources, tests and scripts (English prose and code, one document per line) interleaved
with generated multilingual text (Chinese, Japanese, Korean, Arabic, Hindi, Russian, Greek, accented Latin, emoji
with ZWJ sequences and skin tones, numbers), about 3 MB; it goes to a temporary file that both sides read.

Both sides encode every document (no special tokens) on one thread: Hugging Face with RAYON_NUM_THREADS=1 and
TOKENIZERS_PARALLELISM=false, once with Tokenizer.encode per document in a Python loop and once with a single
encode_batch call (which saves the per-call Python overhead); tune with build/apps/bench/tune-bench-tokenizer. The
BPE models of both cache the ids of pieces they have seen, so each side is measured twice:
  cold: the first pass with an empty cache (HF: model._clear_cache(); tune: a freshly loaded tokenizer);
  warm: a later pass over the same corpus, the cache filled.
Each round runs every tokenizer's HF and tune measurements alternately; the best of --rounds rounds (each the best
of --repeat passes) is kept. The table compares tune with the faster of HF's two ways. Token counts must be equal
on both sides; a difference is printed loudly and makes the exit status 1.
"""
import os

# Before tokenizers is imported: its thread pool reads these once.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["llama3", "qwen3", "llama2", "gemma3"]

# ---------------------------------------------------------------------------------------------------------------
# Corpus

SOURCE_PATTERNS = ["README.md", "docs/**/*.md", "src/**/*.h", "src/**/*.cpp", "apps/**/*.cpp", "tests/**/*.cpp",
                   "scripts/*.py", "scripts/*.sh", "configs/**/*.yaml", "recipes/**/*.yaml", "cmake/*.cmake"]

COMMON_HANZI = (
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然"
    "没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理"
    "美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少"
    "关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何"
    "更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百"
    "吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即"
    "求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音"
    "火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴切")
HIRAGANA = "".join(chr(c) for c in range(0x3041, 0x3094))
KATAKANA = "".join(chr(c) for c in range(0x30A1, 0x30FB))
ARABIC = "ابتثجحخدذرزسشصضطظعغفقكلمنهوي" + "ةىأإآء"
DEVANAGARI_CONSONANTS = "कखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह"
DEVANAGARI_SIGNS = ["", "ा", "ि", "ी", "ु", "ू", "े", "ै", "ो", "ौ", "ं", "्"]
CYRILLIC = "абвгдеёжзийклмнопрстуфхцчшщъыьэюя"
GREEK = "αβγδεζηθικλμνξοπρστυφχψωάέήίόύώ"
LATIN_ACCENTED = "abcdefghijklmnopqrstuvwxyzàâçéèêëîïôûùüÿñæœßøåäöíóúãõ"
EMOJI = ["😀", "😂", "🥲", "😍", "🤔", "👍", "👍🏽", "👋🏿", "🙏", "🎉", "🚀", "✨", "❤️", "🔥", "💯", "🇫🇷", "🇯🇵", "🇧🇷",
         "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🤷‍♀️", "🐍", "☕", "🌍"]


def zipf_vocabulary(rng, make_word, size):
    """`size` distinct made-up words and Zipf weights for them, so common words recur as in real text."""
    words = list(dict.fromkeys(make_word() for _ in range(size * 2)))[:size]
    return words, [1.0 / (rank + 1) for rank in range(len(words))]


def alphabetic_word(rng, letters, low=2, high=9):
    return lambda: "".join(rng.choice(letters) for _ in range(rng.randint(low, high)))


def devanagari_word(rng):
    return lambda: "".join(rng.choice(DEVANAGARI_CONSONANTS) + rng.choice(DEVANAGARI_SIGNS)
                           for _ in range(rng.randint(1, 4)))


def hangul_word(rng, syllables):
    return lambda: "".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))


def language_generators(rng):
    """name -> (words, weights, word separator, sentence end, comma)."""
    hangul = [chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(400)]
    kana = HIRAGANA + KATAKANA
    spec = {
        "zh": (alphabetic_word(rng, COMMON_HANZI, 1, 3), "", "。", "，"),
        "ja": (lambda: rng.choice([alphabetic_word(rng, COMMON_HANZI, 1, 2), alphabetic_word(rng, kana, 1, 4)])(),
               "", "。", "、"),
        "ko": (hangul_word(rng, hangul), " ", ".", ","),
        "ar": (alphabetic_word(rng, ARABIC, 2, 7), " ", ".", "،"),
        "hi": (devanagari_word(rng), " ", "।", ","),
        "ru": (alphabetic_word(rng, CYRILLIC), " ", ".", ","),
        "el": (alphabetic_word(rng, GREEK), " ", ".", ","),
        "fr": (alphabetic_word(rng, LATIN_ACCENTED), " ", ".", ","),
    }
    out = {}
    for name, (make_word, separator, end, comma) in spec.items():
        words, weights = zipf_vocabulary(rng, make_word, 3000)
        out[name] = (words, weights, separator, end, comma)
    return out


def multilingual_documents(rng, target_bytes):
    languages = language_generators(rng)
    names = sorted(languages)
    documents, total = [], 0
    while total < target_bytes:
        words, weights, separator, end, comma = languages[rng.choice(names)]
        sentences = []
        for _ in range(rng.randint(1, 6)):
            tokens = rng.choices(words, weights, k=rng.randint(4, 20))
            if rng.random() < 0.3:
                tokens.insert(rng.randrange(len(tokens)), str(rng.choice([rng.randint(0, 99), rng.randint(0, 10**6)])))
            if rng.random() < 0.25:
                tokens.insert(rng.randrange(len(tokens)), "".join(rng.choices(EMOJI, k=rng.randint(1, 3))))
            if len(tokens) > 6 and rng.random() < 0.5:
                tokens[rng.randrange(1, len(tokens) - 1)] += comma
            sentences.append(separator.join(tokens) + end)
        document = separator.join(sentences)
        documents.append(document)
        total += len(document.encode("utf-8"))
    return documents


def source_documents():
    """The repository's text files, one document per non-empty line, in a fixed order."""
    paths = sorted({p for pattern in SOURCE_PATTERNS for p in ROOT.glob(pattern) if p.is_file()})
    documents = []
    for path in paths:
        text = path.read_bytes().decode("utf-8", "replace")
        documents += [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    return documents


def build_corpus():
    rng = random.Random(20261123)
    english_code = source_documents()
    english_bytes = sum(len(d.encode("utf-8")) for d in english_code)
    documents = english_code + multilingual_documents(rng, target_bytes=max(english_bytes, 1_000_000))
    rng.shuffle(documents)
    return documents


# ---------------------------------------------------------------------------------------------------------------
# Measurements


def best_pass(run, passes):
    best, tokens = float("inf"), None
    for _ in range(passes):
        start = time.perf_counter()
        count = run()
        best = min(best, time.perf_counter() - start)
        tokens = count
    return best, tokens


def measure_hf(tokenizer, documents, repeat):
    """{way: (cold seconds, warm seconds, tokens)} for the per-document loop and for encode_batch."""
    def loop():
        return sum(len(tokenizer.encode(d, add_special_tokens=False).ids) for d in documents)

    def batch():
        return sum(len(e.ids) for e in tokenizer.encode_batch(documents, add_special_tokens=False))

    out = {}
    for way, run in (("encode", loop), ("encode_batch", batch)):
        def cold_run():
            tokenizer.model._clear_cache()  # empty BPE cache: the state right after loading
            return run()
        cold, tokens = best_pass(cold_run, repeat)
        warm, warm_tokens = best_pass(run, repeat)
        assert tokens == warm_tokens
        out[way] = (cold, warm, tokens)
    return out


def measure_tune(binary, tokenizer_path, corpus_path, repeat):
    command = [str(binary), "--tokenizer", str(tokenizer_path), "--corpus", str(corpus_path),
               "--repeat", str(repeat), "--cold", str(repeat)]
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    line = json.loads(result.stdout.strip().splitlines()[-1])
    return line["cold_seconds"], line["seconds"], line["tokens"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=ROOT / "build" / "tokenizer_fixtures")
    parser.add_argument("--binary", type=Path, default=ROOT / "build" / "apps" / "bench" / "tune-bench-tokenizer")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best is kept")
    parser.add_argument("--repeat", type=int, default=3, help="passes per measurement; the best is kept")
    parser.add_argument("--keep-corpus", type=Path, help="also write the corpus here")
    args = parser.parse_args()

    documents = build_corpus()
    corpus_text = "\n".join(documents) + "\n"
    corpus_bytes = len(corpus_text.encode("utf-8"))
    megabytes = corpus_bytes / 1e6
    if args.keep_corpus:
        args.keep_corpus.write_text(corpus_text, encoding="utf-8")
    models = args.models.split(",")
    print(f"corpus: {len(documents)} documents, {megabytes:.2f} MB; tokenizers {__import__('tokenizers').__version__}, "
          f"one thread; best of {args.rounds} rounds x {args.repeat} passes", flush=True)

    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as corpus_file:
        corpus_file.write(corpus_text)
        corpus_path = Path(corpus_file.name)
    try:
        tokenizers = {m: Tokenizer.from_file(str(args.fixtures / m / "tokenizer.json")) for m in models}
        best = {m: {} for m in models}  # model -> side -> [cold, warm, tokens]

        def keep(model, side, cold, warm, tokens):
            entry = best[model].setdefault(side, [float("inf"), float("inf"), tokens])
            entry[0], entry[1] = min(entry[0], cold), min(entry[1], warm)
            if entry[2] != tokens:
                print(f"!!! {model} {side}: token count changed between rounds ({entry[2]} vs {tokens})", flush=True)

        for round_index in range(args.rounds):
            for model in models:
                # Alternate which side goes first so that neither always runs on a warmer machine.
                sides = ["hf", "tune"] if round_index % 2 == 0 else ["tune", "hf"]
                for side in sides:
                    if side == "hf":
                        for way, values in measure_hf(tokenizers[model], documents, args.repeat).items():
                            keep(model, f"hf_{way}", *values)
                    else:
                        keep(model, "tune", *measure_tune(args.binary, args.fixtures / model, corpus_path, args.repeat))
            print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        corpus_path.unlink()

    mismatch = False
    rows = []
    for model in models:
        hf_loop, hf_batch, tune = best[model]["hf_encode"], best[model]["hf_encode_batch"], best[model]["tune"]
        if not hf_loop[2] == hf_batch[2] == tune[2]:
            mismatch = True
            print(f"\n!!! TOKEN COUNT MISMATCH for {model}: HF encode {hf_loop[2]}, HF encode_batch {hf_batch[2]}, "
                  f"tune {tune[2]} !!!\n", flush=True)
        rate = lambda seconds: megabytes / seconds  # noqa: E731
        for state, column in (("cold", 0), ("warm", 1)):
            hf_best = max(rate(hf_loop[column]), rate(hf_batch[column]))
            rows.append(f"| {model} | {state} | {megabytes:.2f} | {rate(hf_loop[column]):.2f} | "
                        f"{rate(hf_batch[column]):.2f} | {rate(tune[column]):.2f} | {rate(tune[column]) / hf_best:.2f} | "
                        f"{tune[2]:,} | {'yes' if hf_loop[2] == tune[2] else 'NO'} |")

    print("\n| tokenizer | cache | corpus MB | HF encode MB/s | HF encode_batch MB/s | tune MB/s | tune/HF (best HF) "
          "| tokens | counts equal |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))
    return 1 if mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
