"""The report commands: `kitctl report`, `kitctl compare`, `kitctl results list`.

Registered on the main app by `register(app)`. Bad or unreadable files: one line on stderr
starting `kitctl: `, exit 2. matplotlib is imported only for `report --plots`.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from ..errors import EXIT_NOT_COMPARABLE, EXIT_OK, EXIT_REGRESSION, Exit, fail
from ..core.artifact import ArtifactError
from ..output import ResultOutput, table_rows

# A value the schema lets through but the renderer cannot use (an artifact written by hand or by
# another version): one line naming the file, never a traceback.
_RENDER_ERRORS = (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError, IndexError)

_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(msg: str) -> None:
    raise fail(msg)


def _emit(md: str) -> None:
    """Markdown on a terminal through rich; raw Markdown when stdout is a pipe or a file."""
    if sys.stdout.isatty():
        from rich.markdown import Markdown

        Console(highlight=False).print(Markdown(md))
    else:
        sys.stdout.write(md)
        sys.stdout.flush()


def _check_csv(csv: Path | None) -> None:
    from ..errors import Fail
    from ..output import check_csv_path

    try:
        check_csv_path(csv)
    except Fail as exc:
        _fail(str(exc))


def _write_csv(path: Path, rows: list[list[str]]) -> None:
    import csv as csvmod
    import io

    buf = io.StringIO()
    csvmod.writer(buf, lineterminator="\n").writerows(rows)
    try:
        _write_atomic(path, buf.getvalue())
    except OSError as exc:
        _fail(f"cannot write --csv {path}: {exc.strerror or exc}")


def _print_json(doc: object) -> None:
    """The one JSON document on stdout (everything else goes to stderr)."""
    import json

    sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _write_atomic(path: Path, text: str) -> None:
    """A temporary file beside `path`, renamed into place: a full disk leaves no truncated report."""
    from ..core.fileio import replace_atomically

    replace_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _newest_result(folder: Path) -> Path:
    """The newest result file in the user's folder (what `kitctl report` alone reports)."""
    from ..reports.results_list import list_results, reference_dir

    try:
        entries = [e for e in list_results(folder) if e.state not in ("unreadable", "other JSON")]
    except ArtifactError:
        entries = []
    if not entries:
        ref = reference_dir(folder)
        _fail(f"no result in {folder}/ yet: run a benchmark first (kitctl run maxbatch), or name files"
              + (f" (the project's reference results are in {ref})" if ref else ""))
    return folder / entries[0].name


