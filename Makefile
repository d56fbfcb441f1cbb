# torch-preflight developer tasks. `make help` lists them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install test demo lint docs check-docs bench-vram bench-lsp bench-real clean

help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install the package with its dev extras

test: $(STAMP) ## Install what is missing, then run the whole test suite
	$(BIN)/lint-imports
	@$(BIN)/python -m pytest tests; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests: treating that as a failure" >&2; exit 1; fi; exit $$status

demo: $(STAMP) ## Install, then lint the bundled examples
	-$(BIN)/torch-preflight check examples/

lint: $(STAMP) ## Run ruff, mypy and the import layering contract
	$(BIN)/ruff check .
	$(BIN)/mypy core rules estimator server torch_preflight
	$(BIN)/lint-imports

docs: $(STAMP) ## Regenerate docs/rules from the rule docstrings
	$(BIN)/python -m torch_preflight.rules.docs docs/rules

clean: ## Remove build artefacts and caches
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .torch-preflight-cache
