"""MiniLM as an ONNX graph run by onnxruntime: the encoder without torch.

Processes that only judge (the audit, score and skills workers, the gateway, ``safactory
audit``) embed short texts with a 3-6 layer BERT; torch costs them about 1 GB of memory and
seconds of import for a few small matrix products. This module writes the encoder's graph
straight from the model's safetensors file (no exporter, no torch): embeddings + LayerNorm,
then per layer self-attention and an erf-GELU feed-forward, each followed by residual +
LayerNorm, then mean pooling over the mask and L2 normalisation, so a run returns the
sentence vectors. onnxruntime fuses and threads it with its own CPU kernels.

``int8=True`` reproduces ``Int8Linear``'s numerics in float32 arithmetic: weights rounded to
int8 levels per output channel, activations per row, the product of those integers (exact
in float32 while a sum stays below 2**24) rescaled. Vectors then agree with the torch int8
path to float rounding (cosine above 0.998, as between two batchings of that path), so heads
trained on one serve the other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

if TYPE_CHECKING:
    import onnx

HEADS = 12
EPS = 1e-12


_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file as read-only arrays over a memory map of it: no
    copy, and the pages are the page cache's, shared by every process that reads the file."""
    import mmap
    import struct

    with path.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    (size,) = struct.unpack("<Q", mapped[:8])
    header = json.loads(mapped[8 : 8 + size])
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__" or spec["dtype"] not in _DTYPES:
            continue
        start, end = spec["data_offsets"]
        dtype = np.dtype(_DTYPES[spec["dtype"]])
        tensors[name] = np.frombuffer(
            mapped, dtype, (end - start) // dtype.itemsize, 8 + size + start
        ).reshape(spec["shape"])
    return tensors


