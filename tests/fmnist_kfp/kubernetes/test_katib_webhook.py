# ruff: noqa: E501 (a table of exact messages)
"""Katib's Experiment webhook as fmnist_kfp/kubernetes/experiment_webhook.py re-implements it, rule by rule, with the
exact problem each break is reported with: kubeflow/katib v0.19.0
pkg/webhook/v1beta1/experiment/validator/validator.go (line numbers per rule below), plus the feasible-space checks of Katib's
suggestion services that fmnist_kfp/kubernetes/experiment_webhook.py adds (marked "suggestion service")."""

from __future__ import annotations

import copy

import pytest

from fmnist_kfp.kubernetes.experiment_webhook import webhook_problems
from tests.fmnist_kfp.kubernetes.test_katib_experiment import _containers, _manifest, _settings

BASE = None


def _base() -> dict:
    global BASE
    if BASE is None:
        BASE = _manifest(_settings())
    return BASE


def spec(m):
    return m["spec"]


def tt(m):
    return m["spec"]["trialTemplate"]


def p(m, i):
    return m["spec"]["parameters"][i]


def _meta(m, name, reference):
    """A trial parameter from the trial's metadata, used in the template."""
    tt(m)["trialParameters"].append({"name": name, "reference": reference})
    _containers(m)[0]["command"].extend(["--x", "${trialParameters." + name + "}"])


