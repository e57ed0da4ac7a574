"""Generated text of the selected request (the first one until the user picks another), streaming in."""
from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from gui.state.run_store import RunStore


class GeneratedText(QtWidgets.QPlainTextEdit):
    titleChanged = QtCore.Signal(str)

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.setObjectName("generatedText")
        self.setReadOnly(True)
        self.setPlaceholderText("The selected request's output streams here. Synthetic-token prompts and "
                                "random-weight models give no readable text.")
        self.store = store
        self.request_id: int | None = None   # None: follow the first request
        self._shown_id: int | None = None
        self._shown = ""

    def show_request(self, request_id: int | None) -> None:
        self.request_id = request_id
        self.refresh()

    def current_id(self) -> int | None:
        if self.request_id is not None:
            return self.request_id
        ids = self.store.lanes.column("request_id")
        return int(ids[0]) if len(ids) else None

    def refresh(self) -> None:
        rid = self.current_id()
        text = self.store.request_text(rid) if rid is not None else ""
        if rid != self._shown_id or not text.startswith(self._shown):
            self.setPlainText(text)
            self._shown_id = rid
            self.titleChanged.emit("Generated text" if rid is None else f"Generated text — request {rid}")
        elif len(text) > len(self._shown):
            # append only the new tail: re-setting the whole text would reset scrolling and cost O(n) per token
            cursor = QtGui.QTextCursor(self.document())
            cursor.movePosition(QtGui.QTextCursor.MoveOperation.End)
            cursor.insertText(text[len(self._shown):])
        self._shown = text
