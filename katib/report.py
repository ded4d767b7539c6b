"""The tuning report: every trial (parameters, objective, status, epochs) and a plot of the
objective against the trial, best so far drawn over it, as one HTML page."""

from __future__ import annotations

import html
import math

from fmnist_kfp.katib.results import (
    EARLY_STOPPED,
    FAILED,
    OVER_PARAMETER_BUDGET,
    SUCCEEDED,
    TuningResult,
)
from fmnist_kfp.selection.report import png_base64

_COLOURS = {SUCCEEDED: "tab:blue", EARLY_STOPPED: "tab:orange", FAILED: "tab:red"}


def objective_plot_png(result: TuningResult) -> str:
    """Objective per trial in the order they finished; base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3.8))
    sign = 1 if result.objective_type == "maximize" else -1
    best_so_far: float | None = None
    best_line: list[float] = []  # NaN until a trial has scored: no line drawn there
    for index, trial in enumerate(result.trials, start=1):
        if trial.objective is not None:
            axis.scatter(index, trial.objective, color=_COLOURS.get(trial.status, "tab:gray"),
                         zorder=3)
            if trial.status in (SUCCEEDED, EARLY_STOPPED) and (
                    best_so_far is None or sign * trial.objective > sign * best_so_far):
                best_so_far = trial.objective
        best_line.append(math.nan if best_so_far is None else best_so_far)
    axis.step(range(1, len(best_line) + 1), best_line, where="post", color="tab:green",
              label="best so far")
    for status, colour in _COLOURS.items():
        if result.count(status):
            axis.scatter([], [], color=colour, label=status)
    axis.set(xlabel="trial (in the order they finished)", ylabel=result.objective_metric,
             title=f"{result.algorithm} search: {result.objective_metric} per trial")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    encoded = png_base64(figure)
    plt.close(figure)
    return encoded


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def render_html(result: TuningResult) -> str:
    names = list(result.best_parameters)
    header = "".join(f"<th>{html.escape(n)}</th>" for n in
                     ["trial", *names, "parameters", result.objective_metric, "status",
                      "epochs", "seconds"])
    rows = []
    for trial in result.trials:
        best = trial.name == result.best_trial
        objective = "" if trial.objective is None else f"{trial.objective:.4f}"
        cells = [("★ " if best else "") + trial.name,
                 *[trial.parameters.get(n, "") for n in names],
                 f"{trial.parameter_count:,}" if trial.parameter_count else "",
                 objective, trial.status, trial.epochs, trial.seconds]
        rows.append("<tr{}>{}</tr>".format(' class="best"' if best else "",
                                          "".join(f"<td>{_cell(c)}</td>" for c in cells)))
    counts = ", ".join(f"{n} {s}" for s in (SUCCEEDED, EARLY_STOPPED, FAILED,
                                             OVER_PARAMETER_BUDGET)
                       if (n := result.count(s)))
    best_values = ", ".join(f"{k} = {_cell(v)}" for k, v in result.best_parameters.items())
    size = f" ({result.best_parameter_count:,} parameters)" if result.best_parameter_count else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Hyperparameter search {html.escape(result.experiment)}
</title><style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 3px 8px; }}
tr.best {{ background: #e8f5e9; font-weight: bold; }}
</style></head><body>
<h1>Hyperparameter search: {html.escape(result.experiment)}</h1>
<p>{html.escape(result.algorithm)} search on {html.escape(result.backend)},
{result.objective_type} {html.escape(result.objective_metric)} on the validation split;
{len(result.trials)} trials ({counts}), {result.total_epochs} epochs in all,
{result.seconds:.0f} s{", median stopping" if result.early_stopping else ""}.</p>
<p><b>Best:</b> {html.escape(result.best_trial)} with {html.escape(result.objective_metric)} =
{result.best_objective:.4f}: {best_values}{size}.</p>
<img src="data:image/png;base64,{objective_plot_png(result)}" alt="objective per trial">
<h2>Trials</h2>
<table><tr>{header}</tr>
{"".join(rows)}
</table></body></html>
"""
