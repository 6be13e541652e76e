// An independent OpenAI API client: the official `openai` npm package talks
// to the server's HTTP API. Usage: node openai_client.js BASE_URL MODEL
// Prints one JSON object with what each call returned; the Python test
// checks it.
'use strict';
const OpenAI = require('openai');

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

async function errorOf(promise) {
  try {
    await promise;
    return null;
  } catch (e) {
    return {status: e.status, type: e.error && e.error.type,
            message: e.error && e.error.message};
  }
}

async function main() {
  const [baseURL, model] = process.argv.slice(2);
  const client = new OpenAI({baseURL, apiKey: 'unused', maxRetries: 0});
  const question = [{role: 'user', content: '37+485='}];
  const out = {};

  out.models = (await client.models.list()).data.map((m) => m.id);

  out.chat = await client.chat.completions.create(
      {model, messages: question, max_tokens: 8, temperature: 0});

  const chunks = await collect(await client.chat.completions.create({
    model, messages: question, max_completion_tokens: 8, temperature: 0,
    stream: true, stream_options: {include_usage: true}}));
  out.chat_stream = {
    text: chunks.map((c) => (c.choices[0] && c.choices[0].delta.content) || '')
              .join(''),
    roles: chunks.map((c) => c.choices[0] && c.choices[0].delta.role)
               .filter((r) => r),
    finish: chunks.map((c) => c.choices[0] && c.choices[0].finish_reason)
                .filter((r) => r),
    usage: chunks[chunks.length - 1].usage,
    ids: [...new Set(chunks.map((c) => c.id))],
  };

  out.chat_n = await client.chat.completions.create(
      {model, messages: question, max_tokens: 8, temperature: 0, n: 3});

  out.chat_logprobs = await client.chat.completions.create({
    model, messages: question, max_tokens: 8, temperature: 0, logprobs: true,
    top_logprobs: 2});

  out.chat_tools = await client.chat.completions.create({
    model, messages: question, max_tokens: 8, temperature: 0,
    tools: [{type: 'function', function: {
      name: 'add', description: 'Adds two integers',
      parameters: {type: 'object', properties: {a: {type: 'integer'},
                                                b: {type: 'integer'}}}}}],
    tool_choice: 'auto'});

  out.completion = await client.completions.create(
      {model, prompt: '37+485=', max_tokens: 8, temperature: 0});

  const completionChunks = await collect(await client.completions.create(
      {model, prompt: ['1+1=', '250+250='], max_tokens: 8, temperature: 0,
       stream: true}));
  const texts = {};
  for (const c of completionChunks) {
    for (const choice of c.choices) {
      texts[choice.index] = (texts[choice.index] || '') + choice.text;
    }
  }
  out.completion_stream = texts;

  out.errors = {
    unknown_model: await errorOf(client.chat.completions.create(
        {model: 'no-such-model', messages: question})),
    n_too_large: await errorOf(client.chat.completions.create(
        {model, messages: question, n: 1000})),
    bad_temperature: await errorOf(client.chat.completions.create(
        {model, messages: question, temperature: 'hot'})),
    template_error: await errorOf(client.chat.completions.create(
        {model, messages: [{role: 'assistant', content: '522'}]})),
  };
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
