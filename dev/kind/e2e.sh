#!/usr/bin/env bash
# The end-to-end test on a real Kubernetes: a kind cluster (kind-config.yaml), the operator's
# image built from this checkout, Kafka A and B (dev/kind/kafka.yaml), the Helm chart, the two
# examples, and then `kafka-mirror smoke` as a Job inside the cluster (dev/kind/smoke-job.yaml):
# the same check as the docker-free e2e test (kafka_mirror.smoke).
#
#   bash dev/kind/e2e.sh                  # or: make kind-e2e
#   KEEP_CLUSTER=1 bash dev/kind/e2e.sh   # keep the cluster afterwards, to look around
#   KIND_NODE_IMAGE=IMAGE                  # a node image of your own instead of kind-config.yaml's
#   SKIP_IMAGE_BUILD=1                     # the two images are in Docker already (built elsewhere)
#
# Needs docker, kind, kubectl and helm. An existing cluster of the same name is reused.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

CLUSTER=kafka-mirror # kind-config.yaml's name
CONTEXT="kind-${CLUSTER}"
NAMESPACE=kafka-mirror
RELEASE=kafka-mirror-operator # as in docs/install.md
IMAGE_REPOSITORY=kafka-mirror-operator
IMAGE_TAG=e2e
IMAGE="${IMAGE_REPOSITORY}:${IMAGE_TAG}"
# The audit's image, where the chart looks for it: the repository with -audit, the same tag.
AUDIT_IMAGE="${IMAGE_REPOSITORY}-audit:${IMAGE_TAG}"
MIRROR=a-to-b
SMOKE_JOB=kafka-mirror-smoke
SMOKE_WAIT_SECONDS=900 # the Job's activeDeadlineSeconds

step() {
  printf '==> %s\n' "$*"
}

# Every kubectl and helm call names the kind cluster's context: never whatever is current.
kube() {
  kubectl --context "${CONTEXT}" "$@"
}

step "checking the tools"
missing=0
need() { # command, how to get it
  if ! command -v "$1" >/dev/null 2>&1; then
    printf 'missing: %s: %s\n' "$1" "$2" >&2
    missing=1
  fi
}
need docker "install Docker Engine (https://docs.docker.com/engine/install/) or Docker Desktop"
need kind "go install sigs.k8s.io/kind@v0.31.0 (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
need kubectl "https://kubernetes.io/docs/tasks/tools/#kubectl"
need helm "https://helm.sh/docs/intro/install/"
if ((missing)); then
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  echo "docker is installed but its daemon does not answer: start Docker (or check DOCKER_HOST)" >&2
  exit 1
fi

cleanup() {
  local status=$?
  if [[ "${KEEP_CLUSTER:-0}" == 1 ]]; then
    step "keeping kind cluster ${CLUSTER} (KEEP_CLUSTER=1); delete it with: kind delete cluster --name ${CLUSTER}"
  else
    step "deleting kind cluster ${CLUSTER} (KEEP_CLUSTER=1 keeps it)"
    kind delete cluster --name "${CLUSTER}" || true
  fi
  exit "${status}"
}
trap cleanup EXIT

# Captured first: `grep -q` stops reading early, and under pipefail kind's SIGPIPE would count.
clusters=$(kind get clusters 2>/dev/null || true)
if grep -qx "${CLUSTER}" <<<"${clusters}"; then
  step "reusing kind cluster ${CLUSTER}"
else
  step "creating kind cluster ${CLUSTER} from kind-config.yaml"
  kind create cluster --config kind-config.yaml --wait 180s ${KIND_NODE_IMAGE:+--image "${KIND_NODE_IMAGE}"}
fi

if [[ "${SKIP_IMAGE_BUILD:-0}" == 1 ]]; then
  step "using ${IMAGE} and ${AUDIT_IMAGE} as Docker has them (SKIP_IMAGE_BUILD=1)"
else
  step "building ${IMAGE} and ${AUDIT_IMAGE}"
  docker build -t "${IMAGE}" .
  docker build --target audit -t "${AUDIT_IMAGE}" .
fi

step "loading them into the kind nodes"
kind load docker-image "${IMAGE}" "${AUDIT_IMAGE}" --name "${CLUSTER}"

# Kafka's image, when Docker has it (made where no registry answers): the nodes pull it otherwise.
KAFKA_IMAGE=$(awk '/^ *image:/ { print $2; exit }' dev/kind/kafka.yaml)
if docker image inspect "${KAFKA_IMAGE}" >/dev/null 2>&1; then
  step "loading ${KAFKA_IMAGE} into the kind nodes"
  kind load docker-image "${KAFKA_IMAGE}" --name "${CLUSTER}"
