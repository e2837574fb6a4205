"""Minimal safetensors writer/reader for the fixture scripts (no `safetensors` package on Debian 12).

Written from the format description (8-byte little-endian header length, JSON header with dtype/shape/
data_offsets per tensor and optional __metadata__, then raw little-endian data), independently of the C++ reader
it is used to test.
"""
import json
import struct

import torch

_DTYPES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}
_FROM_NAME = {name: dtype for dtype, name in _DTYPES.items()}


def _raw_bytes(tensor):
    tensor = tensor.detach().contiguous().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        # numpy has no bfloat16: reinterpret as int16 to get the raw bits
        return tensor.view(torch.int16).numpy().tobytes()
    return tensor.numpy().tobytes()


def save(path, tensors, metadata=None):
    """tensors: dict name -> torch.Tensor (insertion order kept)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, tensor in tensors.items():
        blob = _raw_bytes(tensor)
        header[name] = {"dtype": _DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # pad so the data section is 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def load(path):
    """Returns dict name -> torch.Tensor."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = _FROM_NAME[info["dtype"]]
        buf = bytearray(data[begin:end])
        if dtype in (torch.bfloat16, torch.float16):
            t = torch.frombuffer(buf, dtype=torch.int16).view(dtype)
        else:
            t = torch.frombuffer(buf, dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out
