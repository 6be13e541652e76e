"""The tokenizer against the reference itself, on inputs the golden files do
not hold: Hugging Face's `tokenizers` (its official Node binding, from the
npm registry: the Rust library behind Python's tokenizers and transformers)
and `ringmoe tokenize` must give the same ids for random strings and the
same text for random id sequences (special tokens kept and skipped), for
every tokenizer in tests/testdata (gpt-oss's where its tokenizer.json is
present, see engine/tokenizer/test_data.cc).

The strings mix scripts (Latin with accents in NFC and NFD, Greek, Cyrillic,
Hebrew, Arabic, Devanagari, Thai, Hangul jamo and syllables, kana, CJK,
fullwidth forms, emoji with ZWJ and flags, supplementary planes), variation
selectors and zero-width characters, whitespace runs and line breaks,
digits, contractions, code and URLs, and special-token strings written in
the text. The id sequences mix byte tokens (byte fallback and byte-level
pieces that end mid-character), added and special tokens and ids past the
vocabulary."""
import json
import os
import random
import subprocess
import unittest

import harness

TOKENIZERS = "tests/testdata/tokenizers"
STRINGS = int(os.environ.get("TOKENIZER_REFERENCE_STRINGS", "1500"))
ID_SEQUENCES = int(os.environ.get("TOKENIZER_REFERENCE_ID_SEQUENCES", "1000"))
SEED = 20261126

RANGES = [
    (0x20, 0x7E), (0x20, 0x7E), (0x20, 0x7E), (0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A),
    (0x09, 0x0D), (0xA0, 0xFF), (0x100, 0x17F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
    (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF),
    (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x214F), (0x2190, 0x21FF), (0x3000, 0x303F),
    (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F),
    (0x1F900, 0x1F9FF), (0x10000, 0x1007F), (0x1D400, 0x1D4FF), (0xFE00, 0xFE0F), (0x200B, 0x200F),
]
PIECES = [
    "the", " the", "Hello", " world", "'s", "'t", "'re", "'ll", "'ve", "'m", "'d", "'S", "'LL",
    "\n", "\n\n", "\r\n", "  ", "   ", "\t", " \n ", "123", "1234567", "3.14", "-42", "ＡＢＣ",
    "ǅ", "İ", "ß", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>",
    "<｜begin▁of▁sentence｜>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<think>",
    "</think>", "▁", "▁▁", "😀", "👩\u200d👩\u200d👧", "🇯🇵", "e\u0301", "\u00e9", "ﬁ", "Å", "Ω",
    "½", "①", "²", "٣", "०", "https://x.org/a?b=c", "def f(x):\n    return x", "   \n\t  ",
    "ABCdef", "camelCase", "UPPER", "Ünïcödé", "naïve", "日本語", "中文字符", "한국어",
]


def random_string(rng):
    parts = []
    for _ in range(rng.randint(1, 12)):
        if rng.random() < 0.45:
            parts.append(rng.choice(PIECES))
            continue
        lo, hi = rng.choice(RANGES)
        parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6))))
    return "".join(parts)


def tokenizer_files():
    """(name, tokenizer.json) for every tokenizer present."""
    out = []
    for name in ("qwen3", "deepseek_v3", "mistral", "gpt_oss"):
        path = os.path.join(TOKENIZERS, name, "tokenizer.json")
        if name == "gpt_oss":
            # Too large for the repository: the shared data beside the checkout.
            checkout = os.path.realpath(os.path.join(TOKENIZERS, name, "cases.jsonl"))
            for _ in range(5):
                checkout = os.path.dirname(checkout)
            path = os.environ.get("RINGMOE_GPT_OSS_TOKENIZER_JSON") or os.path.join(
                os.path.dirname(checkout), "shared", "testdata", "tokenizers", name,
                "tokenizer.json")
        if os.path.exists(path):
            out.append((name, path))
    return out


def jsonl_lines(text):
    """JSON lines split at "\\n" only (str.splitlines also splits at U+2028
    and other characters a JSON string may hold raw)."""
    return [json.loads(line) for line in text.split("\n") if line]


class TokenizerReferenceTest(unittest.TestCase):
    def run_both(self, tokenizer, items, cli_flags):
        work = harness.tmpdir()
        reference_in = os.path.join(work, "reference.jsonl")
        with open(reference_in, "w", encoding="utf-8") as f:
            f.write("\n".join(json.dumps(item, ensure_ascii=False) for item in items) + "\n")
        reference = subprocess.run(
            ["node", os.path.join(harness.NODE_DIR, "tokenizer_reference.js"), tokenizer,
             reference_in], capture_output=True, text=True, timeout=600,
            env=dict(os.environ, NODE_PATH=harness.node_modules("tokenizers")))
        self.assertEqual(reference.returncode, 0, reference.stderr[-2000:])
        ours = subprocess.run(
            [os.environ["RINGMOE_CLI"], "tokenize", "--tokenizer", tokenizer, "--jsonl",
             reference_in, *cli_flags], capture_output=True, text=True, timeout=600)
        self.assertEqual(ours.returncode, 0, ours.stderr[-2000:])
        want, got = jsonl_lines(reference.stdout), jsonl_lines(ours.stdout)
        self.assertEqual(len(want), len(items))
        self.assertEqual(len(got), len(items))
        return want, got

    def test_random_strings_encode_as_the_reference_encodes_them(self):
        files = tokenizer_files()
        self.assertGreaterEqual(len(files), 3)
        for index, (name, path) in enumerate(files):
            with self.subTest(tokenizer=name):
                rng = random.Random(SEED + index)
                items = [{"text": random_string(rng)} for _ in range(STRINGS)]
                want, got = self.run_both(path, items, ["--add_special_tokens=false"])
                for item, w, g in zip(items, want, got):
                    self.assertEqual(g["ids"], w["ids"], json.dumps(item, ensure_ascii=False))

    def test_random_ids_decode_as_the_reference_decodes_them(self):
        for index, (name, path) in enumerate(tokenizer_files()):
            with self.subTest(tokenizer=name):
                with open(path, encoding="utf-8") as f:
                    spec = json.load(f)
                added = [t["id"] for t in spec.get("added_tokens", [])]
                vocab = max([max(spec["model"]["vocab"].values())] + added) + 1
                rng = random.Random(SEED + 100 + index)
                sequences = []
                for _ in range(ID_SEQUENCES):
                    ids = []
                    for _ in range(rng.randint(0, 12)):
                        x = rng.random()
                        if x < 0.15 and added:
                            ids.append(rng.choice(added))
                        elif x < 0.45:
                            ids.append(rng.randrange(300))  # bytes, byte fallback
                        elif x < 0.47:
                            ids.append(vocab + rng.randrange(10))  # names no token
                        else:
                            ids.append(rng.randrange(vocab))
                    sequences.append(ids)
                for skip in (False, True):
                    items = [{"ids": ids, "skip_special_tokens": skip} for ids in sequences]
                    want, got = self.run_both(
                        path, items, ["--decode", "--skip_special_tokens=%s" % str(skip).lower()])
                    for item, w, g in zip(items, want, got):
                        self.assertEqual(g["text"], w["text"], json.dumps(item))


if __name__ == "__main__":
    unittest.main()
