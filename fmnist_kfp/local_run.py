"""Runs the pipeline on this machine with ``kfp.local`` and writes a run summary.

Every step runs as a subprocess (``SubprocessRunner``) with KFP's local cache on, so a re-run
inside the freshness window reuses ingestion, training and selection. The step timings and
cache hits in ``summary.json`` come from the events ``kfp.local`` logs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fmnist_kfp.dataset.sources import resolve_source
from fmnist_kfp.errors import StepFailed
from fmnist_kfp.kfp_components import STEP_ERRORS_ENV
from fmnist_kfp.run_console import RunConsole, plain, without_tracebacks
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.training import Hyperparameters
from fmnist_kfp.validation import validate_parameters, writable_directory

DEFAULT_PIPELINE_ROOT = "runs/local"
# Steps that read the clock or change or measure the live server run every time.
NEVER_CACHED = ("freshness-window", "deploy-model", "predict-with-served-model")
def _hyperparameters(values: dict[str, Any]) -> dict[str, Any]:
    """The tunable hyperparameters, typed again (artifact metadata carries numbers as floats)."""
    names = Hyperparameters.names()
    return asdict(Hyperparameters.from_dict({k: v for k, v in values.items() if k in names}))


def _arguments(parameters: PipelineParameters) -> dict[str, Any]:
    """Pipeline arguments, with the data source resolved so it is part of the cache key."""
    return {**parameters.arguments(), "data_source": resolve_source(parameters.data_source)}


def _deployment_summary(outputs) -> dict[str, Any]:
    decision = outputs.outputs["deployment"].metadata
    return {
        "action": decision.get("action"),
        "url": outputs.outputs["serving_url"],
        "model_name": decision.get("name"),
        "blessing": decision.get("blessing"),
        "served_accuracy": outputs.outputs["served_accuracy"],
        # ok: the served answers are the model's own, float rounding and near-ties aside
        # (fmnist_kfp.serving.deploy.verification.agreement); agreement: the fraction of equal
        # classes.
        "verification_ok": (decision.get("verification") or {}).get("ok"),
        "verification_agreement": (decision.get("verification") or {}).get("agreement"),
    }


def _lineage(pipeline_root: str, start_uri: str) -> list[dict[str, Any]]:
    from fmnist_kfp.lineage_report import Index, chain

    index = Index.of(pipeline_root)
    start = index.artifacts.get(start_uri)
    return chain(index, start) if start else []


def _tensorboard_logs(best_model) -> dict[str, str]:
    """Each candidate's TensorBoard logs (inside its model artifact), by model type: the
    selection's lineage names the candidates."""
    from fmnist_kfp.training.tensorboard import log_dir

    logs = {}
    lineage = best_model.metadata.get("lineage") or {}
    for entry in (lineage.get("inputs") or {}).get("candidates", []):
        result = os.path.join(entry["uri"], "result.json")
        if os.path.exists(result) and os.path.isdir(log_dir(entry["uri"])):
            with open(result) as handle:
                logs[json.load(handle)["model_type"]] = log_dir(entry["uri"])
    return logs


def _tuning_reports(pipeline_root: str, models: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each tuned model's search report (the tune step's HTML artifact), by model type: the
    latest search of that model type whose best values are the ones its model trained with
    (a cached search is an earlier run's)."""
    from fmnist_kfp.lineage_report import Index

    reports: dict[str, str] = {}
    for artifact in sorted(Index.of(pipeline_root).artifacts.values(), key=lambda a: a.run):
        values = artifact.lineage.get("parameters") or {}
        model = models.get(values.get("model_type", ""))
        report = os.path.join(os.path.dirname(artifact.uri), "report")
        if (artifact.name == "search" and model and values.get("tuned")
                and _hyperparameters(values.get("best") or {}) == model["hyperparameters"]
                and os.path.isfile(report)):
            reports[values["model_type"]] = report
    return reports


def _readable_copies(directory: str, files: dict[str, str]) -> dict[str, str]:
    """Copies of artifact files in ``directory``, under names that end in ``.html``/``.md``:
    KFP writes an HTML or Markdown output artifact to a path without an extension (the
    Kubeflow UI renders artifacts by their type), which a browser shows as source."""
    copies = {}
    for name, source in files.items():
        copies[name] = os.path.abspath(os.path.join(directory, name))
        shutil.copyfile(source, copies[name])
    return copies


def _serving_history(model_name: str, since: float) -> list[dict[str, Any]]:
    """The local deployment's changes during this run (its history file), oldest first."""
    from fmnist_kfp.serving.deploy.local_deployer import history_path

    path = history_path(model_name)
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{"seconds_into_run": round(entry["at"] - since, 1),
             **{k: entry[k] for k in ("action", "how", "model_type", "validation_accuracy",
                                      "test_accuracy", "url")}}
            for entry in entries if entry["at"] >= since]


