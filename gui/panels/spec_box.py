"""The run form's speculative decoding box: the proposer, the guesses a step verifies, the n-gram sizes or
the draft model (`--spec`, `--spec-tokens`, `--spec-ngram-min/max`; docs/speculative.md). Mixed into RunForm:
uses its `fields`; the rows that do not apply to the chosen proposer are hidden."""
from __future__ import annotations

from PySide6 import QtWidgets

from backend.config import SpecConfig

from gui.panels.fields import ValidatedField, whole
from gui.panels.sweep_pages import form_layout

PROPOSERS = ("off", "ngram", "draft")
MAX_GUESSES = 64


class SpecBox:
    def _spec_box(self) -> QtWidgets.QGroupBox:
        box = QtWidgets.QGroupBox("Speculative decoding")
        form = self.spec_form = form_layout(box)
        default = SpecConfig()
        self.spec_combo = QtWidgets.QComboBox()
        self.spec_combo.setObjectName("specCombo")
        self.spec_combo.addItems(PROPOSERS)
        self.spec_combo.setToolTip("ngram: guess what followed the last tokens' earlier occurrence in the prompt and "
                                   "output; draft: a model of the same vocabulary guesses. Each step verifies the "
                                   "guesses in one pass; greedy output is unchanged (local engine; a simulated run "
                                   "keeps guesses at a per-guess rate)")
        self.draft_edit = QtWidgets.QLineEdit()
        self.draft_edit.setObjectName("draftEdit")
        self.draft_edit.setPlaceholderText("MODEL[@DTYPE], e.g. smollm2-135m@q4_0")
        self.draft_edit.setText("smollm2-135m@q4_0")
        self.fields["spec"] = {
            "num_tokens": ValidatedField(str(default.num_tokens), whole("guesses", 1, MAX_GUESSES),
                                         tooltip="K: tokens guessed a step; the step checks K+1 positions"),
            "ngram_min": ValidatedField(str(default.ngram_min), whole("shortest n-gram", 1, MAX_GUESSES)),
            "ngram_max": ValidatedField(str(default.ngram_max), whole("longest n-gram", 1, MAX_GUESSES),
                                        tooltip="the longest suffix looked up, tried first"),
        }
        f = self.fields["spec"]
        form.addRow("Proposer", self.spec_combo)
        form.addRow("Guesses (K)", f["num_tokens"])
        form.addRow("Shortest n-gram", f["ngram_min"])
        form.addRow("Longest n-gram", f["ngram_max"])
        form.addRow("Draft model", self.draft_edit)
        self.spec_combo.currentTextChanged.connect(self._spec_changed)
        self.draft_edit.textChanged.connect(lambda _: self.changed.emit())
        self._spec_changed()
        return box

    def _spec_changed(self) -> None:
        method = self.spec_combo.currentText()
        f = self.fields["spec"]
        for widget, shown in ((f["num_tokens"], method != "off"), (f["ngram_min"], method == "ngram"),
                              (f["ngram_max"], method == "ngram"), (self.draft_edit, method == "draft")):
            self.spec_form.setRowVisible(widget, shown)
            widget.setEnabled(shown)
        self.changed.emit()

    def spec_fields(self) -> list[ValidatedField]:
        """The box's fields that apply now (validated with the rest of the form)."""
        return [f for f in self.fields["spec"].values() if f.isEnabled()]

    def spec(self) -> SpecConfig:
        """The settings as the flags give them (SpecConfig.parse: a bad combination is refused when the run starts)."""
        method = self.spec_combo.currentText()
        f = self.fields["spec"]
        text = {"off": None, "ngram": "ngram", "draft": f"draft:{self.draft_edit.text().strip()}"}[method]
        default = SpecConfig()
        spec = SpecConfig(num_tokens=f["num_tokens"].value or default.num_tokens,
                          ngram_min=f["ngram_min"].value or default.ngram_min,
                          ngram_max=f["ngram_max"].value or default.ngram_max)
        if text is None:
            return spec
        try:
            return SpecConfig.parse(text, spec.num_tokens, spec.ngram_min, spec.ngram_max)
        except Exception:   # an empty draft name: the run's own check says so in one line
            spec.method = method
            return spec
