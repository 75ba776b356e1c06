"""Readable terminal output for the local stack, the demo and the chat: plain ANSI, no extra
package. Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""

from __future__ import annotations

import os
import sys
import textwrap
import threading
import time
from typing import Any, TextIO

RESET = "\033[0m"
STYLES = {
    "bold": "1",
    "italic": "3",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
    "grey": "90",
    "on_yellow": "30;43",
}
TAG_STYLES = {
    "stack": "cyan",
    "model": "yellow",
    "webhook": "blue",
    "consumer": "magenta",
    "compactor": "yellow",
}
LEVELS = {"quiet": 0, "normal": 1, "verbose": 2}


class Console:
    """Thread-safe lines on a terminal; `level` filters the stack's own progress lines."""

    def __init__(
        self, stream: TextIO | None = None, *, level: str = "normal", color: bool | None = None
    ):
        self.stream = stream or sys.stdout
        self.level = LEVELS[level]
        if color is None:
            color = (
                hasattr(self.stream, "isatty")
                and self.stream.isatty()
                and not os.environ.get("NO_COLOR")
                and os.environ.get("TERM") != "dumb"
            )
        self.color = bool(color)
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self.passed = 0  # the checks shown (`check`): how many passed
        self.failed: list[str] = []  # and which failed

    def style(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        codes = ";".join(STYLES[s] for s in styles if s in STYLES)
        return f"\033[{codes}m{text}{RESET}"

    def print(self, text: str = "") -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    def event(self, tag: str, text: str, *, level: str = "normal", warn: bool = False) -> None:
        """A progress line of the stack: `  12.3s  consumer   3 record(s) ...`."""
        if LEVELS[level] > self.level and not warn:
            return
        elapsed = self.style(f"{time.monotonic() - self._started:7.1f}s", "grey")
        label = self.style(f"{tag:<9}", "red" if warn else TAG_STYLES.get(tag, "grey"))
        self.print(f"{elapsed}  {label}  {self.style(text, 'red') if warn else text}")

    def heading(self, text: str) -> None:
        self.print()
        self.print(
            self.style(f"== {text} ", "bold") + self.style("=" * max(0, 72 - len(text)), "grey")
        )

    def say(self, who: str, text: str, *, style: str = "bold", width: int = 100) -> None:
        """One chat line, wrapped under its speaker: `  Maya  > I start the new job ...`."""
        prefix = f"  {who:>8} > "
        lines = textwrap.wrap(text, width=width - len(prefix)) or [""]
        self.print(self.style(prefix, style) + lines[0])
        for line in lines[1:]:
            self.print(" " * len(prefix) + line)

    def note(self, text: str, *, style: str = "grey") -> None:
        for line in text.splitlines() or [""]:
            self.print(self.style(f"    {line}", style))

    def check(self, ok: bool, text: str) -> None:
        """An expectation, marked ok or FAIL, and counted (`passed`, `failed`)."""
        mark = self.style("  ok  ", "green", "bold") if ok else self.style(" FAIL ", "red", "bold")
        self.print(f"{mark}{text}")
        if ok:
            self.passed += 1
        else:
            self.failed.append(text)

    def banner(self, lines: list[str], *, style: str = "on_yellow") -> None:
        width = max(len(line) for line in lines) + 4
        self.print(self.style(" " * width, style))
        for line in lines:
            self.print(self.style(f"  {line:<{width - 4}}  ", style))
        self.print(self.style(" " * width, style))

    def model_banner(self, model: Any) -> None:
        """Which model answers (a devstack.stack.ModelChoice): the offline stand-in, loudly."""
        if not model.offline:
            self.banner([f"MODEL: {model.label}"], style="bold")
            return
        self.banner(
            [
                "MODEL: OFFLINE STAND-IN. This is NOT AI.",
                "Replies are a scripted echo that shows what reached the model",
                "(days since, facts, summary). Set OPENAI_API_KEY, or OPENAI_BASE_URL",
                "for Ollama / vLLM / LM Studio, to talk to a real model.",
            ]
        )
