"""How the simulator prices speculative decoding: the per-guess acceptance rate, a draft pass's cost and a
measured run to take both from (`--spec-acceptance`, `--spec-draft-cost`, `--spec-from`; backend/sim/spec.py,
docs/speculative.md#on-the-simulator). The controls show it under Simulate while a proposer is chosen; the
Plan dialog shows it beside its K search. A spin box at its lowest value is the flag not given: the
simulator's default (alpha 0.7; a draft pass free for n-gram lookups, priced on a draft model's shape)."""
from __future__ import annotations

from dataclasses import replace

from PySide6 import QtCore, QtWidgets

from backend.config import SpecConfig

DEFAULT = "default"
_UNSET = -0.01   # each spin box's lowest value, shown as DEFAULT: the flag not given (None)


def _spin(name: str, high: float, tip: str) -> QtWidgets.QDoubleSpinBox:
    spin = QtWidgets.QDoubleSpinBox()
    spin.setObjectName(name)
    spin.setDecimals(2)
    spin.setSingleStep(0.05)
    spin.setRange(_UNSET, high)
    spin.setValue(_UNSET)
    spin.setSpecialValueText(DEFAULT)
    spin.setToolTip(tip)
    return spin


class SimSpecPricing(QtWidgets.QGroupBox):
    """Emits changed on any value; `priced(spec)` is the SpecConfig with the pricing the flags would give."""

    changed = QtCore.Signal()

    def __init__(self, title: str = "Speculation (simulated)", parent=None):
        super().__init__(title, parent)
        self.setObjectName("simSpecBox")
        self.acceptance_spin = _spin("specAcceptanceSpin", 0.99,
                                     "--spec-acceptance: the chance each guess is kept, until the first miss "
                                     "(default 0.7, or the measured run's)")
        self.draft_cost_spin = _spin("specDraftCostSpin", 100.0,
                                     "--spec-draft-cost: one draft pass as a fraction of the target's decode step "
                                     "(K passes a proposal; default 0 for ngram, a draft model priced on its shape)")
        self.from_edit = QtWidgets.QLineEdit()
        self.from_edit.setObjectName("specFromEdit")
        self.from_edit.setPlaceholderText("none: the values above")
        self.from_edit.setToolTip("--spec-from: a run folder that speculated; its measured per-guess rate and draft "
                                  "time price the guesses (a value set above wins over it)")
        browse = QtWidgets.QToolButton()
        browse.setText("…")
        browse.setToolTip("Choose a run folder")
        browse.clicked.connect(self._choose_run)
        grid = QtWidgets.QGridLayout(self)
        grid.setContentsMargins(6, 4, 6, 4)
        for col, (text, widget) in enumerate((("Acceptance", self.acceptance_spin),
                                              ("Draft cost", self.draft_cost_spin))):
            label = QtWidgets.QLabel(text)
            label.setBuddy(widget)
            grid.addWidget(label, 0, 2 * col)
            grid.addWidget(widget, 0, 2 * col + 1)
        label = QtWidgets.QLabel("From run")
        label.setBuddy(self.from_edit)
        row = QtWidgets.QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.from_edit, 1)
        row.addWidget(browse)
        grid.addWidget(label, 1, 0)
        grid.addLayout(row, 1, 1, 1, 3)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)
        self.acceptance_spin.valueChanged.connect(lambda _: self.changed.emit())
        self.draft_cost_spin.valueChanged.connect(lambda _: self.changed.emit())
        self.from_edit.textChanged.connect(lambda _: self.changed.emit())

    def _choose_run(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "A run folder that speculated")
        if folder:
            self.from_edit.setText(folder)

    @staticmethod
    def _value(spin: QtWidgets.QDoubleSpinBox) -> float | None:
        return None if spin.value() <= _UNSET else spin.value()

    def acceptance(self) -> float | None:
        return self._value(self.acceptance_spin)

    def draft_cost(self) -> float | None:
        return self._value(self.draft_cost_spin)

    def spec_from(self) -> str:
        return self.from_edit.text().strip()

    def priced(self, spec: SpecConfig) -> SpecConfig:
        """`spec` with the simulator's pricing as the three flags set it."""
        return replace(spec, acceptance=self.acceptance(), draft_cost=self.draft_cost(), spec_from=self.spec_from())

    def set_priced(self, spec: SpecConfig) -> None:
        """Show a SpecConfig's pricing (a run.json's, automation and tests)."""
        self.acceptance_spin.setValue(_UNSET if spec.acceptance is None else spec.acceptance)
        self.draft_cost_spin.setValue(_UNSET if spec.draft_cost is None else spec.draft_cost)
        self.from_edit.setText(spec.spec_from)
