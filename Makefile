# rocketmq-tiered — the two commands are `make demo` and `make test`; everything else is for developers.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# strict editable install: a link tree mypy and pytest can both follow (providers/ and jobs/ are
# mapped to tiered.providers / tiered.jobs); a new module re-runs the install.
EDITABLE := --config-settings editable_mode=strict

.PHONY: venv demo test test-fast bench lint clean ops-tools rmq kernel-test wheel docs docs-reference FORCE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.pkgfiles: FORCE | $(BIN)/python
	@find tiered providers jobs -name '*.py' | sort > $@.new
	@cmp -s $@.new $@ || mv $@.new $@
	@rm -f $@.new

# The compiled kernel (tiered/kernel, Rust) is built by setuptools-rust at install, in place
# (tiered/_kernel.abi3.so); the strict link tree does not see build outputs, so it is linked in.
KERNEL_SRC := tiered/kernel/Cargo.toml tiered/kernel/Cargo.lock $(wildcard tiered/kernel/src/*.rs)
LINK_KERNEL = ln -sf $(CURDIR)/tiered/_kernel.abi3.so \
	"$$(cat $(VENV)/lib/python3*/site-packages/__editable__.rocketmq_tiered-*.pth)/tiered/"

$(VENV)/.installed: pyproject.toml $(VENV)/.pkgfiles $(KERNEL_SRC) | $(BIN)/python
	@command -v cargo >/dev/null || { \
	  echo "building the kernel (tiered/kernel) needs Rust: cargo on the PATH (https://rustup.rs)"; \
	  exit 1; }
	$(BIN)/python -m pip install -q -e '.[spark]' $(EDITABLE)
	@$(LINK_KERNEL)
	@touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.pkgfiles $(KERNEL_SRC) | $(BIN)/python
	@command -v cargo >/dev/null || { \
	  echo "building the kernel (tiered/kernel) needs Rust: cargo on the PATH (https://rustup.rs)"; \
	  exit 1; }
	$(BIN)/python -m pip install -q -e '.[dev,helm]' $(EDITABLE)
	@$(LINK_KERNEL)
	@touch $@ $(VENV)/.installed

# ali-ons (a real third-party RocketMQ remoting client, pinned in package-lock.json) for the
# replay endpoint's tests; Node 20 and npm are on the PATH of these machines and of CI.
JS := tests/remoting/js
$(JS)/node_modules/.installed: $(JS)/package.json $(JS)/package-lock.json
	npm ci --prefix $(JS) --no-audit --no-fund --loglevel=error
	@touch $@

# Debian's prometheus package (prometheus, promtool) for the alert-rule and dashboard tests
# (tests/ops), installed once when missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
ops-tools:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
	  echo "installing Debian's prometheus package (promtool, prometheus)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $(SUDO) apt-get install -y -q prometheus >/dev/null || { \
	    $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q prometheus >/dev/null; }; }

# A real RocketMQ (name server, broker, tieredstore plugin, mqadmin, Java client) for the
# real-broker tests (tests/realbroker): the jars of RMQ_VERSION copied from Maven Central once
# (Maven's own cache, ~/.m2, keeps them between clones); `make test RMQ_VERSION=5.4.0` tries another.
RMQ_VERSION ?= 5.3.3
export RMQ_VERSION
RMQ_LIB := .rmq/$(RMQ_VERSION)/lib
$(RMQ_LIB)/.copied: tests/realbroker/pom.xml
	@command -v mvn >/dev/null && command -v javac >/dev/null || { \
	  echo "the real-broker tests need Java 17 (javac) and Maven (mvn) on the PATH"; exit 1; }
	rm -rf $(RMQ_LIB)
	mvn -B -q -f tests/realbroker/pom.xml -Drmq.version=$(RMQ_VERSION) \
	  org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
	  -DoutputDirectory=$(CURDIR)/$(RMQ_LIB) -DincludeScope=runtime
	@touch $@
# RocketMQ 5's gRPC Java client, in a lib directory of its own (see its pom.xml)
GRPC_CLIENT_LIB := .rmq/grpc-client/lib
$(GRPC_CLIENT_LIB)/.copied: tests/realbroker/grpc-client/pom.xml
	rm -rf $(GRPC_CLIENT_LIB)
	mvn -B -q -f tests/realbroker/grpc-client/pom.xml \
	  org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
	  -DoutputDirectory=$(CURDIR)/$(GRPC_CLIENT_LIB) -DincludeScope=runtime
	@touch $@
rmq: $(RMQ_LIB)/.copied $(GRPC_CLIENT_LIB)/.copied

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/rmq-tiered demo

# the kernel's own Rust tests (plain Rust: no Python linked)
kernel-test:
	cd tiered/kernel && cargo test --locked -q

test: lint kernel-test $(JS)/node_modules/.installed ops-tools rmq
	$(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadgroup --durations=20

# the inner loop: no lint, no JVM (broker, Spark), Node, Ceph, Prometheus, Helm, nor slow tests
test-fast: $(VENV)/.installed-dev
	$(BIN)/pytest -q -p no:cacheprovider -m "not (jvm or spark or node or ceph or prometheus or helm or slow)"

# mypy runs inside the editable link tree, where tiered.providers and tiered.jobs resolve;
# test directories are checked one at a time (each may have its own conftest.py).
MYPY = $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml --cache-dir $(CURDIR)/.mypy_cache
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check tiered providers jobs tests docs
	$(BIN)/ruff format --check tiered providers jobs tests docs
	cd "$$(cat $(VENV)/lib/python3*/site-packages/__editable__.rocketmq_tiered-*.pth)" && \
	    $(MYPY) -p tiered && \
	    $(MYPY) $(CURDIR)/docs/gen_reference.py && \
	    $(MYPY) $(CURDIR)/tests/*.py && \
	    for d in $(CURDIR)/tests/*/; do case $$d in */__pycache__/) continue;; esac; \
	        $(MYPY) $$d || exit 1; done

# the binary wheel (in dist/) plain pip installs: the kernel compiled, tagged manylinux by auditwheel
DIST ?= dist
wheel: $(VENV)/.installed-dev
	rm -rf build/lib.* build/bdist.* build/wheel && rm -f $(DIST)/rocketmq_tiered-*.whl
	$(BIN)/python -m pip wheel -q --no-deps --no-build-isolation --wheel-dir build/wheel .
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/auditwheel repair -w $(DIST) build/wheel/rocketmq_tiered-*.whl

# the docs site (docs/, mkdocs.yml): the reference pages generated from the code, then served on
# http://127.0.0.1:8000; tests/test_docs.py builds it with --strict and checks the pages are fresh
docs-reference: $(VENV)/.installed-dev
	$(BIN)/python docs/gen_reference.py
docs: docs-reference
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

bench: $(VENV)/.installed-dev $(JS)/node_modules/.installed rmq
	$(BIN)/pytest -q -p no:cacheprovider -s tests/bench/bench_*.py

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .rmq tiered/kernel/target tiered/_kernel*.so
