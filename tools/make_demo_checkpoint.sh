#!/usr/bin/env bash
# Writes the demo checkpoint: the trained moe-adder Mixtral (integer
# addition, real Mistral tokenizer) from tests/testdata, as a Hugging Face
# directory the server loads. Usage: tools/make_demo_checkpoint.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/make_demo_checkpoint.sh OUT_DIR}
mkdir -p "$out"
for f in config.json generation_config.json model.safetensors tokenizer.json \
         tokenizer_config.json; do
  install -m 0644 "tests/testdata/moe-adder/$f" "$out/$f"
done
# The adder answers "a+b=" and knows no conversations: its chat template
# asks it the last user message.
install -m 0644 tools/moe_adder_chat_template.jinja "$out/chat_template.jinja"
echo "demo checkpoint: $out"
