"""The DataLoader: PyTorch's names, batches as tensors that share the loader's memory."""

from __future__ import annotations

import atexit
import functools
import json
import os
import warnings
import weakref
from typing import Any, Callable, Iterator, Literal, Sequence, Union

import numpy

from . import _native, arguments
from . import fields as sample_fields
from ._native import Dataset
from .errors import ConfigError

from .batch import Batch, TokenBatch, _register_pytree
from .options import _CONVERT, _OPTIONS, _option_text, _same
from .transforms import PythonTail

__all__ = ["Batch", "DataLoader", "TokenBatch"]

#: A transform: a built-in name, torchvision-named steps, or a callable on one image.
Transform = Union[
    None,
    Literal["imagenet_eval", "imagenet_train"],
    Sequence[Any],
    Callable[[numpy.ndarray], Any],
]


def _rebuild(settings: dict[str, Any], state: dict[str, Any] | None) -> DataLoader:
    """A pickled loader, made again from its settings and resumed where it stood."""
    loader = DataLoader(**settings)
    if state is not None:
        loader.load_state_dict(state)
    return loader


#: Loaders not yet closed, closed at interpreter exit (before finalization, while their
#: threads can still finish a call into Python).
_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()


def _pinned_block(torch: Any) -> Any:
    """What lends a batch its memory under ``pin_memory=True``: a block of torch's pinned
    allocator, which the native collate fills and the batch then views (torch's caching
    host allocator reuses it once the last view is gone and the copies that read it are
    done, as it does for torch's own ``pin_memory``). A C function, not a Python one: it is
    called while the loader's lock is held, where a signal handler (a checkpoint on SIGTERM)
    must not run; ``device="cpu"`` so ``torch.set_default_device("cuda")`` does not move it."""
    return functools.partial(torch.empty, dtype=torch.uint8, device="cpu", pin_memory=True)


def _pinned(value: Any) -> Any:
    """A tensor in pinned memory: itself when it already is (a lent batch), else a copy, as
    torch's DataLoader pins each tensor of a batch."""
    if not hasattr(value, "pin_memory") or value.is_pinned():
        return value
    return value.pin_memory()


@atexit.register
def _close_live_loaders() -> None:
    _native._shutting_down()
    for loader in list(_LIVE):
        try:
            loader.close()
        except Exception:  # exiting: nothing to report it to
            pass


