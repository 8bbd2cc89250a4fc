# Test control plane targets; included from the main Makefile. See k8s/README.md.
.PHONY: e2e-build e2e-up e2e-down

e2e-build:  ## build missing control-plane binaries into $(DAY0_CACHE)/k8s (cold: see k8s/README.md)
	k8s/build.sh

e2e-up: e2e-build  ## start (or reuse) the kwok cluster + KubeRay operator; prints the KUBECONFIG
	k8s/e2e-up.sh

e2e-down:  ## stop the operator and delete the kwok cluster
	k8s/e2e-down.sh
