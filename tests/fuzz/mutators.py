"""Seeded mutators over the bundled inputs: ONNX models (protobuf-level), Spatial IR text
(token and line mutations), rule files, target TOML and input files.

`make_case(klass, seed, index, profile)` is a pure function of its arguments: every case
draws from `random.Random(f"{seed}:{klass}:{index}")`, so a run is reproduced exactly by
its seed and count. Profile "ci" keeps to the small models and the cheaper commands;
"bench" uses every example model and command.
"""

from __future__ import annotations

import io
import math
import random
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .harness import Case

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RULES = ROOT / "raptor" / "rules"
GOLDEN = [*sorted((ROOT / "tests" / "ir" / "golden").glob("*.spat")),
          EXAMPLES / "column_pairs.spat"]

CLASSES = ("onnx", "ir", "rules", "target", "inputs")
GROW = "fuzz-grow"
"""Appended rules named `fuzz-grow*` derive without end: each runs several seconds into the
saturation bounds, so the CI profile leaves them to the benchmark."""

Rng = random.Random
Choices = list[tuple[object, int]]


def _pick(rng: Rng, weighted: Choices) -> object:
    items, weights = zip(*weighted, strict=True)
    return rng.choices(items, weights=weights)[0]


def _ex(name: str) -> str:
    return str(EXAMPLES / name)


# ================================================================== ONNX models
MODELS_BENCH: Choices = [("mlp", 3), ("lenet", 3), ("resnet_block", 2), ("mobilenet_block", 2),
                         ("torch_cnn_torchscript", 2), ("torch_cnn_dynamo", 1), ("yolo_neck", 1)]
MODELS_CI: Choices = [("mlp", 2), ("lenet", 2), ("resnet_block", 1),
                      ("torch_cnn_torchscript", 1)]

ONNX_CMDS_BENCH: Choices = [
    (("solve", "{dir}/model.onnx", "--solver", "peft", "--out", "{out}"), 5),
    (("inspect", "{dir}/model.onnx"), 2),
    (("interpret", "{dir}/model.onnx", "--check"), 2),
    (("solve", "{dir}/model.onnx", "--solver", "cpsat", "--time-limit", "0.5", "--workers", "1",
      "--out", "{out}"), 1),
]
ONNX_CMDS_CI: Choices = [
    (("solve", "{dir}/model.onnx", "--solver", "peft", "--no-simulate", "--out", "{out}"), 2),
    (("inspect", "{dir}/model.onnx"), 2),
    (("interpret", "{dir}/model.onnx", "--check"), 1),
]

INTS = [0, -1, -7, 1, 2, 3, 5, 1000, 65535, 2**31 - 1, 2**62, -(2**31)]
FLOATS = [math.nan, math.inf, -math.inf, 0.0, -1.0, 1e30, 1e-30]
OPS = ["Conv", "Gemm", "MatMul", "Relu", "Add", "Mul", "Sub", "MaxPool", "AveragePool",
       "GlobalAveragePool", "Concat", "Reshape", "Flatten", "Softmax", "Sigmoid", "Clip",
       "BatchNormalization", "Transpose", "Slice", "Pad", "Resize", "Split", "Identity",
       "LSTM", "Loop", "If", "Foo", ""]
ATTR_NAMES = ["kernel_shape", "strides", "pads", "dilations", "group", "axis", "transA",
              "transB", "alpha", "beta", "perm", "auto_pad", "ceil_mode", "epsilon", "min",
              "max", "mode", "foo"]
ATTR_VALUES: list[object] = [0, -1, 3, 2**40, [1], [0, 0], [2, 2, 2, 2, 2, 2], [-1, -1],
                             1.5, math.nan, "SAME_UPPER", "VALID", "garbage", [1.0, 2.0]]
DTYPES = [TensorProto.DOUBLE, TensorProto.INT8, TensorProto.INT64, TensorProto.BOOL,
          TensorProto.STRING, TensorProto.FLOAT16, TensorProto.UNDEFINED, 999,
          TensorProto.UINT8, TensorProto.INT32, TensorProto.BFLOAT16, TensorProto.COMPLEX64]


@cache
def _model_bytes(name: str) -> bytes:
    return (EXAMPLES / f"{name}.onnx").read_bytes()


def _nodes_with(m: onnx.ModelProto, pred: Callable[[onnx.NodeProto], bool]
                ) -> list[onnx.NodeProto]:
    return [n for n in m.graph.node if pred(n)]


