"""P(a drafted token is accepted | the draft's signals): the acceptance predictor, a logistic
regression on the draft's confidence and entropy. The per-token stop rules apply it
(:mod:`specrl.controllers.stop_rules`), an exported policy carries one, and
:func:`specrl.rule_tuning.fit_acceptance_predictor` fits it on train traces.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specrl.io import write_text_atomic

PREDICTOR_FORMAT = "specrl-acceptance-predictor"
PREDICTOR_FORMAT_VERSION = 1
PREDICTOR_FEATURES = ("bias", "confidence", "log_confidence", "entropy")


class PredictorError(ValueError):
    """An acceptance-predictor file is missing, corrupt or of another format version."""


class AcceptancePredictor:
    """P(a drafted token is accepted | its draft signals): a logistic regression on
    ``PREDICTOR_FEATURES`` of the draft's confidence max_v q(v) and the entropy of q (nats), with
    ``weights`` (4,) and ``metadata`` (where it was fitted, the fit's quality)."""

    def __init__(self, weights: Sequence[float], metadata: dict[str, Any] | None = None) -> None:
        weights = [float(w) for w in weights]
        if len(weights) != len(PREDICTOR_FEATURES) or not all(math.isfinite(w) for w in weights):
            raise PredictorError(
                f"an acceptance predictor needs {len(PREDICTOR_FEATURES)} finite weights "
                f"{PREDICTOR_FEATURES}, got {weights}"
            )
        self.weights = tuple(weights)
        self.metadata = dict(metadata or {})

    @staticmethod
    def features(confidence: np.ndarray, entropy: np.ndarray) -> np.ndarray:
        """(N, 4) design matrix of the signals."""
        confidence = np.asarray(confidence, dtype=np.float64)
        entropy = np.asarray(entropy, dtype=np.float64)
        return np.stack(
            [
                np.ones_like(confidence),
                confidence,
                np.log(np.maximum(confidence, 1e-6)),
                np.maximum(entropy, 0.0),
            ],
            axis=1,
        )

    def probability(self, confidence: float, entropy: float) -> float:
        """Predicted acceptance probability of one token (scalar math: the engine's hot path)."""
        w0, w1, w2, w3 = self.weights
        z = w0 + w1 * confidence + w2 * math.log(max(confidence, 1e-6)) + w3 * max(entropy, 0.0)
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def probabilities(self, confidence: np.ndarray, entropy: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`probability`."""
        z = self.features(confidence, entropy) @ np.asarray(self.weights)
        return 1.0 / (1.0 + np.exp(-np.clip(z, -700, 700)))

    @classmethod
    def fit(
        cls,
        confidence: np.ndarray,
        entropy: np.ndarray,
        target: np.ndarray,
        l2: float = 1e-6,
        iterations: int = 50,
        metadata: dict[str, Any] | None = None,
    ) -> AcceptancePredictor:
        """Maximum-likelihood fit by iteratively reweighted least squares. ``target`` may be soft (a
        sampled trace's acceptance probability min(1, q/p), the accept test's expected outcome)."""
        x = cls.features(confidence, entropy)
        y = np.clip(np.asarray(target, dtype=np.float64), 0.0, 1.0)
        if len(y) < len(PREDICTOR_FEATURES) or len(x) != len(y):
            raise ValueError(
                f"fitting needs matching signals and targets, at least 4; got {len(x)}, {len(y)}"
            )
        w = np.zeros(x.shape[1])
        penalty = l2 * len(y) * np.eye(x.shape[1])
        penalty[0, 0] = 0.0  # the bias is not shrunk
        for _ in range(iterations):
            p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -700, 700)))
            gradient = x.T @ (p - y) + penalty @ w
            hessian = (x * (p * (1 - p))[:, None]).T @ x + penalty + 1e-9 * np.eye(len(w))
            step = np.linalg.solve(hessian, gradient)
            w -= step
            if np.abs(step).max() < 1e-8:
                break
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -700, 700)))
        eps = 1e-12
        log_loss = float(-np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)))
        base = float(np.clip(y.mean(), eps, 1 - eps))
        base_loss = float(-(base * math.log(base) + (1 - base) * math.log(1 - base)))
        fit = {"samples": int(len(y)), "log_loss": log_loss, "log_loss_of_base_rate": base_loss}
        return cls(w.tolist(), {**(metadata or {}), "fit": fit})

    # ---- files ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PREDICTOR_FORMAT,
            "version": PREDICTOR_FORMAT_VERSION,
            "features": list(PREDICTOR_FEATURES),
            "weights": list(self.weights),
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> AcceptancePredictor:
        if not isinstance(data, dict) or data.get("format") != PREDICTOR_FORMAT:
            raise PredictorError(f"{source} is not an acceptance predictor (format {PREDICTOR_FORMAT!r})")
        if data.get("version") != PREDICTOR_FORMAT_VERSION or data.get("features") != list(
            PREDICTOR_FEATURES
        ):
            raise PredictorError(
                f"{source} has predictor format version {data.get('version')} with features "
                f"{data.get('features')}; this specrl reads version {PREDICTOR_FORMAT_VERSION} with "
                f"{list(PREDICTOR_FEATURES)}: refit it (specrl.rule_tuning.fit_acceptance_predictor)"
            )
        return cls(data["weights"], data.get("metadata"))

    def save(self, path: str | Path) -> None:
        write_text_atomic(Path(path), json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> AcceptancePredictor:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as error:
            raise PredictorError(f"no acceptance predictor at {path}: fit one first") from error
        except json.JSONDecodeError as error:
            raise PredictorError(f"{path} is not valid JSON ({error}); refit it") from error
        return cls.from_dict(data, str(path))

    def __repr__(self) -> str:
        return f"AcceptancePredictor(weights={[round(w, 4) for w in self.weights]})"
