"""What ``record`` does beside the command while it runs, each part in its own thread:
the run's Python packages, the GPUs, and the imports and validators that reading the
outputs needs after it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from replay_tui.capture import probes
from replay_tui.capture.handoff import inside_checks
from replay_tui.capture.outputs import lower_priority

if TYPE_CHECKING:
    from replay_tui.capture.outside import Outside


def _warm() -> None:
    """Import and build now what reading the outputs and keeping the run need after the
    command: the readers, the manifest's models and validators, the store."""
    import zipfile  # noqa: F401 - the torch-free checkpoint reader's

    import storage.objects
    import storage.store  # noqa: F401
    from storage.manifest import IntegrityInfo, RunManifest

    for model in (RunManifest, IntegrityInfo):  # built on first use (defer_build): now
        model.model_rebuild()
    inside_checks()


class SideWork:
    """What ``record`` learns while the command runs, each part in its own thread: the
    run's Python packages (a subprocess of the run's interpreter) and the GPUs
    (``nvidia-smi``), both at a lower priority, and the imports and validators that
    reading the outputs needs.  None of it depends on what the command does."""

    def __init__(self, interpreter: str | None) -> None:
        self.python = probes.PythonEnv()
        self.gpus = probes.GpuProbe()
        self.seconds: dict[str, float] = {}
        self.ended: dict[str, float] = {}  # time.time() when each part was done
        self._errors: list[BaseException] = []
        parts: list[tuple[str, Callable[[], None], bool]] = [("gpu_probe", self._gpus, True)]
        if interpreter is not None:  # None: the command runs in an image, probed there
            parts.insert(0, ("python_probe", lambda: self._python(interpreter), True))
        self._threads = [self._thread(name, fn, low) for name, fn, low in parts]
        # the imports hold the GIL: started with the command (start_warm), not before,
        # where they would slow the probes of the code and the data down
        self._warm = self._thread("warm", _warm, False)

    def _thread(self, name: str, fn: Callable[[], None], low: bool) -> threading.Thread:
        return threading.Thread(
            target=self._part, args=(name, fn, low), name=f"replay-tui-{name}", daemon=True
        )

    def _python(self, interpreter: str) -> None:
        self.python = probes.probe_python(interpreter)

    def _gpus(self) -> None:
        self.gpus = probes.probe_gpus()

    def _part(self, name: str, fn: Callable[[], None], low: bool) -> None:
        if low:
            lower_priority()
        t0 = time.monotonic()
        try:
            fn()
        except BaseException as e:  # a probe's: raised again by fill, in record's thread
            if fn is not _warm:  # the warm-up's: only lost time (imported again after)
                self._errors.append(e)
        finally:
            self.seconds[name] = round(time.monotonic() - t0, 4)
            self.ended[name] = time.time()

    def start(self) -> SideWork:
        """Start the probes (they wait on their subprocesses, not on the GIL)."""
        for t in self._threads:
            t.start()
        return self

    def start_warm(self) -> None:
        self._warm.start()
        self._threads.append(self._warm)

    def fill(self, outside: Outside) -> None:
        """Wait for the side work and put what it learnt into ``outside``."""
        for t in self._threads:
            t.join()
        if self._errors:
            raise self._errors[0]
        outside.python = self.python
        outside.gpus = self.gpus
