"""The Client class: one channel, the three services, plain Python types."""
import json
import struct
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence

import grpc

from ringmoe_client._pb import generation_pb2, generation_pb2_grpc
from ringmoe_client._pb import grpc_service_pb2, grpc_service_pb2_grpc
from ringmoe_client._pb import health_pb2, health_pb2_grpc

FINISH_REASONS = {
    generation_pb2.FINISH_REASON_UNSPECIFIED: "",
    generation_pb2.FINISH_REASON_STOP: "stop",
    generation_pb2.FINISH_REASON_LENGTH: "length",
    generation_pb2.FINISH_REASON_CANCELLED: "cancelled",
    generation_pb2.FINISH_REASON_ERROR: "error",
}


class GenerateResult(NamedTuple):
    text: str
    token_ids: List[int]
    logprobs: List[float]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    time_to_first_token_s: Optional[float] = None


def _encode_bytes(values: Sequence[bytes]) -> bytes:
    """KServe raw BYTES: each element a 4-byte little-endian length, then it."""
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def _decode_bytes(raw: bytes) -> List[bytes]:
    out, i = [], 0
    while i < len(raw):
        (n,) = struct.unpack_from("<I", raw, i)
        out.append(raw[i + 4:i + 4 + n])
        i += 4 + n
    return out


