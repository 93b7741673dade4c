// Pins the Prometheus Operator release whose CRDs (ServiceMonitor, PrometheusRule) the chart's
// monitoring objects are checked against: only downloaded (its example/ CRD files), not built.
module kafkamirror.dev/build/prometheus-operator-crds

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