def _replace_nodes(m: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    copies = [onnx.NodeProto() for _ in nodes]
    for c, n in zip(copies, nodes, strict=True):
        c.CopyFrom(n)
    del m.graph.node[:]
    m.graph.node.extend(copies)


def _value_names(m: onnx.ModelProto) -> list[str]:
    names = [i.name for i in m.graph.input] + [i.name for i in m.graph.initializer]
    return names + [o for n in m.graph.node for o in n.output]


def _o_drop_input(m: onnx.ModelProto, rng: Rng) -> None:
    ns = _nodes_with(m, lambda n: len(n.input) > 0)
    n = rng.choice(ns)
    del n.input[rng.randrange(len(n.input))]


def _o_extra_input(m: onnx.ModelProto, rng: Rng) -> None:
    n = rng.choice(list(m.graph.node))
    n.input.append(rng.choice([*_value_names(m), "", "ghost"]))


def _o_rename_value(m: onnx.ModelProto, rng: Rng) -> None:
    n = rng.choice(list(m.graph.node))
    field = n.input if (n.input and rng.random() < 0.6) or not n.output else n.output
    field[rng.randrange(len(field))] = rng.choice(["ghost", "", *_value_names(m)])


def _o_swap_inputs(m: onnx.ModelProto, rng: Rng) -> None:
    n = rng.choice(_nodes_with(m, lambda n: len(n.input) > 1) or list(m.graph.node))
    ins = list(n.input)
    rng.shuffle(ins)
    del n.input[:]
    n.input.extend(ins)


def _o_drop_node(m: onnx.ModelProto, rng: Rng) -> None:
    del m.graph.node[rng.randrange(len(m.graph.node))]


def _o_dup_node(m: onnx.ModelProto, rng: Rng) -> None:
    nodes = list(m.graph.node)
    i = rng.randrange(len(nodes))
    nodes.insert(i + 1, nodes[i])
    _replace_nodes(m, nodes)


def _o_reorder(m: onnx.ModelProto, rng: Rng) -> None:
    nodes = list(m.graph.node)
    if rng.random() < 0.5:
        nodes.reverse()
    else:
        rng.shuffle(nodes)
    _replace_nodes(m, nodes)


def _o_self_loop(m: onnx.ModelProto, rng: Rng) -> None:
    n = rng.choice(_nodes_with(m, lambda n: len(n.input) > 0 and len(n.output) > 0))
    n.input[0] = n.output[0]


def _o_op_type(m: onnx.ModelProto, rng: Rng) -> None:
    rng.choice(list(m.graph.node)).op_type = rng.choice(OPS)


def _o_domain(m: onnx.ModelProto, rng: Rng) -> None:
    rng.choice(list(m.graph.node)).domain = rng.choice(["com.microsoft", "foo", "ai.onnx.ml"])


def _o_attr_value(m: onnx.ModelProto, rng: Rng) -> None:
    n = rng.choice(_nodes_with(m, lambda n: len(n.attribute) > 0) or list(m.graph.node))
    if not n.attribute:
        return _o_attr_add(m, rng)
    a = rng.choice(list(n.attribute))
    if a.type == onnx.AttributeProto.INT:
        a.i = rng.choice(INTS)
    elif a.type == onnx.AttributeProto.INTS and len(a.ints) and rng.random() < 0.7:
        a.ints[rng.randrange(len(a.ints))] = rng.choice(INTS)
    elif a.type == onnx.AttributeProto.INTS:
        vals = list(a.ints)
        if vals and rng.random() < 0.5:
            del vals[rng.randrange(len(vals))]
        else:
            vals.append(rng.choice(INTS))
        del a.ints[:]
        a.ints.extend(vals)
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = rng.choice(FLOATS)
    elif a.type == onnx.AttributeProto.FLOATS and len(a.floats):
        a.floats[rng.randrange(len(a.floats))] = rng.choice(FLOATS)
    elif a.type == onnx.AttributeProto.STRING:
        a.s = rng.choice([b"", b"FOO", b"\xff\xfe", b"SAME_LOWER", b"VALID"])
    elif a.type == onnx.AttributeProto.TENSOR:
        _mutate_tensor(a.t, rng)
    return None


def _o_attr_drop(m: onnx.ModelProto, rng: Rng) -> None:
    n = rng.choice(_nodes_with(m, lambda n: len(n.attribute) > 0) or list(m.graph.node))
    if n.attribute:
        del n.attribute[rng.randrange(len(n.attribute))]


def _o_attr_add(m: onnx.ModelProto, rng: Rng) -> None:
    n = rng.choice(list(m.graph.node))
    name = rng.choice(ATTR_NAMES)
    if rng.random() < 0.7:
        keep = [a for a in n.attribute if a.name != name]
        del n.attribute[:]
        n.attribute.extend(keep)
    n.attribute.append(helper.make_attribute(name, rng.choice(ATTR_VALUES)))


def _mutate_tensor(t: onnx.TensorProto, rng: Rng) -> None:
    kind = rng.choice(["dims", "dtype", "truncate", "values", "clear"])
    if kind == "dims":
        dims = list(t.dims)
        if dims and rng.random() < 0.7:
            i = rng.randrange(len(dims))
            dims[i] = rng.choice([0, 1, 2 * dims[i], max(dims[i] - 1, 0), dims[i] + 1, -1])
        elif dims and rng.random() < 0.5:
            dims.pop(rng.randrange(len(dims)))
        else:
            dims.insert(rng.randrange(len(dims) + 1), rng.choice([1, 2, 0]))
        del t.dims[:]
        t.dims.extend(dims)
    elif kind == "dtype":
        t.data_type = rng.choice(DTYPES)
    elif kind == "truncate":
        raw = t.raw_data
        if raw:
            t.raw_data = raw[: rng.randrange(len(raw))] if rng.random() < 0.7 else raw + b"\0" * 7
        else:
            t.data_type = rng.choice(DTYPES)
    elif kind == "values":
        try:
            arr = numpy_helper.to_array(t).copy()
        except Exception:
            return
        if arr.size and arr.dtype.kind == "f":
            flat = arr.reshape(-1)
            for _ in range(rng.randint(1, 3)):
                flat[rng.randrange(flat.size)] = rng.choice([np.nan, np.inf, -np.inf, 3e38])
            t.CopyFrom(numpy_helper.from_array(arr, t.name))
    else:
        t.ClearField("raw_data")
        t.ClearField("float_data")


def _o_initializer(m: onnx.ModelProto, rng: Rng) -> None:
    inits = m.graph.initializer
    if not inits:
        return _o_drop_node(m, rng)
    i = rng.randrange(len(inits))
    r = rng.random()
    if r < 0.15:
        del inits[i]
    elif r < 0.25:
        inits.append(inits[i])
    else:
        _mutate_tensor(inits[i], rng)
    return None


def _value_info_type(vi: onnx.ValueInfoProto) -> onnx.TypeProto.Tensor:
    return vi.type.tensor_type


def _o_graph_output(m: onnx.ModelProto, rng: Rng) -> None:
    outs = m.graph.output
    kind = rng.choice(["drop", "dup", "rename", "clear", "add-inner", "dtype", "shape"])
    o = outs[rng.randrange(len(outs))]
    if kind == "drop":
        del outs[rng.randrange(len(outs))]
    elif kind == "dup":
        outs.append(o)
    elif kind == "rename":
        o.name = rng.choice(["ghost", "", *_value_names(m)])
    elif kind == "clear":
        del outs[:]
    elif kind == "add-inner":
        n = rng.choice(list(m.graph.node))
        if n.output:
            outs.append(helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, None))
    elif kind == "dtype":
        _value_info_type(o).elem_type = rng.choice(DTYPES)
    else:
        _mutate_shape(_value_info_type(o), rng)


