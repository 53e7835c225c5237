"""The exported policy acts exactly as the PPO it came from, loads with torch alone, refuses bad folders."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import prompts, reference_greedy
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

import specrl
from specrl.controllers import LearnedController
from specrl.controllers.learned import TIE_MARGIN, NumpyPolicy
from specrl.envs.actions import to_engine_action
from specrl.export import (
    FEATURE_VERSION,
    FORMAT_VERSION,
    METADATA_FILE,
    ONNX_FILE,
    POLICY_FILE,
    SB3_MODEL_FILE,
    VECNORMALIZE_FILE,
    PolicyError,
    export_policy,
    load_policy,
    verify_parity,
)
from specrl.features import FEATURE_NAMES, N_FEATURES
from specrl.provenance import git_commit

REPO = Path(__file__).resolve().parents[1]
K_MAX = 8
TAU_GRID = tuple(i / 10 for i in range(10))
HAS_ONNX = importlib.util.find_spec("onnx") is not None
HAS_ONNXRUNTIME = importlib.util.find_spec("onnxruntime") is not None


class ToyEnv(gym.Env):
    """specrl's spaces with skewed random observations (so VecNormalize's statistics are far from 0/1)."""

    observation_space = spaces.Box(0.0, 1.0, (N_FEATURES,), np.float32)
    action_space = spaces.MultiDiscrete([K_MAX + 1, len(TAU_GRID)])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), {}

    def step(self, action):
        self.t += 1
        reward = float(action[0] == 3) - 0.1 * float(action[1])
        return self._observation(), reward, self.t >= 16, False, {}

    def _observation(self):
        return (self.np_random.random(N_FEATURES) ** 3).astype(np.float32)


def train(normalize: bool) -> tuple[PPO, VecNormalize | None]:
    """A PPO trained for a moment, its action head re-drawn so that actions vary across observations."""
    env = DummyVecEnv([ToyEnv])
    normalizer = VecNormalize(env, clip_obs=2.0) if normalize else None
    model = PPO("MlpPolicy", normalizer or env, n_steps=64, batch_size=32, n_epochs=2, seed=0, device="cpu")
    model.learn(128)
    with torch.no_grad():  # SB3's head starts with gain 0.01: one action nearly everywhere
        generator = torch.Generator().manual_seed(0)
        model.policy.action_net.weight.copy_(
            torch.randn(model.policy.action_net.weight.shape, generator=generator)
        )
    return model, normalizer


def random_observations(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, N_FEATURES), dtype=np.float32)


@pytest.fixture(scope="module", params=[False, True], ids=["raw", "vecnormalize"])
def exported(request, tmp_path_factory):
    """(model, normalizer, folder) for a policy trained without and with VecNormalize."""
    model, normalizer = train(request.param)
    folder = tmp_path_factory.mktemp("policies") / "toy"
    export_policy(
        model,
        folder,
        k_max=K_MAX,
        tau_grid=TAU_GRID,
        obs_normalizer=normalizer,
        scenarios=["envs/code.yaml"],
        pair="specrl-zoo-tiny",
        evaluation={"tokens_per_s": np.float64(1.5), "per_scenario": np.array([1, 2])},
        command="pytest",
    )
    return model, normalizer, folder


@pytest.fixture(scope="module")
def raw_policy(tmp_path_factory):
    """An exported policy without normalisation, for the refusal and decoding tests."""
    model, _ = train(False)
    folder = tmp_path_factory.mktemp("raw") / "toy"
    export_policy(model, folder, k_max=K_MAX, tau_grid=TAU_GRID, scenarios=["code"], pair="specrl-zoo-tiny")
    return folder


def sb3_actions(model: PPO, normalizer: VecNormalize | None, observations: np.ndarray) -> np.ndarray:
    model_input = normalizer.normalize_obs(observations) if normalizer is not None else observations
    return model.predict(model_input, deterministic=True)[0]


# ---- parity --------------------------------------------------------------------------------------


def test_exported_program_acts_exactly_as_sb3(exported):
    model, normalizer, folder = exported
    observations = random_observations(2000)
    expected = sb3_actions(model, normalizer, observations)
    assert len({tuple(a) for a in expected.tolist()}) >= 20  # parity over many distinct actions, not one
    policy = load_policy(folder)
    np.testing.assert_array_equal(policy.predict(observations), expected)
    np.testing.assert_array_equal(policy.predict(observations[:1]), expected[:1])  # the batch is dynamic
    assert isinstance(policy.program, torch.export.ExportedProgram)
    report = verify_parity(model, folder, observations, normalizer)
    assert report.observations == 2000 and report.onnx_checked == (HAS_ONNX and HAS_ONNXRUNTIME)


@pytest.mark.skipif(not (HAS_ONNX and HAS_ONNXRUNTIME), reason="onnx and onnxruntime not installed")
def test_exported_onnx_acts_exactly_as_sb3(exported):
    import onnxruntime

    model, normalizer, folder = exported
    observations = random_observations(2000, seed=1)
    session = onnxruntime.InferenceSession(str(folder / ONNX_FILE), providers=["CPUExecutionProvider"])
    onnx_actions = session.run(["action"], {"observation": observations})[0]
    np.testing.assert_array_equal(onnx_actions, sb3_actions(model, normalizer, observations))


def test_normalization_statistics_are_far_from_identity_and_clip():
    _, normalizer = train(True)  # the statistics the "vecnormalize" export bakes in are like these
    # Uniform observations lie far outside the training statistics of x**3: clip_obs is reached.
    assert (np.abs(normalizer.normalize_obs(random_observations(100))) == 2.0).any()
    assert not np.allclose(normalizer.obs_rms.mean, 0.0) and not np.allclose(normalizer.obs_rms.var, 1.0)


def test_verify_parity_raises_when_the_model_changed_after_export(raw_policy, tmp_path):
    model, _ = train(False)
    folder = tmp_path / "other"
    export_policy(model, folder, k_max=K_MAX, tau_grid=TAU_GRID, scenarios=["code"], pair="p")
    with torch.no_grad():
        model.policy.action_net.bias[: K_MAX + 1] += torch.arange(K_MAX + 1.0) * 1e3  # now always k = K_MAX
    with pytest.raises(PolicyError, match=r"differs from the SB3 policy on \d+ of 500 observations"):
        verify_parity(model, folder, random_observations(500))


# ---- the folder ----------------------------------------------------------------------------------


def test_metadata_describes_the_policy_and_checksums_every_file(exported):
    _, normalizer, folder = exported
    metadata = json.loads((folder / METADATA_FILE).read_text())
    assert (
        metadata["format_version"] == FORMAT_VERSION == 2 and metadata["feature_version"] == FEATURE_VERSION
    )
    assert metadata["feature_names"] == list(FEATURE_NAMES)
    assert metadata["action"] == {
        "type": "multidiscrete",
        "layout": ["k", "tau_index"],
        "k_max": K_MAX,
        "tau_grid": list(TAU_GRID),
    }
    assert metadata["observation_normalized"] is (normalizer is not None)
    assert metadata["network"] == {
        "policy_net": ["Linear", "Tanh", "Linear", "Tanh"],  # SB3's MlpPolicy
        "observation_clip": 2.0 if normalizer is not None else 0.0,
    }
    assert list(metadata["provenance"]) == ["git_commit"]  # what export records by itself
    assert_commit(metadata["provenance"]["git_commit"])
    assert metadata["scenarios"] == ["envs/code.yaml"] and metadata["pair"] == "specrl-zoo-tiny"
    assert (
        metadata["evaluation"] == {"tokens_per_s": 1.5, "per_scenario": [1, 2]}
        and metadata["command"] == "pytest"
    )
    assert metadata["onnx"] is HAS_ONNX
    assert set(metadata["versions"]) == {"specrl", "torch", "stable_baselines3"} and metadata["created"]
    files = {path.name for path in folder.iterdir()} - {METADATA_FILE}
    assert files == {POLICY_FILE, SB3_MODEL_FILE} | ({ONNX_FILE} if HAS_ONNX else set()) | (
        {VECNORMALIZE_FILE} if normalizer is not None else set()
    )
    assert metadata["files"] == {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in files
    }


def test_sb3_checkpoint_and_statistics_continue_training(exported):
    model, normalizer, folder = exported
    observations = random_observations(200)
    reloaded = PPO.load(folder / SB3_MODEL_FILE, device="cpu")
    stats = VecNormalize.load(str(folder / VECNORMALIZE_FILE), DummyVecEnv([ToyEnv])) if normalizer else None
    np.testing.assert_array_equal(
        sb3_actions(reloaded, stats, observations), sb3_actions(model, normalizer, observations)
    )


def test_reexport_replaces_the_folder_and_leaves_nothing_beside_it(tmp_path):
    model, normalizer = train(True)
    folder = tmp_path / "policies" / "p"
    export_policy(
        model,
        folder,
        k_max=K_MAX,
        tau_grid=TAU_GRID,
        obs_normalizer=normalizer,
        scenarios=[],
        pair="p",
        onnx=False,
    )
    assert (folder / VECNORMALIZE_FILE).exists() and not (folder / ONNX_FILE).exists()
    assert json.loads((folder / METADATA_FILE).read_text())["onnx"] is False
    export_policy(model, folder, k_max=K_MAX, tau_grid=TAU_GRID, scenarios=[], pair="p", onnx=False)
    assert not (folder / VECNORMALIZE_FILE).exists()  # the old folder is gone, not merged
    assert [path.name for path in folder.parent.iterdir()] == ["p"]  # no temporary or old folder left


def test_export_refuses_a_mismatched_model_and_a_foreign_folder(tmp_path):
    model, _ = train(False)
    with pytest.raises(PolicyError, match=r"need MultiDiscrete\(\[6, 10\]\)"):
        export_policy(model, tmp_path / "a", k_max=5, tau_grid=TAU_GRID, scenarios=[], pair="p")
    with pytest.raises(PolicyError, match="tau_grid must be strictly increasing"):
        export_policy(model, tmp_path / "a", k_max=K_MAX, tau_grid=TAU_GRID[::-1], scenarios=[], pair="p")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("mine")
    with pytest.raises(PolicyError, match="not a policy folder .* refusing to replace it"):
        export_policy(model, tmp_path / "data", k_max=K_MAX, tau_grid=TAU_GRID, scenarios=[], pair="p")
    assert (tmp_path / "data" / "notes.txt").read_text() == "mine"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data"]


def reload(folder: Path) -> PPO:
    """The PPO a folder was exported from, read back from its checkpoint (faster than training one)."""
    return PPO.load(folder / SB3_MODEL_FILE, device="cpu")


def test_export_records_the_provenance_it_is_given_and_the_git_commit(raw_policy, tmp_path):
    model, folder = reload(raw_policy), tmp_path / "p"
    given = {"config": {"n_steps": 64}, "seed": np.int64(3), "latency_file": "results/latency/cpu.json"}
    export_policy(model, folder, k_max=K_MAX, tau_grid=TAU_GRID, scenarios=[], pair="p", provenance=given)
    recorded = json.loads((folder / METADATA_FILE).read_text())["provenance"]
    assert_commit(recorded.pop("git_commit"))
    assert recorded == {**given, "seed": 3}
    pinned = {"git_commit": "abc1234", "seed": 1}  # the trainer's own commit wins
    export_policy(model, folder, k_max=K_MAX, tau_grid=TAU_GRID, scenarios=[], pair="p", provenance=pinned)
    assert json.loads((folder / METADATA_FILE).read_text())["provenance"] == pinned
    with pytest.raises(TypeError, match="not JSON serialisable"):
        export_policy(
            model,
            tmp_path / "q",
            k_max=K_MAX,
            tau_grid=TAU_GRID,
            scenarios=[],
            pair="p",
            provenance={"x": {1}},
        )
    assert not (tmp_path / "q").exists()


IN_A_CHECKOUT = (REPO / ".git").exists() and shutil.which("git") is not None


def assert_commit(commit: str | None) -> None:
    """A short hash (``-dirty`` with changes) in a checkout, None elsewhere. Not compared with
    :func:`git_commit` now: the tree may change between an export and the assert."""
    if IN_A_CHECKOUT:
        assert commit is not None and re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", commit), commit
    else:
        assert commit is None


def test_git_commit_names_this_checkout_and_nothing_outside_one(tmp_path):
    commit = git_commit()
    assert_commit(commit)
    if IN_A_CHECKOUT:
        log = subprocess.run(["git", "log", "--format=%H", "-20"], cwd=REPO, capture_output=True, text=True)
        assert any(full.startswith(commit.removesuffix("-dirty")) for full in log.stdout.split())
    assert git_commit(tmp_path) is None  # not a repository


# ---- refusals ------------------------------------------------------------------------------------


def edit_metadata(folder: Path, change) -> None:
    path = folder / METADATA_FILE
    metadata = json.loads(path.read_text())
    change(metadata)
    path.write_text(json.dumps(metadata))


def replace_policy_file(folder: Path, data: bytes) -> None:
    """Write ``data`` as policy.pt2 with a matching checksum: only the loader's probe can catch it."""
    (folder / POLICY_FILE).write_bytes(data)
    edit_metadata(folder, lambda m: m["files"].update({POLICY_FILE: hashlib.sha256(data).hexdigest()}))


