# tollgate: the verbs of an operator-sdk project. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CACHE_DIR   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tollgate
UV_VERSION  := 0.13.9
UV          := $(or $(shell command -v uv 2>/dev/null),$(CACHE_DIR)/uv/bin/uv)
K8S_VERSION := $(shell sed -n 's/^K8S_VERSION=//p' hack/versions.env)
TOOLS_BIN   := $(CACHE_DIR)/$(K8S_VERSION)/bin
RUN         := $(UV) run --frozen
SERVICES    := webhook allocator xds routedip jobs
IMG_PREFIX  ?= ghcr.io/tollgate/
IMAGE_TAG   ?= dev
KIND_CLUSTER ?= tollgate
export PATH := $(TOOLS_BIN):$(PATH)
export TOLLGATE_TOOLS_BIN := $(TOOLS_BIN)

.PHONY: help
help: ## list the verbs
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16

$(CACHE_DIR)/uv/bin/uv:
	python3 -m venv $(CACHE_DIR)/uv
	$(CACHE_DIR)/uv/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

.PHONY: sync
sync: $(UV) ## install the Python packages (uv workspace, locked); reinstalls a package whose files another removed
	$(UV) sync --frozen --quiet --compile-bytecode
	@if ! broken=$$($(RUN) --no-sync python hack/venv_files.py); then \
	  echo "make sync: reinstalling $$(echo $$broken), whose files another package overwrote or removed"; \
	  $(UV) sync --frozen --quiet --compile-bytecode $$(printf -- '--reinstall-package %s ' $$broken); \
	  $(RUN) --no-sync python hack/venv_files.py; \
	fi

.PHONY: tools
tools: ## build or fetch the control-plane binaries (cached, idempotent)
	@hack/tools.sh >/dev/null

.PHONY: node-packages
node-packages: ## the Debian packages of the embedded node and the image builds (containerd, runc, CNI, docker.io, mmdebstrap)
	@hack/node-packages.sh

.PHONY: images
images: sync node-packages ## the five services' images, Envoy's and the node's pause image (cached by content; BASE_IMAGE=...)
	$(RUN) python -m tollgate.testing.images --prefix $(IMG_PREFIX) --tag $(IMAGE_TAG)

.PHONY: jaeger
jaeger: ## build Jaeger v2, the trace backend of make dev and the tracing test (cached, idempotent)
	@hack/tools.sh jaeger >/dev/null

.PHONY: manifests
manifests: sync ## regenerate crds/ from tollgate.models, and the files the charts embed
	$(RUN) python -m tollgate.models crds
	$(RUN) python hack/generated_files.py

CHARTS := $(filter-out deploy/charts/tollgate-common,$(wildcard deploy/charts/tollgate-*))

.PHONY: charts
charts: tools ## vendor the library chart into every service chart (offline: file:// dependency)
	@for chart in $(CHARTS); do helm dependency update --skip-refresh $$chart >/dev/null; done

# dagger/src is checked in a throwaway environment of the ci group: dagger-io pulls opentelemetry-proto, whose files
# clash with xds-protos' copy of the OTLP protos, so it never enters .venv.
.PHONY: lint
lint: sync ## ruff, mypy, and the crds/ drift check
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy libs services tests bench hack/chart_values.py hack/generated_files.py
	$(RUN) --isolated --only-group ci mypy dagger/src
	$(RUN) python -m tollgate.models crds --check
	$(RUN) python hack/generated_files.py --check

TEST_SUITES := $(shell sed -n 's/^testpaths = \[\(.*\)\]/\1/p' pyproject.toml | tr -d '",')

.PHONY: test
test: ## lint, unit and end-to-end tests (the end-to-end suite starts its own cluster)
	@start=$$SECONDS; mkdir -p .dev; \
	if [ -n "$${CI:-}" ]; then echo "make test: CI is set: a test whose tool is missing fails instead of skipping"; \
	else echo "make test: CI is not set: a test whose tool is missing (Tilt, root, the real node) is skipped, and listed"; fi; \
	echo "make test: [$$((SECONDS - start)) s] lint: ruff, mypy, generated files"; $(MAKE) --no-print-directory lint; \
	echo "make test: [$$((SECONDS - start)) s] images: building in the background beside the tools (log .dev/images.log)"; \
	$(MAKE) --no-print-directory images >.dev/images.log 2>&1 & images=$$!; \
	echo "make test: [$$((SECONDS - start)) s] tools: the control-plane binaries"; $(MAKE) --no-print-directory tools; \
	echo "make test: [$$((SECONDS - start)) s] jaeger: building in the background (log .dev/jaeger-build.log)"; \
	hack/tools.sh jaeger >.dev/jaeger-build.log 2>&1 & \
	echo "make test: [$$((SECONDS - start)) s] charts: the library chart"; $(MAKE) --no-print-directory charts; \
	echo "make test: [$$((SECONDS - start)) s] images: waiting for the background build"; \
	if ! wait $$images; then tail -n 60 .dev/images.log; echo "make test: make images failed (.dev/images.log)"; exit 2; fi; \
	tail -n 12 .dev/images.log; \
	echo "make test: [$$((SECONDS - start)) s] pytest over $(TEST_SUITES), in that order" \
	  "(tests marked e2e start the embedded cluster; a file's name is printed as its tests run)"; \
	$(RUN) pytest; \
	echo "make test: [$$((SECONDS - start)) s] passed"