class _Graph:
    """Collects nodes and weights; names are generated."""

    def __init__(self, integer: bool = False) -> None:
        from onnx import helper, numpy_helper

        self.integer = integer
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, value: np.ndarray) -> str:
        name = f"w{len(self.weights)}"
        self.weights.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, kind: str, *inputs: str, **attrs: object) -> str:
        self._count += 1
        out = f"t{self._count}"
        self.nodes.append(self.helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def layer_norm(self, x: str, weight: np.ndarray, bias: np.ndarray) -> str:
        return self.op(
            "LayerNormalization", x, self.const(weight), self.const(bias), axis=-1, epsilon=EPS
        )

    def linear(self, x: str, weight: np.ndarray, bias: np.ndarray, int8: bool) -> str:
        """``x @ W.T + b``; with ``int8``, on int8 levels per output channel and per row."""
        weight = weight.astype(np.float32)
        if not int8:
            out = self.op("MatMul", x, self.const(np.ascontiguousarray(weight.T)))
            return self.op("Add", out, self.const(bias.astype(np.float32)))
        scale = (np.maximum(np.abs(weight).max(axis=1), 1e-12) / np.float32(127.0)).astype(
            np.float32
        )
        levels = np.round(weight / scale[:, None]).astype(np.float32)
        row_max = self.op("ReduceMax", self.op("Abs", x), axes=[-1], keepdims=1)
        row_scale = self.op(
            "Div",
            self.op("Max", row_max, self.const(np.float32(1e-12))),
            self.const(np.float32(127.0)),
        )
        integers = self.op("Round", self.op("Div", x, row_scale))
        # the levels travel as int8 (a quarter of the bytes to serialise and parse)
        stored = self.const(np.ascontiguousarray(levels.T).astype(np.int8))
        if self.integer:  # activations shifted to uint8 (zero point 128): exact int32 sums
            shifted = self.op("Add", integers, self.const(np.float32(128.0)))
            unsigned = self.op("Cast", shifted, to=TensorProto.UINT8)
            product = self.op("MatMulInteger", unsigned, stored, self.const(np.uint8(128)))
            out = self.op("Cast", product, to=TensorProto.FLOAT)
        else:  # the runtime folds the cast once at load and packs it for its kernels
            out = self.op("MatMul", integers, self.op("Cast", stored, to=TensorProto.FLOAT))
        out = self.op("Mul", self.op("Mul", out, row_scale), self.const(scale))
        return self.op("Add", out, self.const(bias.astype(np.float32)))


def minilm_graph(
    w: dict[str, np.ndarray], *, layers: int, int8: bool, integer: bool = False
) -> bytes:
    """The serialised ONNX model of the encoder after its embedding lookup (which
    :class:`OnnxMiniLM` does over the memory-mapped table): ``embeddings`` (float32
    ``[B, L, hidden]``, word + position + token type) and ``attention_mask`` (int64
    ``[B, L]``) in, ``vectors`` (float32 ``[B, hidden]``, mean-pooled, L2-normalised) out.
    With ``int8`` and ``integer``, the products run on integers (:func:`integer_products`)."""
    from onnx import helper

    g = _Graph(integer and int8)
    hidden = w["embeddings.word_embeddings.weight"].shape[1]
    head = hidden // HEADS
    x = g.layer_norm("embeddings", w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    mask_bias = g.op(
        "Mul",
        g.op("Sub", g.const(np.float32(1.0)), g.op("Unsqueeze", mask, g.const(np.array([1, 2])))),
        g.const(np.float32(-1e9)),
    )
    split = g.const(np.array([0, 0, HEADS, head], np.int64))
    for i in range(layers):
        p = f"encoder.layer.{i}."

        def lin(x: str, name: str, p: str = p) -> str:
            return g.linear(x, w[p + name + ".weight"], w[p + name + ".bias"], int8)

        q = g.op(
            "Transpose", g.op("Reshape", lin(x, "attention.self.query"), split), perm=[0, 2, 1, 3]
        )
        k = g.op(
            "Transpose", g.op("Reshape", lin(x, "attention.self.key"), split), perm=[0, 2, 3, 1]
        )
        v = g.op(
            "Transpose", g.op("Reshape", lin(x, "attention.self.value"), split), perm=[0, 2, 1, 3]
        )
        scores = g.op("Mul", g.op("MatMul", q, k), g.const(np.float32(1.0 / np.sqrt(head))))
        probs = g.op("Softmax", g.op("Add", scores, mask_bias), axis=-1)
        context = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        context = g.op("Reshape", context, g.const(np.array([0, 0, hidden], np.int64)))
        x = g.layer_norm(
            g.op("Add", lin(context, "attention.output.dense"), x),
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        up = lin(x, "intermediate.dense")
        erf = g.op("Erf", g.op("Mul", up, g.const(np.float32(0.7071067811865476))))
        gelu = g.op(
            "Mul",
            g.op("Mul", up, g.const(np.float32(0.5))),
            g.op("Add", erf, g.const(np.float32(1.0))),
        )
        x = g.layer_norm(
            g.op("Add", lin(gelu, "output.dense"), x),
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
        )
    weights = g.op("Unsqueeze", mask, g.const(np.array([2])))
    summed = g.op("ReduceSum", g.op("Mul", x, weights), g.const(np.array([1])), keepdims=0)
    pooled = g.op("Div", summed, g.op("ReduceSum", weights, g.const(np.array([1])), keepdims=0))
    g.nodes.append(helper.make_node("LpNormalization", [pooled], ["vectors"], axis=-1, p=2))
    graph = helper.make_graph(
        g.nodes,
        "minilm",
        [
            helper.make_tensor_value_info(
                "embeddings", TensorProto.FLOAT, ["batch", "width", hidden]
            ),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "width"]),
        ],
        [helper.make_tensor_value_info("vectors", TensorProto.FLOAT, ["batch", hidden])],
        initializer=g.weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def integer_products() -> bool:
    """Whether int8 products run on integers here: only where the CPU multiplies uint8 by
    int8 into int32 in one instruction (VNNI, AMX), so every sum is exact. Elsewhere
    onnxruntime's uint8 × int8 kernel pairs products in 16 bits, which saturates on full-range
    levels, so the levels are multiplied in float32 instead (exact too, and on this class
    about as fast). An AVX2 cap (``infra.compute``) counts as its CPU class."""
    from .compute import cpu_class

    flags = set(cpu_class()["flags"])  # type: ignore[arg-type]
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})


class OnnxMiniLM:
    """An onnxruntime session over :func:`minilm_graph`, the embedding lookup in numpy."""

    def __init__(
        self,
        weights_file: Path,
        *,
        layers: int,
        int8: bool,
        threads: int = 0,
        integer: bool | None = None,
    ) -> None:
        """``integer``: int8 products on integers (default: :func:`integer_products`)."""
        import onnxruntime as ort

        w = read_safetensors(weights_file)
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.enable_cpu_mem_arena = False  # a batch's activations are freed after it
        # idle threads sleep instead of spinning: they would take the core from the other
        # workers of a small machine (and from a path being timed beside this one)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        self.integer = int8 and (integer_products() if integer is None else integer)
        self.session = ort.InferenceSession(
            minilm_graph(w, layers=layers, int8=int8, integer=self.integer),
            options,
            providers=["CPUExecutionProvider"],
        )

    def vectors(self, ids: Sequence[Sequence[int]]) -> np.ndarray:
        """Sentence vectors of the token id rows (padded here to the longest)."""
        width = max(len(row) for row in ids)
        tokens = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for r, row in enumerate(ids):
            tokens[r, : len(row)] = row
            mask[r, : len(row)] = 1
        embeddings = self.word[tokens] + self.position[:width] + self.token_type
        feeds = {"embeddings": embeddings.astype(np.float32, copy=False), "attention_mask": mask}
        (out,) = self.session.run(["vectors"], feeds)
        return out
