# Test control plane targets; included from the main Makefile. See docs/development/testing.md.
.PHONY: e2e-build e2e-up e2e-down

e2e-build:  ## build missing control-plane binaries into $(DAY0_CACHE)/k8s (cold: see docs/development/testing.md)
	k8s/build.sh

e2e-up: e2e-build  ## start (or reuse) the kwok cluster + KubeRay operator; prints the KUBECONFIG
	k8s/e2e-up.sh

e2e-down:  ## stop the operator and delete the kwok cluster
	k8s/e2e-down.sh

# The day0 image (k8s/image/Dockerfile) with podman, no Docker engine; not part of `make test` (GBs,
# see docs/operations/image.md). BASE empty: a debootstrap base cached in $(DAY0_CACHE)/image.
# `make image BASE=python:3.11-slim-bookworm IMAGE=<registry>/<project>/day0:0.1.0`.
.PHONY: image image-test
IMAGE ?=
BASE ?=

image:  ## build the day0 image IMAGE (default day0:<version>) from BASE (default: a debootstrap base)
	IMAGE='$(IMAGE)' BASE='$(BASE)' scripts/image.sh build

image-test:  ## run IMAGE's checks as uid 10001 on a read-only root filesystem (build it first: make image)
	IMAGE='$(IMAGE)' scripts/image.sh test
