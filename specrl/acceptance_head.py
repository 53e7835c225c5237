"""A SpecDec++-style acceptance head: P(accept | the draft's last hidden state and its signals).

SpecDec++ (Huang, Guo and Wang, COLM 2025, arXiv:2405.19715) trains a head on the draft's last
hidden state that predicts whether the target accepts the drafted token, and stops drafting when
the predicted chance of a rejection crosses a threshold. specrl's stop rules use
:class:`~specrl.acceptance.AcceptancePredictor`, a logistic regression on the draft's confidence
and entropy only. This module is the measurement of whether the hidden state adds anything
(issue 33, item 2; ``experiments/acceptance_head.py`` runs it):

- :func:`draft_hidden_states`: the draft's last-layer hidden state h_j that produced q_j at every
  generated position j of a trace segment (the state at the position before token j), from one
  teacher-forced forward over prompt + y_<n, no per-token loop.
- :func:`trace_positions`: those states with the trace's confidence, entropy and acceptance
  target (``accept_prob``: 0/1 greedy, min(1, q/p) sampled) at every on-trajectory position.
  The prompt of a trace is ``encode(prompts[domain][prompt_index])`` of the trace's split, as
  :class:`~specrl.envs.spec_decode.SpecDecodeEnv` encodes it; every position is checked against
  the stored confidence, so a misaligned prompt fails loudly.
- :class:`AcceptanceHead`: logit = b + w . (confidence, log confidence, entropy) + g(h), where
  g is linear (``hidden_units=0``) or a one-hidden-layer ReLU MLP. Only g is penalised (L2 on the
  standardised inputs, per sample), so a large penalty gives back the confidence-only predictor
  (same features as :data:`~specrl.acceptance.PREDICTOR_FEATURES`): the head nests it.
  Sampled traces' targets are probabilities: the loss is cross-entropy with soft targets.

**Position in the draft.** SpecDec++ also feeds the position i within the current draft. A
trace is not drafted in steps: every position j lies on the target's trajectory, with the true
prefix y_<j as the draft's context, whichever step it would fall in. The acceptance of y_j given
that prefix, and the draft's h_j, confidence and entropy there, are the same whether j is the
first or the fifth token of a step, so on the trajectory the position carries no information
about the target and is left out (exactly, not as an approximation). Online, a position i > 0 is
reached only when 0..i-1 are accepted; the stop rule already conditions on that through the
product of its per-token predictions (:class:`~specrl.controllers.stop_rules.SpecDecPPController`,
``cumulative=True``). Off the trajectory (the draft's continuation past a rejection, the trace's
``off_*`` columns) the head would need the hidden states of that continuation too; the traces
would have to record the head's prediction there for replay to stay exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from specrl.engine.sampling import SamplingConfig
from specrl.traces import TraceSet
from specrl.traces.analysis import rebuilt_prompt

if TYPE_CHECKING:
    from specrl.models import ModelPair

#: The draft signals the head reads beside the hidden state (the confidence-only predictor's).
SIGNALS = ("confidence", "log_confidence", "entropy")
#: Probabilities are clipped to [EPS, 1 - EPS] in the log loss.
EPS = 1e-7


# ---- the hidden state at each generated position ----------------------------------------------


def _teacher_forced(
    model: torch.nn.Module, prompt_ids: Sequence[int], tokens: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, H) last-layer hidden states and (n, V') logits that produced q_j, j = 0..n-1."""
    if not prompt_ids:
        raise ValueError("a segment needs at least one prompt token (q_0 is computed after it)")
    n = len(tokens)
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(tokens[: max(n - 1, 0)])], dtype=torch.long, device=device)
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    start = len(prompt_ids) - 1  # the position whose output is q_0
    return out.hidden_states[-1][0, start : start + n].float(), out.logits[0, start : start + n].float()


def draft_hidden_states(
    model: torch.nn.Module, prompt_ids: Sequence[int], tokens: Sequence[int]
) -> torch.Tensor:
    """(len(tokens), H): the last-layer hidden state h_j of ``model`` that produced q_j, the
    distribution of token j after ``prompt_ids`` + ``tokens[:j]``; one forward, teacher-forced.

    For a Hugging Face causal LM this is ``hidden_states[-1]`` (after the final norm: the
    logits are ``lm_head(h_j)``) at position ``len(prompt_ids) - 1 + j``.
    """
    return _teacher_forced(model, prompt_ids, tokens)[0]