def _mutate_shape(tt: onnx.TypeProto.Tensor, rng: Rng) -> None:
    kind = rng.choice(["dim", "param", "clear", "add", "remove"])
    dims = tt.shape.dim
    if kind == "clear" or not len(dims):
        tt.ClearField("shape")
    elif kind == "dim":
        dims[rng.randrange(len(dims))].dim_value = rng.choice(
            [0, -1, 3, 2**31, 10**9, 7, 1])
    elif kind == "param":
        dims[rng.randrange(len(dims))].dim_param = rng.choice(["N", "batch", ""])
    elif kind == "add":
        dims.add().dim_value = rng.choice([1, 2, 0])
    else:
        del dims[rng.randrange(len(dims))]


def _o_graph_input(m: onnx.ModelProto, rng: Rng) -> None:
    ins = m.graph.input
    kind = rng.choice(["shape", "shape", "dtype", "drop", "add", "dup"])
    i = ins[rng.randrange(len(ins))]
    if kind == "shape":
        _mutate_shape(_value_info_type(i), rng)
    elif kind == "dtype":
        _value_info_type(i).elem_type = rng.choice(DTYPES)
    elif kind == "drop":
        del ins[rng.randrange(len(ins))]
    elif kind == "add":
        ins.append(helper.make_tensor_value_info(
            rng.choice(["extra", *_value_names(m)]), TensorProto.FLOAT, [1, 4]))
    else:
        ins.append(i)


def _o_empty_graph(m: onnx.ModelProto, rng: Rng) -> None:
    del m.graph.node[:]
    if rng.random() < 0.5:
        del m.graph.initializer[:]


def _o_opset(m: onnx.ModelProto, rng: Rng) -> None:
    kind = rng.choice(["version", "version", "drop", "extra", "ir"])
    if kind == "version":
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = rng.choice([1000, 0, 1, 5, 7, 9, 11, 13, 21, 22, 99, -1])
    elif kind == "drop":
        del m.opset_import[:]
    elif kind == "extra":
        m.opset_import.append(helper.make_opsetid(rng.choice(["foo", "com.microsoft"]), 1))
    else:
        m.ir_version = rng.choice([0, 1, 3, 100])


def _o_value_info(m: onnx.ModelProto, rng: Rng) -> None:
    n = rng.choice(_nodes_with(m, lambda n: len(n.output) > 0))
    shape = rng.choice([[1], [2, 3], [1, 1, 1, 1, 1], [0], [10**6, 10**6]])
    m.graph.value_info.append(helper.make_tensor_value_info(
        n.output[0], rng.choice([TensorProto.FLOAT, TensorProto.INT64]), shape))


def _o_bytes(m: onnx.ModelProto, rng: Rng) -> bytes:
    data = bytearray(m.SerializeToString())
    kind = rng.choice(["truncate", "flip", "flip", "garbage", "empty", "text", "append"])
    if kind == "truncate":
        return bytes(data[: rng.randrange(len(data))])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == "garbage":
        return rng.randbytes(rng.randint(1, 4096))
    if kind == "empty":
        return b""
    if kind == "text":
        return b"ir_version: 8\ngraph { name: 'g' }\n"
    return bytes(data) + rng.randbytes(rng.randint(1, 64))


ONNX_MUTATORS: dict[str, Callable[[onnx.ModelProto, Rng], bytes | None]] = {
    "drop-input": _o_drop_input, "extra-input": _o_extra_input,
    "rename-value": _o_rename_value, "swap-inputs": _o_swap_inputs,
    "drop-node": _o_drop_node, "dup-node": _o_dup_node, "reorder": _o_reorder,
    "self-loop": _o_self_loop, "op-type": _o_op_type, "domain": _o_domain,
    "attr-value": _o_attr_value, "attr-drop": _o_attr_drop, "attr-add": _o_attr_add,
    "initializer": _o_initializer, "graph-output": _o_graph_output,
    "graph-input": _o_graph_input, "empty-graph": _o_empty_graph, "opset": _o_opset,
    "value-info": _o_value_info, "bytes": _o_bytes,
}
ONNX_WEIGHTS = {"attr-value": 4, "initializer": 3, "graph-output": 2, "graph-input": 2,
                "drop-input": 2, "bytes": 2}


def checker_reason(data: bytes) -> str | None:
    """Why `onnx.checker` (full check, with shape inference) rejects the model, or None."""
    try:
        model = onnx.load_from_string(data)
    except Exception as e:
        return f"does not parse: {type(e).__name__}"
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        text = str(e).strip().splitlines()
        return text[0][:200] if text else type(e).__name__
    return None


def onnx_case(rng: Rng, index: int, profile: str) -> Case:
    name = str(_pick(rng, MODELS_CI if profile == "ci" else MODELS_BENCH))
    model = onnx.load_from_string(_model_bytes(name))
    mutator = rng.choices(list(ONNX_MUTATORS),
                          weights=[ONNX_WEIGHTS.get(k, 1) for k in ONNX_MUTATORS])[0]
    data = ONNX_MUTATORS[mutator](model, rng)
    if data is None:
        data = model.SerializeToString()
    argv = _pick(rng, ONNX_CMDS_CI if profile == "ci" else ONNX_CMDS_BENCH)
    assert isinstance(argv, tuple)
    return Case("onnx", f"{mutator}/{name}", index, {"model.onnx": data}, argv,
                checker_reason(data))


