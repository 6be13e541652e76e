// The tokenizer reference: Hugging Face's `tokenizers` (its official Node
// binding, the Rust library behind Python's tokenizers and transformers).
// node tokenizer_reference.js TOKENIZER.json IN.jsonl
// Each input line is {"text": ...} (encoded without special tokens, as
// {"ids": [...]}) or {"ids": [...], "skip_special_tokens": bool} (decoded,
// as {"text": ...}); one output line per input line.
const fs = require('fs');
const {Tokenizer} = require('tokenizers');

async function main() {
  const [tokenizerPath, inputPath] = process.argv.slice(2);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const out = [];
  for (const line of fs.readFileSync(inputPath, 'utf8').split('\n')) {
    if (!line) continue;
    const item = JSON.parse(line);
    if (typeof item.text === 'string') {
      const encoding =
          await tokenizer.encode(item.text, null, {addSpecialTokens: false});
      out.push(JSON.stringify({ids: Array.from(encoding.getIds())}));
    } else {
      const text =
          await tokenizer.decode(item.ids, Boolean(item.skip_special_tokens));
      out.push(JSON.stringify({text}));
    }
  }
  fs.writeFileSync(1, out.join('\n') + '\n');
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
