"""The model list's remote entry: an OpenAI-compatible server's URL, served model, API key, API and
timeout and Ray cluster (`load --endpoint URL --served-model NAME --api-key KEY --api API --request-timeout S
--ray HOST:PORT`).
Methods of ControlsPanel."""
from __future__ import annotations

from urllib.parse import urlsplit

from PySide6 import QtWidgets

from backend.config import APIS, RemoteEndpoint, safe_url
from backend.errors import InputError
from backend.targets.remote.target import env_api_key

from gui.panels.fields import ValidatedField, number

REMOTE = "<remote endpoint>"   # the model list's entry for a server (item data; no model has this name)
REMOTE_TITLE = "Remote endpoint (OpenAI-compatible)"


def endpoint_url(text: str) -> str:
    """A server's base URL as the load driver takes it: host:port alone means http://host:port/v1."""
    url = text.strip().rstrip("/")
    if url and "://" not in url:
        url = "http://" + url
    if url and urlsplit(url).path == "":
        url += "/v1"
    try:
        RemoteEndpoint(url, "model").validate()
    except InputError as exc:
        raise ValueError(str(exc).replace("--endpoint ", "URL ")) from None
    return url


def ray_address(text: str) -> str | None:
    """A Ray cluster's HOST:PORT (`--ray`), or None to run the client's workers as local processes."""
    text = text.strip()
    if not text:
        return None
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("expected HOST:PORT of a Ray cluster's head, e.g. 10.0.0.5:6379 (empty: this machine's cores)")
    return text


def served_model(text: str) -> str:
    if not text.strip():
        raise ValueError("the served model name is required (the server lists it at GET <URL>/models)")
    return text.strip()


class RemoteBox:
    """Mixed into ControlsPanel: uses its model_combo, _update and choicesChanged."""

    def _remote_box(self) -> QtWidgets.QWidget:
        """URL, served model, API key and API kind of an OpenAI-compatible server."""
        box = QtWidgets.QWidget()
        form = QtWidgets.QFormLayout(box)
        form.setContentsMargins(0, 0, 0, 0)
        form.setRowWrapPolicy(QtWidgets.QFormLayout.RowWrapPolicy.DontWrapRows)
        self.url_field = ValidatedField("http://127.0.0.1:8000/v1", endpoint_url,
                                        tooltip="the server's OpenAI API root, e.g. http://host:8000/v1")
        self.served_field = ValidatedField("", served_model, placeholder="name the server serves",
                                           tooltip="as listed by GET <URL>/models")
        self.key_edit = QtWidgets.QLineEdit(env_api_key())
        self.key_edit.setObjectName("apiKeyEdit")
        self.key_edit.setEchoMode(QtWidgets.QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("none, or $PHASESCOPE_API_KEY")
        self.key_edit.setToolTip("Sent as a bearer token; never written to a file, a log or run.json")
        self.api_combo = QtWidgets.QComboBox()
        self.api_combo.addItems(APIS)
        self.api_combo.setToolTip("/v1/completions, or /v1/chat/completions (text prompts only)")
        self.timeout_field = ValidatedField("120", number("timeout", 0.0, 86_400.0, low_inclusive=False),
                                            tooltip="seconds to wait to connect or for the next streamed event")
        form.addRow("URL", self.url_field)
        form.addRow("Served model", self.served_field)
        form.addRow("API key", self.key_edit)
        form.addRow("API", self.api_combo)
        self.ray_field = ValidatedField("", ray_address, placeholder="none: this machine's cores",
                                        tooltip="HOST:PORT of a running Ray cluster: the client's workers run there "
                                                "as actors when this machine's cores are not enough (phasescope[ray])")
        form.addRow("Timeout (s)", self.timeout_field)
        form.addRow("Ray cluster", self.ray_field)
        for field in (self.url_field, self.served_field, self.timeout_field, self.ray_field):
            field.valueChanged.connect(self._update)
            field.valueChanged.connect(self.choicesChanged)
        self.api_combo.currentIndexChanged.connect(self._update)
        return box

    def remote_url(self) -> str:
        """The server's URL without any credentials it carries (for the status bar)."""
        return safe_url(self.url_field.value or self.url_field.text())

    def endpoint(self) -> RemoteEndpoint:
        """The server as typed; the key as typed (or from the environment), held only in memory."""
        key = self.key_edit.text().strip() or None
        return RemoteEndpoint(self.url_field.value, self.served_field.value, key, self.api_combo.currentText(),
                              self.timeout_field.value, read_metrics=True, ray_address=self.ray_field.value)

    def select_remote(self, url: str, model: str, api: str = "completions", api_key: str | None = None) -> None:
        """Choose an OpenAI-compatible server (automation and tests)."""
        self.model_combo.setCurrentIndex(self.model_combo.findData(REMOTE))
        self.url_field.setText(url)
        self.served_field.setText(model)
        self.api_combo.setCurrentText(api)
        if api_key is not None:
            self.key_edit.setText(api_key)
