"""A long-running command stops on Ctrl-C even when the kernel hands the signal to another of its
threads (the main thread is then not woken by the signal itself)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import signal, threading, time
    from spotline.cli.stopping import StopSignals

    stop = StopSignals()

    def interrupt_from_here() -> None:
        time.sleep(0.3)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread, not main
        time.sleep(30)

    threading.Thread(target=interrupt_from_here, daemon=True).start()
    print(stop.wait().name, flush=True)
    """
)


def test_a_signal_delivered_to_another_thread_ends_the_wait() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SIGINT"


def test_sigterm_ends_the_wait_too() -> None:
    script = SCRIPT.replace("signal.SIGINT)", "signal.SIGTERM)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SIGTERM"
