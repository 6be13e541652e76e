// An independent client for the integration tests: Node.js with
// @grpc/grpc-js and @grpc/proto-loader, reading proto/*.proto at run time.
// Usage: node generate_client.js HOST:PORT PROTO_DIR CASES.json
// CASES.json: [{"input_ids": [...], "max_tokens": N}, ...]. Runs every case
// alone, then all of them at once, and prints one JSON object:
// {"live": bool, "sequential": [{ids, finish_reason, messages}], "concurrent": [...]}.
'use strict';
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [target, protoDir, casesPath] = process.argv.slice(2);
const load = (file) => grpc.loadPackageDefinition(protoLoader.loadSync(
    path.join(protoDir, file), {keepCase: true, longs: Number, enums: String, defaults: true}));
const generation = new (load('generation.proto').ringmoe.v1.Generation)(
    target, grpc.credentials.createInsecure());
const kserve = new (load('grpc_service.proto').inference.GRPCInferenceService)(
    target, grpc.credentials.createInsecure());

function generate(c) {
  return new Promise((resolve, reject) => {
    const ids = [];
    let finish = null;
    let messages = 0;
    const call = generation.Generate({
      input_ids: c.input_ids,
      max_tokens: c.max_tokens,
      sampling: {temperature: 0},
      ignore_eos: true,
    }, {deadline: Date.now() + 120000});
    call.on('data', (r) => {
      ids.push(...r.token_ids);
      messages += 1;
      if (r.finish_reason !== 'FINISH_REASON_UNSPECIFIED') finish = r.finish_reason;
    });
    call.on('error', reject);
    call.on('end', () => resolve({ids, finish_reason: finish, messages}));
  });
}

async function main() {
  const cases = JSON.parse(fs.readFileSync(casesPath, 'utf8'));
  const live = await new Promise((resolve, reject) => kserve.ServerLive(
      {}, {deadline: Date.now() + 30000}, (err, r) => (err ? reject(err) : resolve(r.live))));
  const sequential = [];
  for (const c of cases) sequential.push(await generate(c));
  const concurrent = await Promise.all(cases.map(generate));
  process.stdout.write(JSON.stringify({live, sequential, concurrent}) + '\n');
}

main().then(() => process.exit(0), (err) => {
  process.stderr.write(`node client failed: ${err.stack || err}\n`);
  process.exit(1);
});
