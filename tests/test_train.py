"""experiments/train_ppo.py (``specrl train``) end to end on the tiny pair: it trains, logs specdec/
scalars to TensorBoard, exports a policy into its run folder (and by name under $SPECRL_HOME) that
loads and decodes, never touches the shipped policies, and an interrupted run resumes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import specrl
from specrl.export.layout import SHIPPED_POLICY_DIR
from specrl.latency import HELD_OUT
from specrl.training.inputs import SELECT_PROFILES

# Every test here runs the training script on the tiny pair: seconds to minutes each.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TINY = [
    "--preset",
    "tiny",
    "--scenarios",
    "code",
    "code_t1",
    "--n-envs",
    "8",
    "--eval-freq",
    "1024",
    "--eval-scenarios",
    "--sim-repeats",
    "1",
]


def train(
    tiny_home, tmp_path, *extra: str, wait: bool = True
) -> subprocess.Popen | subprocess.CompletedProcess:
    home, _ = tiny_home
    env = {**os.environ, "SPECRL_HOME": str(home), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        str(REPO / "experiments" / "train_ppo.py"),
        *TINY,
        "--runs-dir",
        str(tmp_path / "runs"),
        *extra,
    ]
    if wait:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    # Output goes to a file, not a pipe nobody reads while the run goes on. SIGINT starts out
    # ignored, as in a job a script started in the background: the script must still stop on it.
    log = (tmp_path / "train.log").open("w")
    return subprocess.Popen(
        command,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )


def scalar_tags(run_dir: Path) -> set[str]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return set(events.Tags()["scalars"])


def test_a_smoke_run_trains_logs_and_exports_a_policy_that_decodes(tiny_home, tmp_path):
    shipped = {path: path.read_bytes() for path in SHIPPED_POLICY_DIR.rglob("*") if path.is_file()}
    done = train(
        tiny_home,
        tmp_path,
        "--total-timesteps",
        "2048",
        "--validate-scenarios",
        "code",
        "--validate-prompts",
        "1",
        "--validate-repeats",
        "1",
        "--export-as",
        "smoke",
        "--eval-scenarios",
        "license",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| code_t1 |" in done.stdout and "PPO / best static" in done.stdout
    assert "Test traces, simulator" in done.stdout
    assert "Checkpoint selected on validation traces" in done.stdout
    assert "Checkpoint selection, validation traces" in done.stdout and "warm start clones" in done.stdout
    assert "Real loop on test prompts" in done.stdout and "PPO / best rule (which)" in done.stdout
    assert "| license |" in done.stdout and "Unseen domain (no train or validation prompts" in done.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    tags = scalar_tags(run_dir)
    for name in (
        "tokens_per_s",
        "acceptance_rate",
        "mean_acceptance_length",
        "tokens_per_step",
        "mean_k",
        "mean_tau",
        "ratio_vs_tcp",
        "worst_ratio_vs_best_rule",
        "eval/code@cpu-epyc-2t-nov/ratio_vs_best_rule",  # a scenario under each profile selected under
        "eval/code_t1@gpu-like-a100/ratio_vs_best_rule",
    ):
        assert f"specdec/{name}" in tags
    assert "train/policy_gradient_loss" in tags  # SB3's own scalars are there too
    assert "rollout/ep_rew_mean" in tags  # episodes are monitored (VecMonitor)
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert "_hparams_/session_start_info" in events.PluginTagToContent("hparams")  # the HParams tab
    # exported into the run folder, and by name among the user's policies; the shipped ones untouched
    home, pair = tiny_home
    folder = run_dir / "policy"
    named = home / "policies" / "smoke"
    assert (named / "metadata.json").read_bytes() == (folder / "metadata.json").read_bytes()
    assert {p.name for p in named.iterdir()} == {p.name for p in folder.iterdir()}
    assert shipped == {path: path.read_bytes() for path in SHIPPED_POLICY_DIR.rglob("*") if path.is_file()}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECRL_HOME", str(home))
        assert specrl.LearnedController.load("smoke").policy.folder == named  # the user's, by name
        assert specrl.LearnedController.load("default").policy.folder == SHIPPED_POLICY_DIR / "default"
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["pair"] == "specrl-zoo-tiny" and metadata["scenarios"] == ["code", "code_t1"]
    assert metadata["command"].startswith("specrl train ") and "--export-as smoke" in metadata["command"]
    # the warm start cloned a rule per scenario; selection kept the best worst ratio to the best rule
    evaluation = metadata["evaluation"]
    assert set(evaluation["warm_start"]["teachers"]) == {
        f"{scenario}@{profile}" for scenario in ("code", "code_t1") for profile in SELECT_PROFILES
    }  # trained over the family: a teacher per scenario under each profile it selects under
    profiles = metadata["latency_profiles"]
    assert profiles["selected_under"] == list(SELECT_PROFILES) and set(HELD_OUT) <= set(profiles["held_out"])
    assert not set(HELD_OUT) & set(profiles["profiles"])
    assert evaluation["warm_start"]["demonstrations"] > 0 and 0 <= evaluation["warm_start"]["agreement"] <= 1
    kept = evaluation["selected_on_validation"]
    assert kept["worst_ratio_vs_best_rule"] == min(kept["ratio_vs_best_rule"].values())
    assert evaluation["beats_best_rule_on_validation"] == (kept["worst_ratio_vs_best_rule"] >= 1.0)
    # rl-zoo's run folder: commit, resolved config, seed and latency file, the same in the policy
    record = json.loads((run_dir / "run.json").read_text())
    assert record == yaml.safe_load((run_dir / "config.yaml").read_text())
    assert record["seed"] == 0 and record["arguments"]["export_as"] == "smoke"
    assert set(record["scenarios"]) == {"code", "code_t1"} and record["ppo"]["gamma"] > 0
    assert record["scenarios"]["code"]["max_new_tokens"] > 0  # in full, defaults filled in
    latency = Path(record["latency_file"]["path"])
    assert (
        latency.is_file()
        and record["latency_file"]["sha256"] == hashlib.sha256(latency.read_bytes()).hexdigest()
    )
    assert "git_commit" in record and metadata["provenance"] == record
    controller = specrl.LearnedController.load(folder)
    out = specrl.SpeculativeDecoder(pair, controller).generate(
        pair.prompts["test"]["code"][0], max_new_tokens=24
    )
    plain = specrl.SpeculativeDecoder(pair, specrl.StaticController(0)).generate(
        pair.prompts["test"]["code"][0], max_new_tokens=24
    )
    assert out.token_ids == plain.token_ids and out.stats.steps >= 1


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_saves_a_checkpoint_and_resumes_the_step_count(tiny_home, tmp_path, stop):
    # this machine's prices alone: the checkpoint's mechanics do not depend on the machines trained over
    machine = ("--latency-profiles", "machine")
    # one of the two runs keeps PPO near its clone: the clone saved at the start is the one resumed with
    machine += ("--kl-to-clone", "0.1") if stop == signal.SIGTERM else ()
    process = train(
        tiny_home, tmp_path, "--total-timesteps", "100000000", "--validate-scenarios", *machine, wait=False
    )
    runs = tmp_path / "runs"

    def rollouts_logged() -> int:  # SB3 writes a CSV row after every rollout
        return max((len(p.read_text().splitlines()) - 1 for p in runs.glob("*/progress.csv")), default=0)

    deadline = time.time() + 300
    while time.time() < deadline and rollouts_logged() < 2 and process.poll() is None:
        time.sleep(0.2)
    process.send_signal(stop)
    process.wait(timeout=300)
    output = (tmp_path / "train.log").read_text()
    assert process.returncode == 0, output[-3000:]
    assert "checkpoint saved" in output and "--resume" in output
    (run_dir,) = runs.iterdir()
    interrupted_at = json.loads((run_dir / "state.json").read_text())["timesteps"]
    assert interrupted_at > 0 and (run_dir / "checkpoint.zip").is_file()

    resumed = train(
        tiny_home,
        tmp_path,
        "--resume",
        str(run_dir),
        "--total-timesteps",
        str(interrupted_at + 1024),
        "--validate-scenarios",
        "--export-as",
        "resumed",
        *machine,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    final = json.loads((run_dir / "state.json").read_text())["timesteps"]
    assert interrupted_at + 1024 <= final < interrupted_at + 1024 + 8 * 128 * 2  # one more rollout at most
    steps = [
        int(float(line.split(",")[header_index("time/total_timesteps", run_dir)]))
        for line in (run_dir / "progress.csv").read_text().splitlines()[1:]
        if line.split(",")[header_index("time/total_timesteps", run_dir)]
    ]
    assert steps == sorted(steps) and steps[-1] > interrupted_at  # the count continued, not restarted
    if stop == signal.SIGTERM:
        assert (run_dir / "clone_policy.pt").is_file() and "specdec/kl_to_clone" in scalar_tags(run_dir)


def header_index(name: str, run_dir: Path) -> int:
    return (run_dir / "progress.csv").read_text().splitlines()[0].split(",").index(name)


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad",
    [
        ["--total-timesteps", "-5"],
        ["--total-timesteps", "0", "--no-warm-start"],
        ["--kl-to-clone", "-1"],
        ["--kl-to-clone", "0.1", "--no-warm-start"],
    ],
)
def test_a_negative_budget_is_refused(tiny_home, tmp_path, bad):
    done = train(tiny_home, tmp_path, *bad, "--validate-scenarios")
    assert done.returncode != 0 and bad[0] in (done.stdout + done.stderr)