.PHONY: cluster
cluster: sync tools images ## the embedded cluster with its real node (kubeconfig at .dev/kubeconfig)
	$(RUN) python -m tollgate.testing.cluster up --real-node

.PHONY: cluster-down
cluster-down: sync ## stop the embedded cluster
	$(RUN) python -m tollgate.testing.cluster down

.PHONY: install
install: ## install the CRDs into the current cluster
	kubectl apply --server-side -f crds/

.PHONY: uninstall
uninstall: ## remove the CRDs (and every object of their kinds) from the current cluster
	kubectl delete --ignore-not-found -f crds/

.PHONY: run
run: sync ## run every service against the current kubeconfig (Ctrl-C stops them)
	@trap 'kill 0' INT TERM; for service in $(SERVICES); do \
	  TOLLGATE_$$(echo $$service | tr a-z A-Z)_HEALTH_PORT=0 $(RUN) python -m tollgate.$$service & \
	done; wait

.PHONY: dev
dev: sync tools jaeger images ## the whole system on the embedded cluster and its real node, in the foreground (Ctrl-C stops everything)
	$(RUN) python -m tollgate.testing.dev run

.PHONY: dev-up
dev-up: sync tools jaeger images ## make dev, detached
	$(RUN) python -m tollgate.testing.dev up

.PHONY: dev-down
dev-down: sync ## stop what make dev-up started
	$(RUN) python -m tollgate.testing.dev down

.PHONY: bench
bench: sync tools ## every benchmark under bench/, one combined table (also .dev/bench/bench.md, .json); BENCH_ARGS=--quick
	$(RUN) python -m bench $(BENCH_ARGS)

.PHONY: soak
soak: sync tools images ## the chaos suite's system under churn and faults, then one table (.dev/soak/soak.md); SOAK_ARGS="--minutes 3"
	$(RUN) python -m bench.soak $(SOAK_ARGS)


.PHONY: docker-build
docker-build: images ## one image per service, $(IMG_PREFIX)<service>:$(IMAGE_TAG), and Envoy's (make images)

.PHONY: docker-push
docker-push: ## push the images docker-build made (IMG_PREFIX=registry.example.com/tollgate/ IMAGE_TAG=v1)
	@command -v docker >/dev/null || { echo "make docker-push: no docker client on PATH" >&2; exit 2; }
	@for service in $(SERVICES); do docker push $(IMG_PREFIX)$$service:$(IMAGE_TAG) || exit $$?; done

.PHONY: kind-load
kind-load: ## load the images docker-build made into a kind cluster (KIND_CLUSTER, default tollgate)
	@command -v kind >/dev/null || { echo "make kind-load: no kind on PATH" >&2; exit 2; }
	@for service in $(SERVICES); do \
	  kind load docker-image $(IMG_PREFIX)$$service:$(IMAGE_TAG) --name $(KIND_CLUSTER) || exit $$?; \
	done

NAMESPACE_OF = $$(sed -n "s/^tollgate-$(1): //p" deploy/charts/namespaces.yaml)

.PHONY: deploy
deploy: charts ## Helm charts into the current cluster (IMG_PREFIX and IMAGE_TAG pick the images)
	@if owner=$$(kubectl get mutatingwebhookconfiguration tollgate-webhook \
	    -o 'jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}' 2>/dev/null) && [ "$$owner" != Helm ]; then \
	  echo "make deploy: this cluster has the webhook registration of make dev or tilt up (local mode), not the" \
	    "chart's; the chart cannot take it over. Remove it (kubectl delete" \
	    "mutatingwebhookconfiguration,validatingwebhookconfiguration tollgate-webhook) or use a fresh cluster" \
	    "(make cluster-down cluster)" >&2; \
	  exit 2; \
	fi
	helm upgrade --install tollgate-crds deploy/charts/tollgate-crds -n $(call NAMESPACE_OF,crds) --create-namespace \
	  --take-ownership
	@for service in $(SERVICES); do \
	  helm upgrade --install tollgate-$$service deploy/charts/tollgate-$$service -n $(call NAMESPACE_OF,$$service) \
	    --create-namespace --set image.repository=$(IMG_PREFIX)$$service --set image.tag=$(IMAGE_TAG) || exit $$?; \
	done

.PHONY: undeploy
undeploy: ## remove the Helm releases (the CRDs stay: their chart keeps them)
	@for service in $(SERVICES); do \
	  helm uninstall tollgate-$$service -n $(call NAMESPACE_OF,$$service) --ignore-not-found --wait; \
	done
	helm uninstall tollgate-crds -n $(call NAMESPACE_OF,crds) --ignore-not-found
