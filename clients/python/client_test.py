"""Unit tests of ringmoe_client that need no server: request building
(explicit zeros must reach the wire) and the KServe BYTES encoding."""
import unittest

from ringmoe_client import client


class ClientTest(unittest.TestCase):
    def test_unset_fields_stay_unset_and_zero_is_sent(self):
        c = client.Client("127.0.0.1:1")
        req = c.generate_request(input_ids=[1, 2])
        self.assertFalse(req.HasField("max_tokens"))
        self.assertFalse(req.sampling.HasField("temperature"))
        req = c.generate_request(input_ids=[1, 2], max_tokens=0, temperature=0.0, seed=0)
        self.assertTrue(req.HasField("max_tokens"))
        self.assertTrue(req.sampling.HasField("temperature"))
        self.assertTrue(req.sampling.HasField("seed"))
        self.assertEqual(list(req.input_ids), [1, 2])
        c.close()

    def test_bytes_round_trip(self):
        values = [b"37+485=", b"", b"\xe2\x82\xac"]
        raw = client._encode_bytes(values)
        self.assertEqual(raw[:4], b"\x07\x00\x00\x00")
        self.assertEqual(client._decode_bytes(raw), values)

    def test_text_infer_request_parameters(self):
        req = client.Client.text_infer_request("m", "hi", max_tokens=8, temperature=0.5,
                                               stream=True)
        self.assertEqual(req.parameters["max_tokens"].int64_param, 8)
        self.assertEqual(req.parameters["temperature"].double_param, 0.5)
        self.assertTrue(req.parameters["stream"].bool_param)
        self.assertEqual(req.inputs[0].datatype, "BYTES")


if __name__ == "__main__":
    unittest.main()