# ================================================================== Spatial IR text
_TOKEN = re.compile(r"%[\w.$-]+|@[\w.$-]+|\^\w+|\d+\.\d+(?:e[-+]?\d+)?|\d+|[A-Za-z_][\w.]*|\S")
IR_NUMBERS = ["0", "1", "2", "3", "-1", "7", "65536", "100000000", str(2**31), str(2**63),
              str(10**30), "1e309", "0.5"]


@cache
def _ir_inputs(path: Path) -> bytes:
    """An .npz with an array per @main argument of the unmutated file (zeros + 1)."""
    from raptor.ir.parser import parse_file

    func = parse_file(str(path)).main()
    arrays = {}
    for a in func.args:
        shape = tuple(getattr(a.type, "shape", ()))
        arrays[a.name] = np.ones(shape, dtype=np.float32)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _mutate_tokens(text: str, rng: Rng, kind: str) -> str:
    toks = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    vocab = sorted({text[a:b] for a, b in toks})
    a, b = toks[rng.randrange(len(toks))]
    if kind == "tok-delete":
        return text[:a] + text[b:]
    if kind == "tok-dup":
        return text[:b] + " " + text[a:b] + text[b:]
    if kind == "tok-swap":
        c, d = toks[rng.randrange(len(toks))]
        if c < a:
            (a, b), (c, d) = (c, d), (a, b)
        if c < b:
            return text
        return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    if kind == "tok-number":
        nums = [(x, y) for x, y in toks if text[x:y][0].isdigit()]
        if nums:
            a, b = rng.choice(nums)
        return text[:a] + rng.choice(IR_NUMBERS) + text[b:]
    if kind == "tok-type":
        types = [m.span() for m in re.finditer(r"f32|i8|i32|f16|index", text)]
        if types:
            a, b = rng.choice(types)
        return text[:a] + rng.choice(["i8", "i32", "f16", "f64", "index", "xf32", ""]) + text[b:]
    if kind == "tok-ident":
        return text[:a] + rng.choice(vocab) + text[b:]
    return text[:a] + rng.choice(vocab) + " " + text[a:]  # tok-insert


def _mutate_lines(text: str, rng: Rng, kind: str) -> str:
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    if kind == "line-delete":
        del lines[i]
    elif kind == "line-dup":
        lines.insert(i, lines[i])
    elif kind == "line-swap":
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _mutate_big(text: str, rng: Rng, kind: str) -> str:
    if kind == "dim-huge":
        spans = [m.span(1) for m in re.finditer(r"tensor<([^>]*)>", text)]
        a, b = rng.choice(spans)
        dims = text[a:b].split("x")
        i = rng.randrange(max(len(dims) - 1, 1))
        dims[i] = rng.choice(["100000000", "65536", "0", "4294967296", "1000000"])
        return text[:a] + "x".join(dims) + text[b:]
    spans = [m.span(1) for m in re.finditer(r"lanes\((\d+)\)", text)]
    if not spans:
        return _mutate_big(text, rng, "dim-huge")
    a, b = rng.choice(spans)
    return text[:a] + rng.choice(["100000000", "0", "65536", "3"]) + text[b:]


def _mutate_bytes(data: bytes, rng: Rng) -> bytes:
    kind = rng.choice(["truncate", "insert", "flip", "nul", "bom"])
    b = bytearray(data)
    if kind == "truncate":
        return bytes(b[: rng.randrange(len(b) + 1)])
    i = rng.randrange(len(b) + 1)
    if kind == "insert":
        return bytes(b[:i]) + rng.choice([b"\xff", b"\xc3\x28", b"\x80\x80", rng.randbytes(8)]) \
            + bytes(b[i:])
    if kind == "nul":
        return bytes(b[:i]) + b"\x00" + bytes(b[i:])
    if kind == "bom":
        return b"\xef\xbb\xbf" + bytes(b)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


IR_MUTATORS: Choices = [("tok-delete", 3), ("tok-dup", 2), ("tok-swap", 2), ("tok-number", 4),
                        ("tok-type", 2), ("tok-ident", 3), ("tok-insert", 2),
                        ("line-delete", 3), ("line-dup", 2), ("line-swap", 2),
                        ("dim-huge", 1), ("lanes-huge", 1), ("bytes", 2)]
IR_CMDS: Choices = [
    (("verify", "{dir}/case.spat"), 3),
    (("verify", "--allow-assembly", "{dir}/case.spat"), 1),
    (("interpret", "{dir}/case.spat", "--inputs", "{dir}/inputs.npz"), 3),
]


def ir_case(rng: Rng, index: int, profile: str) -> Case:
    src = rng.choice(GOLDEN)
    text = src.read_text()
    mutator = str(_pick(rng, IR_MUTATORS))
    if mutator == "bytes":
        data = _mutate_bytes(text.encode(), rng)
    elif mutator.startswith("tok-"):
        data = _mutate_tokens(text, rng, mutator).encode()
    elif mutator.startswith("line-"):
        data = _mutate_lines(text, rng, mutator).encode()
    else:
        data = _mutate_big(text, rng, mutator).encode()
    argv = _pick(rng, IR_CMDS)
    assert isinstance(argv, tuple)
    return Case("ir", f"{mutator}/{src.stem}", index,
                {"case.spat": data, "inputs.npz": _ir_inputs(src)}, argv)


# ================================================================== rule files
def _forms(text: str) -> list[tuple[int, int]]:
    """Spans of the top-level s-expressions (strings and `;` comments skipped)."""
    spans, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == ";":
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
            continue
        if ch == '"':
            j = text.find('"', i + 1)
            i = len(text) if j < 0 else j + 1
            continue
        if ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
        i += 1
    return spans


EGG_NUMBERS = ["-1", "0", "1", "2", str(2**62), str(-(2**62)), "9223372036854775807",
               "99999999999999999999", "1.5", "-9223372036854775808"]