@dataclass
class Positions:
    """The on-trajectory positions of some traces: what the head reads and what it predicts.

    Attributes:
        hidden: (N, H) float32, the draft's h_j.
        confidence, entropy: (N,) the draft's signals as the trace stores them.
        target: (N,) ``accept_prob`` (0/1 greedy, a probability sampled).
        trace: (N,) the index of the position's trace within its set (for resampling by prompt).
        domain: (N,) the trace's domain.
    """

    hidden: np.ndarray
    confidence: np.ndarray
    entropy: np.ndarray
    target: np.ndarray
    trace: np.ndarray
    domain: np.ndarray

    def __len__(self) -> int:
        return len(self.target)

    def select(self, mask: np.ndarray) -> Positions:
        return Positions(*(getattr(self, f)[mask] for f in _POSITION_FIELDS))

    def of_domain(self, domain: str) -> Positions:
        return self.select(self.domain == domain)

    @classmethod
    def concatenate(cls, parts: Sequence[Positions]) -> Positions:
        """Positions of several sets; trace indices are renumbered so they stay distinct."""
        if not parts:
            raise ValueError("nothing to concatenate")
        shifted, offset = [], 0
        for part in parts:
            shifted.append(part.trace + offset)
            offset += int(part.trace.max()) + 1 if len(part) else 0
        columns = {f: np.concatenate([getattr(p, f) for p in parts]) for f in _POSITION_FIELDS}
        columns["trace"] = np.concatenate(shifted)
        return cls(**columns)


_POSITION_FIELDS = ("hidden", "confidence", "entropy", "target", "trace", "domain")


def trace_positions(
    traces: TraceSet,
    prompts: Mapping[str, Sequence[str]],
    pair: ModelPair,
    check_tolerance: float = 1e-4,
) -> Positions:
    """Every on-trajectory position (``[0, end)`` of each segment, as
    :func:`specrl.rule_tuning.on_trajectory_signals` selects them) of ``traces`` with the draft's
    hidden state there.

    Args:
        traces: one-segment traces (a domain shift's later prompts were drawn at random and are
            not stored, so those segments cannot be rebuilt).
        prompts: domain -> prompt texts of the traces' split (``scenario.prompt_sets(pair)``).
        pair: the pair the traces were recorded with (its draft and tokenizer).
        check_tolerance: the largest difference allowed between the draft's confidence recomputed
            from the forward and the stored one (a wrong prompt or offset fails here).

    Raises:
        TraceError: a multi-segment trace, or a prompt of another length than the segment's.
        ValueError: recomputed confidences that do not match the trace.
    """
    sampling = SamplingConfig(**traces.meta["sampling"])
    parts: dict[str, list] = {f: [] for f in _POSITION_FIELDS}
    for index, trace in enumerate(traces.traces):
        segment, prompt_ids = rebuilt_prompt(trace, prompts, pair)
        n = segment.end
        hidden, logits = _teacher_forced(pair.draft, prompt_ids, segment.tokens[:n])
        confidence = np.asarray(segment.confidence[:n], dtype=np.float64)
        recomputed = sampling.probs(logits[:, : pair.vocab_size]).max(-1).values.double().cpu().numpy()
        worst = float(np.abs(recomputed - confidence).max()) if n else 0.0
        if worst > check_tolerance:
            raise ValueError(
                f"trace {index} ({trace.domain}#{trace.prompt_index}): the draft's confidence from the "
                f"forward differs from the stored one by {worst:.2e}; hidden states are misaligned"
            )
        parts["hidden"].append(hidden.cpu().numpy().astype(np.float32))
        parts["confidence"].append(confidence)
        parts["entropy"].append(np.asarray(segment.entropy[:n], dtype=np.float64))
        parts["target"].append(np.asarray(segment.accept_prob[:n], dtype=np.float64))
        parts["trace"].append(np.full(n, index, dtype=np.int64))
        parts["domain"].append(np.full(n, trace.domain, dtype=object))
    return Positions(**{f: np.concatenate(v) for f, v in parts.items()})


# ---- metrics ------------------------------------------------------------------------------------


def log_loss(probability: np.ndarray, target: np.ndarray) -> float:
    """Mean cross-entropy (nats) of predictions against 0/1 or soft targets."""
    p = np.clip(np.asarray(probability, dtype=np.float64), EPS, 1 - EPS)
    y = np.clip(np.asarray(target, dtype=np.float64), 0.0, 1.0)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def entropy_floor(target: np.ndarray) -> float:
    """The log loss of a perfect predictor of soft targets: the mean binary entropy of the
    targets (0 for 0/1 targets); a sampled trace's log loss cannot go below it."""
    y = np.clip(np.asarray(target, dtype=np.float64), EPS, 1 - EPS)
    return float(-np.mean(y * np.log(y) + (1 - y) * np.log(1 - y)))


