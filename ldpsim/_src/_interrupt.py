"""Clean interrupts for the command line: SIGINT (Ctrl-C) and SIGTERM.

What a command does when it is interrupted: it stops, keeps what it has saved, prints one
line ``ldpsim <command>: interrupted by SIGINT; <what was saved and how to resume>`` and
exits with status 130 (SIGINT) or 143 (SIGTERM), the shell's 128 + signal number. A second
signal stops at once (``os._exit``, no clean-up beyond finishing a file write in progress).

Why this module exists: a Ctrl-C that lands while XLA compiles used to end in a
segmentation fault. jaxlib waits for a compilation with the GIL released and polls for
Python signals; a ``KeyboardInterrupt`` raised there abandons the wait, but the compilation
goes on in a thread of the PjRt client's thread pool. The interpreter then finalizes, the
garbage collector destroys the client (``~PjRtClient`` joins that pool) and the compile
thread dereferences a device that is being freed (backtrace of the core dump:
``PjRtCompiler::CompileAndLoad`` -> ``PjRtLoadedExecutable::Create`` ->
``SingleDeviceSharding::Create`` -> SIGSEGV, while the main thread is in
``Py_FinalizeEx`` -> ``~PjRtClient`` -> ``~ThreadPool``). So the handler installed here
never raises while the main thread is inside a JAX compilation: it notes the signal, says
so on stderr, and a watcher thread re-delivers it (``signal.pthread_kill`` to the main
thread) as soon as the compilation has returned. No native thread is then still working when Python exits.

Two more ways an interrupt went wrong, handled here too:

* a ``KeyboardInterrupt`` can be swallowed: by Python inside a garbage-collector callback
  (JAX registers one) or a ``__del__`` ("Exception ignored in ..."), or by a bare
  ``except:`` (JAX has several, one right after a compilation returns); the command then
  ran on to the end. The watcher raises it again until the command reports it (not while
  the main thread is still handling it: ``sys._current_exceptions``), and
  ``sys.unraisablehook`` keeps the swallowed one quiet;
* a signal in the middle of writing a results row could leave half a row in the CSV:
  writers wrap each write in :func:`critical`, which holds the interrupt until the write
  (and its flush) is complete.

Library code needs nothing from this module: without :func:`install` (Python API use)
:func:`critical` is a no-op and signals behave as Python's defaults.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["critical", "exit_status", "guarded", "install", "message", "note", "received"]

#: Signals handled, with the exit status of a command they stop (128 + signal number).
SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Code objects of JAX's compile entry points (module file, function names): a signal that
#: arrives while one is on the main thread's stack is held until it returns.
_COMPILE_FILE = "jax/_src/compiler.py"
_COMPILE_FUNCTIONS = frozenset({"backend_compile_and_load", "backend_compile"})
_WATCH_INTERVAL = 0.05
#: Seconds a raised interrupt has to reach the command before it is raised again.
_GRACE = 0.5


class _State:
    def __init__(self) -> None:
        self.signum: int | None = None   # the first signal received
        self.acked = False               # a command has reported the interrupt
        self.refire = False              # the next handler call is our own re-delivery
        self.critical = 0                # depth of critical sections
        self.pending = False             # an interrupt held by a critical section
        self.hard = False                # a second signal: exit at once after the section
        self.announced = False
        self.note = "nothing was saved"
        self.delivered_at: float | None = None   # when KeyboardInterrupt was last raised
        self.watcher: threading.Thread | None = None
        self.stop = threading.Event()


_state = _State()


def _name(signum: int | None) -> str:
    try:
        return signal.Signals(signum).name
    except (TypeError, ValueError):
        return f"signal {signum}"


def _say(text: str) -> None:
    """One line on stderr, written with os.write: safe while the main thread is printing."""
    try:
        os.write(2, (text.rstrip("\n") + "\n").encode(errors="replace"))
    except OSError:  # pragma: no cover (stderr closed)
        pass


def _in_compile(frame: Any) -> bool:
    """Whether ``frame`` or one of its callers is a JAX compilation entry point."""
    while frame is not None:
        code = frame.f_code
        if (code.co_name in _COMPILE_FUNCTIONS
                and code.co_filename.replace("\\", "/").endswith(_COMPILE_FILE)):
            return True
        frame = frame.f_back
    return False


def _hard_exit() -> None:
    _say(f"ldpsim: second signal; stopping at once ({_state.note})")
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - exiting anyway
        pass
    os._exit(exit_status())


def _handling_interrupt(thread_id: int) -> bool:
    """Whether the thread is running an ``except``/``finally``/``__exit__`` block for a
    KeyboardInterrupt (it is on its way up to the command, which will report it)."""
    exc = sys._current_exceptions().get(thread_id)
    if isinstance(exc, tuple):  # Python < 3.12: (type, value, traceback)
        exc = exc[1]
    return isinstance(exc, KeyboardInterrupt)


def _watch() -> None:
    """Deliver the interrupt until the command reports it (:func:`exit_status`).

    Held while the main thread is in a JAX compilation or a critical section; delivered
    again when it was raised more than :data:`_GRACE` seconds ago and the main thread is no
    longer handling it: swallowed by an ``except:`` (JAX has several, one right after a
    compilation returns), a gc callback or a ``__del__``.
    """
    main = threading.main_thread().ident
    st = _state
    while not st.stop.wait(_WATCH_INTERVAL) and not st.acked:
        frame = sys._current_frames().get(main)
        if frame is None or _in_compile(frame) or st.critical or st.refire:
            continue
        if st.delivered_at is not None and (
                time.monotonic() - st.delivered_at < _GRACE or _handling_interrupt(main)):
            continue
        st.refire = True
        # A real signal to the main thread (not _thread.interrupt_main): it also wakes a
        # blocking call such as time.sleep (EINTR), so the interrupt is not delayed.
        signal.pthread_kill(main, st.signum or signal.SIGINT)


def _start_watcher() -> None:
    if _state.watcher is None:
        _state.watcher = threading.Thread(target=_watch, name="ldpsim-interrupt", daemon=True)
        _state.watcher.start()


def _deliver() -> None:
    """Raise the interrupt, and make sure it reaches the command (:func:`_watch`)."""
    _state.delivered_at = time.monotonic()
    _start_watcher()
    raise KeyboardInterrupt


def _handler(signum: int, frame: Any) -> None:
    st = _state
    if st.refire:
        st.refire = False
    elif st.signum is not None:     # a second signal from outside: stop at once
        if st.critical:
            st.hard = True
            return
        _hard_exit()
    else:
        st.signum = signum
    if st.acked:
        return
    if st.critical:
        st.pending = True
        st.delivered_at = None
        _start_watcher()   # delivers it if the section ends without raising it
        return
    if _in_compile(frame):
        if not st.announced:
            st.announced = True
            _say(f"ldpsim: {_name(signum)} received; stopping when the XLA compilation in "
                 "progress returns (send it again to stop at once)")
        st.delivered_at = None
        _start_watcher()
        return
    _deliver()


def _unraisable(previous: Callable) -> Callable:
    def hook(unraisable: Any) -> None:
        if (isinstance(unraisable.exc_type, type)
                and issubclass(unraisable.exc_type, KeyboardInterrupt)
                and _state.signum is not None and not _state.acked):
            _state.delivered_at = None   # swallowed (gc callback, __del__): deliver again
            _start_watcher()
            return
        previous(unraisable)
    return hook


def install() -> Callable[[], None]:
    """Handle SIGINT and SIGTERM as described in the module docstring (main thread only).

    Returns:
        A function that puts back the previous handlers and ``sys.unraisablehook``.
    """
    global _state
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    _state = _State()
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, _handler)
    old_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(old_hook)

    def restore() -> None:
        _state.stop.set()
        if _state.watcher is not None and _state.watcher is not threading.current_thread():
            _state.watcher.join(1.0)
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        sys.unraisablehook = old_hook

    return restore


def guarded(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap a command-line ``main``: handlers installed for its duration, an interrupt that
    escapes it (or is still held when it returns) reported as one line with its status."""

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        argv = args[0] if args and args[0] is not None else sys.argv[1:]
        command = next((a for a in argv if not str(a).startswith("-")), None)
        restore = install()
        try:
            status = main(*args, **kwargs)
            if received() is not None and not _state.acked:
                _say(message(command))
                return exit_status()
            return status
        except KeyboardInterrupt:
            _say(message(command))
            return exit_status()
        finally:
            restore()

    return wrapper


def received() -> int | None:
    """The signal that interrupted this command, or None."""
    return _state.signum


def exit_status() -> int:
    """128 + the signal number (130 for SIGINT, 143 for SIGTERM); marks it as reported."""
    _state.acked = True
    return 128 + int(_state.signum or signal.SIGINT)


def note(text: str) -> None:
    """Set what an interrupt at this point leaves saved and how to go on (one sentence)."""
    _state.note = text


def message(command: str | None) -> str:
    """The one line a command prints when interrupted."""
    who = f"ldpsim {command}" if command else "ldpsim"
    return f"{who}: interrupted by {_name(_state.signum or signal.SIGINT)}; {_state.note}"


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends (a results row written and flushed whole);
    the held interrupt is raised as ``KeyboardInterrupt`` when it ends."""
    st = _state
    st.critical += 1
    try:
        yield
    finally:
        st.critical -= 1
        if not st.critical and sys.exc_info()[0] is None:
            if st.hard:
                _hard_exit()
            if st.pending and not st.acked:
                st.pending = False
                _deliver()
