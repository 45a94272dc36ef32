"""The data-loading measurement (trials/dataload/measure.py; docs/method.md, "Data loading") on a virtual clock,
and the CPU-testable parts of the pytorch-nvjpeg loader.

A scripted loader's batches cost a scripted number of virtual seconds, so the window rule's decisions (how many
whole epochs, which minimum decided, the start-up kept apart, whether the halves agree) are checked exactly, with
no timing in the assertions. The nvJPEG loader's batched crop + resize runs on the CPU here against torch's own
per-image antialiased interpolation; its decode, streams and events need a GPU and are not exercised here.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import need_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "trials" / "common", ROOT / "trials" / "dataload"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import kittrial  # noqa: E402
import measure  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class ScriptedLoader:
    """A loaders.Built whose epochs yield `images` images in batches of `batch`; batch k of epoch e (e = 0 is the
    warm-up epoch) costs cost(e, k) virtual seconds before it arrives, the first batch ever `startup` more, and an
    epoch's end costs `tail` after its last batch (a GPU loader waiting for its queued work)."""

    def __init__(self, clock: Clock, images: int, batch: int, cost, startup: float = 0.0, tail: float = 0.0):
        self.clock, self.images, self.batch, self.cost = clock, images, batch, cost
        self.startup, self.tail, self.epochs = startup, tail, 0
        self.reset = None

    def epoch(self):
        e = self.epochs
        self.epochs += 1
        if e == 0:
            self.clock.t += self.startup
        for k, start in enumerate(range(0, self.images, self.batch)):
            self.clock.t += self.cost(e, k)
            n = min(self.batch, self.images - start)
            yield SimpleNamespace(shape=(n, 3, 224, 224), dtype="torch.uint8"), None
        self.clock.t += self.tail


def run(loader: ScriptedLoader, rule: measure.WindowRule, frac: float | None = 1.0, source: str = "ram") -> dict:
    return measure.measure(loader, lambda: (frac, 0.5), rule, source, loader.batch, loader.images, "scripted",
                           clock=loader.clock)


def flat(cost):
    return lambda e, k: cost


def test_the_rule_takes_the_fewest_whole_epochs_holding_both_minimums():
    # 100 images an epoch in batches of 32 (32, 32, 32, 4), 0.1 s a batch: 0.4 s an epoch.
    def window(images, seconds, epochs=None):
        loader = ScriptedLoader(Clock(), 100, 32, flat(0.1))
        return run(loader, measure.WindowRule.of(images, seconds, epochs, 0.02))

    by_images = window(250, None)  # 3 epochs hold 300 >= 250; 2 hold 200
    assert len(by_images["epochs"]) == 3 and by_images["images"] == 300
    assert by_images["window"]["rule"] == "whole epochs after a warm-up epoch, until at least 250 images"
    by_seconds = window(None, 1.0)  # 3 epochs last 1.2 s >= 1.0; 2 last 0.8
    assert len(by_seconds["epochs"]) == 3 and by_seconds["window_seconds"] == pytest.approx(1.2)
    # Both given: whichever is longer decides.
    assert len(window(150, 1.0)["epochs"]) == 3  # seconds: 3 epochs; images alone: 2
    assert len(window(450, 1.0)["epochs"]) == 5  # images: 5 epochs; seconds alone: 3
    # --epochs under the rule: a third minimum.
    both = window(150, 0.5, epochs=4)
    assert len(both["epochs"]) == 4 and both["window"]["min_epochs"] == 4
    assert both["window"]["rule"].endswith("at least 150 images and at least 0.5 s and at least 4 epochs")
    for m in (by_images, by_seconds, both):  # whole epochs, never a part of one
        assert m["images"] % 100 == 0 and all(e["images"] == 100 for e in m["epochs"])
        assert m["window"]["epochs"] == len(m["epochs"]) and m["window"]["batches"] == 4 * len(m["epochs"])


def test_without_window_flags_exactly_epochs_are_timed_as_before():
    rule = measure.WindowRule.of(None, None, None, 0.02)
    assert rule == measure.WindowRule(fixed_epochs=measure.FIXED_EPOCHS) and not rule.by_rule
    for epochs, want in ((None, 2), (1, 1), (5, 5)):
        loader = ScriptedLoader(Clock(), 100, 32, flat(0.1))
        m = run(loader, measure.WindowRule.of(None, None, epochs, 0.02))
        assert len(m["epochs"]) == want and m["images"] == 100 * want
        assert m["window"]["fixed_epochs"] == want and m["window"]["min_images"] is None
    assert measure.WindowRule(fixed_epochs=1).text() == "fixed: 1 epoch after a warm-up epoch"
    assert measure.WindowRule(fixed_epochs=3).text() == "fixed: 3 epochs after a warm-up epoch"