EGG_APPEND = {
    "layout.egg": [
        '(rule ((Alt p a l c)) ((Alt (+ p 1) a l c)) :name "fuzz-grow")',
        '(rule ((Alt p a l c)) ((Alt p a l (+ c 1))) :name "fuzz-grow-cost")',
        '(rule ((PlanKind p k)) ((Alt p 7 (NHWCRowStrip) 0)) :name "fuzz-extra-alt")',
        '(rule ((PlanKind p k)) ((Alt p 1 (Fragmented) -5)) :name "fuzz-fragmented")',
        '(rule ((Alt p a l c)) ((Alt p a "x" c)) :name "fuzz-type")',
        '(set (DenseCost) 9223372036854775807)',
        '(set (RowStripCost) -9223372036854775807)',
        '(include "missing.egg")',
        '(run 100000)',
        '(rule ((PlanKind p k)) ((FixedLayout p (NHWCRowStrip))) :name "fuzz-fixed")',
        '(rule ((PlanKind p k)) ((ReturnLayout p (Fragmented))) :name "fuzz-return")',
        '(pop)',
    ],
    "canonicalize.egg": [
        '(rule ((Batch b n)) ((Batch (+ b 1) n)) :name "fuzz-grow")',
        '(rule ((Batch b n)) ((Batch b (+ n 1))) :name "fuzz-grow-lanes")',
        '(rule ((Entry v e b r d c k size stride)) ((Entry v e b r d (+ c 1) k size stride)) '
        ':name "fuzz-grow-shift")',
        '(rule ((BatchValue v b r)) ((Identity v v)) :name "fuzz-identity")',
        '(rule ((BatchValue v b r)) ((Blocked v)) :name "fuzz-block")',
        '(rule ((FragDim b r d e)) ((PhysDim b r d 0)) :name "fuzz-zero-dim")',
        '(relation Batch (i64 i64))',
        '(include "missing.egg")',
        '(check (Batch 0 0))',
    ],
}
EGG_MUTATORS: Choices = [("form-delete", 4), ("form-dup", 2), ("form-swap", 2),
                         ("line-delete", 2), ("tok-number", 3), ("tok-string", 2),
                         ("tok-ident", 3), ("paren", 1), ("bytes", 1), ("file-missing", 1),
                         ("file-empty", 1), ("append", 4)]
RULES_CMDS_BENCH: Choices = [
    (("rules", "check", "{dir}/rules"), 2),
    (("solve", _ex("lenet.onnx"), "--rules", "{dir}/rules", "--solver", "peft",
      "--no-simulate", "--out", "{out}"), 2),
    (("inspect", _ex("resnet_block.onnx"), "--rules", "{dir}/rules"), 1),
    (("solve", _ex("mlp.onnx"), "--rules", "{dir}/rules", "--solver", "peft", "--out",
      "{out}"), 1),
]
RULES_CMDS_CI: Choices = [
    (("rules", "check", "{dir}/rules"), 2),
    (("inspect", _ex("lenet.onnx"), "--rules", "{dir}/rules"), 2),
]


def _mutate_egg(text: str, name: str, rng: Rng, kind: str) -> str | None:
    forms = _forms(text)
    if kind == "form-delete":
        a, b = rng.choice(forms)
        return text[:a] + text[b:]
    if kind == "form-dup":
        a, b = rng.choice(forms)
        return text[:b] + "\n" + text[a:b] + text[b:]
    if kind == "form-swap":
        (a, b), (c, d) = sorted(rng.sample(forms, 2))
        return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    if kind == "line-delete":
        return _mutate_lines(text, rng, "line-delete")
    code = [(a + x, a + y) for a, b in forms
            for x, y in (m.span() for m in re.finditer(r'"[^"]*"|-?\d+|[A-Za-z][\w-]*|[()]',
                                                       text[a:b]))]
    pick = {
        "tok-number": [s for s in code if re.fullmatch(r"-?\d+", text[s[0]:s[1]])],
        "tok-string": [s for s in code if text[s[0]] == '"'],
        "tok-ident": [s for s in code if text[s[0]].isalpha()],
        "paren": [s for s in code if text[s[0]] in "()"],
    }[kind]
    a, b = rng.choice(pick)
    if kind == "tok-number":
        new = rng.choice(EGG_NUMBERS)
    elif kind == "tok-string":
        new = rng.choice(['""', '"x"', '"conv "', '"relu"', '"\\n"'])
    elif kind == "tok-ident":
        idents = sorted({text[x:y] for x, y in pick})
        new = rng.choice([*idents, "Ghost", "i64", "String"])
    else:
        new = rng.choice(["", "((", ")", "( )"])
    return text[:a] + new + text[b:]


def rules_case(rng: Rng, index: int, profile: str) -> Case:
    texts = {p.name: p.read_bytes() for p in sorted(RULES.glob("*.egg"))}
    name = rng.choice(sorted(texts))
    mutator = str(_pick(rng, EGG_MUTATORS))
    text = texts[name].decode()
    if mutator == "file-missing":
        del texts[name]
    elif mutator == "file-empty":
        texts[name] = b""
    elif mutator == "bytes":
        texts[name] = _mutate_bytes(texts[name], rng)
    elif mutator == "append":
        templates = [t for t in EGG_APPEND[name] if profile != "ci" or GROW not in t]
        texts[name] = (text + "\n" + rng.choice(templates) + "\n").encode()
    else:
        new = _mutate_egg(text, name, rng, mutator)
        texts[name] = (new if new is not None else text).encode()
    argv = _pick(rng, RULES_CMDS_CI if profile == "ci" else RULES_CMDS_BENCH)
    assert isinstance(argv, tuple)
    files = {f"rules/{k}": v for k, v in texts.items()}
    if not files:
        files["rules/.keep"] = b""
    return Case("rules", f"{mutator}/{name}", index, files, argv)


