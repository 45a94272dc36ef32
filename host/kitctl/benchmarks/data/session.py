"""A data benchmark's run (datasize, dataload, train-e2e): the artifact document, new or resumed, the
save-after-every-unit loop and its ending (interrupted: the partial kept)."""
from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any, Callable


from ...core import artifact as art
from ...core import signals
from ...core.gpu import detect_gpu
from ...core.provenance import host_info
from ...core.recorded import configuration
from ...core.signals import Interrupted
from ...errors import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, Exit, Fail, fail


def new_doc(benchmark: str, config_json: dict[str, Any], gpu: dict[str, Any] | None = None) -> dict[str, Any]:
    """A new data artifact; `gpu`: the GPU its trials may use (detect_gpu), else host.gpu is null."""
    host = host_info()
    host["gpu"] = gpu
    return art.new_document(benchmark, uuid.uuid4().hex[:12], config_json, host,
                            {"name": "local", "interpreter": None})


def open_store(benchmark: str, results_dir: Path, resume: Path | None,
               new_config: Callable[[], Any], config_of: Callable[[dict[str, Any]], Any], uses_gpu: bool = False):
    """(store, doc, config): a new run's, or a partial's for --resume (its recorded configuration and GPU).
    `uses_gpu`: a benchmark whose trials may run on a GPU records the one they would use (detect_gpu)."""
    try:
        if resume is not None:
            store, doc = art.open_for_resume(resume)
            if doc.get("benchmark") != benchmark:
                store.release()
                raise Fail(f"--resume {resume}: a {doc.get('benchmark')} artifact, not {benchmark}")
            if uses_gpu:
                _same_gpu_or_refuse(resume, doc, store)
            cfg = config_of(configuration(doc))
            doc.setdefault("resumes", []).append({"argv": sys.argv, "utc": art.utc_iso()})
            doc["state"] = "running"
            return store, doc, cfg
        cfg = new_config()
        store = art.ArtifactStore.pending(results_dir, benchmark, "rrc224", "corpus")
        return store, new_doc(benchmark, cfg.to_json(), detect_gpu() if uses_gpu else None), cfg
    except art.ArtifactError as exc:
        raise Fail(str(exc)) from None


def _same_gpu_or_refuse(resume: Path, doc: dict[str, Any], store: art.ArtifactStore) -> None:
    """A partial whose trials had a GPU continues only where that GPU is: its remaining trials are pinned to the
    recorded UUID (a GPU loader elsewhere would fail every run), and its finished cells were measured on that
    machine, whose CPU and memory are the loaders' as much as the GPU is."""
    recorded = (doc.get("host") or {}).get("gpu") or {}
    if not recorded.get("uuid"):
        return
    here = detect_gpu()
    if (here or {}).get("uuid") == recorded["uuid"]:
        return
    store.release()
    where = "no GPU" if here is None else f"{here.get('name', 'a GPU')} {here.get('uuid')}"
    raise Fail(f"--resume {resume}: the partial ran on {recorded.get('name', 'a GPU')} {recorded['uuid']}, "
               f"not on this host ({where} here); continue it on that machine, or start a new run")


def run_command(benchmark: str, results_dir: Path, resume: Path | None, new_config: Callable[[], Any],
                config_of: Callable[[dict[str, Any]], Any], runtime_of: Callable[[Any], dict[str, Any]],
                body: Callable[[Any, art.ArtifactStore, dict[str, Any], Callable[[str], None]], None],
                print_table: Callable[..., None], all_ok: Callable[[dict[str, Any]], bool],
                uses_gpu: bool = False, as_json: bool = False, csv: Path | None = None,
                given: list[tuple[str, str]] = ()) -> None:
    """What every data benchmark's `kitctl run` does after parsing its flags: open the run (new or
    --resume; bad input is one line, exit 2), record its runtime (and, `uses_gpu`, the GPU its trials see),
    run its units (body(cfg, store, doc, note) saves after each), print its end table and exit (0 all ok,
    else incomplete). `given`: the flags on the command line; beside --resume only the output flags are taken
    (the partial's configuration is the run's)."""
    from ...run.session import refuse_beside_resume

    if resume is not None:
        try:
            refuse_beside_resume(list(given), accepts=("resume",))
        except Fail as exc:
            raise fail(exc) from None
    from ...output import ResultOutput, check_csv_path, stderr_console

    try:
        check_csv_path(csv)
    except Fail as exc:
        raise fail(exc) from None
    console = ResultOutput(as_json, csv)  # the end table (stdout) or --json; progress notes on stderr
    progress = stderr_console()
    try:
        store, doc, cfg = open_store(benchmark, results_dir, resume, new_config, config_of, uses_gpu)
    except Fail as exc:
        raise fail(exc) from None
    try:  # an absent image (docker runtime) is refused before anything runs
        doc["runtime"] = runtime_of(cfg)
    except Fail as exc:
        store.release()
        raise fail(exc) from None
    # As for the engine benchmarks: a local trial group left by a controller that died is killed before this run
    # measures anything (its CPU and GPU use would be this run's noise).
    from ...runtimes.runstate import sweep_local_orphans

    for orphan in sweep_local_orphans():
        progress.print(f"killed an orphaned local trial: {orphan}")
    final = execute(store, doc, lambda: body(cfg, store, doc, progress.print))
    print_table(console, doc, final)
    try:
        console.finish(doc)
    except Fail as exc:
        raise fail(f"{exc} (the artifact is written)") from None
    raise Exit(EXIT_OK if all_ok(doc) else EXIT_INCOMPLETE)


def save(store: art.ArtifactStore, doc: dict[str, Any]) -> None:
    doc["updated_utc"] = art.utc_iso()
    store.save_partial(doc)


def execute(store: art.ArtifactStore, doc: dict[str, Any], body: Callable[[], None]) -> Path:
    """Run body (which saves after every unit), then write the final artifact; a signal, or a runtime that can
    start no more trials (a Docker daemon gone, an image removed), keeps the partial. The run's runtimes are
    closed at the end, whatever happened."""
    from ...runtimes.base import RuntimeUnavailable
    from .trial import close_runtimes

    try:
        body()
        doc["state"] = "complete"
        doc["finished_utc"] = art.utc_iso()
        with signals.critical():
            final = store.finalize(doc)
            signals.stop_interrupting()
        return final
    except Interrupted as exc:
        signals.stop_interrupting()
        doc["state"], doc["interrupted_by"] = "interrupted", str(exc)
        try:
            save(store, doc)
            kept = f"partial artifact kept: {store.partial} (continue with --resume {store.partial})"
        except art.ArtifactError:
            kept = "nothing written"
        raise fail(f"interrupted ({exc}); {kept}", EXIT_INTERRUPTED)
    except RuntimeUnavailable as exc:
        doc["state"] = "interrupted"
        doc["interrupted_by"] = f"runtime: {exc}"
        try:
            save(store, doc)
            kept = f"partial artifact kept: {store.partial} (continue with --resume {store.partial})"
        except art.ArtifactError:
            kept = "nothing written"
        raise fail(f"{exc}; {kept}")
    except art.ArtifactError as exc:
        raise fail(exc)
    finally:
        close_runtimes(doc["run_id"])
        store.release()
