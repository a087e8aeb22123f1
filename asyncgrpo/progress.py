"""Progress for long work: a tqdm bar on a terminal, one line per finished stage anywhere else.

In a log file or CI (stderr not a terminal) tqdm writes a carriage-return frame per update, thousands of
them per run (issue 27 item 16). :func:`progress` returns a real ``tqdm`` bar when stderr is a terminal
and otherwise a :class:`StageLine` with the same small surface (iteration, ``update``, ``set_postfix``,
``close``, context manager) that prints ``desc: n/total done in s`` once, when the stage ends.
"""
from __future__ import annotations

import sys
import time


class StageLine:
    """A silent progress object that writes one line to stderr when closed (if not disabled)."""

    def __init__(self, iterable=None, total=None, desc: str = "", disable: bool = False, initial: int = 0, **_):
        self.iterable = iterable
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self.desc, self.disable, self.n = desc, disable, int(initial)
        self.postfix = ""
        self._t0 = time.perf_counter()
        self._closed = False

    def __iter__(self):
        for x in self.iterable:
            yield x
            self.n += 1
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += int(n)

    def set_postfix(self, *args, **kw) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in kw.items())

    def set_postfix_str(self, s: str = "", **_) -> None:
        self.postfix = s

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.disable and self.n:
            tot = f"/{self.total}" if self.total is not None else ""
            extra = f" ({self.postfix})" if self.postfix else ""
            print(f"{self.desc}: {self.n}{tot} done in {time.perf_counter() - self._t0:.1f} s{extra}",
                  file=sys.stderr, flush=True)


def progress(iterable=None, *, total=None, desc: str = "", disable: bool = False, **kw):
    """A ``tqdm.auto.tqdm`` bar if stderr is a terminal, else a :class:`StageLine` (same arguments)."""
    if not disable and sys.stderr.isatty():
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, **kw)
    return StageLine(iterable, total=total, desc=desc, disable=disable, **kw)


__all__ = ["progress", "StageLine"]