def test_the_start_up_is_reported_apart_from_the_steady_rate():
    # The warm-up epoch's first batch waits 7 s more (worker spawn, a JIT compile); every batch costs 0.1 s.
    loader = ScriptedLoader(Clock(), 100, 32, flat(0.1), startup=7.0)
    m = run(loader, measure.WindowRule.of(200, None, None, 0.02))
    assert m["startup_seconds"] == pytest.approx(7.1)  # time to the warm-up epoch's first batch
    assert m["warmup_seconds"] == pytest.approx(7.4)
    assert m["warmup_epoch"]["first_batch_seconds"] == m["startup_seconds"]
    assert m["warmup_epoch"]["resident_before"] == 1.0  # its source prepared and measured too
    assert m["images_per_second"] == pytest.approx(200 / 0.8)  # the start-up is in none of the timed epochs
    assert set(measure.FIGURES) <= set(m["figures"]) and "start-up" in m["figures"]["startup_seconds"]


def test_per_batch_seconds_are_stored_and_sum_to_each_epoch():
    costs = {0: 0.3, 1: 0.1, 2: 0.2, 3: 0.05}
    loader = ScriptedLoader(Clock(), 100, 32, lambda e, k: costs[k], tail=0.25)
    m = run(loader, measure.WindowRule.of(None, None, 2, 0.02))
    for e in m["epochs"]:
        # The epoch's end (its tail) belongs to its last batch, so the batches sum to the epoch.
        assert e["batch_seconds"] == pytest.approx([0.3, 0.1, 0.2, 0.3])
        assert sum(e["batch_seconds"]) == pytest.approx(e["seconds"])
        assert e["first_batch_seconds"] == pytest.approx(0.3) and e["batches"] == 4
        assert e["short_batches"] == [[3, 4]]  # the last batch holds 100 - 3 x 32 images
        assert e["resident_before"] == 1.0 and e["prepare_seconds"] == 0.5
        assert e["images_per_second"] == pytest.approx(100 / 0.9)
    assert m["window_seconds"] == pytest.approx(1.8)


def test_the_halves_check_compares_the_window_s_first_and_second_half_of_batches():
    steady = run(ScriptedLoader(Clock(), 100, 25, flat(0.1)), measure.WindowRule.of(400, None, None, 0.02))
    w = steady["window"]
    assert w["batches"] == 16 and w["halves_change"] == pytest.approx(0.0) and w["steady"] is True
    # The loader slows down from the third timed epoch on (epoch 0 is the warm-up): the second half is slower.
    slowing = run(ScriptedLoader(Clock(), 100, 25, lambda e, k: 0.1 if e <= 2 else 0.12),
                  measure.WindowRule.of(400, None, None, 0.05))
    w = slowing["window"]
    assert w["first_half_ips"] == pytest.approx(250.0) and w["second_half_ips"] == pytest.approx(25 / 0.12)
    assert w["halves_change"] == pytest.approx(-1 / 6) and w["steady"] is False and w["tolerance"] == 0.05
    # Recomputed from what is stored: the batches of the timed epochs in order, halves as throughput's chunks.
    secs = [s for e in slowing["epochs"] for s in e["batch_seconds"]]
    first, second = kittrial.halves([25] * len(secs), secs, 1)
    assert first == pytest.approx(w["first_half_ips"]) and second == pytest.approx(w["second_half_ips"])
    # One timed batch: no halves to compare.
    one = run(ScriptedLoader(Clock(), 10, 32, flat(0.1)), measure.WindowRule.of(None, None, 1, 0.02))
    assert one["window"]["steady"] is None and one["window"]["first_half_ips"] is None


def test_a_source_that_is_not_what_was_asked_and_a_short_warm_up_epoch_are_errors():
    with pytest.raises(kittrial.TrialError, match=r"source ram: 50.0% of the dataset's pages were resident"):
        run(ScriptedLoader(Clock(), 100, 32, flat(0.1)), measure.WindowRule(), frac=0.5)
    with pytest.raises(kittrial.TrialError, match="source cold: 10.0%.*run as the dataset's owner"):
        run(ScriptedLoader(Clock(), 100, 32, flat(0.1)), measure.WindowRule(), frac=0.1, source="cold")
    # Data held in the process (the nvJPEG yardstick tool): nothing to check, nothing recorded as measured.
    mem = run(ScriptedLoader(Clock(), 100, 32, flat(0.1)), measure.WindowRule(), frac=None, source="memory")
    assert all(e["resident_before"] is None for e in [mem["warmup_epoch"], *mem["epochs"]])
    loader = ScriptedLoader(Clock(), 100, 32, flat(0.1))
    with pytest.raises(kittrial.TrialError, match="the warm-up epoch gave 100 images of 120"):
        measure.measure(loader, lambda: (1.0, 0.0), measure.WindowRule(), "ram", 32, 120, "scripted", loader.clock)


