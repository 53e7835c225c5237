"""Distil a pretrained pair's draft from its target: the target answers training chat requests
greedily (its text and its top log-probabilities at every answer position are kept, once, in the
cache), the draft (:class:`~specrl.pretrained.draft.DraftShape`, started from the target's own
weights) learns them by logit distillation, and greedy agreement with the target on held-out
requests is measured: the acceptance per drafted token of greedy speculative decoding."""

from __future__ import annotations

import collections
import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from specrl.pretrained.chat import chat_text
from specrl.pretrained.draft import make_draft
from specrl.pretrained.requests import SOURCES, requests
from specrl.pretrained.sources import DistilSettings


@dataclass
class TeacherAnswers:
    """The target's greedy answers to chat requests: per request, its ids (prompt then answer,
    ``prompt_length`` of them the prompt) and, per answer token, the target's top token ids and
    their log-probabilities at the position that predicts it."""

    ids: list[torch.Tensor]  # (L,) each
    prompt_length: list[int]
    top_ids: list[torch.Tensor]  # (L - prompt_length, K) each
    top_logprobs: list[torch.Tensor]  # (L - prompt_length, K) each
    domains: list[str]
    vocab_size: int = 0  # the target's vocabulary (its logits' width)

    def answer_tokens(self) -> list[int]:
        return [t for ids, n in zip(self.ids, self.prompt_length, strict=True) for t in ids[n:].tolist()]


@torch.inference_mode()
def teacher_answers(
    target, tokenizer, prompts: list[tuple[str, str]], new_tokens: int, batch: int, top: int
) -> TeacherAnswers:
    """The target's greedy answers to ``prompts`` ((domain, prompt text) pairs), in left-padded
    batches through ``generate``; each cut after its end of turn (the tokenizer's EOS)."""
    tokenizer.padding_side = "left"
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    answers = TeacherAnswers([], [], [], [], [], vocab_size=int(target.config.vocab_size))
    for start in tqdm(range(0, len(prompts), batch), desc="target answers", unit="batch", mininterval=2.0):
        chunk = prompts[start : start + batch]
        encoded = tokenizer(
            [text for _, text in chunk],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )
        out = target.generate(
            **encoded, max_new_tokens=new_tokens, do_sample=False, output_logits=True,
            return_dict_in_generate=True, pad_token_id=pad, eos_token_id=eos,
        )  # fmt: skip
        width = encoded["input_ids"].shape[1]
        logprobs = torch.stack(out.logits, 1).float().log_softmax(-1)  # (B, N, V)
        best = logprobs.topk(top, dim=-1)
        for row, (domain, _) in enumerate(chunk):
            prompt = encoded["input_ids"][row][encoded["attention_mask"][row].bool()]
            answer = out.sequences[row, width:]
            ends = (answer == eos).nonzero()
            length = int(ends[0]) + 1 if len(ends) else len(answer)
            answers.ids.append(torch.cat([prompt, answer[:length]]))
            answers.prompt_length.append(len(prompt))
            answers.top_ids.append(best.indices[row, :length].to(torch.int32))
            answers.top_logprobs.append(best.values[row, :length].half())
            answers.domains.append(domain)
    return answers


def kept_tokens(answers: TeacherAnswers, count: int, always: list[int]) -> list[int]:
    """``count`` token ids, sorted: ``always``, then the answer tokens from the most frequent down,
    then (when the answers hold fewer distinct tokens) the lowest ids not kept yet: a byte-pair
    vocabulary numbers its merges in the order it learned them, the most frequent first."""
    counts = collections.Counter(answers.answer_tokens())
    ranked = [token for token, _ in counts.most_common()]
    kept = list(dict.fromkeys([*always, *ranked]))[:count]
    chosen = set(kept)
    kept += [token for token in range(answers.vocab_size) if token not in chosen][: count - len(kept)]
    return sorted(kept)


def distillation_loss(
    kept_logits: torch.Tensor,
    top_ids: torch.Tensor,
    top_logprobs: torch.Tensor,
    to_row: torch.Tensor,
    hard: float,
) -> torch.Tensor:
    """KL from the teacher's top log-probabilities (restricted to the kept tokens, renormalised) to
    the draft, plus ``hard`` x cross-entropy on the teacher's argmax when it is kept.

    Args:
        kept_logits: (N, V_kept) the draft's logits at N answer positions.
        top_ids, top_logprobs: (N, K) the teacher's top tokens (vocabulary ids) and log-probabilities.
        to_row: (V,) a vocabulary id's row in the draft's head, -1 where not kept.
    """
    rows = to_row[top_ids.long()]  # (N, K)
    inside = rows >= 0
    teacher = top_logprobs.float().masked_fill(~inside, float("-inf")).log_softmax(-1)  # (N, K)
    teacher = teacher.masked_fill(~inside, 0.0)
    student = kept_logits.log_softmax(-1).gather(-1, rows.clamp(min=0))  # (N, K)
    weights = teacher.exp() * inside
    usable = inside.any(-1)
    kl = (weights * (teacher - student)).sum(-1)[usable].mean()
    argmax_kept = inside[:, 0]  # the teacher's top-1 is column 0 of topk
    ce = -student[:, 0][argmax_kept].mean() if argmax_kept.any() else kl.new_zeros(())
    return kl + hard * ce


def batches(answers: TeacherAnswers, order: list[int], size: int):
    """Right-padded batches of whole requests: (ids (B, L), the requests' indices)."""
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        longest = max(len(answers.ids[r]) for r in rows)
        ids = torch.zeros((len(rows), longest), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(answers.ids[r])] = answers.ids[r]
        yield ids, rows