def weighted_auc(score: np.ndarray, target: np.ndarray) -> float:
    """ROC AUC where each position counts as a positive with weight y and a negative with weight
    1 - y (ties count half). For 0/1 targets this is the usual AUC; for a sampled trace's
    acceptance probabilities it is the AUC against the accept test's outcome in expectation over
    its coin, with no draw. NaN when one class has no weight."""
    score = np.asarray(score, dtype=np.float64)
    y = np.clip(np.asarray(target, dtype=np.float64), 0.0, 1.0)
    values, inverse = np.unique(score, return_inverse=True)
    positive = np.bincount(inverse, weights=y, minlength=len(values))
    negative = np.bincount(inverse, weights=1 - y, minlength=len(values))
    total = positive.sum() * negative.sum()
    if total <= 0:
        return float("nan")
    below = np.cumsum(negative) - negative
    return float(np.sum(positive * (below + 0.5 * negative)) / total)


# ---- the head -----------------------------------------------------------------------------------


def signal_features(confidence: np.ndarray, entropy: np.ndarray) -> np.ndarray:
    """(N, 3): confidence, log confidence, entropy, as the confidence-only predictor reads them."""
    confidence = np.asarray(confidence, dtype=np.float64)
    return np.stack(
        [confidence, np.log(np.maximum(confidence, 1e-6)), np.maximum(np.asarray(entropy, np.float64), 0.0)],
        axis=1,
    )


class AcceptanceHead:
    """P(accept) = sigmoid(b + w . standardised signals + g(standardised h)) (the module doc).

    Attributes:
        hidden_units: 0 for a linear g, else the width of g's ReLU layer.
        l2: the penalty on g's weights (per sample, on standardised inputs).
        mean, scale: the standardisation of [signals, h], from the training positions.
        params: the fitted tensors (float64), by name.
    """

    def __init__(
        self,
        hidden_units: int,
        l2: float,
        mean: np.ndarray,
        scale: np.ndarray,
        params: dict[str, torch.Tensor],
        fit: dict[str, Any] | None = None,
    ) -> None:
        self.hidden_units, self.l2 = hidden_units, l2
        self.mean, self.scale, self.params = mean, scale, params
        self.fit_info = dict(fit or {})

    @staticmethod
    def _forward(params: dict[str, torch.Tensor], x: torch.Tensor, hidden_units: int) -> torch.Tensor:
        signals, h = x[:, : len(SIGNALS)], x[:, len(SIGNALS) :]
        logit = params["bias"] + signals @ params["signal_weights"]
        if hidden_units:
            logit = logit + torch.relu(h @ params["w1"] + params["b1"]) @ params["w2"]
        else:
            logit = logit + h @ params["hidden_weights"]
        return logit

    def _inputs(self, hidden: np.ndarray, confidence: np.ndarray, entropy: np.ndarray) -> torch.Tensor:
        x = np.concatenate([signal_features(confidence, entropy), np.asarray(hidden, np.float64)], axis=1)
        return torch.from_numpy((x - self.mean) / self.scale)

    def logits(self, hidden: np.ndarray, confidence: np.ndarray, entropy: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            x = self._inputs(hidden, confidence, entropy)
            return self._forward(self.params, x, self.hidden_units).numpy()

    def probabilities(self, hidden: np.ndarray, confidence: np.ndarray, entropy: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-np.clip(self.logits(hidden, confidence, entropy), -700, 700)))

    def predict(self, positions: Positions) -> np.ndarray:
        return self.probabilities(positions.hidden, positions.confidence, positions.entropy)

    @classmethod
    def fit(
        cls,
        positions: Positions,
        l2: float,
        hidden_units: int = 0,
        seed: int = 0,
        max_iterations: int = 300,
    ) -> AcceptanceHead:
        """Minimise mean cross-entropy (soft targets allowed) + l2 / 2 * |g's weights|^2 by full-batch
        L-BFGS; the bias and the signal weights are not penalised. Deterministic given ``seed``."""
        x = np.concatenate(
            [signal_features(positions.confidence, positions.entropy), positions.hidden.astype(np.float64)],
            axis=1,
        )
        mean, scale = x.mean(0), x.std(0)
        scale[scale < 1e-8] = 1.0
        inputs = torch.from_numpy((x - mean) / scale)
        target = torch.from_numpy(np.clip(positions.target, 0.0, 1.0).astype(np.float64))
        d = x.shape[1] - len(SIGNALS)
        generator = torch.Generator().manual_seed(seed)
        params = {
            "bias": torch.zeros((), dtype=torch.float64),
            "signal_weights": torch.zeros(len(SIGNALS), dtype=torch.float64),
        }
        if hidden_units:
            params["w1"] = torch.randn(d, hidden_units, generator=generator, dtype=torch.float64) / d**0.5
            params["b1"] = torch.zeros(hidden_units, dtype=torch.float64)
            params["w2"] = torch.randn(hidden_units, generator=generator, dtype=torch.float64) * 0.01
            penalised = ("w1", "w2")
        else:
            params["hidden_weights"] = torch.zeros(d, dtype=torch.float64)
            penalised = ("hidden_weights",)
        for value in params.values():
            value.requires_grad_(True)
        optimiser = torch.optim.LBFGS(
            list(params.values()),
            lr=1.0,
            max_iter=max_iterations,
            tolerance_grad=1e-7,
            tolerance_change=1e-10,
            history_size=20,
            line_search_fn="strong_wolfe",
        )

        def objective() -> torch.Tensor:
            optimiser.zero_grad()
            logit = cls._forward(params, inputs, hidden_units)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, target)
            loss = loss + 0.5 * l2 * sum((params[name] ** 2).sum() for name in penalised)
            loss.backward()
            return loss

        optimiser.step(objective)
        fitted = {name: value.detach() for name, value in params.items()}
        head = cls(hidden_units, l2, mean, scale, fitted)
        head.fit_info = {
            "samples": len(positions),
            "train_log_loss": log_loss(head.predict(positions), positions.target),
            "iterations": int(optimiser.state[optimiser._params[0]]["n_iter"]),
        }
        return head

    def __repr__(self) -> str:
        kind = f"mlp{self.hidden_units}" if self.hidden_units else "linear"
        return f"AcceptanceHead({kind}, l2={self.l2:g})"