def test_a_batch_that_is_not_uint8_224_images_is_refused():
    with pytest.raises(kittrial.TrialError, match=r"x: batch \[4, 3, 32, 32\] float32, expected uint8 224x224"):
        measure.check_batch("x", np.zeros((4, 3, 32, 32), dtype=np.float32))
    assert measure.check_batch("x", np.zeros((4, 224, 224, 3), dtype=np.uint8)) == [4, 224, 224, 3]


# -- pytorch-nvjpeg's parts that run on a CPU ----------------------------------------------------------------------

def _loaders():
    import loaders

    return loaders


def test_the_batched_resize_matches_torch_s_antialiased_interpolate_per_image():
    torch = need_module("torch")
    F = torch.nn.functional
    loaders = _loaders()
    rng = random.Random(5)
    g = torch.Generator().manual_seed(5)
    images, boxes, flips = [], [], []
    for i in range(20):
        h, w = rng.randint(30, 600), rng.randint(30, 600)
        if i % 2:  # a smooth ramp, where a wrong weight shows as a wrong level
            img = torch.linspace(0, 255, w)[None, None, :].expand(3, h, w).to(torch.uint8).contiguous()
        else:
            img = torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g)
        images.append(img)
        boxes.append(loaders.crop_params(rng, w, h))
        flips.append(i % 3 == 0)
    boxes[0] = (0, 0, images[0].shape[1], images[0].shape[2])  # the whole image, to an edge
    sides = [b[2] for b in boxes] + [b[3] for b in boxes]
    assert min(sides) < 224 < max(sides)  # both upscaled and downscaled crops
    budget = 3 * 600 * 600 * 3  # several groups
    assert len(loaders.resize_groups(boxes, budget)) > 1
    out = loaders.resized_crops(images, boxes, flips, budget=budget)
    assert out.shape == (20, 3, 224, 224) and out.dtype == torch.uint8
    for img, (top, left, h, w), flip, got in zip(images, boxes, flips, out):
        ref = F.interpolate(img[:, top:top + h, left:left + w][None].float(), size=(224, 224), mode="bilinear",
                            antialias=True, align_corners=False)[0]
        ref = (ref.flip(2) if flip else ref).round().clamp(0, 255).to(torch.uint8)
        diff = (got.int() - ref.int()).abs()
        assert int(diff.max()) <= 1  # float sums rounding differently at a .5
        assert float((diff > 0).float().mean()) < 1e-3


def test_resize_weights_and_groups():
    torch = need_module("torch")
    loaders = _loaders()
    w = loaders.aa_weights(torch.tensor([224.0, 100.0, 500.0]), 224, 512)
    assert torch.allclose(w.sum(-1), torch.ones(3, 224))
    assert torch.equal(w[0, :, :224], torch.eye(224)) and not w[0, :, 224:].any()  # same size: the identity
    assert not w[1, :, 100:].any() and not w[2, :, 500:].any()  # nothing from past the crop
    boxes = [(0, 0, 100, 100), (0, 0, 200, 50), (0, 0, 10, 300), (0, 0, 300, 300)]
    groups = loaders.resize_groups(boxes, budget=3 * 200 * 100 * 2)
    assert groups == [(0, 2), (2, 3), (3, 4)]  # consecutive, covering all; an oversized crop alone
    for a, b in groups[:-1]:
        assert (b - a) * 3 * max(x[2] for x in boxes[a:b]) * max(x[3] for x in boxes[a:b]) <= 3 * 200 * 100 * 2
    assert loaders.resize_groups([]) == []


def test_the_nvjpeg_workers_pack_a_batch_into_one_buffer_per_kind():
    torch = need_module("torch")
    loaders = _loaders()
    rng = np.random.default_rng(0)
    raws = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((5, 7), (3, 4))]
    jpegs = [rng.integers(0, 256, n, dtype=np.uint8) for n in (11, 4, 9)]
    items = [("jpeg", jpegs[0], 3), ("raw", raws[0], 1), ("jpeg", jpegs[1], 0), ("jpeg", jpegs[2], 2),
             ("raw", raws[1], 5)]
    p = loaders.nvjpeg_pack(items)
    assert p["jpeg_index"] == [0, 2, 3] and p["raw_index"] == [1, 4]
    assert p["labels"].tolist() == [3, 1, 0, 2, 5]
    for (o, k), want in zip(p["jpeg_spans"], jpegs, strict=True):
        assert p["jpeg"][o:o + k].numpy().tobytes() == want.tobytes()
    for (o, k), shape, want in zip(p["raw_spans"], p["raw_shapes"], raws, strict=True):
        assert np.array_equal(p["raw"][o:o + k].view(*shape).numpy(), want)
    only_jpeg = loaders.nvjpeg_pack(items[:1])
    assert only_jpeg["raw"] is None and only_jpeg["raw_spans"] == [] and isinstance(only_jpeg["jpeg"], torch.Tensor)
