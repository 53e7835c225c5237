"""vLLM's prices: the serving latency model fitted from recorded steps (specrl.latency.serving).

Steps drawn from a known law plus noise: the fit recovers the law, reports its held-out error,
prices a batched step through the latency model's interface (packed: the rows' tokens in total and
their mean context), and a batch replay env runs on it; the steps' file round-trips and a bad
line is refused by file and line.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest

import specrl.envs  # noqa: F401 - registers the envs
from specrl.envs.batch_replay import BatchReplayEnv
from specrl.envs.scenario import Scenario
from specrl.latency import LatencyError, LatencyModel
from specrl.latency.model import fit_error_line
from specrl.latency.serving import (
    ServedStep,
    fit_serving_latency,
    read_served_steps,
    write_served_steps,
)

# The law the steps are drawn from (seconds): a GPU-like vLLM step and its proposer.
VERIFY = {"intercept": 6e-3, "row": 5e-5, "token": 2e-5, "context": 2e-8}
PREFILL = {"step": 2e-3, "token": 5e-5}
DRAFT = {"first": 1e-3, "first_row": 2e-5, "next": 6e-4, "next_row": 1e-5}
OVERHEAD = {"call": 2e-4, "row": 3e-5}


def draw_steps(count: int = 600, noise: float = 0.03, seed: int = 0, draft: bool = True) -> list[ServedStep]:
    """Steps of 1 to 64 rows, k 0..8 a row, some prefilling, half drafted by the draft model, each
    part's seconds the law's times lognormal noise; a few steps paused 5x."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(count):
        rows = int(rng.integers(1, 65))
        verified = rows + int(rng.integers(0, 9, rows).sum())
        context = rows * int(rng.integers(100, 8000))  # the rows' mean length varies apart from them
        prefilling = rng.random() < 0.15
        prefill_rows = int(rng.integers(1, 4)) if prefilling else 0
        prefill_tokens = int(rng.integers(50, 800, prefill_rows).sum())
        seconds = VERIFY["intercept"] + VERIFY["row"] * rows + VERIFY["token"] * verified
        seconds += VERIFY["context"] * context
        if prefilling:
            seconds += PREFILL["step"] + PREFILL["token"] * prefill_tokens
        drafting = draft and rng.random() < 0.5
        draft_rows = int(rng.integers(1, rows + 1)) if drafting else 0
        forwards = int(rng.integers(1, 9)) if drafting else 0
        draft_seconds = 0.0
        if drafting:
            draft_seconds = DRAFT["first"] + DRAFT["first_row"] * draft_rows
            draft_seconds += (forwards - 1) * (DRAFT["next"] + DRAFT["next_row"] * draft_rows)
        overhead = OVERHEAD["call"] + OVERHEAD["row"] * rows

        def noisy(value: float) -> float:
            return float(value * rng.lognormal(0.0, noise))

        seconds = noisy(seconds) * (5.0 if rng.random() < 0.01 else 1.0)
        draft_seconds = noisy(draft_seconds)
        steps.append(
            ServedStep(
                rows=rows,
                verified=verified,
                context=context,
                prefill_rows=prefill_rows,
                prefill_tokens=prefill_tokens,
                seconds=seconds,
                draft_rows=draft_rows,
                drafted=draft_rows * forwards,
                draft_forwards=forwards,
                draft_seconds=draft_seconds,
                propose_seconds=draft_seconds + noisy(overhead),
            )
        )
    return steps


@pytest.fixture(scope="module")
def served() -> LatencyModel:
    return fit_serving_latency(draw_steps(), pair="specrl-zoo-small", device="test")


def test_the_fit_recovers_the_law_and_reports_its_held_out_error(served):
    coefficients = served.measurement["coefficients"]
    assert coefficients["verify"] == pytest.approx(list(VERIFY.values()), rel=0.1)
    assert coefficients["prefill"] == pytest.approx(list(PREFILL.values()), rel=0.15)
    assert coefficients["draft"] == pytest.approx(list(DRAFT.values()), rel=0.1)
    assert coefficients["overhead"] == pytest.approx(list(OVERHEAD.values()), rel=0.1)
    error = served.fit_error
    assert error["method"] == "serving" and error["steps"] == 600
    step = error["step"]  # held out: every fifth step without prefill, its whole time
    assert 90 < step["steps"] < 120
    assert step["median"] < 0.05 and step["p90"] < 0.10 and abs(step["total"]) < 0.02
    assert error["draft"]["median"] < 0.05 and error["prefill_step"]["p90"] < 0.10
    line = fit_error_line(error)
    assert line.startswith("Held-out fit error") and "every 5th step of 600" in line
    assert f"step time median {100 * step['median']:.1f}%" in line
    assert served.kind == "serving" and served.packed
    assert served.measurement["covers"]["rows"] == [1, 64]


