"""The host loop every training driver runs: steps, reports, callbacks, progress, stopping.

:func:`run_loop` is used by :func:`ldpsim.simulate` (federated rounds, one or
several vmapped runs) and :func:`ldpsim.fl.train_dpsgd` (centralised DP-SGD
epochs), so that progress bars, the report schedule and callbacks behave the same way in
both: a report is made every ``report_every`` steps and after the last one; each of its
rows is passed to ``callback`` as soon as it exists; a callback that returns ``False``
stops the loop after that report (the rows so far are returned); ``stop_before`` ends it
before a step (a privacy budget), reporting the last step done if it had no report yet.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

__all__ = ["run_loop", "status"]


def status(text: str) -> None:
    """One status line on stderr (``ldpsim: loading data...``): what a run is doing before
    its progress bar has anything to show."""
    print(f"ldpsim: {text}...", file=sys.stderr, flush=True)

Row = dict


def run_loop(steps: int, step: Callable[[Any, int], Any], carry: Any, *,
             report: Callable[[Any, int], list[Row]], report_every: int = 1,
             callback: Callable[[Row], Any] | None = None, progress: bool = False,
             desc: str = "rounds", unit: str = "round",
             postfix: Callable[[Row], dict] | None = None, start: int = 0,
             done: list[Row] | None = None,
             checkpoint: Callable[[Any, int, list[Row], bool], None] | None = None,
             stop_before: Callable[[Any, int], bool] | None = None
             ) -> list[Row]:
    """Run ``carry = step(carry, i)`` for ``i < steps``, reporting on schedule.

    Args:
        steps: number of steps (rounds, epochs).
        step: ``(carry, i) -> carry``; the work of step ``i`` (0-based).
        carry: the initial carry (whatever ``step`` and ``report`` share).
        report: ``(carry, i) -> rows`` after step ``i`` when a report is due.
        report_every: report after every k-th step, and after the last.
        callback: called with each row as it is made; returning ``False`` stops the loop.
        progress: show a tqdm bar over the steps.
        desc, unit: the bar's label and unit.
        postfix: ``row -> dict`` shown on the bar after a report (the last row's).
        start, done: resume at step ``start`` with the rows ``done`` reported before it
            (a checkpoint's); ``done`` is passed to ``callback`` first, so that the
            callback sees the whole history.
        checkpoint: ``(carry, next_step, rows, final)`` called after each step once its
            report and callbacks are done (``final``: the loop ends or stops there), and
            with ``final`` when an interrupt (``KeyboardInterrupt``: SIGINT, or SIGTERM
            through :mod:`ldpsim._src._interrupt`) ends the loop, at the last step whose
            report and callbacks were done; the interrupt is raised again after it.
        stop_before: ``(carry, i) -> bool`` asked before step ``i``; ``True`` ends the loop
            there: step ``i − 1``, if it ran in this call and had no report, is reported
            first (the last row is always the last step done), then ``checkpoint`` is
            called with ``final``.

    Returns:
        Every reported row, in order (``done`` first).
    """
    rows: list[Row] = list(done or [])
    for row in rows:
        if callback is not None and callback(row) is False:
            return rows
    bar = None
    if progress:
        from ldpsim._src._progress import progress_bar  # tqdm on a terminal, else plain lines

        # The first step compiles: say so until it is done.
        bar = progress_bar(total=steps, initial=start, unit=unit,
                   desc=f"{desc} (compiling)" if start < steps else desc)
    # The last point a checkpoint may be taken at: (carry, next step, rows so far).
    safe = (carry, start, len(rows))
    try:
        for i in range(start, steps):
            if stop_before is not None and stop_before(carry, i):
                if i > start and i % report_every != 0:   # step i - 1 has no row yet
                    new = report(carry, i - 1)
                    rows.extend(new)
                    for row in new:
                        if callback is not None:
                            callback(row)
                if checkpoint is not None:
                    checkpoint(carry, i, rows, True)
                break
            carry = step(carry, i)
            if bar is not None and i == start:
                bar.set_description(desc, refresh=False)
            stop = False
            if (i + 1) % report_every == 0 or i == steps - 1:
                new = report(carry, i)
                rows.extend(new)
                for row in new:
                    if callback is not None and callback(row) is False:
                        stop = True
                if bar is not None and new and postfix is not None:
                    bar.set_postfix(postfix(new[-1]))
            if bar is not None:
                bar.update(1)
            safe = (carry, i + 1, len(rows))
            if checkpoint is not None:
                checkpoint(carry, i + 1, rows, stop or i == steps - 1)
            if stop:
                break
    except KeyboardInterrupt:
        if checkpoint is not None and safe[1] > start:
            checkpoint(safe[0], safe[1], rows[:safe[2]], True)
        raise
    finally:
        if bar is not None:
            bar.close()
    return rows
