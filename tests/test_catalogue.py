"""Max batch on every card size: --vram-limit names and lists (kitctl/core/cards.py), one run per size through the
real CLI (the GPU is the named NVML stand-in, tests/nvml_stand_in), and the report's "Max batch against VRAM" from
two committed H200 runs under two limits (kitctl/benchmarks/maxbatch/catalogue.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, need_module
from kitctl.core.cards import BY_KEY, CARDS, parse_vram_limits
from kitctl.errors import Fail

ENTRY = [sys.executable, "-c", "from kitctl.entry import main; main()"]
STAND_IN = Path(__file__).resolve().parent / "nvml_stand_in"
REF = ROOT / "results" / "reference"
# pytorch-eager fp32 on the H200: under --vram-limit 16376 (8,832) and on the whole card (83,968)
AT_16376 = REF / "maxbatch-resnet50-synthetic-20261129T195932Z.json"
WHOLE_CARD = REF / "maxbatch-resnet50-synthetic-20261129T200326Z.json"


def kitctl(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def last_line(p: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return p.stderr.strip().splitlines()[-1]


def test_names_and_numbers_make_the_limits_in_the_order_given():
    limits = parse_vram_limits("8192, RTX4080,a100-40g ,24564")
    assert [v.mib for v in limits] == [8192, 16376, 40960, 24564]
    assert [v.card.key if v.card else None for v in limits] == [None, "rtx4080", "a100-40g", None]
    assert limits[1].label == "rtx4080 (16,376 MiB)" and limits[0].label == "8,192 MiB"
    # every card has a public source and a distinct name; sizes as NVML prints them
    assert len(BY_KEY) == len(CARDS) and all(c.source.startswith("https://") and c.driver for c in CARDS)
    assert BY_KEY["h200"].total_mib == 143771 and BY_KEY["rtx4090"].total_mib == 24564


@pytest.mark.parametrize("text, says", [
    ("rtx9999", "--vram-limit 'rtx9999': not a number of MiB nor a card this kit knows (rtx3070, "),
    ("8192,,16376", "--vram-limit takes MiB or a card's name, or a comma list of them (got '8192,,16376')"),
    ("0", "--vram-limit must be > 0 (got 0)"),
    ("16376,rtx4080", "--vram-limit lists 16,376 MiB twice (16376,rtx4080)"),
])
def test_bad_limits_are_one_line(text, says):
    with pytest.raises(Fail) as e:
        parse_vram_limits(text)
    assert str(e.value).startswith(says)


def test_a_bad_list_and_a_list_where_one_limit_applies_are_refused_with_nothing_written(tmp_path):
    r = tmp_path / "r"
    p = kitctl("run", "maxbatch", "--vram-limit", "8192,rtx9999", "--results-dir", str(r))
    assert p.returncode == 2 and last_line(p).startswith("kitctl: --vram-limit 'rtx9999': not a number of MiB")
    p = kitctl("run", "throughput", "--vram-limit", "8192,rtx4080", "--results-dir", str(r))
    assert p.returncode == 2
    assert last_line(p) == ("kitctl: --vram-limit takes one limit in run throughput (a list of card sizes is "
                            "`kitctl run maxbatch`'s)")
    p = kitctl("run", "maxbatch", "--vram-limit", "512,768", "--resume", str(tmp_path / "x.partial.json"))
    assert p.returncode == 2
    assert last_line(p).startswith("kitctl: --resume continues the partial's own configuration: --vram-limit cannot")
    assert not r.exists() or not list(r.iterdir())


def stand_in_run(tmp_path: Path, limits: str, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`kitctl run maxbatch --vram-limit <list>` on the stand-in GPU (16,376 MiB), with the real PyTorch trial told
    to grow (KIT_TRIAL_FAULT=grow): each run's calibration goes over its own budget and the gate kills it."""
    need_module("torch", "the local runtime runs the PyTorch trial on this interpreter")
    results = tmp_path / "results"
    env = {"KIT_TRIAL_FAULT": "grow", "KITCTL_RUN_STATE_DIR": str(tmp_path / "state"),
           "KITCTL_TEST_NVML_IDLE_MIB": "300",
           "PYTHONPATH": os.pathsep.join([str(STAND_IN), str(ROOT / "host"), os.environ.get("PYTHONPATH", "")])}
    p = kitctl("run", "maxbatch", "--engines", "pytorch-eager", "--precision", "fp32", "--device", "cuda",
               "--runtime", "local", "--vram-limit", limits, "--reserve", "256", "--start-batch", "2",
               "--max-batch", "2", "--timeout", "90", "--results-dir", str(results), *extra, env=env)
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return p, results


