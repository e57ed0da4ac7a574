"""The Simulate box's deployment: how the simulated model is spread over devices (tensor, pipeline,
data and expert parallelism), the router of the replicas, the link between the devices, the KV
cache's dtype, the serving engine whose host costs the steps pay, and the disaggregated pools' tensor
parallelism. Its values are the CLI's --tp --pp --dp --ep --router --link --kv-dtype --engine --prefill-tp
--decode-tp, as backend.config.Deployment."""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from backend.config import ROUTERS, Deployment

from gui.panels.sim_choices import KV_DTYPES, engine_choices, link_names

PROFILE_LINK = "profile's own"   # the link combo's first entry: --link not given (None)
SAME_AS_TP = "= TP"              # a pool spin box at 0: --prefill-tp / --decode-tp not given (None)
MAX_DEVICES = 1024


def _spin(name: str, tip: str, low: int = 1, high: int = MAX_DEVICES) -> QtWidgets.QSpinBox:
    spin = QtWidgets.QSpinBox()
    spin.setObjectName(name)
    spin.setRange(low, high)
    spin.setToolTip(tip)
    spin.setMinimumWidth(56)
    return spin


class DeploymentBox(QtWidgets.QGroupBox):
    """Emits changed on any value; `deployment()` is what the CLI's flags would build."""

    changed = QtCore.Signal()

    def __init__(self, parent=None):
        super().__init__("Deployment (simulated)", parent)
        self.setObjectName("deploymentBox")
        self.tp_spin = _spin("tpSpin", "--tp: tensor parallel, each matrix split over this many devices, two "
                                       "all-reduces a layer priced on the link (must divide the heads)")
        self.pp_spin = _spin("ppSpin", "--pp: pipeline parallel, the layers in this many stages, with their bubbles")
        self.dp_spin = _spin("dpSpin", "--dp: data parallel, replicas of TP x PP devices behind the router")
        self._ep_tip = ("--ep: expert parallel (a mixture-of-experts model), the experts spread over this many "
                        "devices, all-to-all dispatch and combine on the link")
        self.ep_spin = _spin("epSpin", self._ep_tip)
        self.router_combo = QtWidgets.QComboBox()
        self.router_combo.setObjectName("routerCombo")
        self.router_combo.addItems(ROUTERS)
        self.router_combo.setToolTip("--router: how requests are spread over the DP replicas")
        self.link_combo = QtWidgets.QComboBox()
        self.link_combo.setObjectName("linkCombo")
        self.link_combo.addItem(PROFILE_LINK, None)
        for name in link_names():
            self.link_combo.addItem(name, name)
        self.link_combo.setToolTip("--link: the link between a replica's devices (profiles/links/); the "
                                   "profile's own: NVLink on SXM boards, PCIe on cards")
        self.kv_combo = QtWidgets.QComboBox()
        self.kv_combo.setObjectName("kvDtypeCombo")
        self.kv_combo.addItems(KV_DTYPES)
        self.kv_combo.setToolTip("--kv-dtype: the KV cache's dtype (auto: the activations')")
        self.engine_combo = QtWidgets.QComboBox()
        self.engine_combo.setObjectName("engineCombo")
        for name, tip in engine_choices():
            self.engine_combo.addItem(name, name)
            self.engine_combo.setItemData(self.engine_combo.count() - 1, tip, QtCore.Qt.ItemDataRole.ToolTipRole)
        self.engine_combo.setCurrentText(Deployment().engine)
        self.engine_combo.setToolTip("--engine: the serving engine whose host costs the simulated steps pay, as the "
                                     "profile's terms fitted them on that engine's published figures (default "
                                     f"{Deployment().engine})")
        pool_tip = "--{}-tp: the {} pool's devices' tensor parallelism under the disaggregated policy (= TP: the TP above)"
        self.prefill_tp_spin = _spin("prefillTpSpin", pool_tip.format("prefill", "prefill"), low=0)
        self.decode_tp_spin = _spin("decodeTpSpin", pool_tip.format("decode", "decode"), low=0)
        for spin in (self.prefill_tp_spin, self.decode_tp_spin):
            spin.setSpecialValueText(SAME_AS_TP)
        for combo in (self.router_combo, self.link_combo, self.kv_combo, self.engine_combo):
            combo.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(10)
        # two spin boxes a row: four rows of one would make the dock taller than a laptop's screen
        grid = QtWidgets.QGridLayout(self)
        grid.setContentsMargins(6, 4, 6, 4)
        pairs = (("TP", self.tp_spin, "PP", self.pp_spin), ("DP", self.dp_spin, "EP", self.ep_spin),
                 ("Prefill TP", self.prefill_tp_spin, "Decode TP", self.decode_tp_spin))
        self.labels: dict[QtWidgets.QWidget, QtWidgets.QLabel] = {}
        for row, (a, wa, b, wb) in enumerate(pairs):
            for col, (text, widget) in enumerate(((a, wa), (b, wb))):
                label = QtWidgets.QLabel(text)
                label.setBuddy(widget)
                self.labels[widget] = label
                grid.addWidget(label, row, 2 * col)
                grid.addWidget(widget, row, 2 * col + 1)
        for row, (text, combo) in enumerate((("Router", self.router_combo), ("Link", self.link_combo),
                                             ("KV dtype", self.kv_combo), ("Engine", self.engine_combo)),
                                            start=len(pairs)):
            label = QtWidgets.QLabel(text)
            label.setBuddy(combo)
            self.labels[combo] = label
            grid.addWidget(label, row, 0)
            grid.addWidget(combo, row, 1, 1, 3)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)
        self._disaggregated = False
        self._moe: bool | None = None
        for spin in (self.tp_spin, self.pp_spin, self.dp_spin, self.ep_spin, self.prefill_tp_spin, self.decode_tp_spin):
            spin.valueChanged.connect(self._update)
        for combo in (self.router_combo, self.link_combo, self.kv_combo, self.engine_combo):
            combo.currentIndexChanged.connect(self._update)
        self._update()

    def set_policy(self, policy: str) -> None:
        """The pools' TP rows take part only under the disaggregated policy."""
        self._disaggregated = policy == "disaggregated"
        self._update()

    def set_moe(self, moe: bool | None) -> None:
        """EP takes part for a mixture-of-experts model; None (the shape is not known yet) leaves it on."""
        self._moe = moe
        self._update()

    def _update(self, *_) -> None:
        for spin in (self.prefill_tp_spin, self.decode_tp_spin):
            spin.setVisible(self._disaggregated)
            self.labels[spin].setVisible(self._disaggregated)
        self.ep_spin.setEnabled(self._moe is not False)
        self.labels[self.ep_spin].setEnabled(self._moe is not False)
        self.ep_spin.setToolTip(self._ep_tip + ("\n(this model is dense: EP 1)" if self._moe is False else ""))
        self.router_combo.setEnabled(self.dp_spin.value() > 1)
        self.changed.emit()

    def deployment(self) -> Deployment:
        """As the CLI's flags set RunConfig.deployment: a row that takes no part keeps its default."""
        pool = (lambda spin: spin.value() or None) if self._disaggregated else (lambda spin: None)
        return Deployment(tp=self.tp_spin.value(), pp=self.pp_spin.value(), dp=self.dp_spin.value(),
                          ep=self.ep_spin.value() if self._moe is not False else 1,
                          router=self.router_combo.currentText(), link=self.link_combo.currentData(),
                          kv_dtype=self.kv_combo.currentText(), prefill_tp=pool(self.prefill_tp_spin),
                          decode_tp=pool(self.decode_tp_spin), engine=self.engine_combo.currentText())

    def set_deployment(self, d: Deployment) -> None:
        """Show a deployment (a run.json's, automation and tests)."""
        self.tp_spin.setValue(d.tp)
        self.pp_spin.setValue(d.pp)
        self.dp_spin.setValue(d.dp)
        self.ep_spin.setValue(d.ep)
        self.router_combo.setCurrentText(d.router)
        index = self.link_combo.findData(d.link)
        self.link_combo.setCurrentIndex(max(index, 0))
        self.kv_combo.setCurrentText(d.kv_dtype)
        self.engine_combo.setCurrentText(d.engine)
        self.prefill_tp_spin.setValue(d.prefill_tp or 0)
        self.decode_tp_spin.setValue(d.decode_tp or 0)
