"""Lineage: content digests, the entry each component adds, and reading the chain back from a
local pipeline root laid out as kfp.local lays it out."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from fmnist_kfp.cli import main as cli_main
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.lineage import add_lineage, content_digest, lineage_entry
from fmnist_kfp.lineage_report import chain, format_chain, resolve, verify


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_a_directory_digest_is_its_files_paths_and_contents_in_a_stable_order(tmp_path):
    model = _tree(tmp_path / "model", {"1/saved_model.pb": b"graph", "result.json": b"{}",
                                       "1/variables/v.index": b"idx"})
    digest = content_digest(str(model))
    assert digest.startswith("sha256:") and len(digest) == 7 + 64
    # A copy (the selection copies the winner) has the same digest; empty folders don't count.
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    (copy / "empty").mkdir()
    assert content_digest(str(copy)) == digest
    # One byte, or one name, changed: another digest.
    (copy / "result.json").write_bytes(b"{ }")
    assert content_digest(str(copy)) != digest
    (copy / "result.json").write_bytes(b"{}")
    (copy / "result.json").rename(copy / "results.json")
    assert content_digest(str(copy)) != digest
    # A file's digest is the sha256 of its bytes; a missing path has none.
    assert content_digest(str(model / "result.json")) == \
        "sha256:" + hashlib.sha256(b"{}").hexdigest()
    assert content_digest(str(tmp_path / "missing")) == ""


def _artifact(path: Path, metadata: dict | None = None):
    return SimpleNamespace(uri=str(path), path=str(path), metadata=dict(metadata or {}))


def test_the_entry_names_the_producer_its_inputs_and_the_output(tmp_path, monkeypatch):
    """KFP gives a component pod KFP_POD_NAME and KFP_POD_UID (pipelines 2.15.0
    backend/src/v2/compiler/argocompiler/common.go:40-51); no run ID is in its environment."""
    monkeypatch.setenv("KFP_POD_NAME", "fashion-mnist-abc-train-1")
    monkeypatch.setenv("KFP_POD_UID", "0b5e")
    monkeypatch.setenv("FMNIST_COMPONENT_IMAGE", "registry.example.com/fmnist-kfp:0.1.0")
    dataset = _artifact(_tree(tmp_path / "dataset", {"metadata.json": b"{}"}),
                        {"lineage": {"producer": {"step": "ingest"}}})
    candidates = [_artifact(_tree(tmp_path / f"m{i}", {"x": bytes([i])})) for i in range(2)]
    model = _artifact(_tree(tmp_path / "model", {"1/saved_model.pb": b"g"}))
    entry = add_lineage(model, "select", "select_best_model",
                        inputs={"dataset": dataset, "candidates": candidates},
                        parameters={"model_type": "basic"}, served={"url": "x"})
    assert model.metadata["lineage"] is entry
    producer = entry["producer"]
    assert producer["step"] == "select" and producer["component"] == "select_best_model"
    assert producer["pod"] == "fashion-mnist-abc-train-1" and producer["pod_uid"] == "0b5e"
    assert producer["image"].endswith(":0.1.0")
    assert entry["inputs"]["dataset"] == {"uri": dataset.uri, "producer": "ingest",
                                          "digest": content_digest(dataset.path)}
    assert [c["uri"] for c in entry["inputs"]["candidates"]] == [c.uri for c in candidates]
    assert entry["uri"] == model.uri and entry["digest"] == content_digest(model.path)
    assert entry["parameters"] == {"model_type": "basic"} and entry["served"] == {"url": "x"}
    monkeypatch.delenv("KFP_POD_NAME")
    assert "pod" not in lineage_entry("ingest", "ingest_fashion_mnist", inputs={})["producer"]


def _task(run: Path, task: str, outputs: dict[str, dict]) -> None:
    """A task's executor_output.json as kfp.local writes it (kfp/local/executor_output_utils)."""
    (run / task).mkdir(parents=True, exist_ok=True)
    artifacts = {name: {"artifacts": [{"name": name, "uri": uri, "metadata": metadata}]}
                 for name, (uri, metadata) in outputs.items()}
    (run / task / "executor_output.json").write_text(json.dumps({"artifacts": artifacts}))


