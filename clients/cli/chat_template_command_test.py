"""`ringmoe chat-template` against the reference prompts: every gpt-oss case
(raised errors and the pinned strftime_now clock included), Mixtral's through
--chat_template, and a malformed line that gets its own error while the
lines around it still render."""
import json
import os
import subprocess
import sys
import tempfile

RINGMOE = sys.argv[1]
TOKENIZERS = "tests/testdata/tokenizers"


def run(args):
    out = subprocess.run([RINGMOE, "chat-template"] + args, capture_output=True,
                         text=True, check=True).stdout
    return [json.loads(line) for line in out.split("\n") if line]


def expected(case):
    if "error" in case:
        return {"error": case["error"]}
    return {"prompt": case["prompt"]}


def check(name, cases, results):
    failures = 0
    if len(cases) != len(results):
        print("FAIL %s: %d results for %d cases" % (name, len(results), len(cases)))
        return 1
    for case, got in zip(cases, results):
        if got != expected(case):
            print("FAIL %s %s: got %r" % (name, case.get("case_id"), got))
            failures += 1
    return failures


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    failures = 0
    gpt_oss = os.path.join(TOKENIZERS, "gpt_oss")
    cases_path = os.path.join(gpt_oss, "chat_templates.jsonl")
    failures += check("gpt_oss", read(cases_path),
                      run(["--tokenizer_dir", gpt_oss, "--jsonl", cases_path]))

    mistral = os.path.join(TOKENIZERS, "mistral")
    cases_path = os.path.join(mistral, "chat_templates.jsonl")
    failures += check("mistral", read(cases_path),
                      run(["--tokenizer_dir", mistral, "--chat_template",
                           os.path.join(mistral, "chat_template.jinja"),
                           "--jsonl", cases_path]))

    cases = read(os.path.join(TOKENIZERS, "qwen3", "chat.jsonl"))[:2]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps(cases[0]) + "\n{not json\n\n" + json.dumps(cases[1]) + "\n")
    results = run(["--tokenizer_dir", os.path.join(TOKENIZERS, "qwen3"),
                   "--jsonl", f.name])
    os.unlink(f.name)
    if (len(results) != 3 or results[0] != expected(cases[0]) or
            results[2] != expected(cases[1]) or
            not results[1].get("error", "").endswith(":2: not a JSON object")):
        print("FAIL malformed line: %r" % results)
        failures += 1

    print("%d failures" % failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
