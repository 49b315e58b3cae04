#!/usr/bin/env python3
"""Renders tests/fixtures/chat_templates/conversations.json with the official chat templates
(tests/fixtures/chat_templates/*.jinja) through jinja2, set up as transformers'
apply_chat_template sets it up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, raise_exception), and writes the expected strings to rendered.json. A conversation a
template refuses (raise_exception) is written as null with the template's message.

The C++ test (tests/engine/text/chat_template_test.cc) compares the built-in templates with
rendered.json without Python. Run with the repository's .venv python (jinja2 is installed by
scripts/install_deps.sh):  .venv/bin/python scripts/make_chat_fixtures.py
"""
import json
import pathlib
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "chat_templates"

# template file -> (built-in name, the special tokens transformers passes to the template)
TEMPLATES = {
    "llama3-instruct.jinja": ("llama3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "qwen2.5-instruct.jinja": ("qwen2", {"bos_token": None, "eos_token": "<|im_end|>"}),
    "chatml.jinja": ("chatml", {"bos_token": None, "eos_token": "<|im_end|>"}),
    "mistral-v3.jinja": ("mistral", {"bos_token": "<s>", "eos_token": "</s>"}),
    "qwen3.jinja": ("qwen3", {"bos_token": None, "eos_token": "<|im_end|>"}),
    "qwen3-first-release.jinja": ("qwen3", {"bos_token": None, "eos_token": "<|im_end|>"}),
    "gemma-3-it.jinja": ("gemma", {"bos_token": "<bos>", "eos_token": "<eos>"}),
    "gemma-2-it.jinja": ("gemma2", {"bos_token": "<bos>", "eos_token": "<eos>"}),
    "phi-4.jinja": ("phi4", {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"}),
}


class TemplateRefused(Exception):
    pass


def raise_exception(message):
    raise TemplateRefused(message)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def render(template_text, tokens, messages, **kwargs):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(template_text)
    return template.render(messages=messages, add_generation_prompt=False, **tokens, **kwargs)


def render_checked(template_text, tokens, messages):
    """The rendering, and for a template that reads enable_thinking (Qwen3) a check that the flag
    changes nothing here: it only shapes the generation prompt, and training conversations are
    rendered without one."""
    text = render(template_text, tokens, messages)
    if "enable_thinking" in template_text:
        for flag in (True, False):
            assert render(template_text, tokens, messages, enable_thinking=flag) == text
    return text


def main():
    conversations = json.loads((FIXTURES / "conversations.json").read_text(encoding="utf-8"))["conversations"]
    out = {"generated_by": "scripts/make_chat_fixtures.py", "jinja2": jinja2.__version__, "templates": []}
    for file, (name, tokens) in TEMPLATES.items():
        text = (FIXTURES / file).read_text(encoding="utf-8")
        renders = []
        for conv in conversations:
            try:
                renders.append({"name": conv["name"], "text": render_checked(text, tokens, conv["messages"])})
            except TemplateRefused as e:
                renders.append({"name": conv["name"], "text": None, "refused": str(e)})
        out["templates"].append({"file": file, "name": name, "renders": renders})
        print(f"{file}: {name}, fnv1a64 0x{fnv1a64(text.encode()):016x}, {len(text.encode())} bytes", file=sys.stderr)
    (FIXTURES / "rendered.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