CASES = [
    ('name_upper',
     lambda m: m["metadata"].update(name="Fmnist"),
     ["metadata.name 'Fmnist': lowercase letters, digits and '-', starting with a letter and ending with a letter or digit, at most 40 characters"]),
    ('name_41',
     lambda m: m["metadata"].update(name="a" * 41),
     ["metadata.name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa': lowercase letters, digits and '-', starting with a letter and ending with a letter or digit, at most 40 characters"]),
    ('name_40_ok',
     lambda m: m["metadata"].update(name="a" * 40),
     []),
    ('name_suffix_ok',
     lambda m: m["metadata"].update(name="ab_c"),
     []),
    ('name_empty',
     lambda m: m["metadata"].update(name=""),
     ["metadata.name '': lowercase letters, digits and '-', starting with a letter and ending with a letter or digit, at most 40 characters"]),
    ('counts_neg',
     lambda m: spec(m).update(maxFailedTrialCount=-1, maxTrialCount=0, parallelTrialCount=0),
     ['spec.maxFailedTrialCount: should not be less than 0', 'spec.maxTrialCount: must be greater than 0', 'spec.parallelTrialCount: must be greater than 0']),
    ('counts_over',
     lambda m: spec(m).update(maxFailedTrialCount=5, maxTrialCount=4, parallelTrialCount=5),
     ['spec.maxFailedTrialCount: should be less than or equal to spec.maxTrialCount', 'spec.parallelTrialCount: should be less than or equal to spec.maxTrialCount']),
    ('counts_equal_ok',
     lambda m: spec(m).update(maxFailedTrialCount=4, maxTrialCount=4, parallelTrialCount=4),
     []),
    ('no_objective',
     lambda m: spec(m).pop("objective"),
     ['spec.objective: must be specified']),
    ('objective_type',
     lambda m: spec(m)["objective"].update(type="max"),
     ["spec.objective.type 'max': must be minimize or maximize"]),
    ('objective_metric',
     lambda m: spec(m)["objective"].pop("objectiveMetricName"),
     ['spec.objective.objectiveMetricName: must be specified']),
    ('no_algorithm',
     lambda m: spec(m).pop("algorithm"),
     ['spec.algorithm.algorithmName: must be specified']),
    ('algorithm_unknown',
     lambda m: spec(m)["algorithm"].update(algorithmName="annealing"),
     ["spec.algorithm.algorithmName 'annealing': Katib has no suggestion service for it (random, tpe, grid, hyperband, bayesianoptimization, cmaes, sobol, multivariate-tpe, enas, darts, pbt)"]),
    ('early_unknown',
     lambda m: spec(m).update(earlyStopping={"algorithmName": "patience"}),
     ["spec.earlyStopping.algorithmName 'patience': Katib knows only medianstop"]),
    ('early_empty',
     lambda m: spec(m).update(earlyStopping={}),
     ['spec.earlyStopping.algorithmName None: Katib knows only medianstop']),
    ('resume',
     lambda m: spec(m).update(resumePolicy="Always"),
     ["spec.resumePolicy 'Always': invalid"]),
    ('resume_ok',
     lambda m: spec(m).update(resumePolicy="FromVolume"),
     []),
    ('duplicate_param',
     lambda m: spec(m)["parameters"].append(copy.deepcopy(p(m, 0))),
     ["spec.parameters: name 'learning_rate' is duplicated"]),
    ('param_type',
     lambda m: p(m, 0).update(parameterType="float"),
     ["spec.parameters[0] (learning_rate).parameterType 'float': not supported"]),
    ('param_distribution',
     lambda m: p(m, 0)["feasibleSpace"].update(distribution="gaussian"),
     ["spec.parameters[0] (learning_rate).feasibleSpace.distribution 'gaussian': not supported"]),
    ('param_no_space',
     lambda m: p(m, 0).update(feasibleSpace={}),
     ['spec.parameters[0] (learning_rate).feasibleSpace: must be specified']),
    ('param_list_on_double',
     lambda m: p(m, 0)["feasibleSpace"].update(list=["0.1"]),
     ['spec.parameters[0] (learning_rate).feasibleSpace.list: not supported for double']),
    ('param_not_numbers',
     lambda m: p(m, 0)["feasibleSpace"].update(min="a"),
     ['spec.parameters[0] (learning_rate).feasibleSpace.min and max must be numbers given as strings']),
    ('param_inverted',
     lambda m: p(m, 0)["feasibleSpace"].update(min="0.1", max="0.01"),
     ['spec.parameters[0] (learning_rate).feasibleSpace: min 0.1 must be below max 0.01']),
    ('param_step_zero',
     lambda m: p(m, 0)["feasibleSpace"].update(step="0"),
     ["spec.parameters[0] (learning_rate).feasibleSpace.step '0': must be a positive number"]),
    ('param_int_float',
     lambda m: p(m, 1).update(parameterType="int", feasibleSpace={"min": "1.5", "max": "4"}),
     ["spec.parameters[1] (batch_size).feasibleSpace: an int parameter's min, max and step must be integers"]),
    ('param_categorical_minmax',
     lambda m: p(m, 2)["feasibleSpace"].update(min="1"),
     ['spec.parameters[2] (filters).feasibleSpace: min, max and step are not supported for categorical']),
    ('param_categorical_empty',
     lambda m: p(m, 2)["feasibleSpace"].update(list=[]),
     ['spec.parameters[2] (filters).feasibleSpace.list: must not be empty']),
    ('no_parameters',
     lambda m: spec(m).update(parameters=[]),
     ['spec.parameters: must be specified']),
    ('no_template',
     lambda m: spec(m).pop("trialTemplate"),
     ['spec.trialTemplate: must be specified']),
    ('no_primary',
     lambda m: tt(m).pop("primaryContainerName"),
     ['spec.trialTemplate.primaryContainerName: must be specified']),
    ('no_conditions',
     lambda m: tt(m).pop("successCondition"),
     ['spec.trialTemplate: successCondition and failureCondition must be specified']),
    ('no_trial_parameters',
     lambda m: tt(m).pop("trialParameters"),
     ['spec.trialTemplate.trialParameters: must be specified']),
    ('both_sources',
     lambda m: tt(m).update(configMap={"configMapName": "x"}),
     ['spec.trialTemplate: exactly one of trialSpec and configMap must be given']),
    ('configmap_only',
     lambda m: (tt(m).pop("trialSpec"), tt(m).update(configMap={"configMapName": "x"})),
     []),
    ('tp_bad_name',
     lambda m: tt(m)["trialParameters"][0].update(name="lr{x}"),
     ["spec.trialTemplate.trialParameters[0]: name and reference must be specified and the name must not contain '{' or '}'", "spec.trialTemplate: ['${trialParameters.learning_rate}'] in the trial template are not in trialParameters"]),
    ('tp_duplicate',
     lambda m: tt(m)["trialParameters"].append(copy.deepcopy(tt(m)["trialParameters"][0])),
     ["spec.trialTemplate.trialParameters[5]: name 'learning_rate' or reference 'learning_rate' is duplicated"]),
    ('tp_reference',
     lambda m: tt(m)["trialParameters"][0].update(reference="lr"),
     ["spec.trialTemplate.trialParameters[0].reference 'lr': not in spec.parameters"]),
    ('tp_meta_ok',
     lambda m: _meta(m, "ns", "${trialSpec.Namespace}"),
     []),
    ('tp_meta_label_ok',
     lambda m: _meta(m, "lb", "${trialSpec.Labels[app]}"),
     []),
    ('tp_meta_bad',
     lambda m: _meta(m, "zz", "${trialSpec.Owner}"),
     ["spec.trialTemplate.trialParameters[5].reference '${trialSpec.Owner}': not in spec.parameters"]),
    ('leftover',
     lambda m: _containers(m)[0]["command"].extend(["--seed", "${trialParameters.seed}"]),
     ["spec.trialTemplate: ['${trialParameters.seed}'] in the trial template are not in trialParameters"]),
    ('template_name',
     lambda m: tt(m)["trialSpec"]["metadata"].update(name="fixed", namespace="x"),
     ['spec.trialTemplate: metadata.name and metadata.namespace in the trial template must be omitted']),
    ('template_kind',
     lambda m: tt(m)["trialSpec"].update(kind="Deployment"),
     ["spec.trialTemplate: kind 'Deployment' is not among Katib's default trial resources (TrainJob, Job, TFJob, PyTorchJob, MPIJob, XGBoostJob)"]),
    ('template_no_kind',
     lambda m: tt(m)["trialSpec"].pop("kind"),
     ['spec.trialTemplate: apiVersion and kind of the trial template must be specified']),
    ('collector_kind',
     lambda m: spec(m)["metricsCollectorSpec"]["collector"].update(kind="Stdout"),
     ["spec.metricsCollectorSpec.collector.kind 'Stdout': invalid; choose one of StdOut, File, TensorFlowEvent, PrometheusMetric, Custom, Push"]),
    ('collector_default_ok',
     lambda m: spec(m).pop("metricsCollectorSpec"),
     []),
    ('filter_bad_regex',
     lambda m: spec(m)["metricsCollectorSpec"]["source"]["filter"].update(metricsFormat=["(("]),
     ["metricsFormat '((': invalid filter: missing ), unterminated subpattern at position 1"]),
    ('filter_one_group',
     lambda m: spec(m)["metricsCollectorSpec"]["source"]["filter"].update(metricsFormat=[r"(\w+)=\d+"]),
     ["metricsFormat '(\\\\w+)=\\\\d+': two top subexpressions are required"]),
]


def test_the_built_experiment_passes():
    assert webhook_problems(_base()) == []


@pytest.mark.parametrize(("case", "breaks", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_reports_exactly_its_problem(case, breaks, expected):
    """Rules: name (lines 84-92: prefix regex, at most 40), counts (94-115), objective
    (144-147, 183-202, returning early), algorithm (204-221), early stopping (223-239), resume
    policy (241-253), parameters (255-303, 162-169), trial template (305-438: returning early
    without trialParameters or with both/neither sources), metrics collector (487-574)."""
    manifest = copy.deepcopy(_base())
    breaks(manifest)
    assert webhook_problems(manifest) == expected
