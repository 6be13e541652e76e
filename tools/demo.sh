#!/usr/bin/env bash
# The README's first command: sets up the machine, builds the server and the
# clients the demo runs (`bazel build --config=opt //...` builds every test
# and benchmark too, minutes more on a fresh output tree), writes
# the demo checkpoint (moe-adder: a small trained Mixtral that adds integers,
# with the real Mistral tokenizer), starts ringmoe_server on loopback,
# streams generations through the Python client and a chat completion over
# the OpenAI-compatible HTTP API with curl, shows a few metrics and
# stops the server (SIGTERM: it drains and exits 0).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel build --config=opt //server:ringmoe_server //clients/cli:ringmoe \
  //clients/python:ringmoe_client
# The output tree of this build (the bazel-bin link can point elsewhere when
# builds with other options ran since).
bin=$(bazel info --config=opt bazel-bin)

work=$(mktemp -d "${TMPDIR:-/tmp}/ringmoe-demo.XXXXXX")
server_pid=""
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then kill "$server_pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT

bash tools/make_demo_checkpoint.sh "$work/moe-adder"
"$bin"/server/ringmoe_server --model "$work/moe-adder" --grpc_port=0 --metrics_port=0 \
  --http_port=0 \
  --ready_file="$work/ready.json" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1 600); do
  [[ -s $work/ready.json ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; exit 1; }
  sleep 0.1
done
read -r grpc_port metrics_port http_port < <(/usr/bin/python3 -c \
  'import json,sys; p=json.load(open(sys.argv[1])); print(p["grpc_port"], p["metrics_port"], p["http_port"])' \
  "$work/ready.json")
echo "== ringmoe_server on 127.0.0.1:$grpc_port (gRPC), :$http_port (OpenAI API)," \
  "metrics on :$metrics_port"

client=(env PYTHONPATH="clients/python:$bin/clients/python" /usr/bin/python3 -m ringmoe_client
        --server "127.0.0.1:$grpc_port")
echo "== health: $("${client[@]}" health)"
for prompt in "37+485=" "123+456=" "999+1="; do
  echo "== streaming '$prompt' through the Python client"
  "${client[@]}" generate --text "$prompt" --max_tokens 8 --temperature 0
done
echo "== the same through the C++ CLI: ringmoe generate --server"
"$bin"/clients/cli/ringmoe generate --server "127.0.0.1:$grpc_port" --prompt "250+250=" \
  --max_tokens 8 --json

echo "== a chat completion over HTTP, streamed (curl, OpenAI's API)"
curl -sN "http://127.0.0.1:$http_port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "moe-adder", "messages": [{"role": "user", "content": "37+485="}],
       "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}'

echo "== metrics (http://127.0.0.1:$metrics_port/metrics)"
curl -s "http://127.0.0.1:$metrics_port/metrics" | grep -E \
  '^ringmoe_(requests_total|generated_tokens_total|prompt_tokens_total|kv_cache_usage_ratio|time_to_first_token_seconds_(sum|count))' || true

echo "== stopping the server (SIGTERM)"
kill -TERM "$server_pid"
wait "$server_pid"
echo "== server exited with status $?"
server_pid=""