def flip_byte(folder: Path) -> None:
    data = bytearray((folder / POLICY_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / POLICY_FILE).write_bytes(bytes(data))


class WrongShape(torch.nn.Module):
    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return torch.zeros(observations.shape[0], 3, dtype=torch.int64)


def exported_bytes(module: torch.nn.Module, tmp_path: Path) -> bytes:
    batch = torch.export.Dim("batch")
    program = torch.export.export(module, (torch.zeros(2, N_FEATURES),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(tmp_path / "m.pt2"))
    return (tmp_path / "m.pt2").read_bytes()


REFUSALS = {
    "flipped byte": (flip_byte, r"policy\.pt2: sha256 \w+ does not match .* corrupt or was edited"),
    "feature version": (
        lambda f: edit_metadata(f, lambda m: m.update(feature_version=FEATURE_VERSION + 1)),
        rf"trained on feature version {FEATURE_VERSION + 1} .* retrain the policy, or use a specrl version "
        rf"with feature version {FEATURE_VERSION + 1}",
    ),
    "feature names": (
        lambda f: edit_metadata(f, lambda m: m["feature_names"].reverse()),
        "feature_names .* differ from this specrl's",
    ),
    "format version": (
        lambda f: edit_metadata(f, lambda m: m.update(format_version=99)),
        "unknown format 'specrl-policy' version 99",
    ),
    "missing policy": (lambda f: (f / POLICY_FILE).unlink(), r"policy\.pt2 is missing"),
    "torchscript folder": (
        lambda f: edit_metadata(f, lambda m: m.update(format_version=1)),
        "unknown format 'specrl-policy' version 1",
    ),
    "missing metadata": (lambda f: (f / METADATA_FILE).unlink(), r"metadata\.json is missing"),
    "missing folder": (shutil.rmtree, "policy folder .* does not exist"),
    "invalid json": (
        lambda f: (f / METADATA_FILE).write_text('{"format": "specrl-policy",'),
        r"metadata\.json is not readable JSON",
    ),
    "decreasing tau grid": (
        lambda f: edit_metadata(f, lambda m: m["action"].update(tau_grid=[0.5, 0.2])),
        r"bad action mapping: tau_grid must be strictly increasing within \[0, 1\]",
    ),
    "tau above 1": (
        lambda f: edit_metadata(f, lambda m: m["action"].update(tau_grid=[0.5, 1.5])),
        r"tau_grid must be strictly increasing within \[0, 1\]",
    ),
    "k_max 0": (
        lambda f: edit_metadata(f, lambda m: m["action"].update(k_max=0)),
        "k_max must be an int >= 1",
    ),
    "not a program": (
        lambda f: replace_policy_file(f, b"not a zip archive"),
        r"policy\.pt2 is not a loadable torch\.export program",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_loader_refuses_with_the_file_and_the_fix(case, raw_policy, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(raw_policy, folder)
    damage, message = REFUSALS[case]
    damage(folder)
    with pytest.raises(PolicyError, match=message):
        LearnedController.load(folder)


def test_loader_refuses_a_module_of_the_wrong_output_shape(raw_policy, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(raw_policy, folder)
    replace_policy_file(folder, exported_bytes(WrongShape(), tmp_path))
    with pytest.raises(PolicyError, match=r"returns \(\(1, 3\), torch\.int64\) .* expected \(1, 2\) int64"):
        load_policy(folder)


@pytest.mark.slow  # a subprocess imports torch and specrl
def test_loader_never_imports_stable_baselines3(raw_policy):
    code = (
        "import sys; from specrl.controllers import LearnedController; "
        f"c = LearnedController.load({str(raw_policy)!r}); c.act([0.5] * {N_FEATURES}); "
        "assert 'stable_baselines3' not in sys.modules, 'stable_baselines3 was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)


# ---- the controller ------------------------------------------------------------------------------


def test_controller_acts_as_the_exported_module(raw_policy):
    controller = LearnedController.load(raw_policy)
    assert (controller.k_max, controller.tau_grid, controller.pair) == (K_MAX, TAU_GRID, "specrl-zoo-tiny")
    assert controller.metadata["feature_version"] == FEATURE_VERSION
    observations = random_observations(50)
    expected = load_policy(raw_policy).predict(observations)
    actions = [controller.act(observation) for observation in observations]
    assert actions == [to_engine_action(a, K_MAX, TAU_GRID) for a in expected]  # the envs' mapping
    assert controller.act(observations[0].tolist()) == actions[0]  # lists and tensors work too
    assert controller.act(torch.from_numpy(observations[0])) == actions[0]
    assert isinstance(controller, specrl.Controller)
    assert controller.pair_warning("specrl-zoo-tiny") is None
    assert "trained on pair 'specrl-zoo-tiny' but runs on 'other'" in controller.pair_warning("other")


def test_controller_numpy_path_acts_exactly_as_sb3_and_leaves_near_ties_to_the_module(exported):
    model, normalizer, folder = exported
    controller = LearnedController.load(folder)
    assert controller._fast is not None  # the MLP export.py writes is recognised
    observations = random_observations(2000, seed=1)
    expected = sb3_actions(model, normalizer, observations)
    actions = [controller.act(observation) for observation in observations]
    assert actions == [to_engine_action(a, K_MAX, TAU_GRID) for a in expected]
    answered = sum(controller._fast(observation) is not None for observation in observations)
    assert answered > 0.9 * len(observations)  # numpy decides almost always; the module the rest


def test_controller_leaves_every_decision_to_the_program_when_metadata_misdescribes_it(raw_policy, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(raw_policy, folder)  # metadata.json is not checksummed: an edit goes unnoticed there
    edit_metadata(folder, lambda m: m["network"].update(policy_net=["Linear", "ReLU", "Linear", "ReLU"]))
    controller = LearnedController.load(folder)
    assert controller._fast is None  # the numpy twin disagreed with the program on its probes
    observations = random_observations(20)
    expected = load_policy(raw_policy).predict(observations)
    assert [controller.act(o) for o in observations] == [
        to_engine_action(a, K_MAX, TAU_GRID) for a in expected
    ]


def test_numpy_policy_returns_none_within_the_tie_margin():
    identity = (np.eye(3, dtype=np.float32), np.zeros(3, dtype=np.float32))
    policy = NumpyPolicy([identity], None, np.ones(3), 0.0, [0, 2, 3])
    assert policy(np.array([0.0, 1.0, 0.5], dtype=np.float32)) == [1, 0]
    assert policy(np.array([1.0, 1.0 - TIE_MARGIN / 2, 0.5], dtype=np.float32)) is None
    assert policy(np.array([1.0, 1.0 - 2 * TIE_MARGIN, 0.5], dtype=np.float32)) == [0, 0]


@pytest.mark.parametrize("bad", [np.zeros(N_FEATURES + 1), np.zeros((1, N_FEATURES)), 0.5, None])
def test_controller_refuses_observations_of_the_wrong_shape(raw_policy, bad):
    with pytest.raises(ValueError, match=rf"expects the \({N_FEATURES},\) observation .* got shape"):
        LearnedController.load(raw_policy).act(bad)


def test_controller_decodes_exactly_the_targets_greedy_output(raw_policy, pair):
    controller = LearnedController.load(raw_policy)
    decoder = specrl.SpeculativeDecoder(pair, controller)
    for prompt in prompts(2, pair.vocab_size, seed=3):
        out = decoder.generate(prompt, max_new_tokens=24, temperature=0.0, stop_at_eos=False)
        assert out.token_ids == reference_greedy(pair.target, prompt, 24)
        assert all(0 <= s.action.k <= K_MAX and s.action.tau in TAU_GRID for s in out.steps)


# ---- command line and overhead script ------------------------------------------------------------


@pytest.mark.slow  # builds the tiny pair's home, then decodes in a subprocess
def test_cli_generates_with_a_policy_and_prints_its_stats(raw_policy, tiny_home):
    home, _ = tiny_home
    command = [
        sys.executable,
        "-m",
        "specrl",
        "generate",
        "--policy",
        str(raw_policy),
        "--preset",
        "tiny",
        "--device",
        "cpu",
        "--prompt",
        "def f(x):",
        "--max-new-tokens",
        "12",
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=os.environ | {"SPECRL_HOME": str(home), "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("def f(x):")
    stats = json.loads(done.stdout[done.stdout.index("\n{") :])
    assert stats["policy"] == str(raw_policy) and stats["pair"] == "specrl-zoo-tiny"
    names = {"tokens_per_s", "acceptance_rate", "mean_acceptance_length", "num_drafts", "mean_k", "mean_tau"}
    assert names <= set(stats) and "mean_accepted_length" not in stats  # vLLM's names, one each
    assert 0 <= stats["mean_k"] <= K_MAX and stats["steps"] >= 1
    assert stats["num_draft_tokens"] >= stats["num_accepted_tokens"] and stats["num_drafts"] <= stats["steps"]
    assert "warning" not in done.stderr  # trained on the same pair


def test_cli_refuses_policy_with_k_or_tau():
    from specrl.cli import main

    for fixed in (["--k", "4"], ["--tau", "0.0"]):
        with pytest.raises(SystemExit):
            main(["generate", "--policy", "x", "--prompt", "a", *fixed])


def test_parity_forgives_only_actions_the_model_itself_ties():
    """Float rounding in the exported program may break a tie of the model's logits the other way;
    anything else is a difference."""
    from specrl.export.parity import TIE, _assert_same

    expected = np.array([[2, 0], [1, 1]])
    logits = [np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]), np.array([[1.0, 1.0 - TIE / 2], [0.0, 3.0]])]
    observations = np.zeros((2, 3), dtype=np.float32)
    tied = np.array([[2, 1], [1, 1]])  # row 0's second dimension: logits within TIE of each other
    assert _assert_same(expected, tied, observations, "policy", logits) == 1
    assert _assert_same(expected, expected, observations, "policy", logits) == 0
    with pytest.raises(
        PolicyError, match="differs from the SB3 policy on 1 of 2 observations, e.g. observation 1"
    ):
        _assert_same(expected, np.array([[2, 0], [1, 0]]), observations, "policy", logits)
