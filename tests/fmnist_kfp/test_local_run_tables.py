"""The sections `run --local` adds to its local reports (fmnist_kfp/local_run.py)."""

from __future__ import annotations

from fmnist_kfp.local_run import _add_step_times


def test_where_the_time_went_names_each_steps_model_and_its_outcome(tmp_path):
    """Three train-model rows used to be told apart by nothing, under an empty column header:
    each row now names its model, and the column says what it holds."""
    markdown, html = tmp_path / "report.md", tmp_path / "report.html"
    markdown.write_text("# Report\n")
    html.write_text("<html><body></body></html>")
    steps = [{"step": "ingest-fashion-mnist", "cache_hit": True, "status": "SUCCESS",
              "seconds": 0.0, "share": 0.0},
             *({"step": "train-model", "model": model, "cache_hit": False,
                "status": "SUCCESS", "seconds": 10.0, "share": 0.3}
               for model in ("basic", "dropout", "batchnorm"))]
    _add_step_times(str(markdown), str(html), steps, 33.0)
    table = markdown.read_text().split("## Where the time went\n\n")[1].splitlines()
    assert table[0] == "| step | outcome | seconds | share of the run |"
    assert [row.split(" | ")[0] for row in table[2:]] == [
        "| ingest-fashion-mnist", "| train-model (basic)", "| train-model (dropout)",
        "| train-model (batchnorm)", "| the run"]
    assert "<th>outcome</th>" in html.read_text()
