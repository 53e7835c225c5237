"""A run's hyperparameters reach TensorBoard's HParams tab through SB3's HParam, with the scalars
runs are compared by."""

from __future__ import annotations

from stable_baselines3.common.logger import configure
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from specrl.training.callbacks import HPARAM_METRICS, hparam_values, log_hparams


def plugin_data(run_dir) -> dict[str, HParamsPluginData]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    contents = events.PluginTagToContent("hparams")
    return {tag: HParamsPluginData.FromString(content) for tag, content in contents.items()}


def test_settings_become_the_hparams_plugin_data_with_the_metrics_runs_are_compared_by(tmp_path):
    settings = {
        "learning_rate": 0.0003,
        "n_steps": 256,
        "normalize": True,
        "pair": "specrl-zoo-small",
        "net_arch": [64, 64],
        "scenarios": ["code", "mixed"],
        "target_kl": None,
    }
    logger = configure(str(tmp_path), ["tensorboard", "csv"])
    log_hparams(logger, settings)
    logger.record("specdec/worst_ratio_vs_best_rule", 1.05)
    logger.dump(0)
    logger.close()
    data = plugin_data(tmp_path)
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(data)
    experiment = data["_hparams_/experiment"].experiment
    assert [info.name.tag for info in experiment.metric_infos] == list(HPARAM_METRICS)
    assert "specdec/worst_ratio_vs_best_rule" in HPARAM_METRICS and "specdec/tokens_per_s" in HPARAM_METRICS
    assert {info.name for info in experiment.hparam_infos} == set(settings)
    hparams = data["_hparams_/session_start_info"].session_start_info.hparams
    assert hparams["learning_rate"].number_value == 0.0003 and hparams["n_steps"].number_value == 256
    assert hparams["pair"].string_value == "specrl-zoo-small"
    assert hparams["net_arch"].string_value == "[64, 64]"  # lists as their JSON
    assert hparams["target_kl"].string_value == "null"
    assert "hparams" not in (tmp_path / "progress.csv").read_text()  # TensorBoard only


def test_hparam_values_keep_plain_scalars_and_write_the_rest_as_json():
    values = hparam_values({"a": 1, "b": 0.5, "c": "x", "d": False, "e": (1, 2), "f": {"g": [1]}})
    assert values == {"a": 1, "b": 0.5, "c": "x", "d": False, "e": "[1, 2]", "f": '{"g": [1]}'}
