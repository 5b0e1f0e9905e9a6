# Developer entry points, in tiers. `make lint` and `make test` need no root and no services;
# `make test-infra` and `make e2e` need the test nodes, Slurm and MaxText (`make services` as root starts
# them; scripts/test.sh, which CI runs, does the set-up and runs everything).
PY ?= .venv/bin/python
BIN := $(dir $(PY))
PYTEST := $(PY) -m pytest -q -p no:cacheprovider

.PHONY: help setup lint format test test-infra e2e services services-down all

help:
	@echo "make setup        create .venv and .venv-maxtext (scripts/bootstrap.sh)"
	@echo "make lint         ruff, ruff format --check, mypy, import contracts (no root, no services)"
	@echo "make format       ruff --fix and ruff format"
	@echo "make test         the fast tests (-m 'not slow'): no root, no services"
	@echo "make test-infra   the real-infrastructure tests (dockerd, sshd nodes, Slurm; not MaxText)"
	@echo "make e2e          the real-MaxText end-to-end tests"
	@echo "make services     as root: start the test nodes and the Slurm cluster (.ci/infra.sh, .ci/slurm.sh)"
	@echo "make all          lint, then every test (what scripts/test.sh runs after set-up)"

setup:
	bash scripts/bootstrap.sh

lint:
	$(BIN)ruff check .
	$(BIN)ruff format --check .
	$(BIN)mypy cvs_tui
	$(BIN)lint-imports --no-cache

format:
	$(BIN)ruff check --fix .
	$(BIN)ruff format .

test:
	$(PYTEST) -m "not slow" $(ARGS)

test-infra:
	$(PYTEST) -m "slow and not maxtext" $(ARGS)

e2e:
	$(PYTEST) -m "maxtext" $(ARGS)

services:
	bash .ci/infra.sh up
	bash .ci/slurm.sh up

services-down:
	bash .ci/slurm.sh down || true
	bash .ci/infra.sh down

all: lint
	$(PYTEST) $(ARGS)
