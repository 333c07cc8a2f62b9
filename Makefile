# The README's two commands: `sudo make demo` and `sudo make test`.
# Both install what is missing first (scripts/install.sh is idempotent).
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: install demo test lint clean

define need_root
	@if [ "$$(id -u)" -ne 0 ]; then echo "incastlab builds networks and needs root: run 'sudo make $(or $(MAKECMDGOALS),$@)'." >&2; exit 1; fi
endef

install:
	$(need_root)
	bash scripts/install.sh

demo: install
	$(VENV)/bin/incastlab demo

# pytest exit 5 (no tests collected) must fail, not pass: it means the suite is broken.
# The two tiers run one after the other so that each prints its own coverage (a number
# to watch, docs/testing.md); the root tier's skips itself without root. The unit tier
# runs on every core (pytest-xdist; a module's tests stay on one worker, so a module-scoped
# fixture is built once), the root tier one test at a time (one machine-wide run lock).
# Each prints its 25 slowest tests.
test: install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -ra -m "not root" -n auto --dist loadscope --durations=25 \
		--cov --cov-report=term:skip-covered
	$(PY) -m pytest -ra -m root --durations=25 --cov --cov-report=term:skip-covered

lint:
	$(VENV)/bin/ruff check .

clean:
	$(need_root)
	$(VENV)/bin/incastlab clean
