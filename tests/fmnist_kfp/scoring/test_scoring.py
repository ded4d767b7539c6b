"""Batch scoring (the core of batch prediction): reading inputs as the predictor does, labels
from class folders, shards that split the inputs exactly once, and a shard's worker writing a
row per input (an error row for one it cannot read)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fmnist_kfp.images import decode_image
from fmnist_kfp.scoring.image_reader import BadInput, read_image
from fmnist_kfp.scoring.inputs import label_of, list_source, shard_items
from fmnist_kfp.scoring.worker import score_shard
from tests.fixtures import synthetic_split


def _png(array: np.ndarray, mode: str = "L", size: int = 28, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).convert(mode).resize((size, size)).save(buffer, format=fmt)
    return buffer.getvalue()


def test_images_are_read_as_the_predictor_reads_them():
    """The model server's decoding path (fmnist_kfp/images.py): the dataset's own
    28×28 grayscale PNG gives its pixels back exactly, any other image the pixels the predictor
    computes for it; a file the predictor refuses is an error row with the same reason."""
    images, _ = synthetic_split(2, seed=3)
    assert np.array_equal(read_image(_png(images[0])), images[0].astype(np.float32))
    for fmt, mode in (("JPEG", "RGB"), ("WEBP", "RGB"), ("JPEG", "CMYK")):
        encoded = _png(images[1], mode=mode, size=64, fmt=fmt)
        assert np.array_equal(read_image(encoded), decode_image(encoded, "x"))
    with pytest.raises(BadInput, match="not a PNG, JPEG, GIF, BMP or WebP"):
        read_image(b"hello")
    with pytest.raises(BadInput, match="cannot be"):
        read_image(_png(images[0], size=200)[:300])


def test_class_folders_label_images():
    assert label_of("9/shoe.png") == 9
    assert label_of("Ankle boot/a.png") == label_of("ankle_boot/a.png") == 9
    assert label_of("t-shirt_top/a.png") == label_of("T-shirt-top/b.png") == 0
    assert label_of("a.png") is None and label_of("misc/a.png") is None


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    """12 images in class folders, a JPEG at another size, a truncated PNG, a text file and a
    hidden file."""
    root = tmp_path_factory.mktemp("images")
    images, labels = synthetic_split(12, seed=4)
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        folder = root / str(int(label))
        folder.mkdir(exist_ok=True)
        (folder / f"{i:02d}.png").write_bytes(_png(image))
    (root / "unlabelled").mkdir()
    (root / "unlabelled" / "big.jpg").write_bytes(_png(images[0], "RGB", 90, "JPEG"))
    (root / "unlabelled" / "cut.png").write_bytes(_png(images[1], size=200)[:300])
    (root / "unlabelled" / "notes.txt").write_text("not an image")
    (root / ".DS_Store").write_bytes(b"\0")
    return root


def test_shards_split_the_inputs_exactly_once(image_dir, synthetic_dataset):
    for source, data_dir, count in ((str(image_dir), "", 15), ("", str(synthetic_dataset), 500)):
        listed = list_source(source, data_dir)
        everything = [item.id for item in shard_items(listed, 0, 1)]
        assert len(everything) == len(set(everything)) == count
        for shards in (2, 3):
            parts = [[item.id for item in shard_items(listed, s, shards)] for s in range(shards)]
            assert sorted(sum(parts, [])) == sorted(everything)
            assert all(parts)





def prediction_rows(output: Path) -> list[dict]:
    """Every row a batch prediction wrote into ``output``, shard by shard."""
    return [json.loads(line) for part in sorted(output.glob("predictions-*.jsonl"))
            for line in part.read_text().splitlines()]


def test_bad_inputs_become_error_rows_and_good_ones_match_the_model(image_dir, exported_model,
                                                                    tmp_path):
    from fmnist_kfp.training.export import load_pixels_predictor

    summary = score_shard(model_dir=str(exported_model), source=str(image_dir), data_dir="",
                          output_dir=str(tmp_path), shard=0, num_shards=1, batch_size=5)
    assert summary["rows"] == 15 and summary["errors"] == 2 and summary["predicted"] == 13
    assert summary["labelled"] == 12
    rows = {row["id"]: row for row in prediction_rows(tmp_path)}
    assert "not a PNG, JPEG, GIF, BMP or WebP" in rows["unlabelled/notes.txt"]["error"]
    assert "cannot be" in rows["unlabelled/cut.png"]["error"]  # read, or decoded
    assert "label" not in rows["unlabelled/big.jpg"] and "error" not in rows["unlabelled/big.jpg"]
    # The 28×28 PNGs are the model's own answers to their pixels.
    predict = load_pixels_predictor(str(exported_model / "1"))
    for name, row in rows.items():
        if name.startswith("unlabelled"):
            continue
        pixels = np.asarray(Image.open(image_dir / name), dtype=np.float32)[np.newaxis]
        expected = predict(pixels)["probabilities"].numpy()[0]
        assert row["class"] == int(np.argmax(expected)) and row["label"] == int(name[0])
        assert np.allclose(row["probabilities"], expected, atol=1e-6)
        assert abs(sum(row["probabilities"]) - 1) < 1e-4
