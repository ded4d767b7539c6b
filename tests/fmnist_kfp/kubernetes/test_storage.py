"""The shared volume (fmnist_kfp.kubernetes.storage): the dataset staged there atomically, so that
steps staging it in parallel never touch a copy a TFJob is reading, and the directories the
steps make there writable by every pod of group 0."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes import storage

SHARD = "train-00000-of-00001.tfrecord"
METADATA = {"sha256": {"train": "ab" * 32}, "ingested_at": "2026-03-01T00:00:00+00:00"}


def _dataset(path: Path, payload: bytes) -> Path:
    """An ingested dataset as a step's input artifact holds it: a shard and metadata.json."""
    path.mkdir(parents=True)
    (path / SHARD).write_bytes(payload)
    (path / "metadata.json").write_text(json.dumps(METADATA))
    return path


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_a_late_stager_never_touches_the_copy_a_job_is_reading(tmp_path, monkeypatch):
    """Two steps stage the same dataset (same checksums, same key) at once: A finds no copy and
    starts copying; meanwhile B finds none either, copies, publishes, and its TFJob starts
    reading. A's late copy must not rewrite what that job reads: before, it copied into the
    same directory with overwrite (truncating each shard, then writing it again). A's source
    bytes differ from B's here, so any write into B's copy shows in what the reader sees."""
    root = tmp_path / "volume" / "datasets"
    source_a = _dataset(tmp_path / "a", b"A" * 4096)
    source_b = _dataset(tmp_path / "b", b"B" * 4096)
    real_copy = storage.copy_tree
    reader: dict = {}

    def copy_tree(source, destination, last=""):
        if source == str(source_a) and not reader:
            # A has checked and is about to copy: B stages completely, its job opens a shard.
            published = storage.stage_dataset(str(source_b), str(root))
            handle = open(f"{published}/{SHARD}", "rb")  # noqa: SIM115 - held open on purpose
            reader.update(path=published, handle=handle, inode=os.fstat(handle.fileno()).st_ino)
        real_copy(source, destination, last)

    monkeypatch.setattr(storage, "copy_tree", copy_tree)
    try:
        target = storage.stage_dataset(str(source_a), str(root))
        assert target == reader["path"]  # A uses B's copy
        assert reader["handle"].read() == b"B" * 4096  # the open file: never truncated
        shard = Path(target) / SHARD
        assert shard.read_bytes() == b"B" * 4096  # nor replaced
        assert shard.stat().st_ino == reader["inode"]
    finally:
        if "handle" in reader:
            reader["handle"].close()
    assert _leftovers(root) == []  # A's private copy is gone


def test_two_stagers_racing_to_publish_one_wins_and_both_use_its_copy(tmp_path):
    """Both copy into directories of their own, then wait for each other (a barrier in the
    hook between copy and publish) and rename at once: the rename is atomic and fails onto
    a directory that exists and is not empty (POSIX rename(2): ENOTEMPTY or EEXIST), so
    exactly one copy is published whole and the other is discarded."""
    root = tmp_path / "datasets"
    sources = [_dataset(tmp_path / name, name.encode() * 4096) for name in ("x", "y")]
    barrier = threading.Barrier(2, timeout=60)
    staged: list[str] = []
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def before_publish(staging: str) -> None:
        staged.append(staging)
        barrier.wait()

    def stage(index: int) -> None:
        try:
            results[index] = storage.stage_dataset(str(sources[index]), str(root),
                                                   before_publish=before_publish)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=stage, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and results[0] == results[1]
    assert len(set(staged)) == 2 and all(Path(s).parent == root for s in staged)
    payload = (Path(results[0]) / SHARD).read_bytes()
    assert payload in (b"x" * 4096, b"y" * 4096)  # one copy, whole, not a mix
    assert json.loads((Path(results[0]) / "metadata.json").read_text()) == METADATA
    assert _leftovers(root) == []


def test_a_complete_copy_is_reused_without_copying(tmp_path, monkeypatch):
    root = tmp_path / "datasets"
    source = _dataset(tmp_path / "source", b"S" * 100)
    first = storage.stage_dataset(str(source), str(root))
    monkeypatch.setattr(storage, "copy_tree", lambda *a, **k: pytest.fail("copied again"))
    assert storage.stage_dataset(str(source), str(root)) == first
    assert Path(first).name == storage.dataset_key(METADATA)


def test_an_incomplete_copy_left_by_an_older_version_is_refused_naming_the_fix(tmp_path):
    """A copy without metadata.json can only come from a copy that was not yet atomic and was
    interrupted; it is not overwritten (a step of that version may still be writing it)."""
    root = tmp_path / "datasets"
    source = _dataset(tmp_path / "source", b"S" * 100)
    partial = root / storage.dataset_key(METADATA)
    partial.mkdir(parents=True)
    (partial / SHARD).write_bytes(b"S" * 10)
    with pytest.raises(UserInputError, match="incomplete copy.*delete that directory"):
        storage.stage_dataset(str(source), str(root))
    assert (partial / SHARD).read_bytes() == b"S" * 10
    assert _leftovers(root) == []


def test_the_directories_steps_make_on_the_volume_are_group_writable_and_setgid(tmp_path):
    """Mode 2775 whatever the umask: the pods of group 0 (the image's; KFP runs its steps with
    no fsGroup) write in them whatever their uid, and what they make keeps the group."""
    volume = tmp_path / "volume"
    volume.mkdir()
    source = _dataset(tmp_path / "source", b"S" * 100)
    old = os.umask(0o022)
    try:
        storage.stage_dataset(str(source), str(volume / "datasets"))
        storage.make_shared_dirs(str(volume / "katib" / "fmnist-tune-dropout"))
    finally:
        os.umask(old)
    for directory in ("datasets", "katib", "katib/fmnist-tune-dropout"):
        assert stat.S_IMODE((volume / directory).stat().st_mode) == 0o2775, directory
    storage.make_shared_dirs("s3://bucket/katib")  # no directories to make in a bucket


def test_a_volume_root_the_step_cannot_write_stops_it_naming_the_fix(tmp_path, monkeypatch):
    """The step writes the volume first, with no fsGroup (KFP sets none on step pods): on a
    root it may not write (root:root 0755, as NFS, Filestore or Longhorn RWX hand it out) it
    stops before copying anything, saying what the root is, who the step runs as, and what to
    do. (The mkdir is refused by a stand-in: this test may run as root.)"""
    volume = tmp_path / "volume"
    volume.mkdir()
    source = _dataset(tmp_path / "source", b"S" * 100)
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, **kwargs):
        if str(path).startswith(str(volume)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_mkdir(path, mode, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(UserInputError) as refused:
        storage.stage_dataset(str(source), str(volume / "datasets"))
    message = str(refused.value)
    assert f"cannot create {volume}/datasets on the shared volume (Permission denied)" in message
    assert f"{volume} is owned by " in message and "with no fsGroup" in message
    assert "kubectl apply -k manifests/pvc" in message and "chown 1000:0" in message
    assert list(volume.iterdir()) == []


def test_the_pod_security_context_is_the_images_user_and_group():
    from kubernetes.client import ApiClient

    def as_json(context):
        return ApiClient().sanitize_for_serialization(context)

    assert as_json(storage.pod_security_context(with_volume=True)) == {
        "runAsUser": 1000, "runAsGroup": 0, "fsGroup": 0, "fsGroupChangePolicy": "OnRootMismatch"}
    assert as_json(storage.pod_security_context(with_volume=False)) == {
        "runAsUser": 1000, "runAsGroup": 0}