fi

step "starting Kafka A and B (dev/kind/kafka.yaml)"
kube apply -f dev/kind/kafka.yaml
kube -n kafka rollout status deployment/kafka-a --timeout=300s
kube -n kafka rollout status deployment/kafka-b --timeout=300s

# A reused cluster still runs pods of the previous image under the same tag: restart them.
reinstall=0
if helm --kube-context "${CONTEXT}" -n "${NAMESPACE}" status "${RELEASE}" >/dev/null 2>&1; then
  reinstall=1
fi

# As deploy/base/install.yaml makes it: every pod of the operator, its workers, audits and the
# smoke Job must pass the restricted Pod Security level.
step "namespace ${NAMESPACE} at the restricted Pod Security level"
kube create namespace "${NAMESPACE}" --dry-run=client -o yaml | kube apply -f -
kube label namespace "${NAMESPACE}" --overwrite \
  pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest

step "installing the chart as ${RELEASE} in ${NAMESPACE}"
helm --kube-context "${CONTEXT}" upgrade --install "${RELEASE}" charts/kafka-mirror-operator \
  -n "${NAMESPACE}" --create-namespace \
  --set "image.repository=${IMAGE_REPOSITORY},image.tag=${IMAGE_TAG},image.pullPolicy=Never" \
  --wait --timeout 5m
if ((reinstall)); then
  step "restarting the Deployments in ${NAMESPACE} onto the new image"
  kube -n "${NAMESPACE}" rollout restart deployment
  deployments=$(kube -n "${NAMESPACE}" get deployments -o name)
  while read -r deployment; do
    kube -n "${NAMESPACE}" rollout status "${deployment}" --timeout=300s
  done <<<"${deployments}"
fi

step "applying the examples in ${NAMESPACE}"
kube -n "${NAMESPACE}" apply -f examples/kafkamirror-a-to-b.yaml -f examples/selection-accounting.yaml

step "running the smoke check as Job ${SMOKE_JOB}"
kube -n "${NAMESPACE}" delete job "${SMOKE_JOB}" --ignore-not-found --wait
sed "s|KAFKA_MIRROR_IMAGE|${IMAGE}|" dev/kind/smoke-job.yaml | kube -n "${NAMESPACE}" apply -f -

# `kubectl wait` takes one condition, and the Job either completes or fails: poll both.
result=""
deadline=$((SECONDS + SMOKE_WAIT_SECONDS))
while [[ -z "${result}" ]]; do
  # "/" keeps the fields apart when the first is empty; a failed call is retried.
  counts=$(kube -n "${NAMESPACE}" get job "${SMOKE_JOB}" \
    -o jsonpath='{.status.succeeded}/{.status.failed}' || true)
  IFS=/ read -r succeeded failed <<<"${counts}"
  if ((${succeeded:-0} > 0)); then
    result=passed
  elif ((${failed:-0} > 0)); then
    result=failed
  elif ((SECONDS > deadline)); then
    result="timed out after ${SMOKE_WAIT_SECONDS}s"
  else
    sleep 5
  fi
done

step "smoke Job logs"
kube -n "${NAMESPACE}" logs "job/${SMOKE_JOB}" --all-containers || true

if [[ "${result}" != passed ]]; then
  step "the smoke check ${result}; what the cluster shows:"
  kube -n "${NAMESPACE}" describe job "${SMOKE_JOB}" || true
  step "operator logs"
  kube -n "${NAMESPACE}" logs -l "app.kubernetes.io/name=kafka-mirror-operator,app.kubernetes.io/instance=${RELEASE}" \
    --all-containers --tail=-1 || true
  step "worker logs"
  kube -n "${NAMESPACE}" logs -l "app.kubernetes.io/name=kafka-mirror,app.kubernetes.io/component=worker" \
    --all-containers --tail=200 || true
  step "KafkaMirrors"
  kube -n "${NAMESPACE}" get kafkamirrors -o wide || true
  kube -n "${NAMESPACE}" get pods -o wide || true
  exit 1
fi

step "checking that ${MIRROR} is Ready"
kube -n "${NAMESPACE}" wait --for=condition=Ready "kafkamirror/${MIRROR}" --timeout=120s
kube -n "${NAMESPACE}" get kafkamirrors -o wide

step "kind e2e passed"