# ================================================================== target TOML
TARGET_KEYS = ["clock_ghz", "mesh_rows", "mesh_cols", "crossbars_per_core", "crossbar_rows",
               "crossbar_cols", "weight_bits", "input_bits", "mvm_cycles", "array_group_max",
               "mvm_units", "vector_lanes",
               "vector_op_cycles", "local_memory_bytes", "local_bytes_per_cycle", "flit_bytes",
               "flit_cycles", "hop_cycles", "shared_memory_bytes", "shared_access_bytes",
               "shared_read_cycles", "shared_write_cycles"]
TARGET_LIMITS: dict[str, tuple[float, float]] = {
    "clock_ghz": (0.01, 100.0), "mesh_rows": (1, 4096), "mesh_cols": (1, 4096),
    "crossbars_per_core": (1, 65536), "crossbar_rows": (1, 65536),
    "crossbar_cols": (1, 65536), "weight_bits": (1, 64), "input_bits": (1, 64),
    "mvm_cycles": (1, 10**6), "array_group_max": (1, 65536), "mvm_units": (1, 1024),
    "conv_window_max": (1, 65536),
    "vector_lanes": (1, 65536), "vector_op_cycles": (1, 10**6),
    "local_memory_bytes": (1, 1 << 40), "local_bytes_per_cycle": (1, 1 << 20),
    "flit_bytes": (1, 1 << 20), "flit_cycles": (1, 10**6), "hop_cycles": (1, 10**6),
    "shared_memory_bytes": (1, 1 << 40), "shared_access_bytes": (1, 1 << 20),
    "shared_read_cycles": (1, 10**6), "shared_write_cycles": (1, 10**6),
}
"""The documented ranges of `raptor.target.LIMITS` (a test keeps them equal), written out so
that the mutators also run against a Raptor without them (a before/after campaign)."""
TOML_EXTREMES = ["0", "-1", "1", "2", "3", str(2**31), str(2**53), str(2**63 - 1),
                 str(-(2**63)), str(10**30), "inf", "nan", "-inf", "1e308", "1e-300", "0.5",
                 "1e-9", "4097", "65537", "1000001", "0.01", "100.0"]
TOML_TYPES = ['"fast"', "true", "[1, 2]", "{ a = 1 }", "1979-05-27", "12:00:00", "1.5", '""',
              "[]", '"8"']
MESHES = ["[1000000, 1000000]", "[1, 1]", "[0, 4]", "[1, 4096]", "[64, 64]", "[65, 64]",
          "[4096, 1]", "[2]", "[2, 2, 2]", '["a", "b"]', "[1.5, 2]", "[-1, 8]", "[]", '"8x8"',
          "[true, 2]", f"[{2**62}, {2**62}]", "[2, 2]", "[16, 16]", "[1, 2]"]
TARGET_MUTATORS: Choices = [("value-extreme", 5), ("value-type", 2), ("mesh", 4),
                            ("unknown-key", 1), ("dup-key", 1), ("bytes", 2), ("truncate", 1),
                            ("table", 1), ("empty", 1), ("name", 1), ("huge-file", 1),
                            ("realistic", 4), ("max-all", 1), ("min-all", 1),
                            ("slow-all", 1)]
TARGET_CMDS_BENCH: Choices = [
    (("target", "show", "{dir}/t.toml"), 2),
    (("solve", _ex("mlp.onnx"), "--target", "{dir}/t.toml", "--solver", "peft", "--out",
      "{out}"), 3),
    (("inspect", _ex("lenet.onnx"), "--target", "{dir}/t.toml"), 1),
    (("solve", _ex("resnet_block.onnx"), "--target", "{dir}/t.toml", "--solver", "cpsat",
      "--time-limit", "0.5", "--workers", "1", "--out", "{out}"), 1),
    (("interpret", _ex("lenet.onnx"), "--target", "{dir}/t.toml", "--check"), 1),
]
TARGET_CMDS_CI: Choices = [
    (("target", "show", "{dir}/t.toml"), 2),
    (("solve", _ex("mlp.onnx"), "--target", "{dir}/t.toml", "--solver", "peft",
      "--no-simulate", "--out", "{out}"), 2),
    (("inspect", _ex("lenet.onnx"), "--target", "{dir}/t.toml"), 1),
]


def _toml(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"{k} = {v}\n" for k, v in pairs)


