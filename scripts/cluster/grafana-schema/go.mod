// Builds grafana-schema (main.go), which checks the chart's dashboard against Grafana's
// published dashboard schema, for e2e/chart_test.sh.
module gprobe.dev/cluster/grafana-schema

go 1.21

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
