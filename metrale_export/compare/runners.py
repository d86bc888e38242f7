"""A Polygraphy runner for an export directory: the PyTorch model rebuilt from the same checkpoint
(ONNX Runtime's side is Polygraphy's own ``OnnxrtRunner`` over ``ops.ort.reference_session``).

``TorchRunner`` exists because Polygraphy's ``PytRunner`` moves every input to CUDA; this one runs
on the device it is given (the CPU in CI, the GPU with the CUDA ops on the H200).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from pathlib import Path

import torch
from polygraphy.backend.base import BaseRunner

from ..exporter import calibration
from ..exporter.export import DTYPES
from ..exporter.session import ModelSession, open_model, request_from_manifest, select_source
from ..exporter.layers.model import CausalLM


class TorchRunner(BaseRunner):
    """Runs a ``CausalLM`` (inputs by name, outputs by the model's output names)."""

    def __init__(self, model_factory, input_metadata, device: str = "cpu", name: str | None = None):
        super().__init__(name=name, prefix="torch-runner")
        self._factory = model_factory
        self.input_metadata = input_metadata
        self.device = device

    def activate_impl(self):
        self.model = self._factory().to(self.device).eval()

    def get_input_metadata_impl(self):
        return self.input_metadata

    def infer_impl(self, feed_dict):
        inputs = [torch.from_numpy(feed_dict[n]).to(self.device) for n in self.model.input_names()]
        start = time.time()
        with torch.no_grad():
            outs = self.model(*inputs)
        if self.device != "cpu":
            torch.cuda.synchronize()
        end = time.time()
        self.inference_time = end - start
        return OrderedDict((n, o.float().cpu().numpy() if o.dtype == torch.bfloat16 else o.cpu().numpy())
                           for n, o in zip(self.model.output_names(), outs))

    def deactivate_impl(self):
        del self.model


def with_request(session: ModelSession, request) -> ModelSession:
    """``session``'s checkpoint and config with ``request`` and a new projection source for it: the
    checkpoint's headers are not read again."""
    return ModelSession(session.path, session.checkpoint, session.config, request,
                        select_source(session.checkpoint, request))


def open_export_model(checkpoint: Path | ModelSession, manifest: dict, static_scales: bool = True):
    """The session of the checkpoint an export was made from, with its request and the static
    activation scales its manifest records (``static_scales=False``: the same model with dynamic
    scales, what the export would be without calibration). ``checkpoint``: its path, or a session
    open on it (the main job's), whose checkpoint is reused with a source of its own."""
    request = request_from_manifest(manifest)
    if isinstance(checkpoint, ModelSession):
        session = with_request(checkpoint, request)
    else:
        session = open_model(checkpoint, request)
    return calibration.from_manifest(session, manifest) if static_scales else session


def torch_model_factory(export_dir: Path, checkpoint: Path | ModelSession, manifest: dict,
                        static_scales: bool = True):
    """A callable building the export's PyTorch model from the checkpoint it was exported from
    (``open_export_model``), its weights loaded."""

    def build() -> CausalLM:
        session = open_export_model(checkpoint, manifest, static_scales)
        return session.model(DTYPES[manifest["dtype"]], manifest["layers"]).load_weights(session.source)

    return build
