#!/usr/bin/env python3
"""Regenerates tests/fixtures/tokenizers/: small tokenizers trained with Hugging Face `tokenizers`
itself on the committed training corpus (train.txt), one per supported family, and the ids and
decoded text HF gives for every line of the committed test corpus. The C++ tests
(tests/engine/text/tokenizer_hf_test.cc) compare against these files without Python.

  .venv/bin/python -m pip install tokenizers && .venv/bin/python scripts/make_tokenizer_fixtures.py

Writes NAME/tokenizer.json and NAME/expected.jsonl ({"text", "ids", "decoded"} per line) for
NAME in gpt2, llama3, qwen2, llama2 (Prepend+Replace normalizer, byte fallback) and mistral
(Metaspace pre-tokenizer, prepend_scheme first, byte fallback), plus test_corpus.jsonl.
"""
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizers")

GPT2_PATTERN = None  # ByteLevel(use_regex=True) carries it
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SP_SPECIALS = ["<unk>", "<s>", "</s>"]
NON_SPECIAL = "MegaTrain"  # an added token that is not special (normalized=True, as add_tokens sets it)

# The test corpus: every line is encoded by HF and by the C++ tokenizer.
TEST_LINES = [
    "",
    " ",
    "Hello world",
    "Hello, world! How are you doing today?",
    "  leading and trailing spaces  ",
    "multiple     spaces\tand\ttabs\nand\nnewlines\r\nand CRLF\n\n\n",
    "\n",
    "\t\t\t",
    "It's what they're saying: we've, I'm, you'll, he'd, IT'S, THEY'RE, don't, can't",
    "Numbers: 0 7 42 123 1234 12345 3.14159 -2.5e10 1,000,000 and 98765432109876543210",
    "Phone +1 (555) 010-9999, date 2024-01-31, time 12:34:56.",
    "日本語のテキストです。東京は大きい都市です。",
    "中文文本：你好，世界！机器学习很有趣。",
    "한국어 텍스트입니다. 안녕하세요!",
    "العربية: مرحبا بالعالم، كيف حالك؟",
    "हिन्दी: नमस्ते दुनिया, आप कैसे हैं?",
    "Русский текст: Привет, мир! Ёжик в тумане.",
    "Ελληνικά: Γειά σου Κόσμε",
    "Accents: café naïve résumé façade Ångström São Paulo Zürich œuvre",
    "Decomposed: cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m",
    "Hangul jamo: \u1100\u1161\u11a8 and compatibility: ﬁ ﬀ ① ㎏ Ⅻ",
    "Emoji: 😀 🎉 👍 ❤️ 🚀",
    "ZWJ: 👨‍👩‍👧‍👦 👩‍💻 🏳️‍🌈 and skin tones: 👍🏻 👍🏿 👋🏽",
    "Flags: 🇺🇸 🇯🇵 🇩🇪",
    "Special tokens: <|endoftext|> and <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<s>Hello</s> <s> spaced </s>",
    "<unk> is unknown, </s></s><s>",
    "Glued<|endoftext|>text<|endoftext|><|endoftext|>",
    "MegaTrain trains big models; megatrain and MegaTrainer and  MegaTrain.",
    "code: def f(x):\n    return x ** 2  # square\n\tif (a != b) { c++; }",
    "URLs: https://example.com/path?q=1&r=2#frag and user@example.org",
    "Symbols: ~!@#$%^&*()_+-=[]{}|;':\",./<>?`",
    "Mixed: abc123def 456ghi ÅÄÖ123 ١٢٣ ४५६ 一二三",
    "Long number: 3141592653589793238462643383279502884197169399375105820974944592307816406286",
    "A very long word: pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious",
    "Repeated: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!!!!!!!! ................",
    "Unicode spaces: a\u00a0b\u2003c\u3000d\u2009e",
    "Control: \u0000 \u0007 \u001b[31mred\u001b[0m \u007f",
    "Rare chars not in training: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ 𓀀 ᚠᛇᚻ",
    "   ",
    "'s 't 're 've 'm 'll 'd",
    "trailing newline\n",
    "Stripping: a <mask> b  <mask>c <sep>  d <sep>\n\te<mask><sep>",
    "\u3000<mask>\u3000 <sep>\u00a0",
]


def training_text():
    with open(os.path.join(ROOT, "train.txt"), encoding="utf-8") as f:
        return f.read().splitlines()


def byte_level(pattern, nfc=False, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if pattern is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=BYTE_SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    tok.add_tokens([AddedToken(NON_SPECIAL, normalized=True, special=False)])
    if pattern is None:  # RoBERTa-style stripping tokens, on the GPT-2 fixture
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True),
                                AddedToken("<sep>", rstrip=True, special=True)])
    return tok


def sentencepiece_like(metaspace):
    """Llama 2 (normalizer Prepend+Replace) or Mistral/newer conversions (Metaspace pre-tokenizer),
    with <0xNN> byte-fallback tokens, trained with a limited alphabet so rare characters fall back."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SP_SPECIALS + byte_tokens, show_progress=False,
                                  limit_alphabet=300)
    tok.train_from_iterator(training_text(), trainer)
    # Byte tokens are vocabulary entries (as in Llama 2), not added tokens.
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in SP_SPECIALS]
    if metaspace:
        spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
        spec["normalizer"] = None
        spec["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
            {"type": "ByteFallback"}, {"type": "Fuse"}]}
    else:
        spec["pre_tokenizer"] = None
        spec["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        spec["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.add_tokens([AddedToken(NON_SPECIAL, normalized=True, special=False)])
    return tok


def main():
    families = {
        "gpt2": lambda: byte_level(None),
        "llama3": lambda: byte_level(LLAMA3_PATTERN, ignore_merges=True),
        "qwen2": lambda: byte_level(QWEN2_PATTERN, nfc=True),
        "llama2": lambda: sentencepiece_like(metaspace=False),
        "mistral": lambda: sentencepiece_like(metaspace=True),
    }
    with open(os.path.join(ROOT, "test_corpus.jsonl"), "w", encoding="utf-8") as f:
        for line in TEST_LINES:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    for name, make in families.items():
        tok = make()
        out = os.path.join(ROOT, name)
        os.makedirs(out, exist_ok=True)
        tok.save(os.path.join(out, "tokenizer.json"), pretty=False)
        tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))  # what the C++ side reads
        with open(os.path.join(out, "expected.jsonl"), "w", encoding="utf-8") as f:
            for line in TEST_LINES:
                ids = tok.encode(line, add_special_tokens=False).ids
                decoded = tok.decode(ids, skip_special_tokens=False)
                f.write(json.dumps({"text": line, "ids": ids, "decoded": decoded}, ensure_ascii=False) + "\n")
        print(f"{name}: vocab {tok.get_vocab_size()}, merges {len(json.loads(tok.to_str())['model']['merges'])}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
