"""Several replays at once, for a backend whose runs happen elsewhere (a Slurm cluster).

Each replay waits on its own job in its own thread with its own store connection (a
SQLite connection belongs to one thread; the store's busy timeout orders the writes).
Results come back in the order the work was given, whatever order the jobs end in.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

from replay_tui.replay.backends import get_backend
from replay_tui.replay.context import OnEvent, ReplayEvent
from replay_tui.replay.plan import ReplayOptions
from storage.store import RunStore

T = TypeVar("T")
MAX_THREADS = 64


def fans_out(options: ReplayOptions) -> bool:
    """Whether ``options.backend`` runs replays elsewhere, so several can wait at once."""
    return bool(getattr(get_backend(options.backend), "concurrent", False))


def tagged(emit: OnEvent, tag: str) -> OnEvent:
    """``emit`` with every message prefixed by ``tag`` (which replay said it)."""
    lock = threading.Lock()

    def on_event(ev: ReplayEvent) -> None:
        with lock:
            emit(ReplayEvent(ev.stage, ev.state, f"[{tag}] {ev.message}"))

    return on_event


def run_each(
    store_path: Path,
    work: Sequence[Callable[[RunStore, Callable[[], bool]], T]],
    *,
    should_cancel: Callable[[], bool] = lambda: False,
    limit: int = 0,
) -> list[T]:
    """Call every ``work(store, should_cancel)`` in its own thread with its own RunStore;
    their results in order.  ``limit`` caps the threads (0: one per item, at most
    MAX_THREADS).  Ctrl-C or SIGTERM cancels every one (each stops what it started, e.g.
    ``scancel``) and is raised once all have ended; so is any other exception."""
    if not work:
        return []
    n = min(len(work), limit if limit > 0 else MAX_THREADS)
    stop = threading.Event()

    def cancelled() -> bool:
        return stop.is_set() or should_cancel()

    def one(fn: Callable[[RunStore, Callable[[], bool]], T]) -> T:
        with RunStore(store_path) as s:
            return fn(s, cancelled)

    def on_term(signum: int, frame: object) -> None:
        stop.set()

    in_main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, on_term) if in_main else None
    try:
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="replay") as pool:
            futures = [pool.submit(one, fn) for fn in work]
            try:
                wait(futures)
            except KeyboardInterrupt:
                stop.set()
                wait(futures)
                raise
            return [f.result() for f in futures]
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, old)
