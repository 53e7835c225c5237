"""Sizes and training budgets of the embedded pairs. One place for these numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    intermediate: int


@dataclass(frozen=True)
class Preset:
    """Everything that decides what ``specrl.embedded.build`` produces, for a given seed.

    Step counts, not time budgets, so a build is deterministic for its seed.
    """

    name: str
    vocab_size: int
    context: int  # max_position_embeddings of both models
    target: ModelShape
    draft: ModelShape
    max_files: int | None  # stdlib files read; None = all
    heldout_percent: int  # files held out of training, by path hash
    seq_len: int
    batch_size: int
    target_steps: int
    draft_steps: int
    target_lr: float
    draft_lr: float
    mix_target: tuple[float, float, float]  # code, prose, math
    mix_draft: tuple[float, float, float]  # math is 0: out of domain for the draft
    distill_temperature: float
    distill_alpha: float  # weight of the KL term; 1 - alpha on the LM loss
    prompts_per_domain: int
    eval_batches: int
    # The second draft of another size (the drafter pool's ``draft-mid``, and the upper stage of
    # its cascade); distilled like the draft, from its own seed. None: the pair has one draft.
    mid: ModelShape | None = None
    mid_steps: int = 0  # distillation steps of the mid draft; 0: draft_steps

    @property
    def mid_training_steps(self) -> int:
        """The mid draft's distillation steps: ``mid_steps``, or the draft's when 0."""
        return self.mid_steps or self.draft_steps

    def to_dict(self) -> dict:
        return asdict(self)


def parameters(shape: ModelShape, vocab_size: int) -> int:
    """Weights of a Llama of ``shape`` (full multi-head attention, tied embeddings; norms left out)."""
    return (
        shape.layers * (4 * shape.hidden**2 + 3 * shape.hidden * shape.intermediate)
        + vocab_size * shape.hidden
    )


def training_flops(preset: Preset, shape: ModelShape, teacher: ModelShape | None = None) -> float:
    """Estimated FLOPs of one training step of a model of ``shape`` (forward and backward: 6 per
    weight and token, plus 12 x layers x seq_len x hidden for attention), and of the teacher's
    forward when distilling (2 per weight and token, 4 x layers x seq_len x hidden)."""
    tokens, vocab, seq = preset.batch_size * preset.seq_len, preset.vocab_size, preset.seq_len
    flops = 6 * parameters(shape, vocab) + 12 * shape.layers * seq * shape.hidden
    if teacher is not None:
        flops += 2 * parameters(teacher, vocab) + 4 * teacher.layers * seq * teacher.hidden
    return float(flops * tokens)


PRESETS: dict[str, Preset] = {
    # For tests: seconds to build on 2 CPU cores; quality is irrelevant, shapes are real.
    "tiny": Preset(
        name="tiny",
        vocab_size=384,
        context=512,
        target=ModelShape(hidden=64, layers=2, heads=4, intermediate=128),
        draft=ModelShape(hidden=32, layers=1, heads=2, intermediate=64),
        max_files=80,
        heldout_percent=20,
        seq_len=64,
        batch_size=8,
        target_steps=150,
        draft_steps=100,
        target_lr=3e-3,
        draft_lr=3e-3,
        mix_target=(0.5, 0.3, 0.2),
        mix_draft=(0.6, 0.4, 0.0),
        distill_temperature=2.0,
        distill_alpha=0.7,
        prompts_per_domain=8,
        eval_batches=2,
        mid=ModelShape(hidden=48, layers=2, heads=2, intermediate=96),
    ),
    # The default, sized so speculation pays on a CPU (a 27M target, a one-layer 1.8M draft).
    "small": Preset(
        name="small",
        vocab_size=4096,
        context=1024,
        target=ModelShape(hidden=512, layers=8, heads=8, intermediate=1344),
        draft=ModelShape(hidden=256, layers=1, heads=4, intermediate=640),
        max_files=None,
        heldout_percent=5,
        seq_len=256,
        batch_size=16,
        target_steps=1300,
        draft_steps=1100,
        target_lr=1.5e-3,
        draft_lr=3e-3,
        mix_target=(0.5, 0.3, 0.2),
        mix_draft=(0.6, 0.4, 0.0),
        distill_temperature=2.0,
        distill_alpha=0.7,
        prompts_per_domain=64,
        eval_batches=8,
        mid=ModelShape(hidden=384, layers=2, heads=6, intermediate=1024),
        mid_steps=500,
    ),
    # For one GPU (experiments/gpu_check.py, with a wall-clock cap: build(max_seconds=...)): a
    # 312M-parameter target and an 8.5M draft; steps sized by training_flops() for about 3 minutes
    # on one H200 (an estimate; no GPU has checked it).
    "gpu": Preset(
        name="gpu",
        vocab_size=4096,
        context=1024,
        target=ModelShape(hidden=1024, layers=24, heads=16, intermediate=2816),
        draft=ModelShape(hidden=512, layers=2, heads=8, intermediate=1408),
        max_files=None,
        heldout_percent=5,
        seq_len=512,
        batch_size=32,
        target_steps=600,
        draft_steps=500,
        target_lr=6e-4,
        draft_lr=2e-3,
        mix_target=(0.5, 0.3, 0.2),
        mix_draft=(0.6, 0.4, 0.0),
        distill_temperature=2.0,
        distill_alpha=0.7,
        prompts_per_domain=12,  # 12 train, 6 validation, 6 test prompts per domain: few traces to record
        eval_batches=8,
    ),
}
