# fabricmon: the two commands a new user needs.
#   make demo   installs what the demo needs (apt + a venv) and runs it on a simulated fabric
#   make test   installs the test toolchain and runs the whole test suite (make test-fast: the fast tier alone)
PYTHON ?= python3
VENV   ?= .venv
# what `make demo` needs: the InfiniBand simulator, the real infiniband-diags tools and opensm
DEMO_PACKAGES = python3-venv ibsim-utils libumad2sim0 infiniband-diags opensm
# the Ethernet (RoCE) demo's switch simulator
DEMO_ETHERNET_PACKAGES = snmpsim snmp
# past one machine (docs/scale.md): the reference deployment's store, agent and rule evaluator (VictoriaMetrics,
# vmagent, vmalert) and the coordinator of remediation's lease (etcd); Prometheus and Alertmanager are below
SCALE_PACKAGES = victoria-metrics etcd-server
# the test toolchain on top: real Prometheus/promtool, Alertmanager, systemd-analyze, headless Chromium, ...
# (fuse3, libfuse3-dev, pkg-config, gcc: the test-only FUSE server of tests/sources/fuse, a restricted NIC function;
# curl: docs/simulated-fabric.md's commands, run as written by tests/sim/test_simulated_fabric_howto.py)
APT_PACKAGES = $(DEMO_PACKAGES) $(DEMO_ETHERNET_PACKAGES) ethtool iproute2 openssl prometheus prometheus-alertmanager systemd chromium slurm-wlm munge prometheus-node-exporter prometheus-snmp-exporter fuse3 libfuse3-dev pkg-config gcc curl $(SCALE_PACKAGES)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-fast fuzz deps deps-demo venv wheel offline deb deb-trial bench golden metrics-doc config-doc clean

# DEMO_ARGS: fabricmon demo's options, e.g. make demo DEMO_ARGS="--duration 60" (default: until Ctrl-C)
DEMO_ARGS ?=
demo: deps-demo $(VENV)/.installed
	$(VENV)/bin/fabricmon demo $(DEMO_ARGS)

# the tiers (docs/development.md): `make test-fast` the fast one, in process (parsers, model, checks, pipeline,
# exporter, render, layers, the replay goldens), what a bare `pytest` runs, in under a minute on 2 cores;
# `make test` every test (-m "": no marker deselected), TEST_WORKERS pytest-xdist workers side by side
# (the simulator tests mostly wait, so more workers than cores pay), tests that share a module's
# simulator or the kernel ring buffer kept on one worker (--dist loadgroup)
PYTEST = $(VENV)/bin/python -m pytest -q -p no:cacheprovider
TEST_WORKERS ?= 4
test: deps venv
	$(PYTEST) -m "" -n $(TEST_WORKERS) --dist loadgroup --durations=25

# the fast tier on TEST_FAST_WORKERS workers (2: the cores of the smallest machine it must finish on in a minute)
TEST_FAST_WORKERS ?= 2
test-fast: venv
	$(PYTEST) -n $(TEST_FAST_WORKERS) --dist loadgroup --durations=10

# every fuzz target (tests/fuzz/targets.py) under atheris for FUZZ_TIME seconds each, and a table of what each
# reached; a finding's input is left in .fuzz/<target>/ (docs/development.md "Fuzzing")
FUZZ_TIME ?= 30
fuzz: venv
	$(VENV)/bin/python tests/fuzz/run_all.py --time $(FUZZ_TIME) $(if $(FUZZ_ONLY),--only $(FUZZ_ONLY))

# apt-get install the packages of $(1) that are not installed yet (nothing at all when none is missing)
define apt_install
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi
endef

deps-demo:
	$(call apt_install,$(DEMO_PACKAGES) $(DEMO_ETHERNET_PACKAGES))

deps:
	$(call apt_install,$(APT_PACKAGES))

# the venv with an editable install: runtime dependencies for the demo, the test extras for development
venv: $(VENV)/.installed-test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --upgrade pip
	$(VENV)/bin/pip install -q --disable-pip-version-check -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

