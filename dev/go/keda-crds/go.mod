// Pins KEDA's release whose CRDs (ScaledObject) check examples/keda-scaledobject.yaml; only
// downloaded from the Go module proxy, never built.
module kafkamirror.dev/build/keda-crds

go 1.26.0

require github.com/kedacore/keda/v2 v2.16.1