def _target_text(rng: Rng, mutator: str) -> bytes:
    base = [("mesh", "[4, 4]"), ("crossbars_per_core", "16")]
    if mutator == "value-extreme":
        pairs = base + [(k, rng.choice(TOML_EXTREMES))
                        for k in rng.sample(TARGET_KEYS, rng.randint(1, 3))]
    elif mutator == "value-type":
        pairs = [*base, (rng.choice(TARGET_KEYS), rng.choice(TOML_TYPES))]
    elif mutator == "mesh":
        pairs = [("mesh", rng.choice(MESHES))]
        if rng.random() < 0.3:
            pairs += [("crossbars_per_core", rng.choice(["1", "2", "65536"]))]
    elif mutator == "unknown-key":
        weird = ["meshes", '"a\\nb"', "Mesh", '"' + "k" * 300 + '"', "mesh.rows"]
        pairs = [*base, (rng.choice(weird), "1")]
    elif mutator == "dup-key":
        pairs = [*base, ("crossbars_per_core", "8")]
    elif mutator == "table":
        return ("[target]\n" + _toml(base)).encode()
    elif mutator == "empty":
        return b""
    elif mutator == "name":
        names = ['""', '"a\\nb"', '"' + "x" * 1000 + '"', "5", '"ok-name"', '"\\u0000"']
        pairs = [*base, ("name", rng.choice(names))]
    elif mutator == "huge-file":
        return b"# padding\n" * 200_000 + _toml(base).encode()
    elif mutator == "realistic":
        pairs = [("mesh", f"[{rng.randint(1, 8)}, {rng.randint(1, 8)}]"),
                 ("crossbars_per_core", str(rng.choice([1, 2, 4, 16, 64]))),
                 ("crossbar_rows", str(rng.choice([16, 32, 64, 128, 256]))),
                 ("crossbar_cols", str(rng.choice([16, 32, 64, 128, 256]))),
                 ("clock_ghz", str(rng.choice([0.1, 0.5, 1.0, 1.3, 4.0]))),
                 ("vector_lanes", str(rng.choice([1, 8, 32, 128])))]
    elif mutator == "slow-all":  # every cost at its largest, every width at its smallest
        pairs = [(k, "1" if k.endswith(("_bytes", "lanes", "per_cycle")) and
                  not k.endswith("memory_bytes") else str(int(TARGET_LIMITS[k][1])))
                 for k in TARGET_KEYS if k.endswith(("cycles", "_bytes", "lanes", "per_cycle"))]
        pairs += [("clock_ghz", "0.01"), ("mesh", rng.choice(["[64, 64]", "[1, 4096]", "[2, 2]"]))]
    elif mutator in ("max-all", "min-all"):
        i = 1 if mutator == "max-all" else 0
        pairs = [(k, repr(TARGET_LIMITS[k][i]) if isinstance(TARGET_LIMITS[k][i], float)
                  else str(int(TARGET_LIMITS[k][i]))) for k in TARGET_KEYS]
        cores = [("mesh_rows", "64"), ("mesh_cols", "64")] if i else []
        pairs = [p for p in pairs if p[0] not in ("mesh_rows", "mesh_cols")] + cores
    else:
        pairs = base
    text = _toml(pairs).encode()
    if mutator == "bytes":
        return _mutate_bytes(text, rng)
    if mutator == "truncate":
        return text[: rng.randrange(len(text) + 1)]
    return text


def target_case(rng: Rng, index: int, profile: str) -> Case:
    mutator = str(_pick(rng, TARGET_MUTATORS))
    argv = _pick(rng, TARGET_CMDS_CI if profile == "ci" else TARGET_CMDS_BENCH)
    assert isinstance(argv, tuple)
    return Case("target", mutator, index, {"t.toml": _target_text(rng, mutator)}, argv)


# ================================================================== input files
INPUT_CMDS_BENCH: Choices = [
    (("solve", _ex("mlp.onnx"), "--inputs", "{dir}/x.npz", "--solver", "peft", "--out",
      "{out}"), 3),
    (("interpret", _ex("mlp.onnx"), "--inputs", "{dir}/x.npz", "--check"), 1),
    (("interpret", _ex("lenet.onnx"), "--inputs", "{dir}/x.npz", "--check"), 1),
    (("interpret", _ex("column_pairs.spat"), "--inputs", "{dir}/x.npz"), 2),
    (("solve", _ex("lenet.onnx"), "--inputs", "{dir}/x.npz", "--solver", "peft", "--out",
      "{out}"), 1),
    (("solve", "{dir}/model.onnx", "--solver", "peft", "--out", "{out}"), 1),
]
INPUT_CMDS_CI: Choices = [
    (("solve", _ex("mlp.onnx"), "--inputs", "{dir}/x.npz", "--solver", "peft", "--out",
      "{out}"), 1),
    (("interpret", _ex("mlp.onnx"), "--inputs", "{dir}/x.npz", "--check"), 2),
    (("interpret", _ex("column_pairs.spat"), "--inputs", "{dir}/x.npz"), 2),
    (("solve", "{dir}/model.onnx", "--solver", "peft", "--no-simulate", "--out", "{out}"), 1),
]
INPUT_MUTATORS: Choices = [("zip-bytes", 3), ("key", 2), ("shape", 3), ("dtype", 4),
                           ("values", 3), ("npy-header", 3), ("npy-file", 1), ("path", 1),
                           ("zip-bomb", 1), ("many-arrays", 1)]


def _npz(arrays: dict[str, np.ndarray], pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    if pickle:
        with zipfile.ZipFile(buf, "w") as z:
            for k, v in arrays.items():
                inner = io.BytesIO()
                np.save(inner, v, allow_pickle=True)
                z.writestr(f"{k}.npy", inner.getvalue())
        return buf.getvalue()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _npy_header(header: str, version: int = 1) -> bytes:
    """An .npy file with a hand-written header dictionary and no data."""
    body = header.encode("latin1")
    if version == 1:
        pad = 16 - (10 + len(body) + 1) % 16
        body += b" " * (pad % 16) + b"\n"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body
    pad = 16 - (12 + len(body) + 1) % 16
    body += b" " * (pad % 16) + b"\n"
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(body)) + body


@cache
def _zip_bomb() -> bytes:
    """An .npz whose x.npy inflates to 1 GiB of zeros: one compressed 1 MiB block of zeros
    repeated (a deflate stream of non-final stored-free blocks concatenates)."""
    header = _npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (16384, 16384), }")
    zero = bytes(1 << 20)
    comp = zlib.compressobj(1, zlib.DEFLATED, -15)
    head = comp.compress(header) + comp.flush(zlib.Z_FULL_FLUSH)
    block = comp.compress(zero) + comp.flush(zlib.Z_FULL_FLUSH)
    data = head + block * 1024 + comp.flush()
    size = len(header) + (1 << 30)
    crc = zlib.crc32(header)
    for _ in range(1024):
        crc = zlib.crc32(zero, crc)
    # the member by hand: zipfile would need the 1 GiB payload in memory
    name = b"x.npy"
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(data), size,
                        len(name), 0) + name
    central = struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc,
                          len(data), size, len(name), 0, 0, 0, 0, 0, 0) + name
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central),
                      len(local) + len(data), 0)
    return local + data + central + end