@pytest.fixture
def local_root(tmp_path) -> dict:
    """Two runs: the first ran every step; the second took ingest, train and select from the
    cache (their outputs stay the first run's) and deployed again."""
    root = tmp_path / "runs"
    first = root / "fashion-mnist-training-2026-11-23-10-00-00-000001"
    second = root / "fashion-mnist-training-2026-11-23-11-00-00-000001"
    dataset = _tree(first / "ingest-fashion-mnist" / "dataset", {"metadata.json": b"{}"})
    trained = _tree(first / "for-loop-1-iteration-0" / "train-model" / "model",
                    {"1/saved_model.pb": b"g"})
    best = _tree(first / "select-best-model" / "best_model", {"1/saved_model.pb": b"g"})
    d = _artifact(dataset)
    d.metadata["lineage"] = lineage_entry("ingest", "ingest_fashion_mnist", inputs={}, output=d,
                                          parameters={"source": "/data/fashion-mnist"})
    m = _artifact(trained)
    m.metadata["lineage"] = lineage_entry(
        "train", "train_model", inputs={"dataset": d}, output=m,
        parameters={"model_type": "basic", "hyperparameters": {"learning_rate": 0.001}})
    b = _artifact(best)
    b.metadata["lineage"] = lineage_entry(
        "select", "select_best_model", inputs={"dataset": d, "model": m, "candidates": [m]},
        output=b, parameters={"test_accuracy": 0.85})
    _task(first, "ingest-fashion-mnist", {"dataset": (d.uri, d.metadata)})
    _task(first / "for-loop-1-iteration-0", "train-model", {"model": (m.uri, m.metadata)})
    _task(first, "select-best-model", {"best_model": (b.uri, b.metadata)})
    for run in (first, second):
        record = _tree(run / "deploy-model", {"deployment": b'{"action": "created"}'})
        r = _artifact(record / "deployment")
        r.metadata["lineage"] = lineage_entry(
            "deploy", "deploy_model", inputs={"model": b, "dataset": d}, output=r,
            served={"url": "http://127.0.0.1:8080", "version": content_digest(b.path)})
        _task(run, "deploy-model", {"deployment": (r.uri, r.metadata)})
    return {"root": root, "second": second, "dataset": dataset, "trained": trained,
            "best": best}


def test_the_chain_of_the_latest_run_reaches_the_cached_dataset(local_root):
    index, start = resolve(local_root["root"])
    assert start.task == "deploy-model" and start.run == local_root["second"].name
    nodes = chain(index, start)
    assert [(n["task"], n["depth"]) for n in nodes] == [
        ("deploy-model", 0), ("select-best-model", 1), ("ingest-fashion-mnist", 2),
        ("train-model", 2), ("ingest-fashion-mnist", 3), ("ingest-fashion-mnist", 1)]
    assert nodes[0]["served"]["version"] == content_digest(str(local_root["best"]))
    train = nodes[3]
    assert train["parameters"]["hyperparameters"] == {"learning_rate": 0.001}
    assert nodes[-1]["digest"] == content_digest(str(local_root["dataset"]))
    assert nodes[-1]["repeated"]  # reached twice, followed once
    text = format_chain(nodes)
    assert content_digest(str(local_root["dataset"]))[:19] in text
    assert "hyperparameters: {learning_rate=0.001}" in text and "served:" in text
    assert verify(nodes) == []


def test_a_model_directory_and_a_run_directory_start_their_own_chains(local_root):
    index, start = resolve(local_root["trained"])
    assert start.task == "train-model"
    assert [n["task"] for n in chain(index, start)] == ["train-model", "ingest-fashion-mnist"]
    _, start = resolve(local_root["second"])
    assert start.task == "deploy-model" and start.run == local_root["second"].name


def test_verify_says_what_it_checked(local_root, capsys):
    """`lineage --verify` that finds nothing changed says so, and what it checked: not the
    plain chain alone, as if no check had run."""
    assert cli_main(["lineage", str(local_root["root"])]) == 0
    plain = capsys.readouterr()
    assert cli_main(["lineage", str(local_root["root"]), "--verify"]) == 0
    verified = capsys.readouterr()
    assert verified.out == plain.out
    nodes = chain(*resolve(local_root["root"]))
    checked = len({n["uri"] for n in nodes if n.get("digest") and Path(n["uri"]).exists()})
    assert checked >= 2
    assert verified.err.startswith(f"verified: the {checked} artifacts with files here match "
                                   "their recorded digests")


def test_a_changed_artifact_is_reported_by_verify(local_root, capsys):
    (local_root["trained"] / "1" / "saved_model.pb").write_bytes(b"tampered")
    assert cli_main(["lineage", str(local_root["root"]), "--verify"]) == 1
    captured = capsys.readouterr()
    assert f"changed since it was recorded: {local_root['trained']}" in captured.err
    assert cli_main(["lineage", str(local_root["root"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["task"] == "deploy-model"


def test_paths_outside_a_run_are_refused_with_what_to_pass(tmp_path, capsys):
    with pytest.raises(UserInputError, match="does not exist"):
        resolve(tmp_path / "nothing")
    (tmp_path / "loose").mkdir()
    with pytest.raises(UserInputError, match="not inside a local pipeline run"):
        resolve(tmp_path / "loose")
    assert cli_main(["lineage", str(tmp_path / "nothing")]) == 2
    assert "pass a model artifact, a run directory or the pipeline root" in capsys.readouterr().err


def test_a_reader_that_leaves_early_gets_no_traceback(local_root, tmp_path):
    """`fmnist-kfp lineage --json | head -1`: the reader has gone before the JSON is written
    (here always: its end of the pipe is closed first). The command ends quietly."""
    import os
    import subprocess
    import sys

    from tests import ROOT

    read, write = os.pipe()
    os.close(read)  # the reader left
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fmnist_kfp.cli", "lineage", "--json",
             str(local_root["root"])], stdout=write, stderr=subprocess.PIPE, text=True,
            timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.close(write)
    assert done.returncode == 141
    assert done.stderr == "", done.stderr
