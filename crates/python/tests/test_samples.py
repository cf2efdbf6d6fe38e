"""Samples of any kind (issue 27): WebDataset shards written by webdataset's own
ShardWriter with image, array, JSON, text and class members, read with ``fields=`` and
checked against webdataset's own reader; manifests of arrays; the refusals."""

from __future__ import annotations

import functools
import io
import json
import pickle
from pathlib import Path

import numpy
import pytest
import torch
import webdataset as wds
from PIL import Image

import loader_ml
from conftest import image

SAMPLES = 10


def png(index: int) -> bytes:
    rng = numpy.random.default_rng(index)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (12, 16, 3), numpy.uint8)).save(out, format="PNG")
    return out.getvalue()


def write_shards(folder: Path, ragged: bool = False) -> str:
    """Two shards by webdataset's ShardWriter: png, npy, json, txt, cls (and a second image
    member, seg.png); returns their brace URL."""
    folder.mkdir(parents=True, exist_ok=True)
    pattern = str(folder / "part-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=SAMPLES // 2, verbose=0) as sink:
        for i in range(SAMPLES):
            shape = (2 + i % 3, 4) if ragged else (3, 4)
            sink.write({
                "__key__": f"s{i:04d}",
                "png": png(i),
                "seg.png": png(100 + i),
                "npy": numpy.arange(numpy.prod(shape), dtype=numpy.float32).reshape(shape) + i,
                "json": {"index": i, "tags": ["a"] * (i % 3)},
                "txt": f"caption {i}",
                "cls": i % 4,
            })
    return str(folder / "part-{000000..000001}.tar")


def reference(url: str, *fields: str) -> dict[str, tuple]:
    """What webdataset's own reader makes of the shards, by key."""
    dataset = wds.WebDataset(url, shardshuffle=False).decode("rgb8").to_tuple("__key__", *fields)
    return {sample[0]: sample[1:] for sample in dataset}


def test_members_of_any_kind_match_webdatasets_own_reader(tmp_path: Path) -> None:
    url = write_shards(tmp_path / "shards")
    want = reference(url, "png", "npy", "json", "txt", "cls")
    loader = loader_ml.DataLoader(url, batch_size=4, fields=("png", "npy", "json", "txt", "cls"),
                                  output="torch")
    seen = {}
    for batch in loader:
        images, arrays, metas, texts, labels = batch
        assert images.dtype == torch.uint8 and images.shape[1:] == (12, 16, 3)
        assert arrays.dtype == torch.float32 and arrays.shape[1:] == (3, 4)  # stacked
        assert labels.dtype == torch.int64 and batch.labels is labels
        assert isinstance(metas, list) and isinstance(texts, list)
        assert batch.field("json") is metas and batch._fields == ("png", "npy", "json", "txt", "cls")
        for i, key in enumerate(batch.keys):
            seen[key] = (images[i].numpy(), arrays[i].numpy(), metas[i], texts[i], int(labels[i]))
    assert sorted(seen) == sorted(want), "every sample once"
    for key, (image, array, meta, text, label) in seen.items():
        w_image, w_array, w_meta, w_text, w_label = want[key]
        numpy.testing.assert_array_equal(image, w_image)
        numpy.testing.assert_array_equal(array, w_array)
        assert (meta, text, label) == (w_meta, w_text, w_label)


def test_samples_without_an_image_and_ragged_arrays(tmp_path: Path) -> None:
    url = write_shards(tmp_path / "shards", ragged=True)
    want = reference(url, "npy", "json")
    loader = loader_ml.DataLoader(url, batch_size=3, shuffle=True, seed=3, fields=("npy", "json"),
                                  output="numpy")
    seen = {}
    for batch in loader:
        arrays, metas = batch
        shapes = {want[key][0].shape for key in batch.keys}
        # Ragged arrays stay a list; arrays of one shape are stacked.
        assert isinstance(arrays, list) == (len(shapes) > 1), shapes
        for key, array, meta in zip(batch.keys, arrays, metas):
            seen[key] = (array, meta)
    assert sorted(seen) == sorted(want)
    for key, (array, meta) in seen.items():
        numpy.testing.assert_array_equal(array, want[key][0])
        assert meta == want[key][1]


def test_decode_by_suffix_with_names_and_functions(tmp_path: Path) -> None:
    url = write_shards(tmp_path / "shards")
    loader = loader_ml.DataLoader(
        url, batch_size=SAMPLES, output="torch", transform=[("Resize", 6), "ToTensor"],
        fields=("png", "seg.png", "txt", "json"),
        decode={"seg.png": "l8", "txt": "bytes", "json": lambda b: len(b)})
    images, masks, texts, sizes = next(iter(loader))
    assert images.shape == (SAMPLES, 3, 6, 8) and images.dtype == torch.float32
    assert masks.shape == (SAMPLES, 12, 16) and masks.dtype == torch.uint8
    first = numpy.asarray(Image.open(io.BytesIO(png(100))).convert("L"))
    numpy.testing.assert_array_equal(masks[0].numpy(), first)
    assert texts[0] == b"caption 0" and sizes.dtype == torch.int64


def test_a_manifest_of_arrays_with_labels(tmp_path: Path) -> None:
    folder = tmp_path / "arrays"
    folder.mkdir()
    lines = ["key,label"]
    for i in range(6):
        out = io.BytesIO()
        numpy.save(out, numpy.full((2, 2), i, numpy.int16))
        (folder / f"a{i}.npy").write_bytes(out.getvalue())
        lines.append(f"a{i}.npy,{i % 2}")
    (folder / "train.csv").write_text("\n".join(lines) + "\n")
    loader = loader_ml.DataLoader(str(folder), manifest="train.csv", batch_size=6,
                                  fields=("npy", "cls"), output="numpy")
    arrays, labels = next(iter(loader))
    assert arrays.dtype == numpy.int16 and arrays.shape == (6, 2, 2)
    assert [int(a[0, 0]) for a in arrays] == list(range(6))
    assert labels.tolist() == [i % 2 for i in range(6)]
    # A manifest of keys alone: samples without labels.
    (folder / "unlabelled.csv").write_text("key\n" + "".join(f"a{i}.npy\n" for i in range(6)))
    loader = loader_ml.DataLoader(str(folder), manifest="unlabelled.csv", batch_size=6,
                                  fields="npy", output="numpy")
    (arrays,) = next(iter(loader))
    assert arrays.shape == (6, 2, 2) and loader.dataset[0] == ("a0.npy", -1)
    # Asking it for labels it does not have is refused, not answered with -1s.
    for fields in (None, ("npy", "cls")):
        with pytest.raises(loader_ml.ConfigError, match="gives no labels"):
            loader_ml.DataLoader(str(folder), manifest="unlabelled.csv", fields=fields)


def test_field_batches_move_pickle_and_map_as_tuples(tmp_path: Path) -> None:
    url = write_shards(tmp_path / "shards")
    loader = loader_ml.DataLoader(url, batch_size=4, fields=("npy", "json", "cls"))
    batch = next(iter(loader))
    moved = batch.to("cpu")
    assert moved.keys == batch.keys and moved._fields == batch._fields
    assert moved[1] == batch[1], "lists of other values are kept"
    again = pickle.loads(pickle.dumps(batch))
    assert again._fields == batch._fields and again.keys == batch.keys
    from torch.utils import _pytree

    doubled = _pytree.tree_map(lambda x: x * 2 if isinstance(x, torch.Tensor) else x, batch)
    assert isinstance(doubled, loader_ml.Batch) and doubled.keys == batch.keys
    torch.testing.assert_close(doubled[0], batch[0] * 2)


def test_a_field_loader_resumes_exactly(tmp_path: Path) -> None:
    url = write_shards(tmp_path / "shards")
    settings = dict(batch_size=3, shuffle=True, seed=5, fields=("json", "cls"))
    whole = [k for batch in loader_ml.DataLoader(url, **settings) for k in batch.keys]
    first = loader_ml.DataLoader(url, **settings)
    it = iter(first)
    head = [k for _ in range(2) for k in next(it).keys]
    state = first.state_dict()
    resumed = loader_ml.DataLoader(url, **settings)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    rest = [k for batch in resumed for k in batch.keys]
    assert head + rest == whole


def test_what_cannot_be_honoured_is_refused(tmp_path: Path) -> None:
    url = write_shards(tmp_path / "shards")
    with pytest.raises(loader_ml.ConfigError, match="transform= runs on images"):
        loader_ml.DataLoader(url, fields=("npy", "cls"), transform="imagenet_eval")
    with pytest.raises(loader_ml.ConfigError, match="give fields= too"):
        loader_ml.DataLoader(url, decode={"json": "txt"})
    with pytest.raises(loader_ml.ConfigError, match="alternatives decode differently"):
        loader_ml.DataLoader(url, fields=("png", "json;txt"))
    with pytest.raises(loader_ml.ConfigError, match="first field's image only"):
        loader_ml.DataLoader(url, fields=("png", "seg.png"), transform="imagenet_eval")
    with pytest.raises(loader_ml.ConfigError, match="decode\\['json'\\] = 'yaml'"):
        loader_ml.DataLoader(url, fields=("json",), decode={"json": "yaml"})
    # A sample without a field: named when the shards are indexed, not dropped.
    with pytest.raises(loader_ml.LoaderError, match="no .flac member; it has"):
        loader_ml.DataLoader(url, fields=("png", "flac"))
    # A member its decoder cannot read: the sample and the field are named.
    loader = loader_ml.DataLoader(url, batch_size=2, fields=("txt",), decode={"txt": "int"})
    with pytest.raises(loader_ml.DecodeError, match="its .txt member could not be decoded by int"):
        next(iter(loader))
    with pytest.raises(loader_ml.ConfigError, match="the object and its label"):
        loader_ml.DataLoader(_folder_of_images(tmp_path), fields=("jpg", "json"))


def _folder_of_images(tmp_path: Path) -> str:
    folder = tmp_path / "folder" / "a"
    folder.mkdir(parents=True)
    Image.fromarray(numpy.zeros((4, 4, 3), numpy.uint8)).save(folder / "1.jpg")
    return str(folder.parent)


def test_a_batch_decode_cannot_read_stays_undelivered_in_the_state(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    with wds.TarWriter(str(folder / "r-0.tar")) as sink:
        for i in range(8):
            sink.write({"__key__": f"k{i}", "cls": i,
                        "json": b"{bad" if i == 5 else json.dumps({"i": i}).encode()})
    url = str(folder / "r-0.tar")
    loader = loader_ml.DataLoader(url, batch_size=4, fields=("json", "cls"))
    it = iter(loader)
    assert next(it).keys == ["k0", "k1", "k2", "k3"]
    with pytest.raises(loader_ml.DecodeError, match="'k5': its .json member"):
        next(it)
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (0, 4), "the failed batch is not delivered"
    # Read again after a resume, with a decoder that copes: nothing of it was lost.
    tolerant = loader_ml.DataLoader(url, batch_size=4, fields=("json", "cls"),
                                    decode={"json": lambda b: b.decode()})
    tolerant.load_state_dict(state)
    assert [k for batch in tolerant for k in batch.keys] == ["k4", "k5", "k6", "k7"]
    # Decoded on the decode threads, a member is a sample that fails as a bad image does:
    # under skip_errors it is skipped and reported.
    # Batching in Python fails after the loader moved on: the batch is rewound too.
    huge = loader_ml.DataLoader(url, batch_size=4, fields=("json", "cls"),
                                decode={"json": lambda b: 2**70 if b == b"{bad" else 1})
    it = iter(huge)
    next(it)
    with pytest.raises(loader_ml.DecodeError, match="could not be batched"):
        next(it)
    assert (huge.state_dict()["epoch"], huge.state_dict()["position"]) == (0, 4)
    skipping = loader_ml.DataLoader(url, batch_size=4, fields=("json", "cls"), skip_errors=2)
    batches = list(skipping)
    assert [k for batch in batches for k in batch.keys] == ["k0", "k1", "k2", "k3", "k4",
                                                            "k6", "k7"]
    (report,) = batches[1].skipped
    assert "k5" in str(report) and "json" in str(report)


def test_webdataset_spellings_dtypes_and_moves(tmp_path: Path) -> None:
    url = write_shards(tmp_path / "shards", ragged=True)
    # One string of space-separated fields, as to_tuple("png cls").
    images, labels = next(iter(loader_ml.DataLoader(url, batch_size=2, fields="png cls")))
    assert images.shape == (2, 12, 16, 3) and labels.dtype == torch.int64
    loader = loader_ml.DataLoader(
        url, batch_size=4, fields=("npy", "json"),
        decode={"json": lambda b: numpy.float32(json.loads(b)["index"])})
    batch = next(iter(loader))
    arrays, scalars = batch
    assert scalars.dtype == torch.float32, "numpy scalars keep their dtype, as torch's collate"
    assert isinstance(arrays, list) and all(isinstance(a, torch.Tensor) for a in arrays)
    moved = batch.to(torch.float64)
    assert all(a.dtype == torch.float64 for a in moved[0]), "tensors in lists move too"


def test_fields_a_dataset_does_not_hold_are_refused_when_made(tmp_path: Path) -> None:
    url = write_shards(tmp_path / "shards")
    with pytest.raises(loader_ml.ConfigError, match="batch.keys"):
        loader_ml.DataLoader(url, fields=("__key__", "png"))
    with pytest.raises(loader_ml.ConfigError, match="alternatives decode differently"):
        loader_ml.DataLoader(url, fields=("cls", "json;txt"),
                             decode={"json": functools.partial(len)})
    folder = tmp_path / "folder" / "a"
    folder.mkdir(parents=True)
    Image.fromarray(numpy.zeros((4, 4, 3), numpy.uint8)).save(folder / "1.png")
    with pytest.raises(loader_ml.ConfigError, match=r"end in .jpg, but 1 do not \(.png: 1\)"):
        loader_ml.DataLoader(str(folder.parent), fields=("jpg", "cls"))
    loader = loader_ml.DataLoader(str(folder.parent), fields=("jpg;png", "cls"), output="numpy")
    assert next(iter(loader))[0].shape == (1, 4, 4, 3)


def test_multi_label_and_values_manifests_batch_as_torch_collates_them(
        tmp_path: Path) -> None:
    """Labels that are not classes: multi-hot rows for several classes per sample (ready
    for BCEWithLogitsLoss), float rows for numbers, each the sample's own, as torch's
    default_collate stacks the per-sample tensors a map-style Dataset would return."""
    import csv

    folder = tmp_path / "photos"
    folder.mkdir()
    names = ["cat", "dog", "person", "tree"]
    sets = [[(i + k) % 4 for k in range(1 + i % 3)] for i in range(10)]
    for i in range(10):
        image(i % 4, i).save(folder / f"p{i}.png")
    with open(folder / "multi.csv", "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["path", "label"])
        for i, classes in enumerate(sets):
            writer.writerow([f"p{i}.png", " ".join(names[c] for c in classes)])
    targets = [[i / 4, 1.0 - i, float(i % 2)] for i in range(10)]
    with open(folder / "values.jsonl", "w") as out:
        for i, target in enumerate(targets):
            out.write(json.dumps({"key": f"p{i}.png", "label": target}) + "\n")

    def reference(kind: str, index: int) -> torch.Tensor:
        if kind == "multi":
            hot = torch.nn.functional.one_hot(torch.tensor(sets[index]), len(names))
            return hot.sum(0).clamp(max=1).float()
        return torch.tensor(targets[index], dtype=torch.float32)

    steps = [("Resize", 8), ("CenterCrop", 8), "ToTensor"]
    for kind, manifest in (("multi", "multi.csv"), ("values", "values.jsonl")):
        loader = loader_ml.DataLoader(str(folder), manifest=manifest, labels=kind,
                                      batch_size=4, shuffle=True, seed=1, transform=steps)
        assert loader.dataset.label_kind == kind
        if kind == "multi":
            assert loader.dataset.classes == names  # sorted names, as for classes
        seen = []
        loader = pickle.loads(pickle.dumps(loader))  # its settings keep the label kind
        for batch in loader:
            _, labels = batch
            expected = torch.utils.data.default_collate(
                [reference(kind, int(key[1:-4])) for key in batch.keys])
            assert labels.dtype == torch.float32 and labels.shape == expected.shape
            torch.testing.assert_close(labels, expected, rtol=0, atol=0)
            seen += batch.keys
            if kind == "multi":
                loss = torch.nn.BCEWithLogitsLoss()(torch.zeros_like(labels), labels)
                assert torch.isfinite(loss)
        assert sorted(seen) == sorted(f"p{i}.png" for i in range(10))
    # A validation manifest read against the training classes keeps their columns.
    (folder / "val.csv").write_text("key,label\np0.png,tree\n")
    val = loader_ml.Dataset(str(folder), manifest="val.csv", labels="multi", classes=names)
    assert val[0] == ("p0.png", [3]) and val.classes == names
    (folder / "odd.csv").write_text("key,label\np0.png,bird\n")
    with pytest.raises(loader_ml.ConfigError, match='line 2: unknown label "bird"'):
        loader_ml.Dataset(str(folder), manifest="odd.csv", labels="multi", classes=names)
    # The kind is said, never guessed; lists under class labels say which kind reads them.
    (folder / "lists.jsonl").write_text('{"key": "p0.png", "label": [0, 2]}\n')
    with pytest.raises(loader_ml.ConfigError, match='labels="multi"'):
        loader_ml.Dataset(str(folder), manifest="lists.jsonl")
    with pytest.raises(loader_ml.ConfigError, match="holds ';'.*labels=\"multi\""):
        (folder / "joined.csv").write_text("key,label\np0.png,cat;dog\n")
        loader_ml.Dataset(str(folder), manifest="joined.csv")
    with pytest.raises(loader_ml.ConfigError, match="give manifest= too"):
        loader_ml.Dataset(str(folder), labels="multi")
    with pytest.raises(loader_ml.ConfigError, match='"class".*"multi".*"values"'):
        loader_ml.Dataset(str(folder), manifest="multi.csv", labels="floats")