def _inputs_bytes(base: dict[str, np.ndarray], rng: Rng, mutator: str) -> tuple[str, bytes]:
    """(mutation detail, file bytes)."""
    key = next(iter(base))
    x = base[key]
    if mutator == "zip-bytes":
        return "bytes", _mutate_bytes(_npz(base), rng)
    if mutator == "key":
        kind = rng.choice(["missing", "extra", "positional", "empty"])
        if kind == "missing":
            return kind, _npz({"y": x})
        if kind == "extra":
            return kind, _npz({**base, "extra": x})
        if kind == "positional":
            return kind, _npz({"arr_0": x})
        return kind, _npz({})
    if mutator == "shape":
        shapes = [x.shape[::-1], (1, *x.shape), x.shape[1:], (0,), (), (2 * x.size,),
                  (x.size - 1,), (x.size,)]
        shape = rng.choice(shapes)
        size = math.prod(shape)
        arr = np.resize(x, shape) if size else np.zeros(shape, np.float32)
        return f"shape {shape}", _npz({key: arr})
    if mutator == "dtype":
        kind = rng.choice(["int32", "int64", "bool", "float16", "float64", "complex64",
                           "uint8", "str", "bytes", "datetime64", "timedelta64", "object",
                           "structured"])
        if kind == "object":
            return kind, _npz({key: np.array([{"a": 1}] * x.size, dtype=object)}, pickle=True)
        if kind == "str":
            return kind, _npz({key: np.full(x.shape, "1.0")})
        if kind == "bytes":
            return kind, _npz({key: np.full(x.shape, b"1.0")})
        if kind == "datetime64":
            return kind, _npz({key: np.zeros(x.shape, "datetime64[s]")})
        if kind == "timedelta64":
            return kind, _npz({key: np.zeros(x.shape, "timedelta64[s]")})
        if kind == "structured":
            return kind, _npz({key: np.zeros(x.shape, [("a", "<f4"), ("b", "<i4")])})
        return kind, _npz({key: x.astype(kind)})
    if mutator == "values":
        arr = x.astype(np.float64 if rng.random() < 0.2 else np.float32).copy()
        special = rng.choice([np.nan, np.inf, -np.inf, 3.4e38, 1e300, 1e-45])
        flat = arr.reshape(-1)
        idx = rng.sample(range(flat.size), min(flat.size, rng.choice([1, 3, flat.size])))
        with np.errstate(over="ignore"):  # 1e300 into float32 is the point
            flat[idx] = special
        return f"values {special}", _npz({key: arr})
    if mutator == "npy-header":
        headers = [
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }",
            f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({2**62},), }}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",
            "{'descr': '<x9', 'fortran_order': False, 'shape': (1,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': 'big', }",
            "{'descr': '<f4', 'fortran_order': False}",
            "[1, 2, 3]",
            "__import__('os')",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 196), 'x': '"
            + "a" * 20000 + "'}",
            "{'descr': 'O', 'fortran_order': False, 'shape': (1, 196), }",
        ]
        header = rng.choice(headers)
        raw = _npy_header(header, version=rng.choice([1, 2]))
        if rng.random() < 0.2:
            raw = raw[:8] + struct.pack("<H", 65535) + raw[10:]
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr(f"{key}.npy", raw)
        return "header " + header[:40], buf.getvalue()
    if mutator == "npy-file":
        buf = io.BytesIO()
        np.save(buf, x)
        return "npy", buf.getvalue()
    if mutator == "zip-bomb":
        return "bomb", _zip_bomb()
    if mutator == "many-arrays":
        return "many", _npz({f"a{i}": np.zeros(1, np.float32) for i in range(2000)} | base)
    return "path", b""


@cache
def _example_inputs(name: str) -> dict[str, np.ndarray]:
    with np.load(EXAMPLES / f"{name}.npz") as f:
        return {k: np.asarray(f[k]) for k in f.files}


def inputs_case(rng: Rng, index: int, profile: str) -> Case:
    argv = _pick(rng, INPUT_CMDS_CI if profile == "ci" else INPUT_CMDS_BENCH)
    assert isinstance(argv, tuple)
    source = next((a for a in argv if a.endswith((".onnx", ".spat"))), "")
    base_name = "mlp" if source.startswith("{dir}") else Path(source).stem
    mutator = str(_pick(rng, INPUT_MUTATORS))
    detail, data = _inputs_bytes(_example_inputs(base_name), rng, mutator)
    files = {"x.npz": data}
    if source.startswith("{dir}"):  # the sample inputs beside the model
        files = {"model.onnx": _model_bytes("mlp"), "model.npz": data}
    if mutator == "path":
        kind = rng.choice(["directory", "missing"])
        files = {"x.npz/inner": b""} if kind == "directory" else {}
        if source.startswith("{dir}"):
            files = {"model.onnx": _model_bytes("mlp"),
                     **({"model.npz/inner": b""} if kind == "directory" else {})}
        detail = kind
    return Case("inputs", f"{mutator}/{base_name}/{detail[:30]}", index, files, argv)


# ================================================================== entry points
MAKERS: dict[str, Callable[[Rng, int, str], Case]] = {
    "onnx": onnx_case, "ir": ir_case, "rules": rules_case, "target": target_case,
    "inputs": inputs_case,
}


def make_case(klass: str, seed: int, index: int, profile: str = "bench") -> Case:
    """Case `index` of input class `klass` (deterministic in its arguments)."""
    rng = random.Random(f"{seed}:{klass}:{index}")
    return MAKERS[klass](rng, index, profile)


def cases(counts: dict[str, int], seed: int, profile: str = "bench") -> Iterator[Case]:
    """`counts[klass]` cases of each class, interleaved so that a partial run covers every
    class; made one at a time (a case holds a whole model)."""
    todo = {k: iter(range(n)) for k, n in counts.items()}
    while todo:
        for k in list(todo):
            i = next(todo[k], None)
            if i is None:
                del todo[k]
            else:
                yield make_case(k, seed, i, profile)
