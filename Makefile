# metrale-export: the commands README.md documents.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
DEMO    := build/demo
# Setup is done once per pyproject.toml: 'make test' and 'make demo' run it when this is missing
# or older than pyproject.toml, and skip it otherwise.
STAMP   := $(VENV)/.metrale-setup

.PHONY: setup test test-all demo plugins bench bench-export clean

# A virtual environment with the CPU build of torch (from this machine's disk when present), the
# package in editable mode, the test tools and TensorRT-RTX (CPU-only engine building). torch is
# named again beside the extras so that no dependency can replace the CPU build.
setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null || { echo "make setup: $(PY) not found; install Python 3.10+ (or run make PY=/path/to/python3)"; exit 1; }
	@echo "setting up $(VENV) (once; a few minutes: torch, onnx, TensorRT-RTX) ..."
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test,tensorrt-rtx]' torch==2.13.0
	@touch $@

# The default suite: export, reference ops, CLI, engine building (TensorRT-RTX), plugin compile
# checks. GPU tests (-m gpu) run on a CUDA machine; slow ones with 'make test-all'.
# Two workers (pytest-xdist), one test file each at a time so module fixtures are made once.
TEST_JOBS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile

test-all: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile -m 'not gpu'

# The main job on the built-in demo model.
demo: $(STAMP)
	$(BIN)/metrale-export demo-model $(DEMO) --force
	$(BIN)/metrale-export $(DEMO)/model.safetensors -o build/demo.metrale --force

# The CUDA kernels (needs nvcc; no GPU needed to compile).
plugins:
	$(MAKE) -C plugins

# Kernel benchmark (on a GPU): see benchmarks/.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.bench_kernels

# Export benchmark on the CPU: installs the peer exporter (the bench extra) first; the quantizer's
# weight error against the peer's int4 (bench_quant) comes first. SHAPES picks
# the checkpoint shapes (one results file), e.g. make bench-export SHAPES=qwen3-8b.
SHAPES ?= qwen3-1.7b,qwen3-8b
bench-export: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]' torch==2.13.0
	$(BIN)/python -m benchmarks.bench_quant
	$(BIN)/python -m benchmarks.bench_export --shape $(SHAPES)

clean:
	rm -rf build
