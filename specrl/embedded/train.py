"""Tokenizer, pre-training of the target, distillation of the draft, held-out evaluation."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specrl.embedded.corpus import DOMAINS
from specrl.embedded.presets import ModelShape, Preset

EOS = "<|endoftext|>"


def train_tokenizer(texts: Iterator[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE: every byte string is encodable, nothing maps to <unk>."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=EOS, eos_token=EOS, pad_token=EOS, unk_token=EOS
    )


def encode_streams(tokenizer: PreTrainedTokenizerFast, docs: dict[str, list[str]]) -> dict[str, np.ndarray]:
    """Each domain's documents as one token stream, documents separated by EOS."""
    eos = tokenizer.eos_token_id
    streams = {}
    for domain, texts in docs.items():
        ids: list[int] = []
        for encoding in tokenizer.backend_tokenizer.encode_batch(texts):
            ids.extend(encoding.ids)
            ids.append(eos)
        streams[domain] = np.asarray(ids, dtype=np.int32)
    return streams


def make_model(shape: ModelShape, preset: Preset, tokenizer: PreTrainedTokenizerFast, seed: int):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        max_position_embeddings=preset.context,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def sample_batch(
    streams: dict[str, np.ndarray],
    mix: tuple[float, float, float],
    batch_size: int,
    seq_len: int,
    rng: np.random.Generator,
) -> torch.Tensor:
    """(B, seq_len + 1) windows; each row's domain drawn from ``mix``."""
    weights = np.asarray(mix, dtype=np.float64) / sum(mix)
    rows = []
    for domain_index in rng.choice(len(DOMAINS), size=batch_size, p=weights):
        stream = streams[DOMAINS[domain_index]]
        start = rng.integers(0, len(stream) - seq_len - 1)
        rows.append(stream[start : start + seq_len + 1])
    return torch.from_numpy(np.stack(rows).astype(np.int64))


def lr_at(step: int, total: int, peak: float, warmup: int = 50) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _autocast(device: torch.device, enabled: bool = True):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


def distillation_loss(
    logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor, temperature: float, alpha: float
) -> torch.Tensor:
    """KD plus LM loss: ``alpha * T^2 * KL(teacher_T || student_T) + (1 - alpha) * CE(labels)``
    over N positions: the student's (N, V) logits, the teacher's logits or log-probabilities, the
    (N,) next tokens; T softens both distributions (T^2 keeps the gradient's scale)."""
    kl = F.kl_div(
        F.log_softmax(logits / temperature, -1),
        F.log_softmax(teacher_logits.float() / temperature, -1),
        log_target=True,
        reduction="batchmean",
    )
    return alpha * temperature**2 * kl + (1 - alpha) * F.cross_entropy(logits, labels)


def train(
    student: LlamaForCausalLM,
    streams: dict[str, np.ndarray],
    preset: Preset,
    seed: int,
    *,
    teacher: LlamaForCausalLM | None = None,
    desc: str,
    steps: int | None = None,
    bf16: bool = True,
    deadline: float | None = None,
) -> list[float]:
    """Pre-train (no teacher) or distil (:func:`distillation_loss`); the losses, one per step done.

    ``steps`` defaults to the preset's for the role; ``bf16`` runs forwards under bf16 autocast
    (how the shipped pair was built; several times slower than fp32 on a CPU). ``deadline`` (a
    ``time.monotonic()`` value): stop after the step that passes it, the learning rate schedule
    still the one of ``steps``.
    """
    device = next(student.parameters()).device
    steps = steps or (preset.draft_steps if teacher is not None else preset.target_steps)
    peak = preset.draft_lr if teacher is not None else preset.target_lr
    mix = preset.mix_draft if teacher is not None else preset.mix_target
    temperature, alpha = preset.distill_temperature, preset.distill_alpha
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.AdamW(student.parameters(), lr=peak, betas=(0.9, 0.95), weight_decay=0.1)
    student.train()
    losses = []
    progress = tqdm(range(steps), desc=desc, unit="step", mininterval=2.0)
    for step in progress:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps, peak)
        batch = sample_batch(streams, mix, preset.batch_size, preset.seq_len, rng).to(device)
        inputs, labels = batch[:, :-1], batch[:, 1:]
        with _autocast(device, bf16):
            logits = student(inputs).logits.float().flatten(0, 1)  # (B * T, V)
            if teacher is None:
                loss = F.cross_entropy(logits, labels.flatten())
            else:
                with torch.no_grad():
                    teacher_logits = teacher(inputs).logits.float().flatten(0, 1)
                loss = distillation_loss(logits, teacher_logits, labels.flatten(), temperature, alpha)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if step % 10 == 0:
            progress.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
        if deadline is not None and time.monotonic() >= deadline:
            break
    progress.close()
    student.eval()
    return losses


@torch.no_grad()
def evaluate(
    target: LlamaForCausalLM,
    draft: LlamaForCausalLM,
    streams: dict[str, np.ndarray],
    preset: Preset,
) -> dict[str, dict[str, float]]:
    """Held-out LM loss of both models and greedy agreement (argmax q == argmax p) per domain."""
    device = next(target.parameters()).device
    report: dict[str, dict[str, float]] = {}
    for domain in DOMAINS:
        stream = streams[domain]
        rng = np.random.default_rng(1234)
        totals = {"target_loss": 0.0, "draft_loss": 0.0, "agreement": 0.0}
        batches = 0
        for _ in range(preset.eval_batches):
            if len(stream) < preset.seq_len + 2:
                break
            batch = sample_batch({domain: stream}, _only(domain), preset.batch_size, preset.seq_len, rng)
            batch = batch.to(device)
            inputs, labels = batch[:, :-1], batch[:, 1:]
            p_logits = target(inputs).logits.float()
            q_logits = draft(inputs).logits.float()
            totals["target_loss"] += F.cross_entropy(p_logits.flatten(0, 1), labels.flatten()).item()
            totals["draft_loss"] += F.cross_entropy(q_logits.flatten(0, 1), labels.flatten()).item()
            totals["agreement"] += (p_logits.argmax(-1) == q_logits.argmax(-1)).float().mean().item()
            batches += 1
        report[domain] = {k: round(v / max(1, batches), 4) for k, v in totals.items()}
    return report


def _only(domain: str) -> tuple[float, float, float]:
    return tuple(1.0 if d == domain else 0.0 for d in DOMAINS)  # type: ignore[return-value]
