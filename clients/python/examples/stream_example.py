"""Streams one generation from a running ringmoe_server and prints it.

    bazel build //clients/python:ringmoe_client
    PYTHONPATH=clients/python:bazel-bin/clients/python \
        /usr/bin/python3 clients/python/examples/stream_example.py 127.0.0.1:8001 "37+485="
"""
import sys

from ringmoe_client import Client, FINISH_REASONS


def main():
    target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8001"
    prompt = sys.argv[2] if len(sys.argv) > 2 else "37+485="
    with Client(target, timeout=60) as client:
        info = client.model_info()
        print("model %s (%s), context %d tokens" % (info.name, info.architecture,
                                                    info.max_context_tokens))
        print(prompt, end="", flush=True)
        for chunk in client.generate(text=prompt, max_tokens=8, temperature=0):
            print(chunk.text, end="", flush=True)
            if chunk.finish_reason:
                print("\n[%s, %d prompt + %d generated tokens]" % (
                    FINISH_REASONS[chunk.finish_reason], chunk.usage.prompt_tokens,
                    chunk.usage.completion_tokens))


if __name__ == "__main__":
    main()
