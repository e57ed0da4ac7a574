"""Input fields checked as they are typed, each with the reason it is wrong shown right under it."""
from __future__ import annotations

from typing import Callable

from PySide6 import QtCore, QtWidgets

from backend.errors import InputError
from backend.workload.spec import LengthDist

from gui.settings import remember_folder, start_folder

MAX_TOKENS = 1 << 20
MAX_BATCH = 1 << 16

Parser = Callable[[str], object]


def whole(name: str, low: int = 1, high: int = MAX_TOKENS) -> Parser:
    def parse(text: str) -> int:
        text = text.strip().replace("_", "")
        if not text.lstrip("-").isdigit():
            raise ValueError(f"{name} must be a whole number, got {text!r}" if text else f"{name} is required")
        value = int(text)
        if value < low:
            raise ValueError(f"{name} must be at least {low}, got {value}")
        if value > high:
            raise ValueError(f"{name} must be at most {high:,}, got {value:,}")
        return value
    return parse


def number(name: str, low: float = 0.0, high: float = 1e9, low_inclusive: bool = True) -> Parser:
    def parse(text: str) -> float:
        text = text.strip()
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {text!r}" if text else f"{name} is required") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{name} must be a finite number")
        if value < low or (value == low and not low_inclusive):
            raise ValueError(f"{name} must be {'at least' if low_inclusive else 'more than'} {low:g}, got {value:g}")
        if value > high:
            raise ValueError(f"{name} must be at most {high:g}, got {value:g}")
        return value
    return parse


def length(name: str) -> Parser:
    """N or A:B, as the load driver's --prompt-len / --output-len take them."""
    def parse(text: str) -> str:
        try:
            LengthDist.parse(text.strip(), name)
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return text.strip()
    return parse


def whole_list(name: str, high: int = MAX_TOKENS) -> Parser:
    """A comma-separated list of positive whole numbers, e.g. 1,2,4,8."""
    item = whole(f"each {name}", 1, high)

    def parse(text: str) -> list[int]:
        parts = [p for p in text.replace(" ", "").split(",") if p]
        if not parts:
            raise ValueError(f"{name}: give a comma-separated list such as 1,2,4,8")
        return [item(p) for p in parts]
    return parse


class ValidatedField(QtWidgets.QWidget):
    """A QLineEdit parsed on every keystroke; `value` is the parsed value or None while invalid."""

    validityChanged = QtCore.Signal()
    valueChanged = QtCore.Signal()

    def __init__(self, text: str, parse: Parser, placeholder: str = "", tooltip: str = "",
                 allow_empty: bool = False, parent=None):
        super().__init__(parent)
        self._parse = parse
        self._allow_empty = allow_empty
        self.edit = QtWidgets.QLineEdit(text)
        self.edit.setPlaceholderText(placeholder)
        self.edit.setToolTip(tooltip)
        self.error_label = QtWidgets.QLabel()
        self.error_label.setStyleSheet("color: #c0392b;")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addWidget(self.edit)
        layout.addWidget(self.error_label)
        self.value = None
        self.error = ""
        self.edit.textChanged.connect(self._check)
        self._check(text)

    def text(self) -> str:
        return self.edit.text()

    def setText(self, text: str) -> None:
        self.edit.setText(text)
        self.edit.setCursorPosition(0)   # show the start of a long value, not its end

    @property
    def is_valid(self) -> bool:
        return not self.error

    def changeEvent(self, event: QtCore.QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QtCore.QEvent.Type.EnabledChange:
            self._show_error()

    def _show_error(self) -> None:
        """The reason beside the field, while the field is in use (a disabled one does not count)."""
        shown = bool(self.error) and self.isEnabled()
        self.error_label.setText(self.error)
        self.error_label.setVisible(shown)
        self.edit.setStyleSheet("border: 1px solid #c0392b;" if shown else "")

    def _check(self, text: str) -> None:
        was_valid = self.is_valid
        if self._allow_empty and not text.strip():
            self.value, self.error = None, ""
        else:
            try:
                self.value, self.error = self._parse(text), ""
            except ValueError as exc:
                self.value, self.error = None, str(exc)
        self._show_error()
        if was_valid != self.is_valid:
            self.validityChanged.emit()
        self.valueChanged.emit()


def open_file(parent: QtWidgets.QWidget, title: str, file_filter: str, use: Callable[[str], object],
              rejected: QtCore.SignalInstance) -> None:
    """Ask for a file and hand its path to `use`; a file it refuses (InputError) goes to `rejected` as one line.
    The dialog opens where the last one was used (remembered between sessions)."""
    path, _ = QtWidgets.QFileDialog.getOpenFileName(parent, title, start_folder("files"), file_filter)
    if path:
        remember_folder("files", path)
        try:
            use(path)
        except InputError as exc:
            rejected.emit(str(exc))
