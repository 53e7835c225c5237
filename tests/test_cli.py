"""The ``specrl`` command: answers --help without torch, checks arguments before any model loads,
and finds the user's policies before the shipped ones."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specrl.cli import COMMANDS, build_parser, main
from specrl.export.layout import SHIPPED_POLICY_DIR, policy_folder, user_policies
from specrl.export.write import copy_policy
from specrl.train import export_target
from specrl.training.inputs import resolve_config
from specrl.training.options import DEFAULT_CONFIG, OptionError, TrainOptions


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_help_of_every_subcommand_loads_neither_torch_nor_transformers():
    code = (
        "import sys\nfrom specrl.cli import COMMANDS, build_parser\n"
        "for name in COMMANDS:\n"
        "    try:\n        build_parser().parse_args([name, '--help'])\n"
        "    except SystemExit as stop:\n        assert stop.code == 0, name\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'stable_baselines3') if m in sys.modules)\n"
        "print('heavy:', heavy)"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert "heavy: []" in done.stdout
    for name in COMMANDS:
        assert f"usage: specrl {name}" in done.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["generate", "--prompt", "a", "--k", "2", "--tau", "2"], "--tau must be in [0, 1]"),
        (["generate", "--prompt", "a", "--policy", "x", "--k", "4"], "give --policy or --k, not both"),
        (["generate", "--prompt", "a", "--drafter", "ngram"], "give --k with them"),
        (["generate", "--prompt", "a", "--target", "t"], "give --target and --draft together"),
        (
            ["generate", "--prompt", "a", "--preset", "tiny", "--target", "t", "--draft", "d"],
            "either --pair",
        ),
        (["train", "--total-timesteps", "-5"], "--total-timesteps must be >= 0"),
        (["train", "--n-envs", "0"], "--n-envs must be a positive integer"),
        (["train", "-p", "learning_rate"], "give key:value"),
        (["train", "--subproc"], "--subproc runs real-loop envs"),
        (["calibrate", "--repeats", "3"], "add --method profile"),
        (["collect", "--prompts-per-domain", "0"], "--prompts-per-domain must be >= 1"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_any_model_loads(argv, message):
    code = (
        "import sys\nfrom specrl.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as stop:\n    print('exit', stop.code)\n"
        "print('torch loaded:', 'torch' in sys.modules)"
    )
    done = run_python(code)
    assert "exit 2" in done.stdout and message in done.stderr, done.stdout + done.stderr
    if argv[0] in ("generate", "train"):  # these check everything before importing the work's modules
        assert "torch loaded: False" in done.stdout


def test_an_unknown_hyperparameter_is_refused_with_the_nearest_name():
    with pytest.raises(OptionError, match=r"-p learning_rat: .* did you mean 'learning_rate'"):
        resolve_config(DEFAULT_CONFIG, real_loop=False, overrides={}, hyperparameters={"learning_rat": 0.1})
    hyper, budget = resolve_config(
        DEFAULT_CONFIG,
        real_loop=False,
        overrides={"n_envs": None},
        hyperparameters={"learning_rate": 0.001, "n_envs": 16, "target_kl": 0.02},
    )
    assert hyper["learning_rate"] == 0.001 and hyper["target_kl"] == 0.02 and budget["n_envs"] == 16
    assert "use_sde" not in hyper  # keys the YAML leaves out keep SB3's defaults


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"train": {"total_timestep": 5}},
            r"unknown key 'train\.total_timestep' in 'train'\. Did you mean 'total_timesteps'\?",
        ),
        ({"ppo": {"learnig_rate": 0.1}}, r"unknown key 'ppo\.learnig_rate'.*Did you mean 'learning_rate'\?"),
        ({"trian": {}}, r"unknown key 'trian' in the top level\. Did you mean 'train'\?"),
        ({"train": {"n_envs": "many"}}, r"'train\.n_envs' must be an integer, got 'many'"),
        ({"train": {"n_envs": True}}, r"'train\.n_envs' must be an integer, got True"),
        ({"train": {"kl_to_clone": -1}}, r"train\.kl_to_clone must be >= 0\.0, got -1"),
        (
            {"train": {"demonstrations": "all"}},
            r"train\.demonstrations must be one of \('selection', 'family'\), got 'all'",
        ),
        ({"ppo": {"gamma": 1.5}}, r"ppo\.gamma must be <= 1\.0, got 1\.5"),
    ],
)
def test_the_hyperparameter_yaml_is_validated_naming_the_key(tmp_path, change, message):
    config = yaml.safe_load(Path(DEFAULT_CONFIG).read_text())
    for section, values in change.items():
        config[section] = {**config.get(section, {}), **values}
    path = tmp_path / "ppo.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(OptionError, match=rf"ppo\.yaml: {message}"):
        resolve_config(path, real_loop=False, overrides={})
    with pytest.raises(OptionError, match=r"train\.kl_to_clone must be >= 0"):  # -p is validated too
        resolve_config(DEFAULT_CONFIG, real_loop=False, overrides={}, hyperparameters={"kl_to_clone": -1})


def test_train_options_are_the_parsers_defaults_and_the_flags_set_them():
    args = build_parser().parse_args(["train", "-p", "gamma:0.99", "-p", "net_arch:[64, 64]", "--no-stop"])
    from specrl.cli.train import options_from

    options = options_from(args, args.parser)
    defaults = TrainOptions()
    assert options.hyperparameters == {"gamma": 0.99, "net_arch": [64, 64]}
    assert options.stop is False and options.scenarios == defaults.scenarios and options.export_as is None


def test_the_users_policies_are_found_by_name_before_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    assert policy_folder("default") == SHIPPED_POLICY_DIR / "default" and user_policies() == []
    assert export_target("mine") == tmp_path / "policies" / "mine"
    assert export_target(str(tmp_path / "elsewhere" / "p")) == tmp_path / "elsewhere" / "p"
    copy_policy(SHIPPED_POLICY_DIR / "default", export_target("mine"))
    assert user_policies() == ["mine"] and policy_folder("mine") == tmp_path / "policies" / "mine"
    copy_policy(SHIPPED_POLICY_DIR / "pool", export_target("mine"))  # replaced whole, not merged
    assert {p.name for p in policy_folder("mine").iterdir()} == {
        p.name for p in (SHIPPED_POLICY_DIR / "pool").iterdir()
    }
    assert not [p for p in (tmp_path / "policies").iterdir() if p.name.startswith(".")]  # no leftovers
    shutil.copytree(SHIPPED_POLICY_DIR / "pool", tmp_path / "policies" / "default")
    assert policy_folder("default") == tmp_path / "policies" / "default"  # the user's own comes first
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(OptionError, match="not a policy folder"):  # a user's folder is never replaced
        export_target(str(tmp_path / "notes"))
    with pytest.raises(OptionError, match="training never replaces"):
        export_target(str(SHIPPED_POLICY_DIR / "default"))
    # the shipped one's old path (from the repository root, its symlink)
    assert policy_folder("policies/default").resolve() == (SHIPPED_POLICY_DIR / "default").resolve()


def test_the_ray_flag_names_the_clusters_local_address():
    from specrl.distributed.cluster import LOCAL
    from specrl.names import RAY_LOCAL as COMMAND_LOCAL  # the const of --ray

    assert COMMAND_LOCAL == LOCAL


def test_the_command_without_a_subcommand_says_what_it_has(capsys):
    with pytest.raises(SystemExit):
        main([])
    assert "COMMAND" in capsys.readouterr().err


def test_a_run_on_your_own_scenario_selects_and_reports_on_it_not_on_the_embedded_prompts():
    from specrl.envs import embedded_scenarios, load_scenario

    example = "examples/own_pair/chat.yaml"
    scenario = load_scenario(example)  # the example parses: a pair by HF ids, prompts from a file
    assert scenario.pair.target and scenario.pair.draft and scenario.prompts.file.endswith("requests.jsonl")
    own = TrainOptions(scenarios=[example]).with_scenario_defaults(embedded_scenarios())
    assert own.select_scenarios == [] and own.eval_scenarios == [] and own.validate_scenarios == [example]
    shipped = TrainOptions(scenarios=["code"]).with_scenario_defaults(embedded_scenarios())
    assert "prose" in shipped.select_scenarios and "license" in shipped.eval_scenarios
    chosen = TrainOptions(scenarios=[example], validate_scenarios=[]).with_scenario_defaults(
        embedded_scenarios()
    )
    assert chosen.validate_scenarios == []  # what the user gives stays
    smollm2 = TrainOptions(scenarios=["smollm2"]).with_scenario_defaults(embedded_scenarios())
    assert smollm2.select_scenarios == [] and smollm2.validate_scenarios == ["smollm2"]  # not the embedded


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--latency-profiles", "gpu-like-b9000"], "--latency-profiles: unknown ['gpu-like-b9000']"),
        (["--perturbations", "-1"], "--perturbations must be >= 0"),
        (["--latency-profiles", "machine", "--select-profiles", "gpu-like-a100"], "--select-profiles"),
    ],
)
def test_train_refuses_latency_profiles_it_does_not_know_before_the_pair_loads(argv, message, capsys):
    import specrl.models

    with pytest.MonkeyPatch.context() as patch:  # loading the pair would be too late to refuse
        patch.setattr(specrl.models, "load_pair", lambda *a, **k: pytest.fail("the pair loaded"))
        assert main(["train", *argv]) == 2
    assert message in capsys.readouterr().err
