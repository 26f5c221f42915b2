"""A trainer must never outlive the process that started it (an editor window reloaded, an extension host that
crashed, a terminal closed): the host passes its pid in ``SAS_PARENT_PID``; when our parent is no longer that
process (we were re-parented, so it died), the run stops the way SIGTERM stops it: finish the step, checkpoint,
status ``stopped``. The run stays resumable. A training process started by a launcher (accelerate launch, for engines
that scale) watches the launcher instead, which watches nothing itself: the trainer that started it does.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


def parent_gone(expected: int) -> bool:
    return os.getppid() != expected


def watch_parent(
    on_gone: Callable[[int], None], expected: int | None = None, interval_s: float = 1.0
) -> threading.Thread | None:
    """Starts a daemon thread calling ``on_gone(pid)`` once, when our parent `expected` (default: the one named by
    ``SAS_PARENT_PID``) has gone."""
    if expected is None:
        value = os.environ.get("SAS_PARENT_PID", "")
        if not value.isdigit():
            return None
        expected = int(value)
    if parent_gone(expected):  # started by someone else (e.g. a shell between us): nothing to watch
        return None
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval_s):
            if parent_gone(expected):
                on_gone(expected)
                return

    t = threading.Thread(target=loop, name="parent-watchdog", daemon=True)
    t.start()
    return t
