"""Static activation scales from calibration data (``--activation-scales static``).

``read_data`` turns ``--calibration-data`` into token sequences: ``random:N`` (N seeded random
tokens, a smoke test), a ``.ids`` file (whitespace-separated token ids, one sequence a line) or a
text file, tokenized with the checkpoint's own ``tokenizer.json`` through the ``tokenizers``
package. ``calibrate`` runs the export's PyTorch model (the quantized projections with their
dynamic activation scales, docs/ops.md) over them one decoder layer at a time, so only one layer's
weights are in memory, and records every W8A8 / W4A4 projection's input amax. ``StaticScales``
is the projection source that gives those projections their static scale: W8A8 ``sx = amax /
448`` (activation_scale_granularity ``tensor``, W8A8Proj since version 2) and the NVFP4 global
``input_scale = amax / 2688`` (W4A4Proj's optional input), 1 where amax is 0.

Invariants: deterministic (the same data and checkpoint give the same scales bit for bit: seeded
tokens, fixed chunking, a float32 max); an empty calibration set or a token outside the vocabulary
is an ``InputError`` naming the data; projections without a recorded amax (the grouped MoE experts)
keep their dynamic scales; ``StaticScales.load`` returns exactly its spec.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import contract
from ..errors import InputError
from ..ops import w8a8
from ..ops.numerics import bf16_round
from .names import ACTIVATION_SCALE_MODES
from .projection import Projection, ProjSpec
from .projection_source import ProjectionSource

MODES = ACTIVATION_SCALE_MODES
STATIC_KINDS = ("w8a8", "w4a4")  # the weight formats whose activations have a static scale
CHUNK = 256  # tokens a calibration sequence (longer ones are cut into chunks of this many)
RANDOM_SEED = 0
IDS_SUFFIX = ".ids"


@dataclass(frozen=True)
class CalibrationData:
    """Token sequences and where they came from (``describe`` goes into the manifest)."""

    source: str  # "random:N" or the file's name
    sequences: tuple[tuple[int, ...], ...]

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self.sequences)

    def sha256(self) -> str:
        h = hashlib.sha256()
        for s in self.sequences:
            h.update(torch.tensor(s, dtype=torch.int64).numpy().tobytes())
            h.update(b"\n")
        return h.hexdigest()

    def describe(self) -> dict:
        return {"data": self.source, "tokens": self.tokens, "sequences": len(self.sequences),
                "tokens_sha256": self.sha256()}


def check_options(mode: str, data: str | None) -> None:
    """``--activation-scales`` and ``--calibration-data`` go together."""
    if mode not in MODES:
        raise InputError(f"--activation-scales: expected dynamic or static, found {mode!r}")
    if mode == "static" and not data:
        raise InputError("--activation-scales static needs --calibration-data (a text file, a .ids token-id "
                         "file, or random:N for a smoke test)")
    if mode == "dynamic" and data:
        raise InputError("--calibration-data is used only with --activation-scales static; add it, or drop "
                         "--calibration-data")


def _chunks(ids: list[int]) -> list[tuple[int, ...]]:
    return [tuple(ids[i:i + CHUNK]) for i in range(0, len(ids), CHUNK)]


def read_data(spec: str, checkpoint_root: Path, vocab_size: int) -> CalibrationData:
    """The calibration sequences of ``--calibration-data spec`` (see the module docstring)."""
    where = f"--calibration-data {spec}"
    if spec.startswith("random:"):
        return _random_data(spec, vocab_size, where)
    path = Path(spec)
    if not path.is_file():
        raise InputError(f"{where}: no such file (expected a text file, a {IDS_SUFFIX} token-id file or random:N)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{where}: cannot read it as UTF-8 text ({e})") from e
    sequences = _file_sequences(path, text, checkpoint_root, where)
    data = CalibrationData(path.name, tuple(s for s in sequences if s))
    if data.tokens == 0:
        raise InputError(f"{where}: the file holds no tokens; give it text or token ids to calibrate on")
    _check_vocabulary(data, vocab_size, where)
    return data


def _file_sequences(path: Path, text: str, checkpoint_root: Path, where: str) -> list[tuple[int, ...]]:
    """The chunks of a calibration file: token ids of a .ids file, else its text tokenized."""
    if path.suffix == IDS_SUFFIX:
        return _id_sequences(text, where)
    if text.strip():
        return _chunks(_tokenize(text, checkpoint_root, where))
    return []


def _check_vocabulary(data: CalibrationData, vocab_size: int, where: str) -> None:
    """``InputError`` naming the first token id outside [0, vocab_size)."""
    for i, s in enumerate(data.sequences):
        bad = next((t for t in s if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise InputError(f"{where}: token id {bad} (sequence {i}) is outside the vocabulary [0, {vocab_size}) "
                             f"of the checkpoint; use ids of its own tokenizer")


def _random_data(spec: str, vocab_size: int, where: str) -> CalibrationData:
    """random:N: N seeded random token ids of the vocabulary."""
    count = spec.removeprefix("random:")
    if not count.isdigit() or int(count) < 1:
        raise InputError(f"{where}: expected random:N with N a positive number of tokens")
    gen = torch.Generator().manual_seed(RANDOM_SEED)
    ids = torch.randint(0, vocab_size, (int(count),), generator=gen).tolist()
    return CalibrationData(spec, tuple(_chunks(ids)))


def _id_sequences(text: str, where: str) -> list[tuple[int, ...]]:
    """The chunks of a token-id file: one sequence a line of whitespace-separated ids."""
    sequences = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        try:
            ids = [int(t) for t in line.split()]
        except ValueError:
            raise InputError(f"{where}: line {lineno}: expected whitespace-separated token ids, "
                             f"found {line.strip()[:40]!r}") from None
        sequences += _chunks(ids)
    return sequences


def _tokenize(text: str, root: Path, where: str) -> list[int]:
    tokenizer_json = Path(root) / "tokenizer.json"
    if not tokenizer_json.is_file():
        raise InputError(f"{where}: a text file needs the checkpoint's tokenizer.json, and {root} has none; "
                         f"give token ids in a {IDS_SUFFIX} file, or random:N")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InputError(f"{where}: tokenizing text needs the tokenizers package (pip install tokenizers); "
                         f"or give token ids in a {IDS_SUFFIX} file") from None
    try:
        return Tokenizer.from_file(str(tokenizer_json)).encode(text, add_special_tokens=False).ids
    except Exception as e:  # the tokenizers package raises its own Exception type
        raise InputError(f"{tokenizer_json}: cannot tokenize the calibration text with it ({e})") from e


# --- running the model ---------------------------------------------------------------------------


def calibrate(session, dtype: torch.dtype, layers: list[int] | None, data: CalibrationData,
              show_progress: bool = False) -> dict[str, float]:
    """Projection name -> the largest |bf16(x)| over the calibration data of every W8A8 / W4A4
    projection's input, from the export's PyTorch model run one decoder layer at a time."""
    from tqdm import tqdm

    with torch.device("meta"):
        model = session.model(dtype, layers)
    amax: dict[str, float] = {}

    def record(module: Projection, args):
        a = float(bf16_round(args[0].detach().abs().amax().to(torch.float32).reshape(1))[0])
        name = module.spec.name
        amax[name] = max(amax.get(name, 0.0), a)

    hooks = [m.register_forward_pre_hook(record) for _, m in model.projections()
             if isinstance(m, Projection) and m.spec.kind in STATIC_KINDS]
    head_quantized = model.lm_head.spec.kind in STATIC_KINDS
    steps = len(model.layer_ids) + 1 + int(head_quantized)
    bar = tqdm(total=steps, desc="calibrating", unit="layer", disable=not show_progress, leave=False,
               dynamic_ncols=True)
    try:
        with torch.no_grad():
            _run_streamed(model, session.source, dtype, data, head_quantized, bar)
    finally:
        bar.close()
        for h in hooks:
            h.remove()
    return amax


def _run_streamed(model, source, dtype: torch.dtype, data: CalibrationData, head_quantized: bool, bar) -> None:
    """The streamed steps of CausalLM.forward over ``data``, each part loaded from the checkpoint
    and released after it (load_part / free_part, as compare streams them); ``bar`` counts steps."""
    model.load_part(source, "model.embed_tokens")
    model.load_part(source, "model.rotary_emb")
    xs, rope = [], []
    for seq in data.sequences:
        ids = torch.tensor([seq], dtype=torch.int64)
        x, cos, sin = model.embed(ids, torch.arange(len(seq)).reshape(1, -1))
        xs.append(x)
        rope.append((cos, sin))
    model.free_part("model.embed_tokens")
    bar.update(1)
    for i in model.layer_ids:
        path = f"model.layers.{i}"
        model.load_part(source, path)
        states = [s.example(1, 0, dtype, "cpu") for s in model.states[i]]
        for j, (cos, sin) in enumerate(rope):
            xs[j] = model.layer(i, xs[j], cos, sin, states)[0]
        model.free_part(path)  # one layer's weights in memory at a time
        bar.update(1)
    if head_quantized:
        model.load_part(source, "model.norm")
        model.load_part(source, "lm_head")
        for x in xs:
            model.head(x)
        bar.update(1)


def static_scale(kind: str, amax: float) -> float:
    """The static scale of a ``kind`` projection whose calibrated input amax is ``amax``."""
    if kind == "w8a8":
        return w8a8.static_scale(amax)
    a = torch.tensor(float(amax), dtype=torch.float32)
    return float(torch.where(a > 0, a / contract.NVFP4_GLOBAL_DIVISOR, torch.ones_like(a)))


# --- the source that gives projections their static scale -------------------------------------


class StaticScales:
    """A projection source (``FloatSource`` or a declared format's) whose W8A8 / W4A4 projections
    named in ``scales`` carry that static activation scale (an ``input_scale`` input; W8A8 with
    activation_scale_granularity ``tensor``); every other projection is the wrapped source's."""

    def __init__(self, source: ProjectionSource, scales: dict[str, float], calibration: dict | None = None):
        self.source = source
        self.scales = dict(scales)
        self.calibration = calibration or {}

    # with_recipes (layers/views.py) copies a source and sets its checkpoint: the wrapped one's.
    @property
    def checkpoint(self):
        return self.source.checkpoint

    @checkpoint.setter
    def checkpoint(self, value):
        self.source = copy.copy(self.source)
        self.source.checkpoint = value

    def __getattr__(self, name):  # describe(), kind_for(), request, ...
        if name == "source":
            raise AttributeError(name)
        return getattr(self.source, name)

    def _static(self, spec: ProjSpec) -> bool:
        return spec.kind in STATIC_KINDS and spec.name in self.scales

    def spec(self, name, n, k, family, bias=False, weight_name=None, parts=()) -> ProjSpec:
        spec = self.source.spec(name, n, k, family, bias=bias, weight_name=weight_name, parts=parts)
        if not self._static(spec):
            return spec
        op = contract.by_kind()[spec.kind]
        tensors = dict(spec.tensors, input_scale=((1,), torch.float32))
        tensors = {i.name: tensors[i.name] for i in op.inputs if i.name in tensors}  # contract order
        attrs = dict(spec.attrs)
        if spec.kind == "w8a8":
            attrs["activation_scale_granularity"] = contract.STATIC_ACTIVATION_SCALE
        return dataclasses.replace(spec, tensors=tensors, attrs=attrs)

    def load(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        if not self._static(spec):
            return self.source.load(spec)
        base = self.source.spec(spec.name, spec.n, spec.k, spec.family, bias="bias" in spec.tensors,
                                weight_name=None if spec.parts else spec.source, parts=spec.parts)
        out = dict(self.source.load(base))
        out["input_scale"] = torch.tensor([self.scales[spec.name]], dtype=torch.float32)
        out = {key: out[key] for key in spec.tensors}
        spec.check(out)
        return out

    def activation_scales(self) -> dict:
        """The manifest's ``activation_scales``: the calibration and every static scale."""
        return {"mode": "static", "calibration": self.calibration,
                "scales": {name: self.scales[name] for name in sorted(self.scales)}}


def calibrated(session, dtype: torch.dtype, layers: list[int] | None, data_spec: str,
               show_progress: bool = False):
    """``session`` with its source giving every calibrated projection its static scale."""
    cfg = session.config
    data = read_data(data_spec, session.checkpoint.root, cfg.vocab_size)
    with torch.device("meta"):
        planned = session.model(dtype, layers)
    kinds = {m.spec.name: m.spec.kind for _, m in planned.projections() if isinstance(m, Projection)}
    if not any(k in STATIC_KINDS for k in kinds.values()):
        found = sorted(set(kinds.values())) or ["none"]
        raise InputError(f"--activation-scales static: the export has no W8A8 or W4A4 projection (weight "
                         f"formats {', '.join(found)}); static scales are for fp8 and nvfp4 activations")
    amax = calibrate(session, dtype, layers, data, show_progress)
    scales = {name: static_scale(kinds[name], a) for name, a in amax.items()}
    source = StaticScales(session.source, scales, data.describe())
    return dataclasses.replace(session, source=source)


def from_manifest(session, manifest: dict):
    """``session`` with the static scales its export recorded (``compare`` rebuilds the model)."""
    recorded = manifest.get("activation_scales")
    if not recorded or recorded.get("mode") != "static":
        return session
    source = StaticScales(session.source, recorded["scales"], recorded.get("calibration"))
    return dataclasses.replace(session, source=source)
