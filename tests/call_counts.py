"""Counting how often a rule runs: each job and experiment check is to run once on a path
(issue 43), which a spy on the one function of each rule pins."""

from __future__ import annotations

import sys
from collections import Counter

# Imported first, so that every module that imports a rule holds the original when the spies
# go in (a module imported later would keep the spy of one test).
import fmnist_kfp.kubernetes.experiment
import fmnist_kfp.kubernetes.training_operators
import fmnist_kfp.training.training_job  # noqa: F401
from fmnist_kfp.kubernetes import experiment_webhook, tfjob, trainjob
from fmnist_kfp.scoring.scoring_job import ScoringJobSpec
from fmnist_kfp.settings import jobs
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.tuning.experiment_settings import ExperimentSettings

# Each rule by the one function that holds it: (owner, attribute).
RULES = {
    "the training configuration": (TrainingConfig, "validate"),
    "the job's replicas": (jobs, "job_problems"),
    "the pods' settings": (KubernetesSettings, "problems"),
    "what a TFJob cannot do": (tfjob, "tfjob_problems"),
    "what a TrainJob cannot do": (trainjob, "trainjob_problems"),
    "the Experiment's storage and pods": (ExperimentSettings, "cluster_problems"),
    "the Experiment's search": (ExperimentSettings, "experiment_problems"),
    "Katib's webhook": (experiment_webhook, "webhook_problems"),
    "the scoring job": (ScoringJobSpec, "problems"),
}


def count_rules(monkeypatch) -> Counter:
    """Counts the calls of every rule of :data:`RULES` from now on: a function is replaced
    in every module of ours that imported it, a method on its class."""
    counts: Counter = Counter()
    for rule, (owner, name) in RULES.items():
        original = getattr(owner, name)

        def spy(*args, _rule=rule, _original=original, **kwargs):
            counts[_rule] += 1
            return _original(*args, **kwargs)

        if isinstance(owner, type):
            monkeypatch.setattr(owner, name, spy)
            continue
        for module in list(sys.modules.values()):
            if (getattr(module, "__name__", "").startswith("fmnist_kfp")
                    and getattr(module, name, None) is original):
                monkeypatch.setattr(module, name, spy)
    return counts
