"""The report files of a burn-in: the document as JSON, the HTML report, the Prometheus textfile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuning.errors import InputError
from tuning.outfile import write_atomic

__all__ = ["write_reports"]


def write_reports(doc: dict, findings: list[dict], opts: Any) -> None:
    """Write the reports ``opts`` (:class:`tuning.burnin.run.BurninOptions`: ``report_json``, ``html``,
    ``prom_file``) asks for and list them in ``doc["reports"]`` (kind -> path).

    Raises:
        InputError: a report could not be written (names its flag and the OS's reason).
    """
    import json

    from tuning.burnin import html_report, prom

    doc["reports"] = {}
    writers = (("json", "--report-json", opts.report_json,
                lambda p: write_atomic(p, (json.dumps(doc, indent=2, default=str) + "\n").encode())),
               ("html", "--html", opts.html, lambda p: html_report.write(doc, findings, p)),
               ("prom", "--prom-file", opts.prom_file, lambda p: prom.write(doc, findings, p)))
    for kind, flag, path, write in writers:
        if not path:
            continue
        try:
            write(Path(path))
        except OSError as e:
            raise InputError(flag, str(path), f"cannot write: {e.strerror or e}") from None
        doc["reports"][kind] = str(path)