def law(coefficients: dict, rows: int, verified: int, context: int, forwards: int) -> tuple[float, float]:
    """(draft, verify with the proposer's overhead) of a step by the fitted coefficients."""
    a, b, c, d = coefficients["verify"]
    o0, o1 = coefficients["overhead"]
    g1, h1, g, h = coefficients["draft"]
    draft = g1 + h1 * rows + (forwards - 1) * (g + h * rows) if forwards else 0.0
    return draft, a + b * rows + c * verified + d * rows * context + o0 + o1 * rows


@pytest.mark.parametrize("rows", [1, 3, 10, 64, 100])
def test_the_model_prices_a_batched_step_through_the_latency_interface(served, rows):
    """Tabulated on a grid, the linear law comes back exactly between grid points: every row at
    one feed (target_seconds), or packed at the tokens the rows verify in total."""
    coefficients = served.measurement["coefficients"]
    verified = rows + 2 * rows + rows // 2  # k = 2 a row, and one more for half the rows
    draft, verify = served.step_seconds(700, 3, 3, rows=rows, verified=verified)
    assert (draft, verify) == pytest.approx(law(coefficients, rows, verified, 700, 3))
    padded = served.step_seconds(700, 3, 3, rows=rows)[1]  # every row at 3 proposals
    assert padded == pytest.approx(law(coefficients, rows, 4 * rows, 700, 3)[1])
    assert served.target_seconds(4, 700, rows) == pytest.approx(padded)
    assert verify <= padded
    assert served.step_seconds(700, 3, 3, "ngram", rows=rows, verified=verified)[0] == 0.0  # in the overhead
    line = served.price_line(rows, 700)
    assert line.per_token == pytest.approx(coefficients["verify"][2])
    assert line.draft_forward == pytest.approx(sum(law(coefficients, rows, rows, 700, 2)[:1]) / 2)
    e, f = coefficients["prefill"]
    assert served.prefill_seconds([201], rows, 701) == pytest.approx(e + f * 200)
    with pytest.raises(ValueError, match="verified must be >= rows"):
        served.step_seconds(700, 0, 0, rows=rows, verified=rows - 1)


def test_the_serving_model_round_trips_its_file_and_shows_its_error(served, tmp_path):
    path = tmp_path / "serving.json"
    served.save(path)
    again = LatencyModel.load(path)
    assert again.to_dict() == served.to_dict() and again.packed
    assert again.step_seconds(900, 2, 4, rows=12, verified=40) == served.step_seconds(
        900, 2, 4, rows=12, verified=40
    )
    assert "Held-out fit error" in again.to_markdown()


def test_a_batch_replay_env_prices_its_steps_as_vllm_packs_them(served):
    base = specrl.envs.load_scenario("batch_4")
    scenario = Scenario.from_dict(
        {
            "pair": {"preset": "small"},
            "prompts": {"domains": dict(base.prompts.domains)},
            "sampling": {"temperature": 0.0},
            "batch": {"size": 4, "requests": 8},
        }
    )
    env = BatchReplayEnv(scenario, latency=served, split="validation")
    env.reset(seed=0)
    done, step, cheaper = False, 0, False
    while not done:
        rows, width = list(env.active), env.grid.width
        context = round(sum(row.context_length for row in rows) / len(rows))
        _, reward, done, _, info = env.step(np.array([step % 6, 0]))
        results = info["step_results"]
        verified = sum(r.proposed + 1 for r in results)
        forwards = max(len(r.confidences) for r in results)
        proposed = max(r.proposed for r in results)
        priced = served.step_seconds(context, forwards, proposed, rows=len(rows), verified=verified)
        assert info["seconds"] == pytest.approx(sum(priced) + info["prefill_seconds"])
        assert np.isfinite(reward)
        padded = served.step_seconds(width + 1, forwards, proposed, rows=len(rows))
        cheaper |= sum(priced) < sum(padded)
        step += 1
    assert env.served == 8 and cheaper


