"""A worker whose peer was lost exits with a code the operators retry (trainer.peer_lost): the
two errors TensorFlow's collectives raise for it, seen on the real Training Operator
(tests/fmnist_kfp/launcher/test_tfjob_on_the_cluster.py), and nothing else."""

from __future__ import annotations

import pytest

from fmnist_kfp.training import trainer


@pytest.mark.parametrize(("error", "code"), [
    ("UnavailableError", trainer.PEER_LOST_EXIT_CODE),
    ("AbortedError", trainer.PEER_LOST_EXIT_CODE),
])
def test_a_lost_peer_ends_the_worker_with_the_retried_code(monkeypatch, tmp_path, capsys,
                                                           error, code):
    import tensorflow as tf

    def lose_the_peer(*_args):
        raise getattr(tf.errors, error)(None, None, "Collective ops is aborted by: peer gone")

    monkeypatch.setattr(trainer, "train", lose_the_peer)
    assert trainer.main(["--data-dir", str(tmp_path), "--work-dir", str(tmp_path),
                         "--export-dir", str(tmp_path / "1")]) == code
    assert code >= 128  # the TFJob's ExitCode policy retries 128 and more
    assert "a peer worker was lost" in capsys.readouterr().out


def test_any_other_error_is_the_workers_own(monkeypatch, tmp_path):
    import tensorflow as tf

    def fail(*_args):
        raise tf.errors.InvalidArgumentError(None, None, "bad shape")

    monkeypatch.setattr(trainer, "train", fail)
    with pytest.raises(tf.errors.InvalidArgumentError):
        trainer.main(["--data-dir", str(tmp_path), "--work-dir", str(tmp_path),
                      "--export-dir", str(tmp_path / "1")])
