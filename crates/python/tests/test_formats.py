"""Datasets as users store them (issue 29): Parquet files written by pyarrow with the layout
Hugging Face's ``datasets`` uses (an ``image`` struct of bytes and path, a ``label``), and the
file ``datasets`` itself wrote (the Rust tests' fixture), read over S3 and checked against
what pyarrow reads back and PIL decodes; MDS shards written by MosaicML Streaming's
MDSWriter and LitData chunks written by ``litdata.optimize`` (the Rust tests' fixtures),
checked against what those libraries read back; and ``loader pack --format parquet``'s
files, read by pyarrow as ``datasets`` would read them, and images as paths beside a file
``datasets`` wrote, read by the package."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import loader_ml
import subprocess

from conftest import WORKSPACE, Server, binary

FIXTURES = WORKSPACE / "crates/core/tests/fixtures/parquet"
MDS = WORKSPACE / "crates/core/tests/fixtures/mds"
LITDATA = WORKSPACE / "crates/core/tests/fixtures/litdata"


def jpeg(index: int) -> bytes:
    rng = numpy.random.default_rng(index)
    pixels = rng.integers(0, 255, (24, 32, 3), numpy.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=85)
    return out.getvalue()


def write(path: Path, rows: range, **options) -> None:
    image = pa.array([{"bytes": jpeg(i), "path": f"{i}.jpg"} for i in rows],
                     type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    table = pa.table({"image": image, "label": pa.array([i % 5 for i in rows], pa.int64())})
    pq.write_table(table, path, **options)


@pytest.fixture()
def bucket(tmp_path: Path):
    data = tmp_path / "root" / "hfdata"
    data.mkdir(parents=True)
    write(data / "train-00000-of-00002.parquet", range(0, 30), write_page_index=True,
          row_group_size=10, data_page_size=4096, write_batch_size=2)
    write(data / "train-00001-of-00002.parquet", range(30, 50), compression="zstd")
    (tmp_path / "root" / "hfds").mkdir()
    shutil.copy(FIXTURES / "hf-datasets.parquet", tmp_path / "root" / "hfds" / "hf-datasets.parquet")
    server = Server(tmp_path / "root")
    yield data, server
    server.stop()


def test_parquet_over_s3_gives_pyarrows_rows_and_pils_pixels(bucket) -> None:
    data, server = bucket
    files = sorted(data.glob("*.parquet"))
    want = pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()
    loader = loader_ml.DataLoader("s3://hfdata", batch_size=8, shuffle=True, seed=2,
                                  storage_options=server.options, output="numpy")
    assert len(loader.dataset) == 50
    seen = set()
    for batch in loader:
        for index, label, pixels in zip(batch.indices, batch.labels, batch.images):
            row = want[int(index)]
            assert int(label) == row["label"], index
            reference = numpy.asarray(Image.open(io.BytesIO(row["image"]["bytes"])).convert("RGB"))
            assert numpy.array_equal(pixels, reference), index
            seen.add(int(index))
    assert seen == set(range(50))


def test_the_file_datasets_wrote_keeps_its_class_names(bucket) -> None:
    _, server = bucket
    ds = loader_ml.Dataset("s3://hfds/hf-datasets.parquet", storage_options=server.options)
    assert ds.classes == ["cat", "dog", "fox"] and len(ds) == 40


def test_columns_by_name_and_a_missing_image(tmp_path: Path) -> None:
    path = tmp_path / "pets.parquet"
    images = [jpeg(i) for i in range(6)]
    images[4] = None
    pq.write_table(pa.table({
        "picture": pa.array(images, pa.binary()),
        "kind": pa.array(["dog", "cat", "dog", "cat", "cat", "dog"]),
    }), path, write_page_index=True)
    with pytest.raises(loader_ml.LoaderError, match="picture"):
        loader_ml.DataLoader(str(path), batch_size=2)
    loader = loader_ml.DataLoader(str(path), batch_size=6, image_column="picture",
                                  label_column="kind", output="numpy")
    assert loader.dataset.classes == ["cat", "dog"]
    with pytest.raises(loader_ml.LoaderError, match=r"row 4") as caught:
        next(iter(loader))
    assert "pets.parquet" in str(caught.value)
    skipping = loader_ml.DataLoader(str(path), batch_size=6, image_column="picture",
                                    label_column="kind", skip_errors=1, output="numpy")
    batch = next(iter(skipping))
    assert list(batch.indices) == [0, 1, 2, 3, 5]
    assert list(batch.labels) == [1, 0, 1, 0, 1]


@pytest.mark.parametrize("name", ["raw", "zstd"])
def test_mds_shards_by_their_index(name: str) -> None:
    want = json.loads((MDS / "expected.json").read_text())[name]
    loader = loader_ml.DataLoader(str(MDS / name / "index.json"), batch_size=7, shuffle=True,
                                  transform=[("CenterCrop", (12, 16))], output="numpy")
    assert len(loader.dataset) == len(want)
    seen = {}
    for batch in loader:
        assert batch.images.shape[1:] == (12, 16, 3)  # uint8 HWC: no ToTensor
        for index, label in zip(batch.indices, batch.labels):
            seen[int(index)] = int(label)
    assert seen == {i: row["label"] for i, row in enumerate(want)}


@pytest.mark.parametrize("name,label_column", [("raw", None), ("framed", "1"), ("whole", None)])
def test_litdata_chunks_by_their_index(name: str, label_column: str | None) -> None:
    want = json.loads((LITDATA / "expected.json").read_text())[name]
    options = {} if label_column is None else {"label_column": label_column}
    # Images of several sizes, as written: one per batch, uncropped.
    loader = loader_ml.DataLoader(str(LITDATA / name / "index.json"), batch_size=1, shuffle=True,
                                  output="numpy", **options)
    assert len(loader.dataset) == len(want)
    seen = {}
    for batch in loader:
        for index, label, image in zip(batch.indices, batch.labels, batch.images):
            seen[int(index)] = int(label)
            # litdata decodes with torchvision; the default decode equals it.
            assert int(image.astype(numpy.int64).sum()) % (1 << 32) == want[int(index)]["pixel_sum"]
    assert seen == {i: row["label"] for i, row in enumerate(want)}


def test_litdata_chunks_of_rows_without_images_are_refused() -> None:
    with pytest.raises(Exception) as caught:
        loader_ml.DataLoader(str(LITDATA / "arrow" / "index.json"), batch_size=4)
    assert "Arrow table" in str(caught.value) and "chunk-0-0.bin" in str(caught.value)


def test_a_parquet_pack_is_read_by_pyarrow_as_datasets_reads_it(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i in range(12):
        cls = src / f"class{i % 3}"
        cls.mkdir(parents=True, exist_ok=True)
        (cls / f"{i:03d}.jpg").write_bytes(jpeg(i))
    dst = tmp_path / "packed"
    subprocess.run([str(binary("loader")), "pack", str(src), str(dst), "--format", "parquet",
                    "--shard-size", "8KiB"], check=True, capture_output=True)
    files = sorted(dst.glob("*.parquet"))
    assert len(files) > 1
    table = pa.concat_tables([pq.read_table(f) for f in files])
    # The folder's samples in its order (classes, then files, sorted): row by row.
    want = sorted(src.rglob("*.jpg"))
    assert table.num_rows == len(want) == 12
    for row, (image, label) in enumerate(zip(table.column("image").to_pylist(),
                                             table.column("label").to_pylist())):
        assert image["path"] == f"{row:09d}.jpg"
        assert image["bytes"] == want[row].read_bytes(), row
        assert f"class{label}" == want[row].parent.name, row
    # What datasets reads its features from.
    meta = json.loads(pq.ParquetFile(files[0]).schema_arrow.metadata[b"huggingface"])
    features = meta["info"]["features"]
    assert features["image"] == {"_type": "Image"}
    assert features["label"] == {"names": ["class0", "class1", "class2"], "_type": "ClassLabel"}
    # And the package reads the pack back: the same classes, every sample once.
    packed = loader_ml.Dataset(str(dst))
    assert packed.classes == ["class0", "class1", "class2"] and len(packed) == 12


def test_images_stored_as_paths_beside_the_file_are_read(tmp_path: Path) -> None:
    # The Rust tests' fixture: datasets' to_parquet of a dataset built from image files.
    shutil.copytree(FIXTURES / "paths", tmp_path / "paths")
    ds = loader_ml.Dataset(str(tmp_path / "paths" / "hf-paths.parquet"))
    assert ds.classes == ["cat", "dog", "fox"] and len(ds) == 40
    # Images of several sizes: one per batch, uncropped; pixels as PIL decodes the file.
    loader = loader_ml.DataLoader(str(tmp_path / "paths" / "hf-paths.parquet"), batch_size=1,
                                  shuffle=True, output="numpy")
    labels = {}
    for batch in loader:
        for index, label, pixels in zip(batch.indices, batch.labels, batch.images):
            labels[int(index)] = int(label)
            path = tmp_path / "paths" / "images" / f"img{int(index):03d}.jpg"
            reference = numpy.asarray(Image.open(path).convert("RGB"))
            assert numpy.array_equal(pixels, reference), index
    assert labels == {i: i % 3 for i in range(40)}
