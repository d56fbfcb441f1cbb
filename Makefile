# torch-preflight developer tasks. `make help` lists them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install imports test demo dist lint docs bench-vram bench-real bench-blind bench-hard bench-lsp bench-lsp-real clean

help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,measure]'
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install the package with its dev extras

# import-linter scans the folder of `torch_preflight`, but the layers live in sibling
# folders mapped by package-dir; assemble the installed layout in build/ and check that.
imports: $(STAMP) ## Check the import-layer contracts (import-linter)
	@rm -rf build/layers && mkdir -p build/layers
	@cp -r torch_preflight build/layers/ && for d in core rules estimator server; do cp -r $$d build/layers/torch_preflight/$$d; done
	cd build/layers && PYTHONPATH=. ../../$(BIN)/lint-imports --config ../../pyproject.toml

test: $(STAMP) imports test-vscode ## Install what is missing, then run the whole test suite
	@$(BIN)/python -m pytest tests; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests: treating that as a failure" >&2; exit 1; fi; exit $$status

# The demo has its own venv with the runtime package only (parso, jedi, pygls, lsprotocol, rich):
# no torch, no dev tools, so a fresh clone lints the examples in seconds. Editable, so it
# follows the checkout; pip's own upgrade is skipped (the venv's pip builds it fine).
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

$(DEMO_STAMP): pyproject.toml
	@test -x $(DEMO_VENV)/bin/python || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e .
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP) ## Install the runtime package only (.venv-demo), then lint the bundled examples
	-$(DEMO_VENV)/bin/torch-preflight check examples/

dist: $(STAMP) ## Build the wheel and sdist of the `pytorch-preflight` distribution into dist/
	@rm -rf dist
	$(BIN)/python -m build --outdir dist .

lint: $(STAMP) ## Run ruff, mypy and the import layering contract
	$(BIN)/ruff check .
	$(BIN)/mypy core rules estimator server torch_preflight
	$(MAKE) imports

docs: $(STAMP) ## Regenerate docs/rules from the rule docstrings
	$(BIN)/python -m torch_preflight.rules.docs docs/rules

include vscode-client/Makefile.inc

clean: ## Remove build artefacts and caches
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .torch-preflight-cache $(DEMO_VENV) $(BUNDLE_LIBS) $(BUNDLE_STAMP)

# ---- bench-real: the real-world evaluation (issue 8; not part of `make test`) ----------------
# BENCH_REPOS: folders or git directories to add to the corpus (e.g. fetched pytorch/examples,
# nanoGPT, minGPT); once added they are kept in bench/out/corpus.json for later runs.
BENCH_REPOS ?=
PEER_VENV := bench/.venv-peer

$(PEER_VENV)/bin/torch-preflight:
	$(PYTHON) -m venv $(PEER_VENV)
	$(PEER_VENV)/bin/python -m pip install --quiet torch-preflight==0.5.0

bench-real: $(STAMP) $(PEER_VENV)/bin/torch-preflight ## Real-world benchmark: precision, recall on injected bugs, speed vs the peer (~10 min)
	$(BIN)/python bench/realworld/corpus.py $(BENCH_REPOS)
	$(BIN)/python bench/realworld/mutate.py --root . --skip corpus/packages/torch/ \
		bench/out/corpus/repos bench/out/corpus/packages bench/realworld/seeds
	$(BIN)/python bench/realworld/run.py

# ---- bench-blind: the blind precision corpus (issue 17; not part of `make test`) ----------------
# 22 public repositories pinned in bench/realworld/blind.json, materialised from local bare git
# mirrors ($(BENCH_MIRRORS)/<owner>+<name>/repo; a missing one is named with the command that gets it).
# Re-measure another checkout: python bench/realworld/blind.py check --checkout DIR --out FILE, then
# python bench/realworld/blind.py diff bench/realworld/blind_before.json FILE
# TOOL: the torch-preflight to measure (default: this checkout's), e.g. TOOL=/work/wt-XX/.venv/bin/torch-preflight
BENCH_MIRRORS ?= /work/.mirror
TOOL ?= $(BIN)/torch-preflight
bench-blind: $(STAMP) ## Blind corpus: findings of TOOL (-j 1, cold), per-file CPU time, diff against the recorded "before" (~5 min)
	BENCH_MIRRORS=$(BENCH_MIRRORS) $(BIN)/python bench/realworld/blind.py materialise
	$(BIN)/python bench/realworld/blind.py check --tool $(TOOL) --out bench/out/blind-findings.json
	$(BIN)/python bench/realworld/blind.py diff bench/realworld/blind_before.json bench/out/blind-findings.json

# ---- bench-hard: the harder mutation benchmark (issue 16; not part of `make test`) ----------------
# The bench-real corpus with mutate.py --harder; scored strictly by score.py (±3 lines or a related
# location, no per-kind exclusion), all mutants and real bugs only, the peer beside.
bench-hard: $(STAMP) $(PEER_VENV)/bin/torch-preflight ## Harder mutation benchmark of TOOL, strict window, peer beside (~10 min)
	$(BIN)/python bench/realworld/corpus.py $(BENCH_REPOS)
	$(BIN)/python bench/realworld/mutate.py --harder --per-kind 40 --root . --skip corpus/packages/torch/ \
		--out bench/out/mutants-hard bench/out/corpus/repos bench/out/corpus/packages bench/realworld/seeds
	$(BIN)/python bench/realworld/score.py --mutants bench/out/mutants-hard --tool $(TOOL) \
		--peer $(PEER_VENV)/bin/torch-preflight --equivalent bench/realworld/equivalent.json \
		--out bench/out/hard-score.json --markdown bench/out/hard-score.md --compare bench/realworld/hard_before.json

# ---- bench-vram: estimator accuracy against measured peaks (issue 5; not part of `make test`) ----
# Ground truth runs each bench/vram script under torch 2.13 (CPU wheel) in its own venv, with the
# profiler's memory events replayed into a running peak; the peer column uses bench/.venv-peer.
TORCH_VENV := bench/.venv-torch

$(TORCH_VENV)/bin/python:
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet torch==2.13.0

bench-vram: $(STAMP) $(TORCH_VENV)/bin/python ## VRAM estimator accuracy: estimate vs CPU and CUDA measurements per script (~5 min)
	$(BIN)/python bench/vram/compare.py --torch $(TORCH_VENV)/bin/python
	$(BIN)/python bench/vram/compare_cuda.py  # CUDA truth measured on a GPU by bench/vram/cuda_truth.py (committed JSON)

# ---- bench-lsp: language-server latency vs ruff server (issue 6; not part of `make test`) ----
bench-lsp: $(STAMP) ## LSP latency: didChange -> diagnostics p50/p95, inlay hints, cold start, vs `ruff server`
	$(BIN)/python bench/lsp/bench_lsp.py --edits 200

# Real files (issue 19): bench/lsp/real_files.json, fetched into bench/out/lsp/files (pip download,
# git), plus every bench/out/corpus file over 300 lines when `make bench-real` built the corpus.
# Two in-process runs side by side: python bench/lsp/compare.py BEFORE.json AFTER.json (targets met, pooled p95).
bench-lsp-real: $(STAMP) ## LSP latency on real files: valid and broken keystrokes, cold start, hints, vs ruff; then CPU time in-process
	$(BIN)/python bench/lsp/bench_lsp.py --real
	$(BIN)/python bench/lsp/bench_lsp.py --real --in-process