class Client:
    """A connection to one ringmoe_server. Thread-safe, like its channel."""

    def __init__(self, target: str, timeout: Optional[float] = None):
        self.target = target
        self.timeout = timeout  # default per-call deadline, seconds
        self.channel = grpc.insecure_channel(target)
        self.generation = generation_pb2_grpc.GenerationStub(self.channel)
        self.kserve = grpc_service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.health_stub = health_pb2_grpc.HealthStub(self.channel)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _timeout(self, timeout):
        return self.timeout if timeout is None else timeout

    # grpc.health.v1 ------------------------------------------------------
    def health(self, service: str = "", timeout: Optional[float] = 5.0) -> str:
        """SERVING, NOT_SERVING, ... for `service` ("" = the whole server)."""
        r = self.health_stub.Check(health_pb2.HealthCheckRequest(service=service),
                                   timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)

    def wait_ready(self, timeout: float = 30.0):
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    # ringmoe.v1.Generation -----------------------------------------------
    def generate_request(self, text: str = "", input_ids: Iterable[int] = (),
                         max_tokens: Optional[int] = None,
                         temperature: Optional[float] = None, top_k: int = 0,
                         top_p: Optional[float] = None, min_p: float = 0.0,
                         repetition_penalty: Optional[float] = None,
                         presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                         seed: Optional[int] = None, stop: Iterable[str] = (),
                         stop_token_ids: Iterable[int] = (), ignore_eos: bool = False,
                         logprobs: bool = False, add_special_tokens: Optional[bool] = None,
                         model: str = "", request_id: str = "",
                         messages: Iterable[dict] = (), tools: Optional[list] = None,
                         chat_template_kwargs: Optional[dict] = None,
                         add_generation_prompt: Optional[bool] = None):
        sampling = generation_pb2.SamplingParameters(
            top_k=top_k, min_p=min_p, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty)
        # Unset fields keep the server's defaults; set ones (even 0) count.
        if temperature is not None:
            sampling.temperature = temperature
        if top_p is not None:
            sampling.top_p = top_p
        if repetition_penalty is not None:
            sampling.repetition_penalty = repetition_penalty
        if seed is not None:
            sampling.seed = seed
        req = generation_pb2.GenerateRequest(
            model=model, text=text, input_ids=list(input_ids), sampling=sampling,
            stop=list(stop), stop_token_ids=list(stop_token_ids), ignore_eos=ignore_eos,
            logprobs=logprobs, request_id=request_id)
        if max_tokens is not None:
            req.max_tokens = max_tokens
        if add_special_tokens is not None:
            req.add_special_tokens = add_special_tokens
        # A conversation (OpenAI-style dicts), rendered by the model's chat
        # template on the server.
        for m in messages:
            msg = req.messages.add(role=m["role"], content=m.get("content") or "")
            if m.get("reasoning_content"):
                msg.reasoning_content = m["reasoning_content"]
            if m.get("tool_calls"):
                msg.tool_calls_json = json.dumps(m["tool_calls"])
            if m.get("tool_call_id"):
                msg.tool_call_id = m["tool_call_id"]
            if m.get("name"):
                msg.name = m["name"]
        if tools is not None:
            req.tools_json = json.dumps(tools)
        if chat_template_kwargs is not None:
            req.chat_template_kwargs_json = json.dumps(chat_template_kwargs)
        if add_generation_prompt is not None:
            req.add_generation_prompt = add_generation_prompt
        return req

    def generate(self, timeout: Optional[float] = None, **kwargs):
        """Streams GenerateResponse messages. The returned iterator is also a
        grpc.Call: .cancel() stops the generation on the server."""
        return self.generation.Generate(self.generate_request(**kwargs),
                                        timeout=self._timeout(timeout))

    def generate_text(self, timeout: Optional[float] = None, **kwargs) -> GenerateResult:
        """Runs a generation to the end and returns the whole result."""
        import time
        start = time.monotonic()
        ttft = None
        text, ids, lps = [], [], []
        last = None
        for r in self.generate(timeout=timeout, **kwargs):
            if ttft is None and r.token_ids:
                ttft = time.monotonic() - start
            text.append(r.text)
            ids.extend(r.token_ids)
            lps.extend(r.logprobs)
            last = r
        return GenerateResult("".join(text), ids, lps, FINISH_REASONS[last.finish_reason],
                              last.usage.prompt_tokens, last.usage.completion_tokens, ttft)

    def tokenize(self, text: str, add_special_tokens: bool = True, model: str = "") -> List[int]:
        r = self.generation.Tokenize(generation_pb2.TokenizeRequest(
            model=model, text=text, add_special_tokens=add_special_tokens),
            timeout=self._timeout(None))
        return list(r.ids)

    def detokenize(self, ids: Iterable[int], skip_special_tokens: bool = False,
                   model: str = "") -> str:
        r = self.generation.Detokenize(generation_pb2.DetokenizeRequest(
            model=model, ids=list(ids), skip_special_tokens=skip_special_tokens),
            timeout=self._timeout(None))
        return r.text

    def model_info(self, model: str = ""):
        return self.generation.GetModelInfo(generation_pb2.GetModelInfoRequest(model=model),
                                            timeout=self._timeout(None))

    # inference.GRPCInferenceService (KServe v2) ----------------------------
    def server_live(self) -> bool:
        return self.kserve.ServerLive(grpc_service_pb2.ServerLiveRequest(),
                                      timeout=self._timeout(None)).live

    def server_ready(self) -> bool:
        return self.kserve.ServerReady(grpc_service_pb2.ServerReadyRequest(),
                                       timeout=self._timeout(None)).ready

    def model_ready(self, name: str, version: str = "") -> bool:
        return self.kserve.ModelReady(grpc_service_pb2.ModelReadyRequest(
            name=name, version=version), timeout=self._timeout(None)).ready

    def server_metadata(self):
        return self.kserve.ServerMetadata(grpc_service_pb2.ServerMetadataRequest(),
                                          timeout=self._timeout(None))

    def model_metadata(self, name: str, version: str = ""):
        return self.kserve.ModelMetadata(grpc_service_pb2.ModelMetadataRequest(
            name=name, version=version), timeout=self._timeout(None))

    def infer_logits(self, model: str, rows: Sequence[Sequence[int]], dtype: str = "INT32",
                     raw: bool = True) -> List[List[float]]:
        """KServe ModelInfer: input_ids [batch, seq] -> last-position logits."""
        batch, seq = len(rows), len(rows[0]) if rows else 0
        flat = [v for row in rows for v in row]
        t = grpc_service_pb2.ModelInferRequest.InferInputTensor(
            name="input_ids", datatype=dtype, shape=[batch, seq])
        req = grpc_service_pb2.ModelInferRequest(model_name=model, inputs=[t])
        fmt = {"INT32": "i", "INT64": "q"}[dtype]
        if raw:
            req.raw_input_contents.append(struct.pack("<%d%s" % (len(flat), fmt), *flat))
        elif dtype == "INT32":
            req.inputs[0].contents.int_contents.extend(flat)
        else:
            req.inputs[0].contents.int64_contents.extend(flat)
        resp = self.kserve.ModelInfer(req, timeout=self._timeout(None))
        out = resp.outputs[0]
        b, vocab = out.shape
        if resp.raw_output_contents:
            values = struct.unpack("<%df" % (b * vocab), resp.raw_output_contents[0])
        else:
            values = out.contents.fp32_contents
        return [list(values[i * vocab:(i + 1) * vocab]) for i in range(b)]

    @staticmethod
    def text_infer_request(model: str, text: str, request_id: str = "",
                           raw: bool = True, **parameters):
        """A ModelInferRequest with text_input and settings as parameters
        (max_tokens=8, temperature=0.0, stream=True, ...)."""
        t = grpc_service_pb2.ModelInferRequest.InferInputTensor(
            name="text_input", datatype="BYTES", shape=[1])
        req = grpc_service_pb2.ModelInferRequest(model_name=model, id=request_id, inputs=[t])
        if raw:
            req.raw_input_contents.append(_encode_bytes([text.encode()]))
        else:
            req.inputs[0].contents.bytes_contents.append(text.encode())
        for key, value in parameters.items():
            p = req.parameters[key]
            if isinstance(value, bool):
                p.bool_param = value
            elif isinstance(value, int):
                p.int64_param = value
            elif isinstance(value, float):
                p.double_param = value
            else:
                p.string_param = str(value)
        return req

    @staticmethod
    def text_output(response) -> str:
        for i, out in enumerate(response.outputs):
            if out.name == "text_output":
                if response.raw_output_contents:
                    return _decode_bytes(response.raw_output_contents[i])[0].decode()
                return out.contents.bytes_contents[0].decode()
        return ""

    def infer_text(self, model: str, text: str, **parameters) -> str:
        """KServe ModelInfer with text_input: the whole text_output."""
        resp = self.kserve.ModelInfer(self.text_infer_request(model, text, **parameters),
                                      timeout=self._timeout(None))
        return self.text_output(resp)

    def stream_infer(self, model: str, text: str, **parameters) -> Iterator[str]:
        """KServe ModelStreamInfer (decoupled): yields text_output deltas."""
        req = self.text_infer_request(model, text, **parameters)
        for r in self.kserve.ModelStreamInfer(iter([req]), timeout=self._timeout(None)):
            if r.error_message:
                raise RuntimeError(r.error_message)
            yield self.text_output(r.infer_response)
