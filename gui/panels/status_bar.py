"""A status bar whose messages are never clipped.

QStatusBar draws a message in whatever room its permanent widgets leave, and cuts it there: at
1,400 px the model, device, dtype, profile and CPU labels left "Finished: precision swe…". Here the
message is a label of its own that claims its whole width first; the permanent labels give way,
each eliding its end ("device: cpu (AMD EP…)", the whole text in its tooltip). A message wider than
the whole bar wraps onto a second line and the bar grows, rather than losing its end.

showMessage, currentMessage and clearMessage keep QStatusBar's meaning (a timeout too), so every
caller of window.statusBar() gets this behaviour without a change.
"""
from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

ELLIPSIS = "…"
SPACING = 6   # QStatusBar's spacing between its widgets


class ElidedLabel(QtWidgets.QLabel):
    """A label that keeps its whole text (text() is unchanged) and paints as much as fits, ending in "…";
    it asks for its full width but can shrink to an ellipsis."""

    def minimumSizeHint(self) -> QtCore.QSize:
        margins = self.contentsMargins()
        return QtCore.QSize(self.fontMetrics().horizontalAdvance(ELLIPSIS) + margins.left() + margins.right(),
                            super().minimumSizeHint().height())

    def shown_text(self) -> str:
        """What is painted now: the text, elided to the label's width."""
        return self.fontMetrics().elidedText(self.text(), QtCore.Qt.TextElideMode.ElideRight,
                                             self.contentsRect().width())

    def is_elided(self) -> bool:
        return self.shown_text() != self.text()

    def paintEvent(self, event: QtGui.QPaintEvent) -> None:
        painter = QtGui.QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.contentsRect(), int(self.alignment() | QtCore.Qt.AlignmentFlag.AlignVCenter),
                         self.shown_text())

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:
        super().resizeEvent(event)
        self._tip()

    def setText(self, text: str) -> None:
        super().setText(text)
        self._tip()

    def setToolTip(self, tip: str) -> None:
        self._own_tip = tip
        super().setToolTip(tip)

    def _tip(self) -> None:
        """An elided label shows its whole text on hover (unless it has a tooltip of its own)."""
        super().setToolTip(getattr(self, "_own_tip", "") or (self.text() if self.is_elided() else ""))


class MessageBar(QtWidgets.QStatusBar):
    """The window's status bar: the message first, the permanent widgets in what is left.

    Room is shared by capping the permanent widgets' maximum widths, never by a minimum width on the
    message: a minimum would become the window's, and a long message would stop the user from
    making the window narrower."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.message = QtWidgets.QLabel()
        self.message.setObjectName("statusMessage")
        self.message.setWordWrap(True)
        self.message.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.message.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)   # copy a path
        # its width is what the permanent widgets leave: it asks for none of its own
        self.message.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.addWidget(self.message, 1)
        self._permanent: list[QtWidgets.QWidget] = []
        self._own_max: dict[QtWidgets.QWidget, int] = {}   # each permanent widget's maximum width of its own
        self._timer = QtCore.QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.clearMessage)

    # QStatusBar's interface (Python callers reach these; Qt's own status tips still use the base class's)
    def showMessage(self, text: str, timeout: int = 0) -> None:
        self.message.setText(text)
        self._timer.stop()
        if timeout > 0:
            self._timer.start(timeout)
        self.fit_message()

    def currentMessage(self) -> str:
        return self.message.text()

    def clearMessage(self) -> None:
        self.showMessage("")

    def addPermanentWidget(self, widget: QtWidgets.QWidget, stretch: int = 0) -> None:
        super().addPermanentWidget(widget, stretch)
        self._permanent.append(widget)
        self._own_max[widget] = widget.maximumWidth()
        widget.installEventFilter(self)   # shown or hidden: the room is shared again
        self.fit_message()

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if event.type() in (QtCore.QEvent.Type.Show, QtCore.QEvent.Type.Hide):
            self.fit_message()
        return False

    def event(self, event: QtCore.QEvent) -> bool:
        """A permanent label's new text asks for a new layout (LayoutRequest): share the room again."""
        handled = super().event(event)
        if event.type() == QtCore.QEvent.Type.LayoutRequest:
            self.fit_message()
        return handled

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:
        super().resizeEvent(event)
        self.fit_message()

    def _width(self) -> int:
        """The width the widgets share: the bar's, less its margins, spacing and size grip."""
        margins = self.contentsMargins()
        grip = 16 if self.isSizeGripEnabled() else 4
        return self.width() - margins.left() - margins.right() - grip - 2

    def fit_message(self) -> None:
        """The message gets its text's width (all of the bar's, at most); the permanent widgets share
        the rest, the narrow ones whole first (a fair share each, water-filling); a message wider
        than the bar wraps onto more lines and the bar grows."""
        label = self.message
        shown = [w for w in self._permanent if not w.isHidden()]
        width = self._width()
        need = label.fontMetrics().horizontalAdvance(label.text()) + 8 if label.text() else 0
        left = max(width - need - SPACING * (len(shown) + 1), 0)
        wanted = {w: min(w.sizeHint().width(), self._own_max[w]) for w in shown}
        for n, w in enumerate(sorted(shown, key=lambda w: wanted[w])):
            share = min(wanted[w], left // (len(shown) - n))
            self._cap(w, share if share < wanted[w] else None)
            left -= share
        wraps = need > width
        lines = label.heightForWidth(max(width - SPACING, 1)) if wraps else label.fontMetrics().height()
        label.setMinimumHeight(lines)
        self.setMinimumHeight(lines + 10 if wraps else 0)   # the bar grows with the lines (0: its own minimum)

    def _cap(self, widget: QtWidgets.QWidget, width: int | None) -> None:
        """Cap a permanent widget's width (None: back to its own maximum)."""
        own = self._own_max[widget]
        limit = own if width is None else min(own, max(width, 0))
        if widget.maximumWidth() != limit:
            widget.setMaximumWidth(limit)

    def is_clipped(self) -> bool:
        """Whether the message is not wholly painted: narrower than its text, on fewer lines than it needs."""
        label = self.message
        if not label.text():
            return False
        width = label.contentsRect().width()
        if label.fontMetrics().horizontalAdvance(label.text()) <= width:
            return False
        return label.heightForWidth(width) > label.height()
