#!/usr/bin/env bash
# Regenerates dev/go/kube-apiserver/go.mod for a Kubernetes release: kube-apiserver and the
# node's kubelet, kube-controller-manager, kube-scheduler and kube-proxy, from one k8s.io/kubernetes.
# k8s.io/kubernetes requires its staging modules at v0.0.0 with local replaces, which Go
# ignores in a dependency; so this module replaces each one with its published v0.X.Y tag.
# Usage: dev/go/update-kube-apiserver.sh 1.35.4
set -euo pipefail
version=${1:?usage: $0 KUBERNETES_VERSION (e.g. 1.35.4)}
staging_version="v0.${version#1.}"
here=$(cd "$(dirname "$0")/kube-apiserver" && pwd)
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
kk_mod=$(go mod download -json "k8s.io/kubernetes@v${version}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
go_line=$(grep -m1 '^go ' "$kk_mod")
cd "$here"
rm -f go.mod go.sum
printf 'module kafkamirror.dev/build/kube-apiserver\n\n%s\n' "$go_line" > go.mod
grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$kk_mod" | awk '{print $1}' | while read -r mod; do
  go mod edit -replace "${mod}=${mod}@${staging_version}"
done
for command in kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy; do
  go get -tool "k8s.io/kubernetes/cmd/${command}@v${version}"
done
go mod tidy
echo "updated $here/go.mod for Kubernetes ${version}"
