# fabricmon: the two commands a new user needs.
#   make demo   installs what is needed (apt + a venv) and runs the demo on a simulated fabric
#   make test   runs the whole test suite
PYTHON ?= python3
VENV   ?= .venv
APT_PACKAGES = ibsim-utils libumad2sim0 infiniband-diags opensm ethtool iproute2 openssl prometheus prometheus-alertmanager systemd chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test deps venv bench golden clean

demo: deps venv
	$(VENV)/bin/fabricmon demo

test: deps venv
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider

deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

# regenerate the golden expositions (tests/golden/*.prom) after an intended metric change, and
# print a unified diff of every golden file it changed (nothing when none changed): review it.
# GOLDEN_TESTS regenerate GOLDEN_FILES (shell globs) when FABRICMON_UPDATE_GOLDEN=1.
GOLDEN_TESTS = tests/exporter/test_golden.py
GOLDEN_FILES = tests/golden/*.prom
golden: venv
	@before=$$(mktemp -d) && trap 'rm -rf "$$before"' EXIT && \
	for f in $(GOLDEN_FILES); do if [ -f "$$f" ]; then cp --parents "$$f" "$$before"/; fi; done; \
	FABRICMON_UPDATE_GOLDEN=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider $(GOLDEN_TESTS); \
	rc=$$?; changed=0; \
	for f in $$( { (cd "$$before" && find . -type f | sed 's|^\./||'); ls -d $(GOLDEN_FILES) 2>/dev/null; } | sort -u ); do \
		diff -uN --label "a/$$f" --label "b/$$f" "$$before/$$f" "$$f" && continue; changed=$$((changed + 1)); \
	done; \
	if [ $$changed -gt 0 ]; then echo "make golden: $$changed golden file(s) changed (diff above): review before committing"; fi; \
	exit $$rc

bench: venv
	$(VENV)/bin/python bench/scrape_latency.py

clean:
	rm -rf $(VENV) build *.egg-info