class DataLoader:
    """Batches of a dataset at a URL, with PyTorch's names.

    Args:
        dataset: a URL (``s3://bucket/prefix``, ``http(s)://...``, ``file:///dir`` or a
            path: an ImageFolder, a prefix of WebDataset ``.tar`` shards, or shards as
            ``s3://bucket/train-{000000..000127}.tar``) or a :class:`Dataset`; or a list of
            them, a mixture read by ``weights``.
        weights: each dataset's share of a mixture's reads (default: equal). The order is
            a fixed interleave: every prefix of the run's order holds each dataset within
            one sample of its share. Ratios of small whole numbers are read exactly (0.7 and
            0.3 are 7:3); others to 2^-20.
        stop: when a mixture's epoch ends: ``"first_exhausted"`` (the default: when the
            first dataset has been read whole; no sample twice), ``"all_exhausted"`` (when
            every one has; smaller ones start a new permutation meanwhile),
            ``"all_exhausted_without_replacement"`` (each sample once: a dataset read whole
            leaves, the others go on by their weights), a number of samples per epoch (the
            datasets' reads carry on from epoch to epoch) or ``"cycle_forever"`` (one
            endless epoch; ``len()`` raises ``TypeError``).
        batching: ``"mixed"`` (datasets interleaved sample by sample) or ``"per_stream"``
            (each global batch from one dataset, the batches interleaved by weight; a batch
            in which a dataset runs out under ``all_exhausted_without_replacement`` goes on
            with the next; a resume with another global batch size starts a new segment).
        weigh_by: what ``weights`` share out: ``"samples"`` (the default; for token
            datasets, blocks, so tokens) or ``"documents"`` (token datasets: the documents
            read from each dataset follow the weights).
        new_segment: resume a ``state_dict`` saved under other weights or datasets by
            starting a new segment at its position: each dataset in both continues where it
            stood (nothing lost or repeated), a new one starts at its first sample. Without
            it such a state is refused, naming what changed.
        lanes: pieces the shard order is dealt into (default: 16 and the starting world
            size's least common multiple, chosen when a run starts and kept in its
            ``state_dict``, so a resume on another world size keeps them): a world size that
            divides them gives each rank lanes of its own, so each shard chunk is read by one
            rank. Give a number that every world size of the run divides when it will change
            (e.g. 48 for 3, 6, 12, 24 or 48 ranks); lanes given are part of the order.
        batch_size: samples per batch.
        shuffle: a new order every epoch (for shards: shards shuffled, samples shuffled
            within a buffer, few large GETs; see ``shard_order``).
        seed: the seed of the orders and the random transforms; resumes are exact for it.
        drop_last: drop the last, short batch of an epoch.
        transform: ``"imagenet_eval"`` or ``"imagenet_train"`` (float32 ``[3, 224, 224]``),
            torchvision-named steps (``[("Resize", 256), ("CenterCrop", 224), "ToTensor",
            ("Normalize", mean, std)]``, or torchvision's own transform objects, or their
            ``Compose``), run natively: crops and resizes (bilinear or bicubic), flips,
            ``ColorJitter``, ``RandAugment``, ``TrivialAugmentWide``, ``GaussianBlur``,
            ``RandomRotation``, ``RandomAffine``, ``ToTensor``/``ToImage``/``ToDtype``,
            ``Normalize`` and ``RandomErasing``, with Pillow's pixels. From the first
            transform that is not native (or a setting that is not) on, the rest runs in
            torchvision on the decode threads, on the natively cropped PIL image
            (``python_tail`` says which). Or a callable taking a uint8 HWC numpy array and
            returning an array (HWC or CHW; uint8 stays, floats become float32), run on the
            decode threads under the GIL; or ``None`` for uint8 ``[H, W, C]`` images.
        num_workers: decode threads (default: the cores of this process shared by the
            ranks of its node as the launcher says; 0 means one). Threads,
            not processes: nothing is pickled or copied between them.
        max_in_flight: storage requests in flight, fixed (default: set by the loader
            itself from the latency and rates it measures, up to 16,384).
        prefetch_factor: finished batches kept ready (default 2).
        storage_options: the store's settings, e.g. ``{"aws_endpoint": ...,
            "aws_region": ...}`` (otherwise the usual environment variables).
        manifest: a CSV (``key,label``) or JSON-lines key under the URL listing the samples,
            instead of listing the store; without labels (a ``key`` column alone) every
            label is -1.
        labels: how the manifest's labels are read, said rather than guessed (integer
            regression targets would otherwise read as classes): ``"class"`` (default; an
            index or a name, int64 ``[N]``), ``"multi"`` (several classes per sample: a
            JSON list of indices or names, or in CSV separated by spaces, ``;`` or ``|``;
            multi-hot float32 ``[N, classes]``, ready for ``BCEWithLogitsLoss``) or
            ``"values"`` (numbers: one per sample, float32 ``[N]``, or a list of one
            length, ``[N, K]``).
        classes: the classes the manifest's labels must be among, in index order (e.g.
            ``train_loader.dataset.classes`` for a validation manifest, so indices and
            multi-hot columns agree); a label outside them is an error naming its line.
        image_column, label_column: for Parquet files (Hugging Face's layout among
            others), MDS shards and LitData chunks (a URL ending in ``index.json``), the
            columns of the images (binary, or a struct of ``bytes`` and ``path``; MDS
            ``jpeg``, ``png`` or ``bytes``; LitData ``jpeg``, ``bytes`` or ``image:...``,
            a tuple's leaves named ``"0"``, ``"1"``, ...; default the first of ``image``, ``img``, ``jpg``, ``jpeg``, ``png``,
            ``webp``) and of the labels (integers, with ``ClassLabel`` names when
            ``datasets`` wrote the file, or class-name strings in Parquet; default
            ``label`` or ``cls`` when present, ``""`` for none).
        member_columns: for Parquet files, other columns handed with each sample as its
            members, by name: to a Rust stage; refused here until Python receives them.
        format: the datasets' format by name (``"imagefolder"``, ``"manifest"``,
            ``"webdataset"``, ``"parquet"``, ``"mds"``, ``"litdata"``, ``"megatron"``);
            default: found from the URL and what it holds, an ambiguous one refused naming
            this setting.
        block_size: for token datasets (Megatron-LM ``.idx``/``.bin`` pairs, LitData
            ``TokensLoader`` chunks, MDS shards of token arrays, Parquet token lists), the
            tokens a row trains on: each sample is a block of ``block_size + 1`` tokens of one file
            (the last shared with the next block, for the shifted labels), documents packed
            back to back, a long one going on into the next block. Batches are then
            ``TokenBatch`` dicts of ``[B, block_size]`` int64 ``input_ids``, ``labels``,
            ``position_ids`` (restarting with each document), ``document_ids``, and int32
            ``cu_seqlens`` with ``max_seqlen`` for flash-attention's varlen kernels.
        keep_tail: keep each token file's last tokens, fewer than a block, as a row padded
            with 0 (labels -100); default: dropped, as Megatron-LM and LitData do.
        vocab_size: refuse token ids at or past this (a wrong id type or a damaged file),
            naming the file; default: unchecked but for negative ids.
        token_column: an MDS or Parquet token dataset's column of ids: MDS
            ``ndarray:<integer type>`` (llm-foundry writes ``tokens`` as ``ndarray:int32``),
            a Parquet list of integers (``datasets`` writes ``input_ids``); default:
            ``tokens`` or ``input_ids``.
        mask_boundaries: in token rows, a document's last token is not trained to predict
            the next document's first: its label is -100.
        end_of_document: the id that ends a document, for corpora whose documents are
            stored run together (pre-packed rows, ``group_texts`` blocks, LitData items of
            several documents): a document also starts after each, for ``position_ids``,
            ``cu_seqlens`` and ``mask_boundaries``; ``document_ids`` then number each row's
            documents from 0. Default: only the format's own boundaries.
        rank, world_size: this process's share of every global batch (default: from
            torch.distributed's process group when it is initialised, else the launcher's
            variables: torchrun's, SLURM's or MPI's). Global batch ``b`` is positions ``K + b*G`` to
            ``K + (b+1)*G`` of the epoch's order (``G = world_size * batch_size``, ``K``
            where the run started) and each rank takes ``batch_size`` of them, as
            ``DistributedSampler`` gives rank ``r`` the indices ``r, r + W, ...``; the order
            does not depend on the world size (shards' lanes and windows, chosen when a run
            starts, are kept in its state), so a ``state_dict`` resumes on any other.
            An epoch's last global batch is shared out evenly (batches differ by one
            sample at most; a rank left without a sample repeats one, ``batch.padding``).
            A loader made before ``init_process_group`` whose process group then disagrees
            refuses to iterate.
        skip_errors: skip up to this many failing samples per epoch (reported in
            ``batch.skipped``) instead of raising at the first. A batch whose every sample
            failed is not delivered (its reports ride with the next batch, or a
            ``RuntimeWarning`` at the end of the epoch), so no batch is ever empty. A
            ``KeyboardInterrupt`` or ``SystemExit`` from a transform is never skipped: it
            stops the loader and is raised as it is.
        shard_order: ``"local"`` or ``"global"`` for shuffled shards.
        shuffle_buffer: samples shuffled together in each lane of the ``"local"`` shard
            order (default: 4 chunks' worth, or more when a rank of the starting world size
            reads fewer than 2 lanes; chosen when a run starts and kept in its state).
        cache_dir: cache what is read in this directory, so later epochs and runs read
            local disk. The ranks of a node share one directory within one budget, which
            keeps what the node reads next (its ranks as the launcher says); ``cache_stats()`` reports the node's totals.
        cache_size: the cache directory's budget in bytes (default 16 GiB).
        cache_memory: the cache's memory tier in bytes (default 256 MiB).
        cache_policy: what the cache evicts: ``"future"`` (what is read last or never in
            the epochs ahead; the default), ``"lru"`` or ``"pin-once"``.
        epochs: epochs to read at most (the loader does not prefetch past the last).
        request_timeout: seconds one attempt of one request may take (default 30).
        max_retries: retries of a failed request (default 9, with backoff, within 2 min).
        subset: read only the dataset indices ``range(start, stop)`` (a split).
        order: ``"sampler"`` (exact, resumable) or ``"as_completed"`` (no head-of-line
            blocking behind a slow request, but no state to resume from).
        hedge: send a request again when ``"stalls"`` (unanswered after many times the
            recent p99; the default), also when slow (``"tail"``), or never (``"off"``).
        max_buffered_bytes, max_decoded_bytes: bounds on fetched-undecoded and on decoded
            bytes held (default 1 GiB each).
        coalesce_gap, max_coalesced_bytes: ranged samples of one object closer than
            ``coalesce_gap`` bytes are read in one request of at most
            ``max_coalesced_bytes`` (default 256 KiB and 16 MiB).
        cache_block: the unit of ranged reads in the cache, in bytes.
        cache_node_ranks, cache_local_rank: the ranks of this node that share
            ``cache_dir``, and this one's place among them; the cache keeps by all their
            reads (default: the launcher's local ranks, torchrun's, SLURM's or MPI's;
            else this rank alone).
        output: ``"torch"``, ``"numpy"`` or ``"auto"`` (torch tensors when torch imports).
        draft: let JPEGs decode at 1/2, 1/4 or 1/8 scale in the DCT domain (Pillow's
            ``Image.draft``) when the transform's first step is a ``Resize`` or
            ``RandomResizedCrop`` that keeps at most half of that scale: several times less
            decode work on photos of a few megapixels, pixels within about 1 level (mean)
            of torchvision's instead of exact. Off by default; needs a native transform.
        pin_memory: hand each batch over in page-locked memory, so ``.cuda(non_blocking=
            True)`` overlaps with compute. Images are collated straight into blocks of
            torch's pinned allocator (no second copy, as torch's DataLoader makes; the
            allocator reuses freed blocks); labels and the fields batched in Python
            are copied there. Without CUDA it warns once and batches stay in the loader's
            memory.
        fields: what a sample is, as WebDataset's ``to_tuple`` names it: member suffixes
            in order, alternatives split by ``;`` (``("jpg;png", "json")``,
            ``("npy", "txt")``, ``("flac", "json")``). Batches are tuples of these fields.
            The first field's member is read as the sample's main part: an image there is
            decoded natively and ``transform`` runs on it; any other field is decoded by
            ``decode`` on the decode threads (under the GIL, as a callable transform), so a
            member it cannot read fails its sample as a bad image does (``DecodeError``
            naming it, or skipped under ``skip_errors``). Values batch as torch's default
            collate
            batches them (ints as int64, floats as float64, numpy values and arrays of
            one shape stacked in their dtype); everything else (text, dicts, ragged
            arrays) is a list. One string is split at spaces, as ``to_tuple("jpg cls")``.
            A sample lacking a
            field is an error naming it when the shards are indexed. A dataset of one
            object per sample (a folder of images, a manifest of any objects) has the
            object and its label, ``("npy", "cls")``; its objects must end in the first
            field's suffixes. Default: ``(images, labels)``.
        decode: how each member suffix of ``fields`` is decoded, overriding the defaults
            (WebDataset's): a name (``"int"``, ``"txt"``, ``"json"``, ``"npy"``,
            ``"bytes"``, ``"rgb8"``, ``"l8"``, ``"pil"``) or a function of the bytes, e.g.
            ``{"flac": lambda b: soundfile.read(io.BytesIO(b))}``. By default images
            other than the first field's are ``rgb8``, ``.cls``-like suffixes ``int``,
            ``.txt`` text, ``.json`` JSON, ``.npy`` arrays (no pickles), the rest bytes. A
            loader that is pickled (``spawn``, ``as_iterable_dataset``) needs functions
            pickle can name (module-level ``def``, not a lambda).

    Each ``iter()`` reads one epoch, as torch's DataLoader: iterating again reads the next
    one, also after a ``break`` or a loop that stopped after ``len(loader)`` batches; after
    ``load_state_dict()`` the next ``iter()`` continues the saved epoch, exactly.
    """

    def __init__(
        self,
        dataset: str | Dataset | Sequence[str | Dataset],
        batch_size: int = 1,
        shuffle: bool = False,
        *,
        weights: Sequence[float] | None = None,
        stop: str | int = "first_exhausted",
        batching: Literal["mixed", "per_stream"] = "mixed",
        new_segment: bool = False,
        weigh_by: str | None = None,
        lanes: int | None = None,
        seed: int = 0,
        drop_last: bool = False,
        transform: Transform = None,
        num_workers: int | None = None,
        max_in_flight: int | None = None,
        prefetch_factor: int | None = None,
        storage_options: dict[str, str] | None = None,
        manifest: str | None = None,
        labels: Literal["class", "multi", "values"] | None = None,
        classes: Sequence[str] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        skip_errors: int | None = None,
        shard_order: Literal["local", "global"] = "local",
        shuffle_buffer: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_size: int | None = None,
        cache_memory: int | None = None,
        cache_policy: Literal["future", "lru", "pin-once"] = "future",
        epochs: int | None = None,
        request_timeout: float | None = None,
        max_retries: int | None = None,
        subset: range | tuple[int, int] | None = None,
        order: Literal["sampler", "as_completed"] = "sampler",
        hedge: Literal["stalls", "tail", "off"] = "stalls",
        max_buffered_bytes: int | None = None,
        max_decoded_bytes: int | None = None,
        coalesce_gap: int | None = None,
        max_coalesced_bytes: int | None = None,
        cache_block: int | None = None,
        cache_node_ranks: int | None = None,
        cache_local_rank: int | None = None,
        output: Literal["auto", "torch", "numpy"] = "auto",
        draft: bool = False,
        pin_memory: bool = False,
        fields: str | Sequence[str] | None = None,
        decode: dict[str, sample_fields.Decoder] | None = None,
        image_column: str | None = None,
        label_column: str | None = None,
        member_columns: Sequence[str] | None = None,
        format: str | None = None,
        block_size: int | None = None,
        keep_tail: bool = False,
        vocab_size: int | None = None,
        token_column: str | None = None,
        mask_boundaries: bool = False,
        end_of_document: int | None = None,
    ) -> None:
        # What a pickle of this loader rebuilds it from (spawned workers and ranks).
        self._settings = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        given = {k: v for k, v in locals().items() if k in _OPTIONS}
        planned = arguments.plan_fields(fields, decode, transform, member_columns)
        datasets = arguments.open_datasets(
            dataset, weights, planned,
            source={**{k: self._settings[k] for k in arguments.SOURCE_KEYWORDS},
                    # False is keep_tail's default: not a setting the Dataset must take.
                    "keep_tail": keep_tail or None},
            # Listings and index reads behind the samples' own bounds.
            options={"request_timeout": request_timeout, "max_retries": max_retries})
        planned = arguments.replan_fields(planned, datasets, fields, decode, transform)
        #: The dataset read (the list of them, for a mixture).
        self.dataset = datasets[0] if len(datasets) == 1 else datasets
        #: The datasets read, in the order ``batch.sources`` numbers them.
        self.datasets = datasets
        self._field_plan = planned
        #: Whether batches are packed token rows (``TokenBatch``), not images.
        self._tokens = any(d.block_size is not None for d in datasets)
        if not self._tokens and (mask_boundaries or end_of_document is not None):
            raise ConfigError("mask_boundaries and end_of_document say how token rows are "
                              "packed: give block_size= to read the dataset as tokens, or "
                              "leave them unset")
        name, steps, function = arguments.transform_parts(transform)
        #: The steps that run in Python after the native ones (None: all native).
        self.python_tail = function if isinstance(function, PythonTail) else None
        rank, world_size, self._ranks_from = arguments.ranks(rank, world_size)
        self._torch = arguments.output_module(output)
        self.pin_memory = bool(pin_memory)
        self._pin = self.pin_memory and self._pinnable()
        if self._ranks_from != "environment":
            given["rank"], given["world_size"] = rank, world_size
        # The source's options opened the datasets above; the loader takes the rest.
        options = {
            _OPTIONS[kw]: _option_text(_CONVERT.get(kw, _same)(value))
            for kw, value in given.items()
            if value is not None and not _OPTIONS[kw].startswith("source.")
        }
        # Raw parts cross over only when a field needs them: otherwise the image path.
        raw_fields = tuple(f for f in planned or () if not f.native and not f.label)
        self._native = _native.Loader(
            datasets, options=options,
            weights=None if weights is None else [float(w) for w in weights],
            transform=name,
            steps=None if steps is None else json.dumps(steps), transform_fn=function,
            main_image=planned is None or planned[0].native, draft=bool(draft),
            # Token rows are pinned in Python, each tensor copied once.
            batch_memory=_pinned_block(self._torch) if self._pin and not self._tokens
            else None,
            decode_fields=functools.partial(sample_fields.decode_sample, raw_fields)
            if raw_fields else None)
        _register_pytree(self._torch)
        self.batch_size = batch_size
        self.drop_last = drop_last
        # Decode threads, not processes: as given, else the native default.
        self.num_workers = self._native.decode_threads
        self.prefetch_factor = prefetch_factor if prefetch_factor is not None else 2
        self._pass = 0
        _LIVE.add(self)

    def _pinnable(self) -> bool:
        """Whether ``pin_memory=True`` can pin: it needs torch tensors, and warns (as
        torch's DataLoader does) without an accelerator to pin for."""
        if self._torch is None:
            raise ConfigError("pin_memory=True needs torch tensors: give output='torch' "
                              "(or 'auto' with torch installed)")
        if self._torch.cuda.is_available():
            return True
        warnings.warn("pin_memory=True but CUDA is not available: batches stay in "
                      "pageable memory (as torch's DataLoader does without an "
                      "accelerator)", UserWarning, stacklevel=3)
        return False

    def _array(self, buffer: _native.HostBuffer) -> Any:
        owner = buffer.owner
        if owner is not None:
            # Lent by torch (pin_memory): a view of its own tensor, so torch still tracks
            # the block (a non_blocking copy's event on it) and reuses it when it may.
            torch = self._torch
            return owner[:buffer.nbytes].view(getattr(torch, buffer.dtype)).view(buffer.shape)
        array = numpy.asarray(buffer)  # a view: the buffer protocol, no copy
        return array if self._torch is None else self._torch.from_numpy(array)

    def __iter__(self) -> Iterator[Batch]:
        """A pass, as torch's DataLoader: a new ``iter()`` starts an epoch (the next one),
        however the last pass ended (after its last batch, with or without asking past it,
        or at a ``break``); right after ``load_state_dict`` it continues the saved epoch.
        An iterator of an earlier pass, asked for a batch after a new one started, raises
        ``RuntimeError``: its epoch was cut short, which a loop must not take for its end
        (two threads iterating one loader share its passes; give each its own loader)."""
        self._check_ranks()
        self._native.begin_pass()
        self._pass += 1
        return self._batches(self._pass)

    def _batches(self, this_pass: int) -> Iterator[Batch]:
        native = self._native
        while True:
            if self._pass != this_pass:
                raise RuntimeError(
                    "this iterator's pass (epoch) was superseded by a new iter() on the same "
                    "DataLoader before it ended: a loader runs one pass at a time, so its "
                    "epoch is cut short here. Iterate a loader from one place at a time, or "
                    "make one loader per thread")
            raw = native.next_batch()
            if raw is None:
                self._report_unreported_skips()
                return
            (images, labels, keys, indices, epoch, skipped, decoded, position, padding,
             sources, tokens) = raw
            if tokens is not None:
                yield self._token_batch(labels, tokens, keys=keys, indices=indices,
                                        epoch=epoch, skipped=skipped, padding=padding,
                                        sources=sources)
                continue
            if self._field_plan is None:
                values = [self._array(images), self._array(labels)]
            else:
                try:
                    values = self._field_values(images, labels, keys, decoded)
                except BaseException:
                    # The loader counted the batch as delivered; it was not: its state
                    # goes back before it, so a resume reads it again.
                    if position is not None:
                        native.rewind(epoch, position)
                    raise
            if self._pin:
                # Images were collated into pinned memory; labels and the fields batched
                # in Python are copied there.
                values = [_pinned(v) for v in values]
            yield Batch(*values, keys=keys, indices=indices, epoch=epoch, skipped=skipped,
                        fields=None if self._field_plan is None else
                        [f.name for f in self._field_plan], padding=padding,
                        sources=sources)

    def _token_batch(self, labels: _native.HostBuffer, tokens: dict[str, Any],
                     **context: Any) -> TokenBatch:
        """A token batch's tensors, viewing the loader's memory (copied once into pinned
        memory with ``pin_memory=True``)."""
        tensors = {name: self._array(tokens[name]) for name in TokenBatch.TENSORS
                   if name != "labels"}
        tensors["labels"] = self._array(labels)
        if self._pin:
            tensors = {name: _pinned(value) for name, value in tensors.items()}
        return TokenBatch({name: tensors[name] for name in TokenBatch.TENSORS},
                          max_seqlen=tokens["max_seqlen"], **context)

    def _field_values(self, images: Any, labels: Any, keys: list[str],
                      decoded: list[tuple[Any, ...]]) -> list[Any]:
        """Each field's batch: natively decoded images and labels as they came, the other
        fields (decoded on the decode threads, one tuple per sample) collated here."""
        values = []
        raw = 0
        for field in self._field_plan or ():
            if field.native:
                values.append(self._array(images))
            elif field.label:
                values.append(self._array(labels))
            else:
                values.append(field.collate([sample[raw] for sample in decoded], keys,
                                            self._torch))
                raw += 1
        return values

    def _report_unreported_skips(self) -> None:
        """Samples skipped in a last batch that had none left: no batch carries them, so
        they are reported here rather than lost from sight."""
        skipped = self._native.take_unreported_skips()
        if skipped:
            shown = "; ".join(str(e) for e in skipped[:5])
            more = f" (and {len(skipped) - 5} more)" if len(skipped) > 5 else ""
            warnings.warn(
                f"{len(skipped)} sample(s) of the epoch's last batch were skipped and no "
                f"sample of it was left to deliver, so no batch reports them: {shown}{more}",
                RuntimeWarning, stacklevel=3)

    def _check_ranks(self) -> None:
        """A loader made before ``init_process_group`` took its share from the environment:
        if the process group now says otherwise, refuse rather than read another share."""
        if self._ranks_from == "given":
            return
        group = arguments.process_group()
        here = (self._native.rank, self._native.world_size)
        if group is not None and group != here:
            raise ConfigError(
                f"this loader reads share {here[0]} of {here[1]} (from the {self._ranks_from}) "
                f"but torch.distributed's process group says rank {group[0]} of {group[1]}; "
                "make the loader after init_process_group, or give rank= and world_size=")

    #: What libraries look up on a torch DataLoader, with this loader's answers: it
    #: batches and orders natively (no torch sampler or collate function to swap).
    sampler = None
    batch_sampler = None
    collate_fn = None
    persistent_workers = True

    def __reduce__(self) -> tuple[Any, ...]:
        """A loader pickles as its settings and where it stands, so spawned processes
        (``mp.spawn``, the ``spawn`` and ``forkserver`` start methods) rebuild it; ranks
        given as ``None`` are resolved again where it is rebuilt."""
        given = self._settings["dataset"]
        if not all(isinstance(d, (str, os.PathLike))
                   for d in (given if isinstance(given, (list, tuple)) else [given])):
            raise TypeError(
                "a DataLoader made from a Dataset object cannot be pickled (the Dataset "
                "holds open storage); make it from the URL, with manifest=, labels=, "
                "classes= and storage_options=, to pickle it")
        try:
            state = self.state_dict() if self._pass > 0 else None
        except ConfigError as e:
            raise TypeError(
                f"this loader cannot be pickled after it has started: {e}; pickle it "
                "before its first iter()") from e
        return (_rebuild, (self._settings, state))

    def as_iterable_dataset(self) -> Any:
        """This loader's settings as a ``torch.utils.data.IterableDataset``, for code that
        must stay inside torch's ``DataLoader``: give it ``batch_size=None`` (batches come
        made), ``collate_fn=loader_ml.torch_view.keep`` to keep each batch's keys (torch's
        default conversion rebuilds it from its tensors, keys ``None``) and any
        ``num_workers``; each worker reads a disjoint share (this rank's
        share split by worker), so every sample comes once. Its rank is resolved now (make
        it after ``init_process_group``). Call its ``set_epoch`` each epoch, as with
        ``DistributedSampler``; with ``persistent_workers=True`` epochs also advance by
        themselves. Iterating this loader directly is faster: it needs no worker processes.
        """
        from .torch_view import LoaderIterable

        # The share this loader resolved (given, process group or environment, checked
        # natively), not a second reading of the environment.
        self._check_ranks()
        settings = dict(self._settings, rank=self._native.rank,
                        world_size=self._native.world_size)
        return LoaderIterable(settings, DataLoader)

    def __len__(self) -> int:
        """Batches per epoch of this rank (every rank has as many). An endless epoch
        (``stop="cycle_forever"``) has no length: ``TypeError``, as for an
        ``IterableDataset`` without one."""
        return len(self._native)

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._native.epoch

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next, from its start, as ``DistributedSampler.set_epoch``; right
        after ``load_state_dict``, setting the saved epoch keeps its position (so a resumed
        run's own ``set_epoch`` call continues it)."""
        self._native.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the run stands (``epoch``, ``position``: positions of the epoch's global
        order its steps consumed) and what the order was made of (``order``): the same dict
        on every rank after the same step, so save any rank's with the model's;
        ``load_state_dict`` resumes exactly after it, on any world size and batch size."""
        return self._native.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a ``state_dict()`` of any rank, on any world size and batch size:
        the positions not delivered before it, then the same epochs as without the
        interruption. The next ``iter()`` continues the saved epoch. A state saved under
        another dataset, shuffle or seed is refused (``ConfigError`` naming both sides): its
        position would name other samples here; one of other weights or datasets too,
        unless ``new_segment=True``."""
        self._native.load_state_dict(dict(state_dict))

    def summary(self) -> str | None:
        """The per-stage summary of the run so far: fetch and decode rates, waits, and
        which stage limits it."""
        return self._native.summary()

    def cache_stats(self) -> dict[str, Any] | None:
        """The cache's counters (``None`` without ``cache_dir`` or ``cache_memory``):
        ``hits``, ``misses``, ``requests``, bytes each way, ``evictions``; with a directory,
        ``"node"`` holds the totals of every process sharing it (the ranks of a node), the
        others' as they last recorded them (every half second, and at their end)."""
        return self._native.cache_stats()

    def close(self) -> None:
        """Stop now: cancel in-flight requests and join the threads. Live loaders are
        closed at interpreter exit too."""
        _LIVE.discard(self)
        self._native.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
