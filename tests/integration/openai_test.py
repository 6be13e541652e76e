"""The OpenAI-compatible HTTP API of the real server, driven by clients
written by others: the official `openai` npm package (chat and completions,
streamed and not, n, logprobs, tools, errors) and curl (server-sent events,
malformed bodies, a client that disconnects mid-stream)."""
import json
import os
import subprocess
import time
import unittest

import harness

TEMPLATE = "tools/moe_adder_chat_template.jinja"


def curl(*args, timeout=60):
    """(HTTP status, body) of a curl call."""
    out = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}"] + list(args),
                         capture_output=True, text=True, timeout=timeout)
    body, _, status = out.stdout.rpartition("\n")
    return int(status), body


class OpenAiApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.Server(harness.ADDER, "--chat_template=" + TEMPLATE,
                                    "--max_queue=64", name="moe-adder").start()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def post(self, path, body, *extra):
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return curl("-X", "POST", self.server.http + path, "-H",
                    "Content-Type: application/json", "--data-binary", data, *extra)

    def assert_error(self, status, body, want_status, want_message="", code=None):
        self.assertEqual(status, want_status, body)
        error = json.loads(body)["error"]
        self.assertIn(want_message, error["message"])
        # OpenAI's shape, its keys in its order, whichever layer answered.
        self.assertEqual(list(error), ["message", "type", "param", "code"], body)
        self.assertEqual(error["code"], code, body)
        return error

    def test_openai_npm_client(self):
        modules = harness.node_modules()
        out = subprocess.run(
            ["node", "tests/integration/node/openai_client.js", self.server.http + "/v1",
             "moe-adder"], capture_output=True, text=True, timeout=300,
            env=dict(os.environ, NODE_PATH=modules))
        self.assertEqual(out.returncode, 0, out.stderr)
        got = json.loads(out.stdout)
        self.assertEqual(got["models"], ["moe-adder"])

        chat = got["chat"]
        self.assertEqual(chat["object"], "chat.completion")
        self.assertEqual(chat["choices"][0]["message"]["role"], "assistant")
        self.assertEqual(chat["choices"][0]["message"]["content"], "522")
        self.assertEqual(chat["choices"][0]["finish_reason"], "stop")
        # BOS + "37+485=" as the Mistral tokenizer splits it.
        prompt_ids = json.loads(subprocess.run(
            [os.environ["RINGMOE_CLI"], "tokenize", "--model", harness.ADDER, "--text",
             "37+485="], capture_output=True, text=True, check=True).stdout)["ids"]
        self.assertEqual(chat["usage"]["prompt_tokens"], len(prompt_ids))
        self.assertEqual(chat["usage"]["total_tokens"],
                         chat["usage"]["prompt_tokens"] + chat["usage"]["completion_tokens"])

        stream = got["chat_stream"]
        self.assertEqual(stream["text"], "522")
        self.assertEqual(stream["roles"], ["assistant"])
        self.assertEqual(stream["finish"], ["stop"])
        self.assertEqual(stream["usage"], chat["usage"])
        self.assertEqual(len(stream["ids"]), 1)

        self.assertEqual([c["message"]["content"] for c in got["chat_n"]["choices"]],
                         ["522"] * 3)
        self.assertEqual([c["index"] for c in got["chat_n"]["choices"]], [0, 1, 2])

        logprobs = got["chat_logprobs"]["choices"][0]["logprobs"]["content"]
        self.assertEqual("".join(t["token"] for t in logprobs).strip(), "522")
        for t in logprobs:
            self.assertLessEqual(t["logprob"], 0)
            self.assertEqual(len(t["top_logprobs"]), 2)
            # Greedy: the chosen token is the most likely one.
            self.assertEqual(t["top_logprobs"][0]["token"], t["token"])
            self.assertAlmostEqual(t["top_logprobs"][0]["logprob"], t["logprob"], places=4)
            self.assertEqual(bytes(t["bytes"]).decode(), t["token"])

        tools = got["chat_tools"]["choices"][0]
        self.assertEqual(tools["message"]["content"], "522")
        self.assertNotIn("tool_calls", tools["message"])

        self.assertEqual(got["completion"]["choices"][0]["text"], "522")
        self.assertEqual(got["completion"]["object"], "text_completion")
        self.assertEqual(got["completion_stream"], {"0": "2", "1": "500"})

        errors = got["errors"]
        self.assertEqual(errors["unknown_model"]["status"], 404)
        self.assertIn("no-such-model", errors["unknown_model"]["message"])
        self.assertEqual(errors["n_too_large"]["status"], 400)
        self.assertIn("'n'", errors["n_too_large"]["message"])
        self.assertEqual(errors["bad_temperature"]["status"], 400)
        self.assertIn("'temperature' must be a number",
                      errors["bad_temperature"]["message"])
        self.assertEqual(errors["template_error"]["status"], 400)
        self.assertIn("moe-adder answers a user message",
                      errors["template_error"]["message"])

    def test_grpc_generate_renders_the_same_conversation(self):
        from ringmoe_client import Client
        import grpc
        with Client(self.server.target) as client:
            result = client.generate_text(
                messages=[{"role": "user", "content": "37+485="}], max_tokens=8,
                temperature=0, timeout=60)
            self.assertEqual(result.text, "522")
            with self.assertRaises(grpc.RpcError) as error:
                client.generate_text(messages=[{"role": "assistant", "content": "1"}],
                                     max_tokens=8, timeout=60)
            self.assertEqual(error.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("moe-adder answers a user message", error.exception.details())

    def test_curl_streams_server_sent_events(self):
        status, body = self.post("/v1/chat/completions", {
            "model": "moe-adder", "messages": [{"role": "user", "content": "250+250="}],
            "stream": True, "temperature": 0}, "-N")
        self.assertEqual(status, 200)
        events = [line[len("data: "):] for line in body.split("\n") if line.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        self.assertEqual(text, "500")
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "stop")
        self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))

    def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(self):
        chat = "/v1/chat/completions"
        ok = {"messages": [{"role": "user", "content": "2+2="}], "temperature": 0}
        cases = [
            ("{not json", 400, "not valid JSON"),
            ("[1, 2]", 400, "must be a JSON object"),
            (json.dumps({"messages": "hi"}), 400, "'messages' must be a non-empty list"),
            (json.dumps(dict(ok, max_tokens="10")), 400, "'max_tokens' must be an integer"),
            (json.dumps(dict(ok, max_tokens=0)), 400, "'max_tokens' must lie in"),
            (json.dumps(dict(ok, top_p=7)), 400, "top_p"),
            (json.dumps(dict(ok, stop=[1])), 400, "'stop'"),
            (json.dumps(dict(ok, stream_options={"include_usage": True})), 400,
             "only allowed with 'stream'"),
            (json.dumps(dict(ok, response_format={"type": "json_schema"})), 400,
             "not supported"),
            (json.dumps(dict(ok, tool_choice="required")), 400, "not supported"),
            (json.dumps(dict(ok, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "x"}}]}])), 400, "text only"),
            (json.dumps(dict(ok, max_tokens=100000)), 400, "max_tokens"),
            (json.dumps({"model": "x" * 100000, "messages": ok["messages"]}), 404,
             "does not exist"),
            (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "UTF-8"),
            (json.dumps({"a": 1, "a": 2}).replace('{"a": 2}', '{"a": 1, "a": 2}'), 400, ""),
            ("[" * 100000, 400, "nested deeper"),
        ]
        for body, want_status, want in cases:
            with self.subTest(body=str(body)[:60]):
                status, text = self.post(chat, body)
                error = self.assert_error(
                    status, text, want_status, want,
                    "model_not_found" if want_status == 404 else None)
                self.assertLess(len(error["message"]), 1000)
        # A body over the limit: 413, before it is read.
        big = os.path.join(harness.tmpdir(), "big.json")
        with open(big, "w") as f:
            f.write('{"prompt": "' + "1" * (9 << 20) + '"}')
        status, text = curl("-X", "POST", self.server.http + "/v1/completions", "-H",
                            "Content-Type: application/json", "--data-binary", "@" + big)
        self.assert_error(status, text, 413, "limit")
        # Wrong method, unknown path.
        self.assert_error(*curl(self.server.http + "/v1/chat/completions"), 405, "POST")
        self.assert_error(*curl(self.server.http + "/v2/nothing"), 404, "no route")
        # Still serving.
        status, text = self.post(chat, ok)
        self.assertEqual(status, 200, text)
        self.assertEqual(json.loads(text)["choices"][0]["message"]["content"], "4")
        status, text = curl(self.server.http + "/health")
        self.assertEqual(status, 200)
        self.assertGreaterEqual(self.server.metric("ringmoe_requests_total",
                                                   method="chat.completions",
                                                   status="INVALID_ARGUMENT"), 10)

    def test_disconnect_mid_stream_cancels_the_sequence(self):
        # A tiny model without a tokenizer, fed token ids; logprobs make every
        # token a chunk. The client reads the first event and hangs up.
        with harness.Server(os.path.join(harness.TINY, "mixtral")) as server:
            body = json.dumps({"prompt": [1, 2, 3, 4, 5], "max_tokens": 500,
                               "ignore_eos": True, "logprobs": 1, "stream": True})
            proc = subprocess.Popen(
                ["curl", "-sN", "-X", "POST", server.http + "/v1/completions", "-H",
                 "Content-Type: application/json", "--data-binary", body],
                stdout=subprocess.PIPE)
            first = proc.stdout.readline()
            self.assertTrue(first.startswith(b"data: "), first)
            proc.kill()
            proc.wait()
            self.assertEqual(server.wait_metric("ringmoe_requests_total", 1.0,
                                                method="completions", status="CANCELLED"),
                             1.0)
            self.assertEqual(server.wait_metric("ringmoe_kv_cache_used_blocks", 0.0), 0.0)
            self.assertEqual(server.wait_metric("ringmoe_running_sequences", 0.0), 0.0)
            self.assertLess(server.metric("ringmoe_generated_tokens_total"), 500)


if __name__ == "__main__":
    unittest.main()