# the wheel the README's install section installs: dist/fabricmon-VERSION-py3-none-any.whl, built by pip
# (PEP 517, build isolation) from this checkout; it carries the units, udev rule, config, rules, dashboards
# and wrappers. Needs only python3-venv: the build runs in $(VENV), created when missing (not the editable install).
wheel: $(VENV)/bin/python
	rm -rf build
	$(VENV)/bin/python -m pip wheel --disable-pip-version-check --no-deps -w dist .
	@ls dist/fabricmon-*.whl

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)

# the air-gapped install (docs/install-offline.md): dist/fabricmon-VERSION-offline.tar.gz, this wheel and every
# runtime dependency's wheel for CPython 3.10-3.13 on x86_64 and aarch64 (manylinux), with install.sh;
# downloads from the package index (pip download), so it runs where one is reachable
offline: wheel
	$(VENV)/bin/python release/offline.py --out dist dist/fabricmon-$(VERSION)-py3-none-any.whl

# the Debian package (docs/install-offline.md): dist/fabricmon_VERSION_all.deb, built with debhelper and pybuild
# on Debian's python3-* packages from a staged copy (build/deb/; the checkout is not touched), then lintian
DEB_BUILD_PACKAGES = debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools python3-build python3-installer lintian
# the distribution's python3 only (a pyenv or conda python3 earlier on PATH has neither its modules nor its setuptools)
DEB_PATH = /usr/sbin:/usr/bin:/sbin:/bin
deb:
	$(call apt_install,$(DEB_BUILD_PACKAGES))
	@test "$$(dpkg-parsechangelog -l debian/changelog -S Version)" = "$(VERSION)" || \
		{ echo "make deb: debian/changelog's version is not pyproject.toml's $(VERSION)"; exit 1; }
	rm -rf build/deb && mkdir -p build/deb/fabricmon-$(VERSION) dist
	cp -r pyproject.toml README.md LICENSE fabricmon debian build/deb/fabricmon-$(VERSION)/
	find build/deb -name __pycache__ -prune -exec rm -rf {} +
	cd build/deb/fabricmon-$(VERSION) && PATH=$(DEB_PATH) dpkg-buildpackage -b -us -uc > ../build.log 2>&1 || \
		{ tail -40 ../build.log; exit 1; }
	mv build/deb/fabricmon_$(VERSION)_all.deb dist/
	lintian --fail-on error --tag-display-limit 0 \
		dist/fabricmon_$(VERSION)_all.deb
	@ls dist/fabricmon_$(VERSION)_all.deb

# the .deb on a clean Debian 12 (as root): apt install, fabricmon check as the service user, systemd-analyze verify,
# remove, purge (release/deb-trial.sh; the clean root is made once with mmdebstrap and cached in /var/cache/fabricmon-trial)
deb-trial: deb
	$(call apt_install,mmdebstrap)
	release/deb-trial.sh dist/fabricmon_$(VERSION)_all.deb

# regenerate the golden expositions (tests/golden/*.prom: the node bundles, and fabric-<kind>.prom: the fabric
# collector on a replayed InfiniBand and Ethernet bundle), the metrics reference (docs/metrics.md) and the
# configuration reference (docs/configuration.md)
# after an intended metric change, and
# print a unified diff of every golden file it changed (nothing when none changed): review it.
# GOLDEN_TESTS regenerate GOLDEN_FILES (shell globs) when FABRICMON_UPDATE_GOLDEN=1.
GOLDEN_TESTS = tests/exporter/test_golden.py tests/exporter/test_metrics_doc.py tests/cli/test_config_doc.py
GOLDEN_FILES = tests/golden/*.prom docs/metrics.md docs/configuration.md
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

# regenerate docs/metrics.md from the catalogue (fabricmon/exporter/catalogue.py)
metrics-doc: venv
	FABRICMON_UPDATE_GOLDEN=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/exporter/test_metrics_doc.py

# regenerate docs/configuration.md's reference tables from the config schemas (fabricmon/config/__init__.py,
# fabricmon/sources/ethernet/settings.py) and the source registry
config-doc: venv
	FABRICMON_UPDATE_GOLDEN=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/cli/test_config_doc.py

bench: venv
	$(VENV)/bin/python bench/scrape_latency.py

clean:
	rm -rf $(VENV) build dist *.egg-info
