"""The pipeline's run parameters: the setting groups combined, plus the per-concern dicts.

Every field comes from one group (data, training, jobs, deploy, batch prediction) or is
declared here (the model types, the tuning switch and the three JSON-object parameters, each
checked against its own group: :class:`~fmnist_kfp.settings.jobs.KubernetesSettings`,
:class:`~fmnist_kfp.settings.tuning.TuningSettings`,
:class:`~fmnist_kfp.settings.serving.ServingSettings`). The CLI flags, the pipeline's parameters and
docstring and the README's tables derive from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from fmnist_kfp.settings.batch import BatchPredictionSettings
from fmnist_kfp.settings.data import TFDS_SOURCE, DataSettings
from fmnist_kfp.settings.jobs import JobSettings, KubernetesSettings
from fmnist_kfp.settings.schema import Settings, each_once, not_empty, one_of, setting
from fmnist_kfp.settings.serving import DeploySettings, ServingSettings
from fmnist_kfp.settings.training import MODEL_TYPES, TrainingConfig, TrainingSettings
from fmnist_kfp.settings.tuning import TuningSettings

# The JSON-object parameters and the group each one holds.
NESTED: dict[str, type[Settings]] = {
    "kubernetes": KubernetesSettings,
    "tuning": TuningSettings,
    "serving": ServingSettings,
}


def _keys(group: type[Settings]) -> str:
    return ", ".join(group.specs())


# The groups whose fields are the pipeline's own parameters, in the order of the docs' table.
GROUPS: tuple[type[Settings], ...] = (DataSettings, TrainingSettings, JobSettings, DeploySettings,
                                      BatchPredictionSettings)


@dataclass
class PipelineParameters(BatchPredictionSettings, DeploySettings, JobSettings, TrainingSettings,
                         DataSettings):
    """Run parameters of the Fashion-MNIST pipeline.

    A KFP pipeline takes one flat list of parameters, so the groups' fields are inherited as
    they are (the class adds only its own); their checks across fields are called group by
    group (:meth:`cross_problems`), not through ``super()``, so none is skipped."""

    WHAT = "pipeline parameters"

    model_types: list = setting(
        factory=lambda: list(MODEL_TYPES),
        help="The CNNs to train: any of " + ", ".join(f"`{m}`" for m in MODEL_TYPES) + ".",
        rules=[not_empty("give at least one of " + ", ".join(MODEL_TYPES)), each_once,
               one_of(MODEL_TYPES, "model type")])
    tune: bool = setting(
        False, help="Search each CNN's learning rate, batch size, filters (and dropout rate) "
                    "before training it; the best values replace the given ones.")
    tuning: dict = setting(
        factory=dict,
        help="Search settings, a JSON object with any of: " + _keys(TuningSettings) + ".")
    kubernetes: dict = setting(
        factory=dict,
        help="TFJob and trial pod settings, a JSON object with any of: "
             + _keys(KubernetesSettings) + ".")
    serving: dict = setting(
        factory=dict,
        help="KServe settings, a JSON object with any of: " + _keys(ServingSettings)
             + " (batching also applies locally).")

    def nested(self, name: str) -> Settings:
        """One of the JSON-object parameters as its typed group (unknown keys raise)."""
        return NESTED[name].from_dict(getattr(self, name))

    def cross_problems(self) -> list[str]:
        problems = [problem for group in GROUPS for problem in group.cross_problems(self)]
        for name, group in NESTED.items():
            _, type_problems = group.coerce_values(dict(getattr(self, name) or {}))
            problems += type_problems
        return problems

    def training_config(self, model_type: str) -> TrainingConfig:
        """What the training step of ``model_type`` is given (before any tuning)."""
        shared = {name: getattr(self, name) for name in TrainingSettings.specs()}
        return TrainingConfig(model_type=model_type, **shared)

    def arguments(self) -> dict[str, Any]:
        return asdict(self)


def cluster_defaults() -> PipelineParameters:
    """The Kubeflow variant's defaults: TFJobs of two workers, TFDS as the data source. The
    compiled pipeline's parameters and the compiled components' inputs default to them."""
    return replace(PipelineParameters(), data_source=TFDS_SOURCE, backend="kubernetes",
                   num_workers=2)
