"""The model server's flags that are settings take the setting's default and help, so
``python -m fmnist_kfp.serving.model_server.server`` serves as the ``serving`` parameter
describes when no flag is given; the benchmark's baselines are not the production server's."""

from __future__ import annotations

from fmnist_kfp.serving.model_server import predictor, protocol
from fmnist_kfp.serving.model_server.server import SETTING_FLAGS, build_parser
from fmnist_kfp.settings.serving import DeploySettings, ServingSettings


def _flags() -> dict:
    return {action.dest: action for action in build_parser()._actions}  # noqa: SLF001


def test_the_server_flags_that_are_settings_default_and_read_as_the_settings():
    flags = _flags()
    assert set(SETTING_FLAGS) == {"model_name", "max_batch_size", "max_batch_latency_ms",
                                  "uncertain_margin"}
    for name, group in SETTING_FLAGS.items():
        spec = group.specs()[name]
        assert flags[name].default == spec.default == getattr(group(), name), name
        assert flags[name].help.replace("%%", "%") == spec.setting.help, name
        assert flags[name].type is spec.kind, name
    assert flags["model_name"].default == DeploySettings().model_name == "fashion-mnist"
    serving = ServingSettings()
    assert (flags["max_batch_size"].default, flags["max_batch_latency_ms"].default,
            flags["uncertain_margin"].default) == (serving.max_batch_size,
                                                   serving.max_batch_latency_ms,
                                                   serving.uncertain_margin)


def test_the_predictor_defaults_are_the_settings():
    serving = ServingSettings()
    assert predictor.DEFAULT_MAX_BATCH_SIZE == serving.max_batch_size
    assert predictor.DEFAULT_MAX_BATCH_LATENCY_MS == serving.max_batch_latency_ms
    assert protocol.DEFAULT_UNCERTAIN_MARGIN == serving.uncertain_margin


def test_the_production_server_has_no_benchmark_baselines():
    assert "noop" not in _flags()
    assert not hasattr(predictor, "NoOpModel") and not hasattr(predictor, "BareNoOpModel")
