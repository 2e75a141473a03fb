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

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

HEADS = 12
EPS = 1e-12


class _Graph:
    """Collects nodes and weights; names are generated."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

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
        out = self.op("MatMul", integers, self.const(np.ascontiguousarray(levels.T)))
        out = self.op("Mul", self.op("Mul", out, row_scale), self.const(scale))
        return self.op("Add", out, self.const(bias.astype(np.float32)))


def minilm_graph(weights_file: Path, *, layers: int, int8: bool) -> bytes:
    """The serialised ONNX model: ``input_ids`` and ``attention_mask`` (int64, ``[B, L]``)
    in, ``vectors`` (float32 ``[B, hidden]``, mean-pooled, L2-normalised) out."""
    from onnx import TensorProto, helper
    from safetensors.numpy import load_file

    w = load_file(str(weights_file))
    g = _Graph()
    hidden = w["embeddings.word_embeddings.weight"].shape[1]
    head = hidden // HEADS
    width = g.op("Gather", g.op("Shape", "input_ids"), g.const(np.array([1], np.int64)), axis=0)
    positions = g.op(
        "Slice",
        g.const(w["embeddings.position_embeddings.weight"]),
        g.const(np.array([0], np.int64)),
        width,
        g.const(np.array([0], np.int64)),
    )
    x = g.op("Gather", g.const(w["embeddings.word_embeddings.weight"]), "input_ids", axis=0)
    x = g.op(
        "Add", g.op("Add", x, positions), g.const(w["embeddings.token_type_embeddings.weight"][0])
    )
    x = g.layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
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
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "width"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "width"]),
        ],
        [helper.make_tensor_value_info("vectors", TensorProto.FLOAT, ["batch", hidden])],
        initializer=g.weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


class OnnxMiniLM:
    """An onnxruntime session over :func:`minilm_graph`."""

    def __init__(
        self,
        weights_file: Path,
        *,
        layers: int,
        int8: bool,
        threads: int = 0,
    ) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            minilm_graph(weights_file, layers=layers, int8=int8),
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
        (out,) = self.session.run(["vectors"], {"input_ids": tokens, "attention_mask": mask})
        return out
