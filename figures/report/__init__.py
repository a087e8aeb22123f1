"""The claims report: ``REPORT.md`` (the answer first), ``REPORT-details.md`` (the appendix) and ``REPORT.html``,
built from the figures' JSON sidecars (``python -m figures``, or ``python -m figures.report`` to rebuild from
existing sidecars without running a figure). Modules: :mod:`.data` (what is read), :mod:`.answer` (the one
table and the recommendation), :mod:`.claims` (verdict rows), :mod:`.findings`, :mod:`.guidance`,
:mod:`.training` (protocol tables), :mod:`.render` (blocks, markdown, HTML, README block), :mod:`.check`.
"""
from figures.report.claims import ROWS, key_number, rows_verdict, summary
from figures.report.data import CLAIM_IDS, INFO, build, load_sidecars, theory_rows
from figures.report.findings import key_findings
from figures.report.render import (README_END, README_START, blocks, detail_blocks, html_page, markdown,
                                   readme_block, update_readme, write)

__all__ = ["CLAIM_IDS", "ROWS", "INFO", "build", "load_sidecars", "theory_rows", "summary", "key_number", "rows_verdict",
           "key_findings", "blocks", "detail_blocks", "markdown", "html_page", "readme_block", "update_readme", "write",
           "README_START", "README_END"]
