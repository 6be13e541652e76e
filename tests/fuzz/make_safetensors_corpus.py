#!/usr/bin/env python3
"""Writes the seed corpus for the safetensors fuzzer.

Seeds named valid_* must parse and invalid_* must be rejected: the replay test
checks both, so a seed that stops meaning what its name says is caught.
Run from anywhere; it rewrites corpus/safetensors/ beside this script.
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                   "safetensors")


def image(header, data=b"", pad=False):
    header = header.encode() if isinstance(header, str) else header
    if pad:  # Hugging Face pads with spaces so data starts 8-byte aligned.
        header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def counting(n):
    return bytes(i & 0xFF for i in range(n))


def entry(name, dtype, shape, begin, end):
    shape = ",".join(str(d) for d in shape)
    return f'"{name}":{{"dtype":"{dtype}","shape":[{shape}],' \
           f'"data_offsets":[{begin},{end}]}}'


def obj(*entries):
    return "{" + ",".join(entries) + "}"


SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2,
         "I16": 2, "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4,
         "U64": 8, "I64": 8, "F64": 8}


def all_dtypes():
    entries, offset = [], 0
    for i, (dtype, size) in enumerate(SIZES.items()):
        entries.append(entry(f"t{i}.{dtype.lower()}", dtype, [2], offset,
                             offset + 2 * size))
        offset += 2 * size
    return image(obj(*entries), counting(offset))


BASIC = obj('"__metadata__":{"format":"pt","num_cases":"1"}',
            entry("model.embed_tokens.weight", "BF16", [2, 4], 0, 16),
            entry("case0.logits", "F32", [2, 2], 16, 32),
            entry("case0.input_ids", "I32", [3], 32, 44))

SEEDS = {
    "valid_basic": image(BASIC, counting(44), pad=True),
    "valid_unpadded": image(BASIC, counting(44)),
    "valid_empty_header": image("{}"),
    "valid_metadata_only": image('{"__metadata__":{"a":"b","c":""}}'),
    "valid_gaps_empty_scalar": image(
        obj(entry("a", "U8", [3], 0, 3), entry("empty", "F32", [0, 7], 3, 3),
            entry("scalar", "I64", [], 8, 16), entry("b", "F16", [2], 20, 24)),
        counting(28)),
    "valid_all_dtypes": all_dtypes(),
    "valid_unicode_name": image(obj(entry("caf\\u00e9.\u00fcber", "U8", [1],
                                          0, 1)), b"\x07"),
    "invalid_too_short": b"\x02\x00\x00",
    "invalid_truncated": image(BASIC, counting(44), pad=True)[:-10],
    "invalid_header_len_past_end": struct.pack("<Q", 4096) + b"{}",
    "invalid_header_len_huge": struct.pack("<Q", 1 << 62) + b"{}",
    "invalid_malformed_json": image('{"a":{"dtype":"F32","shape":[1],'),
    "invalid_not_object": image("[1,2,3]"),
    "invalid_offset_past_end": image(obj(entry("w", "U8", [8], 4, 12)),
                                     counting(10)),
    "invalid_overlap": image(obj(entry("a", "F32", [4], 0, 16),
                                 entry("b", "F32", [2], 8, 16)), counting(16)),
    "invalid_wrong_byte_count": image(obj(entry("w", "BF16", [2, 4], 0, 8)),
                                      counting(8)),
    "invalid_duplicate_name": image(obj(entry("w", "U8", [4], 0, 4),
                                        entry("w", "U8", [4], 4, 8)),
                                    counting(8)),
    "invalid_unknown_dtype": image(obj(entry("w", "F12", [4], 0, 4)),
                                   counting(4)),
    "invalid_negative_dim": image(obj(entry("w", "U8", [-4], 0, 4)),
                                  counting(4)),
    "invalid_shape_overflow": image(
        obj(entry("w", "F64", [4294967296, 4294967296], 0, 8)), counting(8)),
    "invalid_begin_after_end": image(obj(entry("w", "U8", [0], 4, 2)),
                                     counting(4)),
    "invalid_metadata_not_string": image('{"__metadata__":{"n":5}}'),
    "invalid_nested": image('{"w":{"dtype":"U8","shape":[[4]],'
                            '"data_offsets":[0,4]}}', counting(4)),
    "invalid_nul_after_header": image(b"{}\x00{\"w\":1}"),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {OUT}")


if __name__ == "__main__":
    main()