def _append_table(markdown_path: str, html_path: str, title: str, header: list[str],
                  rows: list[list[str]]) -> None:
    """Ends the local copies of the report with a section the KFP report artifact cannot
    hold: it is written by selection, before the later steps ran."""
    with open(markdown_path, "a") as handle:
        handle.write(f"\n## {title}\n\n| " + " | ".join(header)
                     + " |\n|" + "---|" * len(header) + "\n"
                     + "".join("| " + " | ".join(row) + " |\n" for row in rows))
    table = (f"<h2>{title}</h2><table><tr>"
             + "".join(f"<th>{h}</th>" for h in header) + "</tr>"
             + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
             + "</table>")
    html = Path(html_path).read_text()
    Path(html_path).write_text(html.replace("</body>", table + "</body>", 1)
                               if "</body>" in html else html + table)


def _add_serving_history(markdown_path: str, html_path: str,
                         served: list[dict[str, Any]]) -> None:
    """serve_early: when each model started serving."""
    _append_table(markdown_path, html_path, "When each model started serving",
                  ["seconds into the run", "model", "how", "validation accuracy", "action"],
                  [[f"{e['seconds_into_run']:.1f}", e["model_type"] or "the selected model",
                    "served early" if e["how"] == "serve_early" else "final deployment",
                    "" if e["validation_accuracy"] is None
                    else f"{e['validation_accuracy']:.4f}", e["action"]] for e in served])


def _add_step_times(markdown_path: str, html_path: str, steps: list[dict[str, Any]],
                    total_seconds: float) -> None:
    """Where the run's time went: each step's wall time and its share of the run."""
    rows = [[s["step"] + (f" ({s['model']})" if s.get("model") else ""),
             "cached" if s["cache_hit"] else s["status"].lower(),
             f"{s['seconds']:.1f}", f"{100 * s['share']:.1f}%"] for s in steps]
    rows.append(["the run", "", f"{total_seconds:.1f}", "100.0%"])
    _append_table(markdown_path, html_path, "Where the time went",
                  ["step", "outcome", "seconds", "share of the run"], rows)


def _batch_summary(predictions) -> dict[str, Any]:
    keys = ("source", "rows", "predicted", "errors", "labelled", "accuracy", "workers",
            "images_per_second", "scoring_images_per_second")
    summary = {key: predictions.metadata.get(key) for key in keys}
    for key in ("rows", "predicted", "errors", "labelled", "workers"):
        if summary[key] is not None:
            summary[key] = int(summary[key])  # artifact metadata carries numbers as floats
    return {**summary, "path": predictions.path}


def _step_failure(failure: RuntimeError, errors_path: str, console: RunConsole) -> Exception:
    """What ends a failed run: the error of ours a step stopped with (recorded in
    ``errors_path``: see :func:`kfp_components.reports_errors_briefly`) as a
    :class:`~fmnist_kfp.errors.StepFailed` naming the step, with the error's exit code; else
    kfp.local's own message (a bug: the step's traceback is in the log)."""
    try:
        with open(errors_path) as handle:
            records = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        records = []
    if not records:
        return RuntimeError(plain(str(failure)) + f" Its log says why: {console.log_path}")
    failed = [step["step"] for step in console.steps if step.get("status") == "FAILURE"]
    where = f"the {failed[0]} step failed: " if failed else ""
    record = records[0]
    # A training job's error ends with its workers' last lines: a crashed worker's traceback.
    message = without_tracebacks(record["message"])
    if message != record["message"]:
        message += f"\n(its frames are in the run's log: {console.log_path})"
    return StepFailed(where + message, kind=record.get("error", ""),
                      exit_code=int(record.get("exit_code", 1)))


def run_local(
    parameters: PipelineParameters,
    *,
    pipeline_root: str = DEFAULT_PIPELINE_ROOT,
    summary_path: str | None = None,
    enable_caching: bool = True,
    verbose: bool = False,
) -> dict[str, Any]:
    """Validates the parameters, runs the pipeline locally, returns and writes the summary
    (beside it, the reports as ``report.html`` and ``report.md``). The terminal shows a line
    per step and the progress of training and tuning; everything the steps print goes to a
    log file in ``<pipeline_root>/logs/`` (:mod:`fmnist_kfp.run_console`), and with
    ``verbose`` to the terminal too. A model it serves locally is a deployment of
    ``pipeline_root`` (``<pipeline_root>/deployments``): runs under another root keep theirs."""
    from fmnist_kfp.serving.deploy.local_deployer import deployments_of

    with deployments_of(os.path.abspath(pipeline_root)):
        return _run_local(parameters, pipeline_root=pipeline_root, summary_path=summary_path,
                          enable_caching=enable_caching, verbose=verbose)