def answer_positions(answers: TeacherAnswers, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) batch rows and (N,) input positions whose next token is an answer token."""
    which, where = [], []
    for i, r in enumerate(rows):
        n, length = answers.prompt_length[r], len(answers.ids[r])
        which += [i] * (length - n)
        where += list(range(n - 1, length - 1))
    return torch.tensor(which), torch.tensor(where)


def train_draft(draft, answers: TeacherAnswers, settings: DistilSettings) -> list[float]:
    """Distil ``draft`` (a sub-vocabulary draft: :meth:`kept_logits`) on ``answers``; the losses."""
    generator = torch.Generator().manual_seed(settings.seed)
    vocab = draft.config.vocab_size
    to_row = torch.full((vocab,), -1, dtype=torch.long)
    to_row[torch.tensor(draft.config.kept_tokens)] = torch.arange(len(draft.config.kept_tokens))
    draft.get_input_embeddings().weight.requires_grad_(settings.train_embeddings)
    parameters = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.0)
    per_epoch = math.ceil(len(answers.ids) / settings.batch_size)
    steps = settings.epochs * per_epoch
    losses: list[float] = []
    draft.train()
    progress = tqdm(total=steps, desc="distil draft", unit="step", mininterval=2.0)
    for _ in range(settings.epochs):
        order = torch.randperm(len(answers.ids), generator=generator).tolist()
        for ids, rows in batches(answers, order, settings.batch_size):
            step = len(losses)
            for group in optimizer.param_groups:  # warm-up, then cosine to a tenth
                warm = min(1.0, (step + 1) / max(1, steps // 20))
                group["lr"] = settings.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
            which, where = answer_positions(answers, rows)
            hidden = draft.model(input_ids=ids).last_hidden_state  # (B, L, H)
            kept_logits = draft.kept_logits(hidden[which, where])  # (N, V_kept)
            top_ids = torch.cat([answers.top_ids[r] for r in rows])
            top_logprobs = torch.cat([answers.top_logprobs[r] for r in rows])
            loss = distillation_loss(kept_logits, top_ids, top_logprobs, to_row, settings.hard)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            losses.append(loss.item())
            progress.update()
            if step % 5 == 0:
                progress.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    progress.close()
    draft.eval()
    return losses


@torch.inference_mode()
def agreement(draft, answers: TeacherAnswers) -> dict[str, float]:
    """Per domain and overall: the share of the target's greedy answer tokens that are the draft's
    argmax after the same prefix (greedy speculative decoding's acceptance per drafted token)."""
    hits: dict[str, list[int]] = collections.defaultdict(list)
    for r in range(len(answers.ids)):
        n = answers.prompt_length[r]
        logits = draft(input_ids=answers.ids[r][None, :-1]).logits[0, n - 1 :]  # (answer, V)
        hits[answers.domains[r]] += (logits.argmax(-1) == answers.ids[r][n:]).tolist()
    result = {domain: sum(h) / len(h) for domain, h in sorted(hits.items())}
    every = [x for h in hits.values() for x in h]
    return result | {"all": sum(every) / len(every), "tokens": len(every)}


def cache_key(settings: DistilSettings, part: str) -> str:
    """The name of a cached part (``teacher``) for the settings it depends on."""
    keys = {"teacher": ("requests", "heldout", "new_tokens", "top_logits", "seed")}[part]
    digest = hashlib.sha256(json.dumps({k: getattr(settings, k) for k in keys}).encode()).hexdigest()
    return f"{part}-{digest[:12]}.pt"


def distil(target, tokenizer, settings: DistilSettings, cache: Path) -> tuple[object, dict]:
    """The distilled draft and its card entry; the target's answers are read from ``cache`` or
    made there first."""
    started = time.time()
    path = cache / cache_key(settings, "teacher")
    if path.is_file():
        train, heldout = torch.load(path, weights_only=False)
    else:
        sets = requests(settings.seed, settings.requests, settings.heldout)
        made = []
        for split in ("train", "test"):
            messages = [(domain, chat_text(tokenizer, m)) for domain, ms in sets[split].items() for m in ms]
            made.append(
                teacher_answers(
                    target,
                    tokenizer,
                    messages,
                    settings.new_tokens,
                    settings.generate_batch,
                    settings.top_logits,
                )
            )
        train, heldout = made
        cache.mkdir(parents=True, exist_ok=True)
        torch.save((train, heldout), path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
    teacher_seconds = time.time() - started
    shape = settings.shape
    kept = kept_tokens(train, shape.kept, always=[tokenizer.eos_token_id]) if shape.kept else None
    draft = make_draft(target, shape, kept)
    before = agreement(draft, heldout)
    losses = train_draft(draft, train, settings)
    entry = {
        "made": f"distilled from the target: {shape.label}, started from the target's weights",
        "settings": settings.to_dict(),
        "requests": SOURCES,
        "answer_tokens": {"train": len(train.answer_tokens()), "heldout": len(heldout.answer_tokens())},
        "kept_answer_share": _share(heldout, kept),
        "agreement_before": before,
        "agreement": agreement(draft, heldout),
        "final_loss": round(sum(losses[-10:]) / len(losses[-10:]), 4),
        "steps": len(losses),
        "seconds": {"teacher": round(teacher_seconds, 1), "total": round(time.time() - started, 1)},
    }
    return draft, entry


def _share(answers: TeacherAnswers, kept: list[int] | None) -> float:
    tokens = answers.answer_tokens()
    if kept is None:
        return 1.0
    keep = set(kept)
    return sum(t in keep for t in tokens) / len(tokens)