@dataclass(frozen=True)
class Candidate:
    """One setting the selection tries: g's width (0 linear) and its L2 penalty."""

    hidden_units: int
    l2: float

    @property
    def name(self) -> str:
        return f"{'linear' if not self.hidden_units else f'mlp{self.hidden_units}'} l2={self.l2:g}"


def leave_one_domain_out(
    train: Positions, validation: Positions, candidates: Sequence[Candidate], domains: Sequence[str]
) -> dict[str, Any]:
    """Each candidate's validation log loss on each held-out domain, fitted on the train positions
    of the other domains; the candidate with the lowest mean over the held-out domains wins.

    Returns:
        ``{"rows": [{"candidate", "hidden_units", "l2", "per_domain": {d: loss}, "mean"}],
        "best": index into rows}``
    """
    rows = []
    folds = {d: (train.select(train.domain != d), validation.of_domain(d)) for d in domains}
    for candidate in candidates:
        per_domain = {}
        for domain, (fit_on, held_out) in folds.items():
            head = AcceptanceHead.fit(fit_on, candidate.l2, candidate.hidden_units)
            per_domain[domain] = log_loss(head.predict(held_out), held_out.target)
        rows.append(
            {
                "candidate": candidate.name,
                "hidden_units": candidate.hidden_units,
                "l2": candidate.l2,
                "per_domain": per_domain,
                "mean": float(np.mean(list(per_domain.values()))),
            }
        )
    best = min(range(len(rows)), key=lambda i: rows[i]["mean"])
    return {"rows": rows, "best": best}


def select_in_domain(
    train: Positions, validation: Positions, candidates: Sequence[Candidate]
) -> tuple[AcceptanceHead, dict[str, float]]:
    """The head of the candidate with the lowest log loss on ``validation`` (the same domains as
    ``train``: a per-scenario head, tuned as the rules are), fitted on ``train``; and every
    candidate's validation log loss by name."""
    losses, heads = {}, {}
    for candidate in candidates:
        head = AcceptanceHead.fit(train, candidate.l2, candidate.hidden_units)
        heads[candidate.name] = head
        losses[candidate.name] = log_loss(head.predict(validation), validation.target)
    return heads[min(losses, key=losses.__getitem__)], losses