def _run_local(parameters: PipelineParameters, *, pipeline_root: str,
               summary_path: str | None, enable_caching: bool, verbose: bool) -> dict[str, Any]:
    validate_parameters(parameters)
    if parameters.backend == "local" and (parameters.kubernetes or {}).get("scheduling"):
        # Accepted, so one parameter set serves both; nothing here queues or gangs processes.
        print("note: kubernetes.scheduling (queue, priority_class, gang) applies to jobs on "
              "the cluster; locally the jobs are processes sharing this machine's cores "
              "(docs/scheduling.md)", flush=True)
    pipeline_root = os.path.abspath(pipeline_root)
    summary_path = os.path.abspath(summary_path or os.path.join(pipeline_root, "summary.json"))
    summary_dir = os.path.dirname(summary_path)
    # Both made now: a summary that cannot be written fails before the run, not after it.
    writable_directory(pipeline_root, "the pipeline root")
    writable_directory(summary_dir, "the summary's directory")
    from kfp import local

    from fmnist_kfp.pipelines.fashion_mnist import make_pipeline

    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=pipeline_root,
        enable_caching=enable_caching,
        raise_on_error=True,
    )
    started = time.time()
    warnings.filterwarnings("ignore", message=".*non-Python base image.*")
    warnings.filterwarnings("ignore", message=".*have no effect in the current local runner.*")
    root = logging.getLogger()
    previous_level = root.level
    root.setLevel(logging.INFO)  # kfp.local's step events are INFO records
    descriptor, errors_path = tempfile.mkstemp(prefix="fmnist-step-errors-", suffix=".jsonl")
    os.close(descriptor)
    previous_errors = os.environ.get(STEP_ERRORS_ENV)
    os.environ[STEP_ERRORS_ENV] = errors_path  # the steps inherit it
    console = RunConsole(os.path.join(pipeline_root, "logs", time.strftime(
        "run-%Y%m%d-%H%M%S.log", time.gmtime(started))), verbose=verbose, origin=started)
    try:
        with console:
            # One model at a time: each training job gets every core of this machine.
            outputs = make_pipeline(parallelism=1)(**_arguments(parameters))
    except RuntimeError as failure:  # kfp.local: a step failed
        raise _step_failure(failure, errors_path, console) from None
    finally:
        root.setLevel(previous_level)
        if previous_errors is None:
            os.environ.pop(STEP_ERRORS_ENV, None)
        else:
            os.environ[STEP_ERRORS_ENV] = previous_errors
        os.remove(errors_path)
    total = round(time.time() - started, 2)
    served = _serving_history(parameters.model_name, started)
    best_model = outputs.outputs["best_model"]
    metadata = best_model.metadata
    summary = {
        "best_model_type": outputs.outputs["best_model_type"],
        "best_test_accuracy": metadata["test_accuracy"],
        "best_validation_accuracy": metadata["validation_accuracy"],
        "models": {
            entry["model_type"]: {
                "validation_accuracy": entry["validation_accuracy"],
                "train_seconds": entry["train_seconds"],
                "parameters": entry["parameters"],
                "epochs": entry["epochs"],
                # What the tuning step chose, when it ran; the given values otherwise.
                "hyperparameters": _hyperparameters(entry["hyperparameters"]),
            }
            for entry in metadata["leaderboard"]
        },
        "tuned": parameters.tune,
        "deployment": _deployment_summary(outputs),
        "best_model_path": best_model.path,
        "report_artifact_path": outputs.outputs["report"].path,
        "report_markdown_artifact_path": outputs.outputs["report_markdown"].path,
        "total_seconds": total,
        "log_path": console.log_path,
        "pipeline_root": pipeline_root,  # whose local deployment the served model is
        "steps": console.steps_with_shares(total),
        "cache_hits": sorted({s["step"] for s in console.steps if s["cache_hit"]}),
        "all_steps_cached": all(
            s["cache_hit"] for s in console.steps if s["step"] not in NEVER_CACHED
        ),
        "parameters": {k: v for k, v in parameters.arguments().items() if k != "data_source"},
        # The served model back to the dataset: steps, digests, hyperparameters
        # (fmnist_kfp.lineage).
        "lineage": _lineage(pipeline_root, outputs.outputs["deployment"].uri),
        "tensorboard": _tensorboard_logs(best_model),  # what `fmnist-kfp tensorboard` serves
        "batch_prediction": _batch_summary(outputs.outputs["batch_predictions"]),
        # When each model started serving, in seconds from the run's start (serve_early
        # promotions, then the final deployment's change, if any).
        "serving_history": served,
        "first_served_seconds": served[0]["seconds_into_run"] if served else None,
    }
    # The reports again beside the summary, named so a browser renders them.
    tuning = _tuning_reports(pipeline_root, summary["models"]) if parameters.tune else {}
    copies = _readable_copies(summary_dir, {
        "report.html": summary["report_artifact_path"],
        "report.md": summary["report_markdown_artifact_path"],
        **{f"tuning-{model_type}.html": path for model_type, path in tuning.items()}})
    summary["report_path"] = copies["report.html"]
    summary["report_markdown_path"] = copies["report.md"]
    if any(entry["how"] == "serve_early" for entry in served):
        _add_serving_history(copies["report.md"], copies["report.html"], served)
    _add_step_times(copies["report.md"], copies["report.html"], summary["steps"], total)
    summary["tuning_reports"] = {model_type: copies[f"tuning-{model_type}.html"]
                                 for model_type in tuning}
    with open(summary_path, "w") as handle:
        json.dump(summary, handle, indent=2)
    summary["summary_path"] = summary_path
    return summary