def test_a_list_runs_one_max_batch_run_per_limit_each_its_own_artifact(tmp_path):
    p, results = stand_in_run(tmp_path, "512,768")
    finals = sorted(results.glob("*.json"))
    assert not [f for f in finals if f.name.endswith(".partial.json")]
    docs = [json.loads(f.read_text()) for f in finals]
    assert len(docs) == 2, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    assert sorted(d["budget"]["limit_mib"] for d in docs) == [512, 768]
    for d in docs:
        assert d["state"] == "complete"
        assert d["vram_catalogue"]["limits_mib"] == [512, 768]
        assert d["vram_catalogue"]["this"] == [512, 768].index(d["budget"]["limit_mib"]) + 1
        (cell,) = d["results"]
        assert cell["calibration"]["killed_by"] == "kit_vram_gate"  # each run gated at its own B
    assert p.returncode == 1  # no size has a capacity here
    assert "card size 1/2: --vram-limit 512 MiB" in p.stderr and "card size 2/2: --vram-limit 768 MiB" in p.stderr
    assert "Max batch against VRAM" in p.stdout and "512" in p.stdout and "768" in p.stdout


def test_json_prints_the_artifacts_of_every_size_as_one_array_and_csv_every_table(tmp_path):
    p, results = stand_in_run(tmp_path, "512,640", "--json", "--csv", str(tmp_path / "t.csv"))
    docs = json.loads(p.stdout)  # stdout holds only the document; the tables went to stderr
    assert isinstance(docs, list) and [d["budget"]["limit_mib"] for d in docs] == [512, 640]
    assert "Max batch against VRAM" in p.stderr
    csv = (tmp_path / "t.csv").read_text()
    assert csv.count("Engine,Precision,Max batch") == 2 and "VRAM limit (MiB),card" in csv


def test_a_size_that_does_not_fit_the_card_refuses_the_list_before_anything_runs(tmp_path):
    p, results = stand_in_run(tmp_path, "512,900000")
    assert p.returncode == 2
    assert last_line(p).startswith("kitctl: --vram-limit 900,000 MiB is above this card's 16,376 MiB; nothing run")
    assert not results.exists() or not list(results.iterdir())


def test_the_report_draws_max_batch_against_vram_from_runs_under_two_limits(tmp_path):
    from kitctl.reports.plots import make_plots
    from kitctl.reports.report import render
    from kitctl.reports.sources import load_source

    sources = [load_source(WHOLE_CARD), load_source(AT_16376)]
    md = render(sources)
    sec = md[md.index("## Max batch against VRAM"):]
    rows = [ln for ln in sec.splitlines() if ln.startswith("| 1") or ln.startswith("| 4")]
    assert rows[0].startswith("| 16,376 | rtx4080 | 8,832 | [2]") and rows[1].startswith("| 143,771 | h200 | 83,968 | [1]")
    plot = next(f for f in make_plots(sources, tmp_path / "plots") if f.path.name.startswith("catalogue-maxbatch"))
    assert plot.path.stat().st_size > 0
    assert plot.data["limits_mib"] == [16376, 143771]
    assert plot.data["lines"]["PyTorch eager fp32"] == [[16376 / 1024, 8832.0], [143771 / 1024, 83968.0]]
    # one run alone, or runs of one limit, draw no catalogue
    assert "Max batch against VRAM" not in render([sources[1]])


def test_a_limit_shows_the_latest_bounded_answer_of_each_engine():
    """Two bf16 searches at 16,376 MiB: 17,088 (2026-12-01, before the 64 MiB framework slack) and 17,024
    (2026-12-04): the later one is shown whichever order the files come in; a censored answer never displaces a
    bounded one."""
    from kitctl.benchmarks.maxbatch.catalogue import sizes

    old = json.loads((REF / "maxbatch-resnet50-synthetic-20261201T035836Z.json").read_text())
    new = json.loads((REF / "maxbatch-resnet50-synthetic-20261204T134910Z.json").read_text())
    censored = json.loads((REF / "maxbatch-resnet50-synthetic-20261201T213626Z.json").read_text())  # jax bf16 ≥
    complete = json.loads((REF / "maxbatch-resnet50-synthetic-20261201T215512Z.json").read_text())
    for order in ([("o", old), ("n", new)], [("n", new), ("o", old)]):
        (size,) = sizes(order)
        assert size.figure("pytorch-eager", "bf16").max_batch == 17024 and "n" in size.names
    (size,) = sizes([("c", complete), ("x", {**censored, "created_utc": "2099-01-01T00:00:00Z"})])
    assert size.figure("jax-xla", "bf16").figure_text == "27,098"
