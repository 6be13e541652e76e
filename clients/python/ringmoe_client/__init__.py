"""Python client for ringmoe_server: ringmoe.v1.Generation, KServe v2
(inference.GRPCInferenceService) and grpc.health.v1, over grpcio.

    from ringmoe_client import Client
    with Client("127.0.0.1:8001") as c:
        for chunk in c.generate(text="37+485=", max_tokens=8, temperature=0):
            print(chunk.text, end="", flush=True)
"""
import pkgutil

# The generated stubs (ringmoe_client/_pb) may live in another directory on
# sys.path than these sources (bazel-bin/clients/python): merge them.
__path__ = pkgutil.extend_path(__path__, __name__)

from ringmoe_client.client import Client, GenerateResult, FINISH_REASONS  # noqa: E402

__all__ = ["Client", "GenerateResult", "FINISH_REASONS"]