def test_served_steps_round_trip_and_a_bad_line_is_named(tmp_path):
    steps = draw_steps(5)
    path = tmp_path / "steps.jsonl"
    write_served_steps(path, steps)
    assert read_served_steps(path) == steps
    lines = path.read_text().splitlines()
    bad = json.loads(lines[2])
    del bad["seconds"]
    path.write_text("\n".join([lines[0], lines[1], json.dumps(bad), *lines[3:]]) + "\n")
    with pytest.raises(
        LatencyError, match=r"steps.jsonl, line 3: not a served step: missing fields \['seconds'\]"
    ):
        read_served_steps(path)
    path.write_text(lines[0] + "\n{not json\n")
    with pytest.raises(LatencyError, match=r"steps.jsonl, line 2: not a JSON record"):
        read_served_steps(path)
    negative = dataclasses.asdict(steps[0]) | {"rows": -1}
    path.write_text(json.dumps(negative) + "\n")
    with pytest.raises(LatencyError, match=r"line 1: .*rows must be finite and >= 0"):
        read_served_steps(path)
    with pytest.raises(LatencyError, match="cannot read the served steps"):
        read_served_steps(tmp_path / "missing.jsonl")
    from_numpy = dataclasses.replace(steps[0], rows=np.int64(3), seconds=np.float32(0.5))
    assert type(from_numpy.rows) is int and type(from_numpy.seconds) is float
    with pytest.raises(ValueError, match="rows must be an integer, got 2.0"):
        dataclasses.replace(steps[0], rows=2.0)
    with pytest.raises(ValueError, match=r"verified \(1\) must be at least rows \(2\)"):
        dataclasses.replace(steps[0], rows=2, verified=1)


def test_too_few_steps_are_refused_and_a_run_without_the_draft_prices_it_free(caplog):
    with pytest.raises(LatencyError, match="record more steps"):
        fit_serving_latency(draw_steps(8))
    with caplog.at_level(logging.WARNING, logger="specrl.latency.serving"):
        lookup_only = fit_serving_latency(draw_steps(200, draft=False))
    assert "draft costs 0" in caplog.text
    assert lookup_only.measurement["coefficients"]["draft"] is None
    assert lookup_only.step_seconds(500, 4, 4, rows=8, verified=30)[0] == 0.0
    assert lookup_only.fit_error["draft"] is None


def test_specrl_calibrate_fits_recorded_serving_steps_into_prices_the_proposer_reads(tmp_path, capsys):
    from specrl.cli import main
    from specrl.vllm.proposer import proposer_prices

    path, out = tmp_path / "steps.jsonl", tmp_path / "vllm-prices.json"
    write_served_steps(path, draw_steps(300))
    argv = ["calibrate", "--method", "serving", "--preset", "tiny", "--from-steps", str(path)]
    with pytest.raises(SystemExit):
        main(argv)  # no --out
    assert "give --from-steps" in capsys.readouterr().err
    assert main([*argv, "--out", str(out)]) == 0
    model = LatencyModel.load(out)
    assert model.kind == "serving" and model.pair == "specrl-zoo-tiny"
    assert model.fit_error["step"]["median"] < 0.1
    assert "fitted 300 steps" in capsys.readouterr().out and out.with_suffix(".md").is_file()
    assert proposer_prices(str(out), 0.0) is not None  # additional_config {"specrl": {"prices": FILE}}
    second = tmp_path / "more.jsonl"
    write_served_steps(second, draw_steps(200, seed=1))
    both = [*argv[:-1], str(path), str(second), "--serving-name", "vllm-test", "--out", str(out)]
    assert main(both) == 0
    assert "fitted 500 steps" in capsys.readouterr().out
    assert LatencyModel.load(out).device == "vllm-test"  # what a policy trained on it records
    with pytest.raises(SystemExit):
        main([*argv[:-1], str(tmp_path / "absent.jsonl"), "--out", str(out)])
    assert "absent.jsonl: no such file" in capsys.readouterr().err
