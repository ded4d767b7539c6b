"""Katib's admission webhook for Experiments (v0.19), re-implemented so a manifest can be
checked without a cluster: :func:`webhook_problems` names what Katib's Experiment validator
would reject, plus the feasible-space checks Katib's suggestion services make (numeric
min < max, positive step, non-empty lists, unique names).

upstream: docs/upstream.md#katib
"""

from __future__ import annotations

import json
import re
from typing import Any

from fmnist_kfp.tuning.experiment_settings import (
    EARLY_STOPPING_ALGORITHMS,
    RESUME_POLICIES,
    placeholder,
)
from fmnist_kfp.tuning.search_space import DISTRIBUTIONS

# What Katib v0.19 knows by default (its katib-config), for checking manifests.
KATIB_ALGORITHMS = ("random", "tpe", "grid", "hyperband", "bayesianoptimization", "cmaes",
                    "sobol", "multivariate-tpe", "enas", "darts", "pbt")
KATIB_COLLECTOR_KINDS = ("StdOut", "File", "TensorFlowEvent", "PrometheusMetric", "Custom",
                         "Push")
KATIB_TRIAL_KINDS = ("TrainJob", "Job", "TFJob", "PyTorchJob", "MPIJob", "XGBoostJob")
TRIAL_META_KEYS = ("Name", "Namespace", "Kind", "APIVersion", "Annotations", "Labels")



def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def webhook_problems(manifest: dict) -> list[str]:
    """What Katib's experiment admission webhook (v0.19) would reject in ``manifest``, plus the
    feasible-space checks its suggestion services make (numeric min < max, positive step,
    non-empty lists, unique names). Empty when Katib would admit it."""
    problems: list[str] = []
    name = (manifest.get("metadata") or {}).get("name", "")
    # validator.go lines 84-92: the regex is not anchored at the end, so only a leading letter
    # is checked, and at most 40 characters (the API server checks the rest of a DNS-1123
    # subdomain on its own, before the webhook).
    if not re.match(r"[a-z]([-a-z0-9]*[a-z0-9])?", name or "") or len(name) > 40:
        problems.append(f"metadata.name {name!r}: lowercase letters, digits and '-', starting "
                        "with a letter and ending with a letter or digit, at most 40 "
                        "characters")
    spec = manifest.get("spec") or {}
    problems += _webhook_count_problems(spec)
    objective = spec.get("objective")
    if not objective:
        return problems + ["spec.objective: must be specified"]
    if objective.get("type") not in ("minimize", "maximize"):
        problems.append(f"spec.objective.type {objective.get('type')!r}: must be minimize or "
                        "maximize")
    metric = objective.get("objectiveMetricName")
    if not metric:
        problems.append("spec.objective.objectiveMetricName: must be specified")
    if metric in (objective.get("additionalMetricNames") or []):
        problems.append("spec.objective.additionalMetricNames: must not contain the objective "
                        "metric")
    algorithm = (spec.get("algorithm") or {}).get("algorithmName")
    if not algorithm:
        problems.append("spec.algorithm.algorithmName: must be specified")
    elif algorithm not in KATIB_ALGORITHMS:
        problems.append(f"spec.algorithm.algorithmName {algorithm!r}: Katib has no suggestion "
                        f"service for it ({', '.join(KATIB_ALGORITHMS)})")
    if "earlyStopping" in spec:
        stopping = (spec.get("earlyStopping") or {}).get("algorithmName")
        if stopping not in EARLY_STOPPING_ALGORITHMS:
            problems.append(f"spec.earlyStopping.algorithmName {stopping!r}: Katib knows only "
                            f"{', '.join(EARLY_STOPPING_ALGORITHMS)}")
    if spec.get("resumePolicy", "") not in ("", *RESUME_POLICIES):
        problems.append(f"spec.resumePolicy {spec.get('resumePolicy')!r}: invalid")
    parameters = spec.get("parameters") or []
    if not parameters:
        problems.append("spec.parameters: must be specified")
    problems += _webhook_parameter_problems(parameters)
    problems += _webhook_trial_template_problems(spec.get("trialTemplate"), parameters)
    problems += _webhook_collector_problems(spec.get("metricsCollectorSpec") or {})
    return problems


def _webhook_count_problems(spec: dict) -> list[str]:
    problems = []
    parallel, most, failed = (spec.get(k) for k in
                              ("parallelTrialCount", "maxTrialCount", "maxFailedTrialCount"))
    if failed is not None and failed < 0:
        problems.append("spec.maxFailedTrialCount: should not be less than 0")
    if most is not None and most <= 0:
        problems.append("spec.maxTrialCount: must be greater than 0")
    if parallel is not None and parallel <= 0:
        problems.append("spec.parallelTrialCount: must be greater than 0")
    if failed is not None and most is not None and failed > most:
        problems.append("spec.maxFailedTrialCount: should be less than or equal to "
                        "spec.maxTrialCount")
    if parallel is not None and most is not None and parallel > most:
        problems.append("spec.parallelTrialCount: should be less than or equal to "
                        "spec.maxTrialCount")
    return problems


