package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kilnsh/kiln/sandbox"
)

// preloadGroups are the pre-import groups the sandbox image's REPL knows, named after
// their distributions (docs/protocol.md lists the names each binds).
var preloadGroups = []string{"numpy", "pandas", "scipy", "sklearn", "statsmodels", "matplotlib", "seaborn"}

// parsePreload checks PRELOAD_MODULES and returns it in the REPL's form: "" for the
// image's default (every group), "none", or a comma-separated list of known groups.
// "all" is the same as unset.
func parsePreload(v string) (string, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	switch v {
	case "", "all":
		return "", nil
	case "none":
		return "none", nil
	}
	var names []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "all" || name == "none":
			return "", fmt.Errorf("PRELOAD_MODULES: %q must be the only value, got %q", name, v)
		case !slices.Contains(preloadGroups, name):
			return "", fmt.Errorf("PRELOAD_MODULES: unknown module %q; choose among %s, or all or none",
				name, strings.Join(preloadGroups, ", "))
		case !slices.Contains(names, name):
			names = append(names, name)
		}
	}
	return strings.Join(names, ","), nil
}

// sandboxEnv is the sandbox environment for a PRELOAD_MODULES value already checked and
// the warm heap's size: nil (the default environment) when every group is pre-imported
// and no heap is warmed.
func sandboxEnv(preload string, warmHeapMB int64, extra ...string) []string {
	var env []string
	if p, err := parsePreload(preload); err == nil && p != "" {
		env = append(env, sandbox.PreloadVar+"="+p)
	}
	if warmHeapMB > 0 {
		env = append(env, sandbox.WarmHeapVar+"="+strconv.FormatInt(warmHeapMB, 10))
	}
	return sandbox.WithEnv(append(env, extra...)...)
}
