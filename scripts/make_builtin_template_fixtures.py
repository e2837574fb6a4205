#!/usr/bin/env python3
"""transformers' apply_chat_template on tune's built-in plain, llama2 and none templates: the ids and loss mask
tune's training must produce (tests/data/test_builtin_chat_templates.cpp).

    .venv/bin/python scripts/make_builtin_template_fixtures.py --out FILE --llama2 DIR --sentencepiece FILE.model

Two tokenizers, each set up as `tune export` leaves a model directory (tokenizer_config.json with bos_token and
eos_token, config.json with model_type llama): Llama 2's tokenizer.json (DIR, from make_tokenizer_fixtures.py)
and a sentencepiece tokenizer.model (transformers reads it through its sentencepiece converter, which needs the
protobuf package). For each template (the Jinja text below, which tune exports as chat_template; the test checks
tune's text is this text) and conversation:

  ids          apply_chat_template(messages, tokenize=True): the whole rendering encoded once
  trained      per token: does it overlap, by character offsets in the rendered text, an assistant turn, i.e. from
               the end of the conversation before it rendered with add_generation_prompt=True to the end of the
               conversation up to it rendered (the reply and the EOS after it; none's middle replies have no EOS);
               a token straddling the turn's end into the next message (none only) is not trained
  prompts      for each assistant turn: apply_chat_template(messages before it, add_generation_prompt=True) ids

Writes {"templates": {NAME: JINJA}, "tokenizers": {KIND: {"cases": [...]} | {"unavailable": REASON}}}; a tokenizer
that cannot be loaded is recorded as unavailable (a loud SKIPPED line) and the C++ test warns for it.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

# What tune's ChatTemplate::jinja_source() gives (src/tune/data/chat_template.cpp). llama2: Hugging Face's Llama 2
# chat template layout, "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {reply} </s>".
TEMPLATES = {
    "plain": "{{ bos_token }}{% for message in messages %}"
             "{% if message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}"
             "{% elif message['role'] == 'user' %}"
             "{{ '### Instruction:\\n' + message['content'] + '\\n\\n### Response:\\n' }}"
             "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
    "llama2": "{% if messages[0]['role'] == 'system' %}{% set system_block = '<<SYS>>\\n' + messages[0]['content'] + "
              "'\\n<</SYS>>\\n\\n' %}{% set loop_messages = messages[1:] %}"
              "{% else %}{% set system_block = '' %}{% set loop_messages = messages %}{% endif %}"
              "{% for message in loop_messages %}{% if message['role'] == 'user' %}"
              "{{ bos_token + '[INST] ' + (system_block if loop.index0 == 0 else '') + message['content'] + "
              "' [/INST]' }}"
              "{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}",
    "none": "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
            "{% if messages and messages[-1]['role'] == 'assistant' %}{{ eos_token }}{% endif %}",
}

CONVERSATIONS = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Reverse: a b"},
     {"role": "assistant", "content": "b a"}, {"role": "user", "content": "First and last: a b c"},
     {"role": "assistant", "content": "a c"}],
    [{"role": "user", "content": "Reverse: q w e r t"}, {"role": "assistant", "content": "t r e w q"}],
    [{"role": "system", "content": "You answer in lists."}, {"role": "user", "content": "Name two.\nThen stop."},
     {"role": "assistant", "content": "a\nb"}, {"role": "user", "content": "  And three?  "},
     {"role": "assistant", "content": " c d e "}, {"role": "user", "content": "Thanks"},
     {"role": "assistant", "content": "Done."}],
]
UNICODE = [{"role": "user", "content": "Héllo wörld, 你好 😀"}, {"role": "assistant", "content": "Ça va ✓ — ありがとう"}]


def model_directory(tokenizer_file, work):
    """A directory as `tune export` leaves it, holding just the tokenizer side."""
    name = "tokenizer.json" if tokenizer_file.endswith(".json") else "tokenizer.model"
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    shutil.copy(tokenizer_file, os.path.join(folder, name))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>"}, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, f)
    return folder


def cases_for(tokenizer, conversations):
    cases = []
    for name, template in TEMPLATES.items():
        def render(messages, add_generation_prompt=False):
            return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                                 add_generation_prompt=add_generation_prompt)

        def ids_of(messages, add_generation_prompt=False):
            return list(tokenizer.apply_chat_template(messages, chat_template=template, tokenize=True,
                                                      add_generation_prompt=add_generation_prompt, return_dict=False))

        for messages in conversations:
            text = render(messages)
            ids = ids_of(messages)
            encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            if encoding["input_ids"] != ids:
                sys.exit(f"{name}: apply_chat_template's ids {ids} differ from its text's {encoding['input_ids']}")
            spans, prompts = [], []
            for i, message in enumerate(messages):
                if message["role"] == "assistant":
                    start, through = len(render(messages[:i], True)), render(messages[:i + 1])
                    # none ends only the last reply with EOS: a middle one's turn ends with its content
                    end = len(through) if text.startswith(through) else text.index(message["content"], start) + len(
                        message["content"])
                    spans.append((start, end))
                    prompts.append({"messages": i, "ids": ids_of(messages[:i], True)})
            trained = []
            for start, end in encoding["offset_mapping"]:
                end = max(end, start + 1)  # a zero-width token (a prepended "▁") counts at its position
                # A token straddling a turn's end into the next message's text (only none joins messages with
                # no separator) is that message's: the model must not learn to produce it as part of the reply.
                trained.append(any(max(start, a) < min(end, b) and end <= b for a, b in spans))
            cases.append({"template": name, "messages": messages, "text": text, "ids": ids, "trained": trained,
                          "prompts": prompts})
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--llama2", required=True, help="directory holding Llama 2's tokenizer.json")
    parser.add_argument("--sentencepiece", required=True, help="a sentencepiece tokenizer.model")
    args = parser.parse_args()
    fixtures = {"templates": TEMPLATES, "tokenizers": {}}
    with tempfile.TemporaryDirectory() as work:
        sources = {"llama2_json": (os.path.join(args.llama2, "tokenizer.json"), CONVERSATIONS + [UNICODE]),
                   "sentencepiece": (args.sentencepiece, CONVERSATIONS)}  # its 200 pieces hold no CJK or emoji
        for kind, (path, conversations) in sources.items():
            try:
                from transformers import AutoTokenizer
                import transformers
                if not os.path.exists(path):
                    raise FileNotFoundError(f"{path} (made by the tokenizer_fixtures setup test)")
                tokenizer = AutoTokenizer.from_pretrained(model_directory(path, work))
                fixtures["tokenizers"][kind] = {"file": path, "transformers": transformers.__version__,
                                                "cases": cases_for(tokenizer, conversations)}
                count = len(fixtures["tokenizers"][kind]["cases"])
                print(f"make_builtin_template_fixtures: {kind}: {count} cases", file=sys.stderr)
            except Exception as error:  # a download that failed, or no protobuf for the .model: the test warns
                reason = f"{type(error).__name__}: {error}"
                print(f"make_builtin_template_fixtures: SKIPPED {kind}: {reason}", file=sys.stderr)
                fixtures["tokenizers"][kind] = {"unavailable": reason}
    with open(args.out + ".tmp", "w") as f:
        json.dump(fixtures, f, ensure_ascii=False)
    os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
