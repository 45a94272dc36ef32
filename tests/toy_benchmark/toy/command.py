"""`kitctl run toy`: its flags (declared with the CLI's Option) into its config; it ends with an Exit."""
from __future__ import annotations

from kitctl.cli.options import O_JSON, Option
from kitctl.errors import EXIT_OK, Exit, Fail, fail

from .config import ToyConfig


def toy(count: int = Option(2, help="How many units."), as_json: bool = O_JSON) -> None:
    """Count to --count, one unit at a time."""
    try:
        cfg = ToyConfig.from_flags(count)
    except Fail as exc:
        raise fail(exc) from None
    print(cfg.to_json() if as_json else " ".join(str(i) for i in range(1, cfg.count + 1)))
    raise Exit(EXIT_OK)