def report(
    results: Optional[List[Path]] = typer.Argument(None, help="Result files: kitctl artifacts (final or partial) or the "
                                                   "reference runner's max-batch JSON (default: the newest result in "
                                                   "results/, your own runs)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the Markdown to this file (instead of printing it)."),
    plots: Optional[Path] = typer.Option(None, "--plots", help="Write PNG plots into this folder and link them."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of the Markdown: per result "
                                 "its file, benchmark, state, GPU and figures, and the headline ratios."),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Also write every result's figures (one row per result "
                                       "and cell) as CSV to this file."),
    peers: Optional[List[Path]] = typer.Option(None, "--peers", help="A JSON of tools/peer_batch_finders.py "
                                               "(Lightning's and accelerate's batch finders): shown beside the "
                                               "max-batch cell it ran against. Repeatable."),
) -> None:
    """Markdown report of one or more results (printed; --out writes it); without files, the newest in results/."""
    from ..reports.peers import load_peers, peers_section
    from ..reports.report import render
    from ..reports.sources import load_source

    if not results:
        results = [_newest_result(Path("results"))]
    _check_csv(csv)
    try:
        sources = [load_source(p) for p in results]
        peer_files = [load_peers(p) for p in peers or []]
    except ArtifactError as exc:
        _fail(str(exc))
    if as_json or csv is not None:
        from ..reports.machine import report_document, report_rows

        try:
            doc = report_document(sources)
        except _RENDER_ERRORS as exc:
            _fail(f"cannot read {', '.join(str(p) for p in results)}: a value of an unexpected type or form "
                  f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")
        if csv is not None:
            _write_csv(csv, report_rows(doc))
        if as_json:
            _print_json(doc)
            if out is None and plots is None:
                return
    files = []
    if plots is not None:
        from ..reports.plots import PlotError, make_plots

        try:
            files = make_plots(sources, plots)
        except PlotError as exc:
            _fail(str(exc))
    link_dir = out.parent if out is not None else Path(".")
    try:
        md = render(sources, files, link_dir)
        if peer_files:
            md += "\n" + "\n".join(peers_section(peer_files, sources)).rstrip() + "\n"
    except _RENDER_ERRORS as exc:
        _fail(f"cannot render {', '.join(str(p) for p in results)}: a value of an unexpected type or form "
              f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")
    if out is not None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(out, md)
        except OSError as exc:
            _fail(f"cannot write {out}: {exc.strerror or exc}")
    if out is None:  # --out writes the file; the report is then not printed as well
        if not as_json:
            _emit(md)
    else:
        _err.print(f"report: {out}" + (f" (plots: {plots}, {len(files)} PNG)" if plots is not None else ""),
                   markup=False)


def compare(
    old: Path = typer.Argument(..., help="The baseline result file."),
    new: Path = typer.Argument(..., help="The result to check against it."),
    threshold: float = typer.Option(5.0, "--threshold", help="Percent drop that counts as a regression (exit 1)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the comparison as Markdown."),
    force: bool = typer.Option(False, "--force", help="Compare results that measure different things (another "
                               "device, GPU model, VRAM limit, input geometry, model; for throughput dataset or "
                               "batch; for dataload and train-e2e cores, data and batch; see README) instead of "
                               "exiting 3."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON document (every cell's "
                                 "change, flag and note, the verdict and the exit code) instead of the table."),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Also write the comparison table as CSV to this file."),
) -> None:
    """Per engine × precision (dataload: loader × data · source · workers; train-e2e: loader × model) change
    between two results.

    Exit 0: no regression; 1: a regression beyond --threshold; 2: bad files or flags; 3: not
    comparable (the results measure different things; --force compares them anyway)."""
    from .. import benchmarks
    from ..reports import compare as cmpmod
    from ..reports.sources import load_source
    from ..core.tables import engine_label

    if not math.isfinite(threshold) or threshold < 0:
        _fail(f"--threshold must be a percentage ≥ 0 (got {threshold})")
    _check_csv(csv)
    try:
        o, n = load_source(old), load_source(new)
        cmp = cmpmod.compare(o, n, threshold, force=force)
        md = cmpmod.render_markdown(cmp, o, n)
    except ArtifactError as exc:
        _fail(str(exc))
    except _RENDER_ERRORS as exc:
        _fail(f"cannot compare {old} and {new}: a value of an unexpected type or form "
              f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")
    if out is not None:
        try:
            _write_atomic(out, md)
        except OSError as exc:
            _fail(f"cannot write {out}: {exc.strerror or exc}")
    console = ResultOutput(as_json)  # the table on stdout (on stderr with --json), never wrapped when piped
    unit = benchmarks.get(cmp.benchmark).compare.unit_short  # type: ignore[union-attr]
    t = Table(title=f"{o.name} → {n.name} ({unit}, threshold {threshold:g}%)")
    for col in (*benchmarks.get(cmp.benchmark).cell_heads, "OLD", "NEW", "Change", "Flag", "Note"):  # type: ignore[union-attr]
        t.add_column(col, justify="right" if col in ("OLD", "NEW", "Change") else "left")
    styles = {"regression": "bold red", "improvement": "green"}
    for c in cmp.changes:
        t.add_row(engine_label(c.engine), c.precision, c.old, c.new, cmpmod.pct_text(c.pct),
                  f"[{styles[c.flag]}]{c.flag}[/]" if c.flag in styles else c.flag, c.note)
    console.print(t)
    if cmp.incomparable:
        console.print(cmpmod.not_comparable_text(cmp), markup=False)
    if cmp.context:
        console.print(f"note: the two results also differ in: {'; '.join(cmp.context)}", markup=False)
    for line in cmp.stated:
        console.print(line, markup=False)
    console.print(cmpmod.verdict(cmp), markup=False)
    rc = EXIT_NOT_COMPARABLE if cmp.not_comparable else EXIT_REGRESSION if cmp.regressions else EXIT_OK
    if csv is not None:
        _write_csv(csv, table_rows(t))
    if as_json:
        from ..reports.machine import compare_document

        _print_json(compare_document(cmp, o, n, rc))
    raise Exit(rc)


def results_list(
    folder: Path = typer.Argument(Path("results"), help="Folder holding result files (default: results/, your "
                                  "own runs; the project's reference results: results/reference)."),
    as_json: bool = typer.Option(False, "--json", help="Print the list as one JSON array (one object per file)."),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Also write the list as CSV to this file."),
) -> None:
    """Every result file in a folder, newest first: benchmark, date, GPU, engines, headline, state."""
    from ..reports.results_list import is_result, list_results, reference_dir

    _check_csv(csv)
    try:
        listed = list_results(folder)
    except ArtifactError as exc:
        _fail(str(exc))
    console = ResultOutput(as_json)  # never wrapped when piped
    entries = [e for e in listed if is_result(e)]
    others = [e for e in listed if not is_result(e)]
    # After the table (or alone): what else ends in .json here, and why it is no result; where the
    # project's reference results are.
    apart = (f"not results ({len(others)}): " + "; ".join(f"{e.name}: {e.state}, {e.headline}" for e in others)
             if others else None)
    ref = reference_dir(folder)
    refs = (f"the project's reference results are apart: {len(list(ref.glob('*.json')))} files in {ref} "
            f"(kitctl results list {ref})") if ref is not None else None
    heads = ("File", "Benchmark", "Date", "GPU", "Engines", "Headline", "State")
    if csv is not None:
        _write_csv(csv, [list(heads), *[[e.name, e.benchmark, e.date, e.gpu, e.engines, e.headline, e.state]
                                        for e in entries]])
    if as_json:
        import dataclasses

        _print_json([dataclasses.asdict(e) for e in entries])
        return
    if not entries:
        console.print(f"no result files in {folder} yet (kitctl run … writes them there)", markup=False)
        for line in (apart, refs):
            if line:
                console.print(line, markup=False, soft_wrap=True)
        return
    t = Table(title=f"Results in {folder}, newest first")
    for col in heads:
        t.add_column(col, overflow="fold")
    for e in entries:
        t.add_row(e.name, e.benchmark, e.date, e.gpu, e.engines, e.headline,
                  f"[red]{e.state}[/]" if e.state == "unreadable" else e.state)
    console.print(t)
    if apart:
        console.print(apart, markup=False, soft_wrap=True)
    if refs:
        console.print(refs, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
    app.command("compare")(compare)
    results_app = typer.Typer(no_args_is_help=True, help="Browse result files.")
    results_app.command("list")(results_list)
    app.add_typer(results_app, name="results")
