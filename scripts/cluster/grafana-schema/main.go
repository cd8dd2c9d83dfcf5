// Checks Grafana dashboard JSON files against the dashboard schema Grafana publishes, as
// generated into its foundation SDK (github.com/grafana/grafana-foundation-sdk): each file
// is decoded strictly (a missing required field, a field of the wrong type or one the
// schema does not know is an error), every panel's options and field config by its panel
// plugin's schema and every query by the Prometheus data source's (the chart's dashboards
// query only Prometheus: another query is an error), then validated.
// Grafana itself is AGPL and not run; this is the closest check of "it loads in Grafana".
//
//	grafana-schema FILE.json...
//
// Prints one line per file ("ok: FILE: N panels, M queries" or the errors) and exits 1 if
// any file fails.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// failed is err unless it is an empty list of errors: the SDK's decoders and validators
// return their cog.BuildErrors as an error even when it holds none.
func failed(err error) error {
	var list cog.BuildErrors
	if errors.As(err, &list) && len(list) == 0 {
		return nil
	}
	return err
}

func check(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var d dashboard.Dashboard
	if err := failed(d.UnmarshalJSONStrict(raw)); err != nil {
		return fmt.Errorf("not a dashboard of Grafana's schema: %w", err)
	}
	if err := failed(d.Validate()); err != nil {
		return fmt.Errorf("invalid: %w", err)
	}
	// The panels and their queries again, one by one: where a decoder of the SDK returns its
	// empty error list, its caller keeps nothing (PanelOrRowPanel no panel, Panel no query),
	// so neither d.Panels nor a panel's Targets can be counted on.
	var top struct{ Panels []json.RawMessage }
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	queries := 0
	for i, rawPanel := range top.Panels {
		var p dashboard.Panel
		if err := failed(p.UnmarshalJSONStrict(rawPanel)); err != nil {
			return fmt.Errorf("panel %d: %w", i, err)
		}
		var targets struct{ Targets []json.RawMessage }
		if err := json.Unmarshal(rawPanel, &targets); err != nil {
			return fmt.Errorf("panel %d: %w", i, err)
		}
		for j, t := range targets.Targets {
			var q prometheus.Dataquery
			if err := failed(q.UnmarshalJSONStrict(t)); err != nil {
				return fmt.Errorf("panel %d (%q): query %d is not a Prometheus query: %w", i, p.Type, j, err)
			}
			queries++
		}
	}
	if len(top.Panels) == 0 {
		return fmt.Errorf("no panel")
	}
	panels := len(top.Panels)
	fmt.Printf("ok: %s: schemaVersion %d, %d panels, %d queries\n", path, d.SchemaVersion, panels, queries)
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: grafana-schema FILE.json...")
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		if err := check(path); err != nil {
			fmt.Fprintf(os.Stderr, "grafana-schema: %s: %v\n", path, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