def _webhook_parameter_problems(parameters: list[dict]) -> list[str]:
    problems = []
    names = [p.get("name") for p in parameters]
    for duplicate in sorted({n for n in names if names.count(n) > 1}, key=str):  # None: unnamed
        problems.append(f"spec.parameters: name {duplicate!r} is duplicated")
    for i, p in enumerate(parameters):
        where = f"spec.parameters[{i}] ({p.get('name')})"
        kind = p.get("parameterType")
        space = p.get("feasibleSpace") or {}
        if kind not in ("int", "double", "categorical", "discrete", "unknown"):
            problems.append(f"{where}.parameterType {kind!r}: not supported")
        if space.get("distribution", "") not in DISTRIBUTIONS:
            problems.append(f"{where}.feasibleSpace.distribution {space['distribution']!r}: "
                            "not supported")
        if not space:
            problems.append(f"{where}.feasibleSpace: must be specified")
        elif kind in ("int", "double"):
            if space.get("list"):
                problems.append(f"{where}.feasibleSpace.list: not supported for {kind}")
            low, high = _number(space.get("min")), _number(space.get("max"))
            if low is None or high is None:
                problems.append(f"{where}.feasibleSpace.min and max must be numbers given as "
                                "strings")
            elif not low < high:
                problems.append(f"{where}.feasibleSpace: min {space['min']} must be below "
                                f"max {space['max']}")
            if "step" in space and not (_number(space["step"]) or 0) > 0:
                problems.append(f"{where}.feasibleSpace.step {space['step']!r}: must be a "
                                "positive number")
            if kind == "int" and not all(re.fullmatch(r"-?\d+", str(space.get(k, "0")))
                                         for k in ("min", "max", "step")):
                problems.append(f"{where}.feasibleSpace: an int parameter's min, max and step "
                                "must be integers")
        elif kind in ("categorical", "discrete"):
            if any(k in space for k in ("min", "max", "step")):
                problems.append(f"{where}.feasibleSpace: min, max and step are not supported "
                                f"for {kind}")
            if not space.get("list"):
                problems.append(f"{where}.feasibleSpace.list: must not be empty")
    return problems


def _webhook_trial_template_problems(template: dict | None, parameters: list[dict]) -> list[str]:
    where = "spec.trialTemplate"
    if not template:
        return [f"{where}: must be specified"]
    problems = []
    if not template.get("primaryContainerName"):
        problems.append(f"{where}.primaryContainerName: must be specified")
    if not template.get("successCondition") or not template.get("failureCondition"):
        problems.append(f"{where}: successCondition and failureCondition must be specified")
    trial_parameters = template.get("trialParameters")
    if trial_parameters is None:
        return problems + [f"{where}.trialParameters: must be specified"]
    trial_spec = template.get("trialSpec")
    if (trial_spec is None) == (template.get("configMap") is None):
        return problems + [f"{where}: exactly one of trialSpec and configMap must be given"]
    if trial_spec is None:
        return problems  # a ConfigMap's template is only read on the cluster
    text = json.dumps(trial_spec)
    experiment_parameters = {p.get("name") for p in parameters}
    seen_names: set[str] = set()
    seen_references: set[str] = set()
    for i, tp in enumerate(trial_parameters):
        name, reference = tp.get("name", ""), tp.get("reference", "")
        at = f"{where}.trialParameters[{i}]"
        if not name or not reference or "{" in name or "}" in name:
            problems.append(f"{at}: name and reference must be specified and the name must "
                            "not contain '{' or '}'")
            continue
        if name in seen_names or reference in seen_references:
            problems.append(f"{at}: name {name!r} or reference {reference!r} is duplicated")
            continue
        seen_names.add(name)
        seen_references.add(reference)
        if experiment_parameters and not _is_meta_reference(reference) and \
                reference not in experiment_parameters:
            problems.append(f"{at}.reference {reference!r}: not in spec.parameters")
        if placeholder(name) not in text:
            problems.append(f"{at}.name {name!r}: not found in the trial template")
        text = text.replace(placeholder(name), "test-value")
    leftover = re.findall(r"\$\{trialParameters\..+?\}", text)
    if leftover:
        problems.append(f"{where}: {sorted(set(leftover))} in the trial template are not in "
                        "trialParameters")
    metadata = trial_spec.get("metadata") or {}
    if metadata.get("name") or metadata.get("namespace"):
        problems.append(f"{where}: metadata.name and metadata.namespace in the trial template "
                        "must be omitted")
    if not trial_spec.get("apiVersion") or not trial_spec.get("kind"):
        problems.append(f"{where}: apiVersion and kind of the trial template must be specified")
    elif trial_spec["kind"] not in KATIB_TRIAL_KINDS:
        problems.append(f"{where}: kind {trial_spec['kind']!r} is not among Katib's default "
                        f"trial resources ({', '.join(KATIB_TRIAL_KINDS)})")
    return problems


def _is_meta_reference(reference: str) -> bool:
    """``${trialSpec.Name}``, ``${trialSpec.Labels[key]}`` and the like."""
    match = re.search(r"\$\{trialSpec\.(.+?)\}", reference)
    if not match:
        return False
    key = match.group(1)
    indexed = re.fullmatch(r"(.+)\[(.+)]", key)
    return key in TRIAL_META_KEYS or bool(indexed and indexed.group(1) in TRIAL_META_KEYS)


def _webhook_collector_problems(collector_spec: dict) -> list[str]:
    problems = []
    kind = (collector_spec.get("collector") or {}).get("kind", "StdOut")  # Katib's default
    if kind not in KATIB_COLLECTOR_KINDS:
        problems.append(f"spec.metricsCollectorSpec.collector.kind {kind!r}: invalid; choose "
                        f"one of {', '.join(KATIB_COLLECTOR_KINDS)}")
    formats = ((collector_spec.get("source") or {}).get("filter") or {}).get("metricsFormat")
    for pattern in formats or []:
        try:
            re.compile(pattern)
        except re.error as error:
            problems.append(f"metricsFormat {pattern!r}: invalid filter: {error}")
            continue
        if not re.fullmatch(r".*\(.*\).*\(.*\).*", pattern):
            problems.append(f"metricsFormat {pattern!r}: two top subexpressions are required")
    return problems

