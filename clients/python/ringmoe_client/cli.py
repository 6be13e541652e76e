"""python3 -m ringmoe_client: a small command line over Client.

    python3 -m ringmoe_client --server 127.0.0.1:8001 generate --text "37+485=" --max_tokens 8 --temperature 0
    python3 -m ringmoe_client --server 127.0.0.1:8001 generate --input_ids 1,2,3 --json
    python3 -m ringmoe_client --server 127.0.0.1:8001 tokenize --text "hello"
    python3 -m ringmoe_client --server 127.0.0.1:8001 info
    python3 -m ringmoe_client --server 127.0.0.1:8001 health
"""
import argparse
import json
import sys

import grpc

from ringmoe_client.client import Client, FINISH_REASONS


def _ids(text):
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv=None):
    p = argparse.ArgumentParser(prog="ringmoe_client")
    p.add_argument("--server", default="127.0.0.1:8001", help="HOST:PORT")
    p.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="stream a generation")
    g.add_argument("--text", default="")
    g.add_argument("--input_ids", type=_ids, default=[])
    g.add_argument("--max_tokens", type=int)
    g.add_argument("--temperature", type=float)
    g.add_argument("--top_k", type=int, default=0)
    g.add_argument("--top_p", type=float)
    g.add_argument("--seed", type=int)
    g.add_argument("--stop", action="append", default=[])
    g.add_argument("--ignore_eos", action="store_true")
    g.add_argument("--json", action="store_true",
                   help='print {"ids", "text", "finish_reason"} at the end instead of streaming')
    t = sub.add_parser("tokenize")
    t.add_argument("--text", required=True)
    d = sub.add_parser("detokenize")
    d.add_argument("--ids", type=_ids, required=True)
    sub.add_parser("info", help="GetModelInfo")
    sub.add_parser("health", help="grpc.health.v1 Check")
    args = p.parse_args(argv)

    with Client(args.server, timeout=args.timeout) as c:
        try:
            if args.command == "generate":
                kw = dict(text=args.text, input_ids=args.input_ids, max_tokens=args.max_tokens,
                          temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          seed=args.seed, stop=args.stop, ignore_eos=args.ignore_eos)
                if args.json:
                    r = c.generate_text(**kw)
                    print(json.dumps({"ids": r.token_ids, "text": r.text,
                                      "finish_reason": r.finish_reason}))
                    return 0
                last = None
                for chunk in c.generate(**kw):
                    sys.stdout.write(chunk.text)
                    sys.stdout.flush()
                    last = chunk
                print("\n[finish_reason=%s prompt_tokens=%d completion_tokens=%d]" % (
                    FINISH_REASONS[last.finish_reason], last.usage.prompt_tokens,
                    last.usage.completion_tokens))
            elif args.command == "tokenize":
                print(json.dumps({"ids": c.tokenize(args.text)}))
            elif args.command == "detokenize":
                print(json.dumps({"text": c.detokenize(args.ids)}))
            elif args.command == "info":
                print(c.model_info())
            elif args.command == "health":
                print(c.health())
        except grpc.RpcError as e:
            print("ringmoe_client: %s: %s" % (e.code().name, e.details()), file=sys.stderr)
            return 1
    return 0
